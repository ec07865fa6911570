"""The log of one partition: batches by offset in RocksDB, plus the state that describes them.

A PartitionLog appends whole record batches at the log end offset (LEO), serves fetches of whole
batches, keeps the high watermark (HW), the log start offset, the leader-epoch cache and a segment
index, truncates for followers and applies retention. Every change is ONE RocksDB write batch
holding the data and every piece of state it alters, so a process killed at any instant reopens
with the log and its state agreeing (the WAL is always on).

The in-memory fields change only after their write succeeded, so a failed write (raised as
KafkaStorageErrorError) leaves the object as it was. Not thread-safe: the broker serialises the
calls for one partition (one event loop), as Kafka's Log takes its lock.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Generator, Mapping, Sequence
from typing import NamedTuple

from tidelog import limits
from tidelog.broker.storage.config import LogConfig
from tidelog.broker.storage.epoch_cache import LeaderEpochCache
from tidelog.broker.storage.keys import CLEANER_CHECKPOINT, META, PartitionKeys, TopicPartition
from tidelog.broker.storage.rocks import Column, RocksStore, StoreWriteBatch
from tidelog.broker.storage.segments import Segment, plan_retention, should_roll
from tidelog.errors import (
    FencedLeaderEpochError,
    InvalidFetchSizeError,
    KafkaStorageErrorError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from tidelog.invariants import InvariantViolation
from tidelog.record_batch import (
    RecordBatch,
    assign,
    checked_records,
    next_offset,
    parse_batch,
    validate_batch,
)
from tidelog.v1.common_pb2 import TimestampType

__all__ = [
    "AppendInfo",
    "BatchRewrite",
    "EpochEndOffset",
    "FetchDataInfo",
    "OffsetAndTimestamp",
    "PartitionLog",
]

_LOG = Column.LOG
_STATE = Column.PARTITION_STATE
_PRODUCER = Column.PRODUCER_STATE
_LOG_APPEND_TIME = TimestampType.LOG_APPEND_TIME
#: A follower re-checks batches against the largest size any topic may configure: the leader
#: already applied the topic's own max.message.bytes.
FOLLOWER_BATCH_BYTES_MAX = limits.MESSAGE_BYTES_MAX_CONFIGURABLE


class AppendInfo(NamedTuple):
    """Where an appended batch landed. ``log_append_time_ms`` is the append's clock reading."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int


class FetchDataInfo(NamedTuple):
    """Whole batches from a read, with the log's offsets as they were at that read."""

    batches: list[bytes]
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class EpochEndOffset(NamedTuple):
    """KIP-279's answer: the largest epoch <= the asked one, and where it ends (-1, -1: none)."""

    leader_epoch: int
    end_offset: int


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp_ms: int
    leader_epoch: int


class BatchRewrite(NamedTuple):
    """The log cleaner's replacement of one stored batch: the batch keyed ``base_offset`` goes,
    ``replacements`` -- (base offset, batch bytes), each base offset within the old batch's
    offsets -- take its place (none: every record of it was removed)."""

    base_offset: int
    replacements: tuple[tuple[int, bytes], ...]


