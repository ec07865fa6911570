"""Network faults through Toxiproxy-compatible proxies: every inter-node link its own proxy.

:class:`ProxiedNetwork` wires a :class:`~tidelog.local_cluster.LocalCluster` so that every
connection one node opens to another crosses exactly one proxy, the link ``source>target``:

* brokers to controllers (heartbeats, the metadata stream, forwarded admin writes) and brokers
  to brokers (replication fetches, on the inter-broker listener): each broker is started with
  ``grpc_proxy`` pointing at its own port of a :class:`~chaos.router.LinkRouter` (kept in
  ``LocalCluster.env``, so every restart of the node is routed too);
* controllers to controllers (Raft): the controllers' Raft listeners bind
  ``RAFT_BACKEND_HOST`` (the cluster must be created with :func:`routed_overrides`) and the
  router listens at their voter addresses.

Clients (the workload's producers and consumers) connect to brokers directly: a partition
separates nodes from each other, as Jepsen's does, not clients from nodes.

The faults set toxics with toxiproxy-python through chaos/proxies.py, exactly as a user drives a
real Toxiproxy (a real ``toxiproxy-server`` when on PATH):

* :class:`Partition`: a shape from chaos/nemesis/plan.py, planned when the fault starts; the
  planned links are cut (``mode="cut"``: connections dropped, new ones refused, so connects
  fail fast) or stalled (``"stall"``: a timeout toxic, connections open and silent, so only
  deadlines notice); heal enables them and removes their toxics;
* :class:`LinkToxic`: slow or flaky links (latency with jitter, bandwidth, reset_peer, slicer)
  on every link of one node, or every link; heal removes the toxics.

Usage::

    overrides = routed_overrides({"controller": {...}})
    cluster = LocalCluster.create(base, controllers=3, brokers=3, overrides=overrides)
    with proxies.toxiproxy(), ProxiedNetwork.wired(cluster) as net:
        cluster.start_all(); cluster.wait_ready()
        fault = Partition(net, IsolateActiveController())
        fault.start(); ...; fault.heal()
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Literal

from toxiproxy import Proxy

from tidelog.chaos import proxies
from tidelog.chaos.nemesis import topology
from tidelog.chaos.nemesis.fault import FaultBase
from tidelog.chaos.nemesis.plan import (
    Bridge,
    BrokerFromControllers,
    Isolate,
    IsolateActiveController,
    Link,
    MajorityMinority,
    Node,
    Shape,
    plan_partition,
)
from tidelog.chaos.router import HOST, RAFT_BACKEND_HOST, LinkRouter
from tidelog.local_cluster import LocalCluster

__all__ = ["LinkToxic", "Partition", "ProxiedNetwork", "link_name", "routed_overrides"]

PartitionMode = Literal["cut", "stall"]
DEFAULT_DURATION_S = 10.0


def routed_overrides(overrides: dict[str, dict[str, Any]] | None = None
                     ) -> dict[str, dict[str, Any]]:
    """``overrides`` plus what routing the controllers' Raft links needs (their Raft
    listeners on RAFT_BACKEND_HOST); pass the result to LocalCluster.create."""
    result = {table: dict(keys) for table, keys in (overrides or {}).items()}
    result.setdefault("controller", {})["raft_listen_host"] = RAFT_BACKEND_HOST
    return result


def link_name(link: Link) -> str:
    return f"{link[0]}>{link[1]}"


class ProxiedNetwork:
    """A cluster's links, one proxy each (see the module docstring)."""

    def __init__(self, cluster: LocalCluster, router: LinkRouter) -> None:
        if cluster.overrides.get("controller", {}).get("raft_listen_host") != RAFT_BACKEND_HOST:
            raise ValueError("create the cluster with routed_overrides(...): its controllers' "
                             "Raft listeners must bind " + RAFT_BACKEND_HOST)
        self.cluster = cluster
        self.router = router
        self.links: dict[Link, Proxy] = {}

    @classmethod
    @contextlib.contextmanager
    def wired(cls, cluster: LocalCluster) -> Iterator[ProxiedNetwork]:
        """Wire ``cluster`` (nothing of it may run yet) inside a running Toxiproxy server;
        the router stops and the brokers' routing env is dropped on exit."""
        with contextlib.closing(LinkRouter()) as router:
            net = cls(cluster, router)
            try:
                net.wire()
                yield net
            finally:
                for spec in cluster.brokers():
                    cluster.env.pop(spec.name, None)
                cluster.save()

    def nodes(self) -> list[Node]:
        return topology.nodes_of(self.cluster)

    def wire(self) -> None:
        """Create every link's proxy and route it; route the brokers' gRPC through the router."""
        controllers = self.cluster.controllers()
        brokers = [b for b in self.cluster.brokers() if not b.is_controller]
        if len(brokers) != len(self.cluster.brokers()):
            raise ValueError("combined nodes cannot be routed: use separate controllers and "
                             "brokers")
        # Where a connection to each node goes in the end: (port it is dialled at, upstream).
        grpc_targets = {c.name: (c.controller_port, (HOST, c.controller_port))
                        for c in controllers}
        grpc_targets |= {b.name: (b.inter_broker_port, (HOST, b.inter_broker_port))
                         for b in brokers}
        for source in brokers:
            port = self.router.listen(source.name)
            # no_grpc_proxy="" overrides a no_proxy that would exempt 127.0.0.1.
            self.cluster.env[source.name] = {"grpc_proxy": f"http://{HOST}:{port}",
                                             "no_grpc_proxy": ""}
            for target, (dialled, upstream) in grpc_targets.items():
                if target != source.name:
                    self._add_link((source.name, target), dialled, upstream)
        self.router.listen_raft({c.name: c.raft_port for c in controllers})
        for dialer in controllers:
            for listener in controllers:
                if listener is not dialer:
                    self._add_link((dialer.name, listener.name), listener.raft_port,
                                   (RAFT_BACKEND_HOST, listener.raft_port))
        self.cluster.save()

    def _add_link(self, link: Link, dialled_port: int, upstream: tuple[str, int]) -> None:
        proxy = proxies.create_link(link_name(link), upstream)
        self.router.route(link[0], dialled_port, proxies.address(proxy))
        self.links[link] = proxy

    def links_of(self, node: str | None) -> list[Link]:
        """Every link from or to ``node`` (every link when None)."""
        return sorted(link for link in self.links if node is None or node in link)


