"""The source's and sink's I/O against a Tidelog cluster, through the public client.

What the planner needs from the cluster (each partition's log start offset and high watermark,
the offsets for timestamps) is asked of the partitions' leaders with ``Admin`` on the driver;
what a Spark task reads (one offset range) or writes (its rows) goes through a ``Consumer`` or
an idempotent ``Producer`` that the task opens and closes itself (a reader must be stateless:
nothing with a thread or a socket is pickled to a worker). Every client retries leader changes
as it does for any application, so a broker killed during a read or a write is survived as long
as the partition gets a new leader within the client's timeouts. No pyspark here.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar

import pyarrow as pa

from tidelog.client import Admin, Consumer, ConsumerRecord, Producer
from tidelog.client import TopicPartition as ClientTopicPartition
from tidelog.client.consumer import NoOffsetForPartitionError
from tidelog.client.futures import FutureRecordMetadata
from tidelog.errors import TidelogError
from tidelog.spark.arrow import SinkGroup, records_to_arrow, sink_groups
from tidelog.spark.keyhash import partitions_for_keys
from tidelog.spark.offsets import EARLIEST, LATEST, TopicPartition
from tidelog.spark.options import SinkOptions, SourceOptions, security_kwargs
from tidelog.spark.planner import (
    PartitionInfo,
    SparkDataLossError,
    resolve_partitions,
)
from tidelog.spark.ranges import InputRange

__all__ = ["look_up_partitions", "look_up_timestamps", "read_range", "write_batches"]

log = logging.getLogger("tidelog.spark")
T = TypeVar("T")
#: Records per Arrow batch a reader hands Spark: large enough that the per-batch costs vanish,
#: small enough that a batch stays a few MiB with 100-byte values. Polls keep the Consumer's
#: default max_poll_records (500): at 10,000 a poll cost 1.4x as much CPU per record
#: (bench.spark, the labelled Consumer figure).
READ_CHUNK_RECORDS = 10_000
#: One poll's wait; a read gives up after ``kafkaConsumer.pollTimeoutMs`` without progress.
POLL_WAIT_MS = 500
#: How long a driver-side lookup waits for the partitions' leaders.
LOOKUP_TIMEOUT_MS = 30_000
#: The sink's producer batches: Spark writes in bulk, and at the client's 16 KiB default a
#: batch holds ~100 of 100-byte rows, so per-batch costs (a request, the brokers' append and
#: replication) dominate; at 256 KiB they halved the brokers' CPU per row and doubled an
#: unkeyed write (bench.spark). Well below max.message.bytes (1 MiB).
SINK_BATCH_BYTES = 256 * 1024


@contextlib.contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """A Spark task builds and drops several objects per record, none in a reference cycle
    (reference counting frees them all); the cyclic collector's passes over them cost about a
    third of a read's CPU (bench.spark). The task's worker process is Spark's, used by one task
    at a time, so the collector is off for the task and back on after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def look_up_partitions(admin: Admin, options: SourceOptions) -> dict[TopicPartition, PartitionInfo]:
    """Each partition the subscription reads that exists now, with its log start offset and
    high watermark (ListOffsets at its leader, retried as ``fetchOffset.numRetries`` says)."""
    def ask() -> dict[TopicPartition, PartitionInfo]:
        listings = admin.list_topics(timeout_ms=LOOKUP_TIMEOUT_MS)
        counts = {name: t.num_partitions for name, t in listings.items()}
        wanted = [tp for tp in resolve_partitions(options.subscription, counts)
                  if tp.topic in counts and tp.partition < counts[tp.topic]]
        if not wanted:
            return {}
        start = admin.list_offsets({ClientTopicPartition(*tp): EARLIEST for tp in wanted},
                                   timeout_ms=LOOKUP_TIMEOUT_MS)
        end = admin.list_offsets({ClientTopicPartition(*tp): LATEST for tp in wanted},
                                 timeout_ms=LOOKUP_TIMEOUT_MS)
        return {tp: PartitionInfo(start[ClientTopicPartition(*tp)],
                                  end[ClientTopicPartition(*tp)]) for tp in wanted}
    return _retrying(ask, options)


def look_up_timestamps(admin: Admin, options: SourceOptions, lookups: Mapping[TopicPartition, int]
                       ) -> dict[TopicPartition, int | None]:
    """The first offset at or after each timestamp (None where no record is that late)."""
    if not lookups:
        return {}

    def ask() -> dict[TopicPartition, int | None]:
        found = admin.list_offsets({ClientTopicPartition(*tp): ts for tp, ts in lookups.items()},
                                   timeout_ms=LOOKUP_TIMEOUT_MS)
        return {TopicPartition(*tp): (None if offset < 0 else offset)
                for tp, offset in found.items()}
    return _retrying(ask, options)


def _retrying(ask: Callable[[], T], options: SourceOptions) -> T:
    """Spark's fetchOffset.numRetries and fetchOffset.retryIntervalMs around a driver lookup."""
    attempt = 0
    # Bounded: at most numRetries + 1 attempts, each bounded by LOOKUP_TIMEOUT_MS.
    while True:
        try:
            return ask()
        except TidelogError as error:
            attempt += 1
            if not error.retriable or attempt > options.fetch_offset_num_retries:
                raise
            log.warning("offset lookup failed (%s), retrying (%d of %d)", error, attempt,
                        options.fetch_offset_num_retries)
            time.sleep(options.fetch_offset_retry_interval_ms / 1000)


