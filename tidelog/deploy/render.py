"""From a checked inventory to the files of every host (pure: returns files, writes nothing).

The output is laid out as each host's file system, so ``rsync -a OUT/hosts/<host>/ <host>:/``
installs a host::

    OUT/README.md                                   what to run on which host, in order
    OUT/prometheus/prometheus.yml                   scrape config for every node of the inventory
    OUT/prometheus/rules/*.yml                      the alert and recording rules (deploy/)
    OUT/hosts/<host>/README.md                      that host's lines of the above
    OUT/hosts/<host>/etc/tidelog/<node>.toml        each node's config (tidelog.config)
    OUT/hosts/<host>/etc/tidelog/cluster.secret     the cluster secret, mode 0600: hosts of
                                                    controllers only
    OUT/hosts/<host>/etc/tidelog/<node>.credential  a broker-only node's own credential, 0600
    OUT/hosts/<host>/etc/systemd/system/tidelog-<node>.service

The cluster secret is the root of every broker's credential and of the Raft key, so it goes to
the controllers' hosts only; a broker-only node gets its own credential, derived from it, from
which no other can be made (tidelog/cluster_secret.py). Where each listener binds (DESIGN §11,
"every listener binds only what the config says"): the client listener on the host's
``address``; the controller's gRPC port, its Raft port and the inter-broker listener on
``private_address`` (the network peers share: TLS there, since brokers present their
credentials on it; the Raft transport is authenticated with a key derived from the cluster
secret); /metrics on ``metrics_address``. Nothing binds a wildcard.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from tidelog.cluster_secret import broker_credential, broker_credential_text
from tidelog.deploy.inventory import Host, Inventory, Node
from tidelog.deploy.systemd import unit_text

__all__ = ["NodeCertificates", "RenderedFile", "node_hosts", "render"]

SECRET_NAME = "cluster.secret"
#: A broker-only node's credential file: ``<node name>`` + this, beside its config.
CREDENTIAL_SUFFIX = ".credential"
#: Scrape jobs, as the alert rules and dashboards name them.
JOBS = {"controller": "tidelog-controller", "broker": "tidelog-broker"}
SCRAPE_INTERVAL = "15s"


@dataclass(frozen=True)
class NodeCertificates:
    """The cluster's CA certificate and each node's certificate and key (PEM text), made by
    the writer (tidelog.certs) when the inventory says ``tls = true``."""

    ca_pem: str
    nodes: Mapping[int, tuple[str, str]]   # node id -> (certificate, key)


@dataclass(frozen=True)
class RenderedFile:
    path: str       # relative to OUT
    content: str
    mode: int = 0o644


def render(inv: Inventory, *, cluster_id: str, secret: str,
           rules: Mapping[str, str] | None = None,
           scrape_interval: str = SCRAPE_INTERVAL,
           certs: NodeCertificates | None = None) -> list[RenderedFile]:
    """Every file of the deployment; ``rules`` maps rule-file names to their text; ``certs``
    (required when the inventory says ``tls = true``) go to each host's ``tls/`` directory."""
    if inv.tls and certs is None:
        raise ValueError("the inventory asks for TLS: give the node certificates")
    files: list[RenderedFile] = []
    for host in inv.hosts:
        root = f"hosts/{host.name}"
        if any(n.is_controller for n in host.nodes):
            files.append(RenderedFile(f"{root}{inv.config_dir}/{SECRET_NAME}", secret + "\n",
                                      0o600))
        for node in host.nodes:
            if not node.is_controller:
                files.append(RenderedFile(
                    f"{root}{credential_path(inv, node)}",
                    broker_credential_text(broker_credential(secret, node.id)), 0o600))
        if inv.tls and certs is not None:
            files.append(RenderedFile(f"{root}{inv.config_dir}/tls/ca.crt", certs.ca_pem))
            for node in host.nodes:
                cert, key = certs.nodes[node.id]
                files.append(RenderedFile(f"{root}{inv.config_dir}/tls/{node.name}.crt", cert))
                files.append(RenderedFile(f"{root}{inv.config_dir}/tls/{node.name}.key", key,
                                          0o600))
        for node in host.nodes:
            files.append(RenderedFile(f"{root}{config_path(inv, node)}",
                                      node_config(inv, host, node, cluster_id)))
            files.append(RenderedFile(f"{root}/etc/systemd/system/{unit_name(node)}",
                                      unit_text(inv, node, config_path(inv, node))))
        files.append(RenderedFile(f"{root}/README.md",
                                  "\n".join(host_lines(inv, host, cluster_id)) + "\n"))
    files.append(RenderedFile("prometheus/prometheus.yml",
                              prometheus_config(inv, rules is not None, scrape_interval)))
    for name, text in sorted((rules or {}).items()):
        files.append(RenderedFile(f"prometheus/rules/{name}", text))
    files.append(RenderedFile("README.md", readme(inv, cluster_id)))
    return files


def config_path(inv: Inventory, node: Node) -> str:
    return f"{inv.config_dir}/{node.name}.toml"


def credential_path(inv: Inventory, node: Node) -> str:
    return f"{inv.config_dir}/{node.name}{CREDENTIAL_SUFFIX}"


def unit_name(node: Node) -> str:
    return f"tidelog-{node.name}.service"


