"""The client's I/O seam: one asyncio loop on a daemon thread, gRPC channels, error mapping.

Every Producer, Consumer and Admin in a process shares one event loop running on one daemon
thread (``io_thread()``); their public methods are synchronous and hand coroutines to it. Sharing
the loop keeps the thread count at one however many clients a program opens; each client still
owns its channels and tasks and closes them itself.

gRPC failures are transport failures only (error codes travel inside responses), and are turned
into the same typed errors the responses use: UNAVAILABLE -> NetworkError, DEADLINE_EXCEEDED ->
RequestTimedOutError, RESOURCE_EXHAUSTED (a message above the channel limit) ->
RecordListTooLargeError, UNIMPLEMENTED -> UnsupportedVersionError.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

import grpc

from tidelog import limits
from tidelog.errors import (
    InvalidRequestError,
    NetworkError,
    RecordListTooLargeError,
    RequestTimedOutError,
    TidelogError,
    UnknownServerError,
    UnsupportedVersionError,
)
from tidelog.v1.broker_pb2_grpc import BrokerServiceStub

__all__ = [
    "Connections",
    "IOThread",
    "io_thread",
    "monotonic_ms",
    "parse_bootstrap",
    "wall_ms",
]

T = TypeVar("T")

DEFAULT_PORT = 9092
#: gRPC's own reconnect backoff is 1 s growing to 120 s; a client following a failover needs to
#: see a restarted broker within about a second (Kafka's reconnect.backoff.max.ms is 1 s).
RECONNECT_BACKOFF_MIN_MS = 50
RECONNECT_BACKOFF_MAX_MS = 1000
#: Extra time a blocking call waits for its coroutine beyond the coroutine's own deadline, so the
#: coroutine's typed error, not a generic timeout, is what the caller sees.
SYNC_WAIT_SLACK_S = 5.0


def monotonic_ms() -> int:
    """Milliseconds of a clock that never goes back: deadlines, linger, backoff."""
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    """Milliseconds since the Unix epoch: record timestamps."""
    return time.time_ns() // 1_000_000


def parse_bootstrap(servers: str | Iterable[str]) -> list[str]:
    """``"host:port,host:port"`` or a list of ``host:port`` -> a list of ``host:port``.

    A missing port means 9092; IPv6 hosts are written ``[::1]:9092``. ValueError on anything else,
    so a typo fails at construction, not at the first request.
    """
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out: list[str] = []
    for raw in items:
        if not isinstance(raw, str):
            raise TypeError(f"bootstrap_servers entries must be strings, got {raw!r}")
        item = raw.strip()
        if not item:
            continue
        host, port = _split_host_port(item)
        out.append(f"{host}:{port}")
    if not out:
        raise ValueError("bootstrap_servers is empty: give at least one host:port")
    return list(dict.fromkeys(out))


def _split_host_port(item: str) -> tuple[str, int]:
    if item.startswith("["):
        end = item.find("]")
        if end < 0:
            raise ValueError(f"bootstrap server {item!r}: unclosed '[' in an IPv6 address")
        host, rest = item[: end + 1], item[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ("" if not rest else None)
    elif item.count(":") == 1:
        host, port_text = item.split(":")
    elif ":" not in item:
        host, port_text = item, ""
    else:
        raise ValueError(f"bootstrap server {item!r}: write IPv6 addresses as [addr]:port")
    if port_text is None or not host:
        raise ValueError(f"bootstrap server {item!r} is not host:port")
    if port_text == "":
        return host, DEFAULT_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"bootstrap server {item!r}: port must be 1..65535")
    return host, int(port_text)


class IOThread:
    """An asyncio loop running forever on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="tidelog-client-io", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def in_io_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; returns a thread-safe future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None) -> T:
        """Run ``coro`` on the loop and wait for it; the coroutine should enforce its own
        deadline, ``timeout_s`` is the backstop (RequestTimedOutError)."""
        if self.in_io_thread():
            coro.close()
            raise RuntimeError(
                "a blocking Tidelog client call was made on the client's I/O thread (from a "
                "delivery callback?); it would deadlock. Hand the work to another thread."
            )
        future = self.submit(coro)
        try:
            return future.result(None if timeout_s is None else timeout_s + SYNC_WAIT_SLACK_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise RequestTimedOutError(f"the call did not finish within {timeout_s:.1f}s") from None

    def call_soon(self, callback: Any, *args: Any) -> None:
        """Run ``callback(*args)`` on the loop soon (thread-safe)."""
        self.loop.call_soon_threadsafe(callback, *args)


_shared_lock = threading.Lock()
_shared: IOThread | None = None


def io_thread() -> IOThread:
    """The process's one client I/O thread, started on first use (and again after a fork)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.pid != os.getpid():
            _shared = IOThread()
        return _shared


def error_from_rpc(err: grpc.aio.AioRpcError, address: str) -> TidelogError:
    """A typed error for a transport-level gRPC failure talking to ``address``."""
    code = err.code()
    detail = f"broker {address}: {err.details() or code.name}"
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return NetworkError(detail)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return RequestTimedOutError(detail)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return RecordListTooLargeError(detail)
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return UnsupportedVersionError(detail)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidRequestError(detail)
    return UnknownServerError(f"{detail} ({code.name})")


class Connections:
    """One gRPC channel per broker address, opened on first use; used on the I/O loop only."""

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, BrokerServiceStub] = {}
        self._closed = False

    def stub(self, address: str) -> BrokerServiceStub:
        if self._closed:
            raise NetworkError("the client is closed")
        stub = self._stubs.get(address)
        if stub is None:
            channel = grpc.aio.insecure_channel(
                address,
                options=[
                    ("grpc.max_send_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                    ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                    ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MIN_MS),
                    ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MIN_MS),
                    ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
                    # Brokers are dialled directly, as Kafka clients do; an http_proxy set in
                    # the environment for other tools must not capture them.
                    ("grpc.enable_http_proxy", 0),
                ],
            )
            self._channels[address] = channel
            stub = self._stubs[address] = BrokerServiceStub(channel)  # type: ignore[no-untyped-call]
        return stub

    async def call(self, address: str, method: str, request: Any, *, timeout_ms: int) -> Any:
        """Call ``method`` on the broker at ``address``; transport failures become typed errors."""
        rpc = getattr(self.stub(address), method)
        try:
            return await rpc(request, timeout=max(timeout_ms, 1) / 1000)
        except grpc.aio.AioRpcError as e:
            raise error_from_rpc(e, address) from None

    async def close(self) -> None:
        self._closed = True
        channels = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        for channel in channels:
            await channel.close(grace=None)
