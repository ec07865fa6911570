"""What every worker of one chaos run shares: the history writer, the run's clock, the process
and session numbers, the stop signal, and the first workload bug.

The runner makes one :class:`RunContext` per run and hands it to the workload, the drain and
the nemesis, so their operations share one file and one time base (``time_ns`` counts from the
run's start on the monotonic clock). Process numbers (one per client slot: one operation in
flight at a time) and session numbers are unique per run, handed out under a lock.

A history the writer refuses (chaos/history.py's HistoryError) is a bug of the workload, not of
the cluster: :meth:`RunContext.write` keeps the first one (:attr:`bug`), sets the stop signal so
every worker winds down, and re-raises; the workload reports it when the run ends.
"""

from __future__ import annotations

import threading
import time

from tidelog.chaos.history import HistoryError, HistoryWriter, Op

__all__ = ["RunContext"]


class RunContext:
    """One run's shared state; thread-safe."""

    def __init__(self, writer: HistoryWriter, *, started_ns: int | None = None) -> None:
        self.writer = writer
        self.started_ns = time.monotonic_ns() if started_ns is None else started_ns
        #: Set when the run must stop early (a workload bug, the runner's Ctrl-C).
        self.stop = threading.Event()
        self.bug: HistoryError | None = None
        self._lock = threading.Lock()
        self._next_process = 0
        self._next_session = 0

    def now_ns(self) -> int:
        """Nanoseconds since the run started (never negative)."""
        return max(0, time.monotonic_ns() - self.started_ns)

    def new_process(self) -> int:
        with self._lock:
            process = self._next_process
            self._next_process += 1
            return process

    def new_session(self) -> int:
        with self._lock:
            session = self._next_session
            self._next_session += 1
            return session

    def write(self, op: Op) -> None:
        """Append ``op`` to the history; a refused operation (a workload bug) is kept, stops
        the run, and is raised."""
        try:
            self.writer.write(op)
        except HistoryError as e:
            with self._lock:
                if self.bug is None:
                    self.bug = e
            self.stop.set()
            raise
