"""Deploying a Tidelog cluster: inventories, rendered node configs, container configs.

* ``inventory.py`` (pure): the TOML inventory, parsed and checked, every mistake one line;
* ``render.py`` (pure): an inventory to each host's files (node.toml, systemd unit, README
  lines) and a Prometheus scrape config;
* ``systemd.py`` (pure): the units, rendered and the templates in deploy/systemd/;
* ``writer.py``: the I/O of ``tidelog deploy render`` (cluster id and secret, the files);
* ``container.py`` (pure): a container's node.toml from its environment (the image's entrypoint,
  docker compose and the Kubernetes StatefulSets).

docs/operations.md is the guide; chaos/multihost runs a rendered cluster on six network
namespaces (``make deploy-demo``).
"""
