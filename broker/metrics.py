"""Prometheus metrics of a broker's data plane, in the node's registry (``tidelog_broker_``).

Kafka's names where it has them, in Prometheus form: BytesInPerSec → ``bytes_in_total{topic}``,
UnderReplicatedPartitions → ``under_replicated_partitions``, IsrShrinksPerSec →
``isr_shrinks_total`` and so on. Counters and histograms are updated where the event happens
(children per topic are cached by the caller, so the produce path pays no label lookup);
gauges that describe every hosted partition are recomputed on the replica manager's timer
(``ReplicaManager._update_gauges``: :meth:`BrokerMetrics.set_follower_lags`,
:meth:`BrokerMetrics.set_log_sizes`), not on each scrape, so the metrics HTTP thread never walks
the event loop's structures.

``request_latency_seconds{api, outcome}``: its ``_count`` is also the request rate per API and
outcome, Kafka's RequestsPerSec and (outcome="error") ErrorsPerSec in one series.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["APIS", "ERROR", "OK", "OUTCOMES", "BrokerMetrics", "TopicMetrics", "outcome_of"]

#: The APIs whose latency is measured (handle_<api> of the replica manager).
APIS = ("produce", "fetch", "list_offsets", "init_producer_id", "describe_logs", "replica_fetch")
#: Request latency buckets, seconds: sub-millisecond appends up to 30 s long-polls.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0,
                     5.0, 10.0, 30.0)
#: A request's outcome label: "error" when its answer carries an error code, for the request or
#: for any of its partitions (one failed partition of a produce makes the request an error, as
#: the producer has to retry it).
OK, ERROR = "ok", "error"
OUTCOMES = (OK, ERROR)


class _PartitionAnswer(Protocol):
    @property
    def error_code(self) -> int: ...


class _TopicAnswer(Protocol):
    @property
    def partitions(self) -> Iterable[_PartitionAnswer]: ...


def outcome_of(request_error: int, topics: Iterable[_TopicAnswer] = ()) -> str:
    """The outcome label of an answer: its request-level error code and its per-topic partition
    answers (a response with a flat ``partitions`` list passes itself as the one "topic")."""
    if request_error or any(p.error_code for t in topics for p in t.partitions):
        return ERROR
    return OK


class TopicMetrics:
    """The per-topic counter children, looked up once per topic."""

    __slots__ = ("bytes_in", "bytes_out", "isr_expands", "isr_shrinks", "messages_in",
                 "messages_out", "replication_bytes_in", "replication_bytes_out")

    def __init__(self, metrics: BrokerMetrics, topic: str) -> None:
        self.bytes_in = metrics.bytes_in.labels(topic)
        self.messages_in = metrics.messages_in.labels(topic)
        self.bytes_out = metrics.bytes_out.labels(topic)
        self.messages_out = metrics.messages_out.labels(topic)
        self.replication_bytes_in = metrics.replication_bytes_in.labels(topic)
        self.replication_bytes_out = metrics.replication_bytes_out.labels(topic)
        self.isr_shrinks = metrics.isr_shrinks
        self.isr_expands = metrics.isr_expands


class BrokerMetrics:
    """The data plane's metrics; one per broker process (tests give each its own registry)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        p = "tidelog_broker_"
        self.bytes_in = Counter(p + "bytes_in", "batch bytes appended by producers, per topic",
                                ["topic"], registry=registry)
        self.messages_in = Counter(p + "messages_in",
                                   "records appended by producers, per topic",
                                   ["topic"], registry=registry)
        self.bytes_out = Counter(p + "bytes_out", "batch bytes sent to consumers, per topic",
                                 ["topic"], registry=registry)
        self.messages_out = Counter(p + "messages_out", "records sent to consumers, per topic",
                                    ["topic"], registry=registry)
        self.replication_bytes_in = Counter(
            p + "replication_bytes_in", "batch bytes appended as a follower, per topic",
            ["topic"], registry=registry)
        self.replication_bytes_out = Counter(
            p + "replication_bytes_out", "batch bytes sent to followers, per topic",
            ["topic"], registry=registry)
        self.request_latency = Histogram(
            p + "request_latency_seconds",
            "time from receiving a data-plane request to answering it (long-polls included), "
            "by API and outcome (error: the answer carries an error code for the request or any "
            "of its partitions); _count is Kafka's RequestsPerSec / ErrorsPerSec",
            ["api", "outcome"], buckets=LATENCY_BUCKETS_S, registry=registry)
        #: Children per (API, outcome), looked up once (the produce path pays no label lookup).
        self.latency = {(api, result): self.request_latency.labels(api, result)
                        for api in APIS for result in OUTCOMES}
        self.request_errors = Counter(
            p + "request_errors", "partition-level errors answered, by API and error code",
            ["api", "error"], registry=registry)
        self.isr_shrinks = Counter(p + "isr_shrinks",
                                   "ISR shrinks committed for partitions led here",
                                   registry=registry)
        self.isr_expands = Counter(p + "isr_expands",
                                   "ISR expansions committed for partitions led here",
                                   registry=registry)
        self.leader_count = Gauge(p + "leader_count", "partitions led by this broker",
                                  registry=registry)
        self.partition_count = Gauge(p + "partition_count", "partition replicas hosted here",
                                     registry=registry)
        self.under_replicated_partitions = Gauge(
            p + "under_replicated_partitions",
            "partitions led here whose ISR is smaller than their replica set", registry=registry)
        self.under_min_isr_partitions = Gauge(
            p + "under_min_isr_partitions",
            "partitions led here whose ISR is below min.insync.replicas", registry=registry)
        self.follower_lag = Gauge(
            p + "follower_lag_messages",
            "leader LEO minus the follower's last fetch offset, per partition led here and "
            "follower (-1 before its first fetch in this leader epoch)",
            ["topic", "partition", "follower"], registry=registry)
        self.high_watermark_lag = Gauge(
            p + "high_watermark_lag_messages",
            "leader LEO minus HW, per partition led here", ["topic", "partition"],
            registry=registry)
        self.delayed_fetches = Gauge(p + "delayed_fetches", "fetch long-polls waiting now",
                                     ["kind"], registry=registry)
        self.acks_all_waiting = Gauge(
            p + "acks_all_waiting", "acks=all produces waiting for the high watermark to pass "
            "their batch: Kafka's produce purgatory size (kafka.server:type="
            "DelayedOperationPurgatory,name=PurgatorySize,delayedOperation=Produce)",
            registry=registry)
        self.log_size = Gauge(
            p + "log_size_bytes", "bytes of the partition's log on this broker, per hosted "
            "replica (leader or follower), from the segment index (Kafka's kafka.log:type=Log,"
            "name=Size)", ["topic", "partition"], registry=registry)
        self.retention_bytes_deleted = Counter(p + "retention_bytes_deleted",
                                               "bytes removed by retention", registry=registry)
        self.cleaner_bytes_cleaned = Counter(
            p + "log_cleaner_bytes_cleaned", "dirty bytes log-cleaner passes went through",
            registry=registry)
        self.cleaner_dirty_ratio = Gauge(
            p + "log_cleaner_dirty_ratio", "uncleaned share of the cleanable log, per compacted "
            "partition hosted here (at the last cleaner check)", ["topic", "partition"],
            registry=registry)
        self.log_flushes = Counter(
            p + "log_flushes", "fsyncs forced by topic flush.messages / flush.ms (leader and "
            "follower appends)", registry=registry)
        self.log_flush_failures = Counter(
            p + "log_flush_failures", "fsyncs that failed, a topic's flush or the node's "
            "interval one (a storage error: a produce waiting on it is answered "
            "KAFKA_STORAGE_ERROR with appended=true)", registry=registry)
        self.authorization_failures = Counter(
            p + "authorization_failures", "requests or parts of requests refused by the ACLs, "
            "by resource type and operation (each also logged by tidelog.audit)",
            ["resource_type", "operation"], registry=registry)
        self.authentication_failures = Counter(
            p + "authentication_failures", "calls on the client listener refused "
            "UNAUTHENTICATED (a wrong or unknown SCRAM credential, a mechanism not enabled, or "
            "none where [sasl] required), by mechanism (each also logged by tidelog.audit)",
            ["mechanism"], registry=registry)
        self._lag_labels: set[tuple[str, ...]] = set()
        self._hw_lag_labels: set[tuple[str, ...]] = set()
        self._size_labels: set[tuple[str, ...]] = set()

    def topic(self, topic: str) -> TopicMetrics:
        return TopicMetrics(self, topic)

    def set_follower_lags(self, lags: Iterable[tuple[str, int, int, int]],
                          hw_lags: Iterable[tuple[str, int, int]]) -> None:
        """Replace the per-follower and per-partition lag gauges: (topic, partition, follower,
        lag) and (topic, partition, lag). Label sets not given any more are removed, so a
        partition that moved away stops being reported."""
        self._lag_labels = _replace(
            self.follower_lag, self._lag_labels,
            (((t, str(p), str(f)), lag) for t, p, f, lag in lags))
        self._hw_lag_labels = _replace(
            self.high_watermark_lag, self._hw_lag_labels,
            (((t, str(p)), lag) for t, p, lag in hw_lags))

    def set_log_sizes(self, sizes: Iterable[tuple[str, int, int]]) -> None:
        """Replace the log size gauges: (topic, partition, bytes) per hosted replica; a
        partition no longer hosted here stops being reported."""
        self._size_labels = _replace(self.log_size, self._size_labels,
                                     (((t, str(p)), size) for t, p, size in sizes))


def _replace(gauge: Gauge, previous: set[tuple[str, ...]],
             values: Iterable[tuple[tuple[str, ...], float]]) -> set[tuple[str, ...]]:
    """Set ``gauge``'s children to ``values`` and remove those of ``previous`` not among them
    (a stale series would keep reporting a partition that left); the label sets now set."""
    seen: set[tuple[str, ...]] = set()
    for labels, value in values:
        gauge.labels(*labels).set(value)
        seen.add(labels)
    for labels in previous - seen:
        gauge.remove(*labels)
    return seen
