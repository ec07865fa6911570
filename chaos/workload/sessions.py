"""Consumer sessions of a group consumer: which of its polls must continue one another.

The history's ``session`` (chaos/history.py, docs/chaos.md) groups the polls of one consumer
that must advance through each partition without a skip or a step back. A consumer in a group
may legitimately jump whenever the group moves partitions: a partition assigned to it starts at
the group's committed offset, which may lie before what this consumer read the last time it
had the partition. So a session lasts from the (re)assignment of the consumer's partitions
until the next revocation, loss or assignment, or until the consumer is restarted (a new
:class:`GroupSessions`).

The listener's callbacks run inside ``poll()``, so a rebalance can happen in the middle of a
poll whose ``invoke`` already named the session. :class:`GroupSessions` handles it this way:

- :meth:`begin_poll` gives the session for the next poll: a new one if any callback moved
  partitions since the current one began;
- callbacks with partitions mark the session changed; assigned partitions are remembered for
  the poll in progress;
- :meth:`end_poll` says whether the poll's records may be recorded in that session: not when a
  partition was assigned during this very poll although the session had already read it (it
  was revoked or lost and came back, all inside one ``poll()``, and may have jumped back). The
  workload then completes that poll as ``info``, so no false step back is reported.

Pure: the caller hands out session numbers (unique per run) through ``new_session``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["GroupSessions"]


class GroupSessions:
    """The session bookkeeping of one group consumer (one thread: its poll loop)."""

    def __init__(self, new_session: Callable[[], int]) -> None:
        self._new_session = new_session
        self._session: int | None = None
        self._changed = False
        self._read: set[int] = set()           # partitions read in the current session
        self._assigned_in_poll: set[int] = set()

    @property
    def session(self) -> int | None:
        """The current session (None before the first poll)."""
        return self._session

    def begin_poll(self) -> int:
        """The session of the poll about to be invoked."""
        if self._session is None or self._changed:
            self._session = self._new_session()
            self._changed = False
            self._read = set()
        self._assigned_in_poll = set()
        return self._session

    def on_assigned(self, partitions: Iterable[int]) -> None:
        added = set(partitions)
        if added:
            self._assigned_in_poll |= added
            self._changed = True

    def on_revoked(self, partitions: Iterable[int]) -> None:
        if set(partitions):
            self._changed = True

    def on_lost(self, partitions: Iterable[int]) -> None:
        self.on_revoked(partitions)

    def end_poll(self, partitions_read: Iterable[int]) -> bool:
        """Record that the poll read these partitions; False when its records cannot be judged
        as continuing the session (see the module doc)."""
        read = set(partitions_read)
        continues = not (read & self._assigned_in_poll & self._read)
        self._read |= read
        return continues
