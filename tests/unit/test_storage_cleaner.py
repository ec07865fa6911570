"""The log cleaner (broker/storage/cleaner.py) on crafted logs in a real RocksDB.

Each test appends real record batches (tidelog.record_batch) to a partition log with tiny
segments (every batch rolls a new one, so every batch but the last is outside the active
segment), runs cleaner passes with explicit ``now_ms`` and reads the log back through the storage
read path, decoding every batch (which checks its CRC). Checked: the latest value per key is kept
at its own offset (consumers see gaps), tombstones stay until delete.retention.ms, the active
segment, records younger than min.compaction.lag.ms and batches at or above the HW are never
touched, idempotent producer state rebuilt from the cleaned log still sees a retry as a
duplicate, a follower copies a cleaned log, and a pass interrupted after k write batches (a store
that raises, then a reopen) and resumed gives byte-for-byte the log of an uninterrupted pass.
A pass's budget (records, uncompressed bytes) ends it at a batch, inside a segment, and the
passes after it give the log one unbounded pass gives; a pass whose log was retained while it
waited for its decoding ends without writing; a stored batch that does not decode fails the
pass (CorruptMessageError) and changes nothing. The pure scheduling function is tested on plain
values. Passes run with ``run_here`` (decoding in place; the broker's runs on its cleaner
thread).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tidelog.broker.replication.producer_state import BatchHeader, Duplicate, ProducerStateTable
from tidelog.broker.storage import LogConfig, PartitionLog, Storage
from tidelog.broker.storage.cleaner import (
    DEFAULT_BUDGET,
    CleanableRange,
    CleanerBudget,
    CleanerConfig,
    CleanerStats,
    CleaningCandidate,
    choose_partitions_to_clean,
    clean_log,
    cleanable_range,
)
from tidelog.broker.storage.keys import TopicPartition
from tidelog.broker.storage.segments import Segment
from tidelog.data_dir import format_data_dir
from tidelog.errors import CorruptMessageError, KafkaStorageErrorError
from tidelog.record_batch import (
    NewRecord,
    batch_crc,
    build_batch,
    decode_records,
    parse_batch,
    validate_batch,
)
from tidelog.v1.common_pb2 import CompressionType

CLUSTER = "test-cluster"
TOPIC = bytes(range(16))
T0 = 1_000_000  # append clock of the crafted logs
DAY_MS = 86_400_000

KV = tuple[bytes | None, bytes | None]


def open_storage(path: Path) -> Storage:
    if not (path / "meta.properties").exists():
        format_data_dir(path, CLUSTER, 1)
    return Storage.open(path, cluster_id=CLUSTER, node_id=1)


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    s = open_storage(tmp_path / "a")
    yield s
    s.close()


def new_log(storage: Storage, segment_bytes: int = 14, partition: int = 0) -> PartitionLog:
    return storage.get_or_create_log(TOPIC, partition,
                                     config=LogConfig(segment_bytes=segment_bytes))


def produce(log: PartitionLog, records: list[KV], *, now_ms: int = T0, producer_id: int = -1,
            base_sequence: int = -1, compression: int = CompressionType.COMPRESSION_NONE) -> int:
    data = build_batch([NewRecord(k, v, timestamp_ms=now_ms) for k, v in records], now_ms=now_ms,
                       producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                       base_sequence=base_sequence, compression=compression)
    base: int = log.append_as_leader(validate_batch(data), leader_epoch=1,
                                     now_ms=now_ms).base_offset
    return base


def clean(log: PartitionLog, config: CleanerConfig, *, now_ms: int,
          budget: CleanerBudget = DEFAULT_BUDGET) -> CleanerStats | None:
    """One pass, its decoding done in place (the broker's runs on its cleaner thread). With
    ``run_here`` nothing suspends, so one step of the coroutine runs the whole pass and its
    exception comes out as it would from a plain call (an event loop would keep it, and the
    RocksDB handles its traceback holds, until a garbage collection)."""
    coroutine = clean_log(log, config, now_ms=now_ms, budget=budget)
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: CleanerStats | None = done.value
        return result
    coroutine.close()
    raise AssertionError("a pass with run_here suspended")


def committed(log: PartitionLog) -> None:
    log.update_high_watermark(log.log_end_offset)


def read_all(log: PartitionLog, fetch_offset: int | None = None, max_bytes: int = 1 << 30
             ) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a consumer reads from ``fetch_offset`` to the HW: every batch CRC-checked."""
    offset = log.log_start_offset if fetch_offset is None else fetch_offset
    out: list[tuple[int, bytes | None, bytes | None]] = []
    while offset < log.high_watermark:
        batches = log.read(offset, max_bytes, max_offset=log.high_watermark).batches
        assert batches, f"no batch at {offset} below the HW {log.high_watermark}"
        for data in batches:
            for r in decode_records(validate_batch(data)):
                if r.offset >= offset:
                    out.append((r.offset, r.key, r.value))
                    offset = r.offset + 1
    return out


def stored(log: PartitionLog) -> list[tuple[int, bytes]]:
    return list(log.scan_batches(0, log.log_end_offset))


def test_latest_value_per_key_kept_at_its_offset(storage: Storage) -> None:
    log = new_log(storage)
    produce(log, [(b"a", b"a1"), (b"b", b"b1")])  # offsets 0, 1
    produce(log, [(b"a", b"a2"), (b"c", b"c1")])  # 2, 3
    produce(log, [(b"b", b"b2")])  # 4
    produce(log, [(b"a", b"a3")])  # 5: the active segment
    committed(log)
    stats = clean(log, CleanerConfig(), now_ms=T0 + 1)
    assert stats is not None and stats.records_removed == 2 and stats.end_offset == 5
    assert read_all(log) == [(2, b"a", b"a2"), (3, b"c", b"c1"), (4, b"b", b"b2"),
                             (5, b"a", b"a3")]
    assert log.log_start_offset == 0 and log.log_end_offset == 6 and log.cleaner_checkpoint() == 5
    log.check_invariants()


def test_a_fetch_inside_a_gap_starts_at_the_next_batch(storage: Storage) -> None:
    log = new_log(storage)
    produce(log, [(b"a", b"a1"), (b"b", b"b1"), (b"c", b"c1")])  # 0..2: only a1 stays
    produce(log, [(b"b", b"b2"), (b"c", b"c2")])  # 3, 4
    produce(log, [(b"z", b"z1")])  # 5: active
    committed(log)
    clean(log, CleanerConfig(), now_ms=T0 + 1)
    assert [base for base, _ in stored(log)] == [0, 3, 5]
    # Offsets 1 and 2 are gone; a fetch there (even of one byte) gets the batch at 3, not the
    # batch at 0 that ends before it (a consumer would loop forever).
    for fetch in (1, 2):
        first = parse_batch(log.read(fetch, 1, max_offset=log.high_watermark).batches[0])
        assert first.base_offset == 3
    assert read_all(log, 1, max_bytes=1) == [(3, b"b", b"b2"), (4, b"c", b"c2"), (5, b"z", b"z1")]


def test_tombstones_stay_until_delete_retention_then_go(storage: Storage) -> None:
    log = new_log(storage)
    config = CleanerConfig(delete_retention_ms=DAY_MS)
    produce(log, [(b"k", b"v1"), (b"j", b"j1")])
    produce(log, [(b"k", None)])  # the tombstone, offset 2
    produce(log, [(b"x", b"x1")])
    committed(log)
    clean(log, config, now_ms=T0 + 10)
    assert read_all(log) == [(1, b"j", b"j1"), (2, b"k", None), (3, b"x", b"x1")]
    # A later pass (new dirty data) within delete.retention.ms keeps the tombstone ...
    produce(log, [(b"x", b"x2")], now_ms=T0 + 20)
    produce(log, [(b"y", b"y1")], now_ms=T0 + 30)
    committed(log)
    clean(log, config, now_ms=T0 + DAY_MS)
    assert (2, b"k", None) in read_all(log)
    # ... and the first pass after it drops it.
    produce(log, [(b"y", b"y2")], now_ms=T0 + DAY_MS + 40)
    produce(log, [(b"w", b"w1")], now_ms=T0 + DAY_MS + 50)
    committed(log)
    clean(log, config, now_ms=T0 + DAY_MS + 60)
    assert read_all(log) == [(1, b"j", b"j1"), (4, b"x", b"x2"), (6, b"y", b"y2"),
                             (7, b"w", b"w1")]
    log.check_invariants()


def test_active_segment_is_never_cleaned(storage: Storage) -> None:
    log = new_log(storage, segment_bytes=1 << 30)  # everything in one, active, segment
    for i in range(5):
        produce(log, [(b"k", b"v%d" % i)])
    committed(log)
    before = stored(log)
    assert clean(log, CleanerConfig(), now_ms=T0 + DAY_MS) is None
    assert stored(log) == before


def test_records_younger_than_min_compaction_lag_are_untouched(storage: Storage) -> None:
    log = new_log(storage)
    config = CleanerConfig(min_compaction_lag_ms=1000)
    produce(log, [(b"k", b"old")], now_ms=T0)
    produce(log, [(b"k", b"new")], now_ms=T0 + 5000)
    produce(log, [(b"k", b"newest")], now_ms=T0 + 5000)
    produce(log, [(b"z", b"active")], now_ms=T0 + 5000)
    committed(log)
    # At T0 + 2000 only the first segment is old enough: nothing in it is superseded within
    # the range, so nothing changes (the newer "k"s are outside the map).
    stats = clean(log, config, now_ms=T0 + 2000)
    assert stats is not None and stats.end_offset == 1 and stats.records_removed == 0
    assert [o for o, _, _ in read_all(log)] == [0, 1, 2, 3]
    stats = clean(log, config, now_ms=T0 + 6000)
    assert stats is not None and stats.end_offset == 3
    assert read_all(log) == [(2, b"k", b"newest"), (3, b"z", b"active")]


def test_nothing_at_or_above_the_high_watermark_is_touched(storage: Storage) -> None:
    log = new_log(storage)
    for i in range(6):
        produce(log, [(b"k", b"v%d" % i)])
    log.update_high_watermark(3)
    above = [(b, d) for b, d in stored(log) if b >= 3]
    clean(log, CleanerConfig(), now_ms=T0 + 1)
    assert [(b, d) for b, d in stored(log) if b >= 3] == above
    assert [b for b, _ in stored(log)] == [2, 3, 4, 5]
    assert log.cleaner_checkpoint() == 3


def test_compressed_batches_are_rebuilt_with_their_codec(storage: Storage) -> None:
    log = new_log(storage)
    produce(log, [(b"a", b"1" * 100), (b"b", b"2" * 100), (b"c", b"3" * 100)],
            compression=CompressionType.COMPRESSION_GZIP)
    produce(log, [(b"b", b"x")], compression=CompressionType.COMPRESSION_LZ4)
    produce(log, [(b"z", b"z")])
    committed(log)
    clean(log, CleanerConfig(), now_ms=T0 + 1)
    batches = [parse_batch(d) for _, d in stored(log)]
    assert [b.compression for b in batches[:2]] == [CompressionType.COMPRESSION_GZIP] * 2
    assert read_all(log) == [(0, b"a", b"1" * 100), (2, b"c", b"3" * 100), (3, b"b", b"x"),
                             (4, b"z", b"z")]


def rebuilt_producer_state(log: PartitionLog) -> ProducerStateTable:
    headers = []
    for _, data in stored(log):
        h = parse_batch(data)
        headers.append(BatchHeader(h.producer_id, h.producer_epoch, h.base_sequence,
                                   h.record_count, h.base_offset, h.log_append_time_ms))
    return ProducerStateTable.rebuild(headers)


def test_a_retry_of_a_producers_last_batch_is_still_a_duplicate(storage: Storage) -> None:
    log = new_log(storage)
    produce(log, [(b"a", b"1"), (b"b", b"1")], producer_id=7, base_sequence=0)  # 0, 1
    produce(log, [(b"a", b"2"), (b"b", b"2"), (b"c", b"2")], producer_id=7,
            base_sequence=2)  # 2..4: its last batch
    produce(log, [(b"a", b"3"), (b"b", b"3"), (b"c", b"3")])  # 5..7, not idempotent
    produce(log, [(b"z", b"z")])
    committed(log)
    clean(log, CleanerConfig(), now_ms=T0 + 1)
    assert [b for b, _ in stored(log)] == [2, 5, 8]  # its first batch went, its last stayed
    check = rebuilt_producer_state(log).check(producer_id=7, producer_epoch=0, base_sequence=2,
                                              record_count=3)
    assert check == Duplicate(2, 4)


def test_sequences_of_a_split_batch_follow_its_offsets(storage: Storage) -> None:
    log = new_log(storage)
    produce(log, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1"), (b"d", b"1")], producer_id=7,
            base_sequence=10)  # 0..3
    produce(log, [(b"b", b"2")], producer_id=7, base_sequence=14)  # 4: its last batch
    produce(log, [(b"z", b"z")])
    committed(log)
    clean(log, CleanerConfig(), now_ms=T0 + 1)
    pieces = [parse_batch(d) for b, d in stored(log) if b < 4]
    assert [(p.base_offset, p.base_sequence, p.record_count) for p in pieces] == [
        (0, 10, 1), (2, 12, 2)]
    assert all(p.producer_id == 7 and p.partition_leader_epoch == 1 for p in pieces)


def test_a_follower_copies_a_cleaned_log(storage: Storage, tmp_path: Path) -> None:
    log = new_log(storage)
    produce(log, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")])
    produce(log, [(b"b", b"2"), (b"c", b"2")])
    produce(log, [(b"z", b"z")])
    committed(log)
    clean(log, CleanerConfig(), now_ms=T0 + 1)
    with open_storage(tmp_path / "follower") as other:
        follower = new_log(other)
        while follower.log_end_offset < log.log_end_offset:
            for data in log.read(follower.log_end_offset, 1 << 20).batches:
                follower.append_as_follower(data)
        committed(follower)
        assert read_all(follower) == read_all(log)
        follower.check_invariants()


def test_a_cleaned_log_reopens(tmp_path: Path) -> None:
    with open_storage(tmp_path / "a") as s:
        log = new_log(s)
        for i in range(4):
            produce(log, [(b"k", b"v%d" % i), (b"j%d" % i, b"x")])
        committed(log)
        clean(log, CleanerConfig(), now_ms=T0 + 1)
        expected = read_all(log)
    with open_storage(tmp_path / "a") as s:
        log = s.log(TOPIC, 0)
        assert read_all(log) == expected and log.cleaner_checkpoint() == 6
        log.check_invariants()


class FailingStore:
    """The real store, whose write raises after ``writes_ok`` writes (a crash between groups)."""

    def __init__(self, store: Any, writes_ok: int) -> None:
        self._store = store
        self._writes_ok = writes_ok

    def write(self, batch: Any) -> None:
        if self._writes_ok == 0:
            raise KafkaStorageErrorError("injected failure")
        self._writes_ok -= 1
        self._store.write(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def craft(log: PartitionLog) -> None:
    for i in range(12):
        produce(log, [(b"k%d" % (i % 3), b"v%d" % i), (b"u%d" % i, b"x"), (b"k%d" % (i % 4), None)])
    committed(log)


@pytest.mark.parametrize("writes_ok", [0, 1, 3])
def test_an_interrupted_pass_resumed_gives_the_same_log(tmp_path: Path, writes_ok: int) -> None:
    config = CleanerConfig(delete_retention_ms=0)
    with open_storage(tmp_path / "whole") as s:
        whole = new_log(s)
        craft(whole)
        stats = clean(whole, config, now_ms=T0 + 1, budget=CleanerBudget(group_bytes_max=1))
        assert stats is not None and stats.groups_written > writes_ok + 1
        expected, expected_segments = stored(whole), whole.segments
    with open_storage(tmp_path / "cut") as s:
        cut = new_log(s)
        craft(cut)
        cut._store = FailingStore(cut._store, writes_ok)  # type: ignore[assignment]
        with pytest.raises(KafkaStorageErrorError):
            clean(cut, config, now_ms=T0 + 1, budget=CleanerBudget(group_bytes_max=1))
        assert cut.cleaner_checkpoint() == 0
        partial = stored(cut)
        assert partial != expected
    with open_storage(tmp_path / "cut") as s:  # as after a kill -9: reopen, resume
        cut = s.log(TOPIC, 0)
        assert stored(cut) == partial
        cut.update_high_watermark(cut.log_end_offset)
        clean(cut, config, now_ms=T0 + 1, budget=CleanerBudget(group_bytes_max=1))
        assert stored(cut) == expected and cut.segments == expected_segments
        cut.check_invariants()


def rounds(log: PartitionLog) -> None:
    """Eight batches of two records, three to a segment (the last two batches are active)."""
    for i in range(8):
        produce(log, [(b"k%d" % (i % 3), b"v%d" % i), (b"u%d" % (i % 2), b"x%d" % i)])
    committed(log)


@pytest.mark.parametrize("budget", [CleanerBudget(dirty_records_max=3),
                                    CleanerBudget(dirty_bytes_max=30)])
def test_a_pass_ends_where_its_budget_does_and_the_next_goes_on(
        storage: Storage, budget: CleanerBudget) -> None:
    whole, cut = new_log(storage, 250, partition=0), new_log(storage, 250, partition=1)
    rounds(whole)
    rounds(cut)
    assert len(whole.segments) == 3
    clean(whole, CleanerConfig(), now_ms=T0 + 1)
    ends = []
    while (stats := clean(cut, CleanerConfig(), now_ms=T0 + 1, budget=budget)) is not None:
        assert stats.records_read == 2  # one batch a pass: two would pass the budget
        ends.append(stats.end_offset)
        assert cut.cleaner_checkpoint() == stats.end_offset
    assert ends == [2, 4, 6, 8, 10, 12], "checkpoints inside segments, then on"
    assert read_all(cut) == read_all(whole)
    cut.check_invariants()


def test_a_pass_gives_up_when_the_log_changes_while_it_waits(storage: Storage) -> None:
    log = new_log(storage)
    craft(log)
    before = stored(log)

    async def retention_meanwhile(work: Any) -> Any:
        log.maybe_increment_log_start_offset(3)  # as retention or DeleteRecords would
        return work()

    coroutine = clean_log(log, CleanerConfig(), now_ms=T0 + 1, offload=retention_meanwhile)
    with pytest.raises(StopIteration) as done:
        coroutine.send(None)
    assert done.value.value is None, "the pass ended without a write"
    assert stored(log) == [(b, d) for b, d in before if b >= 3]
    assert log.cleaner_checkpoint() == 0
    assert clean(log, CleanerConfig(), now_ms=T0 + 1) is not None  # the next pass cleans


def test_a_batch_that_does_not_decode_fails_the_pass_not_the_log(storage: Storage) -> None:
    log = new_log(storage)
    produce(log, [(b"a", b"1")])
    good = parse_batch(build_batch([NewRecord(b"b", b"2"), NewRecord(b"c", b"3")], now_ms=T0))
    good.records = good.records[:-2]  # cut, with a CRC that matches again: stored as it was
    good.uncompressed_size, good.crc = len(good.records), 0
    good.crc = batch_crc(good)
    log.append_as_leader(good, leader_epoch=1, now_ms=T0)  # storage checks no records
    produce(log, [(b"a", b"4")])
    committed(log)
    before = stored(log)
    with pytest.raises(CorruptMessageError, match="record"):
        clean(log, CleanerConfig(), now_ms=T0 + 1)
    assert stored(log) == before and log.cleaner_checkpoint() == 0


def segment(base: int, end: int, size: int, ts: int = T0) -> Segment:
    return Segment(base, end, size, ts, ts)


def test_cleanable_range_stops_at_the_hw_and_the_active_segment() -> None:
    segments = [segment(0, 10, 100), segment(10, 20, 100), segment(20, 30, 100),
                segment(30, 40, 100)]
    r = cleanable_range(segments, log_start_offset=0, high_watermark=40, cleaner_checkpoint=10,
                        now_ms=T0, min_compaction_lag_ms=0)
    assert (r.first_dirty_offset, r.end_offset, r.clean_bytes, r.dirty_bytes) == (10, 30, 100, 200)
    r = cleanable_range(segments, log_start_offset=0, high_watermark=25, cleaner_checkpoint=0,
                        now_ms=T0, min_compaction_lag_ms=0)
    assert r.end_offset == 20
    # A checkpoint inside a segment (a pass cut by its budget): dirty from there.
    r = cleanable_range(segments, log_start_offset=0, high_watermark=40, cleaner_checkpoint=15,
                        now_ms=T0, min_compaction_lag_ms=0)
    assert (r.first_dirty_offset, r.end_offset, r.clean_bytes, r.dirty_bytes) == (15, 30, 100, 200)
    r = cleanable_range(segments, log_start_offset=0, high_watermark=40, cleaner_checkpoint=30,
                        now_ms=T0, min_compaction_lag_ms=0)
    assert r.dirty_bytes == 0 and r.dirty_ratio == 0.0


def candidate(partition: int, clean: int, dirty: int, first_dirty_ms: int = T0,
              config: CleanerConfig | None = None) -> CleaningCandidate:
    return CleaningCandidate(TopicPartition(TOPIC, partition),
                             CleanableRange(0, 0, 1, clean, dirty, first_dirty_ms),
                             config or CleanerConfig())


def test_the_dirtiest_partition_is_cleaned_first_and_max_lag_overrides_the_ratio() -> None:
    lagging = candidate(3, 90, 10, config=CleanerConfig(max_compaction_lag_ms=1000))
    candidates = [candidate(0, 50, 50), candidate(1, 10, 90), candidate(2, 90, 10), lagging,
                  candidate(4, 0, 0)]
    chosen = choose_partitions_to_clean(candidates, now_ms=T0 + 500, count_max=10)
    assert [c.topic_partition.partition for c in chosen] == [1, 0]
    chosen = choose_partitions_to_clean(candidates, now_ms=T0 + 2000, count_max=10)
    assert [c.topic_partition.partition for c in chosen] == [3, 1, 0]
    assert choose_partitions_to_clean(candidates, now_ms=T0, count_max=1)[0] is candidates[1]
