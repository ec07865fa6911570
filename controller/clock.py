"""The controller's two clocks."""

from __future__ import annotations

import time

__all__ = ["monotonic_ms", "wall_clock_ms"]


def monotonic_ms() -> int:
    """The clock of every duration on the controller (broker sessions, fencing, probes): it
    never steps, so setting the wall clock neither fences live brokers nor keeps dead ones
    unfenced."""
    return int(time.monotonic() * 1000)


def wall_clock_ms() -> int:
    """Wall-clock time, only for timestamps stored for people (a batch's append_time_ms)."""
    return int(time.time() * 1000)
