"""Members' session and rebalance deadlines of one coordinator shard, in a heap (soft state: not
in records; a new coordinator starts every member's session afresh).

The dicts say what each member's deadline is now; the heap orders them so that the shard's
timer visits only what is due instead of every member of every group (Kafka's coordinator
timer likewise schedules one timeout per member). A heartbeat moves a member's session deadline
by pushing a new entry: the old one stays in the heap and is dropped when it comes up (lazy
deletion: an entry counts only while the dict still holds its value). Stale entries are bounded:
when the heap holds more than :data:`HEAP_SLACK_FACTOR` times the live deadlines (plus
:data:`HEAP_SLACK_MIN`), it is rebuilt from the dicts.

:meth:`MemberDeadlines.due` pops what is due, as a sorted list of members (the order the shard
fences them in, as when it scanned every member sorted); the shard gives back with
:meth:`MemberDeadlines.restore` the members it did not act on (its per-call record limit).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

__all__ = ["HEAP_SLACK_FACTOR", "HEAP_SLACK_MIN", "MemberDeadlines", "MemberKey"]

#: (group id, member id).
MemberKey = tuple[str, str]
#: The heap is rebuilt when it holds more entries than this many times the live deadlines...
HEAP_SLACK_FACTOR = 4
#: ...plus this many (so a small shard is not rebuilt on every heartbeat).
HEAP_SLACK_MIN = 1_024

_SESSION = 0
_REBALANCE = 1


@dataclass
class MemberDeadlines:
    """The deadlines and their heap (see the module doc)."""

    session_ms: dict[MemberKey, int] = field(default_factory=dict)
    #: key -> (deadline, the member epoch it must have moved past by then).
    rebalance_ms: dict[MemberKey, tuple[int, int]] = field(default_factory=dict)
    #: (deadline, kind, group id, member id), possibly stale.
    _heap: list[tuple[int, int, str, str]] = field(default_factory=list)

    def set_session(self, key: MemberKey, deadline_ms: int) -> None:
        if self.session_ms.get(key) == deadline_ms:
            return
        self.session_ms[key] = deadline_ms
        self._push(deadline_ms, _SESSION, key)

    def set_rebalance(self, key: MemberKey, deadline_ms: int, member_epoch: int) -> None:
        self.rebalance_ms[key] = (deadline_ms, member_epoch)
        self._push(deadline_ms, _REBALANCE, key)

    def clear_rebalance(self, key: MemberKey) -> None:
        self.rebalance_ms.pop(key, None)

    def forget(self, group_id: str, member_id: str) -> None:
        self.session_ms.pop((group_id, member_id), None)
        self.rebalance_ms.pop((group_id, member_id), None)

    def next_deadline_ms(self) -> int | None:
        """The earliest live deadline, or None (stale entries at the top are dropped)."""
        while self._heap and not self._live(self._heap[0]):
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def due(self, now_ms: int) -> list[MemberKey]:
        """The members with a live deadline at or before ``now_ms``, sorted, each once; their
        due entries leave the heap (give back what is not acted on with :meth:`restore`)."""
        keys: set[MemberKey] = set()
        while self._heap and self._heap[0][0] <= now_ms:
            entry = heapq.heappop(self._heap)
            if self._live(entry):
                keys.add((entry[2], entry[3]))
        return sorted(keys)

    def restore(self, keys: list[MemberKey]) -> None:
        """Put back the live deadlines of ``keys`` (members :meth:`due` gave that the shard
        did not act on yet)."""
        for key in keys:
            session = self.session_ms.get(key)
            if session is not None:
                self._push(session, _SESSION, key)
            rebalance = self.rebalance_ms.get(key)
            if rebalance is not None:
                self._push(rebalance[0], _REBALANCE, key)

    def _live(self, entry: tuple[int, int, str, str]) -> bool:
        deadline, kind, group_id, member_id = entry
        key = (group_id, member_id)
        if kind == _SESSION:
            return self.session_ms.get(key) == deadline
        rebalance = self.rebalance_ms.get(key)
        return rebalance is not None and rebalance[0] == deadline

    def _push(self, deadline_ms: int, kind: int, key: MemberKey) -> None:
        heapq.heappush(self._heap, (deadline_ms, kind, *key))
        live = len(self.session_ms) + len(self.rebalance_ms)
        if len(self._heap) > HEAP_SLACK_FACTOR * live + HEAP_SLACK_MIN:
            self._heap = [e for e in self._heap if self._live(e)]
            heapq.heapify(self._heap)
