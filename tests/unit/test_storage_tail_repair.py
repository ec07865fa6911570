"""Recovery on open (broker/storage/recovery.py): damage is repaired, not served.

A kill -9 cannot tear a RocksDB write batch (tests/integration/test_storage_recovery.py shows
that with a real process), so these tests make the damage by hand: they close the Storage, write
into its RocksDB directly through broker.storage.rocks (a garbage tail batch, a CRC-flipped one,
a HW above the log end, an epoch past it, an index that disagrees with the log), reopen, and check
that the log comes back consistent -- or is refused with a clear error when too much is damaged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.broker.storage import LogConfig, PartitionLog, Storage
from tidelog.broker.storage.epoch_cache import LeaderEpochCache
from tidelog.broker.storage.keys import META, PartitionKeys, TopicPartition
from tidelog.broker.storage.recovery import RECOVERY_TAIL_BATCHES_MAX
from tidelog.broker.storage.rocks import Column, RocksStore
from tidelog.broker.storage.segments import Segment
from tidelog.broker.storage.storage import DB_DIR_NAME
from tidelog.data_dir import format_data_dir
from tidelog.errors import KafkaStorageErrorError
from tidelog.record_batch import NewRecord, build_batch, parse_batch, validate_batch

CLUSTER = "test-cluster"
TOPIC = bytes(range(16))
KEYS = PartitionKeys(TopicPartition(TOPIC, 0))


def open_storage(path: Path) -> Storage:
    if not (path / "meta.properties").exists():
        format_data_dir(path, CLUSTER, 1)
    return Storage.open(path, cluster_id=CLUSTER, node_id=1)


def written_log(path: Path, batches: int = 4, segment_bytes: int = 1 << 30) -> list[bytes]:
    """A closed data dir holding ``batches`` batches of 2 records; returns their bytes."""
    with open_storage(path) as storage:
        log = storage.get_or_create_log(TOPIC, 0, config=LogConfig(segment_bytes=segment_bytes))
        for i in range(batches):
            data = build_batch([NewRecord(None, b"v%d" % i), NewRecord(None, b"w")], now_ms=i)
            log.append_as_leader(validate_batch(data), leader_epoch=1, now_ms=100 + i)
        log.update_high_watermark(log.log_end_offset)
        return log.read(0, 1 << 30).batches


def damage(path: Path, *puts: tuple[Column, bytes, bytes]) -> None:
    store = RocksStore(path / DB_DIR_NAME)
    try:
        wb = store.new_batch()
        for column, key, value in puts:
            wb.put(column, key, value)
        store.write(wb)
    finally:
        store.close()


def reopened(path: Path) -> tuple[Storage, PartitionLog]:
    storage = open_storage(path)
    log = storage.log(TOPIC, 0)
    log.check_invariants()
    return storage, log


def test_a_clean_log_reopens_unchanged(tmp_path: Path) -> None:
    batches = written_log(tmp_path)
    storage, log = reopened(tmp_path)
    assert log.read(0, 1 << 30).batches == batches
    assert (log.log_end_offset, log.high_watermark) == (8, 8)
    storage.close()


def test_a_garbage_tail_batch_is_deleted(tmp_path: Path) -> None:
    batches = written_log(tmp_path)
    damage(tmp_path, (Column.LOG, KEYS.log(8), b"\x0a\xff torn write"))
    storage, log = reopened(tmp_path)
    assert log.log_end_offset == 8 and log.read(0, 1 << 30).batches == batches
    storage.close()


def test_a_crc_damaged_tail_is_truncated_and_the_state_follows(tmp_path: Path) -> None:
    batches = written_log(tmp_path, batches=4)
    bad = bytearray(batches[-1])
    bad[-3] ^= 0x40
    damage(tmp_path, (Column.LOG, KEYS.log(6), bytes(bad)))
    storage, log = reopened(tmp_path)
    assert log.log_end_offset == 6 and log.high_watermark == 6, "HW clamped to the new LEO"
    assert log.read(0, 1 << 30).batches == batches[:-1]
    assert log.size_bytes == sum(len(b) for b in batches[:-1]), "the segment was re-measured"
    log.append_as_leader(parse_batch(batches[0]), leader_epoch=2, now_ms=0)
    storage.close()
    storage, log = reopened(tmp_path)
    assert log.log_end_offset == 8 and log.epoch_entries == [(1, 0), (2, 6)]
    storage.close()


def test_a_batch_under_the_wrong_key_is_damage(tmp_path: Path) -> None:
    batches = written_log(tmp_path)
    damage(tmp_path, (Column.LOG, KEYS.log(8), batches[0]))  # header says base offset 0
    storage, log = reopened(tmp_path)
    assert log.log_end_offset == 8
    storage.close()


def test_too_much_damage_refuses_the_partition(tmp_path: Path) -> None:
    written_log(tmp_path, batches=RECOVERY_TAIL_BATCHES_MAX + 2)
    garbage = [(Column.LOG, KEYS.log(2 * i), b"\x0a\xff") for i in
               range(RECOVERY_TAIL_BATCHES_MAX + 2)]
    damage(tmp_path, *garbage)
    with pytest.raises(KafkaStorageErrorError, match="corrupt batches at the log's tail"):
        open_storage(tmp_path)
    # The refused open released the DB: a second attempt fails the same way, not on a lock.
    with pytest.raises(KafkaStorageErrorError, match="corrupt batches"):
        open_storage(tmp_path)


def test_state_past_the_log_end_is_cut_back(tmp_path: Path) -> None:
    written_log(tmp_path, batches=2)  # LEO 4
    epochs = LeaderEpochCache([(1, 0), (3, 4), (4, 9)])
    damage(
        tmp_path,
        (Column.PARTITION_STATE, KEYS.meta, META.pack(0, 50)),
        (Column.PARTITION_STATE, KEYS.epochs, epochs.encode()),
        (Column.PARTITION_STATE, KEYS.segment(9), Segment(9, 12, 10, 0, 0).encode()),
    )
    storage, log = reopened(tmp_path)
    assert (log.high_watermark, log.log_end_offset) == (4, 4)
    assert log.epoch_entries == [(1, 0), (3, 4)], "an epoch starting at the LEO may stay"
    assert [s.base_offset for s in log.segments] == [0]
    storage.close()


def test_an_index_that_disagrees_with_the_log_is_rebuilt(tmp_path: Path) -> None:
    batches = written_log(tmp_path, batches=3)
    damage(tmp_path, (Column.PARTITION_STATE, KEYS.segment(0), Segment(0, 2, 7, 0, 0).encode()))
    storage, log = reopened(tmp_path)
    assert log.segments[0].next_offset == 6
    assert log.size_bytes == sum(len(b) for b in batches)
    storage.close()


def test_a_hole_in_the_segment_index_is_refused(tmp_path: Path) -> None:
    written_log(tmp_path, batches=3)
    damage(tmp_path, (Column.PARTITION_STATE, KEYS.segment(0), Segment(0, 2, 7, 0, 0).encode()),
           (Column.PARTITION_STATE, KEYS.segment(4), Segment(4, 6, 7, 0, 0).encode()))
    with pytest.raises(KafkaStorageErrorError, match="inconsistent"):
        open_storage(tmp_path)


def test_unknown_state_is_refused(tmp_path: Path) -> None:
    written_log(tmp_path, batches=1)
    damage(tmp_path, (Column.PARTITION_STATE, KEYS.prefix + b"Z", b"?"))
    with pytest.raises(KafkaStorageErrorError, match="cannot be decoded"):
        open_storage(tmp_path)
