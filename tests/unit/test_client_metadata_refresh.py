"""When the client asks for metadata, and for what: counted requests, never timings.

The MetadataManager against a scripted transport (``ScriptedConns``: it records each Metadata
request's topics, answers from a table of topics, fails on demand, or holds a request until
released), then the Producer and Consumer against fake brokers (tests/unit/fake_broker.py,
which records the topics of every Metadata request):

* a topic not asked about yet is fetched at once, alone (a partial request), even right after
  another refresh and with a refresh backoff of a minute; nothing is fetched at startup, so the
  first send to a new topic is exactly one Metadata request, naming it;
* topics wanted while a request is in flight go together in the next one;
* after a failed refresh the backoff applies, to new topics as well;
* a topic whose answer did not do (unknown) is asked again only after the refresh backoff;
* metadata_max_age_ms refreshes every tracked topic, once something has been fetched.

Backoffs in the manager tests are a minute long, so "not asked again" cannot be a race with the
clock: the waits that end first are deadlines of a fraction of a second.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fake_broker import FakeCluster

from tidelog.client import Consumer, Producer, TopicPartition
from tidelog.client._io import IOThread, io_thread, monotonic_ms
from tidelog.client._metadata import MetadataManager
from tidelog.errors import ErrorCode, NetworkError, UnknownTopicOrPartitionError
from tidelog.v1 import broker_pb2, common_pb2

LONG_MS = 60_000  # a backoff no test outlives
SHORT_MS = 300  # a deadline that ends a wait for a refresh that must not come
WAIT_S = 15.0
_names = itertools.count()


class Injected(Exception):
    """A bug in handling an answer (not a TidelogError)."""


class ScriptedConns:
    """Stands in for Connections: answers Metadata from ``topics`` (name -> partitions)."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics
        self.requests: list[list[str]] = []
        self.fail = False
        self.gate: asyncio.Event | None = None  # when set up: each request waits for it

    async def call(self, address: str, method: str, request: Any, *, timeout_ms: int) -> Any:
        assert method == "Metadata"
        self.requests.append(list(request.topics))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise NetworkError(f"{address} is down")
        resp = broker_pb2.MetadataResponse(cluster_id="c", controller_id=1)
        resp.brokers.add(broker_id=1, endpoint=common_pb2.Endpoint(host="127.0.0.1", port=9))
        for name in request.topics or sorted(self.topics):
            count = self.topics.get(name)
            if count is None:
                resp.topics.add(name=name, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            t = resp.topics.add(name=name)
            for p in range(count):
                t.partitions.add(partition_id=p, leader=1, leader_epoch=0)
        return resp


@pytest.fixture
def io() -> IOThread:
    return io_thread()


def manager(io: IOThread, conns: ScriptedConns, *, max_age_ms: int = LONG_MS,
            backoff_ms: int = LONG_MS) -> MetadataManager:
    return MetadataManager(["127.0.0.1:9"], conns, loop=io.loop,  # type: ignore[arg-type]
                           request_timeout_ms=1_000, retry_backoff_ms=backoff_ms,
                           retry_backoff_max_ms=backoff_ms, metadata_max_age_ms=max_age_ms)


def wait_for(io: IOThread, m: MetadataManager, topic: str, timeout_ms: int = 10_000) -> Any:
    return io.run(m.wait_for_topic(topic, min_partitions=1,
                                   deadline_ms=monotonic_ms() + timeout_ms), WAIT_S)


def close(io: IOThread, m: MetadataManager) -> None:
    io.run(m.close(), WAIT_S)


async def _on_loop(fn: Any) -> Any:
    return fn()


# ---------------------------------------------------------------------- the manager
def test_new_topics_are_fetched_at_once_each_in_one_partial_request(io: IOThread) -> None:
    conns = ScriptedConns({"a": 2, "b": 1})
    m = manager(io, conns)
    try:
        assert len(wait_for(io, m, "a").partitions) == 2
        assert conns.requests == [["a"]]
        # Right after a successful refresh, and with a minute of refresh backoff: at once.
        assert len(wait_for(io, m, "b").partitions) == 1
        assert conns.requests == [["a"], ["b"]]
        assert set(m.snapshot.topics) == {"a", "b"}  # the partial answer was merged in
        wait_for(io, m, "a")  # known: no request
        assert conns.requests == [["a"], ["b"]]
    finally:
        close(io, m)


def test_nothing_is_fetched_before_a_topic_is_wanted(io: IOThread) -> None:
    """No startup refresh: with no topic tracked a full one would be every topic of the
    cluster (an all-topics request), however old the (empty) snapshot looks."""
    conns = ScriptedConns({"a": 1})
    m = manager(io, conns, max_age_ms=1)
    try:
        io.run(_on_loop(lambda: m.maybe_expire(monotonic_ms() + 10**9)), WAIT_S)
        io.run(asyncio.sleep(0.05), WAIT_S)  # give a refresh, were one wanted, a chance
        assert conns.requests == []
        assert not m._wanted()
    finally:
        close(io, m)


def test_max_age_refreshes_every_tracked_topic(io: IOThread) -> None:
    conns = ScriptedConns({"a": 1, "b": 1})
    m = manager(io, conns, backoff_ms=10)
    try:
        wait_for(io, m, "a")
        wait_for(io, m, "b")
        assert conns.requests == [["a"], ["b"]]
        first = m.snapshot.updated_ms
        assert first >= 0  # the first (partial) answer dates the snapshot; the second keeps it

        async def expire_and_wait() -> None:
            m.maybe_expire(first + LONG_MS)
            await m._attempt_ended(10_000)

        io.run(expire_and_wait(), WAIT_S)
        assert conns.requests == [["a"], ["b"], ["a", "b"]]
        assert m.snapshot.updated_ms >= first
    finally:
        close(io, m)


def test_topics_wanted_during_a_refresh_go_together_in_the_next(io: IOThread) -> None:
    conns = ScriptedConns({f"t{i}": 1 for i in range(20)})
    m = manager(io, conns)
    gate = io.run(_on_loop(asyncio.Event), WAIT_S)
    conns.gate = gate
    try:
        first = io.submit(m.wait_for_topic("t0", min_partitions=1,
                                           deadline_ms=monotonic_ms() + 10_000))
        for _ in range(int(WAIT_S * 100)):  # bounded: until t0's request is in flight
            if conns.requests:
                break
            io.run(asyncio.sleep(0.01), WAIT_S)
        assert conns.requests == [["t0"]]
        others = [io.submit(m.wait_for_topic(f"t{i}", min_partitions=1,
                                             deadline_ms=monotonic_ms() + 10_000))
                  for i in range(1, 20)]
        m.add_topics(["t5", "t19"])  # already wanted: nothing more
        io.run(_on_loop(gate.set), WAIT_S)
        first.result(WAIT_S)
        for future in others:
            future.result(WAIT_S)
        assert conns.requests == [["t0"], sorted(f"t{i}" for i in range(1, 20))]
    finally:
        close(io, m)


def test_after_a_failed_refresh_the_backoff_applies_to_new_topics_too(io: IOThread) -> None:
    conns = ScriptedConns({"a": 1, "b": 1})
    conns.fail = True
    m = manager(io, conns)
    try:
        with pytest.raises(NetworkError, match="no broker"):
            wait_for(io, m, "a", SHORT_MS)
        assert conns.requests == [["a"]]  # one attempt; the next one is a minute away
        with pytest.raises(NetworkError):
            wait_for(io, m, "b", SHORT_MS)
        assert conns.requests == [["a"]]  # a new topic does not cut the backoff short
        assert m.next_refresh_delay_ms(monotonic_ms()) > SHORT_MS
    finally:
        close(io, m)


def test_an_unknown_topic_is_asked_again_only_after_the_refresh_backoff(io: IOThread) -> None:
    """The first look-up goes at once; a topic not there yet (a broker that has not seen its
    creation) waits out retry_backoff_ms before it is asked again, as Kafka's producer does."""
    conns = ScriptedConns({})
    m = manager(io, conns)
    try:
        with pytest.raises(UnknownTopicOrPartitionError, match="does not exist"):
            wait_for(io, m, "later", SHORT_MS)
        assert conns.requests == [["later"]]
    finally:
        close(io, m)


def test_a_bug_handling_the_answer_reaches_the_waiter(io: IOThread) -> None:
    conns = ScriptedConns({"a": 1})
    m = manager(io, conns)

    def listener_bug() -> None:
        raise Injected("reading the metadata")

    m.add_listener(listener_bug)
    try:
        with pytest.raises(Injected):
            wait_for(io, m, "a", LONG_MS)  # at once, not at the deadline
    finally:
        close(io, m)


# ---------------------------------------------------------------------- clients
@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(2) as fc:
        yield fc


def new_topics(cluster: FakeCluster, count: int, partitions: int = 1) -> list[str]:
    names = [f"m{next(_names)}" for _ in range(count)]
    for name in names:
        cluster.create_topic(name, partitions)
    return names


#: Batches wait for flush(): the Metadata requests counted are the sends' own, not those of
#: retries of batches sent meanwhile.
HELD = dict(linger_ms=100_000, delivery_timeout_ms=200_000)


def test_a_first_send_to_a_new_topic_is_one_metadata_request_naming_it(
        cluster: FakeCluster) -> None:
    [name] = new_topics(cluster, 1, partitions=3)
    before = len(cluster.metadata_topics())
    with Producer(cluster.bootstrap, **HELD) as producer:  # type: ignore[arg-type]
        producer.flush()  # the sender has started and looked at its (empty) metadata
        first = producer.send(name, b"v")
        second = producer.send(name, b"w", key=b"k")
        assert cluster.metadata_topics()[before:] == [[name]]  # no all-topics request ([])
        producer.flush()
        assert first.result(WAIT_S).topic == second.result(WAIT_S).topic == name


def test_sends_to_many_new_topics_at_once_share_few_metadata_requests(
        cluster: FakeCluster) -> None:
    names = new_topics(cluster, 100)
    before = len(cluster.metadata_topics())
    cluster.set_delay("Metadata", 300)  # the sends arrive while the first request is out
    try:
        with Producer(cluster.bootstrap, **HELD) as producer:  # type: ignore[arg-type]
            start = threading.Barrier(len(names))
            sent: list[Any] = []

            def send(name: str) -> None:
                start.wait(WAIT_S)
                sent.append(producer.send(name, b"v"))

            threads = [threading.Thread(target=send, args=(n,)) for n in names]
            for t in threads:
                t.start()
            for t in threads:
                t.join(WAIT_S)
            asked = cluster.metadata_topics()[before:]
            producer.flush()
            assert sorted(f.result(WAIT_S).topic for f in sent) == sorted(names)
    finally:
        cluster.set_delay("Metadata", 0)
    assert 1 <= len(asked) <= 5, asked
    assert sorted(t for request in asked for t in request) == sorted(names)  # each once


def test_a_consumer_assigned_many_new_topics_asks_once(cluster: FakeCluster) -> None:
    names = new_topics(cluster, 50)
    before = len(cluster.metadata_topics())
    with Consumer(cluster.bootstrap) as consumer:
        consumer.assign([TopicPartition(n, 0) for n in names])
        metadata = consumer._metadata
        for _ in range(int(WAIT_S * 100)):  # bounded: until the answer is in
            if all(n in metadata.snapshot.topics for n in names):
                break
            io_thread().run(asyncio.sleep(0.01), WAIT_S)
        assert cluster.metadata_topics()[before:] == [sorted(names)]
