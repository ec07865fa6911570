"""Idempotent producers: per partition, the last batches of each producer id (DESIGN §9).

Kafka's ProducerStateManager, pure. For every producer id the table keeps its producer epoch
and the metadata of its last ``PRODUCER_BATCHES_CACHED`` (5, Kafka's NumBatchesToRetain)
batches: first/last sequence and first/last offset. The leader checks each incoming idempotent
batch against it (:meth:`ProducerStateTable.check`):

* a retry of a cached batch (same epoch, same first and last sequence) is a ``Duplicate``: answer
  with its original offsets, append nothing (acks=all still waits for HW > its last offset);
* an older producer epoch is INVALID_PRODUCER_EPOCH (Kafka 2.7+, KIP-588; PRODUCER_FENCED is a
  transaction coordinator's answer, not a partition leader's);
* a newer epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER;
* the same epoch must continue at last sequence + 1 (int32 max wraps to 0); a batch wholly
  before the cached window is DUPLICATE_SEQUENCE_NUMBER (a duplicate whose offset is forgotten,
  common.proto), anything else OUT_OF_ORDER_SEQUENCE_NUMBER;
* an unknown producer id is accepted at any sequence, as Kafka 2.5+ does (KIP-360): its state
  may have expired or never reached this replica, so UNKNOWN_PRODUCER_ID is never returned;
* producer id -1 (not idempotent) bypasses every check.

Every replica -- leader and followers -- feeds every appended batch header to
:meth:`~ProducerStateTable.on_append` *after* the append succeeded, so a new leader already
has the state. How the shell keeps it durable (``PartitionLog.put_producer_state``)::

    on an interval and at clean shutdown:  log.put_producer_state(table.encode())
    at open:   table = ProducerStateTable.decode(blob) if blob else ProducerStateTable()
               table.truncate_to(log.log_end_offset)      # the snapshot may be newer
               table.replay(headers of the batches in [max(table.end_offset, log start), LEO))
    after TruncateTo:                table.truncate_to(log.log_end_offset)
    after TruncateFullyAndStartAt:   table.truncate_fully_and_start_at(offset)
    on a timer:                      table.maybe_expire(now_ms)

``truncate_to`` keeps what the cached batches prove and forgets producers whose every cached
batch was cut (they become unknown, so accepted at any sequence); a shell that wants exact state
re-scans with :meth:`~ProducerStateTable.rebuild`. The table is bounded: at most
``producers_max`` producer ids, least recently appended evicted first, and ids idle for
``producer.id.expiration.ms`` (Kafka: 1 day) dropped by ``maybe_expire``.
"""

from __future__ import annotations

import struct
import zlib
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from tidelog import invariants, limits
from tidelog.errors import (
    DuplicateSequenceNumberError,
    InvalidProducerEpochError,
    InvalidRecordError,
    OutOfOrderSequenceNumberError,
    TidelogError,
)
from tidelog.invariants import InvariantViolation

__all__ = [
    "NO_PRODUCER_ID",
    "PRODUCERS_PER_PARTITION_MAX",
    "PRODUCER_BATCHES_CACHED",
    "PRODUCER_EPOCH_MAX",
    "PRODUCER_ID_EXPIRATION_MS_DEFAULT",
    "SEQUENCE_MAX",
    "Accept",
    "BatchHeader",
    "BatchMetadata",
    "Duplicate",
    "ProducerCheck",
    "ProducerEntry",
    "ProducerStateTable",
    "Reject",
    "next_sequence",
]

NO_PRODUCER_ID = -1
#: Sequences are int32 >= 0; the one after SEQUENCE_MAX is 0 (Kafka's incrementSequence).
SEQUENCE_MAX = 2**31 - 1
_SEQUENCE_SPACE = SEQUENCE_MAX + 1
#: Producer epochs are int16 >= 0.
PRODUCER_EPOCH_MAX = 2**15 - 1
#: Kafka's ProducerStateEntry.NumBatchesToRetain: a producer keeps up to 5 batches in flight.
PRODUCER_BATCHES_CACHED = 5
#: Producer ids remembered per partition (Kafka has no bound; ~1 KiB each in memory).
PRODUCERS_PER_PARTITION_MAX = 10_000
#: Kafka's producer.id.expiration.ms default: 1 day.
PRODUCER_ID_EXPIRATION_MS_DEFAULT = 86_400_000

assert limits.BATCH_RECORDS_MAX < _SEQUENCE_SPACE // 2

