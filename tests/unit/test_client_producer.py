"""The Producer against fake brokers (tests/unit/fake_broker.py): delivery, partitioning,
retries, idempotence, back-pressure, timeouts and bad input.

Each test sends through the real client code (accumulator, sender, metadata, gRPC) to in-process
fake brokers that keep a shared in-memory log and can be told to fail: inject an error code for
the next N produce requests (optionally after appending, so the client cannot know), move a
partition's leader, stop and restart a broker. Checks are on outcomes, never on timing: the
offsets the futures report, what the fake log holds (every acknowledged record exactly once, in
order), which errors come back typed with their code. Waits are on futures and events.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Iterator

import pytest
from fake_broker import FakeCluster, run_in_thread

from tidelog.client import Producer, RecordMetadata
from tidelog.client._accumulator import estimate_record_bytes
from tidelog.client._partitioner import partition_for_key
from tidelog.compression import codec_from_name
from tidelog.errors import (
    ErrorCode,
    InvalidProducerEpochError,
    InvalidRecordError,
    NetworkError,
    NotEnoughReplicasError,
    RequestTimedOutError,
    TidelogError,
    UnknownTopicOrPartitionError,
)
from tidelog.record_batch import NewRecord, parse_batch

WAIT_S = 15  # upper bound on any wait; tests finish far sooner
FAST = dict(request_timeout_ms=2_000, delivery_timeout_ms=10_000, retry_backoff_ms=10,
            retry_backoff_max_ms=50, max_block_ms=5_000)
_names = itertools.count()


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(3) as fc:
        yield fc


@pytest.fixture
def topic(cluster: FakeCluster) -> str:
    name = f"p{next(_names)}"
    cluster.create_topic(name, 1)
    return name


def values(cluster: FakeCluster, topic: str, partition: int = 0) -> list[bytes | None]:
    return [r.value for r in cluster.records(topic, partition)]


def test_offsets_come_back_in_order_and_match_the_log(cluster: FakeCluster, topic: str) -> None:
    with Producer(cluster.bootstrap, **FAST) as producer:
        futures = [producer.send(topic, b"v%d" % i) for i in range(50)]
        metas = [f.result(WAIT_S) for f in futures]
    assert [m.offset for m in metas] == list(range(50))
    assert all(m.topic == topic and m.partition == 0 and m.timestamp_ms > 0 for m in metas)
    assert metas[0].timestamp == metas[0].timestamp_ms
    assert values(cluster, topic) == [b"v%d" % i for i in range(50)]


def test_keys_land_where_kafka_would_put_them(cluster: FakeCluster) -> None:
    cluster.create_topic("keyed", 7)
    keys = [b"user-%d" % i for i in range(40)]
    with Producer(cluster.bootstrap, linger_ms=0, **FAST) as producer:
        metas = [producer.send("keyed", b"v", key=k).result(WAIT_S) for k in keys]
    for key, meta in zip(keys, metas, strict=True):
        assert meta.partition == partition_for_key(key, 7)
    assert {r.key for r in cluster.records("keyed", partition_for_key(keys[0], 7))} >= {keys[0]}


def test_keyless_records_stick_to_a_partition_per_batch(cluster: FakeCluster) -> None:
    cluster.create_topic("sticky", 4)
    with Producer(cluster.bootstrap, batch_size=1_000, linger_ms=5_000, **FAST) as producer:
        futures = [producer.send("sticky", b"x" * 100) for _ in range(60)]
        producer.flush(WAIT_S * 1000)
    partitions = [f.result(0).partition for f in futures]
    runs = [len(list(g)) for _, g in itertools.groupby(partitions)]
    assert len(runs) > 1, "a new batch moves keyless records to another partition"
    assert min(runs[:-1]) >= 2, "records stay on one partition until its batch is full"


def test_explicit_partition_and_user_partitioner(cluster: FakeCluster) -> None:
    cluster.create_topic("chosen", 3)
    seen: list[tuple[bytes | None, list[int], list[int]]] = []

    def by_length(key: bytes | None, partitions: list[int], available: list[int]) -> int:
        seen.append((key, list(partitions), list(available)))
        return len(key or b"") % len(partitions)

    with Producer(cluster.bootstrap, partitioner=by_length, **FAST) as producer:
        assert producer.send("chosen", b"v", key=b"ab").result(WAIT_S).partition == 2
        assert producer.send("chosen", b"v", key=b"ab", partition=0).result(WAIT_S).partition == 0
        assert producer.partitions_for("chosen") == [0, 1, 2]
    assert seen == [(b"ab", [0, 1, 2], [0, 1, 2])]
    with (Producer(cluster.bootstrap, partitioner=lambda k, p, a: 99, **FAST) as producer,
          pytest.raises(ValueError)):
        producer.send("chosen", b"v")


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd", "none"])
def test_compression(cluster: FakeCluster, codec: str) -> None:
    name = f"comp-{codec}"
    cluster.create_topic(name, 1)
    payload = [(b"k%d" % i, b"value %d " % i * 20) for i in range(30)]
    with Producer(cluster.bootstrap, compression_type=codec, linger_ms=50, **FAST) as producer:
        for key, value in payload:
            producer.send(name, value, key=key, headers=[("h", b"1"), ("n", None)])
        producer.flush(WAIT_S * 1000)
    records = cluster.records(name, 0)
    assert [(r.key, r.value) for r in records] == payload
    assert records[0].headers == (("h", b"1"), ("n", None))
    sent = [parse_batch(pd.batch) for req in cluster.produce_requests for td in req.topics
            if td.name == name for pd in td.partitions]
    assert {b.compression for b in sent} == {codec_from_name(codec)}


def test_callbacks_run_before_flush_returns(cluster: FakeCluster, topic: str) -> None:
    outcomes: list[tuple[RecordMetadata | None, TidelogError | None]] = []
    with Producer(cluster.bootstrap, linger_ms=5_000, **FAST) as producer:
        for i in range(10):
            producer.send(topic, b"%d" % i, on_delivery=lambda m, e: outcomes.append((m, e)))
        producer.flush(WAIT_S * 1000)
        assert [m.offset for m, e in outcomes if m is not None and e is None] == list(range(10))


def test_a_batch_completes_its_records_in_order(cluster: FakeCluster, topic: str) -> None:
    """Delivery callbacks first, in record order, then the futures, whose done callbacks also
    run in record order (whatever order they were added in)."""
    events: list[tuple[str, int]] = []
    with Producer(cluster.bootstrap, linger_ms=5_000, **FAST) as producer:
        futures = [producer.send(topic, b"%d" % i,
                                 on_delivery=lambda m, e: events.append(("delivery", m.offset)))
                   for i in range(5)]
        for f in reversed(futures):
            f.add_done_callback(lambda f: events.append(("done", f.result(0).offset)))
        assert not any(f.done() for f in futures)
        producer.flush(WAIT_S * 1000)
    assert events == [("delivery", i) for i in range(5)] + [("done", i) for i in range(5)]


def test_a_future_without_callbacks_is_not_kept_by_its_batch(cluster: FakeCluster,
                                                             topic: str) -> None:
    """A batch keeps nothing per record for the caller, so a future that is dropped is freed at
    once (no garbage-collector work per record while batches wait)."""
    with Producer(cluster.bootstrap, linger_ms=5_000, **FAST) as producer:
        producer.send(topic, b"first")
        future = producer.send(topic, b"second")
        assert sys.getrefcount(future) == 2  # ``future`` and the argument
        producer.flush(WAIT_S * 1000)
        assert future.result(0).offset == 1


def test_a_keyless_record_never_lands_ahead_of_newer_records(cluster: FakeCluster,
                                                             topic: str) -> None:
    """send() appends a keyless record to the batch the last one went to; once a record with a
    key or a partition has opened a newer batch on that partition, it goes there instead."""
    with Producer(cluster.bootstrap, batch_size=300, linger_ms=5_000, **FAST) as producer:
        producer.send(topic, b"a")
        producer.send(topic, b"B" * 250, partition=0)  # does not fit: a batch of its own
        producer.send(topic, b"c")
        producer.send(topic, b"d", key=b"k")
        producer.send(topic, b"e")
        producer.flush(WAIT_S * 1000)
    assert values(cluster, topic) == [b"a", b"B" * 250, b"c", b"d", b"e"]


def test_a_raising_callback_does_not_stop_the_producer(cluster: FakeCluster, topic: str) -> None:
    def boom(meta: RecordMetadata | None, error: TidelogError | None) -> None:
        raise RuntimeError("user bug")

    with Producer(cluster.bootstrap, **FAST) as producer:
        assert producer.send(topic, b"a", on_delivery=boom).result(WAIT_S).offset == 0
        assert producer.send(topic, b"b").result(WAIT_S).offset == 1


def test_idempotent_batches_carry_producer_id_epoch_and_sequences(cluster: FakeCluster,
                                                                 topic: str) -> None:
    with Producer(cluster.bootstrap, linger_ms=0, batch_size=200, **FAST) as producer:
        for i in range(20):
            producer.send(topic, b"%02d" % i)
        producer.flush(WAIT_S * 1000)
    batches = [parse_batch(pd.batch) for req in cluster.produce_requests for td in req.topics
               if td.name == topic for pd in td.partitions]
    assert len({(b.producer_id, b.producer_epoch) for b in batches}) == 1
    assert batches[0].producer_id >= 0
    expected = 0
    for b in batches:
        assert b.base_sequence == expected
        expected += b.record_count
    assert expected == 20


def test_retriable_errors_are_retried_and_nothing_is_duplicated(cluster: FakeCluster,
                                                                topic: str) -> None:
    cluster.inject("Produce", ErrorCode.NOT_ENOUGH_REPLICAS, topic=topic, times=2)
    # Written, but the answer is lost: the retry must be recognised as a duplicate.
    cluster.inject("Produce", ErrorCode.REQUEST_TIMED_OUT, topic=topic, after_append=True)
    with Producer(cluster.bootstrap, linger_ms=20, **FAST) as producer:
        futures = [producer.send(topic, b"%d" % i) for i in range(10)]
        offsets = [f.result(WAIT_S).offset for f in futures]
    assert offsets == list(range(10))
    assert values(cluster, topic) == [b"%d" % i for i in range(10)]


def test_leader_move_mid_produce_loses_and_duplicates_nothing(cluster: FakeCluster) -> None:
    cluster.create_topic("moving", 1)
    with Producer(cluster.bootstrap, linger_ms=0, max_in_flight=5, **FAST) as producer:
        first = [producer.send("moving", b"a%d" % i) for i in range(30)]
        cluster.move_leader("moving", 0, 2)
        second = [producer.send("moving", b"b%d" % i) for i in range(30)]
        cluster.move_leader("moving", 0, 3)
        third = [producer.send("moving", b"c%d" % i) for i in range(30)]
        metas = [f.result(WAIT_S) for f in first + second + third]
    acked = [m.offset for m in metas]
    assert sorted(acked) == list(range(90)), "every record acknowledged exactly once"
    log = values(cluster, "moving")
    assert len(log) == 90 and len(set(log)) == 90, "no duplicates in the log"
    for prefix in (b"a", b"b", b"c"):  # order within each phase kept
        phase = [v for v in log if v is not None and v.startswith(prefix)]
        assert phase == [prefix + b"%d" % i for i in range(30)]


@pytest.mark.parametrize("code", [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                  ErrorCode.UNKNOWN_PRODUCER_ID])
def test_a_lost_producer_state_is_repaired_with_a_new_epoch(cluster: FakeCluster, topic: str,
                                                           code: int) -> None:
    with Producer(cluster.bootstrap, **FAST) as producer:
        assert producer.send(topic, b"first").result(WAIT_S).offset == 0
        ids_before = cluster.count("InitProducerId")
        cluster.inject("Produce", code, topic=topic)
        assert producer.send(topic, b"second").result(WAIT_S).offset == 1
        assert cluster.count("InitProducerId") == ids_before + 1
    batches = [parse_batch(pd.batch) for req in cluster.produce_requests for td in req.topics
               if td.name == topic for pd in td.partitions]
    assert (batches[-1].producer_epoch, batches[-1].base_sequence) == (1, 0)
    assert values(cluster, topic) == [b"first", b"second"]


def test_a_duplicate_answer_to_a_first_attempt_is_not_taken_as_written(cluster: FakeCluster,
                                                                        topic: str) -> None:
    """DUPLICATE_SEQUENCE_NUMBER means "written before"; a batch on its first attempt cannot be
    its own duplicate, so the producer retries it (a new epoch here: it is the first
    unacknowledged batch) instead of completing it with offset -1 as if it were in the log."""
    with Producer(cluster.bootstrap, **FAST) as producer:
        assert producer.send(topic, b"first").result(WAIT_S).offset == 0
        cluster.inject("Produce", ErrorCode.DUPLICATE_SEQUENCE_NUMBER, topic=topic)
        assert producer.send(topic, b"second").result(WAIT_S).offset == 1
    assert values(cluster, topic) == [b"first", b"second"]


def test_a_batch_the_leader_appended_is_not_resent_under_a_new_epoch(cluster: FakeCluster
                                                                      ) -> None:
    """A batch answered with an error after the leader appended it (``appended``: acks=all
    that did not complete) may be in the log. When the producer bumps its epoch before the
    batch's retry, re-sequencing it from 0 would write it twice: it fails instead."""
    name = f"p{next(_names)}"
    cluster.create_topic(name, 2)
    with Producer(cluster.bootstrap, **dict(FAST, retry_backoff_ms=2_000,
                                            retry_backoff_max_ms=2_000)) as producer:
        for partition in (0, 1):
            producer.send(name, b"warm-up", partition=partition).result(WAIT_S)
        cluster.inject("Produce", ErrorCode.NOT_LEADER_OR_FOLLOWER, topic=name, partition=0,
                       after_append=True)
        cluster.inject("Produce", ErrorCode.UNKNOWN_PRODUCER_ID, topic=name, partition=1)
        maybe_twice = producer.send(name, b"appended", partition=0)
        bumped = producer.send(name, b"resequenced", partition=1)
        assert bumped.result(WAIT_S).offset == 1
        with pytest.raises(RequestTimedOutError, match="may have been written"):
            maybe_twice.result(WAIT_S)
    assert values(cluster, name, 0) == [b"warm-up", b"appended"], "written once"
    assert values(cluster, name, 1) == [b"warm-up", b"resequenced"]


