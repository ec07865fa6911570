"""The leader-epoch cache of one partition: which leader epoch started at which offset.

Kafka's LeaderEpochFileCache (KIP-101/279), as a pure value: entries ``(epoch, start_offset)``
strictly increasing in both, so a follower can ask the leader "where does my last epoch end?" and
truncate to the answer instead of to its HW. The partition log persists :meth:`encode` in the same
write batch as the change that altered it.
"""

from __future__ import annotations

import bisect
import struct

from tidelog import limits
from tidelog.invariants import InvariantViolation

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "LeaderEpochCache"]

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

_HEADER = struct.Struct(">I")
_ENTRY = struct.Struct(">iq")


class LeaderEpochCache:
    """Entries (epoch, start_offset), strictly increasing in both."""

    __slots__ = ("_epochs", "_starts")

    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start_offset in entries or ():
            self.assign(epoch, start_offset)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    def latest_epoch(self) -> int:
        """The newest epoch, or UNDEFINED_EPOCH (-1) when the cache is empty."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def latest_start_offset(self) -> int:
        return self._starts[-1] if self._starts else UNDEFINED_EPOCH_OFFSET

    def can_assign(self, epoch: int, start_offset: int) -> bool:
        """True when (epoch, start_offset) may follow the latest entry (or repeats its epoch)."""
        if not self._epochs:
            return epoch >= 0
        if epoch == self._epochs[-1]:
            return True
        return epoch > self._epochs[-1] and start_offset >= self._starts[-1]

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; False when the epoch is the latest.

        An older epoch, or a start before the latest entry's, is a caller bug (the log checks
        first and raises FencedLeaderEpochError), so it is asserted, not repaired as Kafka does.
        """
        if self._epochs and epoch == self._epochs[-1]:
            return False
        if not self.can_assign(epoch, start_offset):
            raise InvariantViolation(
                f"epoch {epoch} at offset {start_offset} does not follow {self.entries}")
        if self._starts and start_offset == self._starts[-1]:
            # The previous epoch appended nothing: it owns no offsets, so it need not be kept.
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        if len(self._epochs) > limits.LEADER_EPOCH_ENTRIES_MAX:
            del self._epochs[0], self._starts[0]
        return True

    def end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """KIP-279: (largest epoch <= ``epoch``, the offset where it ends).

        The end of an epoch is the start offset of the next higher one, or the log end offset for
        the latest epoch. An epoch above every known one, or UNDEFINED_EPOCH, gives
        (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET); one below every known one gives the requested
        epoch with the first entry's start offset, as Kafka answers.
        """
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range holds ``offset`` (UNDEFINED_EPOCH before the first entry)."""
        i = bisect.bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        i = bisect.bisect_left(self._starts, end_offset)
        if i == len(self._starts):
            return False
        del self._epochs[i:], self._starts[i:]
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: drop entries wholly before it, and move the
        start of the epoch that holds it up to it (Kafka's truncateFromStart)."""
        i = bisect.bisect_right(self._starts, start_offset)
        if i == 0 or (i == 1 and self._starts[0] == start_offset):
            return False
        kept_epoch = self._epochs[i - 1]
        del self._epochs[:i], self._starts[:i]
        self._epochs.insert(0, kept_epoch)
        self._starts.insert(0, start_offset)
        return True

    def clear(self) -> bool:
        changed = bool(self._epochs)
        self._epochs.clear()
        self._starts.clear()
        return changed

    def encode(self) -> bytes:
        parts = [_HEADER.pack(len(self._epochs))]
        parts.extend(_ENTRY.pack(e, s) for e, s in zip(self._epochs, self._starts, strict=True))
        return b"".join(parts)

    @classmethod
    def decode(cls, data: bytes) -> LeaderEpochCache:
        (count,) = _HEADER.unpack_from(data)
        if len(data) != _HEADER.size + count * _ENTRY.size:
            raise ValueError(f"leader-epoch cache of {len(data)} bytes cannot hold {count} entries")
        cache = cls()
        for i in range(count):
            epoch, start = _ENTRY.unpack_from(data, _HEADER.size + i * _ENTRY.size)
            if not cache.can_assign(epoch, start) or epoch == cache.latest_epoch():
                raise ValueError(f"leader-epoch cache entries are not increasing at entry {i}")
            cache._epochs.append(epoch)
            cache._starts.append(start)
        return cache

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LeaderEpochCache) and self.entries == other.entries

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.entries})"
