"""Clients spread over many partitions: one request per broker carries them all.

Against fake brokers (tests/unit/fake_broker.py, which records every Produce and Fetch): a
producer with a record for each of many partitions sends them in one Produce request per leader
when it flushes, and a consumer assigned many partitions fetches all of a leader's partitions in
one Fetch. Also the consumer's per-poll bookkeeping that no longer walks the whole assignment:
records of partitions fetched are all returned (none starves), a partition that stops existing
is still reported, and one that is sought or reset mid-poll does not return stale records.
Counts and outcomes only, never timings.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from fake_broker import FakeCluster

from tidelog.client import Consumer, ConsumerRecord, Producer, TopicPartition
from tidelog.errors import UnknownTopicOrPartitionError

WAIT_S = 15.0
PARTITIONS = 300
BROKERS = 2
FAST = dict(request_timeout_ms=2_000, retry_backoff_ms=10, retry_backoff_max_ms=50,
            fetch_max_wait_ms=50)
_names = itertools.count()


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(BROKERS) as fc:
        yield fc


def spread_topic(cluster: FakeCluster, records_per_partition: int = 1) -> str:
    """A topic of PARTITIONS partitions (leaders alternate between the brokers) holding
    ``records_per_partition`` records each, value b"<partition>-<i>"."""
    name = f"spread{next(_names)}"
    cluster.create_topic(name, PARTITIONS)
    with Producer(cluster.bootstrap, linger_ms=100_000, delivery_timeout_ms=200_000) as p:
        for i in range(records_per_partition):
            for partition in range(PARTITIONS):
                p.send(name, b"%d-%d" % (partition, i), partition=partition)
            p.flush()
    return name


def consume(consumer: Consumer, count: int) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    for _ in range(400):  # bounded: each poll waits at most 50 ms
        if len(got) >= count:
            break
        got += consumer.poll(timeout_ms=50)
    return got


def test_a_flush_sends_one_produce_request_per_leader(cluster: FakeCluster) -> None:
    name = f"spread{next(_names)}"
    cluster.create_topic(name, PARTITIONS)
    before = len(cluster.produce_requests)
    with Producer(cluster.bootstrap, linger_ms=100_000, delivery_timeout_ms=200_000) as p:
        # Unary Produce calls from the start, each seen by the fake (it has no ProduceStream).
        p._conns.multiplex = p._conns.call  # type: ignore[method-assign]
        futures = [p.send(name, b"v", partition=i) for i in range(PARTITIONS)]
        p.flush()
        assert sorted(f.result(WAIT_S).partition for f in futures) == list(range(PARTITIONS))
    sent = [[pd.partition_id for t in r.topics if t.name == name for pd in t.partitions]
            for r in list(cluster.produce_requests)[before:]]
    sent = [s for s in sent if s]
    assert sorted(p for s in sent for p in s) == list(range(PARTITIONS))  # each batch once
    assert len(sent) == BROKERS, [len(s) for s in sent]  # one request per leader


def test_a_consumer_fetches_all_of_a_leaders_partitions_in_one_request(
        cluster: FakeCluster) -> None:
    name = spread_topic(cluster)
    before = len(cluster.fetches())
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.assign([TopicPartition(name, p) for p in range(PARTITIONS)])
        got = consume(consumer, PARTITIONS)
    assert sorted(r.value for r in got) == sorted(b"%d-0" % p for p in range(PARTITIONS))
    # Every fetch from offset 0 carried all the partitions of its leader (half of them each).
    initial = [{p for t, p, offset in f if t == name and offset == 0}
               for f in cluster.fetches()[before:]]
    initial = [f for f in initial if f]
    assert initial and all(len(f) == PARTITIONS // BROKERS for f in initial), initial
    assert set().union(*initial) == set(range(PARTITIONS))


def test_every_fetched_partition_is_returned_a_few_records_per_poll(
        cluster: FakeCluster) -> None:
    """max_records far below what one fetch brings: collect() moves on one partition per poll,
    so every partition's records come back, each partition's in order."""
    name = spread_topic(cluster, records_per_partition=3)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.assign([TopicPartition(name, p) for p in range(PARTITIONS)])
        got: list[ConsumerRecord] = []
        for _ in range(4_000):  # bounded
            if len(got) >= 3 * PARTITIONS:
                break
            got += consumer.poll(timeout_ms=50, max_records=7)
    by_partition: dict[int, list[bytes | None]] = {}
    for r in got:
        by_partition.setdefault(r.partition, []).append(r.value)
    assert by_partition == {p: [b"%d-%d" % (p, i) for i in range(3)] for p in range(PARTITIONS)}


def test_a_seek_drops_records_already_fetched(cluster: FakeCluster) -> None:
    name = spread_topic(cluster, records_per_partition=3)
    tp = TopicPartition(name, 7)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.assign([TopicPartition(name, p) for p in range(PARTITIONS)])
        assert consume(consumer, 1)  # a fetch came back: 7's records are fetched or coming
        consumer.seek(tp, 1)
        mine: list[bytes | None] = []
        for _ in range(400):  # bounded: each poll waits at most 50 ms
            if len(mine) >= 2:
                break
            mine += [r.value for r in consumer.poll(timeout_ms=50) if r.partition == 7]
    assert mine == [b"7-1", b"7-2"]


def test_an_assigned_partition_that_does_not_exist_is_reported(cluster: FakeCluster) -> None:
    name = spread_topic(cluster)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest",
                  **dict(FAST, request_timeout_ms=300)) as consumer:
        consumer.assign([TopicPartition(name, p) for p in range(PARTITIONS + 1)])
        with pytest.raises(UnknownTopicOrPartitionError, match=f"{name}-{PARTITIONS}|"
                                                               f"{name}, {PARTITIONS}"):
            for _ in range(400):  # bounded: each poll waits at most 50 ms
                consumer.poll(timeout_ms=50)
