"""Prometheus metrics of a broker's data plane, in the node's registry (``tidelog_broker_``).

Kafka's names where it has them, in Prometheus form: BytesInPerSec → ``bytes_in_total{topic}``,
UnderReplicatedPartitions → ``under_replicated_partitions``, IsrShrinksPerSec →
``isr_shrinks_total`` and so on. Counters and histograms are updated where the event happens
(children per topic are cached by the caller, so the produce path pays no label lookup);
gauges that describe every hosted partition are recomputed on the replica manager's timer
(:meth:`BrokerMetrics.set_partition_gauges`), not on each scrape, so the metrics HTTP thread never
walks the event loop's structures.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["APIS", "BrokerMetrics", "TopicMetrics"]

#: The APIs whose latency is measured (handle_<api> of the replica manager).
APIS = ("produce", "fetch", "list_offsets", "init_producer_id", "describe_logs", "replica_fetch")
#: Request latency buckets, seconds: sub-millisecond appends up to 30 s long-polls.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0,
                     5.0, 10.0, 30.0)


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
            "time from receiving a data-plane request to answering it (long-polls included)",
            ["api"], buckets=LATENCY_BUCKETS_S, registry=registry)
        #: Children per API, looked up once (the produce path pays no label lookup).
        self.latency = {api: self.request_latency.labels(api) for api in APIS}
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
        self.acks_all_waiting = Gauge(p + "acks_all_waiting",
                                      "acks=all produces waiting for the high watermark",
                                      registry=registry)
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
        self._lag_labels: set[tuple[str, str, str]] = set()
        self._hw_lag_labels: set[tuple[str, str]] = set()

    def topic(self, topic: str) -> TopicMetrics:
        return TopicMetrics(self, topic)

    def set_follower_lags(self, lags: Iterable[tuple[str, int, int, int]],
                          hw_lags: Iterable[tuple[str, int, int]]) -> None:
        """Replace the per-follower and per-partition lag gauges: (topic, partition, follower,
        lag) and (topic, partition, lag). Label sets not given any more are removed, so a
        partition that moved away stops being reported."""
        seen: set[tuple[str, str, str]] = set()
        for topic, partition, follower, lag in lags:
            labels = (topic, str(partition), str(follower))
            self.follower_lag.labels(*labels).set(lag)
            seen.add(labels)
        for labels in self._lag_labels - seen:
            self.follower_lag.remove(*labels)
        self._lag_labels = seen
        seen_hw: set[tuple[str, str]] = set()
        for topic, partition, lag in hw_lags:
            hw_labels = (topic, str(partition))
            self.high_watermark_lag.labels(*hw_labels).set(lag)
            seen_hw.add(hw_labels)
        for hw_labels in self._hw_lag_labels - seen_hw:
            self.high_watermark_lag.remove(*hw_labels)
        self._hw_lag_labels = seen_hw
