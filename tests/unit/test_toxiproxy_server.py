"""The Toxiproxy-compatible server (chaos/toxiproxy/) and the chaos/proxies.py helpers.

The server runs in this process on a background thread (random port, seeded) and is driven only
through the real toxiproxy-python client, as chaos tests will drive it; its low-level
APIConsumer reaches the two routes the client has no call for (toxic update, populate), and raw
sockets send the malformed HTTP. Upstreams are small threaded TCP servers on 127.0.0.1 (echo,
and a sink that answers with the byte count). The tests check: proxies created, listed, shown,
updated and destroyed, with the bound port reported for "127.0.0.1:0"; bytes echoed through a
proxy, half-close passed on; each toxic's observable effect on a connection, including one that
was already open when the toxic was added, updated or removed (latency and jitter lower bounds,
bandwidth time, slicer pieces, slow_close delay, limit_data cut at N bytes, timeout stalling
then resuming or closing, reset_peer's RST, toxicity 0 then 1); disable dropping connections
and refusing new ones, enable listening again on the same port; reset(); every error the client
maps (ProxyExists, InvalidToxic, NotFound) plus malformed HTTP and JSON answered with 4xx while
the server keeps serving; clean-proxy throughput against a direct connection (a loose floor,
printed with -s); the helpers with the server as a child process. Timing checks assert lower
bounds for added delays and generous upper bounds, since the machine is shared.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import requests
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from chaos import proxies
from chaos.proxies import address
from chaos.toxiproxy import ToxiproxyServer

IO_TIMEOUT_S = 5.0


class _Upstream:
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


def _echo(conn: socket.socket) -> None:
    while data := conn.recv(65536):
        conn.sendall(data)


def _sink(conn: socket.socket) -> None:
    buffer = bytearray(1 << 20)
    total = 0
    while count := conn.recv_into(buffer):
        total += count
    conn.sendall(total.to_bytes(8, "big"))


@pytest.fixture(scope="module")
def server() -> Iterator[ToxiproxyServer]:
    saved = (APIConsumer.host, APIConsumer.port)
    with ToxiproxyServer(seed=7) as running:
        yield running
    APIConsumer.host, APIConsumer.port = saved


@pytest.fixture
def client(server: ToxiproxyServer) -> Iterator[Toxiproxy]:
    toxiproxy = Toxiproxy()
    toxiproxy.update_api_consumer(server.host, server.port)  # another test may have moved it
    yield toxiproxy
    toxiproxy.update_api_consumer(server.host, server.port)
    toxiproxy.destroy_all()


@pytest.fixture(scope="module")
def echo() -> Iterator[_Upstream]:
    upstream = _Upstream(_echo)
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def sink() -> Iterator[_Upstream]:
    upstream = _Upstream(_sink)
    yield upstream
    upstream.stop()


def _connect(proxy: object) -> socket.socket:
    return socket.create_connection(address(proxy), timeout=IO_TIMEOUT_S)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:  # bounded by the socket timeout on each recv
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def _roundtrip(sock: socket.socket, payload: bytes = b"ping") -> float:
    start = time.monotonic()
    sock.sendall(payload)
    assert _recv_exactly(sock, len(payload)) == payload
    return time.monotonic() - start


def _recv_to_end(sock: socket.socket) -> bytes:
    data = bytearray()
    while chunk := sock.recv(65536):
        data += chunk
    return bytes(data)


def _closed(sock: socket.socket) -> bool:
    """Whether the peer closed or reset `sock` (waits up to the socket timeout)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


# -- proxies


def test_version_and_running(client: Toxiproxy) -> None:
    assert client.running()
    assert b"version" in client.version()


def test_create_list_show_destroy(client: Toxiproxy, echo: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    host, port = address(proxy)
    assert host == "127.0.0.1" and port > 0  # the bound port, not 0
    listed = client.proxies()
    assert list(listed) == ["echo"]
    assert (listed["echo"].listen, listed["echo"].upstream) == (proxy.listen, echo.address)
    assert listed["echo"].enabled is True
    shown = APIConsumer.get("/proxies/echo").json()
    assert shown == {"name": "echo", "listen": proxy.listen, "upstream": echo.address,
                     "enabled": True, "toxics": []}
    assert proxy.destroy()
    assert client.get_proxy("echo") is None
    with pytest.raises(NotFound):
        proxy.destroy()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, port), timeout=IO_TIMEOUT_S)


