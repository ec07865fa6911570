"""The idempotent producer's sequence numbers wrap from 2**31-1 to 0, as Kafka's do.

Kafka's sequence per producer and partition is an int32; ``DefaultRecordBatch.incrementSequence``
wraps it to 0, and a batch may span the wrap (its last sequence is then below its base). The
client's arithmetic (``increment_sequence``, ``sequence_before``) is checked against Kafka's rule
directly, then the state and the accumulator across the wrap, then a producer whose partition
sequence starts just below 2**31-1 sends across it to the fake broker (which checks sequences
with Kafka's rule): every record lands once, in order, under one producer epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from fake_broker import FakeCluster

from tidelog.client import Producer
from tidelog.client._accumulator import ProducerBatch
from tidelog.client._idempotence import (
    SEQUENCE_MAX,
    IdempotenceState,
    increment_sequence,
    sequence_before,
)
from tidelog.client.records import TopicPartition
from tidelog.invariants import InvariantViolation
from tidelog.record_batch import NewRecord, parse_batch

T = TypeVar("T")
WAIT_S = 15  # upper bound on any wait; tests finish far sooner
FAST = dict(request_timeout_ms=2_000, delivery_timeout_ms=10_000, retry_backoff_ms=10,
            retry_backoff_max_ms=50, max_block_ms=5_000)
TP = TopicPartition("t", 0)


def kafka_increment(sequence: int, increment: int) -> int:
    """DefaultRecordBatch.incrementSequence, transcribed."""
    if sequence > 2**31 - 1 - increment:
        return increment - (2**31 - 1 - sequence) - 1
    return sequence + increment


# ------------------------------------------------------------------------------ arithmetic
@pytest.mark.parametrize(("sequence", "increment", "expected"), [
    (0, 1, 1), (41, 0, 41), (SEQUENCE_MAX - 1, 1, SEQUENCE_MAX), (SEQUENCE_MAX, 1, 0),
    (SEQUENCE_MAX - 1, 3, 1), (SEQUENCE_MAX, SEQUENCE_MAX, SEQUENCE_MAX - 1),
    (2**30, 2**30, 0),
])
def test_increment_wraps_as_kafka(sequence: int, increment: int, expected: int) -> None:
    assert increment_sequence(sequence, increment) == expected
    assert kafka_increment(sequence, increment) == expected


def test_increment_refuses_values_outside_int32() -> None:
    for sequence, increment in [(-1, 1), (SEQUENCE_MAX + 1, 0), (0, -1), (0, 2**31)]:
        with pytest.raises(ValueError, match="outside"):
            increment_sequence(sequence, increment)


def test_sequence_order_across_the_wrap() -> None:
    assert sequence_before(SEQUENCE_MAX, 0)
    assert sequence_before(SEQUENCE_MAX - 5, 3)
    assert not sequence_before(0, SEQUENCE_MAX)
    assert not sequence_before(7, 7)
    assert sequence_before(1, 2) and not sequence_before(2, 1)


# ------------------------------------------------------------------------------ state
def batch(count: int, tp: TopicPartition = TP) -> ProducerBatch[None]:
    return ProducerBatch(tp=tp, created_ms=0, result=None,
                         records=[NewRecord(None, b"v%d" % i, (), 1) for i in range(count)])


def test_the_state_stamps_and_acknowledges_across_the_wrap() -> None:
    idem = IdempotenceState(enabled=True, max_in_flight=5)
    idem.set_producer_id(7, 0)
    idem.set_sequences(TP, next_sequence=SEQUENCE_MAX - 1, last_acked=SEQUENCE_MAX - 2)
    spanning, after = batch(3), batch(2)
    assert idem.can_send(spanning)
    idem.on_drain(spanning)
    assert (spanning.base_sequence, spanning.last_sequence) == (SEQUENCE_MAX - 1, 0)
    assert idem.next_sequence(TP) == 1
    idem.on_drain(after)
    assert (after.base_sequence, after.last_sequence) == (1, 2)
    assert idem.is_first_unacked(spanning) and not idem.is_first_unacked(after)
    idem.on_response(spanning)
    idem.on_acked(spanning)
    assert idem.is_first_unacked(after)
    idem.on_response(after)
    idem.on_acked(after)
    idem.on_acked(spanning)  # a late duplicate answer does not move the last acked back
    assert idem.is_first_unacked(batch_at(idem, 3))


def batch_at(idem: IdempotenceState, sequence: int) -> ProducerBatch[None]:
    b = batch(1)
    b.stamp(producer_id=idem.producer_id, producer_epoch=idem.producer_epoch,
            base_sequence=sequence)
    return b


def test_a_rolled_back_stamp_across_the_wrap_gives_the_sequence_back() -> None:
    idem = IdempotenceState(enabled=True, max_in_flight=5)
    idem.set_producer_id(7, 0)
    idem.set_sequences(TP, next_sequence=SEQUENCE_MAX, last_acked=SEQUENCE_MAX - 1)
    b = batch(2)
    idem.on_drain(b)
    assert idem.next_sequence(TP) == 1
    idem.on_response(b)
    idem.rollback(b)
    assert idem.next_sequence(TP) == SEQUENCE_MAX and not b.has_sequence


def test_sequences_reset_with_batches_in_flight_is_refused_even_under_O() -> None:
    idem = IdempotenceState(enabled=True, max_in_flight=5)
    idem.set_producer_id(7, 0)
    idem.on_drain(batch(1))
    with pytest.raises(InvariantViolation, match="in flight"):
        idem.set_producer_id(7, 1)


def test_a_retried_batch_goes_back_in_sequence_order_across_the_wrap() -> None:
    from tidelog.client._accumulator import RecordAccumulator

    acc: RecordAccumulator[None] = RecordAccumulator(
        new_result=lambda: None, batch_size=1_000, linger_ms=0, buffer_memory=10_000,
        retry_backoff_ms=0, delivery_timeout_ms=1_000)
    idem = IdempotenceState(enabled=True, max_in_flight=5)
    idem.set_producer_id(7, 0)
    idem.set_sequences(TP, next_sequence=SEQUENCE_MAX - 1, last_acked=SEQUENCE_MAX - 2)
    first, second = batch(2), batch(1)  # MAX-1..MAX, then 0
    idem.on_drain(first)
    idem.on_drain(second)
    acc.reenqueue(second, now_ms=0)  # answered first (out of order), then the earlier one
    acc.reenqueue(first, now_ms=0)
    assert [b.base_sequence for b in acc.queued(TP)] == [SEQUENCE_MAX - 1, 0]


# ------------------------------------------------------------------------------ a producer
@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(1) as fc:
        yield fc


def on_loop(producer: Producer, fn: Callable[[], T]) -> T:
    async def call() -> T:
        return fn()

    return producer._io.run(call(), WAIT_S)


def start_near_the_wrap(cluster: FakeCluster, producer: Producer, topic: str,
                        next_sequence: int) -> int:
    """Send one record (the producer gets its id), then put the partition's sequences on both
    sides at ``next_sequence`` (the leader has seen everything before it)."""
    first = producer.send(topic, b"first")
    producer.flush(WAIT_S * 1000)
    assert first.result(0).offset == 0
    idem = producer._sender._idem
    tp = TopicPartition(topic, 0)
    on_loop(producer, lambda: idem.set_sequences(
        tp, next_sequence=next_sequence, last_acked=next_sequence - 1))
    cluster.set_last_sequence(topic, 0, idem.producer_id, next_sequence - 1)
    return idem.producer_epoch


def sent_batches(cluster: FakeCluster, topic: str) -> list[tuple[int, int, int]]:
    """(producer epoch, base sequence, record count) of each batch sent to ``topic``."""
    out = []
    for request in cluster.produce_requests:
        for td in request.topics:
            if td.name == topic:
                for pd in td.partitions:
                    b = parse_batch(pd.batch)
                    out.append((b.producer_epoch, b.base_sequence, b.record_count))
    return out


def test_a_producer_sends_one_record_at_a_time_across_the_wrap(cluster: FakeCluster) -> None:
    cluster.create_topic("wrap-single", 1)
    with Producer(cluster.bootstrap, linger_ms=0, **FAST) as producer:
        epoch = start_near_the_wrap(cluster, producer, "wrap-single", SEQUENCE_MAX - 1)
        offsets = [producer.send("wrap-single", b"r%d" % i).result(WAIT_S).offset
                   for i in range(5)]
    assert offsets == [1, 2, 3, 4, 5]
    assert [r.value for r in cluster.records("wrap-single", 0)] == [b"first"] + [
        b"r%d" % i for i in range(5)]
    assert sent_batches(cluster, "wrap-single")[1:] == [
        (epoch, SEQUENCE_MAX - 1, 1), (epoch, SEQUENCE_MAX, 1), (epoch, 0, 1), (epoch, 1, 1),
        (epoch, 2, 1)]


def test_a_producer_sends_a_batch_that_spans_the_wrap(cluster: FakeCluster) -> None:
    """Base sequence 2**31-2 with 4 records ends at 1 (the broker's validation must allow it,
    as Kafka's does); the next batch starts at 2, under the same epoch."""
    cluster.create_topic("wrap-batch", 1)
    with Producer(cluster.bootstrap, linger_ms=5_000, **FAST) as producer:
        epoch = start_near_the_wrap(cluster, producer, "wrap-batch", SEQUENCE_MAX - 1)
        spanning = producer.send_many("wrap-batch", [b"a", b"b", b"c", b"d"])
        producer.flush(WAIT_S * 1000)
        after = producer.send_many("wrap-batch", [b"e", b"f"])
        producer.flush(WAIT_S * 1000)
        offsets = [f.result(0).offset for f in spanning + after]
    assert offsets == [1, 2, 3, 4, 5, 6]
    assert [r.value for r in cluster.records("wrap-batch", 0)][1:] == [
        b"a", b"b", b"c", b"d", b"e", b"f"]
    assert sent_batches(cluster, "wrap-batch")[1:] == [
        (epoch, SEQUENCE_MAX - 1, 4), (epoch, 2, 2)]


def test_a_retry_across_the_wrap_is_answered_as_a_duplicate(cluster: FakeCluster) -> None:
    """A batch written but not acknowledged (the answer lost) is resent with its sequences
    across the wrap; the leader recognises it and the record is in the log once."""
    from tidelog.errors import ErrorCode

    cluster.create_topic("wrap-retry", 1)
    with Producer(cluster.bootstrap, linger_ms=0, **FAST) as producer:
        start_near_the_wrap(cluster, producer, "wrap-retry", SEQUENCE_MAX)
        cluster.inject("Produce", ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, topic="wrap-retry",
                       after_append=True)
        spanning = producer.send_many("wrap-retry", [b"x", b"y"])  # MAX, 0
        assert [f.result(WAIT_S).offset for f in spanning] == [1, 2]
        assert producer.send("wrap-retry", b"z").result(WAIT_S).offset == 3
    assert [r.value for r in cluster.records("wrap-retry", 0)] == [b"first", b"x", b"y", b"z"]

