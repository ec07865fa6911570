"""Network faults in the netns mode: partitions cut with tc filters, slow and lossy links with
netem; the same Fault protocol (chaos/nemesis/fault.py) and shapes as the proxy mode.

:class:`NetnsNetwork` places each node of a :class:`~tidelog.local_cluster.LocalCluster` in its
namespace of a :class:`~chaos.netns.plan.NetnsPlan` (nothing of the cluster may run yet): the
node listens on its namespace's address (every listener: client, inter-broker, controller,
Raft, metrics; the cluster secret and TLS on the peer listeners are what let them leave
loopback) and starts with ``ip netns
exec <namespace>`` in front of its command (``NodeSpec.host``/``netns``). Its links are the
proxy mode's, so the planner (chaos/nemesis/plan.py) plans the same partitions and the faults
name the same ``source>target`` targets.

* :class:`NetnsPartition`: the shape is planned when the fault starts; each planned link's two
  nodes get filters dropping every packet to each other (plan.py's :func:`cut_commands`):
  silent, so connects time out and open connections stall, as across a real partition;
* :class:`NetnsNetem`: netem on every link of one node (latency with jitter, loss).

Each active fault holds a slot of its own (its filter priority, its netem class), so two
faults on one node never undo each other's filters. A start that fails half way is undone by
heal (FaultBase heals after a failed start): heal deletes whatever of the slot exists.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tidelog.chaos.nemesis import topology
from tidelog.chaos.nemesis.fault import FaultBase
from tidelog.chaos.nemesis.network import _describe, _shape_name, link_name
from tidelog.chaos.nemesis.plan import IsolateActiveController, Link, Node, Shape, plan_partition
from tidelog.chaos.netns import shell
from tidelog.chaos.netns.plan import (
    SLOTS_MAX,
    NetnsPlan,
    cut_commands,
    heal_commands,
    netem_commands,
)
from tidelog.local_cluster import LocalCluster

__all__ = ["NetnsNetem", "NetnsNetwork", "NetnsPartition"]

DEFAULT_DURATION_S = 10.0


class NetnsNetwork:
    """A cluster whose nodes each live in a namespace of ``plan`` (see the module docstring)."""

    def __init__(self, cluster: LocalCluster, plan: NetnsPlan) -> None:
        if sorted(cluster.nodes) != sorted(plan.nodes):
            raise ValueError(f"the plan's nodes {sorted(plan.nodes)} are not the cluster's "
                             f"{sorted(cluster.nodes)}")
        if any(spec.is_controller and spec.is_broker for spec in cluster.nodes.values()):
            raise ValueError("combined nodes cannot be placed: use separate controllers and "
                             "brokers")
        self.cluster = cluster
        self.plan = plan
        self.links: frozenset[Link] = _links(cluster)
        self._slots: set[int] = set()

    @classmethod
    @contextlib.contextmanager
    def placed(cls, cluster: LocalCluster, plan: NetnsPlan) -> Iterator[NetnsNetwork]:
        """Place every node of ``cluster`` in its namespace (before any runs)."""
        net = cls(cluster, plan)
        net.place()
        yield net

    def place(self) -> None:
        for name, spec in self.cluster.nodes.items():
            spec.host = self.plan.address(name)
            spec.netns = self.plan.namespace(name)
        # Off loopback, the controller and inter-broker listeners need TLS (brokers' credentials
        # must not travel in clear: tidelog.config); the certificates name the namespaces'
        # addresses. The client listener stays plaintext: the workloads' clients speak it.
        self.cluster.make_tls(client_tls=False)
        # Only now: each config names every controller's address (the voters).
        for name, spec in self.cluster.nodes.items():
            self.cluster.config_path(name).write_text(self.cluster.render_config(spec))
        self.cluster.save()

    def nodes(self) -> list[Node]:
        return topology.nodes_of(self.cluster)

    def links_of(self, node: str | None) -> list[Link]:
        """Every link from or to ``node`` (every link when None)."""
        return sorted(link for link in self.links if node is None or node in link)

    def take_slot(self) -> int:
        free = sorted(set(range(1, SLOTS_MAX + 1)) - self._slots)
        if not free:
            raise RuntimeError(f"more than {SLOTS_MAX} network faults at once")
        self._slots.add(free[0])
        return free[0]

    def free_slot(self, slot: int) -> None:
        self._slots.discard(slot)

    def heal_slot(self, nodes: set[str], slot: int, *, netem: bool) -> None:
        """Delete the slot's filters (and netem classes) in each node's namespace; what a
        half-done start never added is not an error; the first other failure is raised."""
        errors = []
        for argv in heal_commands(self.plan, nodes, slot, netem=netem):
            try:
                shell.run(argv)
            except shell.NetnsError as e:
                if "No such file" not in str(e) and "Cannot find" not in str(e):
                    errors.append(e)
        self.free_slot(slot)
        if errors:
            raise errors[0]


def _links(cluster: LocalCluster) -> frozenset[Link]:
    """The proxy mode's links: each broker to every other node, each controller to the other
    controllers (Raft)."""
    links = set()
    for source in cluster.nodes.values():
        for target in cluster.nodes.values():
            if source is not target and (source.is_broker or target.is_controller):
                links.add((source.name, target.name))
    return frozenset(links)


class NetnsPartition(FaultBase):
    """Drop every packet between the nodes a partition shape keeps apart; heal removes the
    filters."""

    def __init__(self, net: NetnsNetwork, shape: Shape, *, name: str | None = None,
                 duration_s: float = DEFAULT_DURATION_S) -> None:
        super().__init__(name or f"partition-{_shape_name(shape)}",
                         f"{_describe(shape)}; packets dropped (tc filters)",
                         duration_s=duration_s)
        self.net, self.shape = net, shape
        self.cut: frozenset[Link] = frozenset()
        self._slot = 0
        self._nodes: set[str] = set()

    def _start(self) -> tuple[str, ...]:
        active = None
        if isinstance(self.shape, IsolateActiveController):
            active = topology.active_controller(self.net.cluster)
        self.cut = plan_partition(self.shape, self.net.nodes(), self.net.links,
                                  active_controller=active)
        self._slot = self.net.take_slot()
        self._nodes = {node for link in self.cut for node in link}
        shell.run_all(cut_commands(self.net.plan, self.cut, self._slot))
        return tuple(link_name(link) for link in sorted(self.cut))

    def _heal(self) -> None:
        if self._slot:
            self.net.heal_slot(self._nodes, self._slot, netem=False)
            self._slot = 0


class NetnsNetem(FaultBase):
    """netem (latency with jitter, loss) on every link of one node, both directions; heal
    removes it."""

    def __init__(self, net: NetnsNetwork, node: str, name: str, *, delay_ms: int = 0,
                 jitter_ms: int = 0, loss_percent: float = 0.0,
                 duration_s: float = DEFAULT_DURATION_S) -> None:
        if node not in net.cluster.nodes:
            raise ValueError(f"{name}: no node {node!r} (nodes: {sorted(net.cluster.nodes)})")
        what = [f"{delay_ms} ms ± {jitter_ms} ms latency each way"] if delay_ms else []
        what += [f"{loss_percent:g}% loss each way"] if loss_percent else []
        super().__init__(name, f"{', '.join(what)} on every link of {node} (netem)",
                         duration_s=duration_s)
        self.net, self.node = net, node
        self.delay_ms, self.jitter_ms, self.loss_percent = delay_ms, jitter_ms, loss_percent
        self._slot = 0
        self._nodes: set[str] = set()

    def _start(self) -> tuple[str, ...]:
        links = self.net.links_of(self.node)
        peers = sorted({n for link in links for n in link} - {self.node})
        self._slot = self.net.take_slot()
        self._nodes = {self.node, *peers}
        shell.run_all(netem_commands(self.net.plan, self.node, peers, self._slot,
                                     delay_ms=self.delay_ms, jitter_ms=self.jitter_ms,
                                     loss_percent=self.loss_percent))
        return tuple(link_name(link) for link in links)

    def _heal(self) -> None:
        if self._slot:
            self.net.heal_slot(self._nodes, self._slot, netem=True)
            self._slot = 0
