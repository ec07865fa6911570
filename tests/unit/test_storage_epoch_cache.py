"""The leader-epoch cache (broker/storage/epoch_cache.py), a pure value.

Checks Kafka's LeaderEpochFileCache semantics case by case: KIP-279 end offsets (the table from
Kafka's own tests: latest epoch -> LEO, an epoch between entries -> the floor epoch ending where
the next starts, above all -> undefined, below all -> the first start), truncation from the end
and from the start, refusal of non-monotonic entries, and the struct encoding round trip
(property-tested with hypothesis).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog import limits
from tidelog.broker.storage.epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochCache,
)
from tidelog.invariants import InvariantViolation

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache() -> LeaderEpochCache:
    # Epoch 2 started at 10, epoch 4 at 20, epoch 7 at 35.
    return LeaderEpochCache([(2, 10), (4, 20), (7, 35)])


@pytest.mark.parametrize(
    ("epoch", "expected"),
    [
        (7, (7, 50)),  # latest epoch: ends at the LEO
        (4, (4, 35)),  # ends where epoch 7 starts
        (5, (4, 35)),  # unknown epoch between entries: the floor epoch, same end
        (6, (4, 35)),
        (2, (2, 20)),
        (3, (2, 20)),
        (1, (1, 10)),  # below every entry: asked epoch, first start (Kafka's answer)
        (8, UNDEFINED),  # above every entry
        (UNDEFINED_EPOCH, UNDEFINED),
    ],
)
def test_end_offset_for_epoch_follows_kip_279(epoch: int, expected: tuple[int, int]) -> None:
    assert cache().end_offset_for_epoch(epoch, log_end_offset=50) == expected


def test_empty_cache_answers_undefined() -> None:
    empty = LeaderEpochCache()
    assert empty.latest_epoch() == UNDEFINED_EPOCH
    assert empty.end_offset_for_epoch(0, log_end_offset=5) == UNDEFINED


def test_assign_same_epoch_is_a_no_op_and_newer_epoch_appends() -> None:
    c = cache()
    assert not c.assign(7, 40)
    assert c.assign(9, 40)
    assert c.entries == [(2, 10), (4, 20), (7, 35), (9, 40)]


def test_an_epoch_that_appended_nothing_is_replaced() -> None:
    # Two elections with no append in between: the first epoch owns no offsets (Kafka drops it).
    c = LeaderEpochCache([(1, 0)])
    c.assign(2, 5)
    c.assign(3, 5)
    assert c.entries == [(1, 0), (3, 5)]


@pytest.mark.parametrize(("epoch", "start"), [(6, 40), (8, 30), (-1, 50)])
def test_non_monotonic_entries_are_refused(epoch: int, start: int) -> None:
    c = cache()
    assert not c.can_assign(epoch, start)
    with pytest.raises(InvariantViolation):
        c.assign(epoch, start)


def test_truncate_from_end_drops_entries_starting_at_or_after() -> None:
    c = cache()
    assert c.truncate_from_end(35)
    assert c.entries == [(2, 10), (4, 20)]
    assert not c.truncate_from_end(36)
    assert c.truncate_from_end(11)
    assert c.entries == [(2, 10)]


def test_truncate_from_start_moves_the_holding_epoch_up() -> None:
    c = cache()
    assert c.truncate_from_start(25)
    assert c.entries == [(4, 25), (7, 35)]
    assert not c.truncate_from_start(25)
    assert not c.truncate_from_start(3), "a start before every entry changes nothing"
    assert c.truncate_from_start(35)
    assert c.entries == [(7, 35)]


def test_epoch_for_offset() -> None:
    c = cache()
    assert [c.epoch_for_offset(o) for o in (5, 10, 19, 20, 34, 35, 99)] == [-1, 2, 2, 4, 4, 7, 7]


def test_entries_are_bounded() -> None:
    c = LeaderEpochCache()
    for epoch in range(limits.LEADER_EPOCH_ENTRIES_MAX + 5):
        c.assign(epoch, epoch)
    assert len(c.entries) == limits.LEADER_EPOCH_ENTRIES_MAX
    assert c.entries[0] == (5, 5)


def test_decode_refuses_damaged_bytes() -> None:
    data = cache().encode()
    with pytest.raises(ValueError):
        LeaderEpochCache.decode(data[:-1])
    epochs_go_down = struct.pack(">Iiqiq", 2, 7, 35, 2, 40)
    with pytest.raises(ValueError):
        LeaderEpochCache.decode(epochs_go_down)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50)), max_size=30))
def test_encode_round_trips(steps: list[tuple[int, int]]) -> None:
    c = LeaderEpochCache()
    epoch, start = 0, 0
    for de, ds in steps:
        epoch, start = epoch + de, start + ds
        c.assign(epoch, start)
    assert LeaderEpochCache.decode(c.encode()) == c
    epochs = [e for e, _ in c.entries]
    starts = [s for _, s in c.entries]
    assert epochs == sorted(set(epochs)) and starts == sorted(set(starts))
