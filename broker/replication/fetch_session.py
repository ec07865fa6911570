"""Incremental replica fetch sessions (Kafka's KIP-227, reduced): the bookkeeping of both ends.

Why: a follower long-polls each leader for every partition it follows from it, about twice a
second. Without sessions each request lists every partition and the leader decides on each one
again (epochs, divergence, the follower's LEO, HW, ISR) and answers each one, so an idle broker
with 10,000 replicas spends its CPU confirming that nothing changed. With a session, a round
costs what changed: the follower lists only the partitions whose fetch position or epochs moved,
and the leader works only on those and on the partitions that changed on its side since the last
round, and answers only the ones with something new.

The wire (broker.proto, ReplicaService.FetchStream): the stream *is* the session -- one per
follower per leader, requests in order, any stream end resets it, so no session ids. The first
request has ``session_epoch`` 0 and is full; every answer carries ``next_session_epoch``, which
the next request repeats to be incremental. Unlike Kafka's leader, which still walks every
partition of a session on each fetch, the leader here keeps a **dirty set**: the shell marks a
partition dirty whenever something a follower fetch decides on changes -- an append, the HW, the
log start offset, the role or leader epoch, the ISR (a pending change resolved), the replica's
eligibility (KIP-841), deletion -- and a round evaluates the listed and the dirty partitions
only, each at the fetch position the follower last listed.

Both ends are here, pure (no I/O, no clock: times are arguments), keyed by any hashable
partition key:

* :class:`LeaderSession` -- the cached fetch per partition, the dirty set, the expected epoch,
  request validation (:meth:`~LeaderSession.begin_round` returns a :class:`Round` to evaluate or
  a :class:`Refusal`), what an incremental answer includes (:meth:`~LeaderSession.on_evaluated`),
  and when a partition left out of the requests was fetched again
  (:meth:`~LeaderSession.mark_dirty`, :meth:`~LeaderSession.closing`);
* :class:`FollowerSession` -- what the leader holds for us (``sent``), what may have changed,
  what to forget; :meth:`~FollowerSession.plan` builds the next request's partition lists.

**ISR safety.** Kafka's leader sees every partition in every fetch of a session and refreshes
each follower's "last caught-up time" at each one. Here a partition left out is, by definition,
fetched again from its last listed position while nothing changed on the leader since its last
evaluation; ``ReplicaState.is_caught_up`` is true anyway while the follower sits at the leader's
LEO, so an idle partition keeps its followers. What must not happen is an append that finds a
live, caught-up follower "lagging since its last real fetch" an hour ago. So when a clean
partition turns dirty (before an append moves the LEO: the shell marks it first) or when the
session ends, the shell records that repeated fetch at the start of the session's latest round
(``PartitionState.on_follower_fetch_repeated``), which is exactly what Kafka's leader would have
recorded: the follower fetched then, from that offset, and the leader's LEO was the one of its
last evaluation. Only partitions whose last evaluation accepted the fetch (no error, no
divergence) are recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from tidelog import limits
from tidelog.errors import InvalidFetchSessionEpochError, InvalidRequestError, TidelogError

__all__ = [
    "FULL_SESSION_EPOCH",
    "SESSION_EPOCH_MAX",
    "SESSION_PARTITIONS_MAX",
    "DirtyMark",
    "FollowerPlan",
    "FollowerSession",
    "LeaderSession",
    "Refusal",
    "Round",
    "next_session_epoch",
]

#: A request's session_epoch that asks for a full fetch (and starts a new session).
FULL_SESSION_EPOCH = 0
#: Session epochs run 1..SESSION_EPOCH_MAX and then wrap to 1 (int32 on the wire).
SESSION_EPOCH_MAX = 2**31 - 1
#: Partitions one session may hold (what one full request may list).
SESSION_PARTITIONS_MAX = limits.PARTITIONS_PER_FETCH_SESSION_MAX
#: Partitions one request lists; a session with more lists the rest in the next requests.
REQUEST_PARTITIONS_MAX = limits.PARTITIONS_PER_REQUEST_MAX

K = TypeVar("K", bound=Hashable)
F = TypeVar("F")


def next_session_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (1 after a full request; wraps past SESSION_EPOCH_MAX to 1)."""
    return 1 if epoch >= SESSION_EPOCH_MAX else epoch + 1