def test_a_slow_response_is_retried_without_a_duplicate(cluster: FakeCluster,
                                                        topic: str) -> None:
    cluster.slow_next("Produce", 3_000)  # longer than the client waits (100 ms + 1 s slack)
    with Producer(cluster.bootstrap, linger_ms=0, **dict(FAST, request_timeout_ms=100,
                                                         delivery_timeout_ms=10_000)) as producer:
        assert producer.send(topic, b"once").result(WAIT_S).offset == 0
    assert values(cluster, topic) == [b"once"]


def test_records_behind_an_in_flight_batch_go_together(cluster: FakeCluster,
                                                       topic: str) -> None:
    """linger_ms=0 sends a record at once, but not a second non-full batch of the same
    partition while one is in flight: what queues meanwhile goes in one request after it."""
    with Producer(cluster.bootstrap, linger_ms=0, **FAST) as producer:
        producer.send(topic, b"warm-up").result(WAIT_S)  # metadata and producer id
        produced = cluster.count("Produce")
        cluster.slow_next("Produce", 500)
        first = producer.send(topic, b"first")
        deadline = time.monotonic() + WAIT_S
        while cluster.count("Produce") == produced:
            assert time.monotonic() < deadline, "the first record was never sent"
            time.sleep(0.001)
        rest = [producer.send(topic, b"r%d" % i) for i in range(20)]
        assert [f.result(WAIT_S).offset for f in [first, *rest]] == list(range(1, 22))
    requests = [r for r in cluster.produce_requests if r.topics[0].name == topic]
    counts = [parse_batch(pd.batch).record_count for r in requests for td in r.topics
              for pd in td.partitions]
    assert counts == [1, 1, 20]
    assert values(cluster, topic) == [b"warm-up", b"first"] + [b"r%d" % i for i in range(20)]


