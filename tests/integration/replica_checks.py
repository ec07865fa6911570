"""Helpers shared by the tests that check replicas on a real cluster run by cluster_harness.py
(test_broker_replication.py, test_network_partitions.py, test_cluster_restart.py).

What it offers:

- ``wait_for``: poll a check until it returns something truthy, AssertionError at the deadline
  (``WAIT_S`` by default; ``RPC_TIMEOUT_S`` bounds a single call);
- raw gRPC, without the client library: ``records`` builds a record batch (idempotent if given a
  producer id), ``values_of`` decodes the values of stored batches, ``RETRIABLE`` are the error
  codes a producer retries on, and :class:`Client` makes BrokerService calls by broker id
  (Metadata: partition 0's leader, ISR and the unfenced brokers as some broker sees them;
  CreateTopics, Produce, Fetch, DescribeLogs; waits until every replica has converged);
- the cluster: ``all_running`` (a fixture's reset: every node running and ready again),
  ``broker_ids``, ``broker_name``;
- on disk: ``open_storage`` opens a killed broker's RocksDB with broker.storage.Storage (recovery
  included, as a restart would), and ``assert_replicas_identical`` compares replicas byte for
  byte: the wire has no "read a follower's log" call, so it waits until every replica has the
  leader's LEO, kills the brokers (-9), compares each one's stored batches per offset, and starts
  the brokers again;
- ``read_all``: partitions read back with tidelog's Consumer, from the log start up to the high
  watermark.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from cluster_harness import LEADER_TIMEOUT_S, READY_TIMEOUT_S, ClusterHarness

from tidelog import limits
from tidelog.broker.storage import Storage
from tidelog.client import Consumer, ConsumerRecord, TopicPartition
from tidelog.errors import KafkaStorageErrorError
from tidelog.local_cluster import HOST
from tidelog.record_batch import NewRecord, build_batch, decode_records, parse_batch
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import broker_pb2_grpc
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode

__all__ = ["CONSUMER", "RETRIABLE", "RPC_TIMEOUT_S", "WAIT_S", "Client", "all_running",
           "assert_replicas_identical", "broker_ids", "broker_name", "open_storage", "read_all",
           "records", "values_of", "wait_for"]

T = TypeVar("T")

#: Default bound of a wait on the cluster.
WAIT_S = 30.0
#: Bound of one RPC that is not expected to block.
RPC_TIMEOUT_S = 10.0
#: Produce error codes a producer retries on (the same batch, same sequence).
RETRIABLE = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                       ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS,
                       ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.FENCED_LEADER_EPOCH,
                       ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       ErrorCode.KAFKA_STORAGE_ERROR})
# The test's own channels go straight to the brokers, whatever grpc_proxy says.
GRPC_OPTIONS = [("grpc.max_send_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                ("grpc.enable_http_proxy", 0)]
#: The Consumer settings of ``read_all``.
CONSUMER: dict[str, Any] = dict(request_timeout_ms=5_000, retry_backoff_ms=50,
                                fetch_max_wait_ms=200)


def wait_for(check: Callable[[], T | None], what: str, timeout_s: float = WAIT_S) -> T:
    """Poll ``check`` until it returns something truthy; AssertionError at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def records(*values: bytes, producer_id: int = -1, producer_epoch: int = -1,
            base_sequence: int = -1, max_bytes: int = limits.MESSAGE_BYTES_MAX) -> bytes:
    return build_batch([NewRecord(None, v) for v in values], now_ms=int(time.time() * 1000),
                       producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence, max_bytes=max_bytes)


def values_of(batches: list[bytes]) -> list[bytes]:
    return [r.value or b"" for b in batches for r in decode_records(parse_batch(b))]


