"""controller/raft/prevote.py: fast elections when the leader's connection ends, and the
pre-vote that keeps a follower which lost only its own connection from disrupting a live leader.

Pure: FastElection takes ``now`` and returns what to do; grants_pre_vote is the voter's rule.
The adapter's wiring into pysyncobj is tested with real quorums in test_raft_adapter.py and
under random faults in tests/sim.
"""

from __future__ import annotations

import pytest

from tidelog.controller.raft.prevote import FastElection, PreVote, grants_pre_vote

VOTERS = ["a:1", "b:1", "c:1"]


def grants(request: PreVote, **overrides: object) -> bool:
    voter = {"current_term": 4, "last_log_index": 10, "last_log_term": 4,
             "is_leader": False, "has_live_leader": False, **overrides}
    return grants_pre_vote(request, **voter)  # type: ignore[arg-type]


def test_a_voter_without_a_live_leader_grants_an_up_to_date_candidate() -> None:
    assert grants(PreVote(term=5, last_log_index=10, last_log_term=4))
    assert grants(PreVote(term=5, last_log_index=11, last_log_term=4))
    assert grants(PreVote(term=5, last_log_index=3, last_log_term=5))  # a later last term wins


@pytest.mark.parametrize("why, request_, voter", [
    ("it hears a live leader", PreVote(5, 10, 4), {"has_live_leader": True}),
    ("it leads", PreVote(5, 10, 4), {"is_leader": True}),
    ("the term is not past its own", PreVote(4, 10, 4), {}),
    ("the candidate's log is shorter", PreVote(5, 9, 4), {}),
    ("the candidate's last term is older", PreVote(5, 50, 3), {}),
])
def test_a_voter_refuses(why: str, request_: PreVote, voter: dict[str, object]) -> None:
    assert not grants(request_, **voter), why


def test_survivors_ask_in_rank_order_after_the_leaders_connection_ends() -> None:
    """The leader was b:1: a:1 is ranked first among the survivors, c:1 second."""
    first = FastElection(self_id="a:1", voters=VOTERS, stagger_s=0.05)
    second = FastElection(self_id="c:1", voters=VOTERS, stagger_s=0.05)
    first.on_leader_disconnected("b:1", now=100.0)
    second.on_leader_disconnected("b:1", now=100.0)
    assert first.due(100.0, current_term=7) == 8
    assert first.due(100.0, current_term=7) is None  # once per turn
    assert second.due(100.04, current_term=7) is None
    assert second.due(100.05, current_term=7) == 8


def test_a_round_without_a_majority_is_asked_again_after_every_survivors_turn() -> None:
    node = FastElection(self_id="a:1", voters=VOTERS, stagger_s=0.05)
    node.on_leader_disconnected("b:1", now=0.0)
    assert node.due(0.0, current_term=7) == 8
    assert not node.on_response("c:1", term=8, granted=False)  # c:1 still heard b:1
    assert node.due(0.09, current_term=7) is None
    assert node.due(0.1, current_term=8) == 9  # c:1 stood meanwhile: the term moved on
    assert not node.on_response("c:1", term=8, granted=True)  # the earlier round's answer
    assert node.on_response("c:1", term=9, granted=True)


def test_a_majority_of_grants_starts_the_election_once() -> None:
    node = FastElection(self_id="a:1", voters=VOTERS, stagger_s=0.05)
    node.on_leader_disconnected("b:1", now=0.0)
    assert node.due(0.0, current_term=7) == 8
    assert not node.on_response("c:1", term=7, granted=True)  # an answer to another round
    assert not node.on_response("c:1", term=8, granted=False)
    assert node.on_response("c:1", term=8, granted=True)  # itself and c:1: 2 of 3
    assert not node.on_response("b:1", term=8, granted=True)  # the round is over


def test_five_voters_need_three_grants() -> None:
    voters = ["n1", "n2", "n3", "n4", "n5"]
    node = FastElection(self_id="n2", voters=voters, stagger_s=0.05)
    node.on_leader_disconnected("n1", now=0.0)
    assert node.due(0.0, current_term=1) == 2  # n2 is the first survivor
    assert not node.on_response("n3", term=2, granted=True)
    assert not node.on_response("n3", term=2, granted=True)  # the same voter twice counts once
    assert not node.on_response("stranger", term=2, granted=True)  # not a voter
    assert node.on_response("n4", term=2, granted=True)


def test_a_leader_heard_from_cancels_the_round() -> None:
    node = FastElection(self_id="c:1", voters=VOTERS, stagger_s=0.05)
    node.on_leader_disconnected("b:1", now=0.0)
    node.cancel()  # append_entries from a leader arrived: it is alive, or another leads
    assert node.due(1.0, current_term=7) is None
    node.on_leader_disconnected("b:1", now=2.0)
    assert node.due(2.05, current_term=7) == 8
    node.cancel()
    assert not node.on_response("a:1", term=8, granted=True)


def test_a_node_that_was_the_leader_plans_nothing() -> None:
    node = FastElection(self_id="b:1", voters=VOTERS, stagger_s=0.05)
    node.on_leader_disconnected("b:1", now=0.0)
    assert node.due(10.0, current_term=7) is None


def test_a_node_must_be_a_voter() -> None:
    with pytest.raises(ValueError, match="not among the voters"):
        FastElection(self_id="x:1", voters=VOTERS, stagger_s=0.05)


def test_a_second_report_of_the_same_loss_keeps_the_rounds_under_way() -> None:
    """Two connection objects to the dead leader may both report its end: the round already
    asked keeps its answers, and the schedule does not move."""
    node = FastElection(self_id="c:1", voters=VOTERS, stagger_s=0.05)  # second survivor
    node.on_leader_disconnected("b:1", now=0.0)
    node.on_leader_disconnected("b:1", now=0.04)
    assert node.due(0.05, current_term=7) == 8  # not pushed back to 0.09
    node.on_leader_disconnected("b:1", now=0.051)
    assert node.on_response("a:1", term=8, granted=True)
