"""Replica placement (controller/placement.py): every partition gets distinct brokers, spread
over racks, leaders balanced over brokers, and the result depends only on the seed."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.controller.placement import place_replicas
from tidelog.invariants import InvariantViolation


def _place(brokers: dict[int, str], partitions: int, rf: int, seed: int = 0, first: int = 0
           ) -> list[tuple[int, ...]]:
    return place_replicas(
        brokers, num_partitions=partitions, replication_factor=rf, rng=random.Random(seed),
        first_partition_id=first,
    )


def test_same_seed_same_placement_and_seeds_differ() -> None:
    brokers = {b: "" for b in range(6)}
    assert _place(brokers, 12, 3, seed=7) == _place(brokers, 12, 3, seed=7)
    assert len({tuple(_place(brokers, 12, 3, seed=s)) for s in range(10)}) > 1


def test_leaders_are_balanced_over_brokers() -> None:
    brokers = {b: "" for b in range(5)}
    leaders = Counter(replicas[0] for replicas in _place(brokers, 23, 3))
    assert set(leaders) == set(brokers)
    assert max(leaders.values()) - min(leaders.values()) <= 1


def test_replicas_spread_over_racks_when_there_are_enough() -> None:
    brokers = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    for replicas in _place(brokers, 30, 3, seed=3):
        assert len({brokers[b] for b in replicas}) == 3


def test_every_rack_used_when_racks_are_fewer_than_rf() -> None:
    brokers = {1: "a", 2: "a", 3: "a", 4: "b"}
    for replicas in _place(brokers, 8, 3):
        assert {brokers[b] for b in replicas} == {"a", "b"}


def test_single_broker() -> None:
    assert _place({7: ""}, 3, 1) == [(7,), (7,), (7,)]


def test_replication_factor_equal_to_broker_count_uses_all() -> None:
    for replicas in _place({1: "", 2: "", 3: ""}, 6, 3):
        assert sorted(replicas) == [1, 2, 3]


def test_first_partition_id_continues_the_rotation() -> None:
    brokers = {b: "" for b in range(4)}
    placed = _place(brokers, 2, 2, first=5)
    assert len(placed) == 2


def test_preconditions_are_asserted() -> None:
    with pytest.raises(InvariantViolation):
        _place({1: ""}, 1, 2)
    with pytest.raises(InvariantViolation):
        _place({1: ""}, 0, 1)


@settings(max_examples=200, deadline=None)
@given(
    racks=st.lists(st.sampled_from(["", "a", "b", "c"]), min_size=1, max_size=9),
    partitions=st.integers(1, 40),
    rf_fraction=st.floats(0, 1),
    seed=st.integers(0, 2**32),
)
def test_placement_properties(racks: list[str], partitions: int, rf_fraction: float, seed: int
                              ) -> None:
    brokers = {broker_id: rack for broker_id, rack in enumerate(racks)}
    rf = max(1, round(rf_fraction * len(brokers)))
    placed = _place(brokers, partitions, rf, seed=seed)
    assert len(placed) == partitions
    rack_count = len(set(racks))
    for replicas in placed:
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
        assert len({brokers[b] for b in replicas}) == min(rf, rack_count)
    leaders = Counter(replicas[0] for replicas in placed)
    if partitions >= len(brokers):
        assert max(leaders.values()) - min(leaders[b] for b in brokers) <= 1
