"""Produce, replicate and fetch on a real cluster: 3 controller + 3 broker processes.

What it checks:

* RF=3, acks=all: every acknowledged record is readable, and every replica ends byte-identical;
* kill -9 of a partition leader while an idempotent acks=all producer runs: a new leader from
  the ISR, the producer goes on (retrying its batch on retriable errors), no acknowledged record
  is lost or duplicated, a fetch with the old leader epoch is FENCED_LEADER_EPOCH, and the old
  leader restarts, rejoins the ISR as a follower and converges;
* a SIGSTOPped follower leaves the ISR (replica_lag_time_max_ms = 2 s) and rejoins after
  SIGCONT; with min.insync.replicas=2 and both followers stopped, acks=all gets
  NOT_ENOUGH_REPLICAS while acks=1 still works;
* a follower whose log diverged (acks=1 writes on a leader that then died) truncates to the new
  leader, and the records it held alone are gone everywhere;
* kill -9 of the active controller during produce: the data path goes on, and metadata changes
  (a new topic) resume once a new controller is active;
* bad input gets error codes (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE,
  UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE, UNKNOWN_LEADER_EPOCH, INVALID_REQUIRED_ACKS,
  NOT_LEADER_OR_FOLLOWER with a leader hint) while a producer running meanwhile sees no error.

How: tests/integration/cluster_harness.py runs the nodes as ``tidelog server`` processes (one
cluster for the module; a fixture restarts whatever a test stopped). The test talks raw gRPC
(BrokerService stubs, batches from tidelog.record_batch.build_batch); the client library is not
used. **Replica comparison:** the wire has no "read a follower's log" call, so the test waits
until every replica reports the leader's LEO (DescribeLogs), then kill -9s the three brokers,
opens each broker's RocksDB with broker.storage.Storage (recovery included, exactly as a
restart would) and compares the stored batches per offset, bytes for bytes; then it starts the
brokers again (they re-register once their old sessions expire).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_harness import ClusterHarness

from broker.storage import Storage
from tidelog import limits
from tidelog.errors import KafkaStorageErrorError
from tidelog.record_batch import NewRecord, build_batch, decode_records, parse_batch
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import broker_pb2_grpc
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 3_000
OVERRIDES = {
    "controller": {"broker_session_timeout_ms": SESSION_TIMEOUT_MS,
                   "fence_check_interval_ms": 100},
    "broker": {"heartbeat_interval_ms": 500, "replica_lag_time_max_ms": 2_000,
               "replica_fetch_wait_max_ms": 200},
}
WAIT_S = 30.0
RPC_TIMEOUT_S = 10.0
RETRIABLE = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                       ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS,
                       ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.FENCED_LEADER_EPOCH,
                       ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       ErrorCode.KAFKA_STORAGE_ERROR})
GRPC_OPTIONS = [("grpc.max_send_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_BYTES_MAX)]


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
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


class Client:
    """Raw BrokerService calls by broker id, with the leader found through Metadata."""

    def __init__(self, cluster: ClusterHarness) -> None:
        self.cluster = cluster
        self.names = {cluster.node(n).node_id: n for n in cluster.broker_names}
        self._stubs: dict[int, Any] = {}
        self._channels: list[grpc.Channel] = []

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def stub(self, broker_id: int) -> Any:
        stub = self._stubs.get(broker_id)
        if stub is None:
            port = self.cluster.node(self.names[broker_id]).broker_port
            channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=GRPC_OPTIONS)
            self._channels.append(channel)
            stub = self._stubs[broker_id] = broker_pb2_grpc.BrokerServiceStub(channel)
        return stub

    def live(self) -> list[int]:
        return [b for b, name in self.names.items()
                if self.cluster.is_running(name) and not self.cluster.is_paused(name)]

    def metadata(self, topic: str) -> pb.TopicMetadata | None:
        for broker_id in self.live():
            try:
                answer = self.stub(broker_id).Metadata(pb.MetadataRequest(topics=[topic]),
                                                       timeout=2)
            except grpc.RpcError:
                continue
            if answer.topics and answer.topics[0].error_code == ErrorCode.NONE:
                return answer.topics[0]
        return None

    def partition(self, topic: str, partition: int = 0) -> pb.PartitionMetadata:
        def found() -> pb.PartitionMetadata | None:
            meta = self.metadata(topic)
            if meta is None or partition >= len(meta.partitions):
                return None
            p = meta.partitions[partition]
            return p if p.leader >= 0 and p.leader in self.live() else None
        result: pb.PartitionMetadata = wait_for(found, f"a live leader of {topic}-{partition}")
        return result

    def leader(self, topic: str, partition: int = 0) -> int:
        return int(self.partition(topic, partition).leader)

    def create_topic(self, name: str, replicas: list[int], **configs: str) -> None:
        request = cpb.CreateTopicsRequest()
        topic = request.topics.add(name=name, num_partitions=-1, replication_factor=-1)
        topic.assignments.add(partition_id=0, broker_ids=replicas)
        for key, value in configs.items():
            topic.configs.add(name=key.replace("_", "."), value=value)
        answer = self.stub(self.live()[0]).CreateTopics(request, timeout=RPC_TIMEOUT_S)
        assert answer.topics[0].error_code == ErrorCode.NONE, answer
        wait_for(lambda: len(self.partition(name).isr) == len(replicas), f"{name} fully in sync")
        # Every replica has acted on it (a client would retry UNKNOWN_TOPIC_OR_PARTITION).
        wait_for(lambda: set(self.logs(name)) == set(replicas), f"{name} hosted on {replicas}")

    def produce(self, topic: str, data: bytes, *, acks: int = -1, broker: int | None = None,
                timeout_ms: int = 5_000) -> pb.ProduceResponse.PartitionResponse:
        request = pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms)
        request.topics.add(name=topic).partitions.add(partition_id=0, batch=data)
        target = broker if broker is not None else self.leader(topic)
        answer = self.stub(target).Produce(request, timeout=timeout_ms / 1000 + RPC_TIMEOUT_S)
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
        """Every record value below the leader's HW, from offset 0."""
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

    def wait_converged(self, topic: str, replicas: list[int]) -> int:
        """Until every replica has the leader's LEO and the leader's HW is there too."""
        def converged() -> int | None:
            rows = self.logs(topic)
            if set(rows) != set(replicas):
                return None
            ends = {row.log_end_offset for row in rows.values()}
            leaders = [row for row in rows.values() if row.is_leader]
            if len(ends) != 1 or len(leaders) != 1 or leaders[0].high_watermark not in ends:
                return None
            return ends.pop() + 1  # +1: a LEO of 0 counts as converged too
        return int(wait_for(converged, f"{topic} converged on {replicas}")) - 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("replication") / "cluster"
    with ClusterHarness.started(base, controllers=3, brokers=3, overrides=OVERRIDES) as harness:
        harness.start_brokers()
        yield harness


