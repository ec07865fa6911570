"""The Toxiproxy-compatible server's TCP side (chaos/toxiproxy/proxy.py) when a peer tears a
connection down hard: a half-close that reaches an upstream already reset ends the connection
quietly.

The case, as gRPC teardowns made it at the end of chaos runs: the upstream answers, half-closes
(FIN: the proxy stops reading from it), then resets the connection (RST, SO_LINGER 0), which the
proxy does not notice since it no longer reads that socket. The client then half-closes too, and
the proxy passes the FIN on: ``write_eof`` on the reset socket raises OSError ENOTCONN. Before the
fix, with a toxic in force (so the pipe's task passes the end on), that escaped as a "toxic pipe
... failed" ERROR with a traceback. Now the connection just ends: no error is logged and the
client sees the close.

The server runs on a thread of this process (seeded); the upstream is a real TCP server on
127.0.0.1; the toxic is set through toxiproxy-python, as users do. Every wait is bounded by the
sockets' timeouts.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from toxiproxy import Toxiproxy
from toxiproxy_testkit import IO_TIMEOUT_S, client_of, running_server

from tidelog.chaos import proxies

#: Long enough for the proxy's event loop to handle the upstream's FIN before its RST.
SETTLE_S = 0.3


@pytest.fixture
def client() -> Iterator[Toxiproxy]:
    with running_server(seed=11) as server, client_of(server) as toxiproxy:
        yield toxiproxy


def _answer_half_close_then_reset(listener: socket.socket, done: threading.Event) -> None:
    conn, _ = listener.accept()
    with conn:
        conn.recv(16)
        conn.sendall(b"bye")
        conn.shutdown(socket.SHUT_WR)          # FIN: the proxy stops reading this socket
        time.sleep(SETTLE_S)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    done.set()                                 # closed with linger 0: RST


def test_a_half_close_to_an_upstream_already_reset_ends_the_connection_quietly(
        client: Toxiproxy, caplog: pytest.LogCaptureFixture) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(IO_TIMEOUT_S)
    reset = threading.Event()
    upstream = threading.Thread(target=_answer_half_close_then_reset, args=(listener, reset),
                                daemon=True)
    upstream.start()
    proxy = client.create(upstream=f"127.0.0.1:{listener.getsockname()[1]}", name="teardown")
    # A toxic in force on the client -> upstream stream: its pipe task passes the FIN on.
    proxies.latency(proxy, 1, stream="upstream")
    caplog.set_level(logging.INFO, logger="tidelog.chaos.toxiproxy")
    try:
        with socket.create_connection(proxies.address(proxy), timeout=IO_TIMEOUT_S) as sock:
            sock.sendall(b"hello")
            data = b""
            while chunk := sock.recv(16):       # the answer, then the upstream's FIN
                data += chunk
            assert data == b"bye"
            assert reset.wait(IO_TIMEOUT_S)
            time.sleep(SETTLE_S)                # the RST has reached the proxy's socket
            sock.shutdown(socket.SHUT_WR)       # the FIN the proxy cannot pass on
            sock.settimeout(IO_TIMEOUT_S)
            with contextlib.suppress(ConnectionResetError):  # closed, or reset: both end it
                assert sock.recv(1) == b""
        time.sleep(SETTLE_S)                    # the proxy's side of the teardown is done
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == [], [r.getMessage() for r in errors]
    finally:
        upstream.join(IO_TIMEOUT_S)
        listener.close()