def test_a_non_retriable_error_fails_only_its_batch(cluster: FakeCluster, topic: str) -> None:
    cluster.inject("Produce", ErrorCode.INVALID_RECORD, topic=topic)
    with Producer(cluster.bootstrap, **FAST) as producer:
        failed = producer.send(topic, b"bad")
        with pytest.raises(InvalidRecordError) as info:
            failed.result(WAIT_S)
        assert info.value.code == ErrorCode.INVALID_RECORD and not info.value.retriable
        # The sequence gap is repaired with a new epoch; later sends go through.
        assert producer.send(topic, b"good").result(WAIT_S).offset == 0
    assert values(cluster, topic) == [b"good"]


def test_retries_run_out(cluster: FakeCluster, topic: str) -> None:
    cluster.inject("Produce", ErrorCode.NOT_ENOUGH_REPLICAS, topic=topic, times=100)
    with (Producer(cluster.bootstrap, retries=2, **FAST) as producer,
          pytest.raises(NotEnoughReplicasError) as info):
        producer.send(topic, b"v").result(WAIT_S)
    assert info.value.retriable
    assert values(cluster, topic) == []


def test_delivery_timeout_fails_with_a_timeout(cluster: FakeCluster, topic: str) -> None:
    cluster.inject("Produce", ErrorCode.NOT_ENOUGH_REPLICAS, topic=topic, times=10_000)
    settings = dict(FAST, request_timeout_ms=100, delivery_timeout_ms=300)
    with (Producer(cluster.bootstrap, linger_ms=0, **settings) as producer,
          pytest.raises(RequestTimedOutError, match="delivery_timeout_ms")):
        producer.send(topic, b"v").result(WAIT_S)
    assert values(cluster, topic) == []
    cluster.clear_faults()