def all_running(cluster: ClusterHarness, *, timeout_s: float | None = None) -> None:
    """Resume every paused node and start every stopped one (a test may have left some so), then
    wait until a controller leads and every node is ready; each wait bounded by ``timeout_s``
    (default: the harness's own bounds)."""
    ready_s = READY_TIMEOUT_S if timeout_s is None else timeout_s
    leader_s = LEADER_TIMEOUT_S if timeout_s is None else timeout_s
    names = cluster.controller_names + cluster.broker_names
    for name in names:
        if cluster.is_paused(name):
            cluster.resume(name)
    down = [n for n in names if not cluster.is_running(n)]
    if down:
        cluster.start(*down, timeout_s=ready_s)
    cluster.wait_for_leader(timeout_s=leader_s)
    cluster.wait_ready(timeout_s=ready_s)


def broker_ids(cluster: ClusterHarness) -> list[int]:
    return sorted(cluster.node(n).node_id for n in cluster.broker_names)


def broker_name(cluster: ClusterHarness, broker_id: int) -> str:
    return next(n for n in cluster.broker_names if cluster.node(n).node_id == broker_id)


class Client:
    """Raw BrokerService calls by broker id, on partition 0 of a topic, its leader found through
    Metadata (from the live brokers, or from the ones ``via`` names).

    A Produce request's timeout is ``produce_timeout_ms`` unless a call says otherwise, and the
    call's gRPC deadline is that timeout plus ``produce_slack_s``.
    """

    def __init__(self, cluster: ClusterHarness, *, produce_timeout_ms: int = 5_000,
                 produce_slack_s: float = RPC_TIMEOUT_S) -> None:
        self.cluster = cluster
        self.ids = broker_ids(cluster)
        self.names = {broker_id: broker_name(cluster, broker_id) for broker_id in self.ids}
        self.produce_timeout_ms = produce_timeout_ms
        self.produce_slack_s = produce_slack_s
        self._stubs: dict[int, Any] = {}
        self._channels: list[grpc.Channel] = []

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def stub(self, broker_id: int) -> Any:
        stub = self._stubs.get(broker_id)
        if stub is None:
            port = self.cluster.node(self.names[broker_id]).broker_port
            channel = grpc.insecure_channel(f"{HOST}:{port}", options=GRPC_OPTIONS)
            self._channels.append(channel)
            stub = self._stubs[broker_id] = broker_pb2_grpc.BrokerServiceStub(channel)
        return stub

    def live(self) -> list[int]:
        """The brokers whose process runs and is not paused."""
        return [b for b, name in self.names.items()
                if self.cluster.is_running(name) and not self.cluster.is_paused(name)]

    def metadata(self, topic: str, via: list[int] | None = None) -> pb.TopicMetadata | None:
        """The topic as the first of ``via`` (default: the live brokers) that answers has it."""
        for broker_id in via or self.live():
            try:
                answer = self.stub(broker_id).Metadata(pb.MetadataRequest(topics=[topic]),
                                                       timeout=2)
            except grpc.RpcError:
                continue
            if answer.topics and answer.topics[0].error_code == ErrorCode.NONE:
                return answer.topics[0]
        return None

    def unfenced(self, via: list[int]) -> list[int] | None:
        """The unfenced broker ids as the first of ``via`` that answers has them."""
        for broker_id in via:
            try:
                answer = self.stub(broker_id).Metadata(pb.MetadataRequest(topics=[]), timeout=2)
            except grpc.RpcError:
                continue
            return sorted(b.broker_id for b in answer.brokers if not b.fenced)
        return None

    def peek(self, topic: str, via: list[int] | None = None) -> pb.PartitionMetadata | None:
        """Partition 0's metadata as ``via`` sees it now, leader or not (no wait)."""
        found = self.metadata(topic, via)
        if found is None or not found.partitions:
            return None
        first: pb.PartitionMetadata = found.partitions[0]
        return first

    def partition(self, topic: str, via: list[int] | None = None) -> pb.PartitionMetadata:
        """Partition 0's metadata once its leader is a live broker (as ``via`` sees it)."""
        def led() -> pb.PartitionMetadata | None:
            p = self.peek(topic, via)
            return p if p is not None and p.leader in self.live() else None
        return wait_for(led, f"a live leader of {topic}-0")

    def leader(self, topic: str, via: list[int] | None = None) -> int:
        return int(self.partition(topic, via).leader)

    def isr(self, topic: str, via: list[int] | None = None) -> list[int]:
        """Partition 0's ISR, sorted, as ``via`` sees it now ([] if unknown; no wait)."""
        p = self.peek(topic, via)
        return sorted(p.isr) if p is not None else []

    def create_topic(self, name: str, replicas: list[int], *, first_leads: bool = False,
                     **configs: str) -> None:
        """Partition 0 on ``replicas``, with ``configs`` (``min_insync_replicas="2"``: the
        topic's min.insync.replicas); until it is fully in sync (and, with ``first_leads``, led
        by the first replica) and every replica hosts it."""
        request = cpb.CreateTopicsRequest()
        topic = request.topics.add(name=name, num_partitions=-1, replication_factor=-1)
        topic.assignments.add(partition_id=0, broker_ids=replicas)
        for key, value in configs.items():
            topic.configs.add(name=key.replace("_", "."), value=value)
        answer = self.stub(self.live()[0]).CreateTopics(request, timeout=RPC_TIMEOUT_S)
        assert answer.topics[0].error_code == ErrorCode.NONE, answer

        def in_sync() -> bool:
            p = self.peek(name)
            return (p is not None and p.leader in self.live()
                    and sorted(p.isr) == sorted(replicas)
                    and (not first_leads or p.leader == replicas[0]))
        led = f" led by {replicas[0]}" if first_leads else ""
        wait_for(in_sync, f"{name} fully in sync{led}")
        # Every replica has acted on it (a client would retry UNKNOWN_TOPIC_OR_PARTITION).
        wait_for(lambda: set(self.logs(name)) == set(replicas), f"{name} hosted on {replicas}")

    def produce(self, topic: str, data: bytes, broker: int | None = None, *, acks: int = -1,
                timeout_ms: int | None = None) -> pb.ProduceResponse.PartitionResponse:
        """One Produce to ``broker`` (default: the partition's leader)."""
        if timeout_ms is None:
            timeout_ms = self.produce_timeout_ms
        request = pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms)
        request.topics.add(name=topic).partitions.add(partition_id=0, batch=data)
        target = broker if broker is not None else self.leader(topic)
        answer = self.stub(target).Produce(request,
                                           timeout=timeout_ms / 1000 + self.produce_slack_s)
        result: pb.ProduceResponse.PartitionResponse = answer.topics[0].partitions[0]
        return result

    def produce_until_acked(self, topic: str, data: bytes, *, timeout_s: float = WAIT_S
                            ) -> int:
        """Send until acknowledged (retriable errors and dead brokers: retry); the offset."""
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            try:
                answer = self.produce(topic, data, timeout_ms=3_000)
            except (grpc.RpcError, AssertionError) as error:
                last = error
                time.sleep(0.1)
                continue
            if answer.error_code == ErrorCode.NONE:
                return int(answer.base_offset)
            assert answer.error_code in RETRIABLE, answer
            last = ErrorCode.Name(answer.error_code)
            time.sleep(0.1)
        raise AssertionError(f"not acknowledged within {timeout_s:.0f} s (last: {last})")

    def fetch(self, topic: str, offset: int, *, broker: int | None = None,
              leader_epoch: int = -1, max_wait_ms: int = 0) -> pb.FetchResponse.PartitionData:
        request = pb.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1,
                                  max_bytes=16 << 20)
        request.topics.add(name=topic).partitions.add(
            partition_id=0, fetch_offset=offset, current_leader_epoch=leader_epoch,
            partition_max_bytes=8 << 20)
        target = broker if broker is not None else self.leader(topic)
        answer = self.stub(target).Fetch(request, timeout=RPC_TIMEOUT_S)
        result: pb.FetchResponse.PartitionData = answer.topics[0].partitions[0]
        return result

    def read_all(self, topic: str) -> list[bytes]:
        """Every record value below the leader's HW, from offset 0 (raw Fetch)."""
        out: list[bytes] = []
        offset = 0
        for _ in range(10_000):
            answer = self.fetch(topic, offset)
            assert answer.error_code == ErrorCode.NONE, answer
            if not answer.batches:
                break
            for data in answer.batches:
                batch = parse_batch(data)
                out.extend(r.value or b"" for r in decode_records(batch)
                           if r.offset >= offset)
                offset = batch.base_offset + batch.record_count
        return out

    def logs(self, topic: str) -> dict[int, pb.DescribeLogsResponse.PartitionLog]:
        """DescribeLogs of the topic on each live broker that hosts it."""
        found = {}
        for broker_id in self.live():
            request = pb.DescribeLogsRequest()
            request.topics.add(name=topic)
            try:
                answer = self.stub(broker_id).DescribeLogs(request, timeout=2)
            except grpc.RpcError:
                continue
            for row in answer.partitions:
                if row.error_code == ErrorCode.NONE:
                    found[broker_id] = row
        return found

    def wait_converged(self, topic: str, replicas: list[int] | None = None) -> int:
        """Until every replica (default: every broker) has the leader's LEO, the leader's HW is
        there too, and every replica is at the leader's epoch; returns the LEO."""
        expected = set(self.ids if replicas is None else replicas)

        def converged() -> tuple[int] | None:
            rows = self.logs(topic)
            ends = {row.log_end_offset for row in rows.values()}
            epochs = {row.leader_epoch for row in rows.values()}
            leaders = [row for row in rows.values() if row.is_leader]
            if (set(rows) != expected or len(ends) != 1 or len(epochs) != 1 or len(leaders) != 1
                    or leaders[0].high_watermark not in ends):
                return None
            return (ends.pop(),)
        return wait_for(converged, f"{topic} converged on {sorted(expected)}")[0]