_HEADER = struct.Struct(">2sBqI")  # magic, version, end_offset, producer count
_ENTRY = struct.Struct(">qhqB")  # producer id, epoch, last timestamp, batch count
_BATCH = struct.Struct(">iiqq")  # first seq, last seq, base offset, last offset
_TRAILER = struct.Struct(">I")  # CRC-32 of everything before it
_MAGIC = b"PS"
_VERSION = 1


def next_sequence(sequence: int, increment: int = 1) -> int:
    """``sequence + increment`` in the int32 sequence space (wraps past SEQUENCE_MAX to 0)."""
    return (sequence + increment) % _SEQUENCE_SPACE


def _is_before(sequence: int, other: int) -> bool:
    """True when ``sequence`` comes before ``other`` within half the (wrapping) space."""
    distance = (other - sequence) % _SEQUENCE_SPACE
    return 0 < distance < _SEQUENCE_SPACE // 2


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Kafka's BatchMetadata: one appended batch of a producer."""

    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """What the table needs from a stored batch's header (RecordBatch, common.proto).

    ``timestamp_ms`` is the batch's ``log_append_time_ms`` (the leader's clock at append, the
    same on every replica), so all replicas age producers alike.
    """

    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    base_offset: int
    timestamp_ms: int


@dataclass(slots=True)
class ProducerEntry:
    """One producer id: its epoch and its last batches (oldest first)."""

    producer_id: int
    producer_epoch: int
    last_timestamp_ms: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=PRODUCER_BATCHES_CACHED))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


