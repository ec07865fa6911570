"""Network partitions on a real cluster: 3 controller + 3 broker processes, with faults injected
on TCP links through chaos.proxies (the Toxiproxy-compatible server), never on processes.

What it checks (RF=3, min.insync.replicas=2, broker session timeout 3 s, replica lag 2 s):

* **a partition leader partitioned from every controller** (its heartbeats and metadata
  stream) while an idempotent acks=all Producer runs: the controllers fence it after the
  session timeout and elect a new leader from the ISR; the producer's records go on being
  acknowledged, by the new leader (their leader epoch says so); acks=all produce requests sent
  straight to the isolated leader once the others follow the new leader are never acknowledged
  (the safety property: a leader that lost the controllers cannot commit alone); after the heal
  it rejoins as a follower, truncates what it took but never committed, and the ISR is whole
  again. Read from the beginning, every acknowledged record is there exactly once at its
  acknowledged offset, and the three replicas are byte-identical;
* **a follower partitioned from the leader** (only its replication link; it still reaches the
  controllers): it leaves the ISR after replica_lag_time_max_ms while acks=all goes on with 2 of
  3; after the heal it catches up and rejoins; nothing acknowledged is lost, the replicas end
  byte-identical. These two run twice each: with the links cut (connections dropped, new ones
  refused, so connects fail fast) and stalled (a timeout toxic: connections stay open and carry
  nothing, so only deadlines notice);
* **a slow link** (150 ms each way on one follower's replication link): acks=all still succeeds,
  slower; only retriable error codes are seen; nothing is lost; the ISR is whole at the end.

How. Every broker process is started with ``grpc_proxy=http://127.0.0.1:<port>`` (gRPC's own HTTP
CONNECT support, through the harness's per-node ``env``), pointing at a small CONNECT router in
this module: one listening port per broker, and each tunnel it is asked for goes to a Toxiproxy
link of its own, ``broker-N>controller-M`` or ``broker-N>broker-K``. So every outgoing gRPC
connection of a broker (heartbeats and the metadata stream to each controller, replication
fetches to each leader) crosses exactly one link, and a toxic on a link is a fault on exactly
that source→destination pair. That is needed because a broker reaches a leader at the address
the leader advertises, the same for every follower: a proxy in front of the leader could not
cut one follower only. The test's own clients connect to the brokers directly; the controllers'
Raft traffic is not proxied. Links are healed (``proxies.faults()``) at the end of every test.

Replica comparison, as in test_broker_replication.py: the wire has no "read a follower's log",
so once DescribeLogs shows every replica at the leader's LEO, the three brokers are killed (-9),
each one's RocksDB is opened with broker.storage.Storage and the stored batches are compared
byte for byte; then the brokers start again. Waits are bounded polls; nothing sleeps to assert.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from cluster_harness import ClusterHarness
from toxiproxy import Proxy

from broker.storage import Storage
from chaos import proxies
from tidelog import limits
from tidelog.client import Consumer, ConsumerRecord, Producer, TopicPartition
from tidelog.errors import KafkaStorageErrorError
from tidelog.record_batch import NewRecord, build_batch, parse_batch
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import broker_pb2_grpc
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode

pytestmark = pytest.mark.integration

T = TypeVar("T")

HOST = "127.0.0.1"
SESSION_TIMEOUT_MS = 3_000
LAG_TIME_MAX_MS = 2_000
OVERRIDES = {
    "controller": {"broker_session_timeout_ms": SESSION_TIMEOUT_MS,
                   "fence_check_interval_ms": 100},
    "broker": {"heartbeat_interval_ms": 500, "replica_lag_time_max_ms": LAG_TIME_MAX_MS,
               "replica_fetch_wait_max_ms": 200},
}
WAIT_S = 30.0
RPC_TIMEOUT_S = 10.0
PRODUCE_TIMEOUT_MS = 3_000
LATENCY_MS = 150
RETRIABLE = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                       ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS,
                       ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.FENCED_LEADER_EPOCH,
                       ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                       ErrorCode.KAFKA_STORAGE_ERROR})
GRPC_OPTIONS = [("grpc.max_send_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                ("grpc.enable_http_proxy", 0)]
PRODUCER: dict[str, Any] = dict(request_timeout_ms=PRODUCE_TIMEOUT_MS, retry_backoff_ms=50,
                                delivery_timeout_ms=60_000, retry_backoff_max_ms=500,
                                max_block_ms=10_000)
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


# --- the CONNECT router --------------------------------------------------------------------------

HEAD_BYTES_MAX = 8 * 1024
HEAD_TIMEOUT_S = 5.0
UPSTREAM_CONNECT_TIMEOUT_S = 5.0
CHUNK_BYTES = 64 * 1024


class ConnectRouter:
    """An HTTP CONNECT proxy for gRPC's ``grpc_proxy``, on an asyncio loop of its own thread.

    One listening port per source node; a tunnel to ``127.0.0.1:<port>`` asked for on a source's
    port is connected to the upstream routed for (source, port), a Toxiproxy link. A target with
    no route, or a link that refuses (cut), is answered 502, and gRPC sees a failed connect.
    """

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="connect-router",
                                        daemon=True)
        self._servers: list[asyncio.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._routes: dict[tuple[str, int], tuple[str, int]] = {}
        self.unrouted: list[tuple[str, str]] = []
        self.tunnels: collections.Counter[str] = collections.Counter()  # opened, by source
        self._thread.start()

    def listen(self, source: str) -> int:
        """A port for ``source``'s tunnels; returns it."""
        async def start() -> asyncio.Server:
            return await asyncio.start_server(
                lambda r, w: self._tunnel(source, r, w), HOST, 0)
        server = asyncio.run_coroutine_threadsafe(start(), self._loop).result(10)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    def route(self, source: str, target_port: int, upstream: tuple[str, int]) -> None:
        self._routes[(source, target_port)] = upstream

    def close(self) -> None:
        async def stop() -> None:
            for server in self._servers:
                server.close()
            for writer in list(self._writers):
                writer.transport.abort()
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    async def _tunnel(self, source: str, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            if len(head) > HEAD_BYTES_MAX:
                return
            words = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            target = words[1] if len(words) == 3 and words[0] == "CONNECT" else ""
            port = target.rpartition(":")[2]
            upstream = self._routes.get((source, int(port))) if port.isdigit() else None
            if upstream is None:
                self.unrouted.append((source, target))
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
                return
            try:
                upstream_reader, connected = await asyncio.wait_for(
                    asyncio.open_connection(*upstream), UPSTREAM_CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError):
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
                return
            upstream_writer = connected
            self._writers.add(connected)
            self.tunnels[source] += 1
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            # Either side ending ends the tunnel (gRPC has no use for half-open connections).
            pipes = {asyncio.ensure_future(_pipe(reader, connected)),
                     asyncio.ensure_future(_pipe(upstream_reader, writer))}
            _, pending = await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                TimeoutError, asyncio.CancelledError):
            pass
        finally:
            for w in (writer, upstream_writer):
                if w is not None:
                    self._writers.discard(w)
                    w.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await reader.read(CHUNK_BYTES):
            writer.write(data)
            await writer.drain()


