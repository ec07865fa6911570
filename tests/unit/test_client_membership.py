"""The consumer's pure membership state machine (tidelog/client/_membership.py).

Each test drives :class:`Membership` with what the shell would feed it (heartbeat answers and
errors, the application's finished work, timer checks at chosen ``now_ms``) and checks what it
decides: the state, the next heartbeat's fields and when it is due, and the work it hands the
application thread (revoke before assign, one step at a time, partitions lost when fenced or
stale). No I/O, no clock, no threads.
"""

from __future__ import annotations

import random

import pytest

from tidelog.client._membership import (
    Membership,
    MembershipConfig,
    MemberState,
    PartitionsLost,
    Reconciliation,
)
from tidelog.client._metadata import Backoff
from tidelog.client.records import TopicPartition
from tidelog.errors import (
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    InvalidGroupIdError,
    InvalidRegularExpressionError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode

TOPIC_ID = b"\x01" * 16
INTERVAL = 1_000
MAX_POLL = 10_000
RNG = random.Random(7)


def tps(*partitions: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition("orders", p) for p in partitions)


def member(instance_id: str = "") -> Membership:
    return Membership(MembershipConfig(group_id="g", instance_id=instance_id,
                                       rebalance_timeout_ms=30_000,
                                       max_poll_interval_ms=MAX_POLL),
                      backoff=Backoff(100, 1_000), now_ms=0)


def answer(epoch: int, partitions: list[int] | None = None, *, name: str = "orders",
           member_id: str = "m1") -> pb.ConsumerGroupHeartbeatResponse:
    response = pb.ConsumerGroupHeartbeatResponse(member_id=member_id, member_epoch=epoch,
                                                 heartbeat_interval_ms=INTERVAL)
    if partitions is not None:
        response.assignment_changed = True
        response.assignment.add(topic_id=TOPIC_ID, topic=name, partitions=partitions)
    return response


def error(code: int) -> pb.ConsumerGroupHeartbeatResponse:
    return pb.ConsumerGroupHeartbeatResponse(error_code=code, error_message="why")


def owned_in(request: pb.ConsumerGroupHeartbeatRequest) -> set[int]:
    return {p for t in request.owned_partitions for p in t.partitions}


def joined(partitions: list[int], now: int = 0, instance_id: str = "") -> Membership:
    """A member that joined and owns ``partitions`` at epoch 1, STABLE."""
    m = member(instance_id)
    m.subscribe(("orders",), "", now)
    m.build_heartbeat(now)
    m.on_heartbeat_response(answer(1, partitions), now, RNG)
    work = m.take_work()
    assert isinstance(work, Reconciliation)
    m.work_done(work, now)
    m.build_heartbeat(now)
    m.on_heartbeat_response(answer(1), now, RNG)
    assert m.state == MemberState.STABLE and m.owned == tps(*partitions)
    return m


def test_join_reconcile_acknowledge_then_heartbeat_every_interval() -> None:
    m = member()
    assert m.state == MemberState.UNSUBSCRIBED and m.heartbeat_delay_ms(0) is None
    m.subscribe(("orders",), "", 0)
    assert m.state == MemberState.JOINING and m.heartbeat_delay_ms(0) == 0
    join = m.build_heartbeat(0)
    assert (join.member_epoch, join.member_id, list(join.subscribed_topic_names),
            join.rebalance_timeout_ms, owned_in(join)) == (0, "", ["orders"], 30_000, set())
    assert m.heartbeat_delay_ms(0) is None  # one heartbeat in flight at a time
    m.on_heartbeat_response(answer(1, [0, 1]), 10, RNG)
    assert m.state == MemberState.RECONCILING and m.member_id == "m1"
    work = m.take_work()
    assert work == Reconciliation(revoked=frozenset(), assigned=tps(0, 1), member_epoch=1)
    assert m.take_work() is None  # one step at a time
    m.work_done(work, 20)
    assert m.state == MemberState.ACKNOWLEDGING and m.heartbeat_delay_ms(20) == 0
    ack = m.build_heartbeat(20)
    assert (ack.member_id, ack.member_epoch, owned_in(ack)) == ("m1", 1, {0, 1})
    assert ack.owned_partitions[0].topic_id == TOPIC_ID
    m.on_heartbeat_response(answer(1), 30, RNG)
    assert m.state == MemberState.STABLE
    assert m.heartbeat_delay_ms(30) == INTERVAL and m.heartbeat_delay_ms(30 + INTERVAL) == 0


def test_revocation_comes_first_and_owned_changes_only_when_done() -> None:
    m = joined([0, 1, 2])
    m.build_heartbeat(100)
    m.on_heartbeat_response(answer(1, [0]), 100, RNG)  # the coordinator asks to revoke 1, 2
    work = m.take_work()
    assert work == Reconciliation(revoked=tps(1, 2), assigned=frozenset(), member_epoch=1)
    # Until the application has revoked them, heartbeats still report them owned.
    assert owned_in(m.build_heartbeat(110)) == {0, 1, 2}
    m.on_heartbeat_response(answer(1, [0]), 120, RNG)
    m.work_done(work, 130)
    assert m.state == MemberState.ACKNOWLEDGING and owned_in(m.build_heartbeat(130)) == {0}
    m.on_heartbeat_response(answer(2, [0, 3]), 140, RNG)  # the next epoch: take 3
    assert m.take_work() == Reconciliation(revoked=frozenset(), assigned=tps(3),
                                           member_epoch=2)


def test_a_new_target_mid_step_is_taken_after_the_step_completes() -> None:
    m = joined([0, 1])
    m.build_heartbeat(100)
    m.on_heartbeat_response(answer(1, [0]), 100, RNG)
    step = m.take_work()
    assert isinstance(step, Reconciliation) and step.revoked == tps(1)
    m.build_heartbeat(110)
    m.on_heartbeat_response(answer(2, [0, 5]), 110, RNG)  # arrives while the step runs
    assert m.take_work() is None
    m.work_done(step, 120)
    assert m.state == MemberState.ACKNOWLEDGING
    m.build_heartbeat(120)
    m.on_heartbeat_response(answer(2), 130, RNG)  # nothing new: the target is still [0, 5]
    assert m.state == MemberState.RECONCILING
    assert m.take_work() == Reconciliation(revoked=frozenset(), assigned=tps(5),
                                           member_epoch=2)


def test_an_answer_to_a_heartbeat_sent_before_the_step_finished_does_not_ack_it() -> None:
    m = joined([0, 1])
    m.build_heartbeat(100)
    m.on_heartbeat_response(answer(1, [0]), 100, RNG)
    step = m.take_work()
    assert step is not None
    m.build_heartbeat(110)  # in flight, still reporting 0 and 1
    m.work_done(step, 115)
    m.on_heartbeat_response(answer(1, [0]), 120, RNG)
    assert m.state == MemberState.ACKNOWLEDGING and m.heartbeat_delay_ms(120) == 0
    assert owned_in(m.build_heartbeat(120)) == {0}


@pytest.mark.parametrize("code", [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID])
def test_fenced_loses_its_partitions_then_rejoins_with_epoch_0_and_the_same_id(
        code: int) -> None:
    m = joined([0, 1])
    m.build_heartbeat(100)
    m.on_heartbeat_response(error(code), 100, RNG)
    assert m.state == MemberState.FENCED and m.heartbeat_delay_ms(100) is None
    assert m.commit_identity() is None  # a zombie does not commit
    lost = m.take_work()
    assert lost == PartitionsLost(tps(0, 1))
    m.work_done(lost, 110)
    assert m.state == MemberState.JOINING and m.owned == frozenset()
    rejoin = m.build_heartbeat(110)
    assert (rejoin.member_id, rejoin.member_epoch, owned_in(rejoin)) == ("m1", 0, set())


@pytest.mark.parametrize(("code", "raised"), [
    (ErrorCode.GROUP_MAX_SIZE_REACHED, GroupMaxSizeReachedError),
    (ErrorCode.UNSUPPORTED_ASSIGNOR, UnsupportedAssignorError),
    (ErrorCode.INVALID_REGULAR_EXPRESSION, InvalidRegularExpressionError),
    (ErrorCode.UNRELEASED_INSTANCE_ID, UnreleasedInstanceIdError),
    (ErrorCode.FENCED_INSTANCE_ID, FencedInstanceIdError),
    (ErrorCode.INVALID_GROUP_ID, InvalidGroupIdError),
])
def test_non_retriable_errors_are_fatal_and_stop_heartbeats(code: int, raised: type) -> None:
    m = member()
    m.subscribe(("orders",), "", 0)
    m.build_heartbeat(0)
    m.on_heartbeat_response(error(code), 0, RNG)
    assert m.state == MemberState.FATAL and isinstance(m.fatal_error, raised)
    assert m.heartbeat_delay_ms(10**9) is None and m.take_work() is None


@pytest.mark.parametrize("code", [ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                                  ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                  ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT])
def test_retriable_errors_retry_after_a_growing_backoff(code: int) -> None:
    m = joined([0])
    m.build_heartbeat(1_000)
    m.on_heartbeat_error(code, "later", 1_000, random.Random(1))
    first = m.heartbeat_delay_ms(1_000)
    assert m.state == MemberState.STABLE and first is not None and first > 0
    m.build_heartbeat(1_000 + first)
    m.on_heartbeat_error(code, "later", 1_000 + first, random.Random(1))
    second = m.heartbeat_delay_ms(1_000 + first)
    assert second is not None and second > first and m.owned == tps(0)


@pytest.mark.parametrize(("instance_id", "epoch"), [("", -1), ("static-1", -2)])
def test_not_polling_leaves_then_the_next_poll_loses_and_rejoins(instance_id: str,
                                                                 epoch: int) -> None:
    m = joined([0, 1], instance_id=instance_id)
    m.on_poll(1_000)
    assert m.check_poll_timer(1_000 + MAX_POLL) is None
    warning = m.check_poll_timer(1_001 + MAX_POLL)
    assert warning is not None and "max_poll_interval_ms" in warning
    assert m.state == MemberState.LEAVING and m.heartbeat_delay_ms(1_001 + MAX_POLL) == 0
    leave = m.build_heartbeat(1_001 + MAX_POLL)
    assert (leave.member_id, leave.member_epoch, leave.instance_id) == ("m1", epoch,
                                                                        instance_id)
    m.on_heartbeat_response(answer(epoch, member_id="m1"), 1_002 + MAX_POLL, RNG)
    assert m.state == MemberState.STALE and m.heartbeat_delay_ms(1_002 + MAX_POLL) is None
    m.on_poll(2_000 + MAX_POLL)
    lost = m.take_work()
    assert lost == PartitionsLost(tps(0, 1))
    m.work_done(lost, 2_000 + MAX_POLL)
    assert m.state == MemberState.JOINING and m.build_heartbeat(2_000 + MAX_POLL).member_epoch == 0


@pytest.mark.parametrize(("instance_id", "epoch"), [("", -1), ("static-1", -2)])
def test_leaving_sends_the_leave_epoch_and_ends_unsubscribed(instance_id: str,
                                                             epoch: int) -> None:
    m = joined([0], instance_id=instance_id)
    assert m.prepare_leaving()
    assert m.state == MemberState.PREPARE_LEAVING
    m.forget_owned(tps(0))
    m.leave(100)
    request = m.build_heartbeat(100)
    assert (request.member_epoch, request.instance_id) == (epoch, instance_id)
    m.on_heartbeat_response(answer(epoch), 110, RNG)
    assert m.state == MemberState.UNSUBSCRIBED and m.heartbeat_delay_ms(110) is None


def test_a_leave_completes_even_when_its_heartbeat_fails() -> None:
    m = joined([0])
    m.prepare_leaving()
    m.leave(100)
    m.build_heartbeat(100)
    m.on_heartbeat_error(ErrorCode.NETWORK_EXCEPTION, "gone", 110, RNG)
    assert m.state == MemberState.UNSUBSCRIBED


def test_the_answer_to_a_heartbeat_sent_before_the_leave_does_not_end_it() -> None:
    m = joined([0])
    m.build_heartbeat(100)  # a regular heartbeat in flight
    m.prepare_leaving()
    m.leave(105)
    m.on_heartbeat_response(answer(1), 110, RNG)
    assert m.state == MemberState.LEAVING and m.heartbeat_delay_ms(110) == 0
    assert m.build_heartbeat(110).member_epoch == -1


def test_nothing_to_leave_when_never_joined_or_fenced() -> None:
    m = member()
    m.subscribe(("orders",), "", 0)
    assert not m.prepare_leaving() and m.state == MemberState.UNSUBSCRIBED
    fenced = joined([0])
    fenced.build_heartbeat(10)
    fenced.on_heartbeat_response(error(ErrorCode.FENCED_MEMBER_EPOCH), 10, RNG)
    assert not fenced.prepare_leaving() and fenced.state == MemberState.UNSUBSCRIBED


def test_commit_identity() -> None:
    simple = member()
    assert simple.commit_identity() == ("", -1)  # assign() with a group id
    m = member()
    m.subscribe(("orders",), "", 0)
    assert m.commit_identity() is None  # joining: no epoch to commit with yet
    assert joined([0]).commit_identity() == ("m1", 1)


def test_a_subscription_change_is_sent_at_once_with_the_pattern() -> None:
    m = joined([0])
    assert m.heartbeat_delay_ms(10) == INTERVAL - 10
    m.subscribe((), "orders.*", 10)
    assert m.heartbeat_delay_ms(10) == 0
    request = m.build_heartbeat(10)
    assert (list(request.subscribed_topic_names), request.subscribed_topic_regex,
            request.subscription_changed) == ([], "orders.*", True)


def test_topic_ids_without_names_wait_until_resolved() -> None:
    m = member()
    m.subscribe(("orders",), "", 0)
    m.build_heartbeat(0)
    m.on_heartbeat_response(answer(1, [0], name=""), 0, RNG)
    assert m.unresolved_topic_ids() == {TOPIC_ID}
    assert m.take_work() is None and m.state == MemberState.RECONCILING
    m.learn_topic_name(TOPIC_ID, "orders")
    assert m.take_work() == Reconciliation(revoked=frozenset(), assigned=tps(0),
                                           member_epoch=1)


def test_an_empty_assignment_is_stable_without_a_step() -> None:
    m = member()
    m.subscribe(("orders",), "", 0)
    m.build_heartbeat(0)
    m.on_heartbeat_response(answer(1, []), 0, RNG)
    assert m.state == MemberState.STABLE and m.take_work() is None


def test_work_done_for_unknown_work_is_refused() -> None:
    m = joined([0])
    with pytest.raises(RuntimeError, match="not handed out"):
        m.work_done(PartitionsLost(tps(0)), 0)
