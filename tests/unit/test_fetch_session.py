"""Fetch sessions (broker/replication/fetch_session.py), both ends, as pure data; and the core's
record of a fetch a session repeated (ReplicaState.on_repeated_fetch,
PartitionState.on_follower_fetch_repeated).

Leader: a full request starts a session and answers everything; an incremental one must carry
the expected epoch (and the same follower incarnation), evaluates the listed, the starved and
the dirty partitions only, and answers what has something new; a wrong epoch is refused and
only a full request is accepted next; forgotten partitions leave the session. Follower: full
plans list every fetchable partition, incremental ones only what changed, forget what is gone or
backing off, and reset on a missing session. Partitions are keys ``"a"``, ``"b"``...; fetches are
plain values. Time starts at 10 000 ms.
"""

from __future__ import annotations

import pytest
from test_partition_state import LAG, NOW, FakeLog, leader

from tidelog.broker.replication.fetch_session import (
    FULL_SESSION_EPOCH,
    SESSION_EPOCH_MAX,
    FollowerSession,
    LeaderSession,
    Refusal,
    Round,
    next_session_epoch,
)
from tidelog.broker.replication.replica_state import ReplicaState
from tidelog.errors import InvalidFetchSessionEpochError, InvalidRequestError

REPLICA, BROKER_EPOCH = 2, 7


def begin(session: LeaderSession[str, int], epoch: int, listed: dict[str, int] | None = None,
          forgotten: tuple[str, ...] = (), *, now: int = NOW, replica: int = REPLICA,
          broker_epoch: int = BROKER_EPOCH) -> Round[str] | Refusal:
    return session.begin_round(session_epoch=epoch, replica_id=replica,
                               broker_epoch=broker_epoch, listed=list((listed or {}).items()),
                               forgotten=forgotten, now_ms=now)


def accepted(result: Round[str] | Refusal) -> Round[str]:
    assert isinstance(result, Round), result
    return result


def answered(session: LeaderSession[str, int], key: str, *, hw: int = 5, start: int = 0,
             records: bool = False, error: bool = False, diverging: bool = False,
             more: bool = False) -> bool:
    return session.on_evaluated(key, high_watermark=hw, log_start_offset=start, records=records,
                                error=error, diverging=diverging, more=more)


def started(keys: str = "abc") -> LeaderSession[str, int]:
    """A session after its full round: every key answered with HW 5, log start 0."""
    session: LeaderSession[str, int] = LeaderSession()
    full = accepted(begin(session, FULL_SESSION_EPOCH, {k: 10 for k in keys}))
    assert full.full and full.evaluate == tuple(keys) and full.next_session_epoch == 1
    assert all(answered(session, k) for k in keys), "a full round answers every partition"
    return session


# --- leader ------------------------------------------------------------------------------------


def test_an_idle_incremental_round_evaluates_and_answers_nothing() -> None:
    session = started()
    for epoch in range(1, 5):
        idle = accepted(begin(session, epoch, now=NOW + epoch))
        assert idle == Round(False, (), epoch + 1)
    assert len(session) == 3 and session.fetch_of("a") == 10


def test_listed_and_dirty_partitions_are_evaluated_and_only_news_answered() -> None:
    session = started()
    assert session.mark_dirty("c") is not None
    assert session.mark_dirty("c") is None, "already dirty"
    assert session.mark_dirty("zz") is None, "not in the session"
    round_ = accepted(begin(session, 1, {"b": 11}))
    assert round_.evaluate == ("b", "c") and session.fetch_of("b") == 11
    assert not answered(session, "b"), "new position, nothing new for it: left out"
    assert answered(session, "c", hw=6), "a HW the follower has not heard"
    assert not answered(session, "c", hw=6), "heard now"
    assert answered(session, "c", hw=6, start=3), "a new log start"
    assert answered(session, "c", hw=6, start=3, records=True), "records"
    assert answered(session, "c", hw=6, start=3, error=True), "errors always"
    assert answered(session, "c", hw=-1, start=-1, error=True)
    assert answered(session, "c", hw=6, start=3), "after an error the offsets again"


