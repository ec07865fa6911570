"""Incremental replica fetch sessions on a real cluster: idle replication carries nothing.

What it checks, on 3 controller + 3 broker processes with 2,000 partitions (RF 3):

* once every partition has its full ISR, one follower's replication links (its fetch streams to
  the two other brokers' inter-broker ports) carry next to nothing while the cluster is idle:
  under a kilobyte a second (empty incremental requests and answers, measured 600-700 B/s),
  where listing every partition in every long-poll cost ~93 KB/s (1,333 partitions x ~35 bytes
  x 2 rounds/s);
* a topic created meanwhile joins the follower's sessions without a full request (the
  follower's answer_now nudge): creating it and an acks=all record to each of its partitions
  cost a few kilobytes of replication, where one full request is 27 KB or more;
* produced records (acks=all, min.insync.replicas=2) still replicate: the follower reports the
  leader's log end offset and high watermark for them;
* a follower restart (kill -9: its streams, so its sessions, are gone; it starts with full
  requests) works: records produced while it was down (acks=1) reach it, every partition gets its
  full ISR back, the automatic leader rebalance (every second here) gives it back the
  leaderships it lost, and its links are quiet again once idle.

How: tests/integration/cluster_harness.py runs the nodes. The follower broker is started with
``grpc_proxy`` pointing at ``CountingProxy`` below (gRPC's own HTTP CONNECT support, as
test_network_partitions.py routes brokers), which splices each tunnel to its target and counts
the bytes both ways per target port; only the tunnels to the other brokers' inter-broker ports
are replication. The test speaks raw gRPC (Metadata, Produce, DescribeLogs) directly to the
brokers. Waits are bounded polls.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_harness import ClusterHarness
from replica_checks import GRPC_OPTIONS, RPC_TIMEOUT_S, records, wait_for

from tidelog.client import Admin, NewTopic
from tidelog.local_cluster import HOST
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import broker_pb2_grpc
from tidelog.v1.common_pb2 import ErrorCode

pytestmark = pytest.mark.integration

PARTITIONS = 2_000
TOPIC = "many"
OVERRIDES = {
    "controller": {"broker_session_timeout_ms": 3_000, "fence_check_interval_ms": 100,
                   # Automatic leader rebalance within the test (Kafka's default is 300 s).
                   "leader_imbalance_check_interval_ms": 1_000},
    "broker": {"heartbeat_interval_ms": 500},
}
#: Bytes per second an idle follower's two replication links may carry (measured here: 600-700;
#: with every partition in every request: ~93,000).
IDLE_BYTES_PER_S_MAX = 3_000
IDLE_WINDOW_S = 4.0
#: Replication bytes of creating a 6-partition topic and one acks=all record to each (its
#: partitions listed, their records; a full request alone would be 27 KB or more).
NEW_TOPIC_BYTES_MAX = 12_000
SETTLE_S = 2.0
FULL_ISR_TIMEOUT_S = 120.0


class CountingProxy:
    """An HTTP CONNECT proxy on HOST that splices every tunnel to its target and counts the
    bytes both ways per target port (its own event loop, on a thread)."""

    def __init__(self) -> None:
        self._bytes: collections.Counter[int] = collections.Counter()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._tunnel, HOST, 0), self._loop).result(10)
        self.port: int = self._server.sockets[0].getsockname()[1]

    def bytes_to(self, ports: set[int]) -> int:
        with self._lock:
            return sum(self._bytes[p] for p in ports)

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_writer = None
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
            if method != "CONNECT":
                writer.write(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                return
            host, port = target.rsplit(":", 1)
            upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 OK\r\n\r\n")
            await writer.drain()
            await asyncio.gather(self._pipe(reader, upstream_writer, int(port)),
                                 self._pipe(upstream_reader, writer, int(port)))
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                TimeoutError, ValueError):
            pass
        finally:
            for w in (writer, upstream_writer):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    port: int) -> None:
        try:
            while chunk := await reader.read(64 * 1024):
                with self._lock:
                    self._bytes[port] += len(chunk)
                writer.write(chunk)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.close()


@pytest.fixture(scope="module")
def proxy() -> Iterator[CountingProxy]:
    counting = CountingProxy()
    try:
        yield counting
    finally:
        counting.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory,
            proxy: CountingProxy) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("fetch-sessions") / "cluster"
    with ClusterHarness.started(base, controllers=3, brokers=3, overrides=OVERRIDES) as harness:
        # no_grpc_proxy="" overrides a no_proxy that would exempt 127.0.0.1.
        harness.set_env(harness.broker_names[-1], {"grpc_proxy": f"http://{HOST}:{proxy.port}",
                                                   "no_grpc_proxy": ""})
        harness.start_brokers()
        yield harness


class Brokers:
    """Raw BrokerService stubs by broker id."""

    def __init__(self, cluster: ClusterHarness) -> None:
        self.cluster = cluster
        self.ids = {cluster.node(n).node_id: n for n in cluster.broker_names}
        self._channels: list[grpc.Channel] = []
        self._stubs: dict[int, Any] = {}

    def stub(self, broker_id: int) -> Any:
        if broker_id not in self._stubs:
            port = self.cluster.node(self.ids[broker_id]).broker_port
            channel = grpc.insecure_channel(f"{HOST}:{port}", options=GRPC_OPTIONS)
            self._channels.append(channel)
            self._stubs[broker_id] = broker_pb2_grpc.BrokerServiceStub(channel)
        return self._stubs[broker_id]

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def partitions(self, via: int, topic: str = TOPIC) -> list[pb.PartitionMetadata] | None:
        try:
            md = self.stub(via).Metadata(pb.MetadataRequest(topics=[topic]),
                                         timeout=RPC_TIMEOUT_S)
        except grpc.RpcError:
            return None
        topic = md.topics[0]
        return list(topic.partitions) if topic.error_code == ErrorCode.NONE else None

    def all_full(self, via: int) -> bool:
        parts = self.partitions(via)
        return parts is not None and len(parts) == PARTITIONS and all(
            p.leader >= 0 and len(p.isr) == 3 for p in parts)

    def produce(self, partition: pb.PartitionMetadata, value: bytes, *, acks: int,
                topic: str = TOPIC) -> int:
        request = pb.ProduceRequest(acks=acks, timeout_ms=10_000)
        request.topics.add(name=topic).partitions.add(partition_id=partition.partition_id,
                                                      batch=records(value))
        answer = self.stub(partition.leader).Produce(request, timeout=RPC_TIMEOUT_S)
        return int(answer.topics[0].partitions[0].error_code)

    def logs(self, broker_id: int) -> dict[int, pb.DescribeLogsResponse.PartitionLog]:
        request = pb.DescribeLogsRequest()
        request.topics.add(name=TOPIC)
        try:
            answer = self.stub(broker_id).DescribeLogs(request, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError:
            return {}
        return {p.partition_id: p for p in answer.partitions}


def idle_rate(proxy: CountingProxy, ports: set[int]) -> float:
    """Bytes per second on the follower's replication links over IDLE_WINDOW_S."""
    time.sleep(SETTLE_S)
    before = proxy.bytes_to(ports)
    time.sleep(IDLE_WINDOW_S)
    return (proxy.bytes_to(ports) - before) / IDLE_WINDOW_S


