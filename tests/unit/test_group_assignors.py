"""The server-side assignors (broker/group/assignors): uniform and range, pure and deterministic.

Hypothesis draws groups (members, subscriptions that may name unknown topics, current assignments
that may be stale, out of range or claimed twice, topics with zero partitions) and checks what
both assignors promise: every partition of a subscribed topic goes to exactly one member that
subscribes to it, every member has an entry, the same input in another dict order gives the same
output. For uniform also: balance (per-member counts within one for identical subscriptions; per
topic otherwise), an assignment it made is a fixed point, and stickiness (a member leaving moves
only its partitions; a member joining takes only what it gets). Readable examples pin range's
exact output (ranges, co-partitioning, static members first) and uniform's balance and stickiness
on small groups. One test runs the same input in two interpreters with different hash seeds.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.broker.group.assignment import Assignment, Assignor, MemberSubscription, TopicMetadata
from tidelog.broker.group.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    RangeAssignor,
    UniformAssignor,
)
from tidelog.broker.group.assignors.common import check_assignment, group_spec
from tidelog.invariants import InvariantViolation

UNIFORM = UniformAssignor()
RANGE = RangeAssignor()
T1, T2, T3 = b"\x01" * 16, b"\x02" * 16, b"\x03" * 16
UNKNOWN = b"\xff" * 16

Members = dict[str, MemberSubscription]
Topics = dict[bytes, TopicMetadata]
Result = Mapping[str, Assignment]
K = TypeVar("K")
V = TypeVar("V")


def topics(**counts: int) -> Topics:
    ids = {"t1": T1, "t2": T2, "t3": T3}
    return {ids[n]: TopicMetadata(ids[n], n, c) for n, c in counts.items()}


def member(member_id: str, *subscribed: bytes, current: Assignment | None = None,
           instance_id: str | None = None) -> MemberSubscription:
    return MemberSubscription(member_id, frozenset(subscribed), current or {},
                              instance_id=instance_id)


def group(*ms: MemberSubscription) -> Members:
    return {m.member_id: m for m in ms}


def plain(result: Result) -> dict[str, dict[str, list[int]]]:
    """Readable form: member -> topic name (t1..) -> sorted partitions."""
    names = {T1: "t1", T2: "t2", T3: "t3"}
    return {m: {names[t]: sorted(ps) for t, ps in sorted(a.items())}
            for m, a in sorted(result.items())}


def owners(result: Result) -> dict[tuple[bytes, int], str]:
    return {(t, p): m for m, a in result.items() for t, ps in a.items() for p in ps}


def loads(result: Result) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def with_current(members: Members, result: Result) -> Members:
    return {m: MemberSubscription(m, s.subscribed_topic_ids, dict(result.get(m, {})),
                                  s.instance_id) for m, s in members.items()}


def check_valid(members: Members, topic_map: Topics, result: Result) -> None:
    """Exactly-once coverage of subscribed partitions, only to subscribers, an entry per member,
    never an empty partition set."""
    assert sorted(result) == sorted(members)
    seen: Counter[tuple[bytes, int]] = Counter()
    for member_id, assignment in result.items():
        for topic_id, partitions in assignment.items():
            assert topic_id in members[member_id].subscribed_topic_ids
            assert topic_id in topic_map
            assert partitions
            seen.update((topic_id, p) for p in partitions)
    subscribed = {t for m in members.values() for t in m.subscribed_topic_ids if t in topic_map}
    expected = {(t, p) for t in subscribed for p in range(topic_map[t].partitions)}
    assert set(seen) == expected
    assert all(n == 1 for n in seen.values())


# --- strategies -----------------------------------------------------------------------------

TOPIC_IDS = [bytes([i]) * 16 for i in range(1, 6)]


@st.composite
def groups(draw: st.DrawFn, homogeneous: bool | None = None) -> tuple[Members, Topics]:
    """A group and its topics. Subscriptions may name UNKNOWN; currents may hold partitions out
    of range, of topics not subscribed, or claimed by two members."""
    topic_ids = draw(st.lists(st.sampled_from(TOPIC_IDS), min_size=1, max_size=4, unique=True))
    topic_map = {t: TopicMetadata(t, t.hex()[:4], draw(st.integers(0, 12))) for t in topic_ids}
    choices = [*topic_ids, UNKNOWN]
    member_ids = draw(st.lists(st.text("abcxyz019", min_size=1, max_size=4), max_size=7,
                               unique=True))
    shared = draw(st.frozensets(st.sampled_from(choices), max_size=len(choices)))
    if homogeneous is None:
        homogeneous = draw(st.booleans())
    members: Members = {}
    for member_id in member_ids:
        subscribed = shared if homogeneous else draw(
            st.frozensets(st.sampled_from(choices), max_size=len(choices)))
        current = draw(st.dictionaries(
            st.sampled_from(choices), st.frozensets(st.integers(0, 13), max_size=6), max_size=3))
        members[member_id] = MemberSubscription(member_id, subscribed, current)
    return members, topic_map


def shuffled(members: Members, topic_map: Topics, seed: int) -> tuple[Members, Topics]:
    """The same input, built in another order (dicts and sets)."""
    rng = random.Random(seed)

    def reorder(mapping: Mapping[K, V]) -> dict[K, V]:
        keys = list(mapping)
        rng.shuffle(keys)
        return {k: mapping[k] for k in keys}

    out: Members = {}
    for member_id, m in reorder(members).items():
        subscribed = list(m.subscribed_topic_ids)
        rng.shuffle(subscribed)
        current = {t: frozenset(sorted(ps, reverse=True)) for t, ps in reorder(m.current).items()}
        out[member_id] = MemberSubscription(member_id, frozenset(subscribed), current)
    return out, reorder(topic_map)


ASSIGNOR_LIST = [UNIFORM, RANGE]
ASSIGNOR_IDS = ["uniform", "range"]
PROPERTY = settings(max_examples=150, deadline=None)


# --- properties of both assignors -----------------------------------------------------------

@pytest.mark.parametrize("assignor", ASSIGNOR_LIST, ids=ASSIGNOR_IDS)
@PROPERTY
@given(data=groups(), seed=st.integers(0, 2**32))
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(
        assignor: Assignor, data: tuple[Members, Topics], seed: int) -> None:
    members, topic_map = data
    result = assignor.assign(members, topic_map)
    check_valid(members, topic_map, result)
    # Determinism: the same group in another order gives the same target.
    assert assignor.assign(*shuffled(members, topic_map, seed)) == result


@pytest.mark.parametrize("assignor", ASSIGNOR_LIST, ids=ASSIGNOR_IDS)
@PROPERTY
@given(data=groups())
def test_an_assignment_is_a_fixed_point(assignor: Assignor, data: tuple[Members, Topics]
                                        ) -> None:
    """Handing an assignor its own target back changes nothing: no churn without a change."""
    members, topic_map = data
    first = assignor.assign(members, topic_map)
    assert assignor.assign(with_current(members, first), topic_map) == first


# --- uniform: balance and stickiness ----------------------------------------------------------

@PROPERTY
@given(data=groups(homogeneous=True))
def test_uniform_homogeneous_counts_differ_by_at_most_one(data: tuple[Members, Topics]) -> None:
    members, topic_map = data
    counts = loads(UNIFORM.assign(members, topic_map)).values()
    assert not counts or max(counts) - min(counts) <= 1


@PROPERTY
@given(data=groups(homogeneous=False))
def test_uniform_heterogeneous_is_balanced_per_topic(data: tuple[Members, Topics]) -> None:
    """No member holding a partition of a topic has two more partitions than another subscriber
    of that topic (moving one would improve the balance)."""
    members, topic_map = data
    result = UNIFORM.assign(members, topic_map)
    load = loads(result)
    for topic_id in topic_map:
        subscribers = [m for m, s in members.items() if topic_id in s.subscribed_topic_ids]
        holders = [m for m in subscribers if topic_id in result[m]]
        for holder in holders:
            assert all(load[holder] - load[other] <= 1 for other in subscribers)


@PROPERTY
@given(data=groups(), pick=st.integers(0, 100))
def test_uniform_member_leaving_moves_only_its_partitions(
        data: tuple[Members, Topics], pick: int) -> None:
    members, topic_map = data
    if not members:
        return
    before = UNIFORM.assign(members, topic_map)
    leaving = sorted(members)[pick % len(members)]
    rest = with_current(members, before)
    del rest[leaving]
    after = UNIFORM.assign(rest, topic_map)
    check_valid(rest, topic_map, after)
    if group_spec(members, topic_map).homogeneous:
        # Every member keeps all it had: only the leaver's partitions move.
        for m in rest:
            for topic_id, partitions in before[m].items():
                assert partitions <= after[m].get(topic_id, frozenset())
    else:
        # Heterogeneous: the leaver's partitions move, plus what rebalancing needs; at most one
        # more partition moves per partition the leaver gave up.
        old, new = owners(before), owners(after)
        moved = sum(1 for tp, m in old.items() if m != leaving and new[tp] != m)
        assert moved <= loads(before)[leaving]


@PROPERTY
@given(data=groups(homogeneous=True))
def test_uniform_member_joining_takes_only_what_it_gets(data: tuple[Members, Topics]) -> None:
    members, topic_map = data
    before = UNIFORM.assign(members, topic_map)
    joined = with_current(members, before)
    newcomer = "\uffff-new"  # sorts after every drawn member id
    joined[newcomer] = MemberSubscription(
        newcomer, next(iter(members.values())).subscribed_topic_ids if members else frozenset())
    after = UNIFORM.assign(joined, topic_map)
    check_valid(joined, topic_map, after)
    old, new = owners(before), owners(after)
    moved = {tp for tp, m in old.items() if new[tp] != m}
    assert all(new[tp] == newcomer for tp in moved)
    assert len(moved) == loads(after)[newcomer]


# --- uniform: examples --------------------------------------------------------------------------

def test_uniform_three_members_two_topics_from_scratch() -> None:
    members = group(member("m1", T1, T2), member("m2", T1, T2), member("m3", T1, T2))
    result = UNIFORM.assign(members, topics(t1=4, t2=3))
    # 7 partitions over 3 members: 3, 2, 2; unowned partitions fill members in id order.
    assert plain(result) == {
        "m1": {"t1": [0, 1, 2]},
        "m2": {"t1": [3], "t2": [0]},
        "m3": {"t2": [1, 2]},
    }


def test_uniform_join_then_leave_moves_the_minimum() -> None:
    topic_map = topics(t1=4, t2=3)
    three = group(member("m1", T1, T2), member("m2", T1, T2), member("m3", T1, T2))
    first = UNIFORM.assign(three, topic_map)
    four = with_current(three, first)
    four["m4"] = member("m4", T1, T2)
    second = UNIFORM.assign(four, topic_map)
    # 7 over 4: quotas 2, 2, 2, 1; m1 gives up one partition, the newcomer gets it.
    assert plain(second) == {
        "m1": {"t1": [0, 1]},
        "m2": {"t1": [3], "t2": [0]},
        "m3": {"t2": [1, 2]},
        "m4": {"t1": [2]},
    }
    three_again = with_current(four, second)
    del three_again["m1"]
    third = UNIFORM.assign(three_again, topic_map)
    # m1's two partitions go to the members below quota; nobody else moves.
    assert plain(third) == {
        "m2": {"t1": [0, 3], "t2": [0]},
        "m3": {"t2": [1, 2]},
        "m4": {"t1": [1, 2]},
    }


def test_uniform_leaving_member_moves_only_its_partition_when_holders_sort_last() -> None:
    """9 partitions over a..f: d, e, f hold two each. When a leaves, 9 over 5 gives four members
    two: d, e, f keep theirs and b gets a's partition. Kafka, handing the larger quotas out in
    member order (b, c, d, e), would take one from f and move it too."""
    held = {"a": [0], "b": [1], "c": [2], "d": [3, 4], "e": [5, 6], "f": [7, 8]}
    members = group(*(member(m, T1, current={T1: frozenset(ps)}) for m, ps in held.items()))
    assert plain(UNIFORM.assign(members, topics(t1=9))) == {m: {"t1": ps} for m, ps in held.items()}
    del members["a"]
    assert plain(UNIFORM.assign(members, topics(t1=9))) == {
        "b": {"t1": [0, 1]}, "c": {"t1": [2]}, "d": {"t1": [3, 4]}, "e": {"t1": [5, 6]},
        "f": {"t1": [7, 8]},
    }


def test_uniform_keeps_a_members_partitions_when_balance_allows() -> None:
    current = {T1: frozenset({5, 6, 7})}
    members = group(member("a", T1), member("b", T1, current=current))
    result = UNIFORM.assign(members, topics(t1=8))
    assert result["b"][T1] >= frozenset({5, 6, 7})
    assert loads(result) == {"a": 4, "b": 4}


def test_uniform_heterogeneous_overlapping_subscriptions() -> None:
    members = group(member("m1", T1), member("m2", T1, T2), member("m3", T2))
    result = UNIFORM.assign(members, topics(t1=4, t2=3))
    check_valid(members, topics(t1=4, t2=3), result)
    assert sorted(loads(result).values()) == [2, 2, 3]
    assert set(result["m1"]) == {T1} and set(result["m3"]) == {T2}


def test_uniform_heterogeneous_newcomer_on_one_topic() -> None:
    """A member subscribing to one of two topics joins a group that holds both: it takes half
    of that topic, and the member that gave them up takes one partition of the other topic.

    The result (4, 5, 3) is balanced per topic, which is what Kafka's heterogeneous builder
    reaches too; 4, 4, 4 would need a chain of two moves (b gives t2 to a, a gives t1 to c)
    that neither looks for."""
    topic_map = topics(t1=6, t2=6)
    two = group(member("a", T1, T2), member("b", T1, T2))
    first = UNIFORM.assign(two, topic_map)
    assert plain(first) == {"a": {"t1": [0, 1, 2, 3, 4, 5]}, "b": {"t2": [0, 1, 2, 3, 4, 5]}}
    joined = with_current(two, first)
    joined["c"] = member("c", T1)
    second = UNIFORM.assign(joined, topic_map)
    assert plain(second) == {
        "a": {"t1": [0, 1, 2], "t2": [5]},
        "b": {"t2": [0, 1, 2, 3, 4]},
        "c": {"t1": [3, 4, 5]},
    }


# --- range: examples ----------------------------------------------------------------------------

def test_range_three_members_two_topics() -> None:
    members = group(member("m3", T1, T2), member("m1", T1, T2), member("m2", T1, T2))
    assert plain(RANGE.assign(members, topics(t1=4, t2=3))) == {
        "m1": {"t1": [0, 1], "t2": [0]},
        "m2": {"t1": [2], "t2": [1]},
        "m3": {"t1": [3], "t2": [2]},
    }


def test_range_co_partitioned_topics_land_together() -> None:
    members = group(member("m0", T1, T2), member("m1", T1, T2))
    assert plain(RANGE.assign(members, topics(t1=3, t2=3))) == {
        "m0": {"t1": [0, 1], "t2": [0, 1]},
        "m1": {"t1": [2], "t2": [2]},
    }


def test_range_heterogeneous_splits_each_topic_among_its_subscribers() -> None:
    members = group(member("m1", T1), member("m2", T1, T2), member("m3", T2))
    assert plain(RANGE.assign(members, topics(t1=4, t2=3))) == {
        "m1": {"t1": [0, 1]},
        "m2": {"t1": [2, 3], "t2": [0, 1]},
        "m3": {"t2": [2]},
    }


def test_range_more_members_than_partitions_leaves_the_last_ones_idle() -> None:
    members = group(member("a", T1), member("b", T1), member("c", T1))
    assert plain(RANGE.assign(members, topics(t1=2))) == {
        "a": {"t1": [0]}, "b": {"t1": [1]}, "c": {},
    }


def test_range_static_members_come_first_by_instance_id() -> None:
    """Kafka's order: static members by group.instance.id, then dynamic ones by member id; a
    static member that restarts with a new member id keeps its range."""
    members = group(member("a", T1), member("z", T1, instance_id="i1"),
                    member("y", T1, instance_id="i0"))
    assert plain(RANGE.assign(members, topics(t1=6))) == {
        "y": {"t1": [0, 1]}, "z": {"t1": [2, 3]}, "a": {"t1": [4, 5]},
    }
    restarted = group(member("a", T1), member("z", T1, instance_id="i1"),
                      member("b-new", T1, instance_id="i0"))
    assert plain(RANGE.assign(restarted, topics(t1=6)))["b-new"] == {"t1": [0, 1]}


def test_range_ignores_the_current_assignment() -> None:
    current = {T1: frozenset({2, 3})}
    members = group(member("a", T1), member("b", T1, current=current))
    assert plain(RANGE.assign(members, topics(t1=4))) == {"a": {"t1": [0, 1]}, "b": {"t1": [2, 3]}}


@PROPERTY
@given(data=groups(homogeneous=True))
def test_range_homogeneous_ranges_are_contiguous_and_balanced_per_topic(
        data: tuple[Members, Topics]) -> None:
    members, topic_map = data
    result = RANGE.assign(members, topic_map)
    for topic_id in topic_map:
        if not any(topic_id in m.subscribed_topic_ids for m in members.values()):
            continue
        per_member = [sorted(result[m].get(topic_id, ())) for m in sorted(members)]
        sizes = [len(ps) for ps in per_member]
        assert max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True)  # the larger ranges go first
        assert [p for ps in per_member for p in ps] == list(range(topic_map[topic_id].partitions))


# --- bad input, registry, postcondition -------------------------------------------------------

@pytest.mark.parametrize("assignor", ASSIGNOR_LIST, ids=ASSIGNOR_IDS)
def test_bad_input_is_ignored_not_fatal(assignor: Assignor) -> None:
    assert assignor.assign({}, topics(t1=3)) == {}
    stale = {T1: frozenset({7, -1}), T3: frozenset({0}), UNKNOWN: frozenset({0})}
    members = group(member("a", T1, T2, UNKNOWN, current=stale), member("b", T1, T2))
    result = assignor.assign(members, topics(t1=2, t2=0, t3=5))
    # T2 has no partitions, UNKNOWN does not exist, nobody subscribes to T3: only T1 is assigned.
    assert sorted(owners(result)) == [(T1, 0), (T1, 1)]
    assert assignor.assign(group(member("a", UNKNOWN)), topics(t1=1)) == {"a": {}}


def test_a_partition_claimed_twice_stays_with_the_first_member_by_id() -> None:
    both = {T1: frozenset({0, 1})}
    members = group(member("b", T1, current=both), member("a", T1, current=both))
    # Balance first: a (first by id) keeps partition 0 of its claim, b gets partition 1.
    assert plain(UNIFORM.assign(members, topics(t1=2))) == {"a": {"t1": [0]}, "b": {"t1": [1]}}
    members = group(member("b", T1, current=both), member("a", T1, current=both),
                    member("c", T1))
    result = UNIFORM.assign(members, topics(t1=4))
    # 4 over 3: a holds more than the minimum of 1, so it gets the larger quota and keeps both;
    # b's claims were a's, so b and c share the rest.
    assert plain(result) == {"a": {"t1": [0, 1]}, "b": {"t1": [2]}, "c": {"t1": [3]}}
    check_valid(members, topics(t1=4), result)


def test_registry() -> None:
    assert DEFAULT_ASSIGNOR == "uniform"
    assert {name: a.name for name, a in ASSIGNORS.items()} == {"uniform": "uniform",
                                                                 "range": "range"}


def test_the_postcondition_catches_a_broken_assignment() -> None:
    members = group(member("a", T1), member("b", T1, T2))
    spec = group_spec(members, topics(t1=2, t2=1))
    check_assignment(spec, {"a": {T1: frozenset({0, 1})}, "b": {T2: frozenset({0})}})
    broken: list[dict[str, Assignment]] = [
        {"a": {T1: frozenset({0, 1})}, "b": {T1: frozenset({1}), T2: frozenset({0})}},  # twice
        # T1/0 twice and T1/1 nowhere: the count is right, the coverage is not.
        {"a": {T1: frozenset({0})}, "b": {T1: frozenset({0}), T2: frozenset({0})}},
        {"a": {T1: frozenset({0})}, "b": {T2: frozenset({0})}},  # T1/1 missing
        {"a": {T1: frozenset({0, 1})}, "b": {T2: frozenset({0, 1})}},  # out of range
        {"a": {T1: frozenset({0, 1}), T2: frozenset({0})}, "b": {}},  # a does not subscribe to T2
        {"a": {T1: frozenset({0, 1})}},  # a member missing
    ]
    for result in broken:
        with pytest.raises(InvariantViolation):
            check_assignment(spec, result)


_SUBPROCESS = """
import json, sys
from tidelog.broker.group.assignment import MemberSubscription, TopicMetadata
from tidelog.broker.group.assignors import ASSIGNORS
ids = [bytes([i]) * 16 for i in range(1, 9)]
topic_map = {t: TopicMetadata(t, str(i), 5 + i) for i, t in enumerate(ids)}
members = {f"m{i}": MemberSubscription(f"m{i}", frozenset(ids[i % 3:i % 3 + 4 + i % 4]))
           for i in range(11)}
out = {n: {m: {t.hex(): sorted(ps) for t, ps in a.items()} for m, a in
           ASSIGNORS[n].assign(members, topic_map).items()} for n in sorted(ASSIGNORS)}
json.dump(out, sys.stdout, sort_keys=True)
"""


def test_same_result_under_another_hash_seed() -> None:
    """Two coordinators are two processes: set iteration order (hash seeds) must not matter."""
    root = Path(__file__).resolve().parents[2]
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", _SUBPROCESS], cwd=root, env=env,
                              capture_output=True, text=True, timeout=60, check=True)
        outputs.append(json.loads(done.stdout))
    assert outputs[0] == outputs[1]
    assert outputs[0]["uniform"] and outputs[0]["range"]
