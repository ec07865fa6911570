"""Every metric a Tidelog node can export, named as /metrics shows it, for checking dashboards,
alerts, recording rules and docs against the code.

:func:`exported_metric_names` maps each name to its family's type ("counter", "gauge",
"histogram"): the family name as registered (``tidelog_broker_bytes_in``) and every sample name
of the family as it appears in /metrics (``tidelog_broker_bytes_in_total`` and
``tidelog_broker_bytes_in_created``; ``..._bucket``, ``..._sum``, ``..._count`` and
``..._created`` of a histogram; a gauge's own name). :func:`exported_metric_labels` maps the
same names to their label names (a family's are its samples' without ``le``).
:func:`exported_metric_families` has the families only, named as their ``# TYPE`` line in
/metrics names them (a counter's with ``_total``).

How: the node's metric sources, as tidelog/node.py and broker/runtime.py register them on a
node's registry (BrokerMetrics, ControllerMetrics, the group collector, register_node_metrics:
node, process and platform), in one fresh CollectorRegistry with no running node. Every family
is made to have a sample so that its sample names and labels are read, not guessed: a labelled
metric of BrokerMetrics/ControllerMetrics gets one child with placeholder values, and the group
collector and the broker's partition gauge collector are given a snapshot with one row of each
kind.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from tidelog.broker.group.metrics import GroupMetricsSnapshot, GroupRow, PartitionRow, families
from tidelog.broker.metrics import BrokerMetrics, PartitionGauges
from tidelog.controller.metrics import ControllerMetrics
from tidelog.node_metrics import register_node_metrics

__all__ = ["exported_metric_families", "exported_metric_labels", "exported_metric_names"]

#: name -> (type, label names)
_Exported = dict[str, tuple[str, frozenset[str]]]


def exported_metric_names() -> dict[str, str]:
    """Family and sample name -> the family's type."""
    return {name: kind for name, (kind, _) in _exported()[0].items()}


def exported_metric_labels() -> dict[str, frozenset[str]]:
    """Family and sample name -> its label names."""
    return {name: labels for name, (_, labels) in _exported()[0].items()}


def exported_metric_families() -> dict[str, tuple[str, frozenset[str]]]:
    """Family name as /metrics' ``# TYPE`` line has it -> (type, label names)."""
    return dict(_exported()[1])


@functools.cache
def _exported() -> tuple[_Exported, _Exported]:
    """(every family and sample name, the families as /metrics names them)."""
    names: _Exported = {}
    families_found: _Exported = {}
    for family in _registry().collect():
        assert family.samples, f"{family.name} has no sample to read its names from"
        family_labels: set[str] = set()
        for sample in family.samples:
            labels = frozenset(sample.labels)
            names[sample.name] = (family.type, labels)
            family_labels |= labels - {"le"}
        names[family.name] = (family.type, frozenset(family_labels))
        # prometheus_client's text format names a counter family after its _total sample.
        shown = family.name + "_total" if family.type == "counter" else family.name
        families_found[shown] = (family.type, frozenset(family_labels))
    return names, families_found


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    broker = BrokerMetrics(registry)
    # The partition gauges are computed at scrape time (broker.metrics.PartitionGaugeCollector).
    broker.watch_partitions(lambda: PartitionGauges(
        delayed_fetches=(("x", 0),), log_sizes=[("t", 0, 0)], high_watermark_lags=[("t", 0, 0)],
        follower_lags=[("t", 0, 1, 0)]))
    for metrics in (broker, ControllerMetrics(registry)):
        for value in vars(metrics).values():
            if not isinstance(value, MetricWrapperBase):
                continue
            # A labelled parent shows no sample until it has a child. _labelnames is private:
            # prometheus_client has no public way to read a metric's label names.
            if value._is_parent():  # type: ignore[no-untyped-call]
                value.labels(*("x" for _ in value._labelnames))
    registry.register(_GroupFamilies())
    register_node_metrics(registry, tempfile.gettempdir(), node_id=0,
                          roles=("broker", "controller"))
    return registry


class _GroupFamilies(Collector):
    """The group collector's families for a snapshot with one group and one partition."""

    def collect(self) -> Iterator[Metric]:
        taken = GroupMetricsSnapshot(
            groups=[GroupRow("g", members=1, epoch=1, state="Stable", rebalances=1,
                             offset_commits=1)],
            partitions=[PartitionRow("g", "t", 0, committed_offset=1, lag=0)])
        return families(taken, failed=False)