def test_a_fenced_producer_fails_for_good(cluster: FakeCluster, topic: str) -> None:
    cluster.inject("Produce", ErrorCode.INVALID_PRODUCER_EPOCH, topic=topic)
    producer = Producer(cluster.bootstrap, **FAST)
    with pytest.raises(InvalidProducerEpochError):
        producer.send(topic, b"v").result(WAIT_S)
    with pytest.raises(InvalidProducerEpochError):
        producer.send(topic, b"again")
    producer.close()


@pytest.mark.parametrize(("acks", "wire"), [(0, 0), (1, 1), ("all", -1)])
def test_acks(cluster: FakeCluster, acks: int | str, wire: int) -> None:
    name = f"acks{wire}"
    cluster.create_topic(name, 1)
    with Producer(cluster.bootstrap, acks=acks, **FAST) as producer:  # type: ignore[arg-type]
        meta = producer.send(name, b"v").result(WAIT_S)
    assert meta.offset == (-1 if acks == 0 else 0)
    requests = [r for r in cluster.produce_requests if r.topics[0].name == name]
    assert {r.acks for r in requests} == {wire}
    batch = parse_batch(requests[0].topics[0].partitions[0].batch)
    assert (batch.producer_id >= 0) == (acks == "all")


def test_unknown_topic_partition_and_unreachable_bootstrap(cluster: FakeCluster,
                                                           topic: str) -> None:
    with Producer(cluster.bootstrap, **dict(FAST, max_block_ms=200)) as producer:
        with pytest.raises(UnknownTopicOrPartitionError, match="does not exist"):
            producer.send("no-such-topic", b"v")
        with pytest.raises(UnknownTopicOrPartitionError, match="partition 5"):
            producer.send(topic, b"v", partition=5)
    with (Producer("127.0.0.1:1", **dict(FAST, max_block_ms=200)) as producer,
          pytest.raises(NetworkError, match=r"127\.0\.0\.1:1")):
        producer.send("t", b"v")


