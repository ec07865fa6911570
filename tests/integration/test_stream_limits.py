"""A client that writes on BrokerService's streams and never reads its answers: the broker's
memory stays bounded, the client's writes are pushed back, and other clients are served.

How: a real cluster (1 controller, 1 broker: tidelog.local_cluster through the harness). A raw
grpc.aio client opens ProduceStream (or FetchStream) and writes requests, each bounded by a
write timeout, up to a bounded count and time, never reading an answer. Each ProduceStream
request names 5,000 partitions of an unknown topic, so its answer (one error per partition) is
~50x the request: before the limits, the broker read every request and held every answer, and
its RSS grew by far more than 100 MiB within a few hundred requests (measured: +113 MiB at 512
requests of 2,000 partitions). Each FetchStream request asks for a large fetch of a topic with
data. The broker's RSS is read from /proc/<pid>/status (VmRSS) before and after. Meanwhile and
afterwards a second client, on its own connection, still produces and fetches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cluster_harness import ClusterHarness

from tidelog import limits
from tidelog.client import Admin, NewTopic
from tidelog.record_batch import NewRecord, build_batch, decode_records, parse_batch
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import broker_pb2_grpc

pytestmark = pytest.mark.integration

#: The broker may grow by at most this while a client never reads (the limits hold ~30 MiB).
RSS_GROWTH_MAX_MIB = 100
#: Bounds of the abusive client: requests, wall time, and one write's wait.
WRITES_MAX = 2_000
ABUSE_S = 30.0
WRITE_TIMEOUT_S = 2.0
UNKNOWN_TOPIC = "x" * limits.TOPIC_NAME_LENGTH_MAX
PARTITIONS_PER_REQUEST = 5_000
TOPIC = "served"
CHANNEL_OPTIONS = [("grpc.max_send_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                   ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_BYTES_MAX)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("stream-limits") / "cluster"
    with ClusterHarness.started(base, controllers=1, brokers=1) as harness:
        harness.start_brokers()
        with Admin(harness.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 1)]).all()
        yield harness


def broker_rss_mib(cluster: ClusterHarness) -> float:
    pid = cluster.local.nodes[cluster.broker_names[0]].pid
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for broker pid {pid}")


def produce_and_consume(cluster: ClusterHarness, value: bytes, count: int = 10) -> None:
    """Another client's round trip on its own connection: ``count`` records produced with
    acks=all (unary Produce) and fetched back (unary Fetch)."""
    channel = grpc.insecure_channel(cluster.bootstrap.split(",")[0], options=CHANNEL_OPTIONS)
    try:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        batch = build_batch([NewRecord(None, value)] * count, now_ms=int(time.time() * 1000))
        produced = stub.Produce(pb.ProduceRequest(acks=-1, timeout_ms=10_000, topics=[
            pb.ProduceRequest.TopicData(name=TOPIC, partitions=[
                pb.ProduceRequest.PartitionData(partition_id=0, batch=batch)])]), timeout=20)
        answer = produced.topics[0].partitions[0]
        assert answer.error_code == 0, answer.error_message
        fetched = stub.Fetch(fetch_request(answer.base_offset, 1024 * 1024), timeout=20)
        partition = fetched.topics[0].partitions[0]
        assert partition.error_code == 0, partition.error_message
        records = [r for b in partition.batches for r in decode_records(parse_batch(b))]
        assert [r.value for r in records if r.offset >= answer.base_offset][:count] \
            == [value] * count
    finally:
        channel.close()


def fetch_request(offset: int, max_bytes: int, *, partitions: int = 1) -> pb.FetchRequest:
    """A fetch of partition 0 from ``offset``; ``partitions`` > 1 adds partitions that do not
    exist (each answered with its own error)."""
    return pb.FetchRequest(max_wait_ms=0, max_bytes=max_bytes, topics=[
        pb.FetchRequest.TopicData(name=TOPIC, partitions=[pb.FetchRequest.PartitionData(
            partition_id=i, fetch_offset=offset, current_leader_epoch=-1,
            last_fetched_epoch=-1, partition_max_bytes=max_bytes) for i in range(partitions)])])


async def write_without_reading(cluster: ClusterHarness, method: str,
                                request: pb.ProduceRequest | pb.FetchRequest) -> tuple[int, bool]:
    """Write ``request`` on a new ``method`` stream until a write waits longer than
    WRITE_TIMEOUT_S (pushed back), WRITES_MAX or ABUSE_S; read nothing. Checks, while the
    stream is still open and unread, that another client is served. Returns (writes, pushed
    back)."""
    channel = grpc.aio.insecure_channel(cluster.bootstrap.split(",")[0], options=CHANNEL_OPTIONS)
    call = getattr(broker_pb2_grpc.BrokerServiceStub(channel), method)()
    writes, pushed_back = 0, False
    deadline = time.monotonic() + ABUSE_S
    try:
        while writes < WRITES_MAX and time.monotonic() < deadline:
            try:
                await asyncio.wait_for(call.write(request), WRITE_TIMEOUT_S)
            except TimeoutError:
                pushed_back = True
                break
            except grpc.aio.AioRpcError as error:  # refused: must be a retriable status
                assert error.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                        grpc.StatusCode.UNAVAILABLE), error
                pushed_back = True
                break
            writes += 1
        # The stream is still open and unread: other clients are served meanwhile.
        await asyncio.to_thread(produce_and_consume, cluster, b"meanwhile")
    finally:
        call.cancel()
        await channel.close()
    return writes, pushed_back


def test_produce_stream_never_read(cluster: ClusterHarness) -> None:
    request = pb.ProduceRequest(acks=1, timeout_ms=1_000, topics=[pb.ProduceRequest.TopicData(
        name=UNKNOWN_TOPIC,
        partitions=[pb.ProduceRequest.PartitionData(partition_id=i)
                    for i in range(PARTITIONS_PER_REQUEST)])])
    before = broker_rss_mib(cluster)
    writes, pushed_back = asyncio.run(write_without_reading(cluster, "ProduceStream", request))
    growth = broker_rss_mib(cluster) - before
    assert growth < RSS_GROWTH_MAX_MIB, f"broker RSS grew {growth:.0f} MiB over {writes} writes"
    assert pushed_back, f"{writes} writes of {request.ByteSize()} bytes were never pushed back"
    produce_and_consume(cluster, b"after")


def test_fetch_stream_never_read(cluster: ClusterHarness) -> None:
    for _ in range(20):  # ~20 MB to fetch, over and over
        produce_and_consume(cluster, b"v" * 100_000)
    # ~20 MB answered per request, and requests large enough (PARTITIONS_PER_REQUEST partitions)
    # that the client's writes fill gRPC's window within WRITES_MAX.
    request = fetch_request(0, limits.FETCH_BYTES_MAX_DEFAULT, partitions=PARTITIONS_PER_REQUEST)
    before = broker_rss_mib(cluster)
    writes, pushed_back = asyncio.run(write_without_reading(cluster, "FetchStream", request))
    growth = broker_rss_mib(cluster) - before
    assert growth < RSS_GROWTH_MAX_MIB, f"broker RSS grew {growth:.0f} MiB over {writes} writes"
    assert pushed_back, f"{writes} fetch requests were never pushed back"
    produce_and_consume(cluster, b"after")
