"""How the client types a transport-level gRPC failure (tidelog.client._io.error_from_rpc).

RESOURCE_EXHAUSTED has two causes that need opposite handling: a message above the channel's size
limit (not retriable: the same bytes fail again) and a server at its concurrent-RPC limit (the
request was never handled: retriable). Each status is built as grpc.aio builds it and mapped.
"""

from __future__ import annotations

import grpc
import pytest

from tidelog.client._io import error_from_rpc
from tidelog.errors import (
    InvalidRequestError,
    NetworkError,
    RecordListTooLargeError,
    RequestTimedOutError,
    TidelogError,
    UnsupportedVersionError,
)


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


@pytest.mark.parametrize(("code", "details", "expected", "retriable"), [
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!", NetworkError, True),
    (grpc.StatusCode.RESOURCE_EXHAUSTED,
     "Received message larger than max (70000000 vs. 67108864)", RecordListTooLargeError, False),
    (grpc.StatusCode.UNAVAILABLE, "connection refused", NetworkError, True),
    (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", RequestTimedOutError, True),
    (grpc.StatusCode.UNIMPLEMENTED, "", UnsupportedVersionError, False),
    (grpc.StatusCode.INVALID_ARGUMENT, "not a valid message", InvalidRequestError, False),
])
def test_transport_failures_are_typed(code: grpc.StatusCode, details: str,
                                      expected: type[TidelogError], retriable: bool) -> None:
    error = error_from_rpc(rpc_error(code, details), "127.0.0.1:9092")
    assert type(error) is expected
    assert error.retriable is retriable
    assert "127.0.0.1:9092" in error.message
