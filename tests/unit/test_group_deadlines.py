"""Members' deadlines in a heap (broker/group/deadlines.py), the shard's use of them, and when
the runtime's timer wakes (broker/group/runtime.py ``next_wake_ms``). Pure: no broker.

What it checks: ``due`` gives only members whose live deadline passed, sorted and once each,
and leaves the rest in the heap; a moved session deadline (a heartbeat) makes the old entry
stale, never due; ``restore`` puts back what the shard did not act on; stale entries are
bounded (the heap is rebuilt); a shard's ``next_deadline_ms`` is the earliest member session
deadline and ``on_deadlines`` fences exactly the members due, nothing before; the timer wakes at
the earliest of the next full tick and any shard's deadline, bounded below.
"""

from __future__ import annotations

import random

from tidelog.broker.group.assignment import TopicMetadata
from tidelog.broker.group.coordinator import GroupCoordinatorConfig, GroupCoordinatorShard
from tidelog.broker.group.deadlines import HEAP_SLACK_MIN, MemberDeadlines
from tidelog.broker.group.runtime import TIMER_MIN_INTERVAL_MS, next_wake_ms
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import groups_pb2 as gpb


def test_due_gives_only_what_passed_sorted_and_once() -> None:
    deadlines = MemberDeadlines()
    deadlines.set_session(("g", "b"), 100)
    deadlines.set_session(("g", "a"), 100)
    deadlines.set_rebalance(("g", "a"), 90, member_epoch=3)
    deadlines.set_session(("g", "c"), 300)
    assert deadlines.next_deadline_ms() == 90
    assert deadlines.due(99) == [("g", "a")]
    assert deadlines.due(100) == [("g", "a"), ("g", "b")], "a's session, b's session"
    # Popped entries do not come again; what is not due stays.
    assert deadlines.due(1_000) == [("g", "c")]
    assert deadlines.due(1_000) == []
    assert deadlines.next_deadline_ms() is None


def test_a_moved_session_deadline_is_not_due_and_restore_puts_back() -> None:
    deadlines = MemberDeadlines()
    deadlines.set_session(("g", "a"), 100)
    deadlines.set_session(("g", "a"), 200)  # a heartbeat moved it
    assert deadlines.due(150) == [], "the old entry is stale"
    assert deadlines.next_deadline_ms() == 200
    assert deadlines.due(200) == [("g", "a")]
    deadlines.restore([("g", "a")])  # not acted on: due again next time
    assert deadlines.due(200) == [("g", "a")]
    deadlines.forget("g", "a")
    deadlines.restore([("g", "a")])
    assert deadlines.next_deadline_ms() is None, "a forgotten member has no deadline"


def test_stale_entries_are_bounded() -> None:
    deadlines = MemberDeadlines()
    for beat in range(HEAP_SLACK_MIN * 3):
        deadlines.set_session(("g", "a"), 1_000 + beat)
    assert len(deadlines._heap) <= HEAP_SLACK_MIN + 4
    assert deadlines.due(10**9) == [("g", "a")]


def _join(shard: GroupCoordinatorShard, topics: dict[str, TopicMetadata], now_ms: int
          ) -> pb.ConsumerGroupHeartbeatResponse:
    _, response = shard.consumer_group_heartbeat(pb.ConsumerGroupHeartbeatRequest(
        group_id="g", member_epoch=0, rebalance_timeout_ms=30_000,
        subscribed_topic_names=["t"], subscription_changed=True), now_ms=now_ms, topics=topics)
    assert response.error_code == 0, response
    return response


def test_the_shard_fences_exactly_the_members_due() -> None:
    config = GroupCoordinatorConfig(session_timeout_ms=1_000, heartbeat_interval_ms=100)
    shard = GroupCoordinatorShard(config, rng=random.Random(1))
    topics = {"t": TopicMetadata(b"\x01" * 16, "t", 4)}
    first = _join(shard, topics, now_ms=0)
    second = _join(shard, topics, now_ms=400)
    assert shard.next_deadline_ms() == 1_000
    assert shard.on_deadlines(999) == []
    fenced = shard.on_deadlines(1_000)
    removed = {r.key.member_id for r in fenced
               if isinstance(r.key, gpb.ConsumerGroupMemberMetadataKey) and r.value is None}
    assert removed == {first.member_id}
    assert set(shard.state.groups["g"].members) == {second.member_id}
    assert shard.next_deadline_ms() == 1_400


def test_the_timer_wakes_at_the_earliest_deadline_bounded_below() -> None:
    assert next_wake_ms(1_000, full_due_ms=1_500, deadlines_ms=[1_200, None, 1_300]) == 1_200
    assert next_wake_ms(1_000, full_due_ms=1_500, deadlines_ms=[None]) == 1_500
    assert next_wake_ms(1_000, full_due_ms=1_500, deadlines_ms=[900]) == \
        1_000 + TIMER_MIN_INTERVAL_MS
