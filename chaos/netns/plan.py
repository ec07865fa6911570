"""The network-namespace mode, planned: names, addresses and the ``ip``/``tc`` commands (pure).

Nothing here runs a command or reads the machine: every function takes what it needs and
returns names, addresses or argv lists, so the whole layout is unit-tested without root
(tests/unit/test_chaos_netns_plan.py). chaos/netns/shell.py runs the commands.

The layout of one run (``run_id``: 8 hex digits, unique per run)::

    tidelog-<run_id>-switch     the bridge br0, no address; one veth end per namespace below
    tidelog-<run_id>-client     eth0 = <subnet>.10: the runner, its workload and checkers
    tidelog-<run_id>-<node>     eth0 = <subnet>.11, .12, ...: one node (controller-1, ...)

Every namespace name starts with :data:`PREFIX` and the run id, so :func:`leftovers` finds
what a run left behind (a run killed with -9) and nothing else. The subnet is a private /24 no
route or address of the root namespace overlaps (:func:`pick_subnet`); no namespace has a
default route, the bridge lives in the switch namespace, so nothing leaves the run's own
namespaces and the root namespace's routing is never touched.

Traffic control. Each node's eth0 gets, at set-up, an HTB root qdisc whose default class 1:1
passes everything (rate :data:`RATE`, far above what veths carry here) and a *drop* class 1:2
whose leaf is a ``pfifo`` of limit 0, which drops every packet queued to it. A fault adds u32
filters at a priority of its own (its *slot*), matching ``ip dst`` of a peer:

* cut (a partition's pair ``a``/``b``): in ``a``'s namespace packets to ``b`` go to 1:2, and in
  ``b``'s packets to ``a``: no packet crosses either way (a SYN is dropped: a connect times
  out, as across a real partition). Per-destination filters rather than netem ``loss 100%``
  because they need only HTB, u32 and pfifo, which kernels without sch_netem or the tc action
  modules (this project's CI machine) still have, and because one filter cuts one peer without
  touching the node's other links;
* netem (latency with jitter, loss): a class 1:<0x100 + slot> whose leaf is ``netem``, and
  filters to it for packets to each peer, in the node's namespace and in each peer's (so both
  directions are delayed, as the proxy mode's "each way"). Needs sch_netem.

Heal deletes the slot's filters (``tc filter del ... prio <slot priority>``), then its class.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "CANDIDATE_SUBNETS",
    "PREFIX",
    "NetnsPlan",
    "cut_commands",
    "heal_commands",
    "leftovers",
    "netem_commands",
    "pick_subnet",
    "run_of",
]

#: Every namespace the mode creates is named ``PREFIX + run_id + "-" + role``.
PREFIX = "tidelog-"
DEVICE = "eth0"
BRIDGE = "br0"
#: The default class's rate: a ceiling no veth on a test machine reaches, so it never shapes.
RATE = "10gbit"
CLIENT_HOST = 10
FIRST_NODE_HOST = 11
#: Private /24s the mode may use, in order; the first none of the host's networks overlaps wins.
CANDIDATE_SUBNETS = tuple(f"10.213.{i}.0/24" for i in range(0, 250, 7)) + \
    tuple(f"192.168.{i}.0/24" for i in range(213, 250, 3))
#: A fault's filters have priority SLOT_PRIORITY_BASE + slot; slots 1..SLOTS_MAX.
SLOT_PRIORITY_BASE = 100
SLOTS_MAX = 200
_RUN_ID = re.compile(r"[0-9a-f]{8}")
_NODE = re.compile(r"[a-z][a-z0-9-]{0,30}")

Argv = list[str]


@dataclass(frozen=True, slots=True)
class NetnsPlan:
    """One run's namespaces, addresses and devices (see the module docstring)."""

    run_id: str
    subnet: str
    nodes: tuple[str, ...]

    def __post_init__(self) -> None:
        if not _RUN_ID.fullmatch(self.run_id):
            raise ValueError(f"a run id is 8 lowercase hex digits, not {self.run_id!r}")
        try:
            network = ipaddress.IPv4Network(self.subnet)
        except ValueError as e:
            raise ValueError(f"the subnet must be a private /24: {e}") from None
        if network.prefixlen != 24 or not network.is_private:
            raise ValueError(f"the subnet must be a private /24, not {self.subnet}")
        if not self.nodes or len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"nodes must be distinct and at least one: {self.nodes}")
        bad = [n for n in self.nodes if not _NODE.fullmatch(n) or n in ("switch", "client")]
        if bad:
            raise ValueError(f"node names must be lowercase letters, digits and '-' (and not "
                             f"switch or client): {bad}")
        if FIRST_NODE_HOST + len(self.nodes) > 254:
            raise ValueError(f"at most {254 - FIRST_NODE_HOST} nodes, not {len(self.nodes)}")

    # ------------------------------------------------------------------ names
    @property
    def prefix(self) -> str:
        return f"{PREFIX}{self.run_id}-"

    @property
    def switch(self) -> str:
        return self.prefix + "switch"

    @property
    def client(self) -> str:
        return self.prefix + "client"

    def namespace(self, node: str) -> str:
        self._check_node(node)
        return self.prefix + node

    def namespaces(self) -> list[str]:
        """Every namespace of the run, the switch first."""
        return [self.switch, self.client, *(self.prefix + n for n in self.nodes)]

    def address(self, node: str) -> str:
        """The node's address (``client`` for the client namespace's)."""
        host = CLIENT_HOST if node == "client" else \
            FIRST_NODE_HOST + self.nodes.index(self._check_node(node))
        return str(ipaddress.IPv4Network(self.subnet)[host])

    def switch_port(self, node: str) -> str:
        """The veth end in the switch namespace (``v0`` the client's, ``v<i>`` node i's)."""
        return "v0" if node == "client" else f"v{self.nodes.index(self._check_node(node)) + 1}"

    def _check_node(self, node: str) -> str:
        if node not in self.nodes:
            raise ValueError(f"no node {node!r} in this run (nodes: {list(self.nodes)})")
        return node

    # ------------------------------------------------------------------ commands
    def setup_commands(self) -> list[Argv]:
        """Create the switch, then the client and each node attached to it, in order."""
        commands: list[Argv] = [["ip", "netns", "add", self.switch],
                                ["ip", "-n", self.switch, "link", "add", BRIDGE, "type",
                                 "bridge"],
                                ["ip", "-n", self.switch, "link", "set", BRIDGE, "up"]]
        for member in ("client", *self.nodes):
            commands += self._attach_commands(member)
        for node in self.nodes:
            commands += self._tc_setup_commands(self.namespace(node))
        return commands

    def _attach_commands(self, member: str) -> list[Argv]:
        ns = self.client if member == "client" else self.namespace(member)
        port = self.switch_port(member)
        prefixlen = ipaddress.IPv4Network(self.subnet).prefixlen
        return [["ip", "netns", "add", ns],
                ["ip", "-n", ns, "link", "set", "lo", "up"],
                ["ip", "-n", self.switch, "link", "add", port, "type", "veth", "peer", "name",
                 DEVICE, "netns", ns],
                ["ip", "-n", self.switch, "link", "set", port, "master", BRIDGE],
                ["ip", "-n", self.switch, "link", "set", port, "up"],
                ["ip", "-n", ns, "addr", "add", f"{self.address(member)}/{prefixlen}", "dev",
                 DEVICE],
                ["ip", "-n", ns, "link", "set", DEVICE, "up"]]

    @staticmethod
    def _tc_setup_commands(ns: str) -> list[Argv]:
        tc = ["tc", "-n", ns]
        return [[*tc, "qdisc", "add", "dev", DEVICE, "root", "handle", "1:", "htb", "default",
                 "1"],
                [*tc, "class", "add", "dev", DEVICE, "parent", "1:", "classid", "1:1", "htb",
                 "rate", RATE],
                [*tc, "class", "add", "dev", DEVICE, "parent", "1:", "classid", "1:2", "htb",
                 "rate", RATE],
                [*tc, "qdisc", "add", "dev", DEVICE, "parent", "1:2", "handle", "2:", "pfifo",
                 "limit", "0"]]

    def teardown_commands(self) -> list[Argv]:
        """Delete every namespace of the run, nodes first (their veths go with them)."""
        return [["ip", "netns", "delete", ns] for ns in reversed(self.namespaces())]

    def exec_prefix(self, node: str) -> list[str]:
        """What goes in front of a command to run it in ``node``'s namespace."""
        return ["ip", "netns", "exec", self.client if node == "client" else self.namespace(node)]