@pytest.fixture
def client(cluster: ClusterHarness) -> Iterator[Client]:
    """The module's cluster with every node running and ready (a test may have stopped some)."""
    for name in cluster.controller_names + cluster.broker_names:
        if cluster.is_paused(name):
            cluster.resume(name)
    down = [n for n in cluster.controller_names + cluster.broker_names
            if not cluster.is_running(n)]
    if down:
        cluster.start(*down)
    cluster.wait_for_leader()
    cluster.wait_ready()
    c = Client(cluster)
    wait_for(lambda: len(c.live()) == 3, "three brokers")
    yield c
    c.close()


def open_storage(cluster: ClusterHarness, name: str, broker_id: int) -> Storage:
    """The killed broker's storage. The harness sees a killed process as gone once its main
    thread is a zombie; its other threads may still hold RocksDB's LOCK for a few ms."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return Storage.open(cluster.local.data_dir(name), cluster_id=cluster.cluster_id,
                                node_id=broker_id)
        except KafkaStorageErrorError as error:
            if "lock" not in str(error).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def assert_replicas_identical(cluster: ClusterHarness, client: Client, topic: str,
                              replicas: list[int]) -> list[bytes]:
    """Kill -9 every broker, compare the partition's stored batches on each, restart them."""
    leo = client.wait_converged(topic, replicas)
    meta = client.metadata(topic)
    assert meta is not None
    topic_id = meta.topic_id
    for name in cluster.broker_names:
        cluster.kill(name)
    stored: dict[int, list[bytes]] = {}
    for broker_id in replicas:
        with open_storage(cluster, client.names[broker_id], broker_id) as storage:
            plog = storage.log(topic_id, 0)
            stored[broker_id] = plog.read(plog.log_start_offset, 1 << 30).batches
            assert plog.log_end_offset == leo
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


# --- the tests -----------------------------------------------------------------------------------


def test_rf3_acks_all_every_replica_identical(cluster: ClusterHarness, client: Client) -> None:
    replicas = sorted(client.names)
    client.create_topic("identical", replicas, min_insync_replicas="2")
    sent = []
    for i in range(200):
        values = [b"r-%d-%d" % (i, j) for j in range(10)]
        answer = client.produce("identical", records(*values))
        assert answer.error_code == ErrorCode.NONE, answer
        assert answer.base_offset == i * 10
        sent.extend(values)
    assert client.read_all("identical") == sent
    stored = assert_replicas_identical(cluster, client, "identical", replicas)
    assert values_of(stored) == sent


