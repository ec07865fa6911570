"""One direction of a proxied connection, sans I/O: what the toxics in force make of its bytes.

A `Pipe` is fed what its shell (chaos/toxiproxy/proxy.py) sees happen: chunks read from the
source, each with the time it was read (`push`), the end of the source (`push_eof`), the
destination's write buffer filling and draining (`set_dst_paused`), and the proxy's toxic list
whenever it changes (`set_toxics`). `step(now)` then says what to do next, as a value:

- `Write(data)`: write these bytes to the destination now, and step again;
- `Wait(until)`: nothing can be done before `until` (None: before the next event), then step;
- `PassEof()`: half-close the destination; this direction is done;
- `Close(reset)`: end the whole connection, gracefully or with a TCP RST;
- `Stop()`: nothing for a driver to do (no toxic in force and nothing queued, or the direction
  is done). The shell then writes what it reads straight through, its fast path, until toxics
  are set again.

The pipe never reads a clock, sleeps or touches a socket: `now` is passed in (seconds on the
caller's monotonic clock, as asyncio's loop.time(), since bandwidth pacing needs fractions of a
millisecond), and every random draw (toxicity, jitter, slice sizes) comes from the `rng` it was
given, so its decisions are a function of its inputs and tests drive it with made-up times.

How the toxics of one stream combine (by kind, not in chain order; docs/decisions.md): timeout
holds everything; the first chunk to reach reset_peer starts its countdown and is lost;
latencies (each latency ± jitter) add up, drawn per chunk and counted from when it was read, so
a stream is delayed, not slowed; the first slicer slices; the lowest bandwidth wins; each
limit_data counts the same bytes; the longest slow_close delays the end of the stream.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tidelog.chaos.toxiproxy.limits import PIPE_QUEUE_BYTES_MAX
from tidelog.chaos.toxiproxy.toxics import Toxic

__all__ = ["Close", "PassEof", "Pipe", "Step", "Stop", "Wait", "Write"]

#: Like Toxiproxy, a slow bandwidth toxic sends a large chunk in 100 ms slices.
BANDWIDTH_SLICE_S: Final = 0.1


@dataclass(frozen=True, slots=True)
class Write:
    """Write `data` to the destination now, then step again."""

    data: bytes | memoryview


@dataclass(frozen=True, slots=True)
class Wait:
    """Step again at `until`, or sooner on an event; None: only on an event (data, the end of
    the source, the toxics changed, the destination drained)."""

    until: float | None = None


@dataclass(frozen=True, slots=True)
class PassEof:
    """Half-close the destination: the source has ended and everything before it is written.
    The pipe is done; its peer direction may go on (half-closes are passed on)."""


@dataclass(frozen=True, slots=True)
class Close:
    """End the whole connection: gracefully (what was written still reaches the peer, then
    FIN), or with `reset` a TCP RST on both sockets (Toxiproxy's reset_peer)."""

    reset: bool = False


@dataclass(frozen=True, slots=True)
class Stop:
    """Nothing for a driver to do: no toxic in force and nothing queued, or the pipe is done."""


Step = Write | Wait | PassEof | Close | Stop


@dataclass
class _Chunk:
    """Bytes read from the source, with when they were read (latency counts from then)."""

    data: memoryview
    read_at: float
    delay_s: float = 0.0
    delay_version: int = -1  # the pipe version the delay was drawn for


@dataclass
class _Piece:
    """The next write, planned once so that stepping again early does not redraw it."""

    size: int
    ready_at: float
    version: int


@dataclass
class _ToxicRun:
    """A toxic applied to this direction: its toxicity draw and its state."""

    toxic: Toxic
    version: int
    active: bool
    bytes_sent: int = 0  # limit_data; kept across updates, as Toxiproxy keeps stub state
    reset_at: float | None = None  # reset_peer: set when the first chunk reaches it
    close_at: float | None = None  # timeout > 0: when it closes the connection

    @property
    def kind(self) -> str:
        return self.toxic.type

    def attribute(self, name: str) -> int:
        return self.toxic.attributes[name]


class Pipe:
    """The state of one direction and the decisions over it; see the module's docstring."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.queue: deque[_Chunk] = deque()
        self.queued_bytes = 0
        self.eof = False  # the source has ended; pass it on once the queue is written
        self.eof_at: float | None = None
        self.done = False  # the end was passed on
        self.dst_paused = False  # the destination's write buffer is above its high-water mark
        self.runs: list[_ToxicRun] = []
        self.version = 0  # bumped whenever `runs` is set
        self.piece: _Piece | None = None
        self.bandwidth_next_at = 0.0
        self.closing = False  # a limit_data was reached: close after the write that reached it

    # -- events --------------------------------------------------------------------------------

    def push(self, data: bytes, now: float) -> None:
        """Bytes read from the source at `now`."""
        assert data and not self.eof, "no data after the end of the source"
        self.queue.append(_Chunk(memoryview(data), now))
        self.queued_bytes += len(data)

    def push_eof(self) -> None:
        self.eof = True

    def set_dst_paused(self, paused: bool) -> None:
        self.dst_paused = paused

    def set_toxics(self, toxics: Sequence[Toxic], now: float) -> None:
        """Applies the proxy's toxics for this stream. A toxic new to this pipe, or updated
        since, gets a fresh toxicity draw; one unchanged keeps its draw and state."""
        old = {run.toxic.uid: run for run in self.runs}
        runs: list[_ToxicRun] = []
        for toxic in toxics:
            run = old.pop(toxic.uid, None)
            if run is None or run.version != toxic.version:
                fresh = _ToxicRun(toxic, toxic.version, self.rng.random() < toxic.toxicity)
                if run is not None:
                    fresh.bytes_sent = run.bytes_sent
                timeout_ms = toxic.attributes.get("timeout", 0)
                if fresh.active and toxic.type == "timeout" and timeout_ms > 0:
                    # Toxiproxy's timer starts when the toxic is applied (docs/decisions.md).
                    fresh.close_at = now + timeout_ms / 1000
                run = fresh
            runs.append(run)
        self.runs = runs
        self.version += 1
        self.piece = None

    def discard(self) -> None:
        """The connection is closing: drop what is queued."""
        self.queue.clear()
        self.queued_bytes = 0

    # -- what the shell asks ---------------------------------------------------------------------

    @property
    def has_active_toxics(self) -> bool:
        return any(run.active for run in self.runs)

    @property
    def reading_wanted(self) -> bool:
        """Whether the source should be read from now (else TCP pushes back on it)."""
        return not self.eof and not self.dst_paused and self.queued_bytes < PIPE_QUEUE_BYTES_MAX

    # -- the decision ----------------------------------------------------------------------------

    def step(self, now: float) -> Step:
        """What to do at `now`; see the module's docstring for each answer."""
        if self.closing:
            return Close()
        active = [run for run in self.runs if run.active]
        # timeout holds everything, the end of the stream included, until it is removed, or
        # closes the connection once its timeout (when over 0) has passed.
        timeouts = [run for run in active if run.kind == "timeout"]
        if timeouts:
            close_at = min((r.close_at for r in timeouts if r.close_at is not None), default=None)
            if close_at is not None and now >= close_at:
                return Close()
            return Wait(close_at)
        if self.done:
            return Stop()
        if not self.queue:
            if self.eof:
                return self._step_eof(now, active)
            return Wait() if active else Stop()
        if self.dst_paused:
            return Wait()
        chunk = self.queue[0]
        for run in active:
            if run.kind == "reset_peer":
                # As Toxiproxy: the first chunk to reach it starts the countdown, and is lost.
                if run.reset_at is None:
                    run.reset_at = now + run.attribute("timeout") / 1000
                if now < run.reset_at:
                    return Wait(run.reset_at)
                return Close(reset=True)
        if chunk.delay_version != self.version:
            chunk.delay_s = self._draw_delay_s(active)
            chunk.delay_version = self.version
        if now < chunk.read_at + chunk.delay_s:
            return Wait(chunk.read_at + chunk.delay_s)
        if self.piece is None or self.piece.version != self.version:
            self.piece = self._plan_piece(now, len(chunk.data), active)
        if now < self.piece.ready_at:
            return Wait(self.piece.ready_at)
        return self._write_piece(chunk, self.piece, active)

    def _step_eof(self, now: float, active: list[_ToxicRun]) -> Step:
        if self.eof_at is None:
            self.eof_at = now
        delay_ms = max((r.attribute("delay") for r in active if r.kind == "slow_close"),
                       default=0)
        if now < self.eof_at + delay_ms / 1000:
            return Wait(self.eof_at + delay_ms / 1000)
        self.done = True
        return PassEof()

    def _draw_delay_s(self, active: list[_ToxicRun]) -> float:
        delay_ms = 0
        for run in active:
            if run.kind == "latency":
                jitter = run.attribute("jitter")
                delay_ms += run.attribute("latency")
                if jitter > 0:  # Toxiproxy: latency + [-jitter, jitter)
                    delay_ms += self.rng.randrange(-jitter, jitter)
        return max(delay_ms, 0) / 1000

    def _plan_piece(self, now: float, available: int, active: list[_ToxicRun]) -> _Piece:
        size = available
        ready_at = now
        for run in active:
            if run.kind == "slicer":
                variation = run.attribute("size_variation")
                drawn = run.attribute("average_size") + self.rng.randint(-variation, variation)
                size = min(size, max(1, drawn))
                ready_at = max(ready_at, now + run.attribute("delay") / 1_000_000)
        rates = [r.attribute("rate") for r in active
                 if r.kind == "bandwidth" and r.attribute("rate") > 0]
        if rates:
            bytes_per_s = min(rates) * 1000
            size = min(size, max(1, int(bytes_per_s * BANDWIDTH_SLICE_S)))
            # Sleep before sending, as Toxiproxy; idle time earns no burst credit.
            ready_at = max(ready_at, max(self.bandwidth_next_at, now) + size / bytes_per_s)
        return _Piece(size, ready_at, self.version)

    def _write_piece(self, chunk: _Chunk, piece: _Piece, active: list[_ToxicRun]) -> Step:
        limits = [r for r in active if r.kind == "limit_data"]
        size = piece.size
        for run in limits:
            size = min(size, run.attribute("bytes") - run.bytes_sent)
        self.piece = None
        written = chunk.data[:max(size, 0)]
        if size > 0:
            chunk.data = chunk.data[size:]
            self.queued_bytes -= size
            if not chunk.data:
                self.queue.popleft()
            if any(r.kind == "bandwidth" for r in active):
                self.bandwidth_next_at = piece.ready_at
            for run in limits:
                run.bytes_sent += size
        if any(run.bytes_sent >= run.attribute("bytes") for run in limits):
            # Graceful: what was written, this piece included, still reaches the peer.
            self.closing = True
            if size <= 0:
                return Close()
        return Write(written)
