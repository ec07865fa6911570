"""A cluster's inventory: which hosts run which nodes, parsed and checked (pure: no I/O).

``tidelog deploy render --inventory FILE`` reads a small TOML file (deploy/inventory.example.toml
is a commented one)::

    cluster_id = "generate"            # or a fixed id (tidelog storage random-uuid)
    cluster_secret_file = "generate"   # or the path of an existing secret file to copy

    [[hosts]]
    name = "ctl-1"
    address = "10.0.0.11"              # what clients and peers reach the host at
    private_address = "10.1.0.11"      # optional: Raft, controller and replication traffic
    rack = "r1"

    [[hosts.nodes]]
    id = 1
    roles = ["controller"]

Every mistake is a line of its own in one :class:`InventoryError`, all of them at once, so a
person fixes the file in one pass instead of one error per run. What is checked, and why:

* node ids unique (the quorum and the metadata key everything by them), host names and
  addresses unique;
* a controller quorum of odd size, 1 or more: an even quorum tolerates no more failures than
  the odd one below it, and an empty one leaves brokers nothing to register with;
* every broker can reach every controller: a controller advertising a loopback address is
  unreachable from any other host;
* no port or data dir used twice on one host (several nodes may share a host, each with its own
  ports and data dir);
* no node advertises a loopback address in a multi-host inventory (clients would connect to
  themselves).
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidelog.cluster_secret import is_loopback
from tidelog.errors import InvalidConfigError

__all__ = [
    "GENERATE",
    "Host",
    "Inventory",
    "InventoryError",
    "Node",
    "Ports",
    "parse_inventory",
]

#: ``cluster_id`` / ``cluster_secret_file`` value asking the renderer to make one.
GENERATE = "generate"
ROLES = ("controller", "broker")
_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{0,62}")
_CLUSTER_ID = re.compile(r"[0-9a-f]{32}")


class InventoryError(InvalidConfigError):
    """Every problem of an inventory, one line each (``problems``)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class Ports:
    """A node's ports; each defaults to the inventory's ``[ports]``, then to Kafka-like ones."""

    client: int = 9092
    inter_broker: int = 9095
    controller: int = 9093
    raft: int = 9094
    metrics: int = 9644


@dataclass(frozen=True)
class Node:
    id: int
    roles: tuple[str, ...]
    host: str
    ports: Ports
    data_dir: str

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def name(self) -> str:
        """``controller-1``, ``broker-101`` or ``combined-1``: unit and file names."""
        kind = "combined" if len(self.roles) == 2 else self.roles[0]
        return f"{kind}-{self.id}"

    def used_ports(self) -> list[tuple[int, str]]:
        """(port, what uses it) for each listener this node's roles open."""
        used = []
        if self.is_controller:
            used += [(self.ports.controller, "controller port"), (self.ports.raft, "raft port")]
        if self.is_broker:
            used += [(self.ports.client, "client port"),
                     (self.ports.inter_broker, "inter-broker port")]
        return [*used, (self.ports.metrics, "metrics port")]


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    private_address: str
    metrics_address: str
    rack: str
    nodes: tuple[Node, ...] = field(default=())


@dataclass(frozen=True)
class Inventory:
    cluster_id: str                 # GENERATE or a fixed id
    cluster_secret_file: str        # GENERATE or a path to copy
    user: str
    install_prefix: str             # tidelog is {install_prefix}/bin/tidelog
    config_dir: str
    hosts: tuple[Host, ...]
    #: [tls] on every node, certificates made by the renderer (docs/security.md). On by default:
    #: off, the peer listeners may bind loopback only (tidelog.config), so a multi-host cluster
    #: needs it.
    tls: bool = True
    tls_client_auth: str = "none"

    @property
    def nodes(self) -> list[Node]:
        return [n for h in self.hosts for n in h.nodes]

    @property
    def controllers(self) -> list[Node]:
        return [n for n in self.nodes if n.is_controller]

    @property
    def brokers(self) -> list[Node]:
        return [n for n in self.nodes if n.is_broker]

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)


_TOP_KEYS = {"cluster_id", "cluster_secret_file", "user", "install_prefix", "config_dir",
             "data_root", "ports", "hosts", "tls", "tls_client_auth"}
_HOST_KEYS = {"name", "address", "private_address", "metrics_address", "rack", "nodes"}
_NODE_KEYS = {"id", "roles", "ports", "data_dir"}