def test_partitions_that_turn_dirty_while_a_round_waits_are_taken_once() -> None:
    session = started()
    accepted(begin(session, 1))
    session.mark_dirty("a")
    session.mark_dirty("b")
    assert session.dirty == ("a", "b")
    assert session.take_dirty() == ("a", "b") and session.take_dirty() == ()
    assert accepted(begin(session, 2)).evaluate == ()


def test_a_partition_left_out_for_room_comes_first_in_the_next_round() -> None:
    session = started()
    session.mark_dirty("c")
    accepted(begin(session, 1, {"a": 20, "b": 20}))
    assert answered(session, "a", records=True)
    assert not answered(session, "b", more=True), "no room for its records"
    assert not answered(session, "c")
    session.mark_dirty("c")
    assert accepted(begin(session, 2, {"a": 30})).evaluate == ("b", "a", "c")
    answered(session, "b", records=True)
    answered(session, "a")
    answered(session, "c")
    assert accepted(begin(session, 3)).evaluate == ()


def test_forgotten_partitions_leave_the_session_and_come_back_as_new() -> None:
    session = started()
    session.mark_dirty("a")
    round_ = accepted(begin(session, 1, {}, ("a", "b")))
    assert round_.evaluate == () and "a" not in session and len(session) == 1
    assert session.mark_dirty("a") is None
    round_ = accepted(begin(session, 2, {"a": 10}))
    assert round_.evaluate == ("a",)
    assert answered(session, "a"), "back: answered whatever it holds, as in a full round"


def test_a_wrong_session_epoch_is_refused_and_only_a_full_request_accepted_next() -> None:
    session = started()
    accepted(begin(session, 1))
    refused = begin(session, 5)
    assert isinstance(refused, Refusal)
    assert isinstance(refused.error, InvalidFetchSessionEpochError)
    assert "not the expected 2" in refused.error.message
    assert isinstance(begin(session, 2), Refusal), "the session is gone"
    session.reset()
    assert len(session) == 0 and session.expected_epoch == FULL_SESSION_EPOCH
    assert accepted(begin(session, FULL_SESSION_EPOCH, {"a": 1})).evaluate == ("a",)
    assert accepted(begin(session, 1)).evaluate == ()


def test_an_incremental_request_without_a_session_or_from_another_incarnation_is_refused(
        ) -> None:
    fresh: LeaderSession[str, int] = LeaderSession()
    refused = begin(fresh, 1)
    assert isinstance(refused, Refusal) and "no fetch session" in refused.error.message
    for other in ({"replica": 3}, {"broker_epoch": BROKER_EPOCH + 1}):
        session = started()
        refused = begin(session, 1, **other)  # type: ignore[arg-type]
        assert isinstance(refused, Refusal) and "belongs to replica" in refused.error.message


def test_a_full_request_restarts_the_session_whatever_came_before() -> None:
    session = started()
    session.mark_dirty("a")
    accepted(begin(session, 1, {"b": 3}))
    round_ = accepted(begin(session, FULL_SESSION_EPOCH, {"c": 1, "d": 2}))
    assert round_ == Round(True, ("c", "d"), 1) and set(session.keys()) == {"c", "d"}
    assert answered(session, "c") and answered(session, "d")


def test_a_session_holds_a_bounded_number_of_partitions() -> None:
    session: LeaderSession[str, int] = LeaderSession(partitions_max=2)
    accepted(begin(session, FULL_SESSION_EPOCH, {"a": 1, "b": 1}))
    refused = begin(session, 1, {"c": 1})
    assert isinstance(refused, Refusal) and isinstance(refused.error, InvalidRequestError)
    with pytest.raises(ValueError):
        LeaderSession(partitions_max=0)