def _filter(plan: NetnsPlan, node: str, peer: str, priority: int, flowid: str) -> Argv:
    return ["tc", "-n", plan.namespace(node), "filter", "add", "dev", DEVICE, "parent", "1:",
            "protocol", "ip", "prio", str(priority), "u32", "match", "ip", "dst",
            f"{plan.address(peer)}/32", "flowid", flowid]


def _check_slot(slot: int) -> int:
    if not 1 <= slot <= SLOTS_MAX:
        raise ValueError(f"a fault's slot is 1..{SLOTS_MAX}, not {slot}")
    return SLOT_PRIORITY_BASE + slot


def cut_commands(plan: NetnsPlan, pairs: Iterable[tuple[str, str]], slot: int) -> list[Argv]:
    """Filters that drop every packet between the two nodes of each pair, both ways."""
    priority = _check_slot(slot)
    commands: list[Argv] = []
    for a, b in sorted({tuple(sorted(p)) for p in pairs}):
        if a == b:
            raise ValueError(f"a node cannot be cut from itself: {a}")
        commands += [_filter(plan, a, b, priority, "1:2"), _filter(plan, b, a, priority, "1:2")]
    return commands


def netem_commands(plan: NetnsPlan, node: str, peers: Sequence[str], slot: int, *,
                   delay_ms: int = 0, jitter_ms: int = 0, loss_percent: float = 0.0
                   ) -> list[Argv]:
    """A netem class in ``node``'s and each peer's namespace, and filters sending the packets
    between ``node`` and each peer through it (both directions)."""
    priority = _check_slot(slot)
    if delay_ms < 0 or jitter_ms < 0 or (jitter_ms and not delay_ms):
        raise ValueError(f"delay and jitter must be >= 0, and jitter needs a delay: "
                         f"{delay_ms} ms, {jitter_ms} ms")
    if not delay_ms and not loss_percent:
        raise ValueError("netem needs a delay or a loss")
    if not 0 <= loss_percent <= 100:
        raise ValueError(f"loss must be within 0..100 %, not {loss_percent}")
    if node in peers or not peers:
        raise ValueError(f"netem needs peers other than {node}: {list(peers)}")
    minor = f"{0x100 + slot:x}"
    netem = ["netem", "delay", f"{delay_ms}ms"] + ([f"{jitter_ms}ms"] if jitter_ms else []) + \
        (["loss", f"{loss_percent:g}%"] if loss_percent else [])
    commands: list[Argv] = []
    for ns_node in (node, *peers):
        ns = plan.namespace(ns_node)
        commands += [["tc", "-n", ns, "class", "add", "dev", DEVICE, "parent", "1:", "classid",
                      f"1:{minor}", "htb", "rate", RATE],
                     ["tc", "-n", ns, "qdisc", "add", "dev", DEVICE, "parent", f"1:{minor}",
                      "handle", f"{minor}:", *netem]]
    for peer in peers:
        commands += [_filter(plan, node, peer, priority, f"1:{minor}"),
                     _filter(plan, peer, node, priority, f"1:{minor}")]
    return commands


