"""Opening a partition log: rebuild its state and make the log and the state agree.

Every change to a partition is one atomic RocksDB write batch, so after a kill -9 the log and its
state already agree. Recovery still checks instead of trusting, at a bounded cost per partition:

1. the tail batch is read back (seek to the partition's last key) and CRC-checked; a torn or
   corrupt tail batch is deleted, up to RECOVERY_TAIL_BATCHES_MAX of them;
2. the LEO is the end of the last good batch (the log start offset when no batch is left);
3. the segment index is cut back to the LEO, and its last entry re-measured if it disagrees;
4. the HW is clamped into [log start, LEO], and epochs starting past the LEO are dropped.

Repairs are written in one write batch before the log is handed out.
"""

from __future__ import annotations

import logging

from tidelog import limits
from tidelog.broker.storage.config import LogConfig
from tidelog.broker.storage.epoch_cache import LeaderEpochCache
from tidelog.broker.storage.keys import (
    KIND_CLEANER,
    KIND_EPOCHS,
    KIND_META,
    KIND_SEGMENT,
    META,
    PREFIX_BYTES,
    PartitionKeys,
    TopicPartition,
    offset_of,
)
from tidelog.broker.storage.partition_log import PartitionLog
from tidelog.broker.storage.rocks import Column, RocksStore, StoreWriteBatch
from tidelog.broker.storage.segments import Segment
from tidelog.errors import KafkaStorageErrorError, TidelogError
from tidelog.invariants import InvariantViolation
from tidelog.record_batch import RecordBatch, next_offset, validate_batch
from tidelog.v1.common_pb2 import TimestampType

__all__ = ["RECOVERY_TAIL_BATCHES_MAX", "load_partition"]

log = logging.getLogger(__name__)

#: Corrupt batches recovery deletes from a partition's tail before it gives up and refuses the
#: partition: more than a few means damage that an operator should look at.
RECOVERY_TAIL_BATCHES_MAX = 16


class _State:
    """The rows of partition_state for one partition, decoded."""

    def __init__(self, tp: TopicPartition, rows: list[tuple[bytes, bytes]]) -> None:
        self.log_start_offset = -1
        self.high_watermark = 0
        self.epochs = LeaderEpochCache()
        self.segments: list[Segment] = []
        for key, value in rows:
            kind = key[PREFIX_BYTES : PREFIX_BYTES + 1]
            try:
                self._decode(kind, key, value)
            except (ValueError, TypeError) as e:
                raise KafkaStorageErrorError(
                    f"{tp}: partition state entry {key.hex()} cannot be decoded: {e}"
                ) from None
        if self.log_start_offset < 0:
            raise KafkaStorageErrorError(f"{tp}: partition state has no meta entry")

    def _decode(self, kind: bytes, key: bytes, value: bytes) -> None:
        if kind == KIND_META:
            self.log_start_offset, self.high_watermark = META.unpack(value)
        elif kind == KIND_EPOCHS:
            self.epochs = LeaderEpochCache.decode(value)
        elif kind == KIND_SEGMENT:
            self.segments.append(Segment.decode(offset_of(key), value))
        elif kind == KIND_CLEANER:
            pass  # the log cleaner reads its checkpoint itself (PartitionLog.cleaner_checkpoint)
        else:
            raise ValueError(f"unknown state kind {kind!r}")


def load_partition(
    store: RocksStore, tp: TopicPartition, rows: list[tuple[bytes, bytes]], config: LogConfig
) -> PartitionLog:
    """Rebuild one partition's log from its state rows and its log tail, repairing as needed."""
    state = _State(tp, rows)
    keys = PartitionKeys(tp)
    repair = store.new_batch()
    tail = _last_good_batch(store, tp, keys, repair)
    leo = next_offset(tail) if tail is not None else state.log_start_offset
    start = min(state.log_start_offset, leo)
    segments = _reconcile_segments(store, tp, keys, state.segments, leo, start, repair)
    if segments:
        start = max(start, segments[0].base_offset)
    hw = min(max(state.high_watermark, start), leo)
    if state.epochs.truncate_from_end(leo + 1):
        repair.put(Column.PARTITION_STATE, keys.epochs, state.epochs.encode())
    if (start, hw) != (state.log_start_offset, state.high_watermark):
        repair.put(Column.PARTITION_STATE, keys.meta, META.pack(start, hw))
    try:
        loaded = PartitionLog(
            store,
            tp,
            config,
            log_start_offset=start,
            log_end_offset=leo,
            high_watermark=hw,
            segments=segments,
            epochs=state.epochs,
        )
    except InvariantViolation as e:
        # Damage recovery does not know how to repair (e.g. a hole in the segment index).
        raise KafkaStorageErrorError(
            f"{tp}: the partition's state is inconsistent ({e}); delete the partition here and "
            "let it re-replicate"
        ) from None
    if len(repair):
        log.warning("%s: recovery repaired the partition (%d writes)", tp, len(repair))
        store.write(repair)
    return loaded