def test_session_epochs_wrap_to_one() -> None:
    assert next_session_epoch(FULL_SESSION_EPOCH) == 1
    assert next_session_epoch(41) == 42
    assert next_session_epoch(SESSION_EPOCH_MAX) == 1
    session = started("a")
    session.expected_epoch = SESSION_EPOCH_MAX
    assert accepted(begin(session, SESSION_EPOCH_MAX)).next_session_epoch == 1


def test_dirty_marks_and_the_end_say_when_the_follower_fetched_again() -> None:
    session = started()
    assert session.mark_dirty("a") is not None
    assert session.mark_dirty("a") is None
    accepted(begin(session, 1, now=NOW + 500))
    answered(session, "a")  # evaluated in this round: fetched again now
    mark = session.mark_dirty("b")
    assert mark is not None and mark.repeated_at_ms == NOW + 500, "the latest round's start"
    answered(session, "c", error=True)
    assert accepted(begin(session, 2, now=NOW + 900)).evaluate == ("b",)
    answered(session, "b", diverging=True)
    mark = session.mark_dirty("c")
    assert mark is not None and mark.repeated_at_ms is None, "its fetch was refused"
    # The end: every clean partition whose fetch was accepted, at the latest round's start.
    assert session.closing() == [("a", NOW + 900)]
    assert LeaderSession().closing() == [], "no round, nothing to record"


# --- the core's side of it ------------------------------------------------------------------


def test_a_repeated_fetch_keeps_a_caught_up_follower_caught_up() -> None:
    state = ReplicaState.fresh(in_isr=True, now_ms=NOW)
    state.on_repeated_fetch(NOW + 1)
    assert state.last_fetch_time_ms is None, "nothing before the first fetch"
    state.on_fetch(fetch_offset=10, leader_log_end_offset=10, now_ms=NOW + 10)
    state.on_repeated_fetch(NOW + 5_000)
    assert state.last_caught_up_time_ms == NOW + 5_000 and state.last_fetch_time_ms == NOW + 5_000
    state.on_repeated_fetch(NOW + 4_000)
    assert state.last_fetch_time_ms == NOW + 5_000, "never back in time"
    lagging = ReplicaState.fresh(in_isr=True, now_ms=NOW)
    lagging.on_fetch(fetch_offset=5, leader_log_end_offset=10, now_ms=NOW + 10)
    lagging.on_repeated_fetch(NOW + 5_000)
    assert lagging.last_caught_up_time_ms == NOW, "behind the leader's LEO: not caught up"
    assert lagging.last_fetch_time_ms == NOW + 5_000


def test_an_append_after_a_long_idle_session_finds_its_followers_caught_up() -> None:
    """Without the repeated fetch the tick right after the append shrinks the ISR: each
    follower's last real fetch is older than replica.lag.time.max.ms."""
    for repeated in (True, False):
        state = leader(leo=10, hw=10)
        log = FakeLog(leo=10)
        for replica in (2, 3):
            state.on_follower_fetch(replica, fetch_offset=10, last_fetched_epoch=-1,
                                    current_leader_epoch=5, log=log, now_ms=NOW)
        later = NOW + 10 * LAG
        assert state.tick(later) == [], "idle at the LEO: caught up"
        if repeated:
            for replica in (2, 3):
                state.on_follower_fetch_repeated(replica, at_ms=later - 100)
        state.on_local_append(11, now_ms=later)
        effects = state.tick(later + 1)
        assert (effects == []) is repeated, effects


# --- follower ----------------------------------------------------------------------------------


class Follower:
    """The fetcher's view: a fetch per partition (None: not fetchable now)."""

    def __init__(self, **fetches: int | None) -> None:
        self.fetches: dict[str, int | None] = dict(fetches)
        self.session: FollowerSession[str, int] = FollowerSession()

    def plan(self) -> tuple[int, dict[str, int], tuple[str, ...]]:
        plan = self.session.plan(self.fetches.get, lambda: list(self.fetches))
        return plan.session_epoch, dict(plan.listed), plan.forgotten


