"""broker.stream_limits.serve_bounded: what one request stream may hold.

What it checks: a consumer of the answers that stops reading stops the reading of requests once
``in_flight_max`` requests are unanswered or ``held_bytes_max`` bytes are held; every
answer arrives when the consumer reads (in request order when ``ordered``); a handler's error
ends the stream with it. How: an in-memory async generator of requests that counts how many were
taken, real protobuf answers, and one event loop; no gRPC (tests/integration/test_stream_limits.py
runs the same code behind a real broker).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tidelog.broker.stream_limits import StreamLimits, serve_bounded
from tidelog.v1 import broker_pb2 as pb

REQUESTS = 1_000


class Requests:
    """``count`` requests numbered by correlation id, of about ``padding`` bytes each;
    ``taken`` says how many the server has read."""

    def __init__(self, count: int = REQUESTS, *, padding: int = 0) -> None:
        self.count = count
        self.padding = padding
        self.taken = 0

    async def __aiter__(self) -> AsyncIterator[pb.ProduceRequest]:
        topics = [pb.ProduceRequest.TopicData(name="x" * self.padding)] if self.padding else []
        for n in range(self.count):
            self.taken += 1
            yield pb.ProduceRequest(correlation_id=n, topics=topics)


async def answer(request: pb.ProduceRequest) -> pb.ProduceResponse:
    n = request.correlation_id
    await asyncio.sleep(0.001 * (n % 3))  # answers finish out of order
    return pb.ProduceResponse(correlation_id=n)


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0.002)


@pytest.mark.parametrize("ordered", [False, True])
def test_a_consumer_that_stops_reading_stops_the_reading_of_requests(ordered: bool) -> None:
    async def run() -> int:
        requests = Requests()
        answers = serve_bounded(aiter(requests), answer, StreamLimits(8, 1 << 20),
                                ordered=ordered)
        await anext(answers)  # then read nothing more
        await settle()
        await answers.aclose()
        return requests.taken

    assert asyncio.run(run()) <= 8 + 1


def test_held_bytes_bound_the_stream_too() -> None:
    async def run() -> int:
        requests = Requests(padding=10_000)
        answers = serve_bounded(aiter(requests), answer, StreamLimits(1_000, 50_000),
                                ordered=False)
        await anext(answers)
        await settle()
        await answers.aclose()
        return requests.taken

    # 50,000 bytes hold 5 requests of ~10 kB; the reader stops once they are held (plus the
    # one the consumer's answer released).
    assert asyncio.run(run()) <= 5 + 2


@pytest.mark.parametrize("ordered", [False, True])
def test_every_answer_arrives_when_read(ordered: bool) -> None:
    async def run() -> list[int]:
        answers = serve_bounded(aiter(Requests()), answer, StreamLimits(4, 1 << 20),
                                ordered=ordered)
        return [a.correlation_id async for a in answers]

    got = asyncio.run(run())
    assert sorted(got) == list(range(REQUESTS))
    if ordered:
        assert got == list(range(REQUESTS))


def test_a_handler_error_ends_the_stream() -> None:
    async def failing(request: pb.ProduceRequest) -> pb.ProduceResponse:
        if request.correlation_id == 3:
            raise RuntimeError("handler bug")
        return await answer(request)

    async def run() -> None:
        async for _ in serve_bounded(aiter(Requests()), failing, StreamLimits(4, 1 << 20),
                                     ordered=True):
            pass

    with pytest.raises(RuntimeError, match="handler bug"):
        asyncio.run(run())


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        StreamLimits(0, 1)