def test_idle_replication_carries_nothing_and_restarts_start_full(
        cluster: ClusterHarness, proxy: CountingProxy) -> None:
    brokers = Brokers(cluster)
    follower_name = cluster.broker_names[-1]
    follower = cluster.node(follower_name).node_id
    others = [b for b in brokers.ids if b != follower]
    ports = {cluster.node(brokers.ids[b]).inter_broker_port for b in others}
    try:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3,
                                          configs={"min.insync.replicas": "2"})],
                                timeout_ms=60_000).all()
        wait_for(lambda: brokers.all_full(others[0]), "every partition with its full ISR",
                 FULL_ISR_TIMEOUT_S)
        wait_for(lambda: len(brokers.logs(follower)) == PARTITIONS, "the follower hosting all",
                 FULL_ISR_TIMEOUT_S)
        # Its first (full) requests list every partition it follows (~20 bytes each).
        wait_for(lambda: proxy.bytes_to(ports) > PARTITIONS * 2 // 3 * 20,
                 "the follower fetching through the proxy", FULL_ISR_TIMEOUT_S)

        rate = idle_rate(proxy, ports)
        assert rate < IDLE_BYTES_PER_S_MAX, f"idle replication carried {rate:.0f} B/s"

        # A new topic joins the sessions: the follower asks the leaders to answer their polls
        # now (answer_now) and lists only the new partitions; no full request (one would list
        # the ~1,333 partitions it follows, 27 KB or more).
        before = proxy.bytes_to(ports)
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic("fresh", 6, 3)], timeout_ms=60_000).all()
        wait_for(lambda: (p := brokers.partitions(others[0], "fresh")) is not None
                 and all(len(q.isr) == 3 for q in p), "the new topic led, full ISRs", 30)
        fresh = brokers.partitions(others[0], "fresh")
        assert fresh is not None
        for p in fresh:
            assert brokers.produce(p, b"f", acks=-1, topic="fresh") == ErrorCode.NONE
        added = proxy.bytes_to(ports) - before
        assert added < NEW_TOPIC_BYTES_MAX, f"a new topic cost {added} bytes of replication"

        # Produced records still replicate, and the follower learns the HW.
        parts = brokers.partitions(others[0])
        assert parts is not None
        chosen = [p for p in parts if p.leader != follower][:20]
        for p in chosen:
            assert brokers.produce(p, b"acked-%d" % p.partition_id, acks=-1) == ErrorCode.NONE

        def replicated() -> bool:
            logs = brokers.logs(follower)
            return all(p.partition_id in logs and logs[p.partition_id].log_end_offset == 1
                       and logs[p.partition_id].high_watermark == 1 for p in chosen)
        wait_for(replicated, "the follower holding the records, at the leader's HW", 30)

        # A follower restart: new streams, full requests; what it missed reaches it.
        cluster.kill(follower_name)
        missed = [p for p in parts if p.leader != follower][20:40]
        for p in missed:
            assert brokers.produce(p, b"while-down-%d" % p.partition_id, acks=1) \
                == ErrorCode.NONE
        cluster.start(follower_name)

        def caught_up() -> bool:
            logs = brokers.logs(follower)
            return all(p.partition_id in logs and logs[p.partition_id].log_end_offset == 1
                       for p in missed)
        wait_for(caught_up, "the restarted follower holding what it missed", 60)
        wait_for(lambda: brokers.all_full(others[0]), "full ISRs after the restart",
                 FULL_ISR_TIMEOUT_S)
        # Its leaderships moved away when it died; the automatic leader rebalance gives each
        # partition back to its preferred replica (the first).
        wait_for(lambda: (p := brokers.partitions(others[0])) is not None
                 and all(q.leader == q.replicas[0] for q in p),
                 "every partition led by its preferred replica again", FULL_ISR_TIMEOUT_S)
        rate = idle_rate(proxy, ports)
        assert rate < IDLE_BYTES_PER_S_MAX, f"idle after the restart: {rate:.0f} B/s"
    finally:
        brokers.close()
