"""A rendered cluster on six hosts: ``python -m tidelog.chaos.multihost`` (``make deploy-demo``).

What a person does with a real deployment, on one machine: an inventory of 3 controllers and
3 brokers on six hosts goes through ``tidelog deploy render``; each host is a Linux network
namespace with its own address on a bridge the run creates (chaos/netns: no route out, removed
at the end, nothing listening outside it); every node starts from its rendered config. From a
seventh namespace (the client's) the run creates a topic (RF 3, min.insync.replicas 2),
produces with acks=all, takes a broker's host link down (``ip link set eth0 down``), keeps
producing, brings the link back and reads everything back: every acknowledged record must be
there. A real Prometheus (Debian's package) scrapes every node from the rendered scrape config
and loads the rendered rules; the run requires every target up, TidelogBrokerDown firing for
the downed host, every rule evaluating without error and every expression of every Grafana
dashboard running against it.

* ``hosts.py``: the inventory for a namespace plan, installing the rendered files, the nodes'
  processes (started and stopped by pid), the link fault;
* ``prometheus.py``: the Prometheus server and its HTTP API, the dashboards' expressions;
* ``run.py``: the steps, the workload, the report (one JSON line at the end);
* ``__main__.py``: outside (make the namespaces, re-run inside the client's) and inside.
"""
