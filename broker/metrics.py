"""Prometheus metrics of a broker's data plane, in the node's registry (``tidelog_broker_``).

Kafka's names where it has them, in Prometheus form: BytesInPerSec → ``bytes_in_total{topic}``,
UnderReplicatedPartitions → ``under_replicated_partitions``, IsrShrinksPerSec →
``isr_shrinks_total`` and so on. Counters and histograms are updated where the event happens
(children per topic are cached by the caller, so the produce path pays no label lookup).

**Gauges that describe the hosted partitions are computed at scrape time** (Kafka's Yammer
gauges do the same), by :class:`PartitionGaugeCollector`: leader and partition counts,
under-replicated and under-min-ISR partitions, acks=all produces and fetch long-polls waiting,
and the per-partition series (follower lag, high watermark lag, log size). Nothing walks the
partitions between scrapes, so an idle broker pays nothing per partition per second. A scrape
(on the metrics HTTP thread) asks the broker's event loop for a :class:`PartitionGauges`
snapshot (:func:`partition_gauges`, run on the loop, so it never reads a partition while a
request changes it) and builds the families from those plain values on its own thread. If the
loop does not answer within :data:`SNAPSHOT_TIMEOUT_S`, the scrape reports the previous
snapshot (as the timer-set gauges it replaces would have shown their last values). The
replica manager binds its partitions with :meth:`BrokerMetrics.watch_partitions` from its
timer; until then the counts are 0 and no per-partition series exists.

``log_cleaner_dirty_ratio{topic, partition}`` stays an ordinary gauge, set by the cleaner job
(every 15 s, compacted partitions only).

``request_latency_seconds{api, outcome}``: its ``_count`` is also the request rate per API and
outcome, Kafka's RequestsPerSec and (outcome="error") ErrorsPerSec in one series.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from tidelog.broker.partition import Partition

__all__ = [
    "APIS",
    "ERROR",
    "OK",
    "OUTCOMES",
    "PARTITION_GAUGE_NAMES",
    "BrokerMetrics",
    "PartitionGaugeCollector",
    "PartitionGauges",
    "TopicMetrics",
    "outcome_of",
    "partition_families",
    "partition_gauges",
]

log = logging.getLogger("tidelog.broker.metrics")

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
#: How long a scrape waits for the event loop's partition snapshot (then: the previous one).
SNAPSHOT_TIMEOUT_S = 2.0
#: The families :class:`PartitionGaugeCollector` yields, in order.
PARTITION_GAUGE_NAMES = (
    "tidelog_broker_leader_count",
    "tidelog_broker_partition_count",
    "tidelog_broker_under_replicated_partitions",
    "tidelog_broker_under_min_isr_partitions",
    "tidelog_broker_follower_lag_messages",
    "tidelog_broker_high_watermark_lag_messages",
    "tidelog_broker_delayed_fetches",
    "tidelog_broker_acks_all_waiting",
    "tidelog_broker_log_size_bytes",
)


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
        self.retention_bytes_deleted = Counter(p + "retention_bytes_deleted",
                                               "bytes removed by retention", registry=registry)
        self.cleaner_bytes_cleaned = Counter(
            p + "log_cleaner_bytes_cleaned", "dirty bytes log-cleaner passes went through",
            registry=registry)
        self.cleaner_dirty_ratio = Gauge(
            p + "log_cleaner_dirty_ratio", "uncleaned share of the cleanable log, per compacted "
            "partition hosted here (at the last cleaner check)", ["topic", "partition"],
            registry=registry)
        self.cleaner_uncleanable_partitions = Gauge(
            p + "log_cleaner_uncleanable_partitions", "compacted partitions the cleaner skips "
            "until the broker restarts: a pass met a batch that does not decode (Kafka's "
            "uncleanable-partitions-count)", registry=registry)
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
        self.fetch_session_partitions = Counter(
            p + "fetch_session_partitions", "partitions of fetch sessions (KIP-227) listed in "
            "requests, evaluated by the broker and answered, by kind (follower, consumer): "
            "evaluated grows with the partitions that changed, not with the ones a session "
            "holds", ["kind", "step"], registry=registry)
        #: leader_count ... log_size_bytes: computed when /metrics is scraped (module doc).
        self.partition_gauges = PartitionGaugeCollector()
        registry.register(self.partition_gauges)

    def topic(self, topic: str) -> TopicMetrics:
        return TopicMetrics(self, topic)

    def watch_partitions(self, source: Callable[[], PartitionGauges]) -> None:
        """Report ``source()`` (the hosted partitions' :class:`PartitionGauges`) at each scrape,
        taken on the event loop running now (see :meth:`PartitionGaugeCollector.watch`)."""
        self.partition_gauges.watch(source)


@dataclass(frozen=True, slots=True)
class PartitionGauges:
    """What one scrape reports of the hosted partitions: plain values, copied on the event loop
    (:func:`partition_gauges`)."""

    partitions: int = 0  # hosted replicas
    leaders: int = 0
    under_replicated: int = 0  # led here, ISR smaller than the replica set
    under_min_isr: int = 0  # led here, ISR below min.insync.replicas
    acks_all_waiting: int = 0
    #: (kind, long-polls waiting); none before the replica manager bound its partitions.
    delayed_fetches: tuple[tuple[str, int], ...] = ()
    #: (topic, partition, bytes) per hosted replica.
    log_sizes: list[tuple[str, int, int]] = field(default_factory=list)
    #: (topic, partition, LEO - HW) per partition led here.
    high_watermark_lags: list[tuple[str, int, int]] = field(default_factory=list)
    #: (topic, partition, follower, LEO - its fetch offset, or -1 before its first fetch).
    follower_lags: list[tuple[str, int, int, int]] = field(default_factory=list)


def partition_gauges(partitions: Iterable[Partition], *, follower_fetches: int,
                     consumer_fetches: int) -> PartitionGauges:
    """The gauges of ``partitions`` (the hosted replicas) and of the fetch long-polls waiting.
    Runs on the event loop: it reads the partitions' state."""
    count = leaders = under_replicated = under_min_isr = waiting = 0
    sizes: list[tuple[str, int, int]] = []
    hw_lags: list[tuple[str, int, int]] = []
    lags: list[tuple[str, int, int, int]] = []
    for partition in partitions:
        count += 1
        topic, partition_id, plog = partition.topic_name, partition.partition_id, partition.log
        # The segment index's figure (no disk scan).
        sizes.append((topic, partition_id, plog.size_bytes))
        state = partition.state
        if not state.is_leader:
            continue
        leaders += 1
        waiting += partition.acks_waiting
        under_replicated += len(state.isr) < len(state.replicas)
        under_min_isr += state.is_under_min_isr(partition.config.min_insync_replicas)
        leo = plog.log_end_offset
        hw_lags.append((topic, partition_id, leo - plog.high_watermark))
        for replica in state.replicas:
            fetched = state.follower_log_end_offset(replica)
            if fetched is not None:
                lags.append((topic, partition_id, replica, -1 if fetched < 0 else leo - fetched))
    return PartitionGauges(
        partitions=count, leaders=leaders, under_replicated=under_replicated,
        under_min_isr=under_min_isr, acks_all_waiting=waiting,
        delayed_fetches=(("follower", follower_fetches), ("consumer", consumer_fetches)),
        log_sizes=sizes, high_watermark_lags=hw_lags, follower_lags=lags)


def partition_families(taken: PartitionGauges) -> Iterator[Metric]:
    """The metric families of one snapshot: the names, types, labels and help texts of the
    gauges they replace. A label set given twice is reported once, the last value winning (as
    setting a gauge child twice did)."""
    p = "tidelog_broker_"
    yield GaugeMetricFamily(p + "leader_count", "partitions led by this broker",
                            value=float(taken.leaders))
    yield GaugeMetricFamily(p + "partition_count", "partition replicas hosted here",
                            value=float(taken.partitions))
    yield GaugeMetricFamily(
        p + "under_replicated_partitions",
        "partitions led here whose ISR is smaller than their replica set",
        value=float(taken.under_replicated))
    yield GaugeMetricFamily(
        p + "under_min_isr_partitions",
        "partitions led here whose ISR is below min.insync.replicas",
        value=float(taken.under_min_isr))
    follower_lag = GaugeMetricFamily(
        p + "follower_lag_messages",
        "leader LEO minus the follower's last fetch offset, per partition led here and "
        "follower (-1 before its first fetch in this leader epoch)",
        labels=["topic", "partition", "follower"])
    for (topic, partition, follower), lag in {
            (t, str(pid), str(f)): lag for t, pid, f, lag in taken.follower_lags}.items():
        follower_lag.add_metric([topic, partition, follower], float(lag))
    yield follower_lag
    hw_lag = GaugeMetricFamily(
        p + "high_watermark_lag_messages", "leader LEO minus HW, per partition led here",
        labels=["topic", "partition"])
    for (topic, partition), lag in {
            (t, str(pid)): lag for t, pid, lag in taken.high_watermark_lags}.items():
        hw_lag.add_metric([topic, partition], float(lag))
    yield hw_lag
    delayed = GaugeMetricFamily(p + "delayed_fetches", "fetch long-polls waiting now",
                                labels=["kind"])
    for kind, waiting in taken.delayed_fetches:
        delayed.add_metric([kind], float(waiting))
    yield delayed
    yield GaugeMetricFamily(
        p + "acks_all_waiting", "acks=all produces waiting for the high watermark to pass "
        "their batch: Kafka's produce purgatory size (kafka.server:type="
        "DelayedOperationPurgatory,name=PurgatorySize,delayedOperation=Produce)",
        value=float(taken.acks_all_waiting))
    log_size = GaugeMetricFamily(
        p + "log_size_bytes", "bytes of the partition's log on this broker, per hosted "
        "replica (leader or follower), from the segment index (Kafka's kafka.log:type=Log,"
        "name=Size)", labels=["topic", "partition"])
    for (topic, partition), size in {
            (t, str(pid)): size for t, pid, size in taken.log_sizes}.items():
        log_size.add_metric([topic, partition], float(size))
    yield log_size


class _LabelCache:
    """``topic="..",partition=".."`` label text per (topic, partition), kept while the partition
    is reported (rebuilt when the set it holds grows past twice what a scrape reports)."""

    def __init__(self) -> None:
        self._text: dict[tuple[str, int], str] = {}

    def text(self, topic: str, partition: int) -> str:
        key = (topic, partition)
        found = self._text.get(key)
        if found is None:
            found = self._text[key] = \
                f'topic="{_escape_label(topic)}",partition="{partition}"'
        return found

    def forget_beyond(self, reported: int) -> None:
        if len(self._text) > 2 * reported + 1024:
            self._text.clear()


def _escape_label(value: str) -> str:
    # Topic names cannot hold these (tidelog.metadata.topic_names); escaped all the same.
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def partition_exposition(taken: PartitionGauges, labels: _LabelCache | None = None) -> bytes:
    """:func:`partition_families` in Prometheus' text exposition format, written directly.

    Built through prometheus_client, the per-partition samples (60,000 at 30,000 hosted
    partitions) were made into objects, then each label of each was validated and escaped as it
    was written: 420-430 ms of a broker's CPU per scrape, holding the GIL, so the event loop
    stalled meanwhile. Here each partition's label text is built once and kept (``labels``),
    and a sample is one string format. Everything else (help texts, the counts, the waiting
    long-polls) comes from :func:`partition_families` of the snapshot without its
    per-partition lists, so the two cannot drift (a test also parses both and compares)."""
    labels = labels or _LabelCache()
    # A label set given twice is reported once, the last value winning (partition_families).
    lags = {(t, pid, f): lag for t, pid, f, lag in taken.follower_lags}
    hw_lags = {(t, pid): lag for t, pid, lag in taken.high_watermark_lags}
    sizes = {(t, pid): size for t, pid, size in taken.log_sizes}
    per_partition = {
        "tidelog_broker_follower_lag_messages": [
            (f'{labels.text(t, pid)},follower="{f}"', v) for (t, pid, f), v in lags.items()],
        "tidelog_broker_high_watermark_lag_messages": [
            (labels.text(t, pid), v) for (t, pid), v in hw_lags.items()],
        "tidelog_broker_log_size_bytes": [
            (labels.text(t, pid), v) for (t, pid), v in sizes.items()],
    }
    rest = dataclasses.replace(taken, log_sizes=[], high_watermark_lags=[], follower_lags=[])
    out: list[str] = []
    for family in partition_families(rest):
        name = family.name
        out.append(f"# HELP {name} {_escape_help(family.documentation)}\n"
                   f"# TYPE {name} gauge\n")
        samples = per_partition.get(name)
        if samples is not None:
            out.extend(f"{name}{{{label_text}}} {value}\n" for label_text, value in samples)
            continue
        for sample in family.samples:
            label_text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sample.labels.items())
            out.append(f"{name}{{{label_text}}} {sample.value}\n" if label_text
                       else f"{name} {sample.value}\n")
    labels.forget_beyond(len(taken.log_sizes))
    return "".join(out).encode()


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


