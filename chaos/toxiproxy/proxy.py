"""The TCP side of the Toxiproxy-compatible server: a proxy listens, each connection it accepts
dials the upstream, and two pipes carry the bytes, one per direction ("upstream" is client to
server, "downstream" server to client).

The decisions over the bytes are chaos/toxiproxy/pipe.py's (sans I/O); this module is its
shell: asyncio protocols feed each `Pipe` what the sockets do, and a `_Direction` carries out
what the pipe answers. A direction with no toxic in force writes what it reads at once, with
only pause/resume flow control (the fast path, so that a clean proxy is not a test's
bottleneck). While toxics are in force one task per direction steps its pipe, and the toxic
list is re-applied to every open connection whenever it changes, so adding, updating or
removing a toxic acts on open connections too. Everything here runs on one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import struct
from typing import Any

from tidelog.chaos.toxiproxy.limits import (
    CONNECTIONS_PER_PROXY_MAX,
    PIPE_WRITES_PER_TURN_MAX,
    UPSTREAM_CONNECT_TIMEOUT_S,
)
from tidelog.chaos.toxiproxy.model import ApiError, format_address, parse_address
from tidelog.chaos.toxiproxy.pipe import Close, PassEof, Pipe, Stop, Wait, Write
from tidelog.chaos.toxiproxy.toxics import STREAMS, Toxic

__all__ = ["Proxy"]

log = logging.getLogger(__name__)


class _Direction:
    """One direction of a connection: a Pipe from `src` to `dst`, and the task that steps it
    while toxics are in force."""

    def __init__(self, conn: _Connection, stream: str, src: asyncio.Transport,
                 dst: asyncio.Transport, *, reading: bool) -> None:
        self.conn = conn
        self.stream = stream
        self.src = src
        self.dst = dst
        self.pipe = Pipe(conn.rng)
        self.reading = reading  # whether src is currently read from
        self.task: asyncio.Task[None] | None = None
        self.waiter: asyncio.Future[None] | None = None

    # -- events from the transports ------------------------------------------------------------

    def on_data(self, data: bytes) -> None:
        if self.conn.closed:
            return
        if self.task is None:  # no toxic in force and nothing queued: the fast path
            self.dst.write(data)
            return
        was_empty = not self.pipe.queue
        self.pipe.push(data, self.conn.loop.time())
        self.update_reading()
        if was_empty:
            self.wake()

    def on_eof(self) -> None:
        self.pipe.push_eof()
        self.update_reading()
        if self.task is not None:
            self.wake()
        elif self._advance() is not None:  # the fast path passes the end on at once
            self._start()

    def set_dst_paused(self, paused: bool) -> None:
        self.pipe.set_dst_paused(paused)
        self.update_reading()
        if not paused:
            self.wake()

    def update_reading(self) -> None:
        want = not self.conn.closed and self.pipe.reading_wanted
        if want != self.reading:
            self.reading = want
            if want:
                self.src.resume_reading()
            else:
                self.src.pause_reading()

    def sync_toxics(self, toxics: list[Toxic]) -> None:
        """Applies the proxy's toxic list for this stream to this connection."""
        self.pipe.set_toxics(toxics, self.conn.loop.time())
        if self.task is None and self.pipe.has_active_toxics:
            self._start()
        self.wake()

    def shutdown(self) -> None:
        self.pipe.discard()
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()
        self.wake()

    # -- carrying out the pipe's steps -----------------------------------------------------------

    def _start(self) -> None:
        self.task = self.conn.loop.create_task(self._run())

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _advance(self) -> Wait | None:
        """Steps the pipe and does what it says until it must wait (the Wait) or has nothing
        left to do (None). Synchronous, so the toxic list cannot change under it."""
        loop = self.conn.loop
        for _ in range(PIPE_WRITES_PER_TURN_MAX):
            if self.conn.closed:
                return None
            step = self.pipe.step(loop.time())
            if isinstance(step, Write):
                self.dst.write(step.data)
                self.update_reading()
            elif isinstance(step, Wait):
                return step
            elif isinstance(step, PassEof):
                self._pass_eof()
                return None
            elif isinstance(step, Close):
                self.conn.close(reset=step.reset)
                return None
            else:
                assert isinstance(step, Stop)
                return None
        # Many writes in a row (a slicer with delay 0): let the loop's other work run first.
        return Wait(loop.time())

    def _pass_eof(self) -> None:
        if self.dst.can_write_eof() and not self.dst.is_closing():
            try:
                self.dst.write_eof()
            except OSError:
                # dst is gone already (ENOTCONN: its peer reset it while it was not read
                # from, so asyncio did not notice): no half-close to pass on, the connection
                # ends. Not an error of the proxy: a peer's teardown.
                self.conn.close(drop=True)
                return
        self.conn.on_pipe_done()

    async def _run(self) -> None:
        try:
            while (wait := self._advance()) is not None:
                await self._wait(wait.until)
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug here must not leave a connection hanging half-alive
            log.exception("toxic pipe %s of proxy %s failed", self.stream, self.conn.proxy.name)
            self.conn.close()
        finally:
            # No await between the last step and here: on_data sees task None only when the
            # queue is empty and no toxic is in force, so the fast path keeps the byte order.
            self.task = None

    async def _wait(self, deadline: float | None) -> None:
        loop = self.conn.loop
        waiter: asyncio.Future[None] = loop.create_future()
        self.waiter = waiter
        timer = None if deadline is None else loop.call_at(deadline, _resolve, waiter)
        try:
            await waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Connection:
    """A client connection, its upstream connection and the two directions between them."""

    def __init__(self, proxy: Proxy, client: asyncio.Transport) -> None:
        self.proxy = proxy
        self.loop = proxy.loop
        self.rng = proxy.rng
        self.client = client
        self.upstream: asyncio.Transport | None = None
        self.directions: dict[str, _Direction] = {}
        self.closed = False
        self.connect_task: asyncio.Task[None] | None = None

    async def connect_upstream(self, host: str, port: int) -> None:
        try:
            await asyncio.wait_for(
                self.loop.create_connection(lambda: _UpstreamProtocol(self), host, port),
                UPSTREAM_CONNECT_TIMEOUT_S)
        except (TimeoutError, OSError) as error:
            # As Toxiproxy: the client is closed when the upstream cannot be reached.
            log.info("proxy %s: upstream %s:%s unreachable: %s", self.proxy.name, host, port, error)
            self.close()

    def on_upstream_made(self, upstream: asyncio.Transport) -> None:
        if self.closed:
            upstream.abort()
            return
        self.upstream = upstream
        # The client was paused on accept, until there is somewhere to send its bytes.
        self.directions = {
            "upstream": _Direction(self, "upstream", self.client, upstream, reading=False),
            "downstream": _Direction(self, "downstream", upstream, self.client, reading=True),
        }
        self.sync_toxics()
        for direction in self.directions.values():
            direction.update_reading()

    def sync_toxics(self) -> None:
        for stream, direction in self.directions.items():
            direction.sync_toxics([t for t in self.proxy.toxics if t.stream == stream])

    def on_pipe_done(self) -> None:
        # Half-closes are passed on; the connection ends when both directions have ended.
        if all(direction.pipe.done for direction in self.directions.values()):
            self.close()

    def close(self, *, reset: bool = False, drop: bool = False) -> None:
        """Graceful by default (buffered bytes still go out, then FIN); `drop` discards them;
        `reset` makes both peers see a TCP RST (SO_LINGER 0, as Toxiproxy's reset_peer)."""
        if self.closed:
            return
        self.closed = True
        self.proxy.connections.discard(self)
        if self.connect_task is not None and self.connect_task is not asyncio.current_task():
            self.connect_task.cancel()
        for direction in self.directions.values():
            direction.shutdown()
        for transport in (self.client, self.upstream):
            if transport is None:
                continue
            if reset:
                sock = transport.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                        struct.pack("ii", 1, 0))
            if reset or drop:
                transport.abort()
            else:
                transport.close()


