"""The consumer's end of a fetch session (tidelog/client/_fetch_session.py), pure: what each
request lists and forgets, and how the broker's answers and failures move it."""

from __future__ import annotations

from tidelog.client._fetch_session import FULL_SESSION_EPOCH, FetchSessionHandler

A, B, C = ("t", 0), ("t", 1), ("u", 0)


def test_the_first_request_is_full_and_lists_every_partition() -> None:
    session: FetchSessionHandler[tuple[str, int], tuple[int, int]] = FetchSessionHandler()
    planned = session.build({A: (0, 1), B: (5, 1)})
    assert planned.full and planned.session_epoch == FULL_SESSION_EPOCH
    assert planned.listed == {A: (0, 1), B: (5, 1)} and planned.forgotten == ()


def test_incremental_requests_list_what_changed_and_forget_what_is_not_fetched() -> None:
    session: FetchSessionHandler[tuple[str, int], tuple[int, int]] = FetchSessionHandler()
    session.build({A: (0, 1), B: (5, 1), C: (7, 3)})
    session.on_answer(1)
    idle = session.build({A: (0, 1), B: (5, 1), C: (7, 3)})
    assert (idle.session_epoch, idle.listed, idle.forgotten) == (1, {}, ())
    session.on_answer(2)
    # A moved on (records returned), B's leader epoch changed, C has records to hand out.
    moved = session.build({A: (3, 1), B: (5, 2)})
    assert moved.session_epoch == 2
    assert moved.listed == {A: (3, 1), B: (5, 2)} and moved.forgotten == (C,)
    session.on_answer(3)
    back = session.build({A: (3, 1), B: (5, 2), C: (9, 3)})
    assert back.listed == {C: (9, 3)} and back.forgotten == ()


def test_a_partition_answered_with_an_error_is_listed_again_or_forgotten() -> None:
    session: FetchSessionHandler[tuple[str, int], tuple[int, int]] = FetchSessionHandler()
    session.build({A: (0, 1), B: (0, 1)})
    session.on_answer(1)
    session.relist(A)
    session.relist(C)  # not in the session: nothing to do
    same = session.build({A: (0, 1), B: (0, 1)})
    assert same.listed == {A: (0, 1)}, "listed again although its fetch is the same"
    session.on_answer(2)
    session.relist(B)
    gone = session.build({A: (0, 1)})
    assert gone.listed == {} and gone.forgotten == (B,)


def test_no_session_or_a_failure_means_full_requests() -> None:
    session: FetchSessionHandler[tuple[str, int], tuple[int, int]] = FetchSessionHandler()
    session.build({A: (0, 1)})
    session.on_answer(0)  # a broker that keeps no session (the unary Fetch, an older build)
    assert session.build({A: (0, 1)}).full
    session.on_answer(1)
    session.reset()  # an exchange failed: the broker may have lost the stream
    assert session.build({A: (0, 1)}).listed == {A: (0, 1)}
    session.on_answer(2**31)  # out of the wire's range: no session
    assert session.session_epoch == FULL_SESSION_EPOCH and len(session) == 0
