"""The client's streams to a broker, against a real grpc.aio server running the broker's
BrokerService over an echo data plane.

Consumer fetches over one BrokerService.FetchStream per broker (``Connections.exchange``):
exchanges share one stream and get their own answers in order; a concurrent exchange goes by a
unary call; a timed-out or cancelled exchange closes the stream, so its late answer is never taken
for the next one; a broker without the stream is asked by unary calls from then on; a broker that
goes away is a NetworkError.

Produce requests over one multiplexed BrokerService.ProduceStream (``Connections.multiplex``):
many in flight, seen by the broker in the order written, answers matched by correlation id even
when they complete out of order; a request that times out fails alone; a broker without the
stream gets unary calls; a broken stream fails its requests with NetworkError and the next
request opens a new one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from tidelog.client._io import Connections
from tidelog.errors import NetworkError, RequestTimedOutError
from tidelog.v1 import broker_pb2 as pb


class _EchoPlane:
    """Answers a consumer fetch with its max_bytes (as the error message), after max_wait_ms;
    a produce with its timeout_ms (as throttle_time_ms), after timeout_ms when acks is -1."""

    def __init__(self) -> None:
        self.calls = 0
        self.produced: list[int] = []  # timeout_ms of each produce, in arrival order

    async def handle_produce(self, request: pb.ProduceRequest) -> pb.ProduceResponse:
        self.calls += 1
        self.produced.append(request.timeout_ms)
        if request.acks == -1:
            await asyncio.sleep(request.timeout_ms / 1000)
        return pb.ProduceResponse(throttle_time_ms=request.timeout_ms)

    async def handle_fetch(self, request: pb.FetchRequest) -> pb.FetchResponse:
        self.calls += 1
        if request.max_wait_ms:
            await asyncio.sleep(request.max_wait_ms / 1000)
        return pb.FetchResponse(error_message=str(request.max_bytes))


class _Runtime:
    def __init__(self, plane: _EchoPlane) -> None:
        from tidelog.broker.authz.authn import Authenticator
        from tidelog.broker.authz.gate import Gate
        from tidelog.config import AuthorizationConfig, SaslConfig
        from tidelog.metadata.image import MetadataImage

        self.data_plane = plane
        self.authz = Gate(AuthorizationConfig(), MetadataImage.empty)  # authorisation off
        self.authn = Authenticator(SaslConfig(), MetadataImage.empty,  # no SCRAM users
                                   certificates_verified=False, decoy_key=b"k" * 32)


async def _serve(plane: _EchoPlane, *, stream: bool) -> tuple[Any, int]:
    from tidelog.broker.service import BrokerService, add_to_server

    server = grpc.aio.server()
    if stream:
        add_to_server(server, _Runtime(plane))  # type: ignore[arg-type]
    else:  # an older broker: the unary Fetch only
        unary = BrokerService(_Runtime(plane))  # type: ignore[arg-type]
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "tidelog.v1.BrokerService", {
                "Fetch": grpc.unary_unary_rpc_method_handler(
                    unary.Fetch, request_deserializer=pb.FetchRequest.FromString,
                    response_serializer=pb.FetchResponse.SerializeToString),
                "Produce": grpc.unary_unary_rpc_method_handler(
                    unary.Produce, request_deserializer=pb.ProduceRequest.FromString,
                    response_serializer=pb.ProduceResponse.SerializeToString),
            }),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


def _fetch(n: int, wait_ms: int = 0) -> pb.FetchRequest:
    return pb.FetchRequest(replica_id=-1, max_bytes=n, max_wait_ms=wait_ms)


def test_fetches_share_one_stream_and_recover_from_a_lost_exchange() -> None:
    async def body() -> None:
        plane = _EchoPlane()
        server, port = await _serve(plane, stream=True)
        address = f"127.0.0.1:{port}"
        conns = Connections()
        try:
            calls = []
            for i in range(1, 6):
                answer = await conns.exchange(address, "Fetch", _fetch(i), timeout_ms=5_000)
                assert answer.error_message == str(i)
                calls.append(conns._streams[(address, "Fetch")].call)
            # The call objects themselves (not their ids, which a new call could reuse).
            assert all(c is calls[0] for c in calls), "the five fetches went over one stream"
            # A second exchange while one is out goes by a unary call, with its own answer.
            slow = asyncio.ensure_future(
                conns.exchange(address, "Fetch", _fetch(10, 200), timeout_ms=5_000))
            await asyncio.sleep(0.05)
            quick = await conns.exchange(address, "Fetch", _fetch(11), timeout_ms=5_000)
            assert quick.error_message == "11" and (await slow).error_message == "10"
            # A timed-out exchange closes the stream: its late answer is not the next one's.
            with pytest.raises(RequestTimedOutError):
                await conns.exchange(address, "Fetch", _fetch(20, 300), timeout_ms=50)
            assert conns._streams[(address, "Fetch")].call is None
            assert (await conns.exchange(address, "Fetch", _fetch(21),
                                         timeout_ms=5_000)).error_message == "21"
            # So does a cancelled one.
            task = asyncio.ensure_future(
                conns.exchange(address, "Fetch", _fetch(30, 300), timeout_ms=5_000))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await conns.exchange(address, "Fetch", _fetch(31),
                                         timeout_ms=5_000)).error_message == "31"
            # The broker goes away: a typed error, and a new stream once it is back.
            await server.stop(None)
            with pytest.raises(NetworkError):
                await conns.exchange(address, "Fetch", _fetch(40), timeout_ms=2_000)
        finally:
            await conns.close()
            await server.stop(None)

    asyncio.run(body())


def test_a_broker_without_the_stream_is_asked_by_unary_calls() -> None:
    async def body() -> None:
        plane = _EchoPlane()
        server, port = await _serve(plane, stream=False)
        address = f"127.0.0.1:{port}"
        conns = Connections()
        try:
            for i in range(1, 4):
                answer = await conns.exchange(address, "Fetch", _fetch(i), timeout_ms=5_000)
                assert answer.error_message == str(i)
            assert not conns._streams[(address, "Fetch")].supported
            assert plane.calls == 3
        finally:
            await conns.close()
            await server.stop(None)

    asyncio.run(body())


def test_a_stream_the_broker_ended_before_the_first_write_is_found_unsupported() -> None:
    """A broker without the method may end the stream before the client writes: the write
    then fails with "RPC already finished" or INTERNAL, and the call's status (UNIMPLEMENTED)
    is what tells the client to use unary calls (not a NetworkError to retry forever)."""
    from tidelog.client._io import _Multiplexed, _Stream

    async def body() -> None:
        plane = _EchoPlane()
        server, port = await _serve(plane, stream=False)
        address = f"127.0.0.1:{port}"
        conns = Connections()
        try:
            fetch = conns._streams[(address, "Fetch")] = _Stream()
            fetch.call = conns.stub(address).FetchStream()
            produce = conns._muxes[(address, "Produce")] = _Multiplexed()
            produce.call = conns.stub(address).ProduceStream()
            produce.reader = asyncio.ensure_future(
                conns._read_answers(produce, produce.call, address, "Produce"))
            await asyncio.sleep(0.2)  # the broker has refused both by now
            answer = await conns.exchange(address, "Fetch", _fetch(1), timeout_ms=5_000)
            assert answer.error_message == "1" and not fetch.supported
            produced = await conns.multiplex(address, "Produce", _produce(2), timeout_ms=5_000)
            assert produced.throttle_time_ms == 2 and not produce.supported
        finally:
            await conns.close()
            await server.stop(None)

    asyncio.run(body())


def _produce(tag: int, *, wait: bool = False) -> pb.ProduceRequest:
    return pb.ProduceRequest(acks=-1 if wait else 1, timeout_ms=tag)


def test_produce_requests_share_one_stream_in_order_with_answers_matched() -> None:
    async def body() -> None:
        plane = _EchoPlane()
        server, port = await _serve(plane, stream=True)
        address = f"127.0.0.1:{port}"
        conns = Connections()
        try:
            # Written in this order, answered out of it (the first waits longest).
            tags = [(300, True), (1, False), (150, True), (2, False), (3, False)]
            answers = await asyncio.gather(*(
                conns.multiplex(address, "Produce", _produce(tag, wait=wait), timeout_ms=5_000)
                for tag, wait in tags))
            assert [a.throttle_time_ms for a in answers] == [tag for tag, _ in tags]
            assert plane.produced == [tag for tag, _ in tags], "the broker saw the call order"
            mux = conns._muxes[(address, "Produce")]
            call = mux.call
            assert call is not None and not mux.pending
            # One request timing out fails alone; the stream and the others carry on.
            late = asyncio.ensure_future(
                conns.multiplex(address, "Produce", _produce(400, wait=True), timeout_ms=100))
            other = await conns.multiplex(address, "Produce", _produce(4), timeout_ms=5_000)
            assert other.throttle_time_ms == 4
            with pytest.raises(RequestTimedOutError):
                await late
            await asyncio.sleep(0.4)  # its answer arrives late and is dropped
            again = await conns.multiplex(address, "Produce", _produce(5), timeout_ms=5_000)
            assert again.throttle_time_ms == 5 and mux.call is call, "still the one stream"
            # The broker goes away: what is in flight fails with NetworkError.
            waiting = asyncio.ensure_future(
                conns.multiplex(address, "Produce", _produce(2_000, wait=True),
                                timeout_ms=5_000))
            await asyncio.sleep(0.1)
            await server.stop(None)
            with pytest.raises(NetworkError):
                await waiting
            assert mux.call is None
        finally:
            await conns.close()
            await server.stop(None)

    asyncio.run(body())


def test_a_broker_without_the_produce_stream_is_asked_by_unary_calls() -> None:
    async def body() -> None:
        plane = _EchoPlane()
        server, port = await _serve(plane, stream=False)
        address = f"127.0.0.1:{port}"
        conns = Connections()
        try:
            answers = await asyncio.gather(*(
                conns.multiplex(address, "Produce", _produce(i), timeout_ms=5_000)
                for i in range(1, 4)))
            assert [a.throttle_time_ms for a in answers] == [1, 2, 3]
            assert not conns._muxes[(address, "Produce")].supported
            answer = await conns.multiplex(address, "Produce", _produce(9), timeout_ms=5_000)
            assert answer.throttle_time_ms == 9 and plane.calls == 4
        finally:
            await conns.close()
            await server.stop(None)

    asyncio.run(body())