# --- the cluster ---------------------------------------------------------------------------------


@dataclass
class Net:
    """The cluster and its links: ``links[(source, target)]`` by node name."""

    cluster: ClusterHarness
    router: ConnectRouter
    links: dict[tuple[str, str], Proxy] = field(default_factory=dict)

    def link(self, source_id: int, target: str | int) -> Proxy:
        """The link from broker ``source_id`` to a controller name or a broker id."""
        target_name = target if isinstance(target, str) else broker_name(self.cluster, target)
        return self.links[(broker_name(self.cluster, source_id), target_name)]

    def controller_links(self, broker_id: int) -> list[Proxy]:
        return [self.link(broker_id, c) for c in self.cluster.controller_names]


def broker_name(cluster: ClusterHarness, broker_id: int) -> str:
    return next(s.name for s in cluster.local.brokers() if s.node_id == broker_id)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    base: Path = tmp_path_factory.mktemp("partitions") / "cluster"
    with proxies.toxiproxy(), contextlib.closing(ConnectRouter()) as router:
        cluster = ClusterHarness.create(base, controllers=3, brokers=3, overrides=OVERRIDES)
        with cluster:
            result = Net(cluster, router)
            targets = {n: cluster.node(n).controller_port for n in cluster.controller_names}
            targets |= {n: cluster.node(n).broker_port for n in cluster.broker_names}
            for source in cluster.broker_names:
                port = router.listen(source)
                # no_grpc_proxy="" overrides a no_proxy that would exempt 127.0.0.1.
                cluster.set_env(source, {"grpc_proxy": f"http://{HOST}:{port}",
                                         "no_grpc_proxy": ""})
                for target, target_port in targets.items():
                    if target == source:
                        continue
                    link = proxies.create_link(f"{source}>{target}", (HOST, target_port))
                    router.route(source, target_port, proxies.address(link))
                    result.links[(source, target)] = link
            cluster.start_controllers()
            cluster.wait_for_leader()
            cluster.start_brokers()
            # They registered, so they reached a controller: through the router, or the
            # environment did not take and no fault below would be real.
            assert set(router.tunnels) == set(cluster.broker_names), router.tunnels
            yield result
            assert router.unrouted == [], "a broker connected somewhere no link leads"


