"""The client's I/O seam: one asyncio loop on a daemon thread, gRPC channels, error mapping.

Every Producer, Consumer and Admin in a process shares one event loop running on one daemon
thread (``io_thread()``); their public methods are synchronous and hand coroutines to it. Sharing
the loop keeps the thread count at one however many clients a program opens; each client still
owns its channels and tasks and closes them itself. Should the thread ever stop (something
raised out of the loop), every blocking call made through it raises instead of waiting (``run``
checks the thread while it waits), its stop listeners run (a producer fails what it holds), and
the next client gets a new thread.

gRPC failures are transport failures only (error codes travel inside responses), and are turned
into the same typed errors the responses use: UNAVAILABLE -> NetworkError, DEADLINE_EXCEEDED ->
RequestTimedOutError, RESOURCE_EXHAUSTED -> RecordListTooLargeError for a message above the
channel limit and NetworkError (retriable) for a server at its concurrent-RPC limit,
UNIMPLEMENTED -> UnsupportedVersionError. Authentication failures are not retried: the broker's
UNAUTHENTICATED (details ``SASL_AUTHENTICATION_FAILED: ...`` or ``UNSUPPORTED_SASL_MECHANISM:
...``) -> SaslAuthenticationFailedError / UnsupportedSaslMechanismError, and a SASL_SSL client's
call credentials that failed (gRPC says UNAVAILABLE, "Getting metadata from plugin failed with
error: CODE: ...", see tidelog/scram_auth.py) -> the error of that code. A refusal after which the
SCRAM salt turned out to have changed (the credential was set again) is a NetworkError instead,
so the call is sent again with the new key (``Connections._refused``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import grpc

from tidelog import limits
from tidelog.errors import (
    ErrorCode,
    InvalidRequestError,
    NetworkError,
    RecordListTooLargeError,
    RequestTimedOutError,
    SaslAuthenticationFailedError,
    TidelogError,
    UnknownServerError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
    error_for_code,
)
from tidelog.tls import PLAINTEXT, ChannelFactory
from tidelog.v1.broker_pb2_grpc import BrokerServiceStub

log = logging.getLogger(__name__)

__all__ = [
    "AUTHENTICATION_ERRORS",
    "Connections",
    "IOThread",
    "io_thread",
    "monotonic_ms",
    "wall_ms",
]

T = TypeVar("T")

#: gRPC's own reconnect backoff is 1 s growing to 120 s; a client following a failover needs to
#: see a restarted broker within about a second (Kafka's reconnect.backoff.max.ms is 1 s).
RECONNECT_BACKOFF_MIN_MS = 50
RECONNECT_BACKOFF_MAX_MS = 1000
#: Extra time a blocking call waits for its coroutine beyond the coroutine's own deadline, so the
#: coroutine's typed error, not a generic timeout, is what the caller sees.
SYNC_WAIT_SLACK_S = 5.0
#: How often a blocking call checks that the I/O thread is still alive while it waits.
IO_THREAD_CHECK_S = 0.5


def monotonic_ms() -> int:
    """Milliseconds of a clock that never goes back: deadlines, linger, backoff."""
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    """Milliseconds since the Unix epoch: record timestamps."""
    return time.time_ns() // 1_000_000


class IOThread:
    """An asyncio loop running forever on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        self._stop_listeners: list[weakref.WeakMethod[Callable[[BaseException], None]]] = []
        self._stop_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="tidelog-client-io", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        error: BaseException = RuntimeError("the loop stopped")
        try:
            self.loop.run_forever()
        except BaseException as e:  # raised out of a task or callback: the thread ends
            error = e
            log.error("the Tidelog client I/O thread stopped", exc_info=e)
        finally:
            self._stopped(error)

    def _stopped(self, error: BaseException) -> None:
        """The loop will run nothing more: tell the clients (on this thread, which is still the
        only one touching their loop state)."""
        with self._stop_lock:
            listeners, self._stop_listeners = self._stop_listeners, []
        for ref in listeners:
            callback = ref()
            if callback is None:
                continue
            try:
                callback(error)
            except BaseException:
                log.exception("a client failed to stop after its I/O thread stopped")

    def add_stop_listener(self, callback: Callable[[BaseException], None]) -> None:
        """``callback(error)`` runs once if the thread stops (a bound method, held weakly, so a
        client that is dropped is not kept alive by this)."""
        with self._stop_lock:
            self._stop_listeners = [r for r in self._stop_listeners if r() is not None]
            self._stop_listeners.append(weakref.WeakMethod(callback))
        if not self.alive:  # stopped before we were listening
            self._stopped(RuntimeError("the client I/O thread had stopped"))

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

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
        if not self.alive:
            coro.close()
            raise _stopped_error()
        future = self.submit(coro)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s + SYNC_WAIT_SLACK_S
        while True:  # bounded: by the deadline, or by the thread stopping
            wait = IO_THREAD_CHECK_S if deadline is None else min(
                IO_THREAD_CHECK_S, max(deadline - time.monotonic(), 0.0))
            try:
                return future.result(wait)
            except concurrent.futures.TimeoutError:
                pass
            if not self.alive:
                future.cancel()
                raise _stopped_error() from None
            if deadline is not None and time.monotonic() >= deadline:
                future.cancel()
                raise RequestTimedOutError(
                    f"the call did not finish within {timeout_s:.1f}s") from None

    def call_soon(self, callback: Any, *args: Any) -> None:
        """Run ``callback(*args)`` on the loop soon (thread-safe)."""
        self.loop.call_soon_threadsafe(callback, *args)