def read_range(piece: InputRange, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    """The records ``from_offset`` ≤ offset < ``until_offset`` of one partition, as Arrow
    batches. Offsets a compacted log no longer has are skipped (they are not data loss); a range
    whose start retention removed is data loss (``failOnDataLoss``); no progress for
    ``kafkaConsumer.pollTimeoutMs`` fails the task with a timeout naming the partition."""
    tp = ClientTopicPartition(piece.topic, piece.partition)
    consumer = Consumer(options.bootstrap_servers, client_id="tidelog-spark-source",
                        **security_kwargs(options.security),
                        auto_offset_reset="none" if options.fail_on_data_loss else "earliest",
                        fetch_max_wait_ms=POLL_WAIT_MS)
    try:
        with _without_cyclic_gc():
            consumer.assign([tp])
            consumer.seek(tp, piece.from_offset)
            yield from _read_assigned(consumer, tp, piece, options)
    finally:
        consumer.close()


def _read_assigned(consumer: Consumer, tp: ClientTopicPartition, piece: InputRange,
                   options: SourceOptions) -> Iterator[pa.RecordBatch]:
    position = piece.from_offset
    progress_at = time.monotonic()
    chunk: list[ConsumerRecord] = []
    # Bounded: each poll waits at most POLL_WAIT_MS, and the loop ends at until_offset or after
    # pollTimeoutMs without progress.
    while position < piece.until_offset:
        try:
            records = consumer.poll(timeout_ms=POLL_WAIT_MS)
        except NoOffsetForPartitionError as error:
            raise SparkDataLossError((TopicPartition(*tp),), f"{tp.topic}-{tp.partition}: "
                                     f"offset {position} is no longer in the log ({error})"
                                     ) from None
        if records:
            if records[0].offset > position and position == piece.from_offset:
                # Only with failOnDataLoss=false (auto_offset_reset="earliest"): "none" raises.
                log.warning("%s-%d: offsets %d to %d were removed before they were read. Some "
                            "data may have been missed", tp.topic, tp.partition, position,
                            records[0].offset - 1)
            if records[-1].offset >= piece.until_offset:
                records = [r for r in records if r.offset < piece.until_offset]
            chunk.extend(records)
        new_position = consumer.position(tp)
        if new_position != position:
            position, progress_at = new_position, time.monotonic()
        elif (time.monotonic() - progress_at) * 1000 > options.poll_timeout_ms:
            raise TimeoutError(f"Cannot fetch records in [{position}, {piece.until_offset}) of "
                               f"{tp.topic}-{tp.partition} after polling for "
                               f"{options.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs)")
        if chunk and (len(chunk) >= READ_CHUNK_RECORDS or position >= piece.until_offset):
            yield records_to_arrow(chunk, topic=tp.topic, partition=tp.partition,
                                   include_headers=options.include_headers)
            chunk = []


def write_batches(batches: Iterable[pa.RecordBatch], options: SinkOptions) -> int:
    """Produce every row of ``batches`` with an idempotent producer at acks=all; the number of
    records written. The first delivery failure is raised (Tidelog's typed error, with a note
    saying how far the task got), once the producer has flushed what it had: a task that fails
    may have written some of its rows (at-least-once, as Spark's Kafka sink)."""
    # The records not known to be delivered yet, oldest first; checked after each Arrow batch
    # (those done are dropped), so the deque holds about what the producer has in flight.
    pending: collections.deque[FutureRecordMetadata] = collections.deque()
    written = 0
    with Producer(options.bootstrap_servers, client_id="tidelog-spark-sink", acks="all",
                  **security_kwargs(options.security),
                  enable_idempotence=True, batch_size=SINK_BATCH_BYTES) as producer, \
            _without_cyclic_gc():
        for batch in batches:
            for group in sink_groups(batch, topic_option=options.topic):
                pending.extend(_send_group(producer, group))
                written += len(group.values)
            _raise_first_failure(pending, written, done_only=True)
        producer.flush()
        _raise_first_failure(pending, written, done_only=False)
    return written


def _send_group(producer: Producer, group: SinkGroup) -> list[FutureRecordMetadata]:
    if group.headers is not None:
        keys = group.keys if group.keys is not None else [None] * len(group.values)
        return [producer.send(group.topic, value, key, partition=group.partition,
                              headers=headers or None)
                for value, key, headers in zip(group.values, keys, group.headers, strict=True)]
    if group.partition is not None or group.keys is None:
        return producer.send_many(group.topic, group.values, keys=group.keys,
                                  partition=group.partition)
    # Keyed rows: Kafka's partition of each key, hashed a column at a time (keyhash.py), then
    # one send_many per partition; the producer would hash them one by one.
    count = len(producer.partitions_for(group.topic))
    split: dict[int | None, tuple[list[bytes | None], list[bytes | None]]] = {}
    for partition, key, value in zip(partitions_for_keys(group.keys, count), group.keys,
                                     group.values, strict=True):
        keys, values = split.setdefault(partition, ([], []))
        keys.append(key)
        values.append(value)
    futures: list[FutureRecordMetadata] = []
    for partition, (keys, values) in split.items():
        futures += producer.send_many(group.topic, values, keys=keys, partition=partition)
    return futures


def _raise_first_failure(pending: collections.deque[FutureRecordMetadata], written: int, *,
                         done_only: bool) -> None:
    # Bounded by the deque's length; after a flush every future is done.
    while pending and (not done_only or pending[0].done()):
        error = pending.popleft().exception(0)
        if error is not None:
            error.add_note(f"Tidelog sink: writing a record failed after {written} records "
                           f"were queued by this task; the task fails and Spark may retry it "
                           f"(at-least-once)")
            raise error