def test_leader_kill_during_idempotent_acks_all_produce(cluster: ClusterHarness,
                                                        client: Client) -> None:
    replicas = sorted(client.names)
    client.create_topic("failover", replicas, min_insync_replicas="2")
    init = client.stub(replicas[0]).InitProducerId(pb.InitProducerIdRequest(producer_id=-1),
                                                   timeout=RPC_TIMEOUT_S)
    assert init.error_code == ErrorCode.NONE, init
    acked: list[bytes] = []
    stop = threading.Event()
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            for sequence in range(100_000):
                if stop.is_set():
                    return
                value = b"seq-%d" % sequence
                data = records(value, producer_id=init.producer_id,
                               producer_epoch=init.producer_epoch, base_sequence=sequence)
                client.produce_until_acked("failover", data)
                acked.append(value)
        except BaseException as error:  # surfaced by the test thread below
            failures.append(error)

    producer = threading.Thread(target=produce, name="producer", daemon=True)
    producer.start()
    wait_for(lambda: len(acked) >= 50 or failures, "50 records acknowledged")
    old_leader = client.leader("failover")
    old_epoch = client.partition("failover").leader_epoch
    killed_at = len(acked)
    cluster.kill(client.names[old_leader])
    new = client.partition("failover")
    assert new.leader != old_leader and new.leader_epoch > old_epoch and new.leader in new.isr
    wait_for(lambda: len(acked) >= killed_at + 50 or failures, "50 more after the failover")
    stop.set()
    producer.join(timeout=WAIT_S)
    assert not failures, failures
    stale = client.fetch("failover", 0, broker=new.leader, leader_epoch=old_epoch)
    assert stale.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert stale.current_leader.leader_id == new.leader

    cluster.start(client.names[old_leader])
    wait_for(lambda: old_leader in client.partition("failover").isr, "the old leader in the ISR")
    got = client.read_all("failover")
    assert got == acked, "every acknowledged record, once, in order"
    stored = assert_replicas_identical(cluster, client, "failover", replicas)
    assert values_of(stored) == acked


def test_paused_follower_leaves_the_isr_and_min_isr_is_enforced(cluster: ClusterHarness,
                                                                client: Client) -> None:
    replicas = sorted(client.names)
    client.create_topic("paused", replicas, min_insync_replicas="2")
    leader = client.leader("paused")
    followers = [b for b in replicas if b != leader]
    assert client.produce("paused", records(b"a")).error_code == ErrorCode.NONE

    cluster.pause(client.names[followers[0]])
    started = time.monotonic()
    wait_for(lambda: followers[0] not in client.partition("paused").isr, "ISR shrink",
             timeout_s=15)
    shrink_s = time.monotonic() - started
    assert client.produce("paused", records(b"b")).error_code == ErrorCode.NONE, \
        "two in-sync replicas still satisfy min.insync.replicas=2"
    cluster.resume(client.names[followers[0]])
    wait_for(lambda: followers[0] in client.partition("paused").isr, "ISR expansion")

    for follower in followers:
        cluster.pause(client.names[follower])
    wait_for(lambda: list(client.partition("paused").isr) == [leader], "ISR down to the leader",
             timeout_s=15)
    refused = client.produce("paused", records(b"c"), acks=-1)
    assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS, refused
    accepted = client.produce("paused", records(b"d"), acks=1)
    assert accepted.error_code == ErrorCode.NONE, accepted
    for follower in followers:
        cluster.resume(client.names[follower])
    wait_for(lambda: sorted(client.partition("paused").isr) == replicas, "all back in sync")
    assert client.read_all("paused") == [b"a", b"b", b"d"]
    client.wait_converged("paused", replicas)
    print(f"ISR shrink after SIGSTOP: {shrink_s:.1f} s")


