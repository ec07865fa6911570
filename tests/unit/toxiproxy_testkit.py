"""What the Toxiproxy-compatible server's tests share: the server on a thread of the test
process with toxiproxy-python pointed at it, upstreams (small threaded TCP servers on
127.0.0.1: an echo, and a sink that answers with the byte count), and socket helpers whose
every wait is bounded by IO_TIMEOUT_S.

toxiproxy-python keeps the server's address in class-level globals, so each context manager
here puts back what it found. The test modules wrap these in their own fixtures (fixtures
imported from another module would shadow their own parameters).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer

from tidelog.chaos.proxies import address
from tidelog.chaos.toxiproxy import ToxiproxyServer

IO_TIMEOUT_S = 5.0


@contextlib.contextmanager
def kept_api_consumer() -> Iterator[None]:
    """Puts toxiproxy-python's process-wide server address back on the way out."""
    saved = (APIConsumer.host, APIConsumer.port)
    try:
        yield
    finally:
        APIConsumer.host, APIConsumer.port = saved


@contextlib.contextmanager
def running_server(*, seed: int | None = 7) -> Iterator[ToxiproxyServer]:
    with kept_api_consumer(), ToxiproxyServer(seed=seed) as server:
        yield server


@contextlib.contextmanager
def client_of(server: ToxiproxyServer) -> Iterator[Toxiproxy]:
    """A client pointed at `server`; every proxy is destroyed on the way out."""
    toxiproxy = Toxiproxy()
    toxiproxy.update_api_consumer(server.host, server.port)  # another test may have moved it
    try:
        yield toxiproxy
    finally:
        toxiproxy.update_api_consumer(server.host, server.port)
        toxiproxy.destroy_all()


class Upstream:
    """A threaded TCP server on 127.0.0.1 running `handler` on each connection."""

    def __init__(self, handler: Callable[[socket.socket], None]) -> None:
        self.handler = handler
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)  # so the accept loop notices stop()
        self.port = int(self.sock.getsockname()[1])
        self.conns: list[socket.socket] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(IO_TIMEOUT_S * 2)
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            self.handler(conn)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(IO_TIMEOUT_S)
        self.sock.close()
        for conn in self.conns:
            conn.close()


def echo_handler(conn: socket.socket) -> None:
    while data := conn.recv(65536):
        conn.sendall(data)


def sink_handler(conn: socket.socket) -> None:
    buffer = bytearray(1 << 20)
    total = 0
    while count := conn.recv_into(buffer):
        total += count
    conn.sendall(total.to_bytes(8, "big"))


@contextlib.contextmanager
def upstream(handler: Callable[[socket.socket], None]) -> Iterator[Upstream]:
    running = Upstream(handler)
    try:
        yield running
    finally:
        running.stop()


def connect(proxy: object) -> socket.socket:
    return socket.create_connection(address(proxy), timeout=IO_TIMEOUT_S)


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:  # bounded by the socket timeout on each recv
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def roundtrip(sock: socket.socket, payload: bytes = b"ping") -> float:
    start = time.monotonic()
    sock.sendall(payload)
    assert recv_exactly(sock, len(payload)) == payload
    return time.monotonic() - start


def recv_to_end(sock: socket.socket) -> bytes:
    data = bytearray()
    while chunk := sock.recv(65536):
        data += chunk
    return bytes(data)


def closed(sock: socket.socket) -> bool:
    """Whether the peer closed or reset `sock` (waits up to the socket timeout)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