def _last_good_batch(
    store: RocksStore, tp: TopicPartition, keys: PartitionKeys, repair: StoreWriteBatch
) -> RecordBatch | None:
    """The last batch of the log that parses and passes its CRC; bad ones are queued for
    deletion in ``repair``."""
    upper = keys.log_upper
    for _ in range(RECOVERY_TAIL_BATCHES_MAX + 1):
        entry = store.last_entry(Column.LOG, keys.log_lower, upper)
        if entry is None:
            return None
        key, value = entry
        problem = _check_batch(key, value)
        if problem is None:
            return validate_batch(value, max_bytes=limits.GRPC_MESSAGE_BYTES_MAX)
        log.warning("%s: deleting bad tail batch at offset %d: %s", tp, offset_of(key), problem)
        repair.delete(Column.LOG, key)
        upper = key
    raise KafkaStorageErrorError(
        f"{tp}: more than {RECOVERY_TAIL_BATCHES_MAX} corrupt batches at the log's tail; the "
        "partition's data is damaged: delete the partition here and let it re-replicate"
    )


def _check_batch(key: bytes, value: bytes) -> str | None:
    try:
        batch = validate_batch(value, max_bytes=limits.GRPC_MESSAGE_BYTES_MAX)
    except TidelogError as e:
        return str(e)
    if batch.base_offset != offset_of(key):
        return f"its header says base offset {batch.base_offset}"
    return None


def _reconcile_segments(
    store: RocksStore,
    tp: TopicPartition,
    keys: PartitionKeys,
    segments: list[Segment],
    leo: int,
    start: int,
    repair: StoreWriteBatch,
) -> list[Segment]:
    """Cut the segment index back to ``leo``; re-measure the last segment if it disagrees with
    the log (only after a tail repair or a damaged index)."""
    kept = [s for s in segments if s.base_offset < leo]
    if len(kept) < len(segments):
        repair.delete_range(Column.PARTITION_STATE, keys.segment(leo), keys.segment_upper)
    if not kept and leo > start:
        # Batches without any index entry: index them as one segment from the first batch.
        first = store.scan(Column.LOG, keys.log_lower, keys.log_upper)
        first_key = next(iter(first))[0]
        kept = [Segment(offset_of(first_key), leo, 0, 0, 0)]
    if kept and kept[-1].next_offset != leo:
        log.warning("%s: segment index ends at %d, log at %d: re-measuring the last segment",
                    tp, kept[-1].next_offset, leo)
        kept[-1] = _measure(store, keys, kept[-1].base_offset, leo)
        repair.put(Column.PARTITION_STATE, keys.segment(kept[-1].base_offset), kept[-1].encode())
    return kept


def _measure(store: RocksStore, keys: PartitionKeys, base_offset: int, leo: int) -> Segment:
    """A segment entry rebuilt by reading its batches (bounded by segment.bytes)."""
    size = 0
    max_ts = -1
    first_append = -1
    for _, value in store.scan(Column.LOG, keys.log(base_offset), keys.log(leo)):
        batch = validate_batch(value, max_bytes=limits.GRPC_MESSAGE_BYTES_MAX)
        size += len(value)
        log_append = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
        max_ts = max(max_ts, batch.log_append_time_ms if log_append else batch.max_timestamp)
        if first_append < 0:
            first_append = batch.log_append_time_ms
    return Segment(base_offset, leo, size, max_ts, first_append)
