"""Requests that do not parse: answered INVALID_ARGUMENT naming the method, never logged as a
traceback, and the node goes on serving.

How: a real cluster (1 controller, 1 broker through the harness). A raw grpc client sends bytes
that are not a valid protobuf message (a truncated length-delimited field) to a unary method
(BrokerService.Metadata), into a client stream (BrokerService.ProduceStream, after a valid
request), and to the controller's open DescribeQuorum. Before tidelog.rpc_guard, grpcio's own
parser failure answered UNKNOWN and logged "Exception deserializing request!" with a traceback
for every such call: anyone who can reach a port could fill the logs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cluster_harness import ClusterHarness

from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import broker_pb2_grpc

pytestmark = pytest.mark.integration

#: Field 1, wire type 2 (length-delimited), length 100, then 3 bytes: truncated.
NOT_A_MESSAGE = b"\x0a\x64abc"
CALL_TIMEOUT_S = 10.0
CALLS = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("undecodable") / "cluster"
    with ClusterHarness.started(base, controllers=1, brokers=1) as harness:
        harness.start_brokers()
        yield harness


def raw_unary(channel: grpc.Channel, method: str) -> grpc.UnaryUnaryMultiCallable:
    return channel.unary_unary(method, request_serializer=None, response_deserializer=None)


def test_unparseable_requests_get_invalid_argument_and_no_traceback(
        cluster: ClusterHarness) -> None:
    broker = cluster.broker_names[0]
    controller = cluster.controller_names[0]
    broker_address = cluster.bootstrap.split(",")[0]
    controller_address = f"127.0.0.1:{cluster.node(controller).controller_port}"
    with grpc.insecure_channel(broker_address) as channel:
        metadata = raw_unary(channel, "/tidelog.v1.BrokerService/Metadata")
        for _ in range(CALLS):
            with pytest.raises(grpc.RpcError) as refused:
                metadata(NOT_A_MESSAGE, timeout=CALL_TIMEOUT_S)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "BrokerService/Metadata" in (refused.value.details() or "")

        stream = channel.stream_stream("/tidelog.v1.BrokerService/ProduceStream",
                                       request_serializer=None, response_deserializer=None)
        valid = pb.ProduceRequest(correlation_id=1, acks=1, timeout_ms=1000).SerializeToString()
        with pytest.raises(grpc.RpcError) as ended:
            list(stream(iter([valid, NOT_A_MESSAGE]), timeout=CALL_TIMEOUT_S))
        assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        # The node still serves a valid request on the same channel.
        answer = broker_pb2_grpc.BrokerServiceStub(channel).Metadata(
            pb.MetadataRequest(), timeout=CALL_TIMEOUT_S)
        assert list(answer.brokers), answer
    with grpc.insecure_channel(controller_address) as channel:
        describe = raw_unary(channel, "/tidelog.v1.ControllerService/DescribeQuorum")
        with pytest.raises(grpc.RpcError) as refused:
            describe(NOT_A_MESSAGE, timeout=CALL_TIMEOUT_S)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    for name in (broker, controller):
        text = cluster.local.log_path(name).read_text()
        assert "Exception deserializing request" not in text, cluster.log_tail(name)
        assert cluster.is_running(name)


def test_an_empty_find_coordinator_is_answered_without_a_traceback(
        cluster: ClusterHarness) -> None:
    """FindCoordinator (implemented now; the UNIMPLEMENTED path of rpc_guard is checked in
    tests/unit/test_rpc_guard_unimplemented.py): an empty request gets an empty answer."""
    broker = cluster.broker_names[0]
    with grpc.insecure_channel(cluster.bootstrap.split(",")[0]) as channel:
        find = raw_unary(channel, "/tidelog.v1.BrokerService/FindCoordinator")
        assert pb.FindCoordinatorResponse.FromString(find(b"", timeout=CALL_TIMEOUT_S)) \
            == pb.FindCoordinatorResponse()
    text = cluster.local.log_path(broker).read_text()
    assert "Traceback" not in text, cluster.log_tail(broker)