class PartitionGaugeCollector(Collector):
    """The hosted partitions' gauges, computed when /metrics is scraped (see the module doc)."""

    def __init__(self) -> None:
        #: (snapshot source, the event loop it must run on, or None: the caller's thread).
        self._bound: tuple[Callable[[], PartitionGauges],
                           asyncio.AbstractEventLoop | None] | None = None
        self._last = PartitionGauges()
        self._labels = _LabelCache()
        self._suppressed = threading.local()

    def watch(self, source: Callable[[], PartitionGauges]) -> None:
        """Take snapshots with ``source`` from now on, on the event loop running now (none
        running: on the scraping thread). Cheap; the replica manager calls it from its timer."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        self._bound = (source, loop)  # one assignment: a scrape sees both or neither

    def describe(self) -> list[Metric]:
        # Names only: registering must not take a snapshot.
        return list(partition_families(PartitionGauges()))

    def collect(self) -> Iterator[Metric]:
        if getattr(self._suppressed, "on", False):
            return  # /metrics writes these directly (exposition)
        yield from partition_families(self._take())

    @contextlib.contextmanager
    def suppressed(self) -> Iterator[None]:
        """While entered, on this thread, :meth:`collect` yields nothing: the node's /metrics
        serves the registry with these families written by :meth:`exposition` instead."""
        self._suppressed.on = True
        try:
            yield
        finally:
            self._suppressed.on = False

    def exposition(self) -> bytes:
        """The same families as :meth:`collect`, in Prometheus' text format, written directly
        (see :func:`partition_exposition`): what the node's /metrics serves."""
        return partition_exposition(self._take(), self._labels)

    def _take(self) -> PartitionGauges:
        bound = self._bound
        if bound is None:
            return self._last
        source, loop = bound
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        try:
            if loop is None or running is loop:  # scraped on the loop itself (tests)
                taken = source()
            elif loop.is_closed():
                return self._last
            else:
                taken = _on_loop(loop, source)
        except Exception as error:  # a busy or stopping loop: report the previous snapshot
            log.warning("broker metrics: no partition snapshot from the event loop: %r", error)
            return self._last
        self._last = taken
        return taken


def _on_loop(loop: asyncio.AbstractEventLoop,
             source: Callable[[], PartitionGauges]) -> PartitionGauges:
    """``source()`` run on ``loop`` (from another thread), waited for SNAPSHOT_TIMEOUT_S."""
    future: concurrent.futures.Future[PartitionGauges] = concurrent.futures.Future()

    def take() -> None:
        if not future.set_running_or_notify_cancel():
            return  # the scrape gave up waiting
        try:
            future.set_result(source())
        except BaseException as error:
            future.set_exception(error)

    loop.call_soon_threadsafe(take)
    try:
        return future.result(SNAPSHOT_TIMEOUT_S)
    finally:
        future.cancel()  # a no-op once it ran
