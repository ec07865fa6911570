"""Log compaction: Kafka's LogCleaner for one partition log (topics with cleanup.policy=compact).

A pass over one partition, as Kafka's cleaner does it:

1. **The cleanable range** (:func:`cleanable_range`, pure, from the segment index alone): whole
   segments from the log start, never the active (last) segment, never a segment reaching past
   the high watermark (HW), never one whose largest timestamp is younger than
   ``min.compaction.lag.ms``. Its dirty part starts at the cleaner checkpoint (where the last pass
   ended, possibly inside a segment).
2. **The offset map**: key -> offset of its latest record in the dirty part (records decoded,
   CRCs checked), and the last batch of each idempotent producer in the range. The map takes
   dirty batches while their records and uncompressed bytes (from their headers) stay within
   ``limits.CLEANER_PASS_DIRTY_RECORDS_MAX`` / ``CLEANER_PASS_DIRTY_UNCOMPRESSED_BYTES_MAX``
   (always one batch); the range ends before the first that does not fit, and the next pass
   takes the rest. A compressed byte may hold many records, so compressed bytes bound nothing.
3. **The rewrite** of every batch in [log start, end of range): a record stays when no later
   record has its key, a tombstone (null value) stays until its batch is older than
   ``delete.retention.ms``, a record without a key always stays. Offsets are kept: the surviving
   records of a batch are rebuilt as batches of consecutive offsets at their own offsets, with the
   header fields of the old batch (producer id and epoch, leader epoch, append time, the base
   sequence advanced by the offset delta); consumers see gaps. A batch that loses every record
   disappears -- except the last batch of each producer id, which is kept whole so the producer
   state rebuilt from the log still recognises a retry of it (Kafka keeps that batch's header; our
   batch format cannot hold a batch without records, see docs/decisions.md).
4. **Crash safety**: old batches are replaced in groups of ``limits.CLEANER_GROUP_BYTES_MAX`` bytes,
   each ONE RocksDB write batch with the resized segment entries (``PartitionLog.replace_batches``);
   the last group also writes the checkpoint. A kill -9 leaves every batch old or new, and a new
   pass from the old checkpoint gives the same result (rewriting a cleaned batch is a no-op).
   Readers use RocksDB iterators (consistent snapshots), so they never see half a group.

:func:`choose_partitions_to_clean` (pure) picks which partitions need a pass: dirty ratio at least
``min.cleanable.dirty.ratio``, or dirty data older than ``max.compaction.lag.ms``. No clock here:
the caller passes ``now_ms``.

**Off the event loop.** :func:`clean_log` is a coroutine: it reads stored batches and writes
groups on the caller's thread (the event loop: a PartitionLog is used from one thread), a
``limits.CLEANER_READ_BYTES_MAX`` read at a time, and hands all decoding and rebuilding to
``offload`` (the broker's cleaner thread). Between its awaits the log may change: truncation,
retention or deletion (``PartitionLog.generation``) end the pass before its next write, and the
next pass starts over from the checkpoint (every group written so far is whole and right).
A batch that does not decode (stored before the leader checked records at produce) raises
CorruptMessageError out of the pass: the broker then skips that partition, not the cleaner.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from tidelog import limits
from tidelog.broker.storage.keys import TopicPartition
from tidelog.broker.storage.partition_log import BatchRewrite, PartitionLog
from tidelog.broker.storage.segments import Segment
from tidelog.record_batch import (
    ConsumerRecord,
    RecordBatch,
    RecordsBuilder,
    batch_crc,
    checked_records,
    next_offset,
    parse_batch,
    to_consumer_record,
    validate_batch,
)

__all__ = [
    "DEFAULT_BUDGET",
    "CleanableRange",
    "CleanerBudget",
    "CleanerConfig",
    "CleanerStats",
    "CleaningCandidate",
    "choose_partitions_to_clean",
    "clean_log",
    "cleanable_range",
    "cleaning_candidate",
    "run_here",
]

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
_SEQUENCE_WRAP = 1 << 31  # sequences are int32s that wrap to 0 (Kafka's incrementSequence)
_OffsetMap = dict[bytes, int]


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """A topic's cleaner configs (Kafka's names and defaults)."""

    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86_400_000

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError(f"min.cleanable.dirty.ratio must be in [0, 1]: "
                             f"{self.min_cleanable_dirty_ratio}")
        if self.min_compaction_lag_ms < 0 or self.delete_retention_ms < 0:
            raise ValueError("min.compaction.lag.ms and delete.retention.ms must be >= 0")
        if self.max_compaction_lag_ms < 1:
            raise ValueError(f"max.compaction.lag.ms must be >= 1: {self.max_compaction_lag_ms}")


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """What a pass would clean: [log start, end_offset), dirty from first_dirty_offset."""

    log_start_offset: int
    first_dirty_offset: int
    end_offset: int  # exclusive, a segment boundary
    clean_bytes: int
    dirty_bytes: int
    #: Append time of the first dirty segment's first batch (-1: nothing dirty).
    first_dirty_append_time_ms: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanable_range(
    segments: Sequence[Segment],
    *,
    log_start_offset: int,
    high_watermark: int,
    cleaner_checkpoint: int,
    now_ms: int,
    min_compaction_lag_ms: int,
) -> CleanableRange:
    """The range a pass may clean, from the segment index alone (Kafka's cleanableOffsets).

    Whole segments before the active one, each wholly below the HW and, when
    ``min_compaction_lag_ms`` > 0, with its largest timestamp at least that old. Segments ending at
    or before the checkpoint are clean; the rest are dirty, from the checkpoint (a pass cut by
    its budget leaves it inside a segment, whose bytes then count as dirty).
    """
    checkpoint = max(cleaner_checkpoint, log_start_offset)
    clean = dirty = 0
    first_dirty = end = checkpoint
    first_dirty_time = -1
    for segment in segments[:-1]:
        if segment.next_offset > high_watermark:
            break
        if min_compaction_lag_ms > 0 and now_ms - segment.max_timestamp_ms < min_compaction_lag_ms:
            break
        if segment.next_offset <= log_start_offset:
            continue
        if segment.next_offset <= checkpoint:
            clean += segment.size_bytes
            end = segment.next_offset
            continue
        if first_dirty_time < 0:
            first_dirty = max(segment.base_offset, checkpoint)
            first_dirty_time = segment.first_append_time_ms
        dirty += segment.size_bytes
        end = segment.next_offset
    if first_dirty_time < 0:
        first_dirty = end = min(end, checkpoint)
    return CleanableRange(log_start_offset, first_dirty, end, clean, dirty, first_dirty_time)


@dataclass(frozen=True, slots=True)
class CleaningCandidate:
    """A compacted partition, its cleanable range now, and its topic's cleaner configs."""

    topic_partition: TopicPartition
    cleanable: CleanableRange
    config: CleanerConfig


def cleaning_candidate(
    partition_log: PartitionLog, config: CleanerConfig, *, now_ms: int,
) -> CleaningCandidate:
    """The partition's cleanable range now (one point read for the checkpoint, no scan)."""
    cleanable = cleanable_range(
        partition_log.segments,
        log_start_offset=partition_log.log_start_offset,
        high_watermark=partition_log.high_watermark,
        cleaner_checkpoint=partition_log.cleaner_checkpoint(),
        now_ms=now_ms,
        min_compaction_lag_ms=config.min_compaction_lag_ms,
    )
    return CleaningCandidate(partition_log.topic_partition, cleanable, config)


def _max_lag_exceeded(candidate: CleaningCandidate, now_ms: int) -> bool:
    first = candidate.cleanable.first_dirty_append_time_ms
    return first >= 0 and now_ms - first > candidate.config.max_compaction_lag_ms


def choose_partitions_to_clean(
    candidates: Sequence[CleaningCandidate], *, now_ms: int, count_max: int = 1
) -> list[CleaningCandidate]:
    """Which partitions to clean next, at most ``count_max`` (Kafka's grabFilthiestCompactedLog):
    those with dirty bytes whose dirty ratio reaches min.cleanable.dirty.ratio or whose oldest
    dirty data is older than max.compaction.lag.ms; the overdue first, then the dirtiest."""
    eligible = [
        c for c in candidates
        if c.cleanable.dirty_bytes > 0
        and (c.cleanable.dirty_ratio >= c.config.min_cleanable_dirty_ratio
             or _max_lag_exceeded(c, now_ms))
    ]
    eligible.sort(key=lambda c: (not _max_lag_exceeded(c, now_ms), -c.cleanable.dirty_ratio,
                                 c.topic_partition))
    return eligible[:count_max]


@dataclass(frozen=True, slots=True)
class CleanerBudget:
    """What one pass may read into its offset map, and how it reads and writes (module doc)."""

    dirty_records_max: int = limits.CLEANER_PASS_DIRTY_RECORDS_MAX
    dirty_bytes_max: int = limits.CLEANER_PASS_DIRTY_UNCOMPRESSED_BYTES_MAX
    read_bytes_max: int = limits.CLEANER_READ_BYTES_MAX
    group_bytes_max: int = limits.CLEANER_GROUP_BYTES_MAX


DEFAULT_BUDGET = CleanerBudget()


@dataclass(slots=True)
class CleanerStats:
    """What one pass did (logs and metrics)."""

    first_dirty_offset: int
    end_offset: int
    dirty_ratio: float
    bytes_read: int = 0  # stored (compressed) bytes of the dirty batches in the map
    uncompressed_bytes_read: int = 0  # and their uncompressed bytes
    records_read: int = 0  # and their records
    bytes_before: int = 0  # of the batches it replaced
    bytes_after: int = 0  # of their replacements
    batches_rewritten: int = 0
    records_removed: int = 0
    groups_written: int = 0


T = TypeVar("T")


class Offload(Protocol):
    """Runs ``work`` somewhere (the broker's cleaner thread) and returns its result."""

    def __call__(self, work: Callable[[], T], /) -> Awaitable[T]: ...


async def run_here(work: Callable[[], T], /) -> T:
    """An :class:`Offload` that runs the work at once, on the caller's thread (tests)."""
    return work()


class LogChangedError(Exception):
    """The log was truncated, retained or deleted while a pass awaited: the pass ends."""


async def clean_log(
    partition_log: PartitionLog,
    config: CleanerConfig,
    *,
    now_ms: int,
    offload: Offload = run_here,
    budget: CleanerBudget = DEFAULT_BUDGET,
) -> CleanerStats | None:
    """One cleaner pass over ``partition_log``; None when nothing is dirty in its cleanable
    range or the log changed meanwhile (module doc). Raises what storage raises
    (KafkaStorageErrorError, CorruptMessageError for a batch that fails its CRC or does not
    decode): the log is then as the last written group left it, and a new pass resumes.
    """
    cleanable = cleaning_candidate(partition_log, config, now_ms=now_ms).cleanable
    if cleanable.dirty_bytes == 0:
        return None
    stats = CleanerStats(cleanable.first_dirty_offset, cleanable.end_offset,
                         cleanable.dirty_ratio)
    generation = partition_log.generation
    try:
        offset_map, producer_last = await _build_offset_map(
            partition_log, cleanable, budget, stats, offload, generation)
        await _rewrite(partition_log, cleanable.log_start_offset, stats.end_offset, offset_map,
                       producer_last, now_ms - config.delete_retention_ms, budget, stats,
                       offload, generation)
    except LogChangedError:
        log.info("%s: the log was truncated or retained during a cleaner pass; the next pass "
                 "starts over", partition_log.topic_partition)
        return None
    log.info("%s: cleaned [%d, %d) (dirty from %d, ratio %.2f): %d batches rewritten, %d records "
             "removed, %d -> %d bytes in %d groups", partition_log.topic_partition,
             cleanable.log_start_offset, stats.end_offset, cleanable.first_dirty_offset,
             cleanable.dirty_ratio, stats.batches_rewritten, stats.records_removed,
             stats.bytes_before, stats.bytes_after, stats.groups_written)
    return stats


def _read(partition_log: PartitionLog, generation: int, start: int, end: int,
          max_bytes: int) -> list[tuple[int, RecordBatch, int]]:
    """The next stored batches in [start, end), parsed: (base offset, header, stored size)."""
    if partition_log.generation != generation:
        raise LogChangedError
    return [(base, parse_batch(data), len(data))
            for base, data in partition_log.read_batches(start, end, max_bytes)]


async def _build_offset_map(
    partition_log: PartitionLog, cleanable: CleanableRange, budget: CleanerBudget,
    stats: CleanerStats, offload: Offload, generation: int,
) -> tuple[_OffsetMap, dict[int, int]]:
    """key -> latest offset over the dirty part, within the budget (``stats.end_offset`` is cut
    where it ran out); producer id -> base offset of its last batch in the range (headers only
    below the dirty part)."""
    offset_map: _OffsetMap = {}
    producer_last: dict[int, int] = {}
    start, end = 0, cleanable.end_offset
    while start < end:
        chunk = _read(partition_log, generation, start, end, budget.read_bytes_max)
        if not chunk:
            break
        dirty: list[RecordBatch] = []
        for base, batch, size in chunk:
            if base >= cleanable.first_dirty_offset:
                if stats.records_read and (
                        stats.records_read + batch.record_count > budget.dirty_records_max
                        or stats.uncompressed_bytes_read + batch.uncompressed_size
                        > budget.dirty_bytes_max):
                    end = start = base  # the rest is the next pass's
                    break
                stats.records_read += batch.record_count
                stats.uncompressed_bytes_read += batch.uncompressed_size
                stats.bytes_read += size
                dirty.append(batch)
            if batch.producer_id >= 0:
                producer_last[batch.producer_id] = base
            start = next_offset(batch)
        if dirty:
            await offload(functools.partial(_add_to_map, offset_map, dirty))
    stats.end_offset = end
    return offset_map, producer_last


# The cleaner's thread reads records as protobuf messages (record_batch.checked_records): each
# is read on access and dropped, where decode_records would keep an object per record alive at
# once -- 500,000 of them for one batch here, and the garbage collector's full passes over them
# held the GIL (and so the event loop) 100-200 ms each.

def _add_to_map(offset_map: _OffsetMap, batches: list[RecordBatch]) -> None:
    """Read ``batches`` (checked: CorruptMessageError) into the map: each key's latest offset."""
    for batch in batches:
        base = batch.base_offset
        for index, record in enumerate(checked_records(batch)):
            if record.HasField("key"):
                offset_map[record.key] = base + index


def _keep(record: Any, offset: int, offset_map: _OffsetMap, drop_tombstone: bool) -> bool:
    """Whether a record (a protobuf ``Record``) at ``offset`` survives the pass."""
    if not record.HasField("key"):
        return True  # Kafka refuses keyless records in compacted topics; never lose one here
    latest = offset_map.get(record.key)
    if latest is not None and latest != offset:
        return False
    return not (drop_tombstone and not record.HasField("value"))


@dataclass(frozen=True, slots=True)
class _Cleaned:
    """One batch that loses records: its replacements and what the pass counts of it."""

    base_offset: int
    old_bytes: int
    replacements: tuple[tuple[int, bytes], ...]
    records_removed: int


def _clean_batches(chunk: list[tuple[int, RecordBatch, int]], offset_map: _OffsetMap,
                   producer_last: dict[int, int], drop_tombstones_before_ms: int
                   ) -> list[_Cleaned]:
    """The batches of ``chunk`` that lose records, rebuilt (the cleaner thread's work)."""
    out: list[_Cleaned] = []
    for base, batch, size in chunk:
        if batch.producer_id >= 0 and producer_last.get(batch.producer_id) == base:
            continue  # a producer's last batch stays whole (idempotence, see the docstring)
        drop = batch.log_append_time_ms < drop_tombstones_before_ms
        kept = [to_consumer_record(batch, i, r) for i, r in enumerate(checked_records(batch))
                if _keep(r, base + i, offset_map, drop)]
        if len(kept) != batch.record_count:  # checked_records holds exactly that many
            out.append(_Cleaned(base, size, _rebuild(batch, kept),
                                batch.record_count - len(kept)))
    return out


async def _rewrite(
    partition_log: PartitionLog,
    log_start_offset: int,
    end: int,
    offset_map: _OffsetMap,
    producer_last: dict[int, int],
    drop_tombstones_before_ms: int,
    budget: CleanerBudget,
    stats: CleanerStats,
    offload: Offload,
    generation: int,
) -> None:
    """Replace every batch below ``end`` that loses records, group by group; the last group
    carries the checkpoint (written even when nothing changed, so the range counts as clean).
    Each write follows a check of the log's generation with no await between them."""
    segments = partition_log.segments
    sizes = {s.base_offset: s.size_bytes for s in segments}
    index = 0
    pending: list[BatchRewrite] = []
    touched: set[int] = set()
    pending_bytes = 0
    start = 0
    while start < end:
        chunk = _read(partition_log, generation, start, end, budget.read_bytes_max)
        if not chunk:
            break
        start = next_offset(chunk[-1][1])
        cleaned = await offload(functools.partial(
            _clean_batches, chunk, offset_map, producer_last, drop_tombstones_before_ms))
        if partition_log.generation != generation:
            raise LogChangedError
        for batch in cleaned:
            while segments[index].next_offset <= batch.base_offset:
                index += 1
            new_bytes = sum(len(d) for _, d in batch.replacements)
            segment_base = segments[index].base_offset
            sizes[segment_base] += new_bytes - batch.old_bytes
            touched.add(segment_base)
            pending.append(BatchRewrite(batch.base_offset, batch.replacements))
            pending_bytes += batch.old_bytes
            stats.batches_rewritten += 1
            stats.records_removed += batch.records_removed
            stats.bytes_before += batch.old_bytes
            stats.bytes_after += new_bytes
            if pending_bytes >= budget.group_bytes_max:
                partition_log.replace_batches(pending, segment_sizes={b: sizes[b] for b in touched},
                                              cleaner_checkpoint=None)
                stats.groups_written += 1
                pending, touched, pending_bytes = [], set(), 0
    if partition_log.generation != generation:
        raise LogChangedError
    partition_log.replace_batches(pending, segment_sizes={b: sizes[b] for b in touched},
                                  cleaner_checkpoint=end)
    stats.groups_written += 1


def _rebuild(batch: RecordBatch, kept: list[ConsumerRecord]) -> tuple[tuple[int, bytes], ...]:
    """The kept records as batches of consecutive offsets, each at its own offset with the old
    batch's header fields (base sequence advanced by the offset delta), CRC recomputed."""
    runs: list[list[ConsumerRecord]] = []
    for record in kept:
        if runs and runs[-1][-1].offset + 1 == record.offset:
            runs[-1].append(record)
        else:
            runs.append([record])
    return tuple((run[0].offset, _build_run(batch, run)) for run in runs)


def _build_run(batch: RecordBatch, run: list[ConsumerRecord]) -> bytes:
    builder = RecordsBuilder()
    for record in run:
        builder.append(record.key, record.value, record.headers, record.timestamp_ms)
    delta = run[0].offset - batch.base_offset
    sequence = (-1 if batch.base_sequence < 0
                else (batch.base_sequence + delta) % _SEQUENCE_WRAP)
    rebuilt = parse_batch(builder.build(
        compression=batch.compression,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=sequence,
        max_bytes=limits.GRPC_MESSAGE_BYTES_MAX,
    ))
    rebuilt.base_offset = run[0].offset
    rebuilt.partition_leader_epoch = batch.partition_leader_epoch
    rebuilt.log_append_time_ms = batch.log_append_time_ms
    if rebuilt.timestamp_type != batch.timestamp_type:
        rebuilt.timestamp_type = batch.timestamp_type
        rebuilt.crc = batch_crc(rebuilt)
    data: bytes = rebuilt.SerializeToString()
    validate_batch(data, max_bytes=limits.GRPC_MESSAGE_BYTES_MAX)  # checked when made
    return data
