"""The Toxiproxy-compatible server's admin API (chaos/toxiproxy/api.py, served by
chaos/toxiproxy/server.py), driven through the real toxiproxy-python client as chaos tests
drive it.

The server runs on a background thread of this process (random port, seeded); the client's
low-level APIConsumer reaches the two routes the client has no call for (toxic update,
populate), and raw sockets send what no client would. Upstreams are small threaded TCP servers
on 127.0.0.1. Checked: proxies created, listed, shown, updated and destroyed, with the bound
port reported for "127.0.0.1:0"; an upstream updated in place and populate keeping what did not
change; toxics listed upstream first with their defaults, updated by merging, deleted; every
error the client maps (ProxyExists, InvalidToxic, NotFound) with Toxiproxy's error body;
reset(); malformed HTTP and JSON answered with 4xx (a head over the limits, a bad chunked body,
a body over 1 MiB refused unread) while the server keeps serving; a listen address taken
answered 500; at most 64 API connections at once, the next one closed as it is accepted.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator

import pytest
import requests
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists
from toxiproxy_testkit import (
    IO_TIMEOUT_S,
    Upstream,
    client_of,
    closed,
    connect,
    echo_handler,
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
from tidelog.chaos.toxiproxy.limits import HTTP_CONNECTIONS_MAX


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


def test_version_and_running(client: Toxiproxy) -> None:
    assert client.running()
    assert b"version" in client.version()


def test_create_list_show_destroy(client: Toxiproxy, echo: Upstream) -> None:
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


def test_duplicate_proxy_is_proxy_exists(client: Toxiproxy, echo: Upstream) -> None:
    client.create(upstream=echo.address, name="dup")
    with pytest.raises(ProxyExists):  # the client checks GET /proxies first
        client.create(upstream=echo.address, name="dup")
    with pytest.raises(ProxyExists):  # and the server answers 409 itself
        APIConsumer.post("/proxies", json={"name": "dup", "upstream": echo.address})


def test_update_upstream_and_populate(client: Toxiproxy, echo: Upstream, sink: Upstream) -> None:
    proxy = client.create(upstream=echo.address, name="moving")
    updated = APIConsumer.post("/proxies/moving", json={"upstream": sink.address}).json()
    assert updated["upstream"] == sink.address and updated["listen"] == proxy.listen
    with connect(proxy) as sock:
        sock.sendall(b"x" * 10)
        sock.shutdown(socket.SHUT_WR)
        assert int.from_bytes(recv_exactly(sock, 8), "big") == 10  # the sink answered
    entries = [{"name": "moving", "upstream": sink.address, "listen": proxy.listen},
               {"name": "new", "upstream": echo.address, "listen": "127.0.0.1:0"}]
    response = APIConsumer.post("/populate", json=entries)
    assert response.status_code == 201
    assert [p["name"] for p in response.json()["proxies"]] == ["moving", "new"]
    assert client.get_proxy("moving").listen == proxy.listen  # unchanged, so kept


def test_toxic_listing_defaults_update_and_delete(client: Toxiproxy, echo: Upstream) -> None:
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
def test_bad_toxic_is_invalid_toxic(client: Toxiproxy, echo: Upstream,
                                    toxic: dict[str, object]) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(**toxic)
    assert proxy.toxics() == {}


def test_duplicate_toxic_and_unknown_proxy(client: Toxiproxy, echo: Upstream) -> None:
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


def test_reset_enables_everything_and_removes_toxics(client: Toxiproxy, echo: Upstream) -> None:
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
        with connect(proxy) as sock:
            assert roundtrip(sock) < 0.9
    assert client.reset()  # the client's own call, 204


def _raw_http(server: ToxiproxyServer, request: bytes) -> bytes:
    with socket.create_connection((server.host, server.port), timeout=IO_TIMEOUT_S) as sock:
        sock.sendall(request)
        return recv_to_end(sock)


def _status(response: bytes) -> int:
    """The status of a raw HTTP answer (aiohttp says HTTP/1.0 to a request line it cannot
    read, since it cannot know the client's version)."""
    assert response.startswith((b"HTTP/1.0 ", b"HTTP/1.1 ")), response[:100]
    return int(response.split(b" ", 2)[1])


def test_malformed_http_and_json_get_4xx(client: Toxiproxy, server: ToxiproxyServer,
                                         echo: Upstream) -> None:
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
    with connect(proxy) as sock:
        roundtrip(sock)


def _version_over(sock: socket.socket) -> bytes:
    """GET /version on a kept-alive connection; the answer's body."""
    sock.sendall(b"GET /version HTTP/1.1\r\nHost: toxiproxy\r\n\r\n")
    answer = b""
    while not answer.endswith(b"}"):  # bounded by the socket's timeout
        chunk = sock.recv(4096)
        assert chunk, f"closed after {answer!r}"
        answer += chunk
    return answer.partition(b"\r\n\r\n")[2]


def test_at_most_64_api_connections_at_once() -> None:
    with running_server() as server, contextlib.ExitStack() as held:
        api = (server.host, server.port)
        socks = [held.enter_context(socket.create_connection(api, timeout=IO_TIMEOUT_S))
                 for _ in range(HTTP_CONNECTIONS_MAX)]
        for sock in socks:  # each one answered, so each one counted
            assert b"version" in _version_over(sock)
        with socket.create_connection(api, timeout=IO_TIMEOUT_S) as extra:
            extra.sendall(b"GET /version HTTP/1.1\r\nHost: toxiproxy\r\n\r\n")
            assert closed(extra)  # closed as it was accepted, unanswered
        socks.pop().close()
        # Once the server has seen that close, a new connection is served again.
        deadline = time.monotonic() + IO_TIMEOUT_S
        while not _served(api):
            assert time.monotonic() < deadline, "no connection served after one of 64 closed"
            time.sleep(0.05)


def _served(api: tuple[str, int]) -> bool:
    with socket.create_connection(api, timeout=IO_TIMEOUT_S) as sock:
        try:
            return b"version" in _version_over(sock)
        except (AssertionError, ConnectionError):
            return False
