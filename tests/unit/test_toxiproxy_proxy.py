"""The Toxiproxy-compatible server's TCP side (chaos/toxiproxy/proxy.py driving
chaos/toxiproxy/pipe.py) on real sockets, with toxics set through toxiproxy-python and the
chaos/proxies.py helpers, as chaos runs set them.

The server runs on a background thread of this process (random port, seeded). Upstreams are
small threaded TCP servers on 127.0.0.1 (an echo, and a sink that answers with the byte count).
Checked: bytes echoed through a proxy, a half-close passed on; an unreachable upstream closing
the client; each toxic's observable effect on a connection, including one already open when the
toxic was added, updated or removed (latency and jitter lower bounds, bandwidth time, slicer
pieces, slow_close delay, limit_data cut at N bytes, timeout stalling then resuming or closing,
reset_peer's RST, toxicity 0 then 1); disable dropping connections and refusing new ones, enable
listening again on the same port; clean-proxy throughput against a direct connection (a loose
floor, printed with -s); a server stopped with connections held. The decisions themselves are
tested without sockets in test_toxiproxy_pipe.py; here timing checks assert lower bounds for
added delays and generous upper bounds, since the machine is shared.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from toxiproxy import Toxiproxy
from toxiproxy_testkit import (
    IO_TIMEOUT_S,
    Upstream,
    client_of,
    closed,
    connect,
    echo_handler,
    kept_api_consumer,
    recv_exactly,
    recv_to_end,
    roundtrip,
    running_server,
    sink_handler,
    upstream,
)

from tidelog.chaos import proxies
from tidelog.chaos.proxies import address
from tidelog.chaos.toxiproxy import ToxiproxyServer


@pytest.fixture(scope="module")
def server() -> Iterator[ToxiproxyServer]:
    with running_server(seed=7) as running:
        yield running


@pytest.fixture
def client(server: ToxiproxyServer) -> Iterator[Toxiproxy]:
    with client_of(server) as toxiproxy:
        yield toxiproxy


@pytest.fixture(scope="module")
def echo() -> Iterator[Upstream]:
    with upstream(echo_handler) as running:
        yield running


@pytest.fixture(scope="module")
def sink() -> Iterator[Upstream]:
    with upstream(sink_handler) as running:
        yield running


def test_echo_through_proxy_and_half_close(client: Toxiproxy, echo: Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    payload = bytes(range(256)) * 4096  # 1 MiB
    with connect(proxy) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        assert recv_exactly(sock, len(payload)) == payload
        sender.join(IO_TIMEOUT_S)
        # A half-close travels through: the echo server sees EOF, closes, we see EOF.
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b""


def test_unreachable_upstream_closes_the_client(client: Toxiproxy) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = unused.getsockname()[1]  # nothing listens once this closes
    proxy = client.create(upstream=f"127.0.0.1:{dead}", name="dead")
    with connect(proxy) as sock:
        assert closed(sock)


def test_latency_applies_to_open_connections(client: Toxiproxy, echo: Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    with connect(proxy) as sock:
        roundtrip(sock)
        proxies.latency(proxy, 200)
        assert 0.19 <= roundtrip(sock) < 2.0
        proxies.latency(proxy, 200, stream="upstream")
        assert 0.39 <= roundtrip(sock) < 3.0
        proxies.latency(proxy, 100, jitter_ms=50, stream="both")  # an update, in place
        assert 0.09 <= roundtrip(sock) < 2.0
        proxies.remove(proxy, ["latency_upstream", "latency_downstream"])
        assert roundtrip(sock) < 0.19


def test_toxicity_zero_then_one(client: Toxiproxy, echo: Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    with connect(proxy) as sock:
        proxies.latency(proxy, 300, toxicity=0.0)
        assert roundtrip(sock) < 0.29
        proxies.latency(proxy, 300, toxicity=1.0)  # redrawn for the open connection
        assert roundtrip(sock) >= 0.29


def test_bandwidth(client: Toxiproxy, echo: Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    proxies.bandwidth(proxy, 100)  # 100 KB/s: 50 KB take 0.5 s
    with connect(proxy) as sock:
        assert 0.4 <= roundtrip(sock, b"b" * 50_000) < IO_TIMEOUT_S


def test_slicer(client: Toxiproxy, echo: Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    proxies.slicer(proxy, 100, size_variation=20, delay_us=5000)  # ~20 pieces, 5 ms apart
    payload = bytes(range(200)) * 10
    with connect(proxy) as sock:
        start = time.monotonic()
        sock.sendall(payload)
        received, reads = bytearray(), 0
        while len(received) < len(payload):
            chunk = sock.recv(65536)
            assert chunk, "closed early"
            received += chunk
            reads += 1
        assert bytes(received) == payload
        assert reads >= 2
        assert time.monotonic() - start >= 0.08


def test_slow_close(client: Toxiproxy, echo: Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    proxies.slow_close(proxy, 300)
    with connect(proxy) as sock:
        roundtrip(sock)
        start = time.monotonic()
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b""
        assert 0.25 <= time.monotonic() - start < IO_TIMEOUT_S


def test_limit_data_closes_after_n_bytes(client: Toxiproxy, echo: Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    proxies.limit_data(proxy, 1000)
    with connect(proxy) as sock:
        sock.sendall(b"d" * 4000)
        assert recv_to_end(sock) == b"d" * 1000


def test_timeout_zero_holds_until_removed(client: Toxiproxy, echo: Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    with connect(proxy) as sock:
        roundtrip(sock)
        names = proxies.timeout(proxy)  # both streams, held forever
        sock.sendall(b"held")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(4)
        sock.settimeout(IO_TIMEOUT_S)
        proxies.remove(proxy, names)
        assert recv_exactly(sock, 4) == b"held"  # our server delivers what it held


def test_timeout_closes_after_its_timeout(client: Toxiproxy, echo: Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    with connect(proxy) as sock:
        start = time.monotonic()
        proxies.timeout(proxy, 300, stream="downstream")
        sock.sendall(b"ping")
        assert closed(sock)
        assert 0.25 <= time.monotonic() - start < IO_TIMEOUT_S


def test_reset_peer_sends_rst(client: Toxiproxy, echo: Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    proxies.reset_peer(proxy, 100)
    with connect(proxy) as sock:
        sock.sendall(b"ping")  # the echo reaches the toxic, which resets 100 ms later
        with pytest.raises(ConnectionResetError):
            sock.recv(4)


def test_cut_and_heal(client: Toxiproxy, echo: Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    with connect(proxy) as open_conn:
        roundtrip(open_conn)
        proxies.cut(proxy)
        assert closed(open_conn)  # dropped
    with pytest.raises(ConnectionRefusedError):  # and not listening
        socket.create_connection(address(proxy), timeout=IO_TIMEOUT_S)
    assert client.get_proxy("echo").enabled is False
    proxies.latency(proxy, 1000)
    proxies.heal(proxy)
    assert client.get_proxy("echo").listen == proxy.listen  # the same port again
    with connect(proxy) as sock:
        assert roundtrip(sock) < 0.9  # healed: its toxics are gone too
    with proxy.down(), pytest.raises(ConnectionRefusedError):
        socket.create_connection(address(proxy), timeout=IO_TIMEOUT_S)
    with connect(proxy) as sock:
        roundtrip(sock)


def _transfer_mib_s(port: int, total: int) -> float:
    block = b"t" * (1 << 20)
    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S * 2) as sock:
        start = time.perf_counter()
        for _ in range(total // len(block)):
            sock.sendall(block)
        sock.shutdown(socket.SHUT_WR)
        assert int.from_bytes(recv_exactly(sock, 8), "big") == total
        return total / (time.perf_counter() - start) / (1 << 20)


def test_clean_proxy_throughput(client: Toxiproxy, sink: Upstream) -> None:
    proxy = client.create(upstream=sink.address, name="sink")
    total = 64 << 20
    direct = max(_transfer_mib_s(sink.port, total) for _ in range(2))
    proxied = max(_transfer_mib_s(address(proxy)[1], total) for _ in range(2))
    print(f"\nloopback {total >> 20} MiB: direct {direct:.0f} MiB/s, "
          f"through the proxy (same process) {proxied:.0f} MiB/s")
    # A floor far below what it does (~1 GiB/s here), only to catch a proxy gone pathological.
    assert proxied >= 50


def test_stop_with_connections_held(echo: Upstream) -> None:
    with kept_api_consumer(), ToxiproxyServer() as server:
        Toxiproxy().update_api_consumer(server.host, server.port)
        proxy = proxies.create_link("held", echo.address)
        with connect(proxy) as sock:
            proxies.timeout(proxy)
            sock.sendall(b"stuck")
            start = time.monotonic()
            server.stop()
            assert time.monotonic() - start < IO_TIMEOUT_S
            assert closed(sock)