@dataclass(frozen=True, slots=True)
class Accept:
    """Append the batch, then call ``on_append``."""


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of an appended batch: answer with these offsets and append nothing."""

    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class Reject:
    error: TidelogError


ProducerCheck = Accept | Duplicate | Reject
_ACCEPT = Accept()


class ProducerStateTable:
    """The producer state of one partition replica (see the module doc)."""

    def __init__(
        self,
        *,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
        producers_max: int = PRODUCERS_PER_PARTITION_MAX,
    ) -> None:
        assert producer_id_expiration_ms > 0, producer_id_expiration_ms
        assert 0 < producers_max <= PRODUCERS_PER_PARTITION_MAX, producers_max
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers_max = producers_max
        # Least recently appended first: eviction pops from the front.
        self._producers: OrderedDict[int, ProducerEntry] = OrderedDict()
        self._end_offset = 0

    @property
    def end_offset(self) -> int:
        """Every batch below this offset has been applied (the log's LEO when in step)."""
        return self._end_offset

    def __len__(self) -> int:
        return len(self._producers)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        """A copy of one producer's entry, or None."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return None
        return ProducerEntry(entry.producer_id, entry.producer_epoch, entry.last_timestamp_ms,
                             deque(entry.batches, maxlen=PRODUCER_BATCHES_CACHED))

    # --- leader: validation ------------------------------------------------------------------

    def check(
        self, *, producer_id: int, producer_epoch: int, base_sequence: int, record_count: int
    ) -> ProducerCheck:
        """Validate an incoming batch on the leader, before the append (Kafka's
        findDuplicateBatch, then checkProducerEpoch and checkSequence)."""
        if producer_id == NO_PRODUCER_ID:
            return _ACCEPT
        problem = _header_problem(producer_id, producer_epoch, base_sequence, record_count)
        if problem is not None:
            return Reject(InvalidRecordError(problem))
        entry = self._producers.get(producer_id)
        if entry is None:
            # A producer this partition does not know must start at sequence 0. Kafka (2.5+)
            # accepts any sequence here because one connection delivers a producer's requests in
            # order; gRPC runs concurrent calls concurrently, so a producer's second in-flight
            # batch can arrive first. Accepting it wrote it at the log's end and made the first
            # batch a "duplicate" of nothing (acknowledged, never written). A batch that is not
            # the producer's first in flight is retried once the earlier one lands; a first
            # unacknowledged batch refused here means the leader lost the producer's state
            # (expiry, eviction), and the client bumps its epoch and restarts at 0 (KIP-360).
            if base_sequence == 0:
                return _ACCEPT
            return Reject(OutOfOrderSequenceNumberError(
                f"producer {producer_id} is not known on this partition: its first batch must "
                f"have sequence 0, got {base_sequence} (a batch sent earlier has not arrived, "
                "or this leader no longer has the producer's state)"))
        last_seq = next_sequence(base_sequence, record_count - 1)
        current = entry.producer_epoch
        if producer_epoch == current:
            duplicate = entry.find_duplicate(base_sequence, last_seq)
            if duplicate is not None:
                return Duplicate(duplicate.base_offset, duplicate.last_offset)
        if producer_epoch < current:
            return Reject(InvalidProducerEpochError(
                f"producer {producer_id}: epoch {producer_epoch} is older than {current}"))
        if producer_epoch > current:
            if base_sequence == 0:
                return _ACCEPT
            return Reject(OutOfOrderSequenceNumberError(
                f"producer {producer_id}: new epoch {producer_epoch} must start at sequence 0, "
                f"got {base_sequence}"))
        if base_sequence == next_sequence(entry.last_seq):
            return _ACCEPT
        if _is_before(last_seq, entry.batches[0].first_seq):
            return Reject(DuplicateSequenceNumberError(
                f"producer {producer_id}: sequences {base_sequence}..{last_seq} were appended "
                f"before the oldest remembered batch (sequence {entry.batches[0].first_seq})"))
        return Reject(OutOfOrderSequenceNumberError(
            f"producer {producer_id} epoch {producer_epoch}: expected sequence "
            f"{next_sequence(entry.last_seq)}, got {base_sequence}"))

    # --- every replica: appends, truncation, expiry ------------------------------------------

    def on_append(self, header: BatchHeader) -> None:
        """A batch was appended (leader after ``check``, follower after a fetch, recovery in
        ``replay``). Followers do not validate: the leader's log is the truth, and a stored
        batch was validated when it was appended -- a header that breaks that is a bug here,
        raised as InvariantViolation (never skipped, even under ``python -O``)."""
        if not (header.base_offset >= self._end_offset
                and 1 <= header.record_count <= limits.BATCH_RECORDS_MAX):
            raise InvariantViolation(
                f"batch {header} applied below the producer state's end {self._end_offset} "
                "or with a bad record count")
        if header.producer_id == NO_PRODUCER_ID:
            self._end_offset = header.base_offset + header.record_count
            return
        problem = _header_problem(header.producer_id, header.producer_epoch,
                                  header.base_sequence, header.record_count)
        if problem is not None:
            raise InvariantViolation(f"batch {header} applied to the producer state: {problem}")
        self._end_offset = header.base_offset + header.record_count
        entry = self._producers.get(header.producer_id)
        if entry is None:
            entry = self._add(header.producer_id, header.producer_epoch, header.timestamp_ms)
        else:
            self._producers.move_to_end(header.producer_id)
        if entry.producer_epoch != header.producer_epoch:
            # Kafka's maybeUpdateProducerEpoch: a new epoch forgets the old one's batches.
            entry.producer_epoch = header.producer_epoch
            entry.batches.clear()
        entry.last_timestamp_ms = max(entry.last_timestamp_ms, header.timestamp_ms)
        entry.batches.append(BatchMetadata(
            header.base_sequence,
            next_sequence(header.base_sequence, header.record_count - 1),
            header.base_offset,
            header.base_offset + header.record_count - 1,
        ))

    def _add(self, producer_id: int, producer_epoch: int, timestamp_ms: int) -> ProducerEntry:
        while len(self._producers) >= self.producers_max:
            self._producers.popitem(last=False)
        entry = ProducerEntry(producer_id, producer_epoch, timestamp_ms)
        self._producers[producer_id] = entry
        return entry

    def replay(self, headers: Iterable[BatchHeader]) -> None:
        """Apply stored batches in offset order (recovery, or after a truncation)."""
        for header in headers:
            self.on_append(header)

    @classmethod
    def rebuild(
        cls,
        headers: Iterable[BatchHeader],
        *,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
        producers_max: int = PRODUCERS_PER_PARTITION_MAX,
        start_offset: int = 0,
    ) -> ProducerStateTable:
        """A table from a scan of the log from ``start_offset`` (its log start offset)."""
        table = cls(producer_id_expiration_ms=producer_id_expiration_ms,
                    producers_max=producers_max)
        table._end_offset = start_offset
        table.replay(headers)
        return table

    def truncate_to(self, offset: int) -> None:
        """The log now ends at ``offset``: forget batches at or after it (a batch that holds
        ``offset`` is gone whole, as in the log). A producer left with no cached batch is
        forgotten: what came before its cached batches is not known here."""
        invariants.check(offset >= 0, f"producer state truncated to offset {offset}")
        if offset >= self._end_offset:
            return
        self._end_offset = offset
        for producer_id in list(self._producers):
            batches = self._producers[producer_id].batches
            while batches and batches[-1].last_offset >= offset:
                batches.pop()
            if not batches:
                del self._producers[producer_id]

    def truncate_fully_and_start_at(self, offset: int) -> None:
        invariants.check(offset >= 0, f"producer state restarted at offset {offset}")
        self._producers.clear()
        self._end_offset = offset

    def maybe_expire(self, now_ms: int) -> int:
        """Drop producers idle for producer.id.expiration.ms; returns how many."""
        deadline = now_ms - self.producer_id_expiration_ms
        expired = [p for p, e in self._producers.items() if e.last_timestamp_ms <= deadline]
        for producer_id in expired:
            del self._producers[producer_id]
        return len(expired)

    # --- persistence -------------------------------------------------------------------------

    def encode(self) -> bytes:
        """Compact bytes for ``PartitionLog.put_producer_state``: fixed struct layouts, entries
        in LRU order, a CRC-32 trailer."""
        parts = [_HEADER.pack(_MAGIC, _VERSION, self._end_offset, len(self._producers))]
        for entry in self._producers.values():
            parts.append(_ENTRY.pack(entry.producer_id, entry.producer_epoch,
                                     entry.last_timestamp_ms, len(entry.batches)))
            parts.extend(_BATCH.pack(b.first_seq, b.last_seq, b.base_offset, b.last_offset)
                         for b in entry.batches)
        body = b"".join(parts)
        return body + _TRAILER.pack(zlib.crc32(body))

    @classmethod
    def decode(
        cls,
        data: bytes,
        *,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
        producers_max: int = PRODUCERS_PER_PARTITION_MAX,
    ) -> ProducerStateTable:
        """The table ``encode`` wrote; ValueError for anything else (damage: rebuild it)."""
        if len(data) < _HEADER.size + _TRAILER.size:
            raise ValueError(f"producer state of {len(data)} bytes is too short")
        body = data[:-_TRAILER.size]
        (crc,) = _TRAILER.unpack_from(data, len(body))
        if zlib.crc32(body) != crc:
            raise ValueError("producer state fails its CRC")
        magic, version, end_offset, count = _HEADER.unpack_from(body)
        if magic != _MAGIC or version != _VERSION or end_offset < 0:
            raise ValueError(f"not a producer state v{_VERSION}: {magic!r} v{version}")
        table = cls(producer_id_expiration_ms=producer_id_expiration_ms,
                    producers_max=producers_max)
        table._end_offset = end_offset
        position = _HEADER.size
        for _ in range(count):
            entry, position = _decode_entry(body, position, end_offset)
            if entry.producer_id in table._producers:
                raise ValueError(f"producer {entry.producer_id} appears twice")
            table._producers[entry.producer_id] = entry
        if position != len(body):
            raise ValueError(f"{len(body) - position} trailing bytes in producer state")
        while len(table._producers) > producers_max:
            table._producers.popitem(last=False)
        return table


def _decode_entry(body: bytes, position: int, end_offset: int) -> tuple[ProducerEntry, int]:
    if position + _ENTRY.size > len(body):
        raise ValueError("producer state is truncated")
    producer_id, epoch, timestamp_ms, batch_count = _ENTRY.unpack_from(body, position)
    position += _ENTRY.size
    if not 1 <= batch_count <= PRODUCER_BATCHES_CACHED or position + batch_count * _BATCH.size \
            > len(body):
        raise ValueError(f"producer {producer_id}: bad batch count {batch_count}")
    entry = ProducerEntry(producer_id, epoch, timestamp_ms)
    previous_last = -1
    for _ in range(batch_count):
        batch = BatchMetadata(*_BATCH.unpack_from(body, position))
        position += _BATCH.size
        count = batch.last_offset - batch.base_offset + 1
        problem = _header_problem(producer_id, epoch, batch.first_seq, count)
        if (problem is not None or batch.base_offset <= previous_last
                or batch.last_offset >= end_offset
                or batch.last_seq != next_sequence(batch.first_seq, count - 1)):
            raise ValueError(f"producer {producer_id}: bad batch {batch} ({problem})")
        previous_last = batch.last_offset
        entry.batches.append(batch)
    return entry, position


def _header_problem(
    producer_id: int, producer_epoch: int, base_sequence: int, record_count: int
) -> str | None:
    if producer_id < 0:
        return f"producer id {producer_id} is negative"
    if not 0 <= producer_epoch <= PRODUCER_EPOCH_MAX:
        return f"producer epoch {producer_epoch} outside [0, {PRODUCER_EPOCH_MAX}]"
    if not 0 <= base_sequence <= SEQUENCE_MAX:
        return f"base sequence {base_sequence} outside [0, {SEQUENCE_MAX}]"
    if not 1 <= record_count <= limits.BATCH_RECORDS_MAX:
        return f"record count {record_count} outside [1, {limits.BATCH_RECORDS_MAX}]"
    return None
