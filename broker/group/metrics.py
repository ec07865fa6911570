"""Prometheus metrics of the consumer groups this broker coordinates (``tidelog_group_``).

Per group, on its coordinator only (a group's series move with its coordinator):

* ``tidelog_group_members{group}`` — members now;
* ``tidelog_group_epoch{group}`` — the group epoch;
* ``tidelog_group_state{group, state}`` — 1 for the group's state (Empty, Assigning,
  Reconciling, Stable), the one series of the group;
* ``tidelog_group_rebalances_total{group}`` — group epoch bumps written since the coordinator
  loaded the group (a counter: it restarts at 0 when the coordinator moves or reloads);
* ``tidelog_group_offset_commits_total{group}`` — offsets committed since then (one per
  partition per commit).

Per committed partition of those groups:

* ``tidelog_group_committed_offset{group, topic, partition}``;
* ``tidelog_group_lag{group, topic, partition}`` — high watermark - committed offset (floored at
  0), only where this broker hosts the partition (leader or follower), as OffsetFetch's lag: a
  Kafka user needs a separate exporter for this.

**Collected at scrape time**, by a custom collector, not updated on the request path: a scrape
(on the metrics HTTP thread) asks the broker's event loop for a snapshot of the loaded shards
(:func:`snapshot`, run on the loop so it never reads a shard while a handler changes it) and
waits at most :data:`SNAPSHOT_TIMEOUT_S`; if the loop does not answer by then, the scrape has no
group series (and ``tidelog_group_metrics_snapshot_failed`` 1) rather than hanging.

**Bounded cardinality.** At most :data:`GROUPS_MAX` groups get group-level series and at most
:data:`PARTITION_SERIES_MAX` (group, partition) pairs get partition-level series per broker, in
the shards' order; ``tidelog_group_metrics_omitted{level}`` counts the groups and partitions
left out, so a dashboard can tell a truncated scrape from a complete one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tidelog.broker.group.coordinator import GroupCounters
from tidelog.broker.group.group import ConsumerGroup, OffsetAndMetadata

if TYPE_CHECKING:
    from tidelog.broker.group.runtime import GroupCoordinatorRuntime

__all__ = [
    "GROUPS_MAX",
    "METRIC_NAMES",
    "PARTITION_SERIES_MAX",
    "GroupMetricsCollector",
    "GroupMetricsSnapshot",
    "GroupRow",
    "PartitionRow",
    "families",
    "snapshot",
]

log = logging.getLogger("tidelog.broker.group")

#: Groups with group-level series per broker.
GROUPS_MAX = 1_000
#: (group, topic, partition) series of committed offset and lag per broker.
PARTITION_SERIES_MAX = 10_000
#: How long a scrape waits for the event loop's snapshot.
SNAPSHOT_TIMEOUT_S = 2.0
_STATES = ("Empty", "Assigning", "Reconciling", "Stable")
#: The families the collector yields (names as registered: a counter's without ``_total``), so
#: what a node exports can be listed without a running broker; tests/unit/
#: test_group_metric_names.py keeps it equal to what :func:`families` yields.
METRIC_NAMES = (
    "tidelog_group_members",
    "tidelog_group_epoch",
    "tidelog_group_state",
    "tidelog_group_rebalances",
    "tidelog_group_offset_commits",
    "tidelog_group_committed_offset",
    "tidelog_group_lag",
    "tidelog_group_metrics_omitted",
    "tidelog_group_metrics_snapshot_failed",
)


@dataclass(frozen=True, slots=True)
class GroupRow:
    group_id: str
    members: int
    epoch: int
    state: str
    rebalances: int
    offset_commits: int


@dataclass(frozen=True, slots=True)
class PartitionRow:
    group_id: str
    topic: str
    partition: int
    committed_offset: int
    #: HW - committed offset, floored at 0; None where this broker does not host it.
    lag: int | None


@dataclass
class GroupMetricsSnapshot:
    """What one scrape reports (plain values, copied on the event loop)."""

    groups: list[GroupRow] = field(default_factory=list)
    partitions: list[PartitionRow] = field(default_factory=list)
    groups_omitted: int = 0
    partitions_omitted: int = 0


def snapshot(runtime: GroupCoordinatorRuntime) -> GroupMetricsSnapshot:
    """The loaded shards' groups and committed offsets, within the series caps. Runs on the
    event loop (it reads shard state); past the caps it only counts (a set difference of group
    ids per shard, in C), so a scrape stays cheap with many groups."""
    out = GroupMetricsSnapshot()
    for shard in runtime.active_shards():
        state = shard.state
        offsets_only = state.offsets.keys() - state.groups.keys()
        room = GROUPS_MAX - len(out.groups)
        total = len(state.groups) + len(offsets_only)
        out.groups_omitted += max(0, total - max(room, 0))
        for group_id in itertools.islice(itertools.chain(state.groups, offsets_only),
                                         max(room, 0)):
            group = state.groups.get(group_id) or ConsumerGroup(group_id)
            counters = shard.counters.get(group_id, GroupCounters())
            out.groups.append(GroupRow(group_id, len(group.members), group.group_epoch,
                                       group.state, counters.rebalances,
                                       counters.offset_commits))
            _add_partitions(runtime, out, group_id, state.offsets.get(group_id, {}))
    return out


def _add_partitions(runtime: GroupCoordinatorRuntime, out: GroupMetricsSnapshot, group_id: str,
                    offsets: Mapping[tuple[str, int], OffsetAndMetadata]) -> None:
    room = max(0, PARTITION_SERIES_MAX - len(out.partitions))
    out.partitions_omitted += max(0, len(offsets) - room)
    for (topic, partition), committed in itertools.islice(offsets.items(), room):
        hw = runtime.high_watermark(topic, partition)
        lag = None if hw is None else max(0, hw - committed.offset)
        out.partitions.append(PartitionRow(group_id, topic, partition, committed.offset, lag))


class GroupMetricsCollector(Collector):
    """A prometheus_client collector over one broker's group coordinator runtime."""

    def __init__(self, runtime: GroupCoordinatorRuntime) -> None:
        self._runtime = runtime

    def describe(self) -> list[Metric]:
        # Names only: registering must not take a snapshot (the loop may not run yet).
        return list(families(GroupMetricsSnapshot(), failed=False))

    def collect(self) -> Iterator[Metric]:
        taken = self._take()
        yield from families(taken or GroupMetricsSnapshot(), failed=taken is None)

    def _take(self) -> GroupMetricsSnapshot | None:
        loop = self._runtime.loop
        if loop is None or loop.is_closed():
            return None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # scraped from the loop itself (tests): no hop needed
            return snapshot(self._runtime)

        async def take() -> GroupMetricsSnapshot:
            return snapshot(self._runtime)

        try:
            return asyncio.run_coroutine_threadsafe(take(), loop).result(SNAPSHOT_TIMEOUT_S)
        except Exception as error:  # a busy or stopping loop: this scrape has no group series
            log.warning("group metrics: no snapshot from the event loop: %r", error)
            return None


