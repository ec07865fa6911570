"""The producer's record accumulator: per-partition queues of batches, as a plain data structure.

``Producer.send()`` appends records here (under the producer's lock); the one sender task asks
which leaders have a batch worth sending (``ready``), takes at most one batch per partition per
request (``drain``), puts failed batches back in sequence order (``reenqueue``), and frees their
memory when they are done (``deallocate``). It follows Kafka's ``RecordAccumulator``:

* A partition's last batch stays open for appends until it reaches ``batch_size`` bytes or is
  drained. A record larger than ``batch_size`` gets a batch of its own. Every batch has a
  ``result`` (made by ``new_result``) that the producer's futures of its records share.
* A partition is *ready* when its first batch is full, has waited ``linger_ms``, a flush or close
  is in progress, or someone is blocked waiting for buffer memory; a retried batch waits
  after its last attempt instead: ``retry_backoff_ms``, doubling per attempt up to
  ``retry_backoff_max_ms`` (KIP-580), and not at all once its partition has a new leader (KIP-951:
  the error was the old leader's, so the new one is worth trying at once).
* ``buffer_memory`` bounds the bytes held by all unfinished batches. ``has_room`` tells the
  producer whether an append fits; the producer blocks (up to ``max_block_ms``) when it does not.
* Batches older than ``delivery_timeout_ms`` are handed back by ``expire`` to be failed.

Pure: no clock (every method takes ``now_ms``), no I/O, no threads. Sizes are estimates of the
encoded batch; the real size is checked when the sender builds it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Generic, TypeVar

from tidelog import limits
from tidelog.client._idempotence import increment_sequence, sequence_before
from tidelog.client.records import TopicPartition
from tidelog.invariants import InvariantViolation, check
from tidelog.record_batch import NewRecord, RecordsBuilder

__all__ = [
    "ProducerBatch",
    "ReadyCheck",
    "RecordAccumulator",
    "estimate_bytes",
    "estimate_record_bytes",
]

H = TypeVar("H")

#: Per-record framing in the encoded Records message (tags, varint lengths, the two deltas).
RECORD_OVERHEAD_BYTES = 16
#: Per-header framing (tags and lengths).
HEADER_OVERHEAD_BYTES = 4
#: The RecordBatch header fields around the payload.
BATCH_OVERHEAD_BYTES = 72
_BATCH_RECORDS_MAX = limits.BATCH_RECORDS_MAX


def estimate_bytes(key: bytes | None, value: bytes | None,
                   headers: Sequence[tuple[str, bytes | None]] = ()) -> int:
    """An upper-bound estimate of what a record adds to an uncompressed batch."""
    size = RECORD_OVERHEAD_BYTES
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    for name, item in headers:
        size += HEADER_OVERHEAD_BYTES + len(name.encode(errors="replace")) + (
            len(item) if item else 0)
    return size


def estimate_record_bytes(record: NewRecord) -> int:
    """An upper-bound estimate of what ``record`` adds to an uncompressed batch."""
    return estimate_bytes(record.key, record.value, record.headers)


@dataclass(eq=False)
class ProducerBatch(Generic[H]):
    """Records bound for one partition, sent (and retried) as one RecordBatch.

    ``result`` is whatever the producer needs to complete the batch's records (the object their
    futures share, made by the accumulator's ``new_result``); this module never looks inside it.
    Records are encoded into ``builder`` as they are appended (``records`` only seeds a batch
    built by hand, as tests do). The producer id, epoch and base sequence are stamped when the
    batch is first drained, and ``payload`` caches the built bytes so a retry sends exactly the
    same batch.
    """

    tp: TopicPartition
    created_ms: int
    result: H
    records: InitVar[Iterable[NewRecord] | None] = None
    builder: RecordsBuilder = field(default_factory=RecordsBuilder)
    size_bytes: int = BATCH_OVERHEAD_BYTES
    reserved_bytes: int = 0
    attempts: int = 0
    last_attempt_ms: int = -1
    last_leader: int = -1  # the broker the last attempt went to
    retry: bool = False
    closed: bool = False
    #: An attempt ended without an answer (timeout, lost connection): the batch may be written.
    maybe_written: bool = False
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    payload: bytes | None = None

    def __post_init__(self, records: Iterable[NewRecord] | None) -> None:
        for record in records or ():
            if record.timestamp_ms is None:
                raise ValueError("a record appended to a batch needs its timestamp")
            self.builder.append(record.key, record.value, record.headers, record.timestamp_ms)

    @property
    def record_count(self) -> int:
        return self.builder.count

    @property
    def has_sequence(self) -> bool:
        return self.base_sequence >= 0

    @property
    def last_sequence(self) -> int:
        """The sequence of the batch's last record (wrapping past 2**31-1 to 0, as Kafka's)."""
        check(self.has_sequence, f"{self.tp}: last_sequence of a batch without a sequence")
        return increment_sequence(self.base_sequence, self.record_count - 1)

    def stamp(self, *, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Give the batch its idempotence fields (once; a retry keeps them)."""
        check(not self.has_sequence, f"{self.tp}: a batch with sequence {self.base_sequence} "
                                     f"stamped again with {base_sequence}")
        check(base_sequence >= 0, f"{self.tp}: negative base sequence {base_sequence}")
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.payload = None

    def unstamp(self) -> None:
        """Forget the idempotence fields (after a producer epoch bump resets sequences)."""
        self.producer_id = self.producer_epoch = self.base_sequence = -1
        self.payload = None

    def is_full(self, batch_size: int) -> bool:
        return self.closed or self.size_bytes >= batch_size


