"""From a scenario's :class:`~chaos.scenarios.FaultSpec` to a chaos/nemesis Fault on the live
cluster, built when the fault starts, so its target is the node that holds the role *then*.

:class:`Targets` resolves a scenario's symbolic targets (chaos/scenarios.py's docstring lists
them) on the running cluster: ``leader`` and ``follower-<i>`` from Admin's describe of the
run's topic (partition 0), ``coordinator`` from ListGroups, ``active-controller`` from
DescribeQuorum (chaos/nemesis/topology.py), ``broker-<i>`` / ``controller-<i>`` by position.
Each lookup retries until ``timeout_s`` (a leader being elected) and then raises LookupError
naming what it was looking for.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from toxiproxy import Proxy

from tidelog.chaos import proxies
from tidelog.chaos.nemesis import (
    Bridge,
    BrokerFromControllers,
    Fault,
    Isolate,
    IsolateActiveController,
    Kill,
    KillCluster,
    LinkToxic,
    MajorityMinority,
    Partition,
    Pause,
    ProxiedNetwork,
    bridge,
    majority_minority,
)
from tidelog.chaos.nemesis.process import GracefulRestart
from tidelog.chaos.nemesis.topology import active_controller, nodes_of
from tidelog.chaos.netns import NetnsNetem, NetnsNetwork, NetnsPartition
from tidelog.chaos.runner_member import KillMember, MemberProcess
from tidelog.chaos.scenarios import FaultSpec
from tidelog.client import Admin
from tidelog.local_cluster import LocalCluster

__all__ = ["SLOW_LATENCY_MS", "Targets", "build_fault"]

SLOW_LATENCY_MS, SLOW_JITTER_MS = 200, 100
#: flaky-link: the share of connections reset on data, and the slicer's pieces.
FLAKY_TOXICITY, FLAKY_SLICE_BYTES = 0.33, 64
#: flaky-link in the netns mode, where netem has no resets or slicing: packets lost and
#: delayed unevenly (TCP retransmits, stalls, reorders), each way.
NETEM_FLAKY_LOSS_PERCENT, NETEM_FLAKY_DELAY_MS, NETEM_FLAKY_JITTER_MS = 10.0, 20, 20
LOOKUP_TIMEOUT_S = 15.0
_POLL_S = 0.2


class Targets:
    """Resolves symbolic targets to node names (see the module docstring)."""

    def __init__(self, cluster: LocalCluster, bootstrap: str, topic: str, group: str, *,
                 timeout_s: float = LOOKUP_TIMEOUT_S) -> None:
        self.cluster = cluster
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.timeout_s = timeout_s
        #: Nodes the active faults hit (set by the runner before each start). Lookups go
        #: through the other brokers: a paused broker accepts connections but never answers,
        #: so a lookup bootstrapped through it waits out request timeouts (seconds each).
        self.avoid: frozenset[str] = frozenset()

    def _bootstrap(self) -> str:
        live = [f"{b.host}:{b.broker_port}" for b in self.cluster.brokers()
                if b.name not in self.avoid]
        return ",".join(live) if live else self.bootstrap

    def broker_name(self, broker_id: int) -> str:
        for spec in self.cluster.brokers():
            if spec.node_id == broker_id:
                return spec.name
        raise LookupError(f"no broker with id {broker_id}")

    def resolve(self, target: str) -> str:
        if target == "active-controller":
            return self._retry("the active controller", lambda: active_controller(self.cluster))
        if target == "coordinator":
            return self._retry(f"the coordinator of group {self.group}", self._coordinator)
        if target == "leader" or target.startswith("follower-"):
            return self._retry(f"{target} of {self.topic}-0", lambda: self._replica(target))
        for prefix, specs in (("broker-", self.cluster.brokers()),
                              ("controller-", self.cluster.controllers())):
            if target.startswith(prefix) and target[len(prefix):].isdigit():
                index = int(target[len(prefix):])
                if 1 <= index <= len(specs):
                    return specs[index - 1].name
        raise LookupError(f"unknown target {target!r}")

    def _retry(self, what: str, lookup: Callable[[], str]) -> str:
        deadline = time.monotonic() + self.timeout_s
        error: Exception | None = None
        # Bounded: one lookup per pass, until the deadline.
        while time.monotonic() < deadline:
            try:
                return lookup()
            except Exception as e:  # not elected yet, a broker coming back: look again
                error = e
                time.sleep(_POLL_S)
        raise LookupError(f"cannot find {what} within {self.timeout_s:g} s: {error}")

    def _replica(self, target: str) -> str:
        with Admin(self._bootstrap(), request_timeout_ms=2_000) as admin:
            topic = admin.describe_topics([self.topic], include_offsets=False,
                                          timeout_ms=3_000).all()[self.topic]
        p0 = next(p for p in topic.partitions if p.partition == 0)
        if p0.leader < 0:
            raise LookupError("no leader")
        if target == "leader":
            return self.broker_name(p0.leader)
        followers = sorted(r for r in p0.replicas if r != p0.leader)
        index = int(target.removeprefix("follower-"))
        if not 1 <= index <= len(followers):
            raise LookupError(f"partition 0 has {len(followers)} followers")
        return self.broker_name(followers[index - 1])

    def _coordinator(self) -> str:
        with Admin(self._bootstrap(), request_timeout_ms=2_000) as admin:
            groups = admin.list_groups(timeout_ms=3_000)
        if self.group not in groups:
            raise LookupError(f"group {self.group} is not listed yet")
        return self.broker_name(groups[self.group].coordinator)


def build_fault(spec: FaultSpec, *, cluster: LocalCluster,
                net: ProxiedNetwork | NetnsNetwork | None,
                targets: Targets, member: MemberProcess | None,
                rng: random.Random) -> Fault:
    """The Fault for ``spec``, its target resolved now. ValueError for a link fault without a
    routed network or a member fault without a member (a bug of the runner's set-up)."""
    hold = spec.hold_s
    if spec.kind == "kill-cluster":
        return KillCluster(cluster, duration_s=hold)
    if spec.kind == "kill-member":
        if member is None:
            raise ValueError("kill-member needs the run's member process")
        return KillMember(member, duration_s=hold)
    if spec.kind in ("kill", "pause", "restart"):
        node = targets.resolve(spec.target)
        make = {"kill": Kill, "pause": Pause, "restart": GracefulRestart}[spec.kind]
        return make(cluster, node, label=spec.target, duration_s=hold)
    if net is None:
        raise ValueError(f"{spec.kind} needs the cluster's links routed through proxies")
    if isinstance(net, NetnsNetwork):
        return _netns_fault(spec, net, cluster, targets, rng)
    if spec.kind == "partition":
        return Partition(net, _shape(spec, cluster, targets, rng),
                         name=f"partition-{spec.shape}", duration_s=hold)
    node = targets.resolve(spec.target)
    if spec.kind == "slow":
        return LinkToxic.latency(net, node, SLOW_LATENCY_MS, SLOW_JITTER_MS, duration_s=hold)
    return LinkToxic(net, node, f"flaky-{node}",
                     f"TCP resets on {FLAKY_TOXICITY:.0%} of connections, data sliced into "
                     f"{FLAKY_SLICE_BYTES}-byte pieces", _flaky, duration_s=hold)


def _netns_fault(spec: FaultSpec, net: NetnsNetwork, cluster: LocalCluster, targets: Targets,
                 rng: random.Random) -> Fault:
    """The netns mode's fault for a link kind (chaos/netns/faults.py)."""
    hold = spec.hold_s
    if spec.kind == "partition":
        return NetnsPartition(net, _shape(spec, cluster, targets, rng),
                              name=f"partition-{spec.shape}", duration_s=hold)
    node = targets.resolve(spec.target)
    if spec.kind == "slow":
        return NetnsNetem(net, node, f"slow-{node}", delay_ms=SLOW_LATENCY_MS,
                          jitter_ms=SLOW_JITTER_MS, duration_s=hold)
    return NetnsNetem(net, node, f"flaky-{node}", delay_ms=NETEM_FLAKY_DELAY_MS,
                      jitter_ms=NETEM_FLAKY_JITTER_MS,
                      loss_percent=NETEM_FLAKY_LOSS_PERCENT, duration_s=hold)


def _flaky(proxy: Proxy) -> list[str]:
    return [*proxies.reset_peer(proxy, 0, stream="both", toxicity=FLAKY_TOXICITY),
            *proxies.slicer(proxy, FLAKY_SLICE_BYTES, FLAKY_SLICE_BYTES // 2, 500,
                            stream="both")]


def _shape(spec: FaultSpec, cluster: LocalCluster, targets: Targets, rng: random.Random
           ) -> Isolate | IsolateActiveController | BrokerFromControllers | MajorityMinority | \
        Bridge:
    if spec.shape == "isolate":
        return Isolate(targets.resolve(spec.target))
    if spec.shape == "isolate-active-controller":
        return IsolateActiveController()
    if spec.shape == "broker-from-controllers":
        return BrokerFromControllers(targets.resolve(spec.target))
    if spec.shape == "majority-minority":
        return majority_minority(nodes_of(cluster), rng)
    return bridge(nodes_of(cluster), rng)