def _stopped_error() -> UnknownServerError:
    return UnknownServerError("the Tidelog client I/O thread has stopped (see the log for why); "
                              "this client cannot be used any more")


_shared_lock = threading.Lock()
_shared: IOThread | None = None


def io_thread() -> IOThread:
    """The process's one client I/O thread, started on first use (and again after a fork)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.pid != os.getpid() or not _shared.alive:
            _shared = IOThread()
        return _shared


#: The errors that say the client's credentials are refused: not retried, and raised by every
#: later call of a client that waits on the cluster (poll, send's metadata wait).
AUTHENTICATION_ERRORS = (SaslAuthenticationFailedError, UnsupportedSaslMechanismError)
#: How gRPC reports call credentials whose plugin failed (always with status UNAVAILABLE).
PLUGIN_FAILED = "Getting metadata from plugin failed with error: "


def error_from_rpc(err: grpc.aio.AioRpcError, address: str) -> TidelogError:
    """A typed error for a transport-level gRPC failure talking to ``address``."""
    return status_error(err.code(), err.details() or "", address)


def status_error(code: grpc.StatusCode, details: str, address: str) -> TidelogError:
    """:func:`error_from_rpc` of a call's status code and details."""
    detail = f"broker {address}: {details or code.name}"
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return _coded(details or "the broker refused the credentials", address,
                      SaslAuthenticationFailedError)
    if code == grpc.StatusCode.UNAVAILABLE and PLUGIN_FAILED in details:
        return _coded(details.partition(PLUGIN_FAILED)[2], address, NetworkError)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return NetworkError(detail)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return RequestTimedOutError(detail)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        # Two causes share the status: a message above the channel's size limit (gRPC says
        # "... larger than max ...": resending it cannot help), and a server at its
        # concurrent-RPC limit (maximum_concurrent_rpcs; the request was not handled at all,
        # so a retry after a backoff is safe and right).
        if "larger than max" in details:
            return RecordListTooLargeError(detail)
        return NetworkError(f"{detail} (the broker is at its concurrent-request limit)")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return UnsupportedVersionError(detail)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidRequestError(detail)
    return UnknownServerError(f"{detail} ({code.name})")


def _coded(text: str, address: str, default: type[TidelogError]) -> TidelogError:
    """``CODE: message`` (an ErrorCode's name first) -> that code's error; else ``default``."""
    name, sep, message = text.partition(": ")
    if sep and name != "NONE" and name in ErrorCode.DESCRIPTOR.values_by_name:
        return error_for_code(ErrorCode.Value(name), f"broker {address}: {message}")
    return default(f"broker {address}: {text}")


