"""Bounded request streams: how a broker serves a bidirectional gRPC stream without letting a
client make it buffer without end.

A stream handler reads requests, handles each, and writes answers. A client that keeps writing
requests and never reads its answers would, without a bound, make the broker read every request,
compute every answer and hold them all, since gRPC takes an answer only as fast as the client reads
(its flow control). :func:`serve_bounded` bounds two things per stream:

- requests in flight: read, but their answer not yet taken by gRPC (``in_flight_max``);
- bytes held: of requests read and still being handled, then of their answers until gRPC takes
  them (``held_bytes_max``; a request's bytes are swapped for its answer's when it is done).

Past either bound the broker stops *reading* the stream. The requests the client writes then
fill gRPC's flow-control window and the client's writes wait: the push-back reaches the client
through the transport, and a client with a request timeout sees it as a timeout (retriable). What
one stream holds is then bounded by the two limits plus the window, however long the client
keeps writing. Nothing is refused, so a client that does read its answers never sees an error
from these limits, only a pause while earlier requests finish.

Answers go out as they complete (``ordered=False``: ProduceStream, matched by correlation id) or
in request order (``ordered=True``: FetchStream, which has no correlation id). Each request is
handled in its own task, started in arrival order. The limits are ``tidelog.limits``'
``PRODUCE_STREAM_IN_FLIGHT_MAX``, ``FETCH_STREAM_IN_FLIGHT_MAX`` and ``STREAM_HELD_BYTES_MAX``;
ReplicaService.FetchStream can use the same helper with its own limits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

__all__ = ["ByteSized", "StreamLimits", "serve_bounded"]


class ByteSized(Protocol):
    """A protobuf message, as far as the bounds need one: its encoded size."""

    def ByteSize(self) -> int: ...


Req = TypeVar("Req", bound=ByteSized)
Resp = TypeVar("Resp", bound=ByteSized)


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """What one stream may hold: requests read and not answered, and the bytes of those
    requests and of their answers not yet sent."""

    in_flight_max: int
    held_bytes_max: int

    def __post_init__(self) -> None:
        if self.in_flight_max < 1 or self.held_bytes_max < 1:
            raise ValueError(f"stream limits must be positive: {self}")


class _Gate:
    """Counts what a stream holds; the reader waits on it before reading the next request."""

    def __init__(self, limits: StreamLimits) -> None:
        self._limits = limits
        self._changed = asyncio.Event()
        self.in_flight = 0
        self.held_bytes = 0

    def is_open(self) -> bool:
        return (self.in_flight < self._limits.in_flight_max
                and self.held_bytes < self._limits.held_bytes_max)

    async def wait_open(self) -> None:
        while not self.is_open():
            self._changed.clear()
            await self._changed.wait()

    def on_answer_sent(self, size: int) -> None:
        self.in_flight -= 1
        self.held_bytes -= size
        self._changed.set()


async def serve_bounded(
    requests: AsyncIterator[Req],
    handle: Callable[[Req], Awaitable[Resp]],
    limits: StreamLimits,
    *,
    ordered: bool,
) -> AsyncGenerator[Resp, None]:
    """Answers to ``requests``, each from ``handle``, holding at most ``limits`` (module doc).

    An exception from ``handle`` ends the stream with it (as an unhandled error in a gRPC
    handler does); a handler that must keep the stream alive answers its own errors. When the
    client ends its side, the answers still owed are sent before the stream ends.
    """
    gate = _Gate(limits)
    # Unordered: finished answers (or the error that ends the stream), None at the end.
    # Ordered: the tasks themselves, in request order, None at the end.
    done: asyncio.Queue[tuple[Resp, int] | BaseException | None] = asyncio.Queue()
    queued: asyncio.Queue[asyncio.Task[tuple[Resp, int]] | None] = asyncio.Queue()
    tasks: set[asyncio.Task[tuple[Resp, int]]] = set()
    loop = asyncio.get_running_loop()

    async def answer(request: Req, request_size: int) -> tuple[Resp, int]:
        response = await handle(request)
        size = response.ByteSize()
        gate.held_bytes += size - request_size
        return response, size

    def on_done(task: asyncio.Task[tuple[Resp, int]]) -> None:
        tasks.discard(task)
        if not ordered and not task.cancelled():
            error = task.exception()
            done.put_nowait(error if error is not None else task.result())

    async def read() -> None:
        try:
            stream = aiter(requests)
            while True:
                await gate.wait_open()
                try:
                    request = await anext(stream)
                except StopAsyncIteration:
                    break
                gate.in_flight += 1
                request_size = request.ByteSize()
                gate.held_bytes += request_size
                task = loop.create_task(answer(request, request_size))
                tasks.add(task)
                task.add_done_callback(on_done)
                if ordered:
                    queued.put_nowait(task)
            while tasks and not ordered:
                await asyncio.wait(set(tasks))
        except BaseException as error:
            done.put_nowait(error)
            raise
        finally:
            (queued if ordered else done).put_nowait(None)

    reader = loop.create_task(read())
    item: tuple[Resp, int] | BaseException | None
    try:
        while True:
            if ordered:
                task = await queued.get()
                item = None if task is None else await task
            else:
                item = await done.get()
            if item is None:
                break
            if isinstance(item, BaseException):
                raise item
            response, size = item
            yield response
            gate.on_answer_sent(size)
        await reader  # a read error (the client's stream broke) ends the stream with it
    finally:
        reader.cancel()
        for task in list(tasks):
            task.cancel()