def test_a_created_topic_is_found_by_waiting(cluster: FakeCluster) -> None:
    with Producer(cluster.bootstrap, **FAST) as producer:
        pending = run_in_thread(lambda: producer.send("late", b"v").result(WAIT_S))
        cluster.create_topic("late", 1)
        assert pending.result(WAIT_S).offset == 0


# ---------------------------------------------------------------------- brokers going away
@pytest.fixture
def own_cluster() -> Iterator[FakeCluster]:
    with FakeCluster(2) as fc:
        fc.create_topic("t", 1)  # led by broker 1
        yield fc


def test_back_pressure_blocks_then_times_out_then_recovers(own_cluster: FakeCluster) -> None:
    fc = own_cluster
    record = b"x" * 200
    fits = 2_000 // estimate_record_bytes(NewRecord(None, record))
    impatient = Producer(fc.bootstrap, buffer_memory=2_000, linger_ms=0,
                         **dict(FAST, max_block_ms=200, delivery_timeout_ms=60_000))
    patient = Producer(fc.bootstrap, buffer_memory=2_000, linger_ms=0,
                       **dict(FAST, max_block_ms=WAIT_S * 1000, delivery_timeout_ms=60_000))
    for producer in (impatient, patient):
        assert producer.partitions_for("t") == [0]  # metadata while the leader is up
    fc.stop_broker(1)  # the leader is gone: records stay buffered
    with pytest.raises(RequestTimedOutError, match="buffer_memory"):
        for _ in range(10 * fits):  # bounded: ten times what fits
            impatient.send("t", record)
    impatient.close(timeout_ms=0)

    queued = [patient.send("t", record) for _ in range(fits)]  # these fit
    last = b"y" * 200  # as large: it does not fit
    later = run_in_thread(lambda: patient.send("t", last).result(WAIT_S))
    for _ in range(int(WAIT_S * 100)):  # bounded poll until the sender thread is blocked
        if patient._memory_waiters == 1:
            break
        time.sleep(0.01)
    assert patient._memory_waiters == 1 and not later.done()
    fc.start_broker(1)
    assert later.result(WAIT_S).offset == fits
    assert [f.result(WAIT_S).offset for f in queued] == list(range(fits))
    patient.close()
    log = values(fc, "t")
    assert len(log) == fits + 1 and log[-1] == last