def heal_commands(plan: NetnsPlan, nodes: Iterable[str], slot: int, *,
                  netem: bool = False) -> list[Argv]:
    """Undo a slot in each of ``nodes``' namespaces: its filters, then (netem) its class."""
    priority = _check_slot(slot)
    commands: list[Argv] = []
    for node in sorted(set(nodes)):
        tc = ["tc", "-n", plan.namespace(node)]
        commands.append([*tc, "filter", "del", "dev", DEVICE, "parent", "1:", "prio",
                         str(priority)])
        if netem:
            commands.append([*tc, "class", "del", "dev", DEVICE, "classid",
                             f"1:{0x100 + slot:x}"])
    return commands


def pick_subnet(in_use: Iterable[str], candidates: Sequence[str] = CANDIDATE_SUBNETS) -> str:
    """The first candidate /24 that overlaps none of ``in_use`` (the root namespace's
    addresses and routes, as networks); ValueError when every candidate does."""
    used = [ipaddress.ip_network(n, strict=False) for n in in_use]
    for candidate in candidates:
        network = ipaddress.IPv4Network(candidate)
        if not any(network.overlaps(u) for u in used if u.version == 4 and u.prefixlen > 0):
            return candidate
    raise ValueError(f"every candidate subnet overlaps a network of this host: {list(used)}")


def run_of(namespace: str) -> str | None:
    """The run id of a namespace this mode created, else None."""
    if not namespace.startswith(PREFIX):
        return None
    run_id = namespace[len(PREFIX):len(PREFIX) + 8]
    rest = namespace[len(PREFIX) + 8:]
    return run_id if _RUN_ID.fullmatch(run_id) and rest.startswith("-") and len(rest) > 1 \
        else None


def leftovers(namespaces: Iterable[str], run_id: str | None = None) -> list[str]:
    """The namespaces of ``namespaces`` (``ip netns list``'s names) this mode created: of run
    ``run_id``, or of any run when None; the switches last (deleted after what plugs in)."""
    ours = [ns for ns in namespaces
            if run_of(ns) is not None and (run_id is None or run_of(ns) == run_id)]
    return sorted(ours, key=lambda ns: (ns.endswith("-switch"), ns))