@pytest.fixture
def client(net: Net) -> Iterator[Client]:
    """Every node running and ready, every link healed; faults set in the test end with it."""
    cluster = net.cluster
    down = [n for n in cluster.controller_names + cluster.broker_names
            if not cluster.is_running(n)]
    if down:
        cluster.start(*down)
    cluster.wait_for_leader()
    cluster.wait_ready()
    c = Client(cluster)
    wait_for(lambda: c.unfenced(via=c.ids) == c.ids, "three unfenced brokers")
    with proxies.faults():
        yield c
    c.close()


# --- raw gRPC ------------------------------------------------------------------------------------


def records(*values: bytes, producer_id: int = -1, producer_epoch: int = -1,
            base_sequence: int = -1) -> bytes:
    return build_batch([NewRecord(None, v) for v in values], now_ms=int(time.time() * 1000),
                       producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence, max_bytes=limits.MESSAGE_BYTES_MAX)


class Client:
    """Raw BrokerService calls by broker id; metadata from the brokers one names."""

    def __init__(self, cluster: ClusterHarness) -> None:
        self.cluster = cluster
        self.ids = sorted(cluster.node(n).node_id for n in cluster.broker_names)
        self._stubs: dict[int, Any] = {}
        self._channels: list[grpc.Channel] = []

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def stub(self, broker_id: int) -> Any:
        stub = self._stubs.get(broker_id)
        if stub is None:
            port = self.cluster.node(broker_name(self.cluster, broker_id)).broker_port
            channel = grpc.insecure_channel(f"{HOST}:{port}", options=GRPC_OPTIONS)
            self._channels.append(channel)
            stub = broker_pb2_grpc.BrokerServiceStub(channel)  # type: ignore[no-untyped-call]
            self._stubs[broker_id] = stub
        return stub

    def metadata(self, topic: str, via: list[int] | None = None
                 ) -> tuple[pb.TopicMetadata, list[int]] | None:
        """The topic and the unfenced broker ids, as the first of ``via`` that answers has them."""
        for broker_id in via or self.ids:
            try:
                answer = self.stub(broker_id).Metadata(pb.MetadataRequest(topics=[topic]),
                                                       timeout=2)
            except grpc.RpcError:
                continue
            if answer.topics and answer.topics[0].error_code == ErrorCode.NONE:
                return answer.topics[0], [b.broker_id for b in answer.brokers if not b.fenced]
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

    def partition(self, topic: str, via: list[int] | None = None
                  ) -> pb.PartitionMetadata | None:
        found = self.metadata(topic, via)
        if found is None or not found[0].partitions:
            return None
        first: pb.PartitionMetadata = found[0].partitions[0]
        return first

    def leader(self, topic: str, via: list[int] | None = None) -> pb.PartitionMetadata:
        """Partition 0's metadata once it has a leader (as ``via`` sees it)."""
        def led() -> pb.PartitionMetadata | None:
            p = self.partition(topic, via)
            return p if p is not None and p.leader >= 0 else None
        return wait_for(led, f"a leader of {topic}-0")

    def isr(self, topic: str, via: list[int] | None = None) -> list[int]:
        p = self.partition(topic, via)
        return sorted(p.isr) if p is not None else []

    def create_topic(self, name: str, replicas: list[int]) -> None:
        """Partition 0 on ``replicas`` (the first one leads), min.insync.replicas=2."""
        request = cpb.CreateTopicsRequest()
        topic = request.topics.add(name=name, num_partitions=-1, replication_factor=-1)
        topic.assignments.add(partition_id=0, broker_ids=replicas)
        topic.configs.add(name="min.insync.replicas", value="2")
        answer = self.stub(replicas[1]).CreateTopics(request, timeout=RPC_TIMEOUT_S)
        assert answer.topics[0].error_code == ErrorCode.NONE, answer
        wait_for(lambda: self.isr(name) == sorted(replicas) and
                 self.leader(name).leader == replicas[0], f"{name} led by {replicas[0]}, in sync")
        wait_for(lambda: set(self.logs(name)) == set(replicas), f"{name} hosted on {replicas}")

    def produce(self, topic: str, data: bytes, broker: int, *, acks: int = -1,
                timeout_ms: int = PRODUCE_TIMEOUT_MS) -> pb.ProduceResponse.PartitionResponse:
        request = pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms)
        request.topics.add(name=topic).partitions.add(partition_id=0, batch=data)
        answer = self.stub(broker).Produce(request, timeout=timeout_ms / 1000 + 2)
        result: pb.ProduceResponse.PartitionResponse = answer.topics[0].partitions[0]
        return result

    def logs(self, topic: str) -> dict[int, pb.DescribeLogsResponse.PartitionLog]:
        found = {}
        for broker_id in self.ids:
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

    def wait_converged(self, topic: str) -> int:
        """Until every replica has the leader's LEO, the leader's HW is there too, and every
        replica is at the leader's epoch; returns the LEO."""
        def converged() -> tuple[int] | None:
            rows = self.logs(topic)
            ends = {row.log_end_offset for row in rows.values()}
            epochs = {row.leader_epoch for row in rows.values()}
            leaders = [row for row in rows.values() if row.is_leader]
            if (len(rows) != 3 or len(ends) != 1 or len(epochs) != 1 or len(leaders) != 1
                    or leaders[0].high_watermark not in ends):
                return None
            return (ends.pop(),)
        return wait_for(converged, f"{topic} converged on every replica")[0]