class PartitionLog:
    """One partition's log. Made by Storage (which loads and recovers it), never directly."""

    def __init__(
        self,
        store: RocksStore,
        tp: TopicPartition,
        config: LogConfig,
        *,
        log_start_offset: int,
        log_end_offset: int,
        high_watermark: int,
        segments: list[Segment],
        epochs: LeaderEpochCache,
    ) -> None:
        self._store = store
        self.topic_partition = tp
        self.config = config
        self._keys = PartitionKeys(tp)
        self._log_start_offset = log_start_offset
        self._log_end_offset = log_end_offset
        self._high_watermark = high_watermark
        self._segments = segments
        self._epochs = epochs
        self._meta_dirty = False  # HW or log start changed in memory only
        self._deleted = False
        self._generation = 0
        self.check_invariants()

    # --- offsets ---------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def size_bytes(self) -> int:
        """Bytes of stored batches (from the segment index; no scan)."""
        return sum(s.size_bytes for s in self._segments)

    @property
    def generation(self) -> int:
        """Counts the changes that remove batches or segments (truncation, retention, a moved
        log start, deletion): a log cleaner pass that awaits between its reads and its writes
        gives up when it changed meanwhile (appends and the cleaner's own writes leave it)."""
        return self._generation

    @property
    def segments(self) -> list[Segment]:
        """A copy of the segment index, oldest first."""
        return [dataclasses.replace(s) for s in self._segments]

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic_partition}, log_start={self._log_start_offset}, "
            f"hw={self._high_watermark}, leo={self._log_end_offset})"
        )

    # --- appends ---------------------------------------------------------------------------

    def append_as_leader(
        self,
        batch: RecordBatch,
        *,
        leader_epoch: int,
        now_ms: int,
        producer_state: bytes | None = None,
    ) -> AppendInfo:
        """Append a validated batch at the LEO, writing base offset, leader epoch and append
        time into its header. The first append of a new epoch records it in the epoch cache.

        FencedLeaderEpochError when ``leader_epoch`` is older than the log's latest epoch.
        ``producer_state`` (opaque) is stored in the same write batch when given.
        """
        base_offset = self._log_end_offset
        epochs = None
        if leader_epoch != self._epochs.latest_epoch():
            epochs = self._epochs_with(leader_epoch, base_offset)
        record_count = batch.record_count
        if record_count < 1:
            raise InvariantViolation(f"a batch of {record_count} records")
        data = assign(
            batch, base_offset=base_offset, leader_epoch=leader_epoch, log_append_time_ms=now_ms
        )
        timestamp_ms = now_ms if batch.timestamp_type == _LOG_APPEND_TIME else batch.max_timestamp
        next_offset = base_offset + record_count
        self._append(data, base_offset, next_offset, timestamp_ms, now_ms, epochs, producer_state)
        return AppendInfo(base_offset, next_offset - 1, now_ms)

    def append_as_follower(self, data: bytes, *, producer_state: bytes | None = None) -> AppendInfo:
        """Append a batch fetched from the leader, keeping the leader's offsets and epoch.

        The batch is re-validated (CRC) and must start at the LEO -- except on an empty log whose
        start falls inside the batch (the leader's log start moved into it), which the log then
        restarts at, as Kafka's follower does. Raises CorruptMessageError, OffsetOutOfRangeError,
        or FencedLeaderEpochError for an epoch older than the log's latest (truncate first).
        """
        batch = validate_batch(data, max_bytes=FOLLOWER_BATCH_BYTES_MAX)
        base_offset = batch.base_offset
        batch_next = next_offset(batch)
        if base_offset != self._log_end_offset:
            self._restart_for_batch_or_raise(base_offset, batch_next)
        epoch = batch.partition_leader_epoch
        epochs = None
        if epoch != self._epochs.latest_epoch() and epoch >= 0:
            epochs = self._epochs_with(epoch, base_offset)
        append_time_ms = batch.log_append_time_ms
        if batch.timestamp_type == _LOG_APPEND_TIME:
            timestamp_ms = append_time_ms
        else:
            timestamp_ms = batch.max_timestamp
        self._append(data, base_offset, batch_next, timestamp_ms, append_time_ms, epochs,
                     producer_state)
        return AppendInfo(base_offset, batch_next - 1, append_time_ms)

    def _restart_for_batch_or_raise(self, base_offset: int, batch_next: int) -> None:
        leo = self._log_end_offset
        if self._log_start_offset == leo and base_offset < leo < batch_next:
            self.truncate_fully_and_start_at(base_offset)
            return
        if base_offset > leo:
            # The leader's log cleaner removed the offsets in between (compacted topics): Kafka's
            # follower accepts any batch starting at or after its LEO. The gap stays a gap.
            return
        raise OffsetOutOfRangeError(
            f"{self.topic_partition}: follower batch starts at offset {base_offset} but the log "
            f"end offset is {leo}; truncate or fetch from the log end offset"
        )

    def _epochs_with(self, epoch: int, start_offset: int) -> LeaderEpochCache:
        """A copy of the epoch cache with ``epoch`` starting at ``start_offset`` (or raise)."""
        if not self._epochs.can_assign(epoch, start_offset):
            raise FencedLeaderEpochError(
                f"{self.topic_partition}: leader epoch {epoch} at offset {start_offset} is older "
                f"than the log's latest epoch {self._epochs.latest_epoch()} (started at offset "
                f"{self._epochs.latest_start_offset()}); a follower must truncate first"
            )
        epochs = LeaderEpochCache(self._epochs.entries)
        epochs.assign(epoch, start_offset)
        return epochs

    def _append(
        self,
        data: bytes,
        base_offset: int,
        next_offset: int,
        timestamp_ms: int,
        append_time_ms: int,
        epochs: LeaderEpochCache | None,
        producer_state: bytes | None,
    ) -> None:
        """Write the batch and the state it changes in one write batch, then update memory."""
        self._check_usable()
        segments = self._segments
        active = segments[-1] if segments else None
        size = len(data)
        config = self.config
        rolled = active is None or should_roll(
            active,
            batch_bytes=size,
            append_time_ms=append_time_ms,
            segment_bytes=config.segment_bytes,
            segment_ms=config.segment_ms,
        )
        if rolled or active is None:
            # From the LEO, not the batch's base: a follower's batch may start after a gap the
            # leader's cleaner left, and the segment index has no holes.
            segment = Segment(self._log_end_offset, next_offset, size, timestamp_ms,
                              append_time_ms)
        else:
            segment = Segment(
                active.base_offset,
                next_offset,
                active.size_bytes + size,
                max(active.max_timestamp_ms, timestamp_ms),
                active.first_append_time_ms,
            )
        keys = self._keys
        wb = self._store.new_batch()
        wb.put(_LOG, keys.log(base_offset), data)
        wb.put(_STATE, keys.segment(segment.base_offset), segment.encode())
        if epochs is not None:
            wb.put(_STATE, keys.epochs, epochs.encode())
        if self._meta_dirty:
            self._put_meta(wb)
        if producer_state is not None:
            wb.put(_PRODUCER, keys.producer_state, producer_state)
        self._store.write(wb)
        self._meta_dirty = False
        if rolled:
            segments.append(segment)
        else:
            segments[-1] = segment
        if epochs is not None:
            self._epochs = epochs
        self._log_end_offset = next_offset

    # --- reads -----------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None
             ) -> FetchDataInfo:
        """Whole batches from the one holding ``fetch_offset``, up to ``max_bytes``.

        The first batch is returned even when larger than ``max_bytes`` (a consumer always
        progresses). Only batches starting below ``max_offset`` (exclusive; the HW for consumers)
        and the LEO are returned; ``fetch_offset`` at or above that bound gives no batches.
        OffsetOutOfRangeError outside [log start offset, LEO].
        """
        self._check_usable()
        start, leo = self._log_start_offset, self._log_end_offset
        if not start <= fetch_offset <= leo:
            raise OffsetOutOfRangeError(
                f"{self.topic_partition}: fetch offset {fetch_offset} is outside the log's range "
                f"[log start offset {start}, log end offset {leo}]"
            )
        if max_bytes <= 0:
            raise InvalidFetchSizeError(
                f"{self.topic_partition}: fetch max_bytes must be > 0, got {max_bytes}"
            )
        upper = leo if max_offset is None or max_offset > leo else max_offset
        batches: list[bytes] = []
        if fetch_offset < upper:
            keys = self._keys
            batches = self._store.values_from_floor(
                _LOG, keys.log(fetch_offset), keys.log_lower, keys.log(upper), max_bytes
            )
            if batches and _ends_at_or_before(batches[0], fetch_offset):
                # The floor batch ends before the fetch offset: the log cleaner left a gap there
                # (compacted topics). Serve from the first batch after it instead.
                batches = self._store.values_from_floor(
                    _LOG, keys.log(fetch_offset), keys.log(fetch_offset), keys.log(upper),
                    max_bytes)
        return FetchDataInfo(batches, self._high_watermark, start, leo)

    def offset_for_timestamp(
        self, timestamp_ms: int, *, max_offset: int | None = None
    ) -> OffsetAndTimestamp | None:
        """The first record with timestamp >= ``timestamp_ms`` (below ``max_offset``), or None.

        The segment index skips segments whose largest timestamp is older; from there batches
        are parsed in order, and the first that qualifies is decoded (not a hot path).
        """
        self._check_usable()
        upper = self._log_end_offset if max_offset is None else min(max_offset,
                                                                     self._log_end_offset)
        start = self._log_start_offset
        first = next((s for s in self._segments if s.max_timestamp_ms >= timestamp_ms), None)
        if first is None or start >= upper:
            return None
        keys = self._keys
        scan_from = keys.log(max(first.base_offset, start))
        floor = self._store.last_entry(_LOG, keys.log_lower, scan_from + b"\x00")
        lower = floor[0] if floor is not None else scan_from
        for _, value in self._store.scan(_LOG, lower, keys.log(upper)):
            found = self._find_in_batch(parse_batch(value), timestamp_ms, start, upper)
            if found is not None:
                return found
        return None

    @staticmethod
    def _find_in_batch(
        batch: RecordBatch, timestamp_ms: int, start: int, upper: int
    ) -> OffsetAndTimestamp | None:
        log_append = batch.timestamp_type == _LOG_APPEND_TIME
        batch_max = batch.log_append_time_ms if log_append else batch.max_timestamp
        if batch_max < timestamp_ms:
            return None
        # Records are read as protobuf messages, up to the one found: decode_records built every
        # record of the batch first (a 500,000-record batch held the event loop 2.6 s; this,
        # ~0.1 s). Still on the loop: ListOffsets by time is rare, and bounded by the batch.
        base, epoch = batch.base_offset, batch.partition_leader_epoch
        for index, record in enumerate(checked_records(batch, sliced=False)):
            offset = base + index
            ts = batch_max if log_append else batch.first_timestamp + record.timestamp_delta
            if start <= offset < upper and ts >= timestamp_ms:
                return OffsetAndTimestamp(offset, ts, epoch)
        return None

    # --- high watermark and producer state -------------------------------------------------

    def update_high_watermark(self, high_watermark: int) -> int:
        """Set the HW, clamped to [log start offset, LEO] as Kafka does; returns the HW set.

        Persisted lazily: with the next append, :meth:`checkpoint_high_watermark`, or
        Storage.checkpoint_high_watermarks on an interval (Kafka checkpoints every 5 s). After a
        crash the HW may be older, never higher than the LEO: followers re-learn it from the
        leader, and a leader recomputes it from its ISR.
        """
        hw = min(max(high_watermark, self._log_start_offset), self._log_end_offset)
        if hw != self._high_watermark:
            self._high_watermark = hw
            self._meta_dirty = True
        return hw

    def checkpoint_high_watermark(self) -> bool:
        """Persist the HW and log start offset now if they changed; True when it wrote."""
        if not self._meta_dirty:
            return False
        self._check_usable()
        wb = self._store.new_batch()
        self._put_meta(wb)
        self._store.write(wb)
        self._meta_dirty = False
        return True

    def producer_state(self) -> bytes | None:
        """The opaque producer state last stored for this partition, or None."""
        self._check_usable()
        return self._store.get(_PRODUCER, self._keys.producer_state)

    def put_producer_state(self, data: bytes) -> None:
        self._check_usable()
        wb = self._store.new_batch()
        wb.put(_PRODUCER, self._keys.producer_state, data)
        self._store.write(wb)

    # --- leader epochs ---------------------------------------------------------------------

    def latest_epoch(self) -> int:
        """The newest leader epoch in the cache, -1 when none."""
        return self._epochs.latest_epoch()

    @property
    def epoch_entries(self) -> list[tuple[int, int]]:
        """The leader-epoch cache: (epoch, start offset), oldest first."""
        return self._epochs.entries

    def end_offset_for_epoch(self, leader_epoch: int) -> EpochEndOffset:
        """KIP-279 OffsetsForLeaderEpoch: see LeaderEpochCache.end_offset_for_epoch."""
        epoch, end = self._epochs.end_offset_for_epoch(leader_epoch, self._log_end_offset)
        return EpochEndOffset(epoch, end)

    def maybe_assign_epoch_start_offset(self, leader_epoch: int) -> bool:
        """On becoming leader: record that ``leader_epoch`` starts at the LEO (Kafka does this at
        election, so OffsetsForLeaderEpoch answers right before the first append)."""
        if leader_epoch == self._epochs.latest_epoch():
            return False
        self._check_usable()
        epochs = self._epochs_with(leader_epoch, self._log_end_offset)
        wb = self._store.new_batch()
        wb.put(_STATE, self._keys.epochs, epochs.encode())
        self._store.write(wb)
        self._epochs = epochs
        return True

    # --- truncation ------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch at or after ``offset`` (a follower after divergence); returns the
        new LEO. A batch that holds ``offset`` goes whole, as Kafka truncates to the batch
        boundary: the LEO may end below ``offset``. The HW is lowered to the LEO if above it.

        At or past the LEO no batch goes, but an epoch entry starting at the LEO (it holds no
        data: ``maybe_assign_epoch_start_offset`` on a leader demoted before its first append)
        is dropped, as Kafka's truncateTo does: otherwise the next leader's batches of an older
        epoch could never be appended (FencedLeaderEpochError forever)."""
        if offset < 0:
            raise OffsetOutOfRangeError(f"{self.topic_partition}: cannot truncate to {offset}")
        self._check_usable()
        if offset >= self._log_end_offset:
            self._drop_empty_epochs()
            return self._log_end_offset
        start = self._log_start_offset
        if offset <= start:
            self.truncate_fully_and_start_at(offset)
            return offset
        keys = self._keys
        floor = self._store.last_entry(_LOG, keys.log_lower, keys.log(offset) + b"\x00")
        if floor is None:
            raise KafkaStorageErrorError(
                f"{self.topic_partition}: no batch at or below offset {offset} though the log "
                f"spans [{start}, {self._log_end_offset})"
            )
        cut = _base_offset_of(floor[0])
        if cut < start:
            # The log start lies inside the batch that must go: nothing below it may remain.
            self.truncate_fully_and_start_at(start)
            return start
        self._truncate_at(cut)
        return cut

    def _drop_empty_epochs(self) -> None:
        """Remove epoch entries starting at the LEO (only the last one can), in one write."""
        if self._epochs.latest_start_offset() < self._log_end_offset:
            return
        epochs = LeaderEpochCache(self._epochs.entries)
        epochs.truncate_from_end(self._log_end_offset)
        wb = self._store.new_batch()
        wb.put(_STATE, self._keys.epochs, epochs.encode())
        self._store.write(wb)
        self._epochs = epochs

    def _truncate_at(self, cut: int) -> None:
        keys = self._keys
        kept = [s for s in self._segments if s.base_offset < cut]
        trimmed = None
        if kept and kept[-1].next_offset > cut:
            last = kept[-1]
            removed_bytes = sum(
                len(v) for _, v in self._store.scan(_LOG, keys.log(cut), keys.log(last.next_offset))
            )
            # max_timestamp_ms stays: an overestimate only keeps the segment longer, never less.
            trimmed = Segment(last.base_offset, cut, last.size_bytes - removed_bytes,
                              last.max_timestamp_ms, last.first_append_time_ms)
            kept[-1] = trimmed
        epochs = LeaderEpochCache(self._epochs.entries)
        epochs.truncate_from_end(cut)
        wb = self._store.new_batch()
        wb.delete_range(_LOG, keys.log(cut), keys.log_upper)
        wb.delete_range(_STATE, keys.segment(cut), keys.segment_upper)
        if trimmed is not None:
            wb.put(_STATE, keys.segment(trimmed.base_offset), trimmed.encode())
        wb.put(_STATE, keys.epochs, epochs.encode())
        wb.delete(_STATE, keys.cleaner_checkpoint)  # the next cleaner pass starts over: safe
        hw = min(self._high_watermark, cut)
        self._put_meta(wb, high_watermark=hw)
        self._store.write(wb)
        self._segments, self._epochs = kept, epochs
        self._log_end_offset, self._high_watermark, self._meta_dirty = cut, hw, False
        self._generation += 1

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (a follower far behind the leader's log
        start). Log start, HW and LEO all become ``offset``; the epoch cache is cleared."""
        if offset < 0:
            raise OffsetOutOfRangeError(f"{self.topic_partition}: cannot start at {offset}")
        self._check_usable()
        keys = self._keys
        wb = self._store.new_batch()
        wb.delete_range(_LOG, keys.log_lower, keys.log_upper)
        wb.delete_range(_STATE, keys.segment_lower, keys.segment_upper)
        wb.delete(_STATE, keys.epochs)
        wb.delete(_STATE, keys.cleaner_checkpoint)
        self._put_meta(wb, log_start_offset=offset, high_watermark=offset)
        self._store.write(wb)
        self._segments, self._epochs = [], LeaderEpochCache()
        self._log_start_offset = self._log_end_offset = self._high_watermark = offset
        self._meta_dirty = False
        self._generation += 1

    # --- log start and retention -----------------------------------------------------------

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Advance the log start offset (DeleteRecords, or a follower following its leader's).
        Segments wholly below it are removed at once. It may not pass the HW."""
        if offset <= self._log_start_offset:
            return False
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"{self.topic_partition}: cannot move the log start offset to {offset}, above "
                f"the high watermark {self._high_watermark}"
            )
        self._remove_leading(offset, now_ms=0, retention_ms=-1, retention_bytes=-1)
        return True

    def enforce_retention(self, now_ms: int, *, retention_ms: int, retention_bytes: int) -> int:
        """Remove whole leading segments beyond retention.ms / retention.bytes (-1: unlimited),
        never past the HW; advances the log start offset. Returns the bytes removed."""
        return self._remove_leading(
            self._log_start_offset,
            now_ms=now_ms,
            retention_ms=retention_ms,
            retention_bytes=retention_bytes,
        )

    def _remove_leading(
        self, log_start_offset: int, *, now_ms: int, retention_ms: int, retention_bytes: int
    ) -> int:
        self._check_usable()
        decision = plan_retention(
            self._segments,
            now_ms=now_ms,
            log_start_offset=log_start_offset,
            high_watermark=self._high_watermark,
            retention_ms=retention_ms,
            retention_bytes=retention_bytes,
        )
        count = decision.segment_count if decision is not None else 0
        new_start = decision.new_log_start_offset if decision is not None else log_start_offset
        if count == 0 and new_start == self._log_start_offset:
            return 0
        kept = self._segments[count:]
        keys = self._keys
        epochs = LeaderEpochCache(self._epochs.entries)
        epochs.truncate_from_start(new_start)
        wb = self._store.new_batch()
        if count:
            log_end, state_end = (keys.log(kept[0].base_offset), keys.segment(kept[0].base_offset)
                                  ) if kept else (keys.log_upper, keys.segment_upper)
            wb.delete_range(_LOG, keys.log_lower, log_end)
            wb.delete_range(_STATE, keys.segment_lower, state_end)
        wb.put(_STATE, keys.epochs, epochs.encode())
        self._put_meta(wb, log_start_offset=new_start)
        self._store.write(wb)
        self._segments, self._epochs = kept, epochs
        self._log_start_offset, self._meta_dirty = new_start, False
        self._generation += 1
        return decision.removed_bytes if decision is not None else 0

    # --- log compaction (broker/storage/cleaner.py drives these) ---------------------------

    def cleaner_checkpoint(self) -> int:
        """The offset below which the last cleaner pass left the log clean (0: never cleaned)."""
        self._check_usable()
        data = self._store.get(_STATE, self._keys.cleaner_checkpoint)
        if data is None:
            return 0
        value: int = CLEANER_CHECKPOINT.unpack(data)[0]
        return value

    def read_batches(self, from_offset: int, to_offset: int, max_bytes: int
                     ) -> list[tuple[int, bytes]]:
        """(base offset, stored bytes) of the batches keyed in [from_offset, to_offset), in
        order: the first whatever its size, then while they total at most ``max_bytes``. One
        read, no iterator left open (the log cleaner reads this way between awaits)."""
        out: list[tuple[int, bytes]] = []
        total = 0
        batches = self.scan_batches(from_offset, to_offset)
        try:
            for base, data in batches:
                if out and total + len(data) > max_bytes:
                    break
                out.append((base, data))
                total += len(data)
        finally:
            batches.close()
        return out

    def scan_batches(self, from_offset: int, to_offset: int
                     ) -> Generator[tuple[int, bytes], None, None]:
        """(base offset, stored bytes) of the batches keyed in [from_offset, to_offset), in
        order, as of one instant (a RocksDB iterator: later writes are not seen)."""
        self._check_usable()
        keys = self._keys
        for key, value in self._store.scan(_LOG, keys.log(from_offset), keys.log(to_offset)):
            yield _base_offset_of(key), value

    def replace_batches(
        self,
        rewrites: Sequence[BatchRewrite],
        *,
        segment_sizes: Mapping[int, int],
        cleaner_checkpoint: int | None,
    ) -> None:
        """Apply one group of the cleaner's rewrites in ONE write batch: old batches deleted,
        their replacements put, the touched segments' new sizes (by base offset) and, on a
        pass's last group, the cleaner checkpoint. A kill -9 leaves every batch old or new.
        Only batches wholly below the HW and segments other than the active one may change."""
        self._check_usable()
        hw = self._high_watermark
        by_base = {s.base_offset: s for s in self._segments[:-1]}
        for base, size in segment_sizes.items():
            seg = by_base.get(base)
            if seg is None or seg.next_offset > hw or size < 0:
                raise InvariantViolation(
                    f"{self.topic_partition}: the cleaner may not resize segment {base} to "
                    f"{size} (segments {self._segments}, HW {hw})")
        keys = self._keys
        wb = self._store.new_batch()
        for rewrite in rewrites:
            if rewrite.base_offset >= hw:
                raise InvariantViolation(
                    f"{self.topic_partition}: the cleaner may not rewrite batch "
                    f"{rewrite.base_offset} at or above the HW {hw}")
            wb.delete(_LOG, keys.log(rewrite.base_offset))
            for base, data in rewrite.replacements:
                if not rewrite.base_offset <= base < hw:
                    raise InvariantViolation(
                        f"{self.topic_partition}: a cleaned batch at {base} replaces batch "
                        f"{rewrite.base_offset}")
                wb.put(_LOG, keys.log(base), data)
        for base, size in segment_sizes.items():
            seg = by_base[base]
            wb.put(_STATE, keys.segment(base), Segment(
                base, seg.next_offset, size, seg.max_timestamp_ms, seg.first_append_time_ms
            ).encode())
        if cleaner_checkpoint is not None:
            wb.put(_STATE, keys.cleaner_checkpoint, CLEANER_CHECKPOINT.pack(cleaner_checkpoint))
        self._store.write(wb)
        for base, size in segment_sizes.items():
            by_base[base].size_bytes = size

    # --- internals -------------------------------------------------------------------------

    def _put_meta(
        self,
        wb: StoreWriteBatch,
        *,
        log_start_offset: int | None = None,
        high_watermark: int | None = None,
    ) -> None:
        start = self._log_start_offset if log_start_offset is None else log_start_offset
        hw = self._high_watermark if high_watermark is None else high_watermark
        wb.put(_STATE, self._keys.meta, META.pack(start, hw))

    def _check_usable(self) -> None:
        if self._deleted:
            raise UnknownTopicOrPartitionError(f"{self.topic_partition} was deleted here")
        if self._store.closed:
            raise KafkaStorageErrorError(f"{self.topic_partition}: the storage is closed")

    def _mark_deleted(self) -> None:
        self._deleted = True
        self._generation += 1

    def check_invariants(self) -> None:
        """Assert what must always hold (tests call it after every step)."""
        start, hw, leo = self._log_start_offset, self._high_watermark, self._log_end_offset
        if not 0 <= start <= hw <= leo:
            raise InvariantViolation(
                f"{self.topic_partition}: log start {start}, HW {hw}, LEO {leo} out of order")
        segments = self._segments
        for before, after in itertools.pairwise(segments):
            if before.next_offset != after.base_offset:
                raise InvariantViolation(
                    f"{self.topic_partition}: a hole or an overlap between segments {before} and "
                    f"{after}")
        for s in segments:
            # A segment the log cleaner emptied keeps its offsets with 0 bytes.
            if not (s.base_offset < s.next_offset and s.size_bytes >= 0):
                raise InvariantViolation(f"{self.topic_partition}: bad segment {s}")
        if segments:
            if segments[-1].next_offset != leo:
                raise InvariantViolation(
                    f"{self.topic_partition}: the last segment {segments[-1]} does not end at the "
                    f"LEO {leo}")
            if segments[0].base_offset > start:
                raise InvariantViolation(
                    f"{self.topic_partition}: the first segment {segments[0]} starts past the log "
                    f"start {start}")
        elif start != leo:
            raise InvariantViolation(
                f"{self.topic_partition}: no segments, yet log start {start} is not the LEO {leo}")
        entries = self._epochs.entries
        if not all(s < leo or (s == leo and i == len(entries) - 1)
                   for i, (_, s) in enumerate(entries)):
            raise InvariantViolation(
                f"{self.topic_partition}: epoch entries {entries} start past the LEO {leo}")


def _base_offset_of(key: bytes) -> int:
    return int.from_bytes(key[-8:], "big")


def _ends_at_or_before(data: bytes, offset: int) -> bool:
    """Whether the stored batch ``data`` ends at or before ``offset`` (header parse only when
    the batch starts before ``offset``: a fetch at a batch's base offset costs nothing)."""
    batch = parse_batch(data)
    return batch.base_offset < offset and next_offset(batch) <= offset