class _ClientProtocol(asyncio.Protocol):
    def __init__(self, proxy: Proxy, generation: int) -> None:
        self.proxy = proxy
        self.generation = generation
        self.conn: _Connection | None = None

    def _direction(self, stream: str) -> _Direction | None:
        # None before the upstream is connected (the client is not read from until then).
        return None if self.conn is None else self.conn.directions.get(stream)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()
        self.conn = self.proxy.on_accept(transport, self.generation)

    def data_received(self, data: bytes) -> None:
        if self.conn is not None and not self.conn.closed:
            self.conn.directions["upstream"].on_data(data)

    def eof_received(self) -> bool:
        if self.conn is not None and not self.conn.closed:
            self.conn.directions["upstream"].on_eof()
        return True  # keep the socket open for the other direction

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.conn.close()

    def pause_writing(self) -> None:
        if (direction := self._direction("downstream")) is not None:
            direction.set_dst_paused(True)

    def resume_writing(self) -> None:
        if (direction := self._direction("downstream")) is not None:
            direction.set_dst_paused(False)


class _UpstreamProtocol(asyncio.Protocol):
    def __init__(self, conn: _Connection) -> None:
        self.conn = conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.conn.on_upstream_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.conn.closed:
            self.conn.directions["downstream"].on_data(data)

    def eof_received(self) -> bool:
        if not self.conn.closed:
            self.conn.directions["downstream"].on_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.close()

    def pause_writing(self) -> None:
        if not self.conn.closed:
            self.conn.directions["upstream"].set_dst_paused(True)

    def resume_writing(self) -> None:
        if not self.conn.closed:
            self.conn.directions["upstream"].set_dst_paused(False)