def test_a_follower_lists_everything_first_then_only_what_changed() -> None:
    f = Follower(a=1, b=2, c=None)
    assert f.plan() == (FULL_SESSION_EPOCH, {"a": 1, "b": 2}, ()), "c is not fetchable"
    f.session.on_answer(1)
    assert f.plan() == (1, {}, ()), "nothing changed"
    f.session.on_answer(2)
    f.fetches["a"] = 5
    f.session.mark_changed("a")
    f.session.mark_changed("b")  # answered, but its fetch is the same
    assert f.plan() == (2, {"a": 5}, ())
    f.session.on_answer(3)
    f.session.mark_changed("b", relist=True)  # records came: always answer back
    assert f.plan() == (3, {"b": 2}, ())
    assert f.session.sent("a") == 5 and len(f.session) == 2


def test_a_follower_forgets_what_it_stops_fetching_and_lists_it_again_later() -> None:
    f = Follower(a=1, b=2)
    f.plan()
    f.session.on_answer(1)
    f.session.forget("a")  # backing off
    f.fetches["b"] = None  # fenced: waits for metadata
    f.session.mark_changed("b")
    assert f.plan() == (1, {}, ("a", "b"))
    assert f.session.sent("a") is None and len(f.session) == 0
    f.session.on_answer(2)
    assert f.plan() == (2, {}, ()), "forgotten once"
    f.session.on_answer(3)
    f.fetches["b"] = 3
    f.session.mark_changed("a", relist=True)
    f.session.mark_changed("b")
    assert f.plan() == (3, {"a": 1, "b": 3}, ())


def test_a_follower_forgets_during_a_full_exchange_in_the_next_request() -> None:
    f = Follower(a=1, b=2)
    f.plan()
    f.session.forget("b")  # while the full request is in flight
    f.session.on_answer(1)
    assert f.plan() == (1, {}, ("b",))


def test_a_follower_without_a_session_sends_full_requests() -> None:
    f = Follower(a=1, b=2)
    f.plan()
    f.session.on_answer(0)  # the leader keeps none (unary Fetch, older build)
    assert f.plan() == (FULL_SESSION_EPOCH, {"a": 1, "b": 2}, ())
    f.session.on_answer(1)
    f.session.mark_changed("a")
    f.session.reset()  # the exchange failed, or INVALID_FETCH_SESSION_EPOCH
    assert f.session.full and len(f.session) == 0
    assert f.plan() == (FULL_SESSION_EPOCH, {"a": 1, "b": 2}, ())
    f.session.on_answer(SESSION_EPOCH_MAX + 1)  # not an epoch: no session
    assert f.session.full


def test_a_follower_with_more_partitions_than_a_request_holds_lists_the_rest_next() -> None:
    # One leader may lead nearly every partition of a large cluster after failures: its
    # followers' sessions hold them all, each request lists at most listed_max.
    f = Follower(a=1, b=2, c=3, d=None, e=5)

    def plan() -> tuple[int, dict[str, int], tuple[str, ...]]:
        p = f.session.plan(f.fetches.get, lambda: list(f.fetches), listed_max=2)
        return p.session_epoch, dict(p.listed), p.forgotten

    assert plan() == (FULL_SESSION_EPOCH, {"a": 1, "b": 2}, ())
    assert f.session.pending, "c, d and e wait for the next request (which need not wait)"
    f.session.on_answer(1)
    assert plan() == (1, {"c": 3, "e": 5}, ()), "d is not fetchable"
    assert not f.session.pending and len(f.session) == 4
    f.session.on_answer(2)
    for key in "abce":
        f.session.mark_changed(key, relist=True)
    assert plan() == (2, {"a": 1, "b": 2}, ())
    assert f.session.pending
    f.session.on_answer(3)
    assert plan() == (3, {"c": 3, "e": 5}, ()), "relisted as asked, in the next request"
