"""tidelog/rpc_guard.py: an RPC the contract declares but a servicer does not implement answers
UNIMPLEMENTED without grpcio's traceback.

Every RPC of the nodes' services is implemented now (the group RPCs were the last), so this is
checked on a real in-process gRPC server with the guard as its first interceptor and the
generated BrokerService base (every method raises NotImplementedError), as tidelog/node.py
builds its servers. It used to be checked on FindCoordinator of a real broker
(tests/integration/test_undecodable_requests.py).
"""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest

from tidelog.rpc_guard import DecodeGuardInterceptor
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import broker_pb2_grpc


def test_an_rpc_not_implemented_is_unimplemented_without_a_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        server = grpc.aio.server(interceptors=[DecodeGuardInterceptor()])
        broker_pb2_grpc.add_BrokerServiceServicer_to_server(
            broker_pb2_grpc.BrokerServiceServicer(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = broker_pb2_grpc.BrokerServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=["g"]),
                                               timeout=10)
                assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
                assert "FindCoordinator" in (refused.value.details() or "")
        finally:
            await server.stop(None)

    with caplog.at_level(logging.DEBUG):
        asyncio.run(main())
    assert "NotImplementedError" not in caplog.text
    assert "Traceback" not in caplog.text