def node_config(inv: Inventory, host: Host, node: Node, cluster_id: str) -> str:
    """The node's ``node.toml`` (tidelog.config's format)."""
    q = json.dumps  # a TOML basic string is a JSON string for the characters used here
    lines = [f"# {node.name} on host {host.name}; rendered by `tidelog deploy render`.",
             f"node_id = {node.id}",
             f"roles = [{', '.join(q(r) for r in node.roles)}]",
             f"data_dir = {q(node.data_dir)}",
             f"cluster_id = {q(cluster_id)}",
             # The root secret on controllers only; a broker its own credential (module doc).
             f"cluster_secret_file = {q(inv.config_dir + '/' + SECRET_NAME)}"
             if node.is_controller else
             f"broker_credential_file = {q(credential_path(inv, node))}", "",
             "[controller]"]
    if node.is_controller:
        lines += [f"listen_host = {q(host.private_address)}",
                  f"raft_listen_host = {q(host.private_address)}"]
    for c in inv.controllers:
        lines += ["", "[[controller.voters]]", f"id = {c.id}",
                  f"host = {q(inv.host(c.host).private_address)}",
                  f"port = {c.ports.controller}", f"raft_port = {c.ports.raft}"]
    if node.is_broker:
        lines += ["", "[broker]",
                  f"host = {q(host.address)}", f"listen_host = {q(host.address)}",
                  f"port = {node.ports.client}",
                  f"inter_broker_host = {q(host.private_address)}",
                  f"inter_broker_listen_host = {q(host.private_address)}",
                  f"inter_broker_port = {node.ports.inter_broker}",
                  f"rack = {q(host.rack)}"]
    lines += ["", "[metrics]", f"host = {q(host.metrics_address)}",
              f"port = {node.ports.metrics}", ""]
    if inv.tls:
        tls = f"{inv.config_dir}/tls"
        lines += ["[tls]", f"ca_file = {q(tls + '/ca.crt')}",
                  f"cert_file = {q(f'{tls}/{node.name}.crt')}",
                  f"key_file = {q(f'{tls}/{node.name}.key')}",
                  f"client_auth = {q(inv.tls_client_auth)}", ""]
        if "broker" in node.roles:  # SCRAM users as well as certificates (tidelog user create)
            lines += ["[sasl]", 'enabled_mechanisms = ["SCRAM-SHA-256", "SCRAM-SHA-512"]', ""]
    return "\n".join(lines)


def node_hosts(inv: Inventory, node: Node) -> tuple[str, ...]:
    """What a node's certificate must name: every address of its host that anything dials."""
    host = inv.host(node.host)
    return tuple(dict.fromkeys((host.address, host.private_address, host.metrics_address)))


def host_lines(inv: Inventory, host: Host, cluster_id: str) -> list[str]:
    """How to install, format and start the nodes of one host (one line per step)."""
    tidelog = f"{inv.install_prefix}/bin/tidelog"
    lines = [f"# host {host.name} ({host.address})", "",
             f"- install: `python3 -m venv {inv.install_prefix} && {inv.install_prefix}/bin/pip "
             f"install <a tidelog wheel or checkout>`; "
             f"`useradd --system --home-dir /var/lib/tidelog {inv.user}`; copy this "
             f"directory to / (`rsync -a hosts/{host.name}/ root@{host.address}:/`); "
             f"`chown -R {inv.user}: {inv.config_dir}` (the cluster secret, a broker's "
             f"credential and any TLS keys: 0600, the node's user's)"]
    for node in host.nodes:
        lines.append(
            f"- {node.name}: `install -d -o {inv.user} -m 0700 {node.data_dir} && "
            f"runuser -u {inv.user} -- {tidelog} storage format --config "
            f"{config_path(inv, node)} --cluster-id {cluster_id} --ignore-formatted && "
            f"systemctl enable --now {unit_name(node)}`")
    return lines


def readme(inv: Inventory, cluster_id: str) -> str:
    lines = [f"# Tidelog cluster {cluster_id}", "",
             "Rendered by `tidelog deploy render`. Start the controllers first (a quorum needs "
             "a majority of them), then the brokers; docs/operations.md explains each step.", ""]
    ordered = sorted(inv.hosts, key=lambda h: not any(n.is_controller for n in h.nodes))
    for host in ordered:
        lines += [*host_lines(inv, host, cluster_id), ""]
    lines += ["# monitoring", "",
              "- `prometheus --config.file=prometheus/prometheus.yml` scrapes every node; "
              "deploy/grafana/ has the dashboards.", ""]
    return "\n".join(lines)


def prometheus_config(inv: Inventory, with_rules: bool, scrape_interval: str) -> str:
    """A scrape config with a job per role (combined nodes are scraped once, as brokers),
    each target labelled with its node id and host."""
    lines = ["# Rendered by `tidelog deploy render`: one target per node.",
             "global:", f"  scrape_interval: {scrape_interval}",
             f"  evaluation_interval: {scrape_interval}"]
    if with_rules:
        lines += ["rule_files:", "  - rules/*.yml"]
    lines.append("scrape_configs:")
    for role, job in JOBS.items():
        nodes = [n for n in inv.nodes if role == ("broker" if n.is_broker else "controller")]
        if not nodes:
            continue
        lines += [f"  - job_name: {job}", "    static_configs:"]
        for n in nodes:
            host = inv.host(n.host)
            lines += [f"      - targets: [\"{_hostport(host.metrics_address, n.ports.metrics)}\"]",
                      "        labels:", f"          node_id: \"{n.id}\"",
                      f"          host: \"{host.name}\"",
                      f"          roles: \"{','.join(n.roles)}\""]
    return "\n".join(lines) + "\n"


def _hostport(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
