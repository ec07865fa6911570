"""The link router: sends every connection a node opens to a Toxiproxy link of its own.

A Toxiproxy proxy sits in front of one address, but a broker reaches a leader (or a controller)
at the address it advertises, the same for every peer: a proxy in front of that address could
not cut one source only. So each connection first goes to this router, which learns who opens it
and to where, and splices it onto the link ``source>target`` (chaos/nemesis/network.py creates
one per ordered pair of nodes and calls :meth:`LinkRouter.route`). A toxic on a link is then a
fault on exactly that source→destination pair.

It learns the source in two ways:

* **gRPC (brokers)**: every broker is started with ``grpc_proxy=http://127.0.0.1:<port>`` (gRPC's
  own HTTP CONNECT support) pointing at a port of its own (:meth:`LinkRouter.listen`); each
  ``CONNECT 127.0.0.1:<target port>`` it asks for is routed by (that port's source, target port).
* **Raft (controllers)**: pysyncobj's peers cannot use a proxy, and the Raft handshake refuses a
  dialer that did not dial the listener's own voter address. So each controller's Raft listener
  binds another loopback address (``RAFT_BACKEND_HOST``, set by the launcher) at its voter port,
  and the router listens at the voter address itself (:meth:`LinkRouter.listen_raft`). The
  dialer's first frame (controller/raft/framing.py's HELLO: length, magic ``TLRAFT01``, ``H``,
  32-byte nonce, the dialer's and the dialled voter address, each length-prefixed) names the
  source; the router forwards that frame unchanged, so the handshake's MACs still hold.

A target with no route, a link that refuses (cut) and a malformed first frame are answered 502 /
closed, and the node sees a failed connect; ``unrouted`` keeps what had no route, ``tunnels``
counts what was spliced, by source. Everything runs on an asyncio loop of its own thread;
:meth:`LinkRouter.close` stops it and every tunnel.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import struct
import threading
from typing import Final

__all__ = ["HOST", "RAFT_BACKEND_HOST", "LinkRouter", "parse_raft_hello"]

HOST: Final = "127.0.0.1"
#: Where controllers' Raft listeners bind when their links are routed (their voter addresses,
#: on HOST, are the router's). Any 127/8 address is loopback on Linux.
RAFT_BACKEND_HOST: Final = "127.0.0.2"
HEAD_BYTES_MAX: Final = 8 * 1024
HEAD_TIMEOUT_S: Final = 5.0
UPSTREAM_CONNECT_TIMEOUT_S: Final = 5.0
START_TIMEOUT_S: Final = 10.0
CHUNK_BYTES: Final = 64 * 1024
# The Raft transport's handshake (controller/raft/framing.py, copied rather than imported: chaos
# must not import the controller, and this is a wire format, which does not change silently).
_RAFT_MAGIC: Final = b"TLRAFT01"
_RAFT_HELLO: Final = b"H"
_RAFT_NONCE_BYTES: Final = 32
_RAFT_FRAME_LENGTH: Final = struct.Struct(">I")
_RAFT_HANDSHAKE_FRAME_BYTES_MAX: Final = 1024


def parse_raft_hello(body: bytes) -> tuple[str, str] | None:
    """(dialer, dialled) voter addresses of a Raft HELLO frame body, or None if it is not one."""
    head = _RAFT_MAGIC + _RAFT_HELLO
    if not body.startswith(head):
        return None
    rest = body[len(head) + _RAFT_NONCE_BYTES:]
    addresses = []
    for _ in range(2):
        if not rest or 1 + rest[0] > len(rest):
            return None
        raw, rest = rest[1:1 + rest[0]], rest[1 + rest[0]:]
        try:
            addresses.append(raw.decode())
        except UnicodeDecodeError:
            return None
    if rest:
        return None
    return addresses[0], addresses[1]


class LinkRouter:
    """Routes nodes' connections onto per-link upstreams (see the module docstring)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="link-router",
                                        daemon=True)
        self._servers: list[asyncio.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._routes: dict[tuple[str, int], tuple[str, int]] = {}
        self._voters: dict[str, str] = {}  # Raft voter address -> node name
        self.unrouted: list[tuple[str, str]] = []
        self.tunnels: collections.Counter[str] = collections.Counter()  # spliced, by source
        self._thread.start()

    def listen(self, source: str) -> int:
        """A CONNECT proxy port for ``source``'s gRPC connections; returns it."""
        async def start() -> asyncio.Server:
            return await asyncio.start_server(
                lambda r, w: self._connect_tunnel(source, r, w), HOST, 0)
        server = asyncio.run_coroutine_threadsafe(start(), self._loop).result(START_TIMEOUT_S)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    def listen_raft(self, voters: dict[str, int]) -> None:
        """Listen at every controller's Raft voter address (``voters``: name -> Raft port on
        HOST); a connection is routed by the dialer its HELLO names to (dialer, that port)."""
        self._voters.update({f"{HOST}:{port}": name for name, port in voters.items()})

        async def start(port: int) -> asyncio.Server:
            return await asyncio.start_server(
                lambda r, w: self._raft_tunnel(port, r, w), HOST, port)
        for port in voters.values():
            future = asyncio.run_coroutine_threadsafe(start(port), self._loop)
            self._servers.append(future.result(START_TIMEOUT_S))

    def route(self, source: str, target_port: int, upstream: tuple[str, int]) -> None:
        """``source``'s connections to ``HOST:target_port`` go to ``upstream``."""
        self._routes[(source, target_port)] = upstream

    def close(self) -> None:
        async def stop() -> None:
            for server in self._servers:
                server.close()
            for writer in list(self._writers):
                writer.transport.abort()
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(START_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(START_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()

    async def _connect_tunnel(self, source: str, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            if len(head) > HEAD_BYTES_MAX:
                return
            words = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            target = words[1] if len(words) == 3 and words[0] == "CONNECT" else ""
            port = target.rpartition(":")[2]
            await self._splice(source, int(port) if port.isdigit() else -1, target, reader,
                               writer, reply=True)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                TimeoutError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _raft_tunnel(self, port: int, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            length_bytes = await asyncio.wait_for(
                reader.readexactly(_RAFT_FRAME_LENGTH.size), HEAD_TIMEOUT_S)
            (length,) = _RAFT_FRAME_LENGTH.unpack(length_bytes)
            if length > _RAFT_HANDSHAKE_FRAME_BYTES_MAX:
                self.unrouted.append(("?", f"raft {HOST}:{port}: a first frame too long"))
                return
            body = await asyncio.wait_for(reader.readexactly(length), HEAD_TIMEOUT_S)
            hello = parse_raft_hello(body)
            source = self._voters.get(hello[0], "?") if hello is not None else "?"
            await self._splice(source, port, f"raft {HOST}:{port}", reader, writer,
                               reply=False, first=length_bytes + body)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _splice(self, source: str, port: int, target: str, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, *, reply: bool, first: bytes = b"") -> None:
        """Connect ``source``'s connection to its route for ``port`` and pipe both ways until
        either side ends (gRPC and Raft have no use for half-open connections)."""
        upstream = self._routes.get((source, port))
        if upstream is None:
            self.unrouted.append((source, target))
            if reply:
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            return
        try:
            upstream_reader, upstream_writer = await asyncio.wait_for(
                asyncio.open_connection(*upstream), UPSTREAM_CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError):
            if reply:
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            return
        self._writers.add(upstream_writer)
        try:
            self.tunnels[source] += 1
            if reply:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            upstream_writer.write(first)
            pipes = {asyncio.ensure_future(_pipe(reader, upstream_writer)),
                     asyncio.ensure_future(_pipe(upstream_reader, writer))}
            try:
                await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in pipes:
                    task.cancel()
        finally:
            self._writers.discard(upstream_writer)
            upstream_writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await reader.read(CHUNK_BYTES):
            writer.write(data)
            await writer.drain()