class Proxy:
    """A named proxy: listen address, upstream, toxics and open connections. Made and used on
    the event loop that serves it; `rng` draws every connection's toxicity, jitter and slices."""

    def __init__(self, name: str, listen: str, upstream: str, *, rng: random.Random) -> None:
        self.loop = asyncio.get_running_loop()
        self.rng = rng
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.toxics: list[Toxic] = []
        self.connections: set[_Connection] = set()
        self.server: asyncio.Server | None = None
        self.generation = 0  # connections accepted by an older listener are refused

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": [t.to_json() for t in self.sorted_toxics()],
        }

    def sorted_toxics(self) -> list[Toxic]:
        return [t for stream in STREAMS for t in self.toxics if t.stream == stream]

    async def start(self) -> None:
        if self.enabled:
            return
        host, port = parse_address(self.listen, "listen", listen=True)
        self.generation += 1
        generation = self.generation
        try:
            server = await self.loop.create_server(
                lambda: _ClientProtocol(self, generation), host or None, port,
                reuse_address=True)
        except OSError as error:
            raise ApiError(500, f"listen tcp {self.listen}: {error.strerror or error}") from None
        bound = server.sockets[0].getsockname()
        # Toxiproxy answers with the address it really bound, so port 0 becomes a real port
        # and a later enable listens on that same port.
        self.listen = format_address(host or bound[0], bound[1])
        self.server = server
        self.enabled = True
        log.info("proxy %s listening on %s, upstream %s", self.name, self.listen, self.upstream)

    def stop(self) -> None:
        """Stops listening and drops every open connection (Toxiproxy's disable)."""
        if self.server is not None:
            self.server.close()
            self.server = None
        self.enabled = False
        self.generation += 1
        for conn in list(self.connections):
            conn.close(drop=True)

    def on_accept(self, client: asyncio.Transport, generation: int) -> _Connection | None:
        if generation != self.generation or len(self.connections) >= CONNECTIONS_PER_PROXY_MAX:
            client.abort()
            return None
        conn = _Connection(self, client)
        self.connections.add(conn)
        host, port = parse_address(self.upstream, "upstream", listen=False)
        conn.connect_task = self.loop.create_task(conn.connect_upstream(host, port))
        return conn

    def toxics_changed(self) -> None:
        for conn in list(self.connections):
            conn.sync_toxics()
