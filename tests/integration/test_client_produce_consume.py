"""Producer and Consumer against a real cluster: 3 controller and 3 broker processes.

What it checks, with acks=all, replication factor 3 and min.insync.replicas=2:
- a round trip: keyed records land on the partition Kafka's partitioner picks, and a consumer
  reads every partition back in offset order with keys, values, headers and timestamps; every
  codec; offsets for timestamps, beginning and end offsets, and Admin's log offsets;
- leader failover mid-produce (kill -9 of the partition leader while records are in flight):
  every acknowledged record is in the log exactly once, no record appears twice (idempotence
  turns the client's retries into no-ops), and one producer's records keep their order;
- a consumer follows the leader to another broker (controlled shutdown moves it);
- an idle consumer of 300 partitions fetches within sessions (KIP-227): after its full requests,
  its rounds list and evaluate next to nothing (the brokers' fetch-session counters), and a
  record produced meanwhile still reaches it at once;
- back-pressure and timeouts: with the only replica's broker paused (SIGSTOP), send() blocks on a
  full buffer and raises RequestTimedOutError after max_block_ms, queued records fail with
  RequestTimedOutError after delivery_timeout_ms, and the producer works again once it resumes;
- bad input: unknown topics and partitions, invalid names, a record above the topic's
  max.message.bytes, each with its documented typed error.

How: tests/integration/cluster_harness.py runs the processes; the whole module is skipped while
the brokers answer Produce with UNIMPLEMENTED (their data plane is being built), and runs by
itself once it lands. Waits are bounded polls on what the cluster reports.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from cluster_harness import ClusterHarness

from tidelog.client import (
    Admin,
    Consumer,
    ConsumerRecord,
    NewTopic,
    Producer,
    RecordMetadata,
    TopicPartition,
)
from tidelog.client._partitioner import partition_for_key
from tidelog.errors import (
    InvalidTopicError,
    MessageTooLargeError,
    RequestTimedOutError,
    TidelogError,
    UnknownTopicOrPartitionError,
)
from tidelog.v1 import broker_pb2, broker_pb2_grpc

pytestmark = pytest.mark.integration

T = TypeVar("T")
FAST = {"controller": {"broker_session_timeout_ms": 3_000, "fence_check_interval_ms": 100}}
WAIT_S = 30.0
RELIABLE = {"min.insync.replicas": "2"}
PRODUCER = dict(request_timeout_ms=5_000, delivery_timeout_ms=60_000, retry_backoff_ms=50,
                max_block_ms=10_000)
CONSUMER = dict(request_timeout_ms=5_000, retry_backoff_ms=50, fetch_max_wait_ms=200)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("client-data") / "cluster"
    with ClusterHarness.started(base, controllers=3, brokers=3, overrides=FAST) as harness:
        harness.start_brokers()
        _skip_without_data_plane(harness.bootstrap.split(",")[0])
        yield harness


def _skip_without_data_plane(address: str) -> None:
    channel = grpc.insecure_channel(address)
    try:
        broker_pb2_grpc.BrokerServiceStub(channel).ListOffsets(
            broker_pb2.ListOffsetsRequest(), timeout=5)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNIMPLEMENTED:
            pytest.skip("the brokers do not serve produce/fetch yet (data plane not built)")
        raise
    finally:
        channel.close()


@pytest.fixture
def healthy(cluster: ClusterHarness) -> ClusterHarness:
    """Every broker running and unpaused (a test may have stopped one)."""
    for name in cluster.broker_names:
        if cluster.is_paused(name):
            cluster.resume(name)
    down = [n for n in cluster.broker_names if not cluster.is_running(n)]
    cluster.start(*down)
    with Admin(cluster.bootstrap) as admin:
        eventually(lambda: _unfenced(admin, 3), what="three unfenced brokers")
    return cluster


def eventually(check: Callable[[], T], *, what: str, timeout_s: float = WAIT_S) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except (AssertionError, TidelogError):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}") from None
            time.sleep(0.05)


def _unfenced(admin: Admin, count: int) -> None:
    assert sum(not b.fenced for b in admin.describe_cluster().brokers) == count


def create(cluster: ClusterHarness, name: str, partitions: int, rf: int,
           configs: dict[str, str] | None = None) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name, partitions, rf, configs or {})]).all()
        eventually(lambda: _all_led(admin, name, partitions), what=f"leaders for {name}")


def _all_led(admin: Admin, name: str, partitions: int) -> None:
    described = admin.describe_topics([name], include_offsets=False)[name]
    assert len(described.partitions) == partitions
    assert all(p.leader >= 0 for p in described.partitions)


def leader_of(cluster: ClusterHarness, name: str, partition: int) -> int:
    with Admin(cluster.bootstrap) as admin:
        return admin.describe_topics([name], include_offsets=False)[name].partitions[
            partition].leader


def broker_name(cluster: ClusterHarness, broker_id: int) -> str:
    """The process name of a broker id (names count from 1, ids from 101)."""
    return next(n.name for n in cluster.local.brokers() if n.node_id == broker_id)


def read_all(cluster: ClusterHarness, tps: list[TopicPartition]) -> list[ConsumerRecord]:
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", **CONSUMER) as consumer:
        ends = consumer.end_offsets(tps)
        consumer.assign(tps)
        out: list[ConsumerRecord] = []
        deadline = time.monotonic() + WAIT_S
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "could not read up to the high watermark"
            out += consumer.poll(timeout_ms=500)
        return out


def test_round_trip(healthy: ClusterHarness) -> None:
    create(healthy, "data-round-trip", 3, 3, RELIABLE)
    keys = [b"user-%d" % i for i in range(300)]
    with Producer(healthy.bootstrap, **PRODUCER) as producer:
        futures = [producer.send("data-round-trip", b"v%d" % i, key=k, headers=[("i", b"%d" % i)])
                   for i, k in enumerate(keys)]
        metas = [f.result(WAIT_S) for f in futures]
    for key, meta in zip(keys, metas, strict=True):
        assert meta.partition == partition_for_key(key, 3)
    records = read_all(healthy, [TopicPartition("data-round-trip", p) for p in range(3)])
    assert len(records) == 300
    for p in range(3):
        mine = [r for r in records if r.partition == p]
        assert [r.offset for r in mine] == list(range(len(mine)))
    by_value = {r.value: r for r in records}
    for i, (key, meta) in enumerate(zip(keys, metas, strict=True)):
        record = by_value[b"v%d" % i]
        assert (record.key, record.offset, record.partition) == (key, meta.offset, meta.partition)
        assert record.headers == (("i", b"%d" % i),) and record.timestamp_ms == meta.timestamp_ms


def test_codecs_timestamps_and_log_offsets(healthy: ClusterHarness) -> None:
    name = "data-codecs"
    create(healthy, name, 1, 3)
    tp = TopicPartition(name, 0)
    for n, codec in enumerate(("gzip", "lz4", "zstd", "none")):
        with Producer(healthy.bootstrap, compression_type=codec, linger_ms=20,
                      **PRODUCER) as producer:
            futures = [producer.send(name, b"%s-%d" % (codec.encode(), i),
                                     timestamp_ms=1_000 * (10 * n + i + 1)) for i in range(10)]
            assert [f.result(WAIT_S).offset for f in futures] == list(range(10 * n, 10 * n + 10))
    records = read_all(healthy, [tp])
    assert [r.offset for r in records] == list(range(40))
    assert records[25].value == b"zstd-5" and records[25].timestamp_ms == 26_000
    with Consumer(healthy.bootstrap, **CONSUMER) as consumer:
        found = consumer.offsets_for_times({tp: 25_500})[tp]
        assert found is not None and (found.offset, found.timestamp_ms) == (25, 26_000)
        assert consumer.offsets_for_times({tp: 10**12}) == {tp: None}
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 40}
    with Admin(healthy.bootstrap) as admin:
        [p] = admin.describe_topics([name])[name].partitions
    assert (p.log_start_offset, p.high_watermark, p.log_end_offset) == (0, 40, 40)
    assert p.size_bytes > 0


def test_leader_failover_mid_produce_loses_and_duplicates_nothing(healthy: ClusterHarness) -> None:
    name = "data-failover"
    create(healthy, name, 1, 3, RELIABLE)
    acked: list[RecordMetadata] = []
    failed: list[TidelogError] = []
    lock = threading.Lock()
    halfway = threading.Event()
    total = 2_000

    def on_delivery(meta: RecordMetadata | None, error: TidelogError | None) -> None:
        with lock:
            if meta is not None:
                acked.append(meta)
                if len(acked) >= total // 4:
                    halfway.set()
            else:
                assert error is not None
                failed.append(error)

    with Producer(healthy.bootstrap, linger_ms=2, batch_size=2_000, **PRODUCER) as producer:
        send_errors: list[BaseException] = []

        def send_all() -> None:
            try:
                for i in range(total):
                    producer.send(name, b"%06d" % i, on_delivery=on_delivery)
            except BaseException as e:  # reported by the test, not lost in the thread
                send_errors.append(e)

        sending = threading.Thread(target=send_all)
        sending.start()
        assert halfway.wait(WAIT_S), "a quarter of the records were never acknowledged"
        old = leader_of(healthy, name, 0)
        healthy.kill(broker_name(healthy, old))
        sending.join(WAIT_S)
        assert not sending.is_alive() and not send_errors, send_errors
        producer.flush(int(WAIT_S * 1000))
    assert not failed, f"acks=all records failed: {failed[:3]}"
    assert len(acked) == total
    records = read_all(healthy, [TopicPartition(name, 0)])
    values = [r.value for r in records]
    assert len(values) == len(set(values)) == total, "a record was lost or written twice"
    assert values == sorted(values), "one producer's records stay in order"
    assert sorted(m.offset for m in acked) == [r.offset for r in records]


def test_consumer_follows_the_leader(healthy: ClusterHarness) -> None:
    name = "data-follow"
    create(healthy, name, 1, 3, RELIABLE)
    tp = TopicPartition(name, 0)
    with Producer(healthy.bootstrap, **PRODUCER) as producer, \
            Consumer(healthy.bootstrap, auto_offset_reset="earliest", **CONSUMER) as consumer:
        producer.send(name, b"before").result(WAIT_S)
        consumer.assign([tp])
        got = eventually(lambda: _polled(consumer, 1), what="the first record")
        old = leader_of(healthy, name, 0)
        healthy.stop(broker_name(healthy, old))  # controlled shutdown moves the leadership first
        producer.send(name, b"after").result(WAIT_S)
        got += eventually(lambda: _polled(consumer, 1), what="a record from the new leader")
    assert [r.value for r in got] == [b"before", b"after"]
    assert got[1].leader_epoch > got[0].leader_epoch


def _polled(consumer: Consumer, count: int) -> list[ConsumerRecord]:
    records = consumer.poll(timeout_ms=200)
    assert len(records) >= count
    return records


def _poll_until(consumer: Consumer, count: int) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    deadline = time.monotonic() + WAIT_S
    while len(out) < count:
        assert time.monotonic() < deadline, f"{len(out)} of {count} records polled"
        out += consumer.poll(timeout_ms=200)
    return out


def _consumer_session_counts(cluster: ClusterHarness) -> dict[str, float]:
    """tidelog_broker_fetch_session_partitions_total{kind="consumer"} per step, all brokers,
    and the fetch requests answered (request_latency_seconds_count{api="fetch"})."""
    counts = {"listed": 0.0, "evaluated": 0.0, "answered": 0.0, "requests": 0.0}
    session_line = re.compile(r'tidelog_broker_fetch_session_partitions_total\{kind="consumer",'
                              r'step="(\w+)"\} (\S+)')
    requests_line = re.compile(r'tidelog_broker_request_latency_seconds_count\{api="fetch",'
                               r'outcome="\w+"\} (\S+)')
    for name in cluster.broker_names:
        port = cluster.node(name).metrics_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        for step, value in session_line.findall(text):
            counts[step] += float(value)
        counts["requests"] += sum(float(v) for v in requests_line.findall(text))
    return counts


def test_an_idle_consumer_fetches_only_what_changed(healthy: ClusterHarness) -> None:
    partitions = 300
    create(healthy, "sessions", partitions, 3)
    tps = [TopicPartition("sessions", p) for p in range(partitions)]
    with Producer(healthy.bootstrap, acks="all", **PRODUCER) as producer:  # type: ignore[arg-type]
        for p in range(10):
            producer.send("sessions", b"before", partition=p)
    with Consumer(healthy.bootstrap, auto_offset_reset="earliest", **CONSUMER) as consumer:
        consumer.assign(tps)
        assert len(_poll_until(consumer, 10)) == 10
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:  # the last positions listed; a bounded wait
            assert consumer.poll(timeout_ms=200) == []
        before = _consumer_session_counts(healthy)
        assert before["listed"] >= partitions, "the full requests listed every partition"
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # idle: 3 s of 200 ms long-polls to 3 leaders
            assert consumer.poll(timeout_ms=200) == []
        idle = _consumer_session_counts(healthy)
        assert idle["requests"] - before["requests"] >= 10, "the consumer kept fetching"
        # Without sessions every round would list and evaluate all 300 (about 45 rounds).
        assert idle["listed"] - before["listed"] <= 5
        assert idle["evaluated"] - before["evaluated"] <= 5
        with Producer(healthy.bootstrap, **PRODUCER) as producer:
            producer.send("sessions", b"during", partition=123).result(WAIT_S)
        [record] = _poll_until(consumer, 1)
        assert (record.partition, record.value) == (123, b"during")


def test_back_pressure_and_timeouts(healthy: ClusterHarness) -> None:
    name = "data-paused"
    create(healthy, name, 1, 1)
    leader = leader_of(healthy, name, 0)
    settings = dict(PRODUCER, request_timeout_ms=1_000, delivery_timeout_ms=2_000,
                    max_block_ms=500)
    with Producer(healthy.bootstrap, buffer_memory=20_000, linger_ms=0, **settings) as producer:
        producer.send(name, b"warm-up").result(WAIT_S)
        healthy.pause(broker_name(healthy, leader))
        queued = []
        with pytest.raises(RequestTimedOutError, match="buffer_memory"):
            for _ in range(1_000):  # bounded: 1000 x 1 KB is fifty times the buffer
                queued.append(producer.send(name, b"x" * 1_000))
        for future in queued:
            with pytest.raises(RequestTimedOutError):
                future.result(WAIT_S)
        healthy.resume(broker_name(healthy, leader))
        meta = eventually(lambda: producer.send(name, b"back").result(WAIT_S),
                          what="a send after the broker resumed")
        assert meta.offset >= 1


def test_bad_input(healthy: ClusterHarness) -> None:
    create(healthy, "data-small", 1, 3, {"max.message.bytes": "1024"})
    with Producer(healthy.bootstrap, **dict(PRODUCER, max_block_ms=1_000)) as producer:
        with pytest.raises(UnknownTopicOrPartitionError):
            producer.send("data-no-such-topic", b"v")
        with pytest.raises(UnknownTopicOrPartitionError):
            producer.send("data-small", b"v", partition=7)
        with pytest.raises(InvalidTopicError):
            producer.send("bad topic!", b"v")
        with pytest.raises(MessageTooLargeError):
            producer.send("data-small", b"x" * 5_000).result(WAIT_S)
    with Consumer(healthy.bootstrap, **dict(CONSUMER, request_timeout_ms=1_000)) as consumer:
        with pytest.raises(UnknownTopicOrPartitionError):
            consumer.end_offsets([TopicPartition("data-no-such-topic", 0)], timeout_ms=1_000)
        consumer.assign([TopicPartition("data-no-such-topic", 0)])
        with pytest.raises(UnknownTopicOrPartitionError):
            for _ in range(50):  # bounded: each poll waits up to 200 ms
                consumer.poll(timeout_ms=200)
