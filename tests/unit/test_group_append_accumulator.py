"""The coordinator's append accumulator (broker/group/append_accumulator.py), pure.

What it checks: the records of successive writes join one open batch while it has room, with
one sequence number; a write that would overflow the open batch closes it first and stays
whole in the next; only a write larger than a batch is split, its records in order across
batches with consecutive sequence numbers; drain and clear close the open batch (or give None).
"""

from __future__ import annotations

from tidelog.broker.group.append_accumulator import (
    RECORD_OVERHEAD_BYTES_MAX,
    AppendAccumulator,
    sized,
)
from tidelog.broker.group.records import offset_commit_tombstone
from tidelog.record_batch import NewRecord


def records(count: int, size: int = 100) -> list[tuple[NewRecord, int]]:
    return [(NewRecord(b"k%d" % i, b"v"), size) for i in range(count)]


def test_writes_join_the_open_batch_while_it_has_room() -> None:
    accumulator = AppendAccumulator(1_000)
    assert accumulator.add(records(3)) == ([0], [])
    assert accumulator.add(records(2)) == ([0], [])
    batch = accumulator.drain()
    assert batch is not None and batch.sequence == 0 and len(batch.records) == 5
    assert batch.size_bytes == 500
    assert accumulator.drain() is None
    assert accumulator.add(records(1)) == ([1], []), "the next batch has the next sequence"


def test_a_write_that_fits_a_batch_is_never_split() -> None:
    accumulator = AppendAccumulator(1_000)
    accumulator.add(records(6))  # 600 bytes open
    sequences, closed = accumulator.add(records(5))  # 500 more would overflow
    assert [b.sequence for b in closed] == [0] and len(closed[0].records) == 6
    assert sequences == [1]
    open_batch = accumulator.open_batch
    assert open_batch is not None and len(open_batch.records) == 5


def test_only_a_write_larger_than_a_batch_is_split_in_order() -> None:
    accumulator = AppendAccumulator(1_000)
    accumulator.add(records(2))
    big = records(25)  # 2,500 bytes
    sequences, closed = accumulator.add(big)
    last = accumulator.drain()
    assert last is not None
    batches = [*closed, last]
    assert sequences == [0, 1, 2], "the write's records share the open batch, then fill more"
    assert [b.sequence for b in batches] == [0, 1, 2]
    assert all(b.size_bytes <= 1_000 for b in batches)
    keys = [r.key for b in batches for r in b.records]
    assert keys == [b"k0", b"k1"] + [r.key for r, _ in big]


def test_clear_drops_the_open_batch_and_sized_counts_framing() -> None:
    accumulator = AppendAccumulator(1_000)
    assert accumulator.clear() is None
    accumulator.add(records(1))
    dropped = accumulator.clear()
    assert dropped is not None and dropped.sequence == 0 and accumulator.open_batch is None
    [(record, size)] = sized([offset_commit_tombstone("g", "t", 0)])
    assert record.value is None and record.key is not None
    assert size == len(record.key) + RECORD_OVERHEAD_BYTES_MAX