async def _stream_failure(call: Any, error: BaseException, address: str,
                          method: str) -> TidelogError | None:
    """What ``error`` from a stream call's write or read means: None when the broker has no such
    method (UNIMPLEMENTED: use unary calls), else the typed error. The call's own status decides:
    a write to a call the broker already ended fails with INTERNAL or "RPC already finished"
    while the status says why. A broker going away (GOAWAY) ends a stream with INTERNAL or
    UNKNOWN rather than UNAVAILABLE: those are a NetworkError too."""
    try:
        code: grpc.StatusCode | None = await asyncio.wait_for(call.code(), 1.0)
    except Exception:  # not ended after all, or no status: go by the error
        code = error.code() if isinstance(error, grpc.aio.AioRpcError) else None
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return None
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE):
        # Refused credentials end a stream as they fail a unary call: the status says so even
        # when what failed here was a write to the ended call.
        try:
            details = await asyncio.wait_for(call.details(), 1.0) or ""
        except Exception:
            details = (error.details() or "") if isinstance(error, grpc.aio.AioRpcError) \
                else ""
        if code == grpc.StatusCode.UNAUTHENTICATED or PLUGIN_FAILED in details:
            return status_error(code, details, address)
    if not isinstance(error, grpc.aio.AioRpcError):
        return NetworkError(f"broker {address}: {method} stream ended "
                            f"({code.name if code else error})")
    if error.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        return NetworkError(f"broker {address}: {method} stream broke: "
                            f"{error.details() or error.code().name}")
    return error_from_rpc(error, address)


class _Stream:
    """A long-lived request/answer stream to one broker: one exchange at a time."""

    __slots__ = ("auth_generation", "busy", "call", "supported")

    def __init__(self) -> None:
        self.call: Any = None
        self.busy = False
        self.supported = True
        #: The call credentials' key generation when the call was opened.
        self.auth_generation = 0

    def close(self) -> None:
        call, self.call = self.call, None
        if call is not None:
            call.cancel()


class _Multiplexed:
    """A long-lived stream to one broker carrying many requests at once, matched to their
    answers by correlation id (ProduceStream)."""

    __slots__ = ("auth_generation", "call", "confirmed", "ids", "opening", "pending", "reader",
                 "supported", "write_lock")

    def __init__(self) -> None:
        self.call: Any = None
        #: The call credentials' key generation when the call was opened.
        self.auth_generation = 0
        self.reader: asyncio.Task[None] | None = None
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.ids = itertools.count(1)
        self.write_lock = asyncio.Lock()
        self.supported = True
        #: An answer came on the current stream: the broker has the method.
        self.confirmed = False
        #: Done when the first request on a new stream (alone on it until then) is answered.
        self.opening: asyncio.Future[None] | None = None

    def fail_all(self, error: BaseException) -> None:
        """The stream is gone: every request still waiting gets ``error``; the next one opens
        a new stream."""
        call, self.call = self.call, None
        self.confirmed = False
        if call is not None:
            call.cancel()
        pending, self.pending = self.pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)


class _StreamUnsupported(Exception):
    """The broker has no such stream (UNIMPLEMENTED): nothing was handled; use unary calls."""


#: The gRPC metadata key carrying the client's ``client_id`` (Kafka's ``client.id``).
CLIENT_ID_METADATA_KEY = "client-id"
#: Longest client id accepted (a gRPC metadata value; Kafka's group describe shows it).
CLIENT_ID_LENGTH_MAX = 255


def check_client_id(client_id: str) -> None:
    """ValueError unless ``client_id`` can travel as gRPC metadata (printable ASCII)."""
    if not isinstance(client_id, str) or len(client_id) > CLIENT_ID_LENGTH_MAX or not (
            client_id.isascii() and client_id.isprintable()):
        raise ValueError(f"client_id must be printable ASCII of at most {CLIENT_ID_LENGTH_MAX} "
                         f"characters, got {client_id!r:.80}")