def parse_inventory(text: str, *, source: str = "<inventory>") -> Inventory:
    """Parse and check an inventory; :class:`InventoryError` lists every problem."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InventoryError([f"{source} is not valid TOML: {e}"]) from None
    problems: list[str] = []
    inventory = _build(table, problems)
    if not problems:
        problems += check(inventory)
    if problems:
        raise InventoryError(problems)
    return inventory


def _build(table: Mapping[str, Any], problems: list[str]) -> Inventory:
    _unknown(table, _TOP_KEYS, "", problems)
    defaults = _ports(table.get("ports", {}), Ports(), "ports", problems)
    data_root = _str(table, "data_root", "/var/lib/tidelog", "", problems)
    hosts_raw = table.get("hosts", [])
    if not isinstance(hosts_raw, list):
        problems.append("hosts must be an array of tables ([[hosts]])")
        hosts_raw = []
    hosts = tuple(_host(h, i, defaults, data_root, problems) for i, h in enumerate(hosts_raw)
                  if isinstance(h, dict))
    return Inventory(
        cluster_id=_str(table, "cluster_id", GENERATE, "", problems),
        cluster_secret_file=_str(table, "cluster_secret_file", GENERATE, "", problems),
        user=_str(table, "user", "tidelog", "", problems),
        install_prefix=_str(table, "install_prefix", "/opt/tidelog", "", problems),
        config_dir=_str(table, "config_dir", "/etc/tidelog", "", problems),
        hosts=hosts, tls=_bool(table, "tls", problems, default=True),
        tls_client_auth=_str(table, "tls_client_auth", "none", "", problems))


def _host(raw: Mapping[str, Any], index: int, defaults: Ports, data_root: str,
          problems: list[str]) -> Host:
    where = f"hosts[{index}]."
    _unknown(raw, _HOST_KEYS, where, problems)
    name = _str(raw, "name", "", where, problems)
    if not name:
        problems.append(f"{where}name is missing")
    elif not _NAME.fullmatch(name):
        problems.append(f"{where}name {name!r}: use lowercase letters, digits, '.' and '-'")
    address = _str(raw, "address", "", where, problems)
    if not address:
        problems.append(f"host {name or index}: address is missing (what clients reach it at)")
    private = _str(raw, "private_address", "", where, problems) or address
    metrics = _str(raw, "metrics_address", "", where, problems) or private
    for key, value in (("address", address), ("private_address", private),
                       ("metrics_address", metrics)):
        if value and not _is_ip(value):
            problems.append(f"host {name}: {key} {value!r} is not an IP address (names can "
                            f"resolve anywhere; listeners bind addresses)")
    nodes_raw = raw.get("nodes", [])
    if not isinstance(nodes_raw, list) or not nodes_raw:
        problems.append(f"host {name or index}: no [[hosts.nodes]]: a host runs one node or more")
        nodes_raw = []
    nodes = tuple(_node(n, name, defaults, data_root, problems) for n in nodes_raw
                  if isinstance(n, dict))
    return Host(name, address, private, metrics, _str(raw, "rack", "", where, problems), nodes)


def _node(raw: Mapping[str, Any], host: str, defaults: Ports, data_root: str,
          problems: list[str]) -> Node:
    where = f"host {host} node "
    _unknown(raw, _NODE_KEYS, where, problems)
    node_id = raw.get("id")
    if not isinstance(node_id, int) or isinstance(node_id, bool) or node_id < 0:
        problems.append(f"{where}id must be an integer >= 0, got {node_id!r}")
        node_id = -1
    roles = raw.get("roles")
    if not isinstance(roles, list) or not roles or not set(roles) <= set(ROLES) \
            or len(set(roles)) != len(roles):
        problems.append(f"node {node_id} on {host}: roles must be [\"controller\"], "
                        f"[\"broker\"] or both, got {roles!r}")
        roles = ["broker"]
    ports = _ports(raw.get("ports", {}), defaults, f"node {node_id} ports", problems)
    data_dir = _str(raw, "data_dir", f"{data_root}/node-{node_id}", where, problems)
    ordered = tuple(r for r in ROLES if r in roles)
    return Node(node_id, ordered, host, ports, data_dir)


def _ports(raw: Any, base: Ports, where: str, problems: list[str]) -> Ports:
    if not isinstance(raw, dict):
        problems.append(f"{where} must be a table")
        return base
    known = set(Ports.__dataclass_fields__)
    _unknown(raw, known, f"{where}.", problems)
    values = {}
    for key in known & set(raw):
        port = raw[key]
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            problems.append(f"{where}.{key} must be a port 1..65535, got {port!r}")
        else:
            values[key] = port
    return Ports(**{k: values.get(k, getattr(base, k)) for k in Ports.__dataclass_fields__})


def _str(raw: Mapping[str, Any], key: str, default: str, where: str,
         problems: list[str]) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str):
        problems.append(f"{where}{key} must be a string, got {value!r}")
        return default
    return value


def _bool(raw: Mapping[str, Any], key: str, problems: list[str], *, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        problems.append(f"{key} must be true or false, got {value!r}")
        return default
    return value


def _unknown(raw: Mapping[str, Any], known: set[str], where: str, problems: list[str]) -> None:
    problems += [f"unknown key '{where}{k}' (known: {', '.join(sorted(known))})"
                 for k in sorted(set(raw) - known)]


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return False


# ------------------------------------------------------------------------------------ checks
def check(inv: Inventory) -> list[str]:
    """The cluster-wide problems of a well-formed inventory, one line each."""
    problems: list[str] = []
    if inv.cluster_id != GENERATE and not _CLUSTER_ID.fullmatch(inv.cluster_id):
        problems.append(f"cluster_id {inv.cluster_id!r}: use \"generate\" or 32 hex digits "
                        f"(tidelog storage random-uuid)")
    if not inv.hosts:
        problems.append("no [[hosts]]: list the hosts and the nodes they run")
    if inv.tls_client_auth not in ("none", "required"):
        problems.append(f"tls_client_auth {inv.tls_client_auth!r}: none or required"
                        + (" (requested is not available with gRPC's Python server)"
                           if inv.tls_client_auth == "requested" else ""))
    problems += _duplicates("host name", [h.name for h in inv.hosts])
    problems += _duplicates("host address", [h.address for h in inv.hosts])
    problems += _duplicates("host private_address", [
        h.private_address for h in inv.hosts if h.private_address != h.address])
    problems += _duplicates("node id", [n.id for n in inv.nodes])
    problems += _quorum(inv)
    problems += _reachability(inv)
    problems += _plaintext_peers(inv)
    for host in inv.hosts:
        problems += _port_clashes(host)
    return problems


def _duplicates(what: str, values: list[Any]) -> list[str]:
    seen: set[Any] = set()
    dups = []
    for v in values:
        if v in seen and v not in dups:
            dups.append(v)
        seen.add(v)
    return [f"{what} {v} is used more than once" for v in dups]


def _quorum(inv: Inventory) -> list[str]:
    count = len(inv.controllers)
    if count == 0:
        return ["no controllers: brokers need a controller quorum to register with "
                "(give 1, 3 or 5 nodes the controller role)"]
    if count % 2 == 0:
        return [f"{count} controllers: an even quorum tolerates no more failures than "
                f"{count - 1} and can split its vote; use {count - 1} or {count + 1}"]
    return []


def _reachability(inv: Inventory) -> list[str]:
    problems = []
    multi_host = len(inv.hosts) > 1
    for host in inv.hosts:
        for key, address in (("address", host.address), ("private_address",
                                                         host.private_address)):
            if multi_host and address and is_loopback(address):
                problems.append(f"host {host.name}: {key} {address} is loopback, which no "
                                f"other host can reach; give its network address")
    return problems


def _plaintext_peers(inv: Inventory) -> list[str]:
    """Brokers present their credentials on the controller and inter-broker listeners, which
    bind ``private_address``: off loopback that needs TLS (tidelog.config refuses the node
    otherwise), so say it here, once, rather than on every node's first start."""
    if inv.tls:
        return []
    exposed = [h.name for h in inv.hosts if not is_loopback(h.private_address)]
    if not exposed:
        return []
    return [f"tls = false, but the controller and inter-broker listeners of {', '.join(exposed)} "
            f"bind a network address, where brokers' credentials would travel in clear and "
            f"could be replayed from a capture: set tls = true"]


def _port_clashes(host: Host) -> list[str]:
    owners: dict[int, str] = {}
    problems = _duplicates(f"host {host.name}: data_dir", [n.data_dir for n in host.nodes])
    for node in host.nodes:
        for port, what in node.used_ports():
            if port in owners:
                problems.append(f"host {host.name}: port {port} is used twice ({owners[port]} "
                                f"and node {node.id} {what})")
            else:
                owners[port] = f"node {node.id} {what}"
    return problems