# --- leader ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Round(Generic[K]):
    """An accepted request: evaluate ``evaluate`` (in this order), answer with
    ``next_session_epoch``. In a ``full`` round every evaluated partition is answered."""

    full: bool
    evaluate: tuple[K, ...]
    next_session_epoch: int


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refused request: answer ``error`` for the whole request (next_session_epoch 0). Only a
    full request is accepted next; the shell records :meth:`LeaderSession.closing` and calls
    :meth:`LeaderSession.reset`."""

    error: TidelogError


@dataclass(frozen=True, slots=True)
class DirtyMark:
    """A clean partition of the session just turned dirty. ``repeated_at_ms``: record that the
    follower fetched it again at that time from its last position (the start of the session's
    latest round), or None (never accepted, or no round yet)."""

    repeated_at_ms: int | None


@dataclass(slots=True)
class _Cached(Generic[F]):
    """One partition of a leader's session."""

    fetch: F  # the follower's last listed fetch of it
    sent_high_watermark: int | None = None  # what the follower last heard (None: nothing yet)
    sent_log_start_offset: int | None = None
    accepted: bool = False  # its last evaluation accepted the fetch (no error, no divergence)


class LeaderSession(Generic[K, F]):
    """The leader's end of one follower's fetch session (see the module doc). ``F`` is the
    shell's per-partition fetch (the request's PartitionData), kept as it came."""

    def __init__(self, *, partitions_max: int = SESSION_PARTITIONS_MAX) -> None:
        if partitions_max <= 0:
            raise ValueError(f"partitions_max {partitions_max} is not positive")
        self.partitions_max = partitions_max
        self.replica_id = -1
        self.broker_epoch = -1
        #: The epoch the next incremental request must carry; FULL_SESSION_EPOCH = none.
        self.expected_epoch = FULL_SESSION_EPOCH
        #: When the latest accepted request arrived (None: none yet).
        self.round_started_ms: int | None = None
        self._partitions: dict[K, _Cached[F]] = {}
        self._dirty: dict[K, None] = {}  # insertion-ordered set
        self._starved: dict[K, None] = {}  # left out of a full answer: first in the next round
        self._full_round = False

    def __len__(self) -> int:
        return len(self._partitions)

    def __contains__(self, key: object) -> bool:
        return key in self._partitions

    def keys(self) -> Iterator[K]:
        return iter(self._partitions)

    def fetch_of(self, key: K) -> F | None:
        """The follower's last listed fetch of ``key``; None when not in the session."""
        cached = self._partitions.get(key)
        return None if cached is None else cached.fetch

    @property
    def dirty(self) -> tuple[K, ...]:
        return tuple(self._dirty)

    def reset(self) -> None:
        """Forget everything: only a full request is accepted next."""
        self.expected_epoch = FULL_SESSION_EPOCH
        self._partitions.clear()
        self._dirty.clear()
        self._starved.clear()
        self._full_round = False

    def begin_round(self, *, session_epoch: int, replica_id: int, broker_epoch: int,
                    listed: Sequence[tuple[K, F]], forgotten: Iterable[K],
                    now_ms: int) -> Round[K] | Refusal:
        """A request arrived: check its epoch (and that it is the same follower incarnation),
        apply its listed and forgotten partitions, and say what to evaluate: a full request's
        partitions, or an incremental one's (starved from the last round first, then listed,
        then dirty)."""
        if session_epoch == FULL_SESSION_EPOCH:
            self.reset()
            self.replica_id, self.broker_epoch = replica_id, broker_epoch
            full = True
            forgotten = ()
        else:
            problem = None
            if self.expected_epoch == FULL_SESSION_EPOCH:
                problem = (f"no fetch session to continue (session epoch {session_epoch}): "
                           "send a full request")
            elif session_epoch != self.expected_epoch:
                problem = (f"session epoch {session_epoch} is not the expected "
                           f"{self.expected_epoch}")
            elif (replica_id, broker_epoch) != (self.replica_id, self.broker_epoch):
                problem = (f"the session belongs to replica {self.replica_id} at broker epoch "
                           f"{self.broker_epoch}, not {replica_id} at {broker_epoch}")
            if problem is not None:
                self.expected_epoch = FULL_SESSION_EPOCH
                return Refusal(InvalidFetchSessionEpochError(problem))
            full = False
        for key in forgotten:
            self._partitions.pop(key, None)
            self._dirty.pop(key, None)
            self._starved.pop(key, None)
        order: dict[K, None] = {} if full else self._starved
        self._starved = {}
        for key, fetch in listed:
            cached = self._partitions.get(key)
            if cached is None:
                if len(self._partitions) >= self.partitions_max:
                    self.expected_epoch = FULL_SESSION_EPOCH
                    return Refusal(InvalidRequestError(
                        f"a fetch session holds at most {self.partitions_max} partitions"))
                self._partitions[key] = _Cached(fetch)
            else:
                cached.fetch = fetch
                cached.accepted = False  # until this round evaluates the new position
            order[key] = None
        order.update(self._dirty)
        self._dirty.clear()
        self._full_round = full
        self.round_started_ms = now_ms
        self.expected_epoch = next_session_epoch(session_epoch)
        return Round(full, tuple(order), self.expected_epoch)

    def mark_dirty(self, key: K) -> DirtyMark | None:
        """Something a fetch of ``key`` decides on changed: evaluate it in the session's current
        or next round. A DirtyMark when it just turned dirty (the shell wakes a parked round and
        records the repeated fetch); None when not in the session or dirty already."""
        cached = self._partitions.get(key)
        if cached is None or key in self._dirty:
            return None
        self._dirty[key] = None
        at_ms = self.round_started_ms if cached.accepted else None
        return DirtyMark(at_ms)

    def mark_all_dirty(self) -> list[tuple[K, DirtyMark]]:
        """Every partition of the session (the follower's eligibility changed)."""
        marks = []
        for key in list(self._partitions):
            mark = self.mark_dirty(key)
            if mark is not None:
                marks.append((key, mark))
        return marks

    def take_dirty(self) -> tuple[K, ...]:
        """The partitions that turned dirty while a round waited: evaluate them now."""
        keys = tuple(self._dirty)
        self._dirty.clear()
        return keys

    def on_evaluated(self, key: K, *, high_watermark: int, log_start_offset: int,
                     records: bool, error: bool, diverging: bool, more: bool) -> bool:
        """``key`` was evaluated in the current round; whether the answer includes it: a full
        round's every partition; an incremental round's when it has records, an error or a
        diverging epoch, or a HW or log start offset the follower has not heard. ``more``: the
        fetch was accepted but the answer had no room for its records (the response's
        max_bytes): it comes first in the next round."""
        cached = self._partitions.get(key)
        if cached is None:
            return False
        cached.accepted = not (error or diverging)
        if more and cached.accepted:
            self._starved[key] = None
        include = (self._full_round or records or error or diverging
                   or high_watermark != cached.sent_high_watermark
                   or log_start_offset != cached.sent_log_start_offset)
        if include:
            cached.sent_high_watermark = high_watermark
            cached.sent_log_start_offset = log_start_offset
        return include

    def closing(self) -> list[tuple[K, int]]:
        """The session ends (its stream closed): the partitions to record a repeated fetch for,
        with its time -- every clean one whose last evaluation was accepted was fetched again at
        the latest round's start (dirty ones were recorded when they turned dirty)."""
        at_ms = self.round_started_ms
        if at_ms is None:
            return []
        return [(key, at_ms) for key, cached in self._partitions.items()
                if cached.accepted and key not in self._dirty]