def test_echo_through_proxy_and_half_close(client: Toxiproxy, echo: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    payload = bytes(range(256)) * 4096  # 1 MiB
    with _connect(proxy) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        assert _recv_exactly(sock, len(payload)) == payload
        sender.join(IO_TIMEOUT_S)
        # A half-close travels through: the echo server sees EOF, closes, we see EOF.
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b""


def test_duplicate_proxy_is_proxy_exists(client: Toxiproxy, echo: _Upstream) -> None:
    client.create(upstream=echo.address, name="dup")
    with pytest.raises(ProxyExists):  # the client checks GET /proxies first
        client.create(upstream=echo.address, name="dup")
    with pytest.raises(ProxyExists):  # and the server answers 409 itself
        APIConsumer.post("/proxies", json={"name": "dup", "upstream": echo.address})


def test_update_upstream_and_populate(client: Toxiproxy, echo: _Upstream, sink: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="moving")
    updated = APIConsumer.post("/proxies/moving", json={"upstream": sink.address}).json()
    assert updated["upstream"] == sink.address and updated["listen"] == proxy.listen
    with _connect(proxy) as sock:
        sock.sendall(b"x" * 10)
        sock.shutdown(socket.SHUT_WR)
        assert int.from_bytes(_recv_exactly(sock, 8), "big") == 10  # the sink answered
    entries = [{"name": "moving", "upstream": sink.address, "listen": proxy.listen},
               {"name": "new", "upstream": echo.address, "listen": "127.0.0.1:0"}]
    response = APIConsumer.post("/populate", json=entries)
    assert response.status_code == 201
    assert [p["name"] for p in response.json()["proxies"]] == ["moving", "new"]
    assert client.get_proxy("moving").listen == proxy.listen  # unchanged, so kept


def test_unreachable_upstream_closes_the_client(client: Toxiproxy) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = unused.getsockname()[1]  # nothing listens once this closes
    proxy = client.create(upstream=f"127.0.0.1:{dead}", name="dead")
    with _connect(proxy) as sock:
        assert _closed(sock)


# -- toxics: listing, updating and errors


def test_toxic_listing_defaults_update_and_delete(client: Toxiproxy, echo: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    proxy.add_toxic(type="latency", attributes={"latency": 5})
    proxy.add_toxic(type="limit_data", stream="upstream", name="cap", toxicity=0.5,
                    attributes={"bytes": 10})
    toxics = proxy.toxics()
    assert list(toxics) == ["cap", "latency_downstream"]  # upstream ones first, as Toxiproxy
    latency = toxics["latency_downstream"]
    assert (latency.type, latency.stream, latency.toxicity) == ("latency", "downstream", 1.0)
    assert latency.attributes == {"latency": 5, "jitter": 0}  # missing attributes are 0
    assert proxy.get_toxic("cap").attributes == {"bytes": 10}
    updated = APIConsumer.post("/proxies/echo/toxics/latency_downstream",
                               json={"attributes": {"jitter": 2}}).json()
    assert updated["attributes"] == {"latency": 5, "jitter": 2}  # merged
    assert APIConsumer.get("/proxies/echo/toxics/cap").json()["toxicity"] == 0.5
    assert proxy.destroy_toxic("cap")
    assert list(proxy.toxics()) == ["latency_downstream"]
    with pytest.raises(NotFound):
        proxy.destroy_toxic("cap")
    with pytest.raises(NotFound):
        APIConsumer.get("/proxies/echo/toxics/cap")


@pytest.mark.parametrize("toxic", [
    {"type": "nonsense"},
    {"type": "latency", "stream": "sideways"},
    {"type": "latency", "attributes": {"latency": -1}},
    {"type": "latency", "attributes": {"latnecy": 100}},
    {"type": "latency", "attributes": {"latency": "100"}},
    {"type": "latency", "attributes": {"latency": 1.5}},
    {"type": "bandwidth", "attributes": {"rate": True}},
    {"type": "slicer", "attributes": {"average_size": 0}},
    {"type": "latency", "toxicity": 2},
    {"type": "latency", "attributes": [1]},
])
def test_bad_toxic_is_invalid_toxic(client: Toxiproxy, echo: _Upstream,
                                    toxic: dict[str, object]) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(**toxic)
    assert proxy.toxics() == {}


def test_duplicate_toxic_and_unknown_proxy(client: Toxiproxy, echo: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    proxy.add_toxic(type="latency", attributes={"latency": 1})
    with pytest.raises(ProxyExists):  # the client maps every 409 to ProxyExists
        proxy.add_toxic(type="latency", attributes={"latency": 2})
    proxy.destroy()
    with pytest.raises(NotFound):
        proxy.toxics()
    with pytest.raises(NotFound):
        proxy.add_toxic(type="latency")
    with pytest.raises(NotFound):
        proxy.disable()


# -- toxics: effects


def test_latency_applies_to_open_connections(client: Toxiproxy, echo: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    with _connect(proxy) as sock:
        _roundtrip(sock)
        proxies.latency(proxy, 200)
        assert 0.19 <= _roundtrip(sock) < 2.0
        proxies.latency(proxy, 200, stream="upstream")
        assert 0.39 <= _roundtrip(sock) < 3.0
        proxies.latency(proxy, 100, jitter_ms=50, stream="both")  # an update, in place
        assert 0.09 <= _roundtrip(sock) < 2.0
        proxies.remove(proxy, ["latency_upstream", "latency_downstream"])
        assert _roundtrip(sock) < 0.19


def test_toxicity_zero_then_one(client: Toxiproxy, echo: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    with _connect(proxy) as sock:
        proxies.latency(proxy, 300, toxicity=0.0)
        assert _roundtrip(sock) < 0.29
        proxies.latency(proxy, 300, toxicity=1.0)  # redrawn for the open connection
        assert _roundtrip(sock) >= 0.29


def test_bandwidth(client: Toxiproxy, echo: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    proxies.bandwidth(proxy, 100)  # 100 KB/s: 50 KB take 0.5 s
    with _connect(proxy) as sock:
        assert 0.4 <= _roundtrip(sock, b"b" * 50_000) < IO_TIMEOUT_S


def test_slicer(client: Toxiproxy, echo: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    proxies.slicer(proxy, 100, size_variation=20, delay_us=5000)  # ~20 pieces, 5 ms apart
    payload = bytes(range(200)) * 10
    with _connect(proxy) as sock:
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


def test_slow_close(client: Toxiproxy, echo: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    proxies.slow_close(proxy, 300)
    with _connect(proxy) as sock:
        _roundtrip(sock)
        start = time.monotonic()
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b""
        assert 0.25 <= time.monotonic() - start < IO_TIMEOUT_S


def test_limit_data_closes_after_n_bytes(client: Toxiproxy, echo: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    proxies.limit_data(proxy, 1000)
    with _connect(proxy) as sock:
        sock.sendall(b"d" * 4000)
        assert _recv_to_end(sock) == b"d" * 1000


def test_timeout_zero_holds_until_removed(client: Toxiproxy, echo: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    with _connect(proxy) as sock:
        _roundtrip(sock)
        names = proxies.timeout(proxy)  # both streams, held forever
        sock.sendall(b"held")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(4)
        sock.settimeout(IO_TIMEOUT_S)
        proxies.remove(proxy, names)
        assert _recv_exactly(sock, 4) == b"held"  # our server delivers what it held


def test_timeout_closes_after_its_timeout(client: Toxiproxy, echo: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    with _connect(proxy) as sock:
        start = time.monotonic()
        proxies.timeout(proxy, 300, stream="downstream")
        sock.sendall(b"ping")
        assert _closed(sock)
        assert 0.25 <= time.monotonic() - start < IO_TIMEOUT_S


def test_reset_peer_sends_rst(client: Toxiproxy, echo: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    proxies.reset_peer(proxy, 100)
    with _connect(proxy) as sock:
        sock.sendall(b"ping")  # the echo reaches the toxic, which resets 100 ms later
        with pytest.raises(ConnectionResetError):
            sock.recv(4)


def test_cut_and_heal(client: Toxiproxy, echo: _Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    with _connect(proxy) as open_conn:
        _roundtrip(open_conn)
        proxies.cut(proxy)
        assert _closed(open_conn)  # dropped
    with pytest.raises(ConnectionRefusedError):  # and not listening
        socket.create_connection(address(proxy), timeout=IO_TIMEOUT_S)
    assert client.get_proxy("echo").enabled is False
    proxies.latency(proxy, 1000)
    proxies.heal(proxy)
    assert client.get_proxy("echo").listen == proxy.listen  # the same port again
    with _connect(proxy) as sock:
        assert _roundtrip(sock) < 0.9  # healed: its toxics are gone too
    with proxy.down(), pytest.raises(ConnectionRefusedError):
        socket.create_connection(address(proxy), timeout=IO_TIMEOUT_S)
    with _connect(proxy) as sock:
        _roundtrip(sock)


def test_reset_enables_everything_and_removes_toxics(client: Toxiproxy, echo: _Upstream) -> None:
    first = client.create(upstream=echo.address, name="first")
    second = client.create(upstream=echo.address, name="second")
    with proxies.faults():
        proxies.latency(first, 1000)
        proxies.timeout(second)
        proxies.cut(second)
    listed = client.proxies()
    assert all(p.enabled for p in listed.values())
    assert first.toxics() == {} and second.toxics() == {}
    for proxy in (first, second):
        with _connect(proxy) as sock:
            assert _roundtrip(sock) < 0.9
    assert client.reset()  # the client's own call, 204


# -- bad input


def _raw_http(server: ToxiproxyServer, request: bytes) -> bytes:
    with socket.create_connection((server.host, server.port), timeout=IO_TIMEOUT_S) as sock:
        sock.sendall(request)
        return _recv_to_end(sock)


def _status(response: bytes) -> int:
    """The status of a raw HTTP answer (aiohttp says HTTP/1.0 to a request line it cannot
    read, since it cannot know the client's version)."""
    assert response.startswith((b"HTTP/1.0 ", b"HTTP/1.1 ")), response[:100]
    return int(response.split(b" ", 2)[1])


def test_malformed_http_and_json_get_4xx(client: Toxiproxy, server: ToxiproxyServer,
                                         echo: _Upstream) -> None:
    # Not HTTP: aiohttp's plain-text 400, as Go's net/http answers Toxiproxy's clients.
    assert _status(_raw_http(server, b"GARBAGE\r\n\r\n")) == 400
    assert _status(_raw_http(server, b"GET /version HTTP/1.1\r\nno colon\r\n\r\n")) == 400
    assert _status(_raw_http(server, b"GET /version HTTP/9\r\n\r\n")) == 400
    assert _status(_raw_http(server, b"GET /version HTTP/1.1\r\n\r\n")) == 400  # no Host
    head = b"GET /version HTTP/1.1\r\nHost: x\r\n"
    assert _status(_raw_http(server, head + b"X-Long: " + b"a" * 5000 + b"\r\n\r\n")) == 400
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(20))
    assert _status(_raw_http(server, head + many + b"\r\n")) == 400
    post = b"POST /proxies HTTP/1.1\r\nHost: x\r\n"
    assert _status(_raw_http(server, post + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n")) == 400
    too_big = _raw_http(server, post + b"Content-Length: 99999999\r\n\r\n")  # refused unread
    assert _status(too_big) == 413
    assert json.loads(too_big.partition(b"\r\n\r\n")[2]) == {
        "error": "body over 1048576 bytes", "status": 413}
    with socket.create_connection((server.host, server.port), timeout=IO_TIMEOUT_S) as sock:
        sock.sendall(post + b"Content-Length: 10\r\n\r\n{")  # then hangs up
    for body in (b"{not json", b"[1, 2]", b"", b'{"name": "x"}',
                 b'{"name": "x", "upstream": "no-port"}',
                 b'{"name": "x", "upstream": "127.0.0.1:1", "enabled": "yes"}',
                 b'{"name": "a/b", "upstream": "127.0.0.1:1"}'):
        with pytest.raises(InvalidToxic):  # the client's name for any 400
            APIConsumer.post("/proxies", data=body)
    with pytest.raises(NotFound) as not_found:
        APIConsumer.get("/no/such/route")
    assert json.loads(not_found.value.args[0])["status"] == 404
    with pytest.raises(NotFound) as no_proxy:
        APIConsumer.get("/proxies/nope")
    assert json.loads(no_proxy.value.args[0]) == {"error": "proxy not found", "status": 404}
    base = f"http://{server.host}:{server.port}"
    assert requests.delete(f"{base}/version", timeout=IO_TIMEOUT_S).status_code == 405
    chunked = requests.post(f"{base}/proxies", timeout=IO_TIMEOUT_S, data=iter(
        [b'{"name": "chunked", ', f'"upstream": "{echo.address}"}}'.encode()]))
    assert chunked.status_code == 201
    proxy = client.get_proxy("chunked")
    taken = APIConsumer.post("/proxies", json={"name": "clash", "upstream": echo.address,
                                               "listen": proxy.listen})
    assert taken.status_code == 500 and "listen" in taken.json()["error"]
    assert client.get_proxy("clash") is None
    assert b"version" in client.version()  # still serving
    with _connect(proxy) as sock:
        _roundtrip(sock)


# -- throughput and the helpers


def _transfer_mib_s(port: int, total: int) -> float:
    block = b"t" * (1 << 20)
    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S * 2) as sock:
        start = time.perf_counter()
        for _ in range(total // len(block)):
            sock.sendall(block)
        sock.shutdown(socket.SHUT_WR)
        assert int.from_bytes(_recv_exactly(sock, 8), "big") == total
        return total / (time.perf_counter() - start) / (1 << 20)


def test_clean_proxy_throughput(client: Toxiproxy, sink: _Upstream) -> None:
    proxy = client.create(upstream=sink.address, name="sink")
    total = 64 << 20
    direct = max(_transfer_mib_s(sink.port, total) for _ in range(2))
    proxied = max(_transfer_mib_s(address(proxy)[1], total) for _ in range(2))
    print(f"\nloopback {total >> 20} MiB: direct {direct:.0f} MiB/s, "
          f"through the proxy (same process) {proxied:.0f} MiB/s")
    # A floor far below what it does (~1 GiB/s here), only to catch a proxy gone pathological.
    assert proxied >= 50


def test_helpers_with_a_child_process_server(echo: _Upstream) -> None:
    saved = (APIConsumer.host, APIConsumer.port)
    try:
        with proxies.toxiproxy(real=False, embedded="process", seed=1) as handle:
            assert handle.kind == "process" and (APIConsumer.host, APIConsumer.port) == (
                handle.host, handle.port)
            link = proxies.create_link("b1", ("127.0.0.1", echo.port))
            link = proxies.create_link("b1", echo.address)  # replaces the first
            assert list(Toxiproxy().proxies()) == ["b1"]
            with _connect(link) as sock, proxies.faults():
                proxies.latency(link, 150, stream="both")
                assert _roundtrip(sock) >= 0.29
            assert link.toxics() == {}
            process = handle.process
            assert process is not None
        assert process.poll() is not None  # stopped
    finally:
        APIConsumer.host, APIConsumer.port = saved


def test_stop_with_connections_held(echo: _Upstream) -> None:
    saved = (APIConsumer.host, APIConsumer.port)
    try:
        server = ToxiproxyServer().start()
        Toxiproxy().update_api_consumer(server.host, server.port)
        proxy = proxies.create_link("held", echo.address)
        with _connect(proxy) as sock:
            proxies.timeout(proxy)
            sock.sendall(b"stuck")
            start = time.monotonic()
            server.stop()
            assert time.monotonic() - start < IO_TIMEOUT_S
            assert _closed(sock)
    finally:
        APIConsumer.host, APIConsumer.port = saved
