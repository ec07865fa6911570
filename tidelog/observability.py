"""The metrics/health HTTP endpoint every node serves: /metrics, /healthz, /readyz.

/metrics is Prometheus' text format from a per-node registry (so tests can run several nodes in
one process without their metrics mixing). /healthz answers 200 while the process serves; /readyz
answers 200 only when the node's own readiness check says so (a controller with a quorum leader; a
broker registered and caught up), else 503 with the reason as the body.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["DirectExposition", "MetricsServer", "Readiness"]

#: A readiness check returns None when ready, else the reason it is not.
Readiness = Callable[[], str | None]


class DirectExposition(Protocol):
    """A collector that also writes its own families in the text format, faster than
    prometheus_client does sample by sample (broker.metrics.PartitionGaugeCollector: one
    sample per hosted partition and more)."""

    def suppressed(self) -> AbstractContextManager[None]:
        """While entered, on this thread, its ``collect()`` yields nothing."""

    def exposition(self) -> bytes: ...


def exposition(registry: CollectorRegistry, direct: Sequence[DirectExposition] = ()) -> bytes:
    """What /metrics serves: the registry's families, those of ``direct`` written by them (not
    collected through the registry as well: building them is most of their cost)."""
    with contextlib.ExitStack() as stack:
        for d in direct:
            stack.enter_context(d.suppressed())
        text = generate_latest(registry)
    return text + b"".join(d.exposition() for d in direct)


class MetricsServer:
    """Serves one registry and one readiness check on host:port, from a daemon thread."""

    def __init__(self, registry: CollectorRegistry, readiness: Readiness, *, host: str,
                 port: int, direct: Sequence[DirectExposition] = ()) -> None:
        handler = _handler(registry, readiness, tuple(direct))
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http",
                                        daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(registry: CollectorRegistry, readiness: Readiness,
             direct: tuple[DirectExposition, ...]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, exposition(registry, direct), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(200, b"ok\n", "text/plain")
            elif path == "/readyz":
                reason = readiness()
                if reason is None:
                    self._send(200, b"ready\n", "text/plain")
                else:
                    self._send(503, f"not ready: {reason}\n".encode(), "text/plain")
            else:
                self._send(404, b"not found: try /metrics, /healthz or /readyz\n", "text/plain")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # scrapes every few seconds would drown the node's log

    return Handler
