"""One pass over a history into the indexes every checker reads (Jepsen's ``analysis``:
``writer-of``, ``readers-of``, ``version-orders``, in jepsen-io/jepsen
``jepsen/src/jepsen/tests/kafka.clj``).

What a position ``(topic, partition, offset)`` held is known from two sources: an ``ok`` send's
acknowledgement and an ``ok`` poll's records. Like Jepsen, the version order of a partition is
the sorted set of offsets known from either; unlike Jepsen we keep raw offsets rather than dense
indices: Tidelog's chaos topics have neither transaction markers nor compaction, so offsets
are contiguous, and a skip is still only claimed over offsets some operation showed to exist.
Each position remembers, per value, the first operation that showed it there, for evidence.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from tidelog.chaos.history import Entry, History, Poll, Send

__all__ = ["Observations", "Position", "TopicPartition", "observe"]

TopicPartition = tuple[str, int]
Position = tuple[str, int, int]  # topic, partition, offset


@dataclass
class Observations:
    #: value -> the send's completion (its invoke while unfinished: an unknown outcome)
    sends: dict[int, Entry] = field(default_factory=dict)
    #: value -> the first ok poll that read it
    first_read: dict[int, Entry] = field(default_factory=dict)
    #: position -> value -> the first ok poll that read that value there
    read_at: dict[Position, dict[int, Entry]] = field(default_factory=dict)
    #: position -> value -> the ok send acknowledged there
    acked_at: dict[Position, dict[int, Entry]] = field(default_factory=dict)
    #: value -> every position it was seen at (acknowledged or read)
    positions: dict[int, set[Position]] = field(default_factory=dict)
    #: partition -> (highest offset read, the poll that read it)
    max_read: dict[TopicPartition, tuple[int, Entry]] = field(default_factory=dict)
    #: partition -> every offset known to hold a record, sorted
    known_offsets: dict[TopicPartition, list[int]] = field(default_factory=dict)
    #: topics whose drain completed: an ok drain poll and no drain poll failed or unfinished
    drained_topics: set[str] = field(default_factory=set)

    def offsets_between(self, tp: TopicPartition, *, low: int, high: int) -> list[int]:
        """Known offsets strictly between ``low`` and ``high`` (what a jump from one to the
        other skipped)."""
        known = self.known_offsets.get(tp, [])
        return known[bisect.bisect_right(known, low):bisect.bisect_left(known, high)]


def observe(history: History) -> Observations:
    obs = Observations()
    drained: set[str] = set()
    undrained: set[str] = set()
    open_invokes: dict[int | str, Entry] = {}
    for entry in history:
        op = entry.op
        if op.type == "invoke":
            open_invokes[op.process] = entry
            if isinstance(op, Send):
                obs.sends[op.value] = entry
            continue
        open_invokes.pop(op.process, None)
        if isinstance(op, Send):
            _observe_send(obs, entry, op)
        elif isinstance(op, Poll):
            if op.drain:
                (drained if op.type == "ok" else undrained).add(op.topic)
            if op.type == "ok":
                _observe_poll(obs, entry, op)
    for entry in open_invokes.values():  # a drain cut short did not read everything
        if isinstance(entry.op, Poll) and entry.op.drain:
            undrained.add(entry.op.topic)
    obs.drained_topics = drained - undrained
    known: dict[TopicPartition, set[int]] = {}
    for topic, partition, offset in (*obs.read_at, *obs.acked_at):
        known.setdefault((topic, partition), set()).add(offset)
    obs.known_offsets = {tp: sorted(offsets) for tp, offsets in known.items()}
    return obs


def _observe_send(obs: Observations, entry: Entry, op: Send) -> None:
    obs.sends[op.value] = entry
    if op.type == "ok" and op.partition is not None and op.offset is not None:
        position = (op.topic, op.partition, op.offset)
        obs.acked_at.setdefault(position, {}).setdefault(op.value, entry)
        obs.positions.setdefault(op.value, set()).add(position)


def _observe_poll(obs: Observations, entry: Entry, op: Poll) -> None:
    for partition, offset, value in op.records:
        position = (op.topic, partition, offset)
        obs.read_at.setdefault(position, {}).setdefault(value, entry)
        obs.positions.setdefault(value, set()).add(position)
        obs.first_read.setdefault(value, entry)
        tp = (op.topic, partition)
        best = obs.max_read.get(tp)
        if best is None or offset > best[0]:
            obs.max_read[tp] = (offset, entry)