def test_diverged_follower_truncates_to_the_new_leader(cluster: ClusterHarness,
                                                       client: Client) -> None:
    replicas = sorted(client.names)
    client.create_topic("diverge", replicas, min_insync_replicas="1")
    assert client.produce("diverge", records(b"committed")).error_code == ErrorCode.NONE
    client.wait_converged("diverge", replicas)
    leader = client.leader("diverge")
    followers = [b for b in replicas if b != leader]
    for follower in followers:
        cluster.pause(client.names[follower])
    # Let the followers' pending long-polls (200 ms) be answered empty, so the writes below
    # cannot travel in an answer the stopped processes read once resumed.
    time.sleep(0.5)
    for i in range(3):
        answer = client.produce("diverge", records(b"only-on-old-leader-%d" % i), acks=1,
                                broker=leader)
        assert answer.error_code == ErrorCode.NONE, answer
    cluster.kill(client.names[leader])
    for follower in followers:
        cluster.resume(client.names[follower])
    new_leader = client.leader("diverge")
    assert new_leader in followers
    offset = client.produce_until_acked("diverge", records(b"new-1", b"new-2"))
    assert offset == 1, "the new leader appends after the committed record"
    cluster.start(client.names[leader])
    old_log = cluster.local.log_path(client.names[leader])
    wait_for(lambda: "diverge-0: truncated from 4 to 1" in old_log.read_text(errors="replace"),
             "the old leader truncating its three records")
    stored = assert_replicas_identical(cluster, client, "diverge", replicas)
    assert values_of(stored) == [b"committed", b"new-1", b"new-2"]


def test_controller_leader_killed_during_produce(cluster: ClusterHarness,
                                                 client: Client) -> None:
    replicas = sorted(client.names)
    client.create_topic("ctl", replicas, min_insync_replicas="2")
    active = cluster.wait_for_leader()
    errors = []
    for i in range(40):
        if i == 10:
            cluster.kill(cluster.controller_name(active))
        answer = client.produce("ctl", records(b"v%d" % i))
        if answer.error_code != ErrorCode.NONE:
            errors.append(ErrorCode.Name(answer.error_code))
    assert errors == [], "the data path does not need the controllers"
    assert cluster.wait_for_leader() != active
    client.create_topic("ctl-after", replicas[:2])
    assert client.produce("ctl-after", records(b"x")).error_code == ErrorCode.NONE
    assert len(client.read_all("ctl")) == 40
    cluster.start(cluster.controller_name(active))


def test_bad_input_gets_error_codes_and_others_keep_being_served(cluster: ClusterHarness,
                                                                 client: Client) -> None:
    replicas = sorted(client.names)
    client.create_topic("bad", replicas, max_message_bytes=str(4 << 20),
                        segment_bytes=str(1 << 20))
    client.create_topic("small", replicas, max_message_bytes="1000")
    client.create_topic("busy", replicas)
    leader = client.leader("bad")
    stop = threading.Event()
    busy_errors: list[object] = []
    busy_acked = [0]

    def busy() -> None:
        while not stop.is_set():
            try:
                answer = client.produce("busy", records(b"busy"))
            except grpc.RpcError as error:
                busy_errors.append(error)
                return
            if answer.error_code != ErrorCode.NONE:
                busy_errors.append(ErrorCode.Name(answer.error_code))
            busy_acked[0] += 1

    thread = threading.Thread(target=busy, name="busy-producer", daemon=True)
    thread.start()
    good = records(b"fine")
    flipped = bytearray(good)
    flipped[-2] ^= 0xFF
    huge = records(b"h" * (1 << 20), b"h" * (1 << 19), max_bytes=8 << 20)

    def code(topic: str, data: bytes, **kw: Any) -> str:
        return ErrorCode.Name(client.produce(topic, data, **kw).error_code)

    assert code("bad", bytes(flipped)) == "CORRUPT_MESSAGE"
    assert code("bad", b"\x08\x01 garbage \xff\xff") == "CORRUPT_MESSAGE"
    assert code("small", records(b"x" * 2_000)) == "MESSAGE_TOO_LARGE"
    assert code("bad", huge) == "RECORD_LIST_TOO_LARGE"
    assert code("bad", good, acks=5) == "INVALID_REQUIRED_ACKS"
    assert code("no-such-topic", good, broker=leader) == "UNKNOWN_TOPIC_OR_PARTITION"
    follower = next(b for b in replicas if b != leader)
    wrong = client.produce("bad", good, broker=follower)
    assert wrong.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert wrong.current_leader.leader_id == leader
    assert wrong.current_leader.endpoint.port == cluster.node(client.names[leader]).broker_port
    unknown_partition = pb.ProduceRequest(acks=1)
    unknown_partition.topics.add(name="bad").partitions.add(partition_id=9, batch=good)
    answer = client.stub(leader).Produce(unknown_partition, timeout=RPC_TIMEOUT_S)
    assert answer.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert client.fetch("bad", -5).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert client.fetch("bad", 1_000).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert client.fetch("bad", 0, leader_epoch=7).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH

    ok = client.produce("bad", good)
    assert (ok.error_code, ok.base_offset) == (ErrorCode.NONE, 0)
    assert client.read_all("bad") == [b"fine"]
    stop.set()
    thread.join(timeout=WAIT_S)
    assert busy_errors == [] and busy_acked[0] > 0