# --- follower ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FollowerPlan(Generic[K, F]):
    """The partitions of the follower's next request: its session epoch, what to list (with
    the fetch to send) and what to forget."""

    session_epoch: int
    listed: tuple[tuple[K, F], ...]
    forgotten: tuple[K, ...]

    @property
    def full(self) -> bool:
        return self.session_epoch == FULL_SESSION_EPOCH


class FollowerSession(Generic[K, F]):
    """The follower's end of a session with one leader (see the module doc). ``F`` is the
    follower's fetch of one partition (FollowerFetch), compared by equality."""

    def __init__(self) -> None:
        #: The epoch of the next request; FULL_SESSION_EPOCH = full.
        self.session_epoch = FULL_SESSION_EPOCH
        self._sent: dict[K, F] = {}  # what the leader holds for us
        self._changed: dict[K, bool] = {}  # may have changed -> list it even if equal
        self._forgotten: dict[K, None] = {}

    @property
    def full(self) -> bool:
        return self.session_epoch == FULL_SESSION_EPOCH

    def __len__(self) -> int:
        """Partitions the leader fetches for us in this session."""
        return len(self._sent)

    @property
    def pending(self) -> bool:
        """Whether partitions may be waiting to be listed (after a plan: left out of it)."""
        return bool(self._changed)

    def sent(self, key: K) -> F | None:
        """The fetch of ``key`` the leader holds (what its answers are relative to)."""
        return self._sent.get(key)

    def reset(self) -> None:
        """The session is gone (the stream closed, an exchange failed or was cancelled, the
        leader refused or keeps none): the next request is full."""
        self.session_epoch = FULL_SESSION_EPOCH
        self._sent.clear()
        self._changed.clear()
        self._forgotten.clear()

    def mark_changed(self, key: K, *, relist: bool = False) -> None:
        """``key``'s fetch may differ from what the leader holds (added, answered, back from a
        back-off): the next plan compares it. ``relist``: list it even if it looks the same (the
        leader sent records or a diverging epoch and expects a new position)."""
        self._changed[key] = self._changed.get(key, False) or relist

    def forget(self, key: K) -> None:
        """Stop fetching ``key`` in this session (removed, moved, backing off)."""
        self._changed.pop(key, None)
        if self._sent.pop(key, None) is not None:
            self._forgotten[key] = None  # (a full plan starts from nothing: no need there)

    def plan(self, fetch_of: Callable[[K], F | None], every: Callable[[], Iterable[K]],
             listed_max: int = REQUEST_PARTITIONS_MAX) -> FollowerPlan[K, F]:
        """The next request's partitions. ``fetch_of(key)``: the fetch to send now, None when
        the partition is not to be fetched (backing off, no leader, another leader);
        ``every()``: all the fetcher's partitions (a full request lists each fetchable one).
        At most ``listed_max`` are listed; the others stay changed, for the next requests (a
        full request's leftovers join the session incrementally)."""
        listed: list[tuple[K, F]] = []
        if self.full:
            self._sent.clear()
            self._changed.clear()
            self._forgotten.clear()
            for key in every():
                if len(listed) >= listed_max:
                    self._changed[key] = True
                    continue
                fetch = fetch_of(key)
                if fetch is not None:
                    listed.append((key, fetch))
                    self._sent[key] = fetch
            return FollowerPlan(FULL_SESSION_EPOCH, tuple(listed), ())
        changed, self._changed = self._changed, {}
        for key, relist in changed.items():
            if len(listed) >= listed_max:
                self._changed[key] = self._changed.get(key, False) or relist
                continue
            fetch = fetch_of(key)
            if fetch is None:
                if self._sent.pop(key, None) is not None:
                    self._forgotten[key] = None
            elif relist or self._sent.get(key) != fetch:
                listed.append((key, fetch))
                self._sent[key] = fetch
                self._forgotten.pop(key, None)
        forgotten = tuple(self._forgotten)
        self._forgotten.clear()
        return FollowerPlan(self.session_epoch, tuple(listed), forgotten)

    def on_answer(self, next_session_epoch: int) -> None:
        """The leader answered the planned request (after its partitions were applied): go on
        with ``next_session_epoch``; 0 = the leader keeps no session (full requests)."""
        if next_session_epoch <= FULL_SESSION_EPOCH or next_session_epoch > SESSION_EPOCH_MAX:
            self.reset()
        else:
            self.session_epoch = next_session_epoch
