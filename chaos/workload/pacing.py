"""A producer's pace: at most ``rate_per_s`` sends per second, no burst after a stall.

A producer asks :meth:`Pacer.delay_s` how long to wait before its next send and calls
:meth:`Pacer.taken` when it sends. After a stall (a paused broker blocked the producer, the
machine was busy) it does not send the missed sends in a burst: at most one send is owed, as
in Jepsen's ``stagger``, so a fault's recovery is measured at the configured rate.

Pure: the caller passes the time (monotonic seconds).
"""

from __future__ import annotations

from typing import Final

__all__ = ["RATE_PER_S_MAX", "Pacer"]

#: Above this a workload on one machine measures itself rather than the cluster.
RATE_PER_S_MAX: Final = 100_000.0


class Pacer:
    """When a producer may send next, at ``rate_per_s``."""

    def __init__(self, rate_per_s: float, *, now_s: float) -> None:
        if not 0 < rate_per_s <= RATE_PER_S_MAX:
            raise ValueError(f"rate_per_s must be within (0, {RATE_PER_S_MAX}], got {rate_per_s}")
        self.interval_s = 1.0 / rate_per_s
        self._next_s = now_s

    def delay_s(self, now_s: float) -> float:
        """Seconds to wait before the next send (0: now)."""
        return max(0.0, self._next_s - now_s)

    def taken(self, now_s: float) -> None:
        """A send was made at ``now_s``: the next is due one interval after its due time, or
        after ``now_s`` less one interval if the producer fell behind (one send owed at most)."""
        self._next_s = max(self._next_s, now_s - self.interval_s) + self.interval_s
