"""A TCP proxy with Toxiproxy's HTTP admin API, on asyncio (DESIGN.md section 10).

No Toxiproxy server binary can be installed here, so chaos tests drive this one with the real
toxiproxy-python client (or a real `toxiproxy-server` when one is on PATH; see chaos/proxies.py).
It follows Shopify Toxiproxy 2.x as far as that client and our tests use it: the same routes,
status codes, JSON shapes and error bodies ({"error": ..., "status": ...}), and the same toxics:
latency, bandwidth, timeout, reset_peer, slow_close, slicer, limit_data and noop. Where it
differs on purpose (a timeout toxic holds data instead of dropping it, half-closes are passed
on, attributes are checked strictly) is written down in docs/decisions.md.

Two ways to run it:
- in a test process: `ToxiproxyServer(port=0).start()` runs it on a background thread with its
  own event loop; `.stop()` ends it;
- as a process: `python -m chaos.toxiproxy_server --host 127.0.0.1 --port 8474`; it prints one
  JSON line, {"api": "host:port"}, on stdout once it listens (so --port 0 can be used).

Data path: each accepted connection opens one upstream connection; each direction ("upstream"
is client to server, "downstream" server to client) is a _Pipe. A pipe with no toxic in force
writes what it reads at once (flow control only, so a clean proxy is not a test's bottleneck);
with toxics it queues timestamped chunks and one task applies them, re-reading the toxic list
whenever it changes, so adding or removing a toxic takes effect on open connections too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http
import json
import logging
import random
import re
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote

from chaos.toxiproxy.limits import (
    HTTP_BODY_BYTES_MAX,
    HTTP_CLOSE_TIMEOUT_S,
    HTTP_CONNECTIONS_MAX,
    HTTP_HEAD_BYTES_MAX,
    HTTP_REQUEST_TIMEOUT_S,
    PROXIES_MAX,
)
from chaos.toxiproxy.model import (
    ApiError,
    ProxyConfig,
    bad_body,
    error_body,
    format_address,
)
from chaos.toxiproxy.proxy import Proxy
from chaos.toxiproxy.toxics import Toxic, create_toxic, update_toxic

__all__ = ["DEFAULT_API_PORT", "VERSION", "ToxiproxyApp", "ToxiproxyServer"]

log = logging.getLogger(__name__)

VERSION: Final = "2.x-compatible (tidelog chaos/toxiproxy_server.py)"
DEFAULT_API_PORT: Final = 8474

# ----------------------------------------------------------------------------------------------
# HTTP/1.1, just enough for the admin API (JSON bodies, keep-alive, Content-Length or chunked)
# ----------------------------------------------------------------------------------------------


@dataclass
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool

    def json(self) -> Any:
        if not self.body.strip():
            raise bad_body("EOF")  # what Go's decoder says about an empty body
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError) as error:
            raise bad_body(str(error)) from None

    def json_object(self) -> dict[str, Any]:
        value = self.json()
        if not isinstance(value, dict):
            raise bad_body("expected a JSON object")
        return value


@dataclass
class _Response:
    status: int
    body: Any = None  # JSON-encoded; None for no body


class _HttpError(Exception):
    """A request that cannot be parsed: answered with `status`, then the connection closes."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    """Reads one request; None at a clean end of the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        if not error.partial.strip():
            return None
        raise _HttpError(400, "incomplete request head") from None
    except asyncio.LimitOverrunError:
        raise _HttpError(431, "request head too large") from None
    lines = head[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not parts[1].startswith("/"):
        raise _HttpError(400, "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise _HttpError(505 if version.startswith("HTTP/") else 400, "unsupported HTTP version")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.match(name):
            raise _HttpError(400, "malformed header line")
        headers[name.lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    body = await _read_body(reader, headers)
    path = target.split("?", 1)[0]
    return _Request(method, path, headers, body, keep_alive)


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    encoding = headers.get("transfer-encoding", "").lower()
    if encoding == "chunked":
        return await _read_chunked(reader)
    if encoding:
        raise _HttpError(501, f"transfer-encoding {encoding!r} is not supported")
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit():
        raise _HttpError(400, "bad content-length")
    length = int(length_text)
    if length > HTTP_BODY_BYTES_MAX:
        raise _HttpError(413, f"body over {HTTP_BODY_BYTES_MAX} bytes")
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise _HttpError(400, "body shorter than content-length") from None


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    try:
        while True:  # bounded: each round adds a chunk and the total is capped below
            size_line = (await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise _HttpError(400, "bad chunk size") from None
            if size < 0 or len(body) + size > HTTP_BODY_BYTES_MAX:
                raise _HttpError(413, f"body over {HTTP_BODY_BYTES_MAX} bytes")
            if size == 0:
                # Trailers are read and ignored, up to the blank line.
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return bytes(body)
            body += await reader.readexactly(size)
            if await reader.readexactly(2) != b"\r\n":
                raise _HttpError(400, "bad chunk end")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        raise _HttpError(400, "bad chunked body") from None


def _encode_response(response: _Response, keep_alive: bool) -> bytes:
    try:
        reason = http.HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {response.status} {reason}"]
    body = b""
    if response.body is not None and response.status not in (204, 304):
        body = json.dumps(response.body).encode()
        lines.append("Content-Type: application/json")
    if response.status != 204:
        lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: " + ("keep-alive" if keep_alive else "close"))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


# ----------------------------------------------------------------------------------------------
# The application: proxies and the API routes
# ----------------------------------------------------------------------------------------------

_Handler = Callable[[_Request, dict[str, str]], Awaitable[_Response]]


class ToxiproxyApp:
    """The server inside one event loop: the proxies and the HTTP API. All state is touched on
    that loop only; other threads use ToxiproxyServer (or HTTP)."""

    def __init__(self, *, seed: int | None = None) -> None:
        # One seeded generator for toxicity draws, jitter and slice sizes, so a test can
        # replay them (the order of connections still depends on the test's own timing).
        self.rng = random.Random(seed)
        self.proxies: dict[str, Proxy] = {}
        self.http_server: asyncio.Server | None = None
        self.http_writers: set[asyncio.StreamWriter] = set()
        self.http_tasks: set[asyncio.Task[Any]] = set()
        self.api_host = ""
        self.api_port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        proxy = r"/proxies/(?P<proxy>[^/]+)"
        toxic = proxy + r"/toxics/(?P<toxic>[^/]+)"
        # The route table: (methods, path pattern, handler), as Toxiproxy's api.go.
        self.routes: list[tuple[tuple[str, ...], re.Pattern[str], _Handler]] = [
            (("GET",), re.compile(r"/version"), self.handle_version),
            (("POST",), re.compile(r"/reset"), self.handle_reset),
            (("GET",), re.compile(r"/proxies"), self.handle_proxy_index),
            (("POST",), re.compile(r"/proxies"), self.handle_proxy_create),
            (("POST",), re.compile(r"/populate"), self.handle_populate),
            (("GET",), re.compile(proxy), self.handle_proxy_show),
            (("POST", "PATCH"), re.compile(proxy), self.handle_proxy_update),
            (("DELETE",), re.compile(proxy), self.handle_proxy_delete),
            (("GET",), re.compile(proxy + r"/toxics"), self.handle_toxic_index),
            (("POST",), re.compile(proxy + r"/toxics"), self.handle_toxic_create),
            (("GET",), re.compile(toxic), self.handle_toxic_show),
            (("POST", "PATCH"), re.compile(toxic), self.handle_toxic_update),
            (("DELETE",), re.compile(toxic), self.handle_toxic_delete),
        ]

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "start() first"
        return self._loop

    async def start(self, host: str = "127.0.0.1", port: int = DEFAULT_API_PORT) -> None:
        self._loop = asyncio.get_running_loop()
        self.http_server = await asyncio.start_server(
            self._serve_http, host, port, limit=HTTP_HEAD_BYTES_MAX, reuse_address=True)
        bound = self.http_server.sockets[0].getsockname()
        self.api_host, self.api_port = str(bound[0]), int(bound[1])
        log.info("toxiproxy API listening on %s", format_address(self.api_host, self.api_port))

    async def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()
        self.proxies.clear()
        if self.http_server is not None:
            self.http_server.close()
            self.http_server = None
        for writer in list(self.http_writers):
            writer.close()
        # Closed sockets end their handlers; only a stuck one is cancelled.
        if self.http_tasks:
            _, pending = await asyncio.wait(set(self.http_tasks), timeout=HTTP_CLOSE_TIMEOUT_S)
            for task in pending:
                task.cancel()

    # -- HTTP connection handling ----------------------------------------------------------------

    async def _serve_http(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        if len(self.http_writers) >= HTTP_CONNECTIONS_MAX:
            writer.close()
            return
        self.http_writers.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self.http_tasks.add(task)
        try:
            while True:  # one request per round; ends on close, error or idle timeout
                try:
                    request = await asyncio.wait_for(_read_request(reader), HTTP_REQUEST_TIMEOUT_S)
                except _HttpError as error:
                    response = _Response(error.status, error_body(error.status, error.message))
                    writer.write(_encode_response(response, keep_alive=False))
                    await writer.drain()
                    return
                if request is None:
                    return
                response = await self.dispatch(request)
                writer.write(_encode_response(response, request.keep_alive))
                await writer.drain()
                if not request.keep_alive:
                    return
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # Ends the handler quietly: asyncio 3.11's start_server callback calls exception()
            # on its task and logs a spurious error when that task was cancelled.
            pass
        finally:
            self.http_writers.discard(writer)
            if task is not None:
                self.http_tasks.discard(task)
            writer.close()

    async def dispatch(self, request: _Request) -> _Response:
        """Routes one request; every failure becomes an error answer, never a crash."""
        path_matched = False
        try:
            for methods, pattern, handler in self.routes:
                match = pattern.fullmatch(request.path)
                if match is None:
                    continue
                path_matched = True
                if request.method in methods:
                    params = {k: unquote(v) for k, v in match.groupdict().items()}
                    return await handler(request, params)
            if path_matched:
                raise ApiError(405, f"method {request.method} not allowed on {request.path}")
            raise ApiError(404, "404 page not found")
        except ApiError as error:
            return _Response(error.status, error_body(error.status, error.message))
        except Exception as error:
            log.exception("toxiproxy API: %s %s failed", request.method, request.path)
            return _Response(500, error_body(500, f"internal error: {error!r}"))

    # -- proxies ---------------------------------------------------------------------------------

    def _proxy(self, params: dict[str, str]) -> Proxy:
        proxy = self.proxies.get(params["proxy"])
        if proxy is None:
            raise ApiError(404, "proxy not found")
        return proxy

    async def handle_version(self, request: _Request, params: dict[str, str]) -> _Response:
        return _Response(200, {"version": VERSION})

    async def handle_reset(self, request: _Request, params: dict[str, str]) -> _Response:
        errors = []
        for proxy in self.proxies.values():
            try:
                await proxy.start()
            except ApiError as error:
                errors.append(f"{proxy.name}: {error.message}")
            proxy.toxics.clear()
            proxy.toxics_changed()
        if errors:
            raise ApiError(500, "; ".join(errors))
        return _Response(204)

    async def handle_proxy_index(self, request: _Request, params: dict[str, str]) -> _Response:
        return _Response(200, {name: p.to_json() for name, p in self.proxies.items()})

    async def handle_proxy_show(self, request: _Request, params: dict[str, str]) -> _Response:
        return _Response(200, self._proxy(params).to_json())

    async def handle_proxy_create(self, request: _Request, params: dict[str, str]) -> _Response:
        config = ProxyConfig.from_json(request.json_object())
        if config.name in self.proxies:
            raise ApiError(409, "proxy already exists")
        if len(self.proxies) >= PROXIES_MAX:
            raise ApiError(400, f"at most {PROXIES_MAX} proxies")
        proxy = Proxy(config.name, config.listen, config.upstream, rng=self.rng)
        if config.enabled:
            await proxy.start()  # a failed listen leaves nothing behind, as in Toxiproxy
        self.proxies[config.name] = proxy
        return _Response(201, proxy.to_json())

    async def handle_populate(self, request: _Request, params: dict[str, str]) -> _Response:
        body = request.json()
        if not isinstance(body, list) or len(body) > PROXIES_MAX:
            raise bad_body(f"expected a list of at most {PROXIES_MAX} proxies")
        # Every entry is checked before any proxy is touched, as Toxiproxy does.
        inputs = []
        for entry in body:
            if not isinstance(entry, dict):
                raise bad_body("expected a list of proxy objects")
            inputs.append(ProxyConfig.from_json(entry))
        populated = []
        for config in inputs:
            existing = self.proxies.get(config.name)
            if existing is not None and (existing.listen, existing.upstream) == (
                    config.listen, config.upstream):
                populated.append(existing)
                continue
            if existing is not None:
                existing.stop()
                del self.proxies[config.name]
            proxy = Proxy(config.name, config.listen, config.upstream, rng=self.rng)
            try:
                if config.enabled:
                    await proxy.start()
            except ApiError as error:
                proxies_json = [p.to_json() for p in populated]
                return _Response(error.status, {**error_body(error.status, error.message),
                                                "proxies": proxies_json})
            self.proxies[config.name] = proxy
            populated.append(proxy)
        return _Response(201, {"proxies": [p.to_json() for p in populated]})

    async def handle_proxy_update(self, request: _Request, params: dict[str, str]) -> _Response:
        proxy = self._proxy(params)
        current = ProxyConfig(proxy.name, proxy.listen, proxy.upstream, proxy.enabled)
        config = current.updated(request.json_object())
        listen, upstream, enabled = config.listen, config.upstream, config.enabled
        # As Toxiproxy's Proxy.Update: a new address restarts the proxy; disabling stops
        # listening and drops every connection; enabling listens again on the same address.
        if (listen, upstream) != (proxy.listen, proxy.upstream):
            proxy.stop()
            proxy.listen, proxy.upstream = listen, upstream
        if enabled and not proxy.enabled:
            await proxy.start()
        elif not enabled and proxy.enabled:
            proxy.stop()
        return _Response(200, proxy.to_json())

    async def handle_proxy_delete(self, request: _Request, params: dict[str, str]) -> _Response:
        proxy = self._proxy(params)
        proxy.stop()
        del self.proxies[proxy.name]
        return _Response(204)

    # -- toxics ----------------------------------------------------------------------------------

    def _toxic(self, proxy: Proxy, params: dict[str, str]) -> Toxic:
        for toxic in proxy.toxics:
            if toxic.name == params["toxic"]:
                return toxic
        raise ApiError(404, "toxic not found")

    async def handle_toxic_index(self, request: _Request, params: dict[str, str]) -> _Response:
        return _Response(200, [t.to_json() for t in self._proxy(params).sorted_toxics()])

    async def handle_toxic_show(self, request: _Request, params: dict[str, str]) -> _Response:
        proxy = self._proxy(params)
        return _Response(200, self._toxic(proxy, params).to_json())

    async def handle_toxic_create(self, request: _Request, params: dict[str, str]) -> _Response:
        proxy = self._proxy(params)
        toxic = create_toxic(request.json_object(), proxy.toxics)
        proxy.toxics.append(toxic)
        proxy.toxics_changed()
        return _Response(200, toxic.to_json())

    async def handle_toxic_update(self, request: _Request, params: dict[str, str]) -> _Response:
        proxy = self._proxy(params)
        toxic = self._toxic(proxy, params)
        update_toxic(toxic, request.json_object())
        proxy.toxics_changed()
        return _Response(200, toxic.to_json())

    async def handle_toxic_delete(self, request: _Request, params: dict[str, str]) -> _Response:
        proxy = self._proxy(params)
        proxy.toxics.remove(self._toxic(proxy, params))
        proxy.toxics_changed()
        return _Response(204)


# ----------------------------------------------------------------------------------------------
# Runners: a background thread for tests, a process for everything else
# ----------------------------------------------------------------------------------------------


class ToxiproxyServer:
    """The server on a background thread with its own event loop, for use inside a test
    process. `port=0` picks a free port (read `.port` after start()); tests that run next to
    other engineers' tests on the same machine should not take the well-known 8474."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, seed: int | None = None) -> None:
        self.host = host
        self.port = port
        self.seed = seed
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)

    def start(self, timeout_s: float = 10.0) -> ToxiproxyServer:
        assert self._thread is None, "already started"
        self._thread = threading.Thread(target=self._main, name="toxiproxy-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"toxiproxy server did not start in {timeout_s} s")
        if self._error is not None:
            self._thread.join(timeout_s)
            raise RuntimeError(f"toxiproxy server failed to start: {self._error}")
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop may already be closed
                self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"toxiproxy server did not stop in {timeout_s} s")
        self._thread = None

    def __enter__(self) -> ToxiproxyServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as error:  # reported to start(); the thread just ends
            self._error = error
        finally:
            self._ready.set()
            _close_loop(loop)

    async def _serve(self) -> None:
        app = ToxiproxyApp(seed=self.seed)
        self._stopping = asyncio.Event()
        await app.start(self.host, self.port)
        self.host, self.port = app.api_host, app.api_port
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            await app.close()


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


async def _serve_process(host: str, port: int, seed: int | None) -> None:
    app = ToxiproxyApp(seed=seed)
    await app.start(host, port)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    # The one line on stdout: whoever started us learns the port even when it was 0.
    print(json.dumps({"api": format_address(app.api_host, app.api_port)}), flush=True)
    try:
        await stopping.wait()
    finally:
        await app.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_API_PORT)
    parser.add_argument("--seed", type=int, default=None, help="seed for toxicity and jitter")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(_serve_process(args.host, args.port, args.seed))
    except OSError as error:
        print(f"toxiproxy server: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
