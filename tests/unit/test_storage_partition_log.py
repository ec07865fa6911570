"""The partition log (broker/storage/partition_log.py) on a real RocksDB in pytest's tmp_path.

Each test opens a Storage on a freshly formatted data dir, appends real record batches (built
with tidelog.record_batch) and checks one behaviour through the public API: offset assignment,
whole-batch reads and their bounds, the HW, the leader-epoch cache, follower appends, truncation,
retention by size and time, log start offset moves, timestamp lookup, producer state, and that
all of it survives a close and reopen. No mocks; every test ends with the log's invariants.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.broker.storage import (
    UNDEFINED_EPOCH,
    FetchDataInfo,
    LogConfig,
    PartitionLog,
    Storage,
)
from tidelog.data_dir import format_data_dir
from tidelog.errors import (
    CorruptMessageError,
    FencedLeaderEpochError,
    InvalidFetchSizeError,
    OffsetOutOfRangeError,
)
from tidelog.record_batch import (
    NewRecord,
    RecordBatch,
    batch_crc,
    build_batch,
    decode_records,
    parse_batch,
    validate_batch,
)
from tidelog.v1.common_pb2 import TimestampType

CLUSTER = "test-cluster"
TOPIC = bytes(range(16))


def make_batch(count: int = 3, *, ts: int = 1_000, value_bytes: int = 20) -> RecordBatch:
    records = [NewRecord(b"k", bytes([i % 251]) * value_bytes, timestamp_ms=ts + i)
               for i in range(count)]
    return validate_batch(build_batch(records, now_ms=ts))


def open_storage(path: Path) -> Storage:
    if not (path / "meta.properties").exists():
        format_data_dir(path, CLUSTER, 1)
    return Storage.open(path, cluster_id=CLUSTER, node_id=1)


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    s = open_storage(tmp_path)
    yield s
    s.close()


def new_log(storage: Storage, segment_bytes: int = 1 << 30, partition: int = 0) -> PartitionLog:
    config = LogConfig(segment_bytes=segment_bytes)
    return storage.get_or_create_log(TOPIC, partition, config=config)


def append(log: PartitionLog, n: int, *, epoch: int = 1, count: int = 3, now_ms: int = 5_000
           ) -> list[int]:
    return [log.append_as_leader(make_batch(count), leader_epoch=epoch, now_ms=now_ms).base_offset
            for _ in range(n)]


def all_batches(log: PartitionLog) -> list[RecordBatch]:
    got = log.read(log.log_start_offset, 1 << 30).batches if log.log_end_offset else []
    return [parse_batch(b) for b in got]


def reopen(storage: Storage, tmp_path: Path) -> tuple[Storage, PartitionLog]:
    storage.close()
    fresh = open_storage(tmp_path)
    log = fresh.log(TOPIC, 0)
    log.check_invariants()
    return fresh, log


# --- appends ------------------------------------------------------------------------------------


def test_leader_append_assigns_offsets_and_stamps_the_header(storage: Storage) -> None:
    log = new_log(storage)
    infos = [log.append_as_leader(make_batch(3), leader_epoch=4, now_ms=7_000 + i)
             for i in range(3)]
    assert [(i.base_offset, i.last_offset, i.log_append_time_ms) for i in infos] == [
        (0, 2, 7_000), (3, 5, 7_001), (6, 8, 7_002)]
    assert log.log_end_offset == 9 and log.high_watermark == 0
    stored = [validate_batch(b) for b in log.read(0, 1 << 20).batches]  # CRC still valid
    assert [(b.base_offset, b.partition_leader_epoch, b.log_append_time_ms) for b in stored] == [
        (0, 4, 7_000), (3, 4, 7_001), (6, 4, 7_002)]
    assert [r.offset for r in decode_records(stored[2])] == [6, 7, 8]
    assert log.size_bytes == sum(len(b) for b in log.read(0, 1 << 20).batches)
    log.check_invariants()


def test_partitions_do_not_see_each_other(storage: Storage) -> None:
    p0, p1 = new_log(storage, partition=0), new_log(storage, partition=1)
    append(p0, 2)
    other_topic = storage.get_or_create_log(bytes(16), 0)
    append(other_topic, 5)
    assert p1.log_end_offset == 0 and p1.read(0, 100).batches == []
    assert len(p0.read(0, 1 << 20).batches) == 2
    assert len(other_topic.read(0, 1 << 20).batches) == 5


# --- reads --------------------------------------------------------------------------------------


def test_read_returns_whole_batches_from_the_one_holding_the_offset(storage: Storage) -> None:
    log = new_log(storage)
    append(log, 4)  # batches at 0, 3, 6, 9
    got = [parse_batch(b).base_offset for b in log.read(4, 1 << 20).batches]
    assert got == [3, 6, 9]
    assert [parse_batch(b).base_offset for b in log.read(3, 1 << 20).batches] == [3, 6, 9]


def test_read_honours_max_bytes_but_always_returns_the_first_batch(storage: Storage) -> None:
    log = new_log(storage)
    append(log, 4)
    sizes = [len(b) for b in log.read(0, 1 << 20).batches]
    assert len(log.read(0, 1).batches) == 1, "a batch larger than max_bytes still comes whole"
    assert len(log.read(0, sizes[0] + sizes[1] - 1).batches) == 1
    assert len(log.read(0, sizes[0] + sizes[1]).batches) == 2


def test_read_stops_below_max_offset_and_at_the_log_end(storage: Storage) -> None:
    log = new_log(storage)
    append(log, 4)
    log.update_high_watermark(6)
    info = log.read(0, 1 << 20, max_offset=log.high_watermark)
    assert [parse_batch(b).base_offset for b in info.batches] == [0, 3]
    assert log.read(6, 1 << 20, max_offset=6).batches == [], "at the HW a consumer gets nothing"
    assert log.read(12, 1 << 20) == FetchDataInfo([], 6, 0, 12), "at the LEO: empty, no error"


@pytest.mark.parametrize("offset", [-1, 13, 1_000])
def test_read_outside_the_log_is_offset_out_of_range(storage: Storage, offset: int) -> None:
    log = new_log(storage)
    append(log, 4)
    with pytest.raises(OffsetOutOfRangeError) as info:
        log.read(offset, 100)
    message = str(info.value)
    assert str(offset) in message and "log start offset 0" in message and "12" in message
    assert str(log.topic_partition) in message


def test_read_with_no_room_is_an_invalid_fetch_size(storage: Storage) -> None:
    log = new_log(storage)
    with pytest.raises(InvalidFetchSizeError):
        log.read(0, 0)


# --- high watermark -----------------------------------------------------------------------------


def test_hw_is_clamped_to_the_log_and_persisted_lazily(storage: Storage, tmp_path: Path) -> None:
    log = new_log(storage)
    append(log, 2)
    assert log.update_high_watermark(100) == 6, "never above the LEO"
    assert log.update_high_watermark(3) == 3
    storage, log = reopen(storage, tmp_path)  # close() checkpoints
    assert log.high_watermark == 3
    log.update_high_watermark(6)
    append(log, 1)  # carries the HW checkpoint in its write batch
    assert log.checkpoint_high_watermark() is False, "nothing left to write"
    log.update_high_watermark(9)
    assert storage.checkpoint_high_watermarks() == 1
    storage, log = reopen(storage, tmp_path)
    assert log.high_watermark == 9
    storage.close()


# --- leader epochs ------------------------------------------------------------------------------


def test_epoch_cache_follows_leader_appends(storage: Storage, tmp_path: Path) -> None:
    log = new_log(storage)
    assert log.latest_epoch() == UNDEFINED_EPOCH
    append(log, 2, epoch=1)  # 0..5
    assert log.maybe_assign_epoch_start_offset(3), "elected leader of epoch 3 at LEO 6"
    append(log, 1, epoch=3)  # 6..8
    append(log, 1, epoch=5)  # 9..11
    assert log.epoch_entries == [(1, 0), (3, 6), (5, 9)]
    assert log.end_offset_for_epoch(1) == (1, 6)
    assert log.end_offset_for_epoch(2) == (1, 6)
    assert log.end_offset_for_epoch(4) == (3, 9)
    assert log.end_offset_for_epoch(5) == (5, 12)
    assert log.end_offset_for_epoch(6) == (UNDEFINED_EPOCH, -1)
    with pytest.raises(FencedLeaderEpochError, match="older than the log's latest epoch 5"):
        append(log, 1, epoch=4)
    assert log.log_end_offset == 12, "a refused append changes nothing"
    storage, log = reopen(storage, tmp_path)
    assert log.epoch_entries == [(1, 0), (3, 6), (5, 9)]
    storage.close()


def test_new_leader_answers_before_its_first_append(storage: Storage) -> None:
    log = new_log(storage)
    append(log, 2, epoch=3)
    log.maybe_assign_epoch_start_offset(5)
    # A follower that led epoch 4 and wrote past 6 is told to truncate to 6.
    assert log.end_offset_for_epoch(4) == (3, 6)
    assert not log.maybe_assign_epoch_start_offset(5)
    with pytest.raises(FencedLeaderEpochError):
        log.maybe_assign_epoch_start_offset(4)


# --- follower appends ---------------------------------------------------------------------------


def leader_batches(storage: Storage, n: int, epochs: list[int]) -> list[bytes]:
    leader = storage.get_or_create_log(bytes(16), 9)
    for i in range(n):
        leader.append_as_leader(make_batch(2), leader_epoch=epochs[i], now_ms=1_000 + i)
    return leader.read(0, 1 << 30).batches


def test_follower_append_keeps_the_leaders_offsets_and_epochs(storage: Storage) -> None:
    batches = leader_batches(storage, 4, [1, 1, 2, 2])
    follower = new_log(storage)
    for data in batches:
        follower.append_as_follower(data)
    assert follower.read(0, 1 << 30).batches == batches, "the leader's bytes, unchanged"
    assert follower.log_end_offset == 8 and follower.epoch_entries == [(1, 0), (2, 4)]
    follower.check_invariants()


def test_follower_append_may_not_start_below_the_log_end(storage: Storage) -> None:
    batches = leader_batches(storage, 4, [1, 1, 1, 1])
    follower = new_log(storage)
    follower.append_as_follower(batches[0])
    follower.append_as_follower(batches[1])
    with pytest.raises(OffsetOutOfRangeError, match="starts at offset 2 but the log end offset"):
        follower.append_as_follower(batches[1])
    # A batch after a gap is accepted, as Kafka's follower does: the leader's log cleaner
    # removes offsets (compacted topics), and the segment index stays without holes.
    follower.append_as_follower(batches[3])
    assert follower.log_end_offset == 8 and follower.segments[-1].next_offset == 8
    follower.check_invariants()


def test_follower_append_refuses_corrupt_batches(storage: Storage) -> None:
    batches = leader_batches(storage, 1, [1])
    follower = new_log(storage)
    with pytest.raises(CorruptMessageError):
        follower.append_as_follower(b"\xff\xff\xff not a batch")
    damaged = bytearray(batches[0])
    damaged[-10] ^= 0x01  # inside the records payload: the CRC catches it
    with pytest.raises(CorruptMessageError, match="CRC"):
        follower.append_as_follower(bytes(damaged))
    assert follower.log_end_offset == 0


def test_follower_with_an_older_epoch_batch_must_truncate_first(storage: Storage) -> None:
    batches = leader_batches(storage, 2, [1, 1])
    follower = new_log(storage)
    follower.maybe_assign_epoch_start_offset(3)
    with pytest.raises(FencedLeaderEpochError):
        follower.append_as_follower(batches[0])


def test_empty_follower_restarts_inside_a_batch_holding_its_log_start(storage: Storage) -> None:
    batches = leader_batches(storage, 2, [1, 1])  # 0..1, 2..3
    follower = new_log(storage)
    follower.truncate_fully_and_start_at(3)  # the leader's log start was 3
    follower.append_as_follower(batches[1])
    assert (follower.log_start_offset, follower.log_end_offset) == (2, 4)


# --- truncation ---------------------------------------------------------------------------------


def test_truncate_to_a_batch_boundary(storage: Storage, tmp_path: Path) -> None:
    log = new_log(storage, segment_bytes=300)
    append(log, 2, epoch=1)
    append(log, 3, epoch=2)  # batches 0,3 (epoch 1), 6,9,12 (epoch 2)
    log.update_high_watermark(15)
    size_before = log.size_bytes
    assert log.truncate_to(6) == 6
    assert (log.log_end_offset, log.high_watermark) == (6, 6)
    assert log.epoch_entries == [(1, 0)]
    assert [b.base_offset for b in all_batches(log)] == [0, 3]
    assert log.size_bytes == sum(len(b) for b in log.read(0, 1 << 30).batches) < size_before
    log.check_invariants()
    storage, log = reopen(storage, tmp_path)
    assert log.log_end_offset == 6 and log.epoch_entries == [(1, 0)]
    append(log, 1, epoch=3)
    assert log.end_offset_for_epoch(2) == (1, 6)
    storage.close()


def test_truncate_inside_a_batch_removes_the_whole_batch(storage: Storage) -> None:
    log = new_log(storage)
    append(log, 3)  # 0..2, 3..5, 6..8
    assert log.truncate_to(4) == 3, "Kafka truncates to the batch boundary"
    assert [b.base_offset for b in all_batches(log)] == [0]
    assert log.truncate_to(10) == 3, "at or past the LEO: nothing to do"
    log.check_invariants()


def test_truncate_below_the_log_start_empties_the_log(storage: Storage) -> None:
    log = new_log(storage)
    append(log, 3)
    log.update_high_watermark(9)
    log.maybe_increment_log_start_offset(4)
    assert log.truncate_to(4) == 4
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (4, 4, 0)
    assert log.truncate_to(2) == 2, "Kafka restarts the log at the target"
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    log.check_invariants()


def test_truncate_fully_and_start_at(storage: Storage, tmp_path: Path) -> None:
    log = new_log(storage)
    append(log, 3)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (100, 100, 100)
    assert log.epoch_entries == [] and log.read(100, 10).batches == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 10)
    assert append(log, 1, epoch=7) == [100]
    storage, log = reopen(storage, tmp_path)
    assert (log.log_start_offset, log.log_end_offset, log.epoch_entries) == (100, 103, [(7, 100)])
    storage.close()


# --- retention and log start --------------------------------------------------------------------


def segment_log(storage: Storage) -> PartitionLog:
    """Nine batches of three records in segments of three batches."""
    log = new_log(storage)
    append(log, 1)
    size = log.size_bytes  # later batches are 2 bytes longer: base offset 0 is not serialized
    log.config = LogConfig(segment_bytes=3 * size + 10)
    append(log, 8)
    assert [s.base_offset for s in log.segments] == [0, 9, 18]
    return log


def test_size_retention_removes_whole_leading_segments_up_to_the_hw(storage: Storage) -> None:
    log = segment_log(storage)
    one = log.segments[0].size_bytes
    assert log.enforce_retention(0, retention_ms=-1, retention_bytes=0) == 0, "HW is 0"
    log.update_high_watermark(17)
    assert log.enforce_retention(0, retention_ms=-1, retention_bytes=one) == one
    assert log.log_start_offset == 9 and [s.base_offset for s in log.segments] == [9, 18]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(8, 100)
    assert parse_batch(log.read(9, 1).batches[0]).base_offset == 9
    log.check_invariants()


def test_time_retention_uses_the_largest_timestamp(storage: Storage, tmp_path: Path) -> None:
    log = segment_log(storage)  # every record timestamp is 1_000..1_002
    log.update_high_watermark(27)
    assert log.enforce_retention(101_002, retention_ms=100_000, retention_bytes=-1) == 0
    removed = log.enforce_retention(101_003, retention_ms=100_000, retention_bytes=-1)
    assert removed > 0 and log.size_bytes == 0, "an idle expired partition empties, as Kafka's"
    assert (log.log_start_offset, log.log_end_offset) == (27, 27)
    storage, log = reopen(storage, tmp_path)
    assert (log.log_start_offset, log.log_end_offset, log.segments) == (27, 27, [])
    assert append(log, 1) == [27]
    storage.close()


def test_segments_roll_by_time(storage: Storage) -> None:
    log = storage.get_or_create_log(TOPIC, 0, config=LogConfig(segment_ms=1_000))
    for now_ms in (0, 500, 999, 1_000, 1_500, 2_100):
        log.append_as_leader(make_batch(1), leader_epoch=1, now_ms=now_ms)
    assert [s.base_offset for s in log.segments] == [0, 3, 5]


def test_log_start_offset_inside_a_batch(storage: Storage, tmp_path: Path) -> None:
    log = segment_log(storage)
    log.update_high_watermark(20)
    assert log.maybe_increment_log_start_offset(13)
    assert not log.maybe_increment_log_start_offset(12), "never backwards"
    assert log.log_start_offset == 13
    assert [s.base_offset for s in log.segments] == [9, 18], "the wholly older segment went"
    assert parse_batch(log.read(13, 1).batches[0]).base_offset == 12, "the batch holding it"
    with pytest.raises(OffsetOutOfRangeError, match="above the high watermark"):
        log.maybe_increment_log_start_offset(21)
    storage, log = reopen(storage, tmp_path)
    assert log.log_start_offset == 13
    storage.close()


def test_retention_advances_the_epoch_cache(storage: Storage) -> None:
    log = new_log(storage)
    append(log, 1)
    log.config = LogConfig(segment_bytes=log.size_bytes)
    append(log, 1, epoch=1)
    append(log, 1, epoch=2)
    log.update_high_watermark(9)
    log.enforce_retention(0, retention_ms=-1, retention_bytes=log.segments[-1].size_bytes)
    assert log.log_start_offset == 6 and log.epoch_entries == [(2, 6)]


# --- timestamps and producer state -------------------------------------------------------------


def test_offset_for_timestamp(storage: Storage) -> None:
    log = new_log(storage, segment_bytes=300)
    for ts in (1_000, 2_000, 3_000):
        log.append_as_leader(make_batch(3, ts=ts), leader_epoch=1, now_ms=9_000)
    assert log.offset_for_timestamp(0) == (0, 1_000, 1)
    assert log.offset_for_timestamp(2_001) == (4, 2_001, 1)
    assert log.offset_for_timestamp(3_002) == (8, 3_002, 1)
    assert log.offset_for_timestamp(3_003) is None
    assert log.offset_for_timestamp(2_001, max_offset=3) is None
    log.update_high_watermark(9)
    log.maybe_increment_log_start_offset(5)
    assert log.offset_for_timestamp(0) == (5, 2_002, 1), "nothing below the log start"


def test_log_append_time_batches_use_the_brokers_clock(storage: Storage) -> None:
    log = new_log(storage)
    batch = make_batch(2, ts=1_000)
    batch.timestamp_type = TimestampType.LOG_APPEND_TIME
    batch.crc = batch_crc(batch)
    log.append_as_leader(batch, leader_epoch=1, now_ms=50_000)
    assert log.segments[0].max_timestamp_ms == 50_000
    assert log.offset_for_timestamp(40_000) == (0, 50_000, 1)


def test_producer_state_rides_with_appends_and_goes_with_the_partition(storage: Storage) -> None:
    log = new_log(storage)
    assert log.producer_state() is None
    log.append_as_leader(make_batch(), leader_epoch=1, now_ms=0, producer_state=b"state-1")
    assert log.producer_state() == b"state-1"
    log.put_producer_state(b"state-2")
    assert log.producer_state() == b"state-2"
    assert storage.delete_partition(TOPIC, 0)
    again = new_log(storage)
    assert again.producer_state() is None and again.log_end_offset == 0