def test_leader_restart_mid_produce(own_cluster: FakeCluster) -> None:
    fc = own_cluster
    with Producer(fc.bootstrap, linger_ms=0, **FAST) as producer:
        before = [producer.send("t", b"a%d" % i) for i in range(20)]
        fc.stop_broker(1)
        during = [producer.send("t", b"b%d" % i) for i in range(20)]
        fc.start_broker(1)
        after = [producer.send("t", b"c%d" % i) for i in range(20)]
        offsets = [f.result(WAIT_S).offset for f in before + during + after]
    assert sorted(offsets) == list(range(60))
    log = values(fc, "t")
    assert len(log) == 60 and len(set(log)) == 60


def test_close_delivers_what_is_queued(own_cluster: FakeCluster) -> None:
    producer = Producer(own_cluster.bootstrap, linger_ms=5_000, **FAST)
    futures = [producer.send("t", b"%d" % i) for i in range(5)]
    producer.close()
    assert [f.result(0).offset for f in futures] == list(range(5))
    producer.close()  # idempotent


def test_close_with_a_timeout_fails_what_cannot_be_delivered(own_cluster: FakeCluster) -> None:
    own_cluster.stop_broker(1)
    producer = Producer(own_cluster.bootstrap, linger_ms=0, **FAST)
    future = producer.send("t", b"stuck")
    producer.close(timeout_ms=100)
    with pytest.raises(NetworkError, match="closed"):
        future.result(0)