def open_storage(cluster: ClusterHarness, name: str, *, lock_wait_s: float = 5.0) -> Storage:
    """The killed broker ``name``'s storage. The harness sees a killed process as gone once its
    main thread is a zombie; its other threads may still hold RocksDB's LOCK for a few ms, so a
    lock error is retried for up to ``lock_wait_s``."""
    deadline = time.monotonic() + lock_wait_s
    while True:
        try:
            return Storage.open(cluster.local.data_dir(name), cluster_id=cluster.cluster_id,
                                node_id=cluster.node(name).node_id)
        except KafkaStorageErrorError as error:
            if "lock" not in str(error).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def assert_replicas_identical(client: Client, topic: str,
                              replicas: list[int] | None = None) -> list[bytes]:
    """Every replica (default: every broker) at the leader's LEO; then kill -9 every broker,
    compare the partition's stored batches on each byte for byte, and start them again (a
    verification step, not a fault under test). Returns the stored batches."""
    cluster = client.cluster
    replicas = client.ids if replicas is None else replicas
    leo = client.wait_converged(topic, replicas)
    meta = client.metadata(topic)
    assert meta is not None
    topic_id = meta.topic_id
    for name in cluster.broker_names:
        cluster.kill(name)
    stored: dict[int, list[bytes]] = {}
    for broker_id in replicas:
        with open_storage(cluster, client.names[broker_id]) as storage:
            plog = storage.log(topic_id, 0)
            stored[broker_id] = plog.read(plog.log_start_offset, 1 << 30).batches
            assert plog.log_end_offset == leo, (broker_id, plog.log_end_offset, leo)
    cluster.start(*cluster.broker_names, wait=False)
    first = stored[replicas[0]]
    assert first, "something was written"
    for broker_id, batches in stored.items():
        assert len(batches) == len(first), (broker_id, len(batches), len(first))
        for mine, theirs in zip(batches, first, strict=True):
            offset = parse_batch(theirs).base_offset
            assert mine == theirs, f"broker {broker_id} differs at offset {offset}"
    cluster.wait_ready(cluster.broker_names)
    return first


def read_all(cluster: ClusterHarness, tps: list[TopicPartition], *,
             timeout_s: float = WAIT_S) -> list[ConsumerRecord]:
    """Every record of ``tps`` from the log start up to the high watermark, through the client's
    Consumer."""
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", **CONSUMER) as consumer:
        ends = consumer.end_offsets(tps)
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out: list[ConsumerRecord] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "could not read up to the high watermark"
            out += consumer.poll(timeout_ms=500)
        return out