class RawProducer(threading.Thread):
    """Idempotent acks=all producer over raw gRPC: one record per request, to the partition's
    leader, resent (same sequence) on retriable errors and transport failures until
    acknowledged. Keeps (value, offset, seconds) per acknowledged record and every error code."""

    def __init__(self, client: Client, topic: str, prefix: str) -> None:
        super().__init__(name=f"producer-{prefix}", daemon=True)
        self.client, self.topic, self.prefix = client, topic, prefix
        init = client.stub(client.ids[0]).InitProducerId(
            pb.InitProducerIdRequest(producer_id=-1), timeout=RPC_TIMEOUT_S)
        assert init.error_code == ErrorCode.NONE, init
        self.producer_id, self.producer_epoch = init.producer_id, init.producer_epoch
        self.acked: list[tuple[bytes, int, float]] = []
        self.codes: collections.Counter[str] = collections.Counter()
        self.failures: list[BaseException] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            sequence = 0
            while not self.stopping.is_set():
                value = b"%s-%d" % (self.prefix.encode(), sequence)
                data = records(value, producer_id=self.producer_id,
                               producer_epoch=self.producer_epoch, base_sequence=sequence)
                started = time.monotonic()
                offset = self._send(data)
                self.acked.append((value, offset, time.monotonic() - started))
                sequence += 1
        except BaseException as error:  # surfaced by the test thread
            self.failures.append(error)

    def _send(self, data: bytes) -> int:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                answer = self.client.produce(self.topic, data,
                                             self.client.leader(self.topic).leader)
            except grpc.RpcError as error:
                self.codes[f"gRPC {error.code().name}"] += 1
                time.sleep(0.05)
                continue
            self.codes[ErrorCode.Name(answer.error_code)] += 1
            if answer.error_code == ErrorCode.NONE:
                return int(answer.base_offset)
            assert answer.error_code in RETRIABLE, answer
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: a batch not acknowledged in {WAIT_S:.0f} s")

    def wait_acked(self, count: int, what: str, timeout_s: float = WAIT_S) -> None:
        wait_for(lambda: len(self.acked) >= count or self.failures or not self.is_alive(),
                 what, timeout_s)
        assert not self.failures, self.failures

    def finish(self) -> None:
        """Stop after the batch in flight is acknowledged."""
        self.stopping.set()
        self.join(WAIT_S + 5)
        assert not self.is_alive(), f"{self.name} did not stop"
        assert not self.failures, self.failures