# ---------------------------------------------------------------------------- send_many
def test_send_many_delivers_in_order_with_offsets_and_callbacks(cluster: FakeCluster,
                                                                topic: str) -> None:
    delivered: list[int] = []
    with Producer(cluster.bootstrap, **FAST) as producer:
        first = producer.send(topic, b"before")
        futures = producer.send_many(
            topic, [b"m%d" % i for i in range(2_500)], timestamp_ms=1234,
            headers=[("h", b"x")], on_delivery=lambda meta, error: delivered.append(meta.offset))
        last = producer.send(topic, b"after")
        producer.flush()
        assert first.result(0).offset == 0 and last.result(0).offset == 2_501
        metas = [f.result(0) for f in futures]
    assert [m.offset for m in metas] == list(range(1, 2_501))
    assert all(m.timestamp_ms == 1234 and m.partition == 0 for m in metas)
    assert delivered == list(range(1, 2_501))
    records = cluster.records(topic, 0)
    assert [r.value for r in records] == [b"before"] + [b"m%d" % i for i in range(2_500)] + [
        b"after"]
    assert all(r.headers == (("h", b"x"),) for r in records[1:-1])


def test_send_many_partitions_as_send_does(cluster: FakeCluster) -> None:
    name = f"p{next(_names)}"
    cluster.create_topic(name, 5)
    keys = [b"k%d" % i for i in range(40)]
    with Producer(cluster.bootstrap, **FAST) as producer:
        keyed = producer.send_many(name, [b"v"] * 40, keys=keys)
        fixed = producer.send_many(name, [b"a", None, b""], partition=3)
        keyless = producer.send_many(name, [b"s"] * 10)
        producer.flush()
        assert [f.result(0).partition for f in keyed] == [partition_for_key(k, 5) for k in keys]
        assert [f.result(0).partition for f in fixed] == [3, 3, 3]
        assert len({f.result(0).partition for f in keyless}) == 1  # one sticky batch
        assert producer.send_many(name, []) == []
    # The keyless records' sticky partition may be 3 too: they come after the fixed ones.
    assert [r.value for r in cluster.records(name, 3) if r.value != b"s"][-3:] == [
        b"a", None, b""]


def test_send_many_checks_every_argument_before_queuing(cluster: FakeCluster,
                                                        topic: str) -> None:
    with Producer(cluster.bootstrap, **FAST) as producer:
        with pytest.raises(TypeError):
            producer.send_many(topic, [b"ok", "not bytes"])  # type: ignore[list-item]
        with pytest.raises(ValueError):
            producer.send_many(topic, [b"a", b"b"], keys=[b"k"])
        with pytest.raises(ValueError):
            producer.send_many(topic, [b"a"], timestamp_ms=-1)
        with pytest.raises(InvalidRecordError):
            producer.send_many(topic, [b"a"], headers=[("h", None)] * 2_000)
        producer.send(topic, b"only").result(WAIT_S)
    assert values(cluster, topic) == [b"only"]
    with pytest.raises(RuntimeError):
        producer.send_many(topic, [b"closed"])


def test_send_many_blocks_on_memory_and_reports_what_it_queued(own_cluster: FakeCluster) -> None:
    fc = own_cluster
    record = b"x" * 200
    fits = 2_000 // estimate_record_bytes(NewRecord(None, record))
    producer = Producer(fc.bootstrap, buffer_memory=2_000, linger_ms=0,
                        **dict(FAST, max_block_ms=200, delivery_timeout_ms=60_000))
    assert producer.partitions_for("t") == [0]
    fc.stop_broker(1)  # the leader is gone: records stay buffered
    with pytest.raises(RequestTimedOutError, match="buffer_memory") as info:
        producer.send_many("t", [record] * (fits + 5))
    queued = info.value.futures  # type: ignore[attr-defined]
    assert len(queued) == fits and not any(f.done() for f in queued)
    fc.start_broker(1)
    assert [f.result(WAIT_S).offset for f in queued] == list(range(fits))
    producer.close()
    assert values(fc, "t") == [record] * fits