@dataclass(frozen=True, slots=True)
class ReadyCheck:
    """The leaders worth a produce request now, and when to look again."""

    ready_nodes: frozenset[int]
    #: Milliseconds until some batch may become ready (None: nothing is waiting on time).
    next_check_delay_ms: int | None
    #: Topics with batches whose partition has no known leader (metadata must be refreshed).
    unknown_leader_topics: frozenset[str]


class RecordAccumulator(Generic[H]):
    """Per-partition deques of batches, bounded by ``buffer_memory`` bytes. ``new_result()``
    makes each new batch's ``result``."""

    def __init__(
        self,
        *,
        new_result: Callable[[], H],
        batch_size: int,
        linger_ms: int,
        buffer_memory: int,
        retry_backoff_ms: int,
        delivery_timeout_ms: int,
        retry_backoff_max_ms: int | None = None,
    ) -> None:
        if batch_size <= 0 or buffer_memory <= 0:
            raise ValueError("batch_size and buffer_memory must be positive")
        if linger_ms < 0 or retry_backoff_ms < 0 or delivery_timeout_ms <= 0:
            raise ValueError("linger_ms and retry_backoff_ms must be >= 0, delivery_timeout_ms > 0")
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_ms, retry_backoff_max_ms or 0)
        self.delivery_timeout_ms = delivery_timeout_ms
        self._new_result = new_result
        self._batches: dict[TopicPartition, deque[ProducerBatch[H]]] = {}
        #: Bytes held by unfinished batches (read it; only the accumulator changes it).
        self.buffer_used_bytes = 0
        self._flushes_in_progress = 0
        self._memory_waiters = 0
        self._closed = False
        self._drain_start = 0

    # ------------------------------------------------------------------ memory
    def has_room(self, size: int) -> bool:
        return self.buffer_used_bytes + size <= self.buffer_memory

    def set_memory_waiters(self, count: int) -> None:
        """How many senders are blocked on memory; while any are, every batch is ready."""
        check(count >= 0, f"{count} memory waiters")
        self._memory_waiters = count

    def deallocate(self, batch: ProducerBatch[H]) -> None:
        """Give back a finished batch's memory (exactly once per batch): its share of
        ``buffer_memory``, and its records and payload, since the batch itself may be kept (the
        producer remembers the last batch of each topic's keyless records)."""
        check(batch.reserved_bytes <= self.buffer_used_bytes,
              f"{batch.tp}: a batch gives back {batch.reserved_bytes} bytes of buffer_memory but "
              f"only {self.buffer_used_bytes} are in use")
        self.buffer_used_bytes -= batch.reserved_bytes
        batch.reserved_bytes = 0
        batch.payload = None
        batch.builder = RecordsBuilder()

    # ------------------------------------------------------------------ appends
    # Each append returns the batch the record went into, as its last record (index
    # ``record_count - 1``). The producer wakes the sender when that batch is new
    # (``record_count == 1``) or full (``size_bytes >= batch_size``).
    def append(self, tp: TopicPartition, record: NewRecord, *, now_ms: int) -> ProducerBatch[H]:
        """Append to the partition's open batch, or open a new one. The caller checked
        ``has_room(estimate_record_bytes(record))``; that is checked here. The record must have
        its timestamp."""
        if record.timestamp_ms is None:
            raise ValueError("a record appended to the accumulator needs its timestamp")
        return self.append_fields(tp, record.key, record.value, record.headers,
                                  record.timestamp_ms, estimate_record_bytes(record),
                                  now_ms=now_ms)

    def append_fields(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        timestamp_ms: int,
        size: int,
        *,
        now_ms: int,
    ) -> ProducerBatch[H]:
        """:meth:`append` of a record given as its fields and ``size`` (:func:`estimate_bytes`):
        the record is encoded into the batch here. Raises InvalidRecordError (bad timestamp or
        headers) without appending."""
        if self._closed:
            raise RuntimeError("the accumulator is closed")
        if self.buffer_used_bytes + size > self.buffer_memory:  # hot path: no f-string per call
            raise InvariantViolation(f"append of {size} bytes without room in buffer_memory")
        batch = self.open_batch(tp)
        if batch is not None and self.append_to(batch, key, value, headers, timestamp_ms, size):
            return batch
        if batch is not None:
            batch.closed = True  # it has a successor now: its partition's open batch is the new one
        batch = ProducerBatch(tp=tp, created_ms=now_ms, result=self._new_result())
        # The first record always fits: a record larger than batch_size gets a batch of its own.
        batch.builder.append(key, value, headers, timestamp_ms)
        batch.size_bytes += size
        batch.reserved_bytes = size
        self.buffer_used_bytes += size
        dq = self._batches.get(tp)
        if dq is None:
            dq = self._batches[tp] = deque()
        dq.append(batch)
        return batch

    def open_batch(self, tp: TopicPartition) -> ProducerBatch[H] | None:
        """The partition's open batch: its last, until drained or followed by a new one (then it
        is ``closed``; a batch put back for a retry is closed too and goes ahead of it)."""
        dq = self._batches.get(tp)
        if not dq or dq[-1].closed:
            return None
        return dq[-1]

    def append_to(self, batch: ProducerBatch[H], key: bytes | None, value: bytes | None,
                  headers: Sequence[tuple[str, bytes | None]], timestamp_ms: int,
                  size: int) -> bool:
        """Append to ``batch`` if it is still open and the record fits in ``batch_size``; False,
        with nothing appended, when it would need a new batch (the sticky partitioner then moves
        the topic to another partition, as KIP-480 does). The producer's hot path, given the
        batch it appended to last: the caller checked for room in ``buffer_memory``. An open
        batch is one the sender will still drain, so this needs no check that the accumulator
        is open."""
        builder = batch.builder
        if (batch.closed or batch.size_bytes + size > self.batch_size
                or builder.count >= _BATCH_RECORDS_MAX):
            return False
        builder.append(key, value, headers, timestamp_ms)  # InvalidRecordError: nothing changed
        batch.size_bytes += size
        batch.reserved_bytes += size
        self.buffer_used_bytes += size
        return True

    # ------------------------------------------------------------------ sending
    def ready(
        self,
        now_ms: int,
        leader_of: Callable[[TopicPartition], int | None],
        busy_nodes: Container[int] = (),
        in_flight: Container[TopicPartition] = (),
    ) -> ReadyCheck:
        """Leaders with a sendable batch. ``busy_nodes`` (at their in-flight limit) are skipped
        without a time-based re-check: the sender looks again when a response frees them.

        A partition in ``in_flight`` (a batch of it is being sent) is held back while its next
        batch is not full, even after ``linger_ms``: records that arrive while a request is out
        go together in the next one (see :meth:`_held`). The response wakes the sender."""
        ready: set[int] = set()
        unknown: set[str] = set()
        next_delay: int | None = None
        hurry = self._closed or self._flushes_in_progress > 0 or self._memory_waiters > 0
        for tp, dq in self._batches.items():
            if not dq:
                continue
            leader = leader_of(tp)
            if leader is None or leader < 0:
                unknown.add(tp.topic)
                continue
            if leader in ready or leader in busy_nodes:
                continue
            if tp in in_flight and self._held(dq):
                continue
            first = dq[0]
            backing_off = self._backing_off(first, leader, now_ms)
            if backing_off:
                wait_ms = self.retry_backoff_of(first)
                waited = now_ms - first.last_attempt_ms
            else:
                wait_ms = self.linger_ms
                waited = now_ms - first.created_ms
            full = len(dq) > 1 or first.is_full(self.batch_size)
            if not backing_off and (full or hurry or waited >= wait_ms):
                ready.add(leader)
            else:
                delay = max(wait_ms - waited, 0)
                next_delay = delay if next_delay is None else min(next_delay, delay)
        return ReadyCheck(frozenset(ready), next_delay, frozenset(unknown))

    def drain(
        self,
        ready_nodes: Container[int],
        leader_of: Callable[[TopicPartition], int | None],
        *,
        now_ms: int,
        max_request_bytes: int,
        can_send: Callable[[ProducerBatch[H]], bool],
        in_flight: Container[TopicPartition] = (),
        max_request_records: int = limits.PRODUCE_REQUEST_RECORDS_MAX,
    ) -> dict[int, list[ProducerBatch[H]]]:
        """Take at most one batch per partition for each ready leader, up to
        ``max_request_bytes`` (uncompressed, so within the broker's
        PRODUCE_REQUEST_UNCOMPRESSED_BYTES_MAX too) and ``max_request_records`` per request
        (the broker refuses more, RECORD_LIST_TOO_LARGE; the first batch always goes, and a
        batch holds at most BATCH_RECORDS_MAX). The starting partition rotates between calls so
        no partition starves. Drained batches are closed to appends."""
        out: dict[int, list[ProducerBatch[H]]] = {}
        sizes: dict[int, int] = {}
        counts: dict[int, int] = {}
        tps = list(self._batches)
        if not tps:
            return out
        self._drain_start %= len(tps)
        order = tps[self._drain_start :] + tps[: self._drain_start]
        self._drain_start += 1
        for tp in order:
            dq = self._batches[tp]
            if not dq:
                continue
            leader = leader_of(tp)
            if leader is None or leader not in ready_nodes:
                continue
            first = dq[0]
            if self._backing_off(first, leader, now_ms):
                continue
            if tp in in_flight and self._held(dq):
                continue
            if not can_send(first):
                continue
            used, records = sizes.get(leader, 0), counts.get(leader, 0)
            if used and (used + first.size_bytes > max_request_bytes
                         or records + first.record_count > max_request_records):
                continue
            dq.popleft()
            first.closed = True
            first.attempts += 1
            first.last_attempt_ms = now_ms
            first.last_leader = leader
            out.setdefault(leader, []).append(first)
            sizes[leader] = used + first.size_bytes
            counts[leader] = records + first.record_count
        return out

    def _held(self, dq: deque[ProducerBatch[H]]) -> bool:
        """Whether a partition with a batch in flight keeps its next one back: it does while
        that batch is its only one, is not full and is not a retry, unless the producer is
        closing, flushing or out of memory. This is Nagle's rule per partition: at a low rate
        nothing is in flight and a record goes at once (``linger_ms=0``); under load records
        coalesce into one request per round trip instead of one request each, which costs the
        brokers far less (docs/decisions.md). Full batches are never held, so throughput is not
        capped by the round trip."""
        first = dq[0]
        return (len(dq) == 1 and not first.retry and not first.is_full(self.batch_size)
                and not (self._closed or self._flushes_in_progress > 0
                         or self._memory_waiters > 0))

    def retry_backoff_of(self, batch: ProducerBatch[H]) -> int:
        """How long a retried batch waits after its last attempt (exponential, capped)."""
        exponent = min(max(batch.attempts - 1, 0), 30)
        return int(min(self.retry_backoff_ms * 2**exponent, self.retry_backoff_max_ms))

    def _backing_off(self, batch: ProducerBatch[H], leader: int, now_ms: int) -> bool:
        if not batch.retry or leader != batch.last_leader:
            return False
        return now_ms - batch.last_attempt_ms < self.retry_backoff_of(batch)

    def reenqueue(self, batch: ProducerBatch[H], *, now_ms: int) -> None:
        """Put a batch back for a retry, ahead of the partition's newer batches; batches with
        sequences stay in sequence order so the leader sees no gap."""
        batch.retry = True
        batch.closed = True
        batch.last_attempt_ms = now_ms
        dq = self._batches.setdefault(batch.tp, deque())
        index = 0
        if batch.has_sequence:
            for index, other in enumerate(dq):  # noqa: B007 - the index is the result
                if not other.has_sequence or sequence_before(batch.base_sequence,
                                                             other.base_sequence):
                    break
            else:
                index = len(dq)
        dq.insert(index, batch)

    def expire(self, now_ms: int) -> list[ProducerBatch[H]]:
        """Remove and return queued batches older than ``delivery_timeout_ms`` (to be failed)."""
        expired: list[ProducerBatch[H]] = []
        oldest_allowed = now_ms - self.delivery_timeout_ms
        for dq in self._batches.values():
            # Runs every sender turn over every partition: no list built unless one expires.
            for b in dq:
                if b.created_ms <= oldest_allowed:
                    break
            else:
                continue
            keep = [b for b in dq if now_ms - b.created_ms < self.delivery_timeout_ms]
            if len(keep) != len(dq):
                expired.extend(b for b in dq if now_ms - b.created_ms >= self.delivery_timeout_ms)
                dq.clear()
                dq.extend(keep)
        for b in expired:
            b.closed = True
        return expired

    # ------------------------------------------------------------------ flush and close
    def begin_flush(self) -> None:
        self._flushes_in_progress += 1

    def end_flush(self) -> None:
        check(self._flushes_in_progress > 0, "end_flush without begin_flush")
        self._flushes_in_progress -= 1

    def close(self) -> None:
        """No more appends; every queued batch is ready from now on."""
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def remove(self, batch: ProducerBatch[H]) -> bool:
        """Take one queued batch out (to fail it); False when it is not queued."""
        dq = self._batches.get(batch.tp)
        if dq is None or batch not in dq:
            return False
        dq.remove(batch)
        batch.closed = True
        return True

    def abort_all(self) -> list[ProducerBatch[H]]:
        """Remove and return every queued batch (a forced close fails them)."""
        out = [b for dq in self._batches.values() for b in dq]
        for dq in self._batches.values():
            dq.clear()
        for b in out:
            b.closed = True
        return out

    def has_undrained(self) -> bool:
        return any(self._batches.values())

    def queued(self, tp: TopicPartition) -> list[ProducerBatch[H]]:
        """The partition's queued batches, oldest first (for tests and diagnostics)."""
        return list(self._batches.get(tp, ()))

    def __iter__(self) -> Iterator[ProducerBatch[H]]:
        for dq in self._batches.values():
            yield from dq
