"""The Consumer against fake brokers (tests/unit/fake_broker.py): positions, seeks, offsets,
pause/resume, leader changes, out-of-range resets, corruption and unknown partitions.

Records are written through the fake's own produce path (a Producer), then read back through the
real consumer code (metadata, fetch per leader, prefetch buffer, decoding). Failures are injected
in the fake: fetch errors with leader hints, leader moves with new leader epochs, a trimmed log
start, a batch with a flipped byte. Checks are on what poll() returns and what it raises (typed,
with the code and the partition/offset), never on timing.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest
from fake_broker import FakeCluster

from tidelog.client import (
    Consumer,
    ConsumerRecord,
    CorruptRecordError,
    NoOffsetForPartitionError,
    OffsetAndTimestamp,
    Producer,
    TopicPartition,
)
from tidelog.errors import (
    CorruptMessageError,
    ErrorCode,
    InvalidRequestError,
    NetworkError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)

WAIT_MS = 15_000  # upper bound on any wait; tests finish far sooner
FAST = dict(request_timeout_ms=2_000, retry_backoff_ms=10, retry_backoff_max_ms=50,
            fetch_max_wait_ms=50)
_names = itertools.count()


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(3) as fc:
        yield fc


def fill(cluster: FakeCluster, partitions: int = 1, count: int = 10,
         timestamps: list[int] | None = None) -> str:
    """A new topic with ``count`` records per partition: value b"<partition>-<i>"."""
    name = f"c{next(_names)}"
    cluster.create_topic(name, partitions)
    with Producer(cluster.bootstrap, linger_ms=0, request_timeout_ms=2_000) as producer:
        for p in range(partitions):
            for i in range(count):
                ts = None if timestamps is None else timestamps[i]
                producer.send(name, b"%d-%d" % (p, i), key=b"k%d" % i, partition=p,
                              timestamp_ms=ts)
        producer.flush(WAIT_MS)
    return name


def consume(consumer: Consumer, count: int, *, polls: int = 200) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    for _ in range(polls):  # bounded; each poll waits for data
        out += consumer.poll(timeout_ms=WAIT_MS // polls)
        if len(out) >= count:
            break
    return out


def test_earliest_reads_everything_in_order_with_all_fields(cluster: FakeCluster) -> None:
    name = fill(cluster, partitions=3, count=20)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.assign([TopicPartition(name, p) for p in range(3)])
        records = consume(consumer, 60)
        assert consumer.poll(timeout_ms=0) == []
        for p in range(3):
            mine = [r for r in records if r.partition == p]
            assert [r.offset for r in mine] == list(range(20))
            assert [r.value for r in mine] == [b"%d-%d" % (p, i) for i in range(20)]
            assert consumer.position(TopicPartition(name, p)) == 20
            assert consumer.highwater(TopicPartition(name, p)) == 20
    first = records[0]
    assert first.topic == name and first.key is not None and first.headers == ()
    assert first.timestamp == first.timestamp_ms > 0 and first.timestamp_type == 0
    assert first.topic_partition == TopicPartition(name, first.partition)


def test_latest_reads_only_new_records(cluster: FakeCluster) -> None:
    name = fill(cluster, count=5)
    tp = TopicPartition(name, 0)
    with Consumer(cluster.bootstrap, **FAST) as consumer:  # auto_offset_reset="latest"
        consumer.assign([tp])
        assert consumer.position(tp) == 5
        with Producer(cluster.bootstrap, linger_ms=0) as producer:
            producer.send(name, None, key=b"tomb", headers=[("h", None)]).result(10)
        [record] = consume(consumer, 1)
    assert (record.offset, record.key, record.value, record.headers) == (
        5, b"tomb", None, (("h", None),))


def test_seek_seek_to_beginning_and_end(cluster: FakeCluster) -> None:
    name = fill(cluster, count=10)
    tp = TopicPartition(name, 0)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 7)
        assert [r.offset for r in consume(consumer, 3)] == [7, 8, 9]
        consumer.seek_to_beginning()
        assert consumer.position(tp) == 0
        assert [r.offset for r in consumer.poll(WAIT_MS, max_records=2)] == [0, 1]
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 10
        consumer.seek(tp, 4)  # a seek while records are buffered drops them
        assert consume(consumer, 6)[0].offset == 4


def test_max_poll_records_splits_a_fetch(cluster: FakeCluster) -> None:
    name = fill(cluster, count=10)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", max_poll_records=3,
                  **FAST) as consumer:
        consumer.assign([TopicPartition(name, 0)])
        sizes = []
        total = 0
        for _ in range(50):
            got = consumer.poll(WAIT_MS // 50)
            sizes.append(len(got))
            total += len(got)
            if total >= 10:
                break
    assert max(sizes) == 3 and total == 10


def test_offsets_for_times_beginning_and_end(cluster: FakeCluster) -> None:
    stamps = [1_000 * (i + 1) for i in range(10)]
    name = fill(cluster, count=10, timestamps=stamps)
    tp = TopicPartition(name, 0)
    with Consumer(cluster.bootstrap, **FAST) as consumer:
        found = consumer.offsets_for_times({tp: 3_500})
        assert found == {tp: OffsetAndTimestamp(3, 4_000)}
        assert consumer.offsets_for_times({tp: 99_000}) == {tp: None}
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 10}
        assert consumer.partitions_for(name) == [0]
        with pytest.raises(UnknownTopicOrPartitionError):
            consumer.end_offsets([TopicPartition("nope", 0)], timeout_ms=200)


def test_pause_and_resume(cluster: FakeCluster) -> None:
    name = fill(cluster, partitions=2, count=5)
    a, b = TopicPartition(name, 0), TopicPartition(name, 1)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.assign([a, b])
        consumer.pause(b)
        assert consumer.paused() == {b}
        got = consume(consumer, 5)
        assert {r.partition for r in got} == {0}
        assert consumer.poll(timeout_ms=100) == []
        consumer.resume(b)
        assert {r.partition for r in consume(consumer, 5)} == {1}


def test_follows_leader_moves(cluster: FakeCluster) -> None:
    name = fill(cluster, count=5)
    tp = TopicPartition(name, 0)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", **FAST) as consumer, \
            Producer(cluster.bootstrap, linger_ms=0) as producer:
        consumer.assign([tp])
        assert len(consume(consumer, 5)) == 5
        cluster.move_leader(name, 0, 2)
        producer.send(name, b"after-move-1").result(10)
        cluster.move_leader(name, 0, 3)
        producer.send(name, b"after-move-2").result(10)
        got = consume(consumer, 2)
    assert [r.value for r in got] == [b"after-move-1", b"after-move-2"]
    assert [r.offset for r in got] == [5, 6]
    assert got[-1].leader_epoch == 2


def test_retriable_fetch_errors_are_retried(cluster: FakeCluster) -> None:
    name = fill(cluster, count=3)
    cluster.inject("Fetch", ErrorCode.NOT_LEADER_OR_FOLLOWER, topic=name, times=2)
    cluster.inject("Fetch", ErrorCode.KAFKA_STORAGE_ERROR, topic=name)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.assign([TopicPartition(name, 0)])
        assert [r.offset for r in consume(consumer, 3)] == [0, 1, 2]


def test_a_non_retriable_fetch_error_is_raised_typed(cluster: FakeCluster) -> None:
    name = fill(cluster, count=3)
    cluster.inject("Fetch", ErrorCode.INVALID_REQUEST, topic=name)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.assign([TopicPartition(name, 0)])
        with pytest.raises(InvalidRequestError) as info:
            consume(consumer, 3)
        assert info.value.code == ErrorCode.INVALID_REQUEST
        assert [r.offset for r in consume(consumer, 3)] == [0, 1, 2]  # it carries on after


@pytest.mark.parametrize(("reset", "expected"), [("earliest", 5), ("latest", 10)])
def test_out_of_range_resets(cluster: FakeCluster, reset: str, expected: int) -> None:
    name = fill(cluster, count=10)
    tp = TopicPartition(name, 0)
    cluster.delete_records_before(name, 0, 5)
    with Consumer(cluster.bootstrap, auto_offset_reset=reset, **FAST) as consumer:  # type: ignore[arg-type]
        consumer.assign([tp])
        consumer.seek(tp, 2)  # below the new log start
        records: list[ConsumerRecord] = []
        for _ in range(100):  # bounded; each poll returns on the fetch's answer
            records += consumer.poll(timeout_ms=50)
            if consumer.position(tp) == 10:
                break
        assert consumer.position(tp) == 10
    assert [r.offset for r in records] == list(range(expected, 10))


def test_out_of_range_without_reset_raises(cluster: FakeCluster) -> None:
    name = fill(cluster, count=3)
    tp = TopicPartition(name, 0)
    with Consumer(cluster.bootstrap, auto_offset_reset="none", **FAST) as consumer:
        consumer.assign([tp])
        with pytest.raises(NoOffsetForPartitionError) as no_position:
            consumer.poll(0)
        assert no_position.value.partitions == {tp: -1}
        consumer.seek(tp, 50)
        with pytest.raises(OffsetOutOfRangeError) as info:
            consume(consumer, 1)
        assert isinstance(info.value, NoOffsetForPartitionError)
        assert info.value.partitions == {tp: 50}
        assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
        consumer.seek(tp, 1)
        assert [r.offset for r in consume(consumer, 2)] == [1, 2]


def test_a_corrupt_batch_is_raised_with_its_place_and_not_skipped(cluster: FakeCluster) -> None:
    name = fill(cluster, count=3)
    tp = TopicPartition(name, 0)
    bad_offset = cluster.corrupt_last_batch(name, 0)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", **FAST) as consumer:
        consumer.assign([tp])
        good = consume(consumer, bad_offset, polls=20) if bad_offset else []
        assert [r.offset for r in good] == list(range(bad_offset))
        for _ in range(2):  # the position stays: it is raised again
            with pytest.raises(CorruptMessageError) as info:
                consume(consumer, 1)
            error = info.value
            assert isinstance(error, CorruptRecordError)
            assert error.topic_partition == tp and error.offset == bad_offset
            assert error.code == ErrorCode.CORRUPT_MESSAGE
        assert consumer.position(tp) == bad_offset
        consumer.seek(tp, cluster.end_offset(name, 0))  # past the corrupt batch
        assert consumer.poll(timeout_ms=100) == []


def test_unknown_partitions_raise_after_the_grace(cluster: FakeCluster) -> None:
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest",
                  **dict(FAST, request_timeout_ms=200)) as consumer:
        consumer.assign([TopicPartition("never-created", 0)])
        with pytest.raises(UnknownTopicOrPartitionError, match="never-created-0"):
            for _ in range(100):  # bounded; each poll waits up to 100 ms
                consumer.poll(timeout_ms=100)
        with pytest.raises(RequestTimedOutError):
            consumer.position(TopicPartition("never-created", 0), timeout_ms=50)


def test_unreachable_bootstrap(cluster: FakeCluster) -> None:
    with Consumer("127.0.0.1:1", **dict(FAST, request_timeout_ms=200)) as consumer:
        with pytest.raises(NetworkError):
            consumer.partitions_for("t", timeout_ms=200)
        consumer.assign([TopicPartition("t", 0)])
        assert consumer.poll(timeout_ms=50) == []


def test_a_stopped_leader_is_waited_for(cluster: FakeCluster) -> None:
    with FakeCluster(2) as fc:
        name = fill(fc, count=2)
        tp = TopicPartition(name, 0)
        with Consumer(fc.bootstrap, auto_offset_reset="earliest", **FAST) as consumer:
            consumer.assign([tp])
            assert len(consume(consumer, 2)) == 2
            fc.stop_broker(1)
            assert consumer.poll(timeout_ms=100) == []
            fc.start_broker(1)
            with Producer(fc.bootstrap, linger_ms=0) as producer:
                producer.send(name, b"back").result(10)
            assert [r.value for r in consume(consumer, 1)] == [b"back"]


def test_a_caught_up_partition_does_not_hold_back_its_leaders_other_partitions(
        cluster: FakeCluster) -> None:
    """Partitions 0 and 3 share a leader. Once 0 is caught up while 3 still has fetched records
    to return, no fetch for 0 alone is sent: the broker would hold it (a long-poll, here 10 s)
    and, with one fetch per leader in flight, 3 could not be fetched again meanwhile."""
    name = f"c{next(_names)}"
    cluster.create_topic(name, 4)
    with Producer(cluster.bootstrap, linger_ms=0, request_timeout_ms=2_000) as producer:
        producer.send(name, b"only", partition=0)
        for i in range(30):
            producer.send(name, b"%d" % i, partition=3)
        producer.flush(WAIT_MS)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", max_poll_records=1,
                  **{**FAST, "fetch_max_wait_ms": 10_000}) as consumer:
        consumer.assign([TopicPartition(name, 0), TopicPartition(name, 3)])
        # Positions given, not reset: both partitions go in the first fetch (a reset may
        # resolve them one at a time, and the scenario needs them fetched together).
        consumer.seek(TopicPartition(name, 0), 0)
        consumer.seek(TopicPartition(name, 3), 0)
        got = consume(consumer, 1)
        for _ in range(4):  # the poll that returns 0's record would send the next fetch
            got += consumer.poll(WAIT_MS)
        assert [r.value for r in got if r.partition == 0] == [b"only"]
        time.sleep(0.2)  # a fetch sent by now would have reached the broker
        # The bug: a fetch for the caught-up partition 0 alone (offset 1), long-polled by the
        # broker while 3's records wait. Fetches that carry 3 (or come before 0 caught up,
        # e.g. while positions were being reset) are fine.
        alone = [f for f in cluster.fetches() if f == [(name, 0, 1)]]
        assert not alone, cluster.fetches()
        got += consume(consumer, 31 - len(got))
    assert sorted(r.value for r in got if r.partition == 3) == sorted(
        b"%d" % i for i in range(30))


def test_partitions_of_a_failed_fetch_back_off_together() -> None:
    """A whole fetch that fails (a transport error, or a stream the broker ended: a grpc-aio
    server sometimes ends an unimplemented FetchStream with INTERNAL, a retriable
    NetworkError) backs its partitions off by one delay, so they are fetched together again.
    With a jittered delay each, the first due could be fetched alone and, once caught up,
    long-polled by the broker while the others waited behind it (the flake once seen in
    test_a_caught_up_partition_does_not_hold_back_its_leaders_other_partitions)."""
    from tidelog.client._fetch_manager import FetchConfig, FetchDone, FetchManager
    from tidelog.client._fetcher import SubscriptionState
    from tidelog.client._io import Connections, io_thread
    from tidelog.client._metadata import Backoff, MetadataManager

    io = io_thread()
    conns = Connections()
    metadata = MetadataManager(["127.0.0.1:1"], conns, loop=io.loop, request_timeout_ms=100,
                               retry_backoff_ms=100, retry_backoff_max_ms=1_000,
                               metadata_max_age_ms=60_000)
    subs = SubscriptionState()
    tps = [TopicPartition("t", p) for p in range(8)]
    subs.assign(tps)
    manager = FetchManager(subs=subs, metadata=metadata, conns=conns, io=io,
                           config=FetchConfig(1, 100, 1 << 20, 1 << 20, 100), reset=None,
                           backoff=Backoff(1_000, 10_000), post=lambda event: None)
    manager.handle_event(FetchDone(1, {tp: 0 for tp in tps}, None,
                                   NetworkError("the FetchStream broke")))
    retry_at = {subs.partitions[tp].retry_at_ms for tp in tps}
    assert len(retry_at) == 1 and retry_at.pop() > 0
    io.run(metadata.close(), 5)
    io.run(conns.close(), 5)
