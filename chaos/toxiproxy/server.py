"""The Toxiproxy-compatible server's runners: `ToxiproxyApp` serves the admin API and the
proxies inside one event loop; `ToxiproxyServer` runs one on a background thread of a test
process. (The process entry, `python -m tidelog.chaos.toxiproxy`, is chaos/toxiproxy/__main__.py.)

The API is aiohttp's HTTP/1.1 server with the package's limits handed to it: a request's head
bounded line by line (HTTP_REQUEST_LINE_BYTES_MAX, HTTP_HEADER_BYTES_MAX, HTTP_HEADERS_MAX) and
in time (its keep-alive timeout also runs from a connection's start, so a head that never ends
closes the connection), at most HTTP_CONNECTIONS_MAX connections at once (one more is closed
as it is accepted), and requests still in flight cut after HTTP_CLOSE_TIMEOUT_S on close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any, Final

from aiohttp import web
from aiohttp.http import HttpProcessingError

from tidelog.chaos.toxiproxy.api import Api
from tidelog.chaos.toxiproxy.limits import (
    HTTP_CLOSE_TIMEOUT_S,
    HTTP_CONNECTIONS_MAX,
    HTTP_HEADER_BYTES_MAX,
    HTTP_HEADERS_MAX,
    HTTP_REQUEST_LINE_BYTES_MAX,
    HTTP_REQUEST_TIMEOUT_S,
)
from tidelog.chaos.toxiproxy.model import format_address

__all__ = ["DEFAULT_API_PORT", "ToxiproxyApp", "ToxiproxyServer"]

log = logging.getLogger(__name__)
#: aiohttp's own lines about API connections.
http_log = logging.getLogger("tidelog.chaos.toxiproxy.http")

DEFAULT_API_PORT: Final = 8474  # Toxiproxy's


class _ClientErrorsAsInfo(logging.Filter):
    """aiohttp logs a request it cannot parse as an ERROR with a traceback. Here that is the
    client's error, not the server's: one line at INFO (what the hand parser logged was
    nothing), and only when INFO is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, HttpProcessingError):
            return True
        record.msg = f"{record.getMessage()}: {error.code} {' '.join(error.message.split())}"
        record.args = None
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.INFO, "INFO"
        return http_log.isEnabledFor(logging.INFO)


http_log.addFilter(_ClientErrorsAsInfo())

#: aiohttp's per-connection settings (its RequestHandler's arguments).
_HANDLER_ARGS: Final[dict[str, Any]] = {
    "keepalive_timeout": HTTP_REQUEST_TIMEOUT_S,
    "max_line_size": HTTP_REQUEST_LINE_BYTES_MAX,
    "max_field_size": HTTP_HEADER_BYTES_MAX,
    "max_headers": HTTP_HEADERS_MAX,
    # The API reads every body whole before answering, so nothing is left to linger over but
    # a body it refused unread, whose connection closes at once (as the hand parser's did).
    "lingering_time": 0,
    "access_log": None,  # toxiproxy-python's every call would be a line
    "logger": http_log,
}


class _CountedHandler(web.RequestHandler):
    """aiohttp's protocol for one API connection, counted, so that a connection past
    HTTP_CONNECTIONS_MAX is closed before aiohttp sees it."""

    def __init__(self, app: ToxiproxyApp, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._app = app
        self._counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._app.connections >= HTTP_CONNECTIONS_MAX:
            transport.close()
            return
        self._app.connections += 1
        self._counted = True
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._counted:
            return
        self._counted = False
        self._app.connections -= 1
        super().connection_lost(exc)


class ToxiproxyApp:
    """The server inside one event loop: the HTTP API and the proxies. All state is touched on
    that loop only; other threads use ToxiproxyServer (or HTTP)."""

    def __init__(self, *, seed: int | None = None) -> None:
        self.api = Api(seed=seed)
        self.connections = 0  # API connections open now
        self.api_host = ""
        self.api_port = 0
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None

    async def start(self, host: str = "127.0.0.1", port: int = DEFAULT_API_PORT) -> None:
        runner = web.AppRunner(self.api.application(), handle_signals=False,
                               shutdown_timeout=HTTP_CLOSE_TIMEOUT_S, **_HANDLER_ARGS)
        await runner.setup()
        self._runner = runner
        manager = runner.server
        assert manager is not None  # set by setup()
        loop = asyncio.get_running_loop()
        # Our own listener rather than aiohttp's TCPSite, whose protocol factory cannot count.
        self._listener = await loop.create_server(
            lambda: _CountedHandler(self, manager, loop=loop, **_HANDLER_ARGS), host, port,
            reuse_address=True)
        bound = self._listener.sockets[0].getsockname()
        self.api_host, self.api_port = str(bound[0]), int(bound[1])
        log.info("toxiproxy API listening on %s", format_address(self.api_host, self.api_port))

    async def close(self) -> None:
        self.api.close()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        # Closes idle connections at once; a request in flight gets HTTP_CLOSE_TIMEOUT_S.
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


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
        try:
            await app.start(self.host, self.port)
            self.host, self.port = app.api_host, app.api_port
            self._ready.set()
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