def families(taken: GroupMetricsSnapshot, *, failed: bool) -> Iterator[Metric]:
    """The metric families of one snapshot (``failed``: the scrape got none)."""
    p = "tidelog_group_"
    members = GaugeMetricFamily(p + "members", "members of the group now", labels=["group"])
    epoch = GaugeMetricFamily(p + "epoch", "the group epoch", labels=["group"])
    state = GaugeMetricFamily(p + "state", "1 for the group's state (Empty, Assigning, "
                              "Reconciling, Stable)", labels=["group", "state"])
    rebalances = CounterMetricFamily(
        p + "rebalances", "group epoch bumps written since this coordinator loaded the group",
        labels=["group"])
    commits = CounterMetricFamily(
        p + "offset_commits", "partition offsets committed since this coordinator loaded the "
        "group", labels=["group"])
    for g in taken.groups:
        members.add_metric([g.group_id], g.members)
        epoch.add_metric([g.group_id], g.epoch)
        state.add_metric([g.group_id, g.state if g.state in _STATES else "Unknown"], 1)
        rebalances.add_metric([g.group_id], g.rebalances)
        commits.add_metric([g.group_id], g.offset_commits)
    committed = GaugeMetricFamily(p + "committed_offset", "the group's committed offset",
                                  labels=["group", "topic", "partition"])
    lag = GaugeMetricFamily(p + "lag", "high watermark minus committed offset (floored at 0), "
                            "where this broker hosts the partition",
                            labels=["group", "topic", "partition"])
    for row in taken.partitions:
        labels = [row.group_id, row.topic, str(row.partition)]
        committed.add_metric(labels, row.committed_offset)
        if row.lag is not None:
            lag.add_metric(labels, row.lag)
    omitted = GaugeMetricFamily(p + "metrics_omitted", "groups (level=group) and partitions "
                                "(level=partition) left out of these series by their caps",
                                labels=["level"])
    omitted.add_metric(["group"], taken.groups_omitted)
    omitted.add_metric(["partition"], taken.partitions_omitted)
    snapshot_failed = GaugeMetricFamily(
        p + "metrics_snapshot_failed", "1 when this scrape got no snapshot from the event loop",
        value=1 if failed else 0)
    yield from (members, epoch, state, rebalances, commits, committed, lag, omitted,
                snapshot_failed)