class Connections:
    """One gRPC channel per broker address, opened on first use; used on the I/O loop only.

    :meth:`exchange` sends a request over a long-lived bidirectional stream instead of a unary
    call (a stream message costs a grpc.aio server about half the CPU of a unary RPC): one stream
    per broker and method, one exchange on it at a time (a second concurrent caller uses the
    unary call), answers in order. A failed, timed-out or cancelled exchange closes the stream
    (an answer may still be on its way) and the next one opens a new stream. A broker without the
    stream method (UNIMPLEMENTED: an older build) is asked by unary calls from then on.
    """

    def __init__(self, client_id: str = "", channels: ChannelFactory = PLAINTEXT) -> None:
        check_client_id(client_id)
        #: Plaintext, or TLS (security_protocol="SSL": the CA, and a certificate for mTLS), with
        #: the SCRAM call credentials of security_protocol="SASL_SSL".
        self._channel_factory = channels
        # Sent with every call, as Kafka's request header carries client.id: the brokers show
        # it in DescribeGroups (broker.handlers.groups.client_identity reads the same key).
        self._call_metadata: tuple[tuple[str, str], ...] | None = (
            ((CLIENT_ID_METADATA_KEY, client_id),) if client_id else None)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, BrokerServiceStub] = {}
        self._streams: dict[tuple[str, str], _Stream] = {}
        self._muxes: dict[tuple[str, str], _Multiplexed] = {}
        self._closed = False

    def stub(self, address: str) -> BrokerServiceStub:
        if self._closed:
            raise NetworkError("the client is closed")
        stub = self._stubs.get(address)
        if stub is None:
            channel = self._channel_factory.aio(
                address,
                [
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
            stub = self._stubs[address] = BrokerServiceStub(channel)
        return stub

    async def call(self, address: str, method: str, request: Any, *, timeout_ms: int) -> Any:
        """Call ``method`` on the broker at ``address``; transport failures become typed errors."""
        rpc = getattr(self.stub(address), method)
        generation = self._auth_generation()
        try:
            return await rpc(request, timeout=max(timeout_ms, 1) / 1000,
                             metadata=self._call_metadata)
        except grpc.aio.AioRpcError as e:
            raise await self._refused(error_from_rpc(e, address), address,
                                      generation) from None

    def _auth_generation(self) -> int:
        auth = self._channel_factory.auth
        return 0 if auth is None else auth.generation

    async def _refused(self, error: TidelogError, address: str, generation: int
                       ) -> TidelogError:
        """``error``, unless it is the broker refusing SCRAM credentials whose salt has changed
        since (the credential was set again, perhaps with the same password): then the call
        is worth sending again with the new key, and the error is a (retriable) NetworkError.
        """
        auth = self._channel_factory.auth
        if auth is None or not isinstance(error, SaslAuthenticationFailedError):
            return error
        if not await asyncio.to_thread(auth.recheck, address, generation):
            return error
        return NetworkError(f"{error.message}; the SCRAM credential has a new salt: sending "
                            "again with the new key")

    async def exchange(self, address: str, method: str, request: Any, *,
                       timeout_ms: int) -> Any:
        """:meth:`call` of ``method`` over its stream (``<method>Stream``; see the class doc)."""
        key = (address, method)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = _Stream()
        if not stream.supported or stream.busy:
            return await self.call(address, method, request, timeout_ms=timeout_ms)
        stream.busy = True
        ok = False
        try:
            call = stream.call
            if call is None:
                stream.auth_generation = self._auth_generation()
                call = stream.call = getattr(self.stub(address), method + "Stream")(
                    metadata=self._call_metadata)
            try:
                async with asyncio.timeout(max(timeout_ms, 1) / 1000):
                    await call.write(request)
                    response = await call.read()
            except TimeoutError:
                raise RequestTimedOutError(
                    f"broker {address}: no answer to {method} within {timeout_ms} ms") from None
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as e:  # the stream ended
                error = await _stream_failure(call, e, address, method)
                if error is not None:
                    raise await self._refused(error, address, stream.auth_generation) from None
                stream.supported = False
                stream.close()
                return await self.call(address, method, request, timeout_ms=timeout_ms)
            if response is grpc.aio.EOF:  # ended with OK: the broker is stopping
                raise NetworkError(f"broker {address} ended the {method} stream")
            ok = True
            return response
        finally:
            stream.busy = False
            if not ok and stream.call is not None:
                stream.close()

    async def multiplex(self, address: str, method: str, request: Any, *,
                        timeout_ms: int) -> Any:
        """:meth:`call` of ``method`` over its multiplexed stream (``<method>Stream``): many
        requests in flight on one stream, written in call order (so the broker sees them in
        that order, as on a Kafka connection) and matched to their answers by the
        ``correlation_id`` field this sets on ``request``. A request without an answer within
        ``timeout_ms`` fails alone (RequestTimedOutError; a late answer is dropped); a broken
        stream fails every request on it (NetworkError) and the next call opens a new one. A
        broker without the stream is asked by unary calls from then on."""
        key = (address, method)
        mux = self._muxes.get(key)
        if mux is None:
            mux = self._muxes[key] = _Multiplexed()
        if not mux.supported:
            return await self.call(address, method, request, timeout_ms=timeout_ms)
        try:
            async with asyncio.timeout(max(timeout_ms, 1) / 1000):
                return await self._multiplexed(mux, address, method, request)
        except TimeoutError:
            raise RequestTimedOutError(
                f"broker {address}: no answer to {method} within {timeout_ms} ms") from None
        except _StreamUnsupported:
            return await self.call(address, method, request, timeout_ms=timeout_ms)

    async def _multiplexed(self, mux: _Multiplexed, address: str, method: str,
                           request: Any) -> Any:
        # The first request on a new stream goes alone: a broker without the method ends the
        # stream at once (UNIMPLEMENTED, or INTERNAL when more was written after), and only
        # then is it safe to resend what was on it by unary calls.
        while mux.supported and not mux.confirmed and mux.opening is not None:
            await asyncio.shield(mux.opening)
        if not mux.supported:
            raise _StreamUnsupported()
        opener = not mux.confirmed
        if opener:
            mux.opening = asyncio.get_running_loop().create_future()
        correlation_id = next(mux.ids)
        request.correlation_id = correlation_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        mux.pending[correlation_id] = future
        try:
            await self._write(mux, address, method, request)
            return await future
        finally:
            mux.pending.pop(correlation_id, None)
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                future.exception()  # seen, even when the write failed first
            if opener:
                opening, mux.opening = mux.opening, None
                if opening is not None and not opening.done():
                    opening.set_result(None)

    async def _write(self, mux: _Multiplexed, address: str, method: str, request: Any) -> None:
        """Write ``request`` on the stream (opened if needed), one writer at a time. A write
        that fails or is cut short (timeout, cancellation: half a message may be out) ends the
        stream for every request on it."""
        async with mux.write_lock:
            if not mux.supported:
                raise _StreamUnsupported()
            call = mux.call
            if call is None:
                mux.auth_generation = self._auth_generation()
                call = mux.call = getattr(self.stub(address), method + "Stream")(
                    metadata=self._call_metadata)
                mux.reader = asyncio.get_running_loop().create_task(
                    self._read_answers(mux, call, address, method))
            try:
                await call.write(request)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as e:  # the stream ended
                error = await _stream_failure(call, e, address, method)
                if error is None:
                    mux.supported = False
                    mux.fail_all(_StreamUnsupported())
                    raise _StreamUnsupported() from None
                error = await self._refused(error, address, mux.auth_generation)
                if mux.call is call:
                    mux.fail_all(error)
                raise error from None
            except BaseException as e:
                if mux.call is call:
                    mux.fail_all(NetworkError(f"broker {address}: {method} stream write cut "
                                              f"short ({type(e).__name__})"))
                raise

    async def _read_answers(self, mux: _Multiplexed, call: Any, address: str,
                            method: str) -> None:
        """Hand each answer on ``call`` to its request's future, until the stream ends."""
        error: BaseException
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    error = NetworkError(f"broker {address} ended the {method} stream")
                    break
                mux.confirmed = True
                future = mux.pending.get(response.correlation_id)
                if future is not None and not future.done():
                    future.set_result(response)
        except grpc.aio.AioRpcError as e:
            failure = await _stream_failure(call, e, address, method)
            if failure is None:
                mux.supported = False
            else:
                failure = await self._refused(failure, address, mux.auth_generation)
            error = failure or _StreamUnsupported()
        except asyncio.CancelledError:
            error = NetworkError(f"{method} stream to broker {address} closed")
        except BaseException as e:  # whatever broke the stream fails its requests (a bug: logged)
            log.error("reading the %s stream of broker %s failed", method, address, exc_info=e)
            if mux.call is call:
                mux.fail_all(NetworkError(f"broker {address}: {method} stream failed: {e!r}"))
            if not isinstance(e, Exception):
                raise
            return
        if mux.call is call:
            mux.fail_all(error)

    async def close(self) -> None:
        self._closed = True
        streams = list(self._streams.values())
        self._streams.clear()
        for stream in streams:
            stream.close()
        muxes = list(self._muxes.values())
        self._muxes.clear()
        for mux in muxes:
            mux.fail_all(NetworkError("the client is closed"))
            if mux.reader is not None:
                mux.reader.cancel()
        channels = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        for channel in channels:
            await channel.close(grace=None)
