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
chaos/router.py: one listening port per broker, and each tunnel it is asked for goes to a Toxiproxy
link of its own, ``broker-N>controller-M`` or ``broker-N>broker-K``. So every outgoing gRPC
connection of a broker (heartbeats and the metadata stream to each controller, replication
fetches to each leader's inter-broker port) crosses exactly one link, and a toxic on a link is
a fault on exactly that source→destination pair. That is needed because a broker reaches a
leader at the address the leader advertises, the same for every follower: a proxy in front of
the leader could not cut one follower only. The test's own clients connect to the brokers
directly; the controllers' Raft traffic is not proxied. Links are healed (``proxies.faults()``)
at the end of every test.

Replica comparison, as in test_broker_replication.py (replica_checks.assert_replicas_identical):
the wire has no "read a follower's log", so once DescribeLogs shows every replica at the leader's
LEO, the three brokers are killed (-9), each one's RocksDB is opened with broker.storage.Storage
and the stored batches are compared byte for byte; then the brokers start again. Waits are
bounded polls; nothing sleeps to assert.
"""

from __future__ import annotations

import collections
import contextlib
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_harness import ClusterHarness
from replica_checks import (
    RETRIABLE,
    RPC_TIMEOUT_S,
    WAIT_S,
    Client,
    all_running,
    assert_replicas_identical,
    broker_name,
    read_all,
    records,
    wait_for,
)
from toxiproxy import Proxy

from tidelog.chaos import proxies
from tidelog.chaos.router import LinkRouter as ConnectRouter
from tidelog.client import ConsumerRecord, Producer, TopicPartition
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
SESSION_TIMEOUT_MS = 3_000
LAG_TIME_MAX_MS = 2_000
OVERRIDES = {
    "controller": {"broker_session_timeout_ms": SESSION_TIMEOUT_MS,
                   "fence_check_interval_ms": 100},
    "broker": {"heartbeat_interval_ms": 500, "replica_lag_time_max_ms": LAG_TIME_MAX_MS,
               "replica_fetch_wait_max_ms": 200},
}
PRODUCE_TIMEOUT_MS = 3_000
LATENCY_MS = 150
PRODUCER: dict[str, Any] = dict(request_timeout_ms=PRODUCE_TIMEOUT_MS, retry_backoff_ms=50,
                                delivery_timeout_ms=60_000, retry_backoff_max_ms=500,
                                max_block_ms=10_000)


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


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    base: Path = tmp_path_factory.mktemp("partitions") / "cluster"
    with proxies.toxiproxy(), contextlib.closing(ConnectRouter()) as router:
        cluster = ClusterHarness.create(base, controllers=3, brokers=3, overrides=OVERRIDES)
        with cluster:
            result = Net(cluster, router)
            targets = {n: cluster.node(n).controller_port for n in cluster.controller_names}
            # Brokers reach each other on the inter-broker listener (ReplicaService lives
            # there only), so that is the port a broker>broker link leads to.
            targets |= {n: cluster.node(n).inter_broker_port for n in cluster.broker_names}
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
    all_running(cluster)
    # A Produce call's deadline is its timeout + 2 s: over a stalled link it fails well within
    # the test's waits.
    c = Client(cluster, produce_timeout_ms=PRODUCE_TIMEOUT_MS, produce_slack_s=2)
    wait_for(lambda: c.unfenced(via=c.ids) == c.ids, "three unfenced brokers")
    with proxies.faults():
        yield c
    c.close()


# --- raw gRPC (replica_checks.Client) and checks -------------------------------------------------


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
                answer = self.client.produce(self.topic, data, self.client.leader(self.topic))
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
    client.create_topic(topic, [old, *others], first_leads=True, min_insync_replicas="2")
    before = client.partition(topic)
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
        seen = [client.peek(topic, via=[b]) for b in others]
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

    current = client.partition(topic, via=others)
    assert current.leader != old and current.leader_epoch == after.leader_epoch
    log_records = read_all(client.cluster, [TopicPartition(topic, 0)])
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
    client.create_topic(topic, [leader, other, follower], first_leads=True,
                        min_insync_replicas="2")
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
    assert client.leader(topic) == leader

    proxies.heal(net.link(follower, leader))
    healed_at = time.monotonic()
    wait_for(lambda: client.isr(topic) == client.ids, "the follower back in the ISR")
    rejoin_s = time.monotonic() - healed_at
    producer.wait_acked(len(producer.acked) + 10, "10 more with the ISR whole")
    producer.finish()

    check_log(read_all(client.cluster, [TopicPartition(topic, 0)]),
              {v: o for v, o, _ in producer.acked})
    assert_replicas_identical(client, topic)
    print(f"{fault}: ISR shrink {shrink_s:.1f} s after the fault, rejoin {rejoin_s:.1f} s "
          f"after the heal; {len(producer.acked)} acknowledged; answers {dict(producer.codes)}")


def test_slow_replication_link(net: Net, client: Client) -> None:
    topic = "slow"
    slow, leader, other = client.ids[2], client.ids[0], client.ids[1]
    client.create_topic(topic, [leader, other, slow], first_leads=True, min_insync_replicas="2")
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
    check_log(read_all(client.cluster, [TopicPartition(topic, 0)]),
              {v: o for p in producers for v, o, _ in p.acked})
    client.wait_converged(topic)
    print(f"produce latency clean median {clean[len(clean) // 2] * 1000:.0f} ms, slowed median "
          f"{slowed[len(slowed) // 2] * 1000:.0f} ms max {slowed[-1] * 1000:.0f} ms; ISRs seen "
          f"{sorted(isr_seen)}; answers {[dict(p.codes) for p in producers]}")
