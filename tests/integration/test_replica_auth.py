"""Who may replicate: follower fetches from anyone but a broker of the cluster are refused.

What it checks, on a real cluster (3 controller + 3 broker processes, cluster secret as
``tidelog cluster up`` writes it):

* ReplicaService is not served on a broker's client port (UNIMPLEMENTED);
* on the inter-broker port, a fetch without a credential, with a credential made from another
  secret, or with a malformed peer id is UNAUTHENTICATED; broker A's valid credential fetching
  as replica B is PERMISSION_DENIED;
* the controllers refuse broker RPCs without a credential (UNAUTHENTICATED) while
  DescribeQuorum stays open;
* the scenario of issue 9: RF=3, min.insync.replicas=2, both followers SIGSTOPped, a client sends
  follower fetches in their names (with a broker epoch far above any registration, as the old
  ">=" check accepted) on every port it can reach, and an acks=all produce is NOT acknowledged;
  after SIGCONT the partition is fully in sync, the record is readable and replicas converge.

How: tests/integration/cluster_harness.py runs the nodes; the test speaks raw gRPC
(tests/integration/replica_checks.py's Client for BrokerService, ReplicaServiceStub for the
spoofed fetches). Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_harness import ClusterHarness
from replica_checks import RPC_TIMEOUT_S, Client, all_running, records, wait_for

from tidelog.cluster_secret import (
    BROKERS,
    PEER_AUTH_METADATA,
    PEER_ID_METADATA,
    broker_credential,
    generate_secret,
    read_secret_file,
)
from tidelog.local_cluster import HOST
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import broker_pb2_grpc, controller_pb2, controller_pb2_grpc
from tidelog.v1.common_pb2 import ErrorCode

pytestmark = pytest.mark.integration

OVERRIDES = {
    "controller": {"broker_session_timeout_ms": 3_000, "fence_check_interval_ms": 100},
    "broker": {"heartbeat_interval_ms": 500, "replica_lag_time_max_ms": 10_000,
               "replica_fetch_wait_max_ms": 200},
}
#: A broker epoch above any registration: what a spoofer sends (the old check was ">=").
FORGED_EPOCH = 2**62


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("replica-auth") / "cluster"
    with ClusterHarness.started(base, controllers=3, brokers=3, overrides=OVERRIDES) as harness:
        harness.start_brokers()
        yield harness


@pytest.fixture
def client(cluster: ClusterHarness) -> Iterator[Client]:
    all_running(cluster)
    c = Client(cluster)
    try:
        yield c
    finally:
        c.close()


def _secret(cluster: ClusterHarness) -> str:
    return read_secret_file(cluster.local.secret_path)


def _key(secret: str, broker_id: int) -> str:
    """What broker ``broker_id`` presents to another broker's inter-broker listener."""
    return broker_credential(secret, broker_id).presented_to(BROKERS)


def _replica_stub(port: int) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(f"{HOST}:{port}", options=[("grpc.enable_http_proxy", 0)])
    return channel, broker_pb2_grpc.ReplicaServiceStub(channel)


def _spoofed_fetch(client: Client, topic: str, replica_id: int, fetch_offset: int
                   ) -> pb.FetchRequest:
    partition = client.partition(topic)
    request = pb.FetchRequest(replica_id=replica_id, replica_broker_epoch=FORGED_EPOCH,
                              max_wait_ms=0, min_bytes=0, max_bytes=1 << 20)
    request.topics.add(name=topic).partitions.add(
        partition_id=0, fetch_offset=fetch_offset, current_leader_epoch=partition.leader_epoch,
        last_fetched_epoch=-1, partition_max_bytes=1 << 20)
    return request


