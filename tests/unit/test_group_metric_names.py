"""broker/group/metrics.METRIC_NAMES is every family the group collector yields, in its order:
what lists a node's exported metrics without a running broker (tests/deploy/exported_metrics.py,
docs/operations.md) relies on it.

How: the collector's families for a small snapshot with one row of each kind (so every family
has a sample), and for an empty, failed one.
"""

from __future__ import annotations

from tidelog.broker.group.metrics import (
    METRIC_NAMES,
    GroupMetricsSnapshot,
    GroupRow,
    PartitionRow,
    families,
)


def small_snapshot() -> GroupMetricsSnapshot:
    return GroupMetricsSnapshot(
        groups=[GroupRow("g", members=2, epoch=3, state="Stable", rebalances=1,
                         offset_commits=4)],
        partitions=[PartitionRow("g", "t", 0, committed_offset=5, lag=1)])


def test_metric_names_are_the_families_the_collector_yields() -> None:
    yielded = list(families(small_snapshot(), failed=False))
    assert tuple(m.name for m in yielded) == METRIC_NAMES
    assert all(m.samples for m in yielded), "every family has a sample for this snapshot"
    failed = families(GroupMetricsSnapshot(), failed=True)
    assert tuple(m.name for m in failed) == METRIC_NAMES