class Partition(FaultBase):
    """Cut or stall the links a partition shape plans; heal them."""

    def __init__(self, net: ProxiedNetwork, shape: Shape, *, mode: PartitionMode = "cut",
                 name: str | None = None, duration_s: float = DEFAULT_DURATION_S) -> None:
        if mode not in ("cut", "stall"):
            raise ValueError(f"partition mode must be cut or stall, not {mode!r}")
        super().__init__(name or f"partition-{_shape_name(shape)}-{mode}",
                         f"{_describe(shape)}; links {'cut' if mode == 'cut' else 'stalled'}",
                         duration_s=duration_s)
        self.net, self.shape, self.mode = net, shape, mode
        self.cut: frozenset[Link] = frozenset()

    def _start(self) -> tuple[str, ...]:
        active = None
        if isinstance(self.shape, IsolateActiveController):
            active = topology.active_controller(self.net.cluster)
        self.cut = plan_partition(self.shape, self.net.nodes(), self.net.links,
                                  active_controller=active)
        links = [self.net.links[link] for link in sorted(self.cut)]
        if self.mode == "cut":
            proxies.cut(*links)
        else:
            for link in links:
                proxies.timeout(link, stream="both")
        return tuple(link_name(link) for link in sorted(self.cut))

    def _heal(self) -> None:
        proxies.heal(*(self.net.links[link] for link in sorted(self.cut)))


class LinkToxic(FaultBase):
    """A toxic on every link of one node (or every link); heal removes it. Build one with
    :meth:`latency`, :meth:`bandwidth`, :meth:`reset_peer` or :meth:`slicer`."""

    def __init__(self, net: ProxiedNetwork, node: str | None, name: str, description: str,
                 toxic: Callable[[Proxy], list[str]], *,
                 duration_s: float = DEFAULT_DURATION_S) -> None:
        if node is not None and node not in net.cluster.nodes:
            raise ValueError(f"{name}: no node {node!r} (nodes: {sorted(net.cluster.nodes)})")
        where = f"every link of {node}" if node else "every link"
        super().__init__(name, f"{description} on {where}", duration_s=duration_s)
        self.net, self.node, self._toxic = net, node, toxic
        self._links: list[Link] = []

    def _start(self) -> tuple[str, ...]:
        self._links = self.net.links_of(self.node)
        for link in self._links:
            self._toxic(self.net.links[link])
        return tuple(link_name(link) for link in self._links)

    def _heal(self) -> None:
        proxies.heal(*(self.net.links[link] for link in self._links))

    @classmethod
    def latency(cls, net: ProxiedNetwork, node: str | None, latency_ms: int,
                jitter_ms: int = 0, **kwargs: Any) -> LinkToxic:
        return cls(net, node, f"slow-{node or 'all'}",
                   f"{latency_ms} ms ± {jitter_ms} ms latency each way",
                   lambda p: proxies.latency(p, latency_ms, jitter_ms, stream="both"), **kwargs)

    @classmethod
    def bandwidth(cls, net: ProxiedNetwork, node: str | None, kb_s: int,
                  **kwargs: Any) -> LinkToxic:
        return cls(net, node, f"bandwidth-{node or 'all'}", f"{kb_s} KB/s each way",
                   lambda p: proxies.bandwidth(p, kb_s, stream="both"), **kwargs)

    @classmethod
    def reset_peer(cls, net: ProxiedNetwork, node: str | None, timeout_ms: int = 0, *,
                   toxicity: float = 1.0, **kwargs: Any) -> LinkToxic:
        return cls(net, node, f"reset-{node or 'all'}",
                   f"TCP resets {timeout_ms} ms after data (toxicity {toxicity:g})",
                   lambda p: proxies.reset_peer(p, timeout_ms, stream="both",
                                                toxicity=toxicity), **kwargs)

    @classmethod
    def slicer(cls, net: ProxiedNetwork, node: str | None, average_size: int = 64,
               size_variation: int = 32, delay_us: int = 1000, **kwargs: Any) -> LinkToxic:
        return cls(net, node, f"slicer-{node or 'all'}",
                   f"data sliced into {average_size} ± {size_variation} byte pieces "
                   f"{delay_us} µs apart",
                   lambda p: proxies.slicer(p, average_size, size_variation, delay_us,
                                            stream="both"), **kwargs)


def _shape_name(shape: Shape) -> str:
    return {Isolate: "isolate", IsolateActiveController: "isolate-active-controller",
            BrokerFromControllers: "broker-from-controllers",
            MajorityMinority: "majority-minority", Bridge: "bridge"}[type(shape)]


def _describe(shape: Shape) -> str:
    if isinstance(shape, IsolateActiveController):
        return "the active controller cut from every other node"
    if isinstance(shape, Isolate):
        return f"{shape.node} cut from every other node"
    if isinstance(shape, BrokerFromControllers):
        return f"{shape.broker} cut from the controllers only"
    if isinstance(shape, MajorityMinority):
        return f"{sorted(shape.minority)} split from the rest"
    return (f"{sorted(shape.left)} and {sorted(shape.right)} split, {shape.bridge} reaching "
            f"both")