def _status(stub: Any, request: pb.FetchRequest, metadata: Any = None) -> grpc.StatusCode:
    try:
        stub.Fetch(request, timeout=RPC_TIMEOUT_S, metadata=metadata)
    except grpc.RpcError as error:
        return error.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def test_replica_service_only_on_the_inter_broker_port_and_only_for_brokers(
        cluster: ClusterHarness, client: Client) -> None:
    client.create_topic("auth", sorted(client.names))
    leader = client.leader("auth")
    a, b = [x for x in sorted(client.names) if x != leader]
    node = cluster.node(client.names[leader])
    request = _spoofed_fetch(client, "auth", b, 0)
    secret = _secret(cluster)
    channels = []
    try:
        channel, on_client_port = _replica_stub(node.broker_port)
        channels.append(channel)
        assert _status(on_client_port, request) == grpc.StatusCode.UNIMPLEMENTED

        channel, inter = _replica_stub(node.inter_broker_port)
        channels.append(channel)
        assert _status(inter, request) == grpc.StatusCode.UNAUTHENTICATED
        other_secret = ((PEER_ID_METADATA, str(b)),
                        (PEER_AUTH_METADATA, _key(generate_secret(), b)))
        assert _status(inter, request, other_secret) == grpc.StatusCode.UNAUTHENTICATED
        no_credential = ((PEER_ID_METADATA, str(b)),)
        assert _status(inter, request, no_credential) == grpc.StatusCode.UNAUTHENTICATED
        not_an_id = ((PEER_ID_METADATA, "x" * 5000),
                     (PEER_AUTH_METADATA, _key(secret, b)))
        assert _status(inter, request, not_an_id) == grpc.StatusCode.UNAUTHENTICATED
        try:
            inter.Fetch(request, timeout=RPC_TIMEOUT_S, metadata=no_credential)
        except grpc.RpcError as error:
            assert PEER_AUTH_METADATA in (error.details() or ""), error.details()

        # Broker A's real credential cannot fetch as broker B.
        as_a = ((PEER_ID_METADATA, str(a)), (PEER_AUTH_METADATA, _key(secret, a)))
        assert _status(inter, request, as_a) == grpc.StatusCode.PERMISSION_DENIED
        # With its own id it gets through to the handler, which wants the exact broker epoch.
        own = _spoofed_fetch(client, "auth", a, 0)
        answer = inter.Fetch(own, timeout=RPC_TIMEOUT_S, metadata=as_a)
        assert answer.error_code == ErrorCode.STALE_BROKER_EPOCH, answer
    finally:
        for channel in channels:
            channel.close()


def test_controllers_refuse_broker_rpcs_without_a_credential(cluster: ClusterHarness,
                                                             client: Client) -> None:
    name = cluster.controller_names[0]
    port = cluster.node(name).controller_port
    with grpc.insecure_channel(f"{HOST}:{port}",
                               options=[("grpc.enable_http_proxy", 0)]) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        quorum = stub.DescribeQuorum(controller_pb2.DescribeQuorumRequest(),
                                     timeout=RPC_TIMEOUT_S)
        assert quorum.voters, "DescribeQuorum stays open (the CLI's cluster quorum)"
        calls = [("BrokerHeartbeat", controller_pb2.BrokerHeartbeatRequest(broker_id=1)),
                 ("CreateTopics", controller_pb2.CreateTopicsRequest()),
                 ("AlterPartition", controller_pb2.AlterPartitionRequest(broker_id=1))]
        for method, request in calls:
            with pytest.raises(grpc.RpcError) as refused:
                getattr(stub, method)(request, timeout=RPC_TIMEOUT_S)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, method
        stream = stub.FetchMetadata(controller_pb2.FetchMetadataRequest(broker_id=1),
                                    timeout=RPC_TIMEOUT_S)
        with pytest.raises(grpc.RpcError) as refused:
            next(iter(stream))
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_spoofed_follower_fetches_do_not_acknowledge_an_acks_all_write(
        cluster: ClusterHarness, client: Client) -> None:
    """Issue 9's reproduction: before the fix the write below was acknowledged while only the
    leader held it."""
    replicas = sorted(client.names)
    client.create_topic("spoofed", replicas, min_insync_replicas="2")
    assert client.produce("spoofed", records(b"before")).error_code == ErrorCode.NONE
    leader = client.leader("spoofed")
    followers = [b for b in replicas if b != leader]
    end = client.wait_converged("spoofed", replicas)
    node = cluster.node(client.names[leader])
    ports = [node.broker_port, node.inter_broker_port]
    stop = threading.Event()
    answered: list[Any] = []

    def spoof() -> None:
        stubs = [_replica_stub(port) for port in ports]
        requests = [_spoofed_fetch(client, "spoofed", f, end + 1) for f in followers]
        try:
            while not stop.is_set():
                for _, stub in stubs:
                    for request in requests:
                        with contextlib.suppress(grpc.RpcError):
                            answered.append(stub.Fetch(request, timeout=2))
                time.sleep(0.01)
        finally:
            for channel, _ in stubs:
                channel.close()

    for follower in followers:
        cluster.pause(client.names[follower])
    spoofer = threading.Thread(target=spoof, daemon=True)
    spoofer.start()
    try:
        answer = client.produce("spoofed", records(b"spoofed"), acks=-1, timeout_ms=3_000)
    finally:
        stop.set()
        spoofer.join(timeout=10)
        for follower in followers:
            cluster.resume(client.names[follower])
    assert answer.error_code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS,
                                 ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND), answer
    assert not answered, f"a spoofed fetch was answered: {answered[0]}"
    wait_for(lambda: sorted(client.partition("spoofed").isr) == replicas, "all back in sync")
    client.wait_converged("spoofed", replicas)
    assert client.read_all("spoofed")[:1] == [b"before"]
