"""The consumer's end of a fetch session with one broker (Kafka's FetchSessionHandler, KIP-227).

The broker keeps, per consumer FetchStream that asked for it (``FetchRequest.open_session``),
the fetch offset and leader epoch of every partition the consumer fetches from it, and answers
only the partitions with something new. So after a full first request, each request lists only
the partitions whose (offset, leader epoch) changed since the last one sent, and forgets the
ones no longer fetched: records still to hand out, paused, backing off, reset pending, moved to
another leader, unassigned. An idle consumer then sends near-empty requests, and its brokers do
no work per idle partition.

Pure (no I/O): :meth:`FetchSessionHandler.build` says what the next request lists;
:meth:`~FetchSessionHandler.on_answer` and :meth:`~FetchSessionHandler.reset` follow the
broker's answers. Any doubt (an exchange failed or timed out, a request-level error, a broker
that keeps no session: ``next_session_epoch`` 0) resets to a full request, which is always
correct, only bigger.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["FULL_SESSION_EPOCH", "FetchSessionHandler", "SessionRequest"]

#: A request's session epoch that asks for a full fetch (and a new session).
FULL_SESSION_EPOCH = 0
#: Session epochs run 1..2**31 - 1 on the wire (int32).
_EPOCH_MAX = 2**31 - 1

K = TypeVar("K", bound=Hashable)
F = TypeVar("F")


@dataclass(frozen=True, slots=True)
class SessionRequest(Generic[K, F]):
    """What the next request carries: its session epoch, the partitions to list (with their
    fetch) and the ones to forget."""

    session_epoch: int
    listed: dict[K, F]
    forgotten: tuple[K, ...]

    @property
    def full(self) -> bool:
        return self.session_epoch == FULL_SESSION_EPOCH


class FetchSessionHandler(Generic[K, F]):
    """The consumer's session with one broker (see the module doc). ``F``: a partition's fetch
    as the broker keeps it (fetch offset, leader epoch), compared by equality."""

    def __init__(self) -> None:
        self.session_epoch = FULL_SESSION_EPOCH
        #: What the broker holds for us; None = must be listed again (its answer was an error).
        self._sent: dict[K, F | None] = {}

    def __len__(self) -> int:
        return len(self._sent)

    def build(self, wanted: Mapping[K, F]) -> SessionRequest[K, F]:
        """The next request, for the partitions to fetch now (``wanted``) and their fetch. The
        broker is assumed to hold ``wanted`` once it is sent (a failure must :meth:`reset`)."""
        if self.session_epoch == FULL_SESSION_EPOCH:
            self._sent = dict(wanted)
            return SessionRequest(FULL_SESSION_EPOCH, dict(wanted), ())
        sent = self._sent
        listed = {key: fetch for key, fetch in wanted.items() if sent.get(key) != fetch}
        forgotten = tuple(key for key in sent if key not in wanted)
        self._sent = dict(wanted)
        return SessionRequest(self.session_epoch, listed, forgotten)

    def relist(self, key: K) -> None:
        """The broker answered ``key`` with an error: list it again with the next request that
        fetches it (or forget it), whatever its fetch then."""
        if key in self._sent:
            self._sent[key] = None

    def on_answer(self, next_session_epoch: int) -> None:
        """The broker answered the request built last: go on incrementally with
        ``next_session_epoch``; 0 (or nonsense) = the broker keeps no session: full requests."""
        if FULL_SESSION_EPOCH < next_session_epoch <= _EPOCH_MAX:
            self.session_epoch = next_session_epoch
        else:
            self.reset()

    def reset(self) -> None:
        """The session is gone or in doubt: the next request is full."""
        self.session_epoch = FULL_SESSION_EPOCH
        self._sent.clear()
