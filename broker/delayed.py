"""Delayed fetches: long-polls that wait for a partition event (Kafka's fetch purgatory, reduced).

A fetch that found fewer than ``min_bytes`` waits up to ``max_wait_ms`` for something to read.
Rather than polling, it watches the partitions it asked for: :meth:`FetchWaiters.watch` returns a
future that :meth:`FetchWaiters.wake` resolves when one of them changes, and the fetch then reads
again (Kafka's DelayedFetch.tryComplete, done by the waiting request itself). Two instances live
in the replica manager because the two kinds of fetch wait for different things:

* follower fetches (ReplicaService) wait for **data**: woken by the leader's appends;
* consumer fetches (BrokerService) wait for the **high watermark**: woken when it advances.

Both are also woken when the partition's role changes or it is deleted, so a waiting request
answers NOT_LEADER_OR_FOLLOWER at once instead of at its deadline.

Waiting is bounded: at most ``waiters_max`` fetches wait at once; past that :meth:`watch`
returns None and the fetch answers with what it has (an empty answer is always correct, only
less efficient). Waking is O(waiters of that partition); a partition nobody watches costs one
dict lookup per event, which keeps it cheap on the produce path.

Follower fetches on a FetchStream do not watch keys: each stream is a fetch session
(broker.replication.fetch_session) that registers once with :class:`FollowerFetchWaiters`, and
every :meth:`~FollowerFetchWaiters.wake` of a partition also marks it dirty in the sessions that
hold it (O(sessions), a handful: one per follower broker), which wakes a parked round. So a
parked session costs nothing per partition, where a watching fetch costs two set operations per
partition it asked for.

Consumer fetches on a FetchStream that asked for a session (broker.handlers.consumer_session) do
the same with :class:`ConsumerFetchWaiters`, with one difference: there can be many consumers,
so the sessions are indexed by the partitions they hold and a wake costs the sessions holding
that partition, not every session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable
from typing import Protocol

from tidelog.invariants import InvariantViolation, check

__all__ = [
    "DELAYED_FETCHES_MAX",
    "ConsumerFetchWaiters",
    "FetchSessionWaiter",
    "FetchWaiters",
    "FollowerFetchWaiters",
]

#: Fetches that may wait at once per kind (Kafka bounds its purgatories by memory only).
DELAYED_FETCHES_MAX = 10_000


class FetchWaiters:
    """Futures waiting for partition events, keyed by partition (see the module doc)."""

    def __init__(self, *, waiters_max: int = DELAYED_FETCHES_MAX) -> None:
        if waiters_max <= 0:
            raise InvariantViolation(f"waiters_max {waiters_max} is not positive")
        self.waiters_max = waiters_max
        self._by_key: dict[Hashable, set[asyncio.Future[None]]] = {}
        self._count = 0

    def __len__(self) -> int:
        """Fetches waiting now."""
        return self._count

    def watch(self, keys: Iterable[Hashable]) -> asyncio.Future[None] | None:
        """A future resolved by the next :meth:`wake` of any of ``keys``; None when full (the
        caller answers at once). The caller must :meth:`unwatch` it when done, woken or not."""
        if self._count >= self.waiters_max:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._by_key.setdefault(key, set()).add(future)
        self._count += 1
        return future

    def unwatch(self, future: asyncio.Future[None], keys: Iterable[Hashable]) -> None:
        for key in keys:
            watchers = self._by_key.get(key)
            if watchers is not None:
                watchers.discard(future)
                if not watchers:
                    del self._by_key[key]
        self._count -= 1
        check(self._count >= 0, "more futures unwatched than watched")
        if not future.done():
            future.cancel()

    def wake(self, key: Hashable) -> int:
        """Resolve every future watching ``key``; returns how many."""
        watchers = self._by_key.get(key)
        if not watchers:
            return 0
        woken = 0
        for future in watchers:
            if not future.done():
                future.set_result(None)
                woken += 1
        return woken

    def wake_all(self) -> None:
        """Resolve every waiting future (the broker is stopping)."""
        for watchers in self._by_key.values():
            for future in watchers:
                if not future.done():
                    future.set_result(None)

    async def wait(self, keys: Iterable[Hashable], timeout_s: float) -> bool:
        """Wait until one of ``keys`` is woken or ``timeout_s`` passes. False when it could not
        wait at all (full) or timed out; True when woken."""
        keys = tuple(keys)
        if timeout_s <= 0:
            return False
        future = self.watch(keys)
        if future is None:
            return False
        try:
            done, _ = await asyncio.wait((future,), timeout=timeout_s)
            return bool(done)
        finally:
            self.unwatch(future, keys)


class FetchSessionWaiter(Protocol):
    """What :class:`FollowerFetchWaiters` needs of a fetch session (the leader's end of one
    follower's FetchStream: broker.handlers.fetch.ReplicaFetchSession)."""

    @property
    def replica_id(self) -> int:
        """The follower broker (-1 before its first request)."""
        ...

    @property
    def parked(self) -> bool:
        """A round is waiting for something to answer."""
        ...

    def mark_dirty(self, key: Hashable) -> None:
        """Something a fetch of ``key`` decides on changed (a no-op unless the session has it)."""

    def mark_all_dirty(self) -> None:
        """Every partition of the session (the follower's eligibility changed)."""

    def wake(self) -> None:
        """Answer a parked round now (the broker is stopping)."""


class _SessionWaiters(FetchWaiters):
    """Watching fetches plus the open fetch sessions (what both kinds of waiters share)."""

    def __init__(self, *, waiters_max: int = DELAYED_FETCHES_MAX) -> None:
        super().__init__(waiters_max=waiters_max)
        self._sessions: dict[FetchSessionWaiter, None] = {}

    def __len__(self) -> int:
        """Fetches waiting now: watching ones and parked session rounds."""
        return super().__len__() + sum(1 for s in self._sessions if s.parked)

    @property
    def sessions(self) -> tuple[FetchSessionWaiter, ...]:
        return tuple(self._sessions)

    def add_session(self, session: FetchSessionWaiter) -> None:
        self._sessions[session] = None

    def remove_session(self, session: FetchSessionWaiter) -> None:
        self._sessions.pop(session, None)

    def wake_all(self) -> None:
        super().wake_all()
        for session in self._sessions:
            session.wake()


class FollowerFetchWaiters(_SessionWaiters):
    """The follower waiters: unary fetches watching keys, plus the open fetch sessions, which
    every :meth:`wake` of a partition marks dirty (see the module doc)."""

    def wake(self, key: Hashable) -> int:
        """Resolve the futures watching ``key`` and mark it dirty in every session; returns
        how many futures."""
        for session in self._sessions:
            session.mark_dirty(key)
        return super().wake(key)

    def wake_replicas(self, broker_ids: Iterable[int]) -> None:
        """Every partition of these followers' sessions is dirty (their eligibility changed:
        a caught-up one may join ISRs now)."""
        ids = frozenset(broker_ids)
        if ids:
            for session in self._sessions:
                if session.replica_id in ids:
                    session.mark_all_dirty()


class ConsumerFetchWaiters(_SessionWaiters):
    """The consumer waiters: unary fetches watching keys, plus the consumers' fetch sessions,
    each registered under the partitions it holds (:meth:`track`), which every :meth:`wake` of
    a partition marks dirty (see the module doc). A session untracks what it holds before it
    is removed."""

    def __init__(self, *, waiters_max: int = DELAYED_FETCHES_MAX) -> None:
        super().__init__(waiters_max=waiters_max)
        self._holding: dict[Hashable, dict[FetchSessionWaiter, None]] = {}

    def track(self, session: FetchSessionWaiter, keys: Iterable[Hashable]) -> None:
        """``session`` now holds ``keys``: their wakes mark it dirty."""
        for key in keys:
            self._holding.setdefault(key, {})[session] = None

    def untrack(self, session: FetchSessionWaiter, keys: Iterable[Hashable]) -> None:
        """``session`` no longer holds ``keys``."""
        for key in keys:
            holders = self._holding.get(key)
            if holders is not None:
                holders.pop(session, None)
                if not holders:
                    del self._holding[key]

    def holders(self, key: Hashable) -> int:
        """How many sessions hold ``key`` (tests)."""
        return len(self._holding.get(key, ()))

    def wake(self, key: Hashable) -> int:
        """Resolve the futures watching ``key`` and mark it dirty in the sessions holding it;
        returns how many futures."""
        holders = self._holding.get(key)
        if holders:
            for session in tuple(holders):
                session.mark_dirty(key)
        return super().wake(key)
