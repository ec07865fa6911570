"""Fast elections when the leader's process is gone, guarded by a pre-vote (issue 26).

Raft finds a dead leader by its silence: a follower that hears nothing for its election timeout
(0.25-0.5 s here) stands. When a leader's process dies its kernel closes its sockets, and every
follower sees the connection end at once: evidence, well before the timeout, that the leader is
gone. This module lets that evidence start the election:

* **who stands first.** The voters other than the lost leader are ranked by id; the one ranked
  ``r`` asks for pre-votes ``r * stagger_s`` after it saw the leader's connection end, so the
  survivors do not all stand at once and split the vote (the first one's election takes a few
  milliseconds; the next ones stand only if it did not). A round without a majority is asked
  again once every survivor had its turn: a voter may not have seen the connection end yet.
* **a pre-vote before the election** (Raft thesis §9.6): the candidate asks "would you vote for
  me at term+1?" without changing anyone's term. A voter says yes only when it has no live
  leader itself: its connection to its leader is closed, or it has not heard from it within the
  minimum election timeout; a leader never says yes. So a follower that lost only its own
  connection to a live leader (a connection reset) gets no majority and disrupts nothing; it
  waits out its timeout as before. With a majority of yes, the candidate's election deadline is
  set to now and pysyncobj's own election runs at its next tick.

Safety does not depend on any of this (an election at any time is safe in Raft); only how soon
one starts does. A host that loses power or network closes no socket: the election then comes
from the timeout, as before.

:class:`FastElection` is the pure state of one node (it takes ``now`` and returns what to do);
:func:`grants_pre_vote` is the voter's rule. controller/raft/patches.py wires both into pysyncobj.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["FastElection", "PreVote", "grants_pre_vote"]


@dataclass(frozen=True, slots=True)
class PreVote:
    """A pre-vote request: the term the candidate would stand at, and its log's last entry."""

    term: int
    last_log_index: int
    last_log_term: int


def grants_pre_vote(request: PreVote, *, current_term: int, last_log_index: int,
                    last_log_term: int, is_leader: bool, has_live_leader: bool) -> bool:
    """Whether a voter would vote for ``request``'s candidate now: not while it leads or hears
    a live leader, not for a term it has passed, and only for a log at least as up to date as
    its own (Raft's election restriction)."""
    if is_leader or has_live_leader or request.term <= current_term:
        return False
    if request.last_log_term != last_log_term:
        return request.last_log_term > last_log_term
    return request.last_log_index >= last_log_index


class FastElection:
    """One node's pre-vote rounds (see the module doc). ``voters``: every voter's id, this
    node's included."""

    def __init__(self, *, self_id: str, voters: Sequence[str], stagger_s: float) -> None:
        if self_id not in voters:
            raise ValueError(f"{self_id!r} is not among the voters {list(voters)}")
        self._self_id = self_id
        self._voters = tuple(sorted(set(voters)))
        self._stagger_s = stagger_s
        #: When this node asks for pre-votes (None: no round planned), and for which term.
        self._ask_at: float | None = None
        self._every_s = stagger_s
        self._asking_term: int | None = None
        self._granted: set[str] = set()

    @property
    def majority(self) -> int:
        return len(self._voters) // 2 + 1

    def on_leader_disconnected(self, leader_id: str, now: float) -> None:
        """The connection to the leader ended: plan a round, at this node's rank among the
        other survivors."""
        survivors = [v for v in self._voters if v != leader_id]
        if self._self_id not in survivors:
            return
        if self._ask_at is not None or self._asking_term is not None:
            # Rounds for this loss are under way: another connection object to the same
            # dead leader reporting its end (seen: two in one millisecond) changes nothing.
            return
        self._ask_at = now + survivors.index(self._self_id) * self._stagger_s
        #: A round without a majority is asked again after every survivor had its turn (a
        #: voter may not have seen the leader's connection end yet), until a leader is heard
        #: or an election starts (cancel).
        self._every_s = len(survivors) * self._stagger_s
        self._asking_term = None

    def due(self, now: float, current_term: int) -> int | None:
        """The term to ask pre-votes for (``current_term + 1``) when a round's time has come
        (the caller sends the requests); None otherwise."""
        if self._ask_at is None or now < self._ask_at:
            return None
        self._ask_at = now + self._every_s
        self._asking_term = current_term + 1
        self._granted = {self._self_id}
        return self._asking_term

    def on_response(self, voter_id: str, term: int, granted: bool) -> bool:
        """A voter's answer; True once a majority (this node included) said yes to the round
        in progress: the caller starts the election now."""
        if self._asking_term is None or term != self._asking_term or not granted:
            return False
        if voter_id in self._voters:
            self._granted.add(voter_id)
        if len(self._granted) < self.majority:
            return False
        self.cancel()
        return True

    def cancel(self) -> None:
        """A leader was heard from, or an election started: no round, planned or running."""
        self._ask_at = None
        self._asking_term = None
        self._granted = set()