def read_all(cluster: ClusterHarness, topic: str) -> list[ConsumerRecord]:
    """Partition 0 from offset 0 up to its high watermark, through the client's Consumer."""
    tp = TopicPartition(topic, 0)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", **CONSUMER) as consumer:
        end = consumer.end_offsets([tp])[tp]
        consumer.assign([tp])
        out: list[ConsumerRecord] = []
        deadline = time.monotonic() + WAIT_S
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, "could not read up to the high watermark"
            out += consumer.poll(timeout_ms=500)
    return out


def check_log(log_records: list[ConsumerRecord], acked: dict[bytes, int]) -> None:
    """Offsets dense from 0; every acknowledged value once, at its acknowledged offset."""
    assert [r.offset for r in log_records] == list(range(len(log_records)))
    values = [r.value for r in log_records]
    duplicates = [v for v, n in collections.Counter(values).items() if n > 1]
    assert duplicates == [], f"records written twice: {duplicates[:5]}"
    at = {r.value: r.offset for r in log_records}
    missing = [v for v in acked if v not in at]
    assert missing == [], f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    moved = [(v, o, at[v]) for v, o in acked.items() if at[v] != o]
    assert moved == [], f"acknowledged at one offset, found at another: {moved[:5]}"


def open_storage(cluster: ClusterHarness, name: str, broker_id: int) -> Storage:
    """A killed broker's storage (its last threads may hold RocksDB's LOCK for a few ms)."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return Storage.open(cluster.local.data_dir(name), cluster_id=cluster.cluster_id,
                                node_id=broker_id)
        except KafkaStorageErrorError as error:
            if "lock" not in str(error).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def assert_replicas_identical(client: Client, topic: str) -> None:
    """Every replica at the leader's LEO; then kill -9 the brokers, compare the stored batches
    byte for byte, and start them again (a verification step, not a fault under test)."""
    cluster = client.cluster
    leo = client.wait_converged(topic)
    found = client.metadata(topic)
    assert found is not None
    topic_id = found[0].topic_id
    for name in cluster.broker_names:
        cluster.kill(name)
    stored: dict[int, list[bytes]] = {}
    for broker_id in client.ids:
        with open_storage(cluster, broker_name(cluster, broker_id), broker_id) as storage:
            plog = storage.log(topic_id, 0)
            stored[broker_id] = plog.read(plog.log_start_offset, 1 << 30).batches
            assert plog.log_end_offset == leo, (broker_id, plog.log_end_offset, leo)
    cluster.start(*cluster.broker_names, wait=False)
    first = stored[client.ids[0]]
    assert first, "something was written"
    for broker_id, batches in stored.items():
        assert len(batches) == len(first), (broker_id, len(batches), len(first))
        for mine, theirs in zip(batches, first, strict=True):
            offset = parse_batch(theirs).base_offset
            assert mine == theirs, f"broker {broker_id} differs at offset {offset}"
    cluster.wait_ready(cluster.broker_names)


# --- the tests -----------------------------------------------------------------------------------

#: How a link is partitioned: "cut" drops its connections and refuses new ones (a peer that is
#: gone: connects fail fast); "stall" keeps the connections open and passes no byte either way
#: (a black hole: only deadlines notice).
FAULTS = ("cut", "stall")


def partition(fault: str, *links: Proxy) -> None:
    if fault == "cut":
        proxies.cut(*links)
    else:
        for link in links:
            proxies.timeout(link, stream="both")


@pytest.mark.parametrize("fault", FAULTS)
def test_leader_partitioned_from_the_controllers(net: Net, client: Client, fault: str) -> None:
    topic = f"isolated-{fault}"
    old, *others = client.ids
    client.create_topic(topic, [old, *others])
    before = client.leader(topic)
    acked: dict[bytes, int] = {}  # value -> offset
    sent_at: dict[bytes, float] = {}  # value -> monotonic time of send()
    failed: list[BaseException] = []
    stop = threading.Event()

    def produce() -> None:
        with Producer(client.cluster.bootstrap, **PRODUCER) as producer:
            pending: collections.deque[tuple[bytes, Any]] = collections.deque()
            sequence = 0
            while not stop.is_set() or pending:
                if not stop.is_set() and len(pending) < 20:
                    value = b"p-%d" % sequence
                    sent_at[value] = time.monotonic()
                    pending.append((value, producer.send(topic, value, partition=0)))
                    sequence += 1
                    time.sleep(0.002)  # a steady stream, not a CPU hog on a 2-core machine
                    continue
                value, future = pending.popleft()
                try:
                    acked[value] = future.result(60).offset
                except BaseException as error:
                    failed.append(error)
                    return

    thread = threading.Thread(target=produce, name="producer", daemon=True)
    thread.start()
    wait_for(lambda: len(acked) >= 100 or failed, "100 records acknowledged")

    # No heartbeat, no metadata stream any more. The others still fetch from the old leader
    # until the controllers elect a new one, so a write may still commit meanwhile.
    partition(fault, *net.controller_links(old))
    partitioned_at = time.monotonic()
    direct_acked: dict[bytes, int] = {}
    early: list[str] = []
    late: list[str] = []

    def direct(value: bytes, outcomes: list[str]) -> None:
        try:
            answer = client.produce(topic, records(value), old, timeout_ms=1_500)
        except grpc.RpcError as error:
            outcomes.append(f"gRPC {error.code().name}")
            return
        outcomes.append(ErrorCode.Name(answer.error_code))
        if answer.error_code == ErrorCode.NONE:
            direct_acked[value] = int(answer.base_offset)

    def new_leader() -> pb.PartitionMetadata | None:
        direct(b"direct-early-%d" % len(early), early)
        seen = [client.partition(topic, via=[b]) for b in others]
        if all(p is not None and p.leader in others and p.leader_epoch > before.leader_epoch
               for p in seen) and len({p.leader for p in seen if p is not None}) == 1:
            return seen[0]
        return None

    after = wait_for(new_leader, "a new leader elected by the controllers", timeout_s=20)
    elected_s = time.monotonic() - partitioned_at
    unfenced = client.unfenced(via=others)
    assert unfenced is not None and old not in unfenced, "the isolated leader is fenced"
    assert after.isr and old not in after.isr and after.leader in after.isr, after
    # The key safety property: the old leader, cut off from the controllers and abandoned by
    # its followers, must not acknowledge an acks=all write any more.
    for i in range(3):
        direct(b"direct-late-%d" % i, late)
    assert not any(outcome == "NONE" for outcome in late), late
    failover_at = time.monotonic()
    wait_for(lambda: sum(1 for v in list(acked) if sent_at[v] > failover_at) >= 100 or failed,
             "100 records sent after the failover acknowledged")

    proxies.heal(*net.controller_links(old))
    healed_at = time.monotonic()
    wait_for(lambda: client.isr(topic, via=others) == client.ids, "the ISR whole again")
    rejoined_s = time.monotonic() - healed_at
    stop.set()
    thread.join(WAIT_S)
    assert not thread.is_alive() and not failed, failed

    current = client.leader(topic, via=others)
    assert current.leader != old and current.leader_epoch == after.leader_epoch
    log_records = read_all(client.cluster, topic)
    check_log(log_records, acked | direct_acked)
    by_value = {r.value: r for r in log_records}
    # Records sent once both others follow the new leader can only have been written by it.
    # (Older ones may carry epoch 0 yet be acknowledged by the new leader: written by the old
    # one, copied before the election, and answered as duplicates of the producer's retry.)
    epochs_after = {by_value[v].leader_epoch for v in acked if sent_at[v] > failover_at}
    assert epochs_after == {after.leader_epoch}, "acknowledged by the new leader"
    assert not any(v and v.startswith(b"direct-late") for v in by_value), "never committed"
    truncated = ""
    if "REQUEST_TIMED_OUT" in late:  # appended by the old leader, never committed
        old_log = client.cluster.local.log_path(broker_name(client.cluster, old))
        pattern = rf"{topic}-0: truncated from \d+ to \d+"
        found = wait_for(lambda: re.search(pattern, old_log.read_text(errors="replace")),
                         "the old leader truncating what it took alone", timeout_s=5)
        truncated = found.group(0)
    assert_replicas_identical(client, topic)
    print(f"{fault}: new leader {after.leader} elected {elected_s:.1f} s after the fault; old "
          f"leader in the ISR {rejoined_s:.1f} s after the heal; {len(acked)} acknowledged; "
          f"direct to the old leader before the election: {collections.Counter(early)}, "
          f"after: {late}; {truncated}")


@pytest.mark.parametrize("fault", FAULTS)
def test_follower_partitioned_from_the_leader(net: Net, client: Client, fault: str) -> None:
    topic = f"lagging-{fault}"
    follower, leader, other = client.ids[0], client.ids[1], client.ids[2]
    client.create_topic(topic, [leader, other, follower])
    producer = RawProducer(client, topic, "lag")
    producer.start()
    producer.wait_acked(20, "20 records acknowledged")

    partition(fault, net.link(follower, leader))
    partitioned_at = time.monotonic()
    wait_for(lambda: client.isr(topic) == sorted([leader, other]), "the follower out of the ISR",
             timeout_s=15)
    shrink_s = time.monotonic() - partitioned_at
    assert follower in (client.unfenced(via=[leader]) or []), "it still reaches the controllers"
    during = len(producer.acked)
    producer.wait_acked(during + 30, "30 records acknowledged by 2 of 3")
    assert client.leader(topic).leader == leader

    proxies.heal(net.link(follower, leader))
    healed_at = time.monotonic()
    wait_for(lambda: client.isr(topic) == client.ids, "the follower back in the ISR")
    rejoin_s = time.monotonic() - healed_at
    producer.wait_acked(len(producer.acked) + 10, "10 more with the ISR whole")
    producer.finish()

    check_log(read_all(client.cluster, topic), {v: o for v, o, _ in producer.acked})
    assert_replicas_identical(client, topic)
    print(f"{fault}: ISR shrink {shrink_s:.1f} s after the fault, rejoin {rejoin_s:.1f} s "
          f"after the heal; {len(producer.acked)} acknowledged; answers {dict(producer.codes)}")


def test_slow_replication_link(net: Net, client: Client) -> None:
    topic = "slow"
    slow, leader, other = client.ids[2], client.ids[0], client.ids[1]
    client.create_topic(topic, [leader, other, slow])
    producers = [RawProducer(client, topic, f"slow{i}") for i in range(2)]
    for p in producers:
        p.start()
    for p in producers:
        p.wait_acked(10, "10 records acknowledged on a clean link")
    clean = sorted(s for p in producers for _, _, s in p.acked)

    proxies.latency(net.link(slow, leader), LATENCY_MS, stream="both")
    marks = [len(p.acked) for p in producers]
    slowed_at = time.monotonic()
    isr_seen: set[tuple[int, ...]] = set()

    def observed() -> bool:
        isr_seen.add(tuple(client.isr(topic)))
        # More than a lag period on the slow link, and a few writes over it per producer.
        return (time.monotonic() - slowed_at > 2.5 * LAG_TIME_MAX_MS / 1000
                and all(len(p.acked) >= mark + 5 for p, mark in zip(producers, marks, strict=True)))
    wait_for(observed, "5 records per producer acknowledged over the slow link")
    for p in producers:
        p.finish()
    slowed = sorted(s for p, mark in zip(producers, marks, strict=True)
                    for _, _, s in p.acked[mark:])
    wait_for(lambda: client.isr(topic) == client.ids, "the ISR whole at the end")

    # While the slow follower is in the ISR an acks=all write waits for it: a round trip over
    # the slowed link at least (150 ms each way).
    assert slowed[-1] >= 2 * LATENCY_MS / 1000, (clean[-1], slowed[-1])
    bad = {c for p in producers for c in p.codes
           if c != "NONE" and c not in {ErrorCode.Name(r) for r in RETRIABLE}}
    assert bad == set(), bad
    check_log(read_all(client.cluster, topic), {v: o for p in producers for v, o, _ in p.acked})
    client.wait_converged(topic)
    print(f"produce latency clean median {clean[len(clean) // 2] * 1000:.0f} ms, slowed median "
          f"{slowed[len(slowed) // 2] * 1000:.0f} ms max {slowed[-1] * 1000:.0f} ms; ISRs seen "
          f"{sorted(isr_seen)}; answers {[dict(p.codes) for p in producers]}")
