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
(tests/integration/replica_checks.py's Client: BrokerService stubs, batches from
tidelog.record_batch.build_batch); the client library is not used. **Replica comparison**
(replica_checks.assert_replicas_identical): the wire has no "read a follower's log" call, so
the test waits until every replica reports the leader's LEO (DescribeLogs), then kill -9s the
three brokers, opens each broker's RocksDB with broker.storage.Storage (recovery included,
exactly as a restart would) and compares the stored batches per offset, bytes for bytes; then it
starts the brokers again (they re-register once their old sessions expire).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_harness import ClusterHarness
from replica_checks import (
    RPC_TIMEOUT_S,
    WAIT_S,
    Client,
    all_running,
    assert_replicas_identical,
    records,
    values_of,
    wait_for,
)

from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 3_000
OVERRIDES = {
    "controller": {"broker_session_timeout_ms": SESSION_TIMEOUT_MS,
                   "fence_check_interval_ms": 100},
    "broker": {"heartbeat_interval_ms": 500, "replica_lag_time_max_ms": 2_000,
               "replica_fetch_wait_max_ms": 200},
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("replication") / "cluster"
    with ClusterHarness.started(base, controllers=3, brokers=3, overrides=OVERRIDES) as harness:
        harness.start_brokers()
        yield harness


@pytest.fixture
def client(cluster: ClusterHarness) -> Iterator[Client]:
    """The module's cluster with every node running and ready (a test may have stopped some)."""
    all_running(cluster)
    c = Client(cluster)
    wait_for(lambda: len(c.live()) == 3, "three brokers")
    yield c
    c.close()


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
    stored = assert_replicas_identical(client, "identical", replicas)
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
    stored = assert_replicas_identical(client, "failover", replicas)
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
    stored = assert_replicas_identical(client, "diverge", replicas)
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
