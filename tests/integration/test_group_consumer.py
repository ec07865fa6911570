"""The group consumer (``Consumer(group_id=...)`` + ``subscribe``) against real brokers.

One cluster for the module (1 controller + 3 broker processes, tests/integration/
cluster_harness.py) with a short group heartbeat interval (200 ms) and session timeout (6 s) so
rebalances take a fraction of a second; each test uses its own topic and group. Consumers are
polled from the test's thread (their callbacks run there too, so the order of the events a
listener records is the order they happened). What it checks:

- two members split a topic's partitions and together read every record exactly once;
- a member that closes hands its partitions over, and the other reads on from the committed
  offsets: nothing skipped, duplicates only what was read after the last commit;
- a restarted consumer resumes at the group's committed offsets;
- the rebalance listener's order: a partition is revoked from one member before it is
  assigned to the other;
- a member removed by the coordinator (a leave sent for it) gets on_partitions_lost, rejoins
  and is assigned again; it never committed after that;
- commit() with explicit offsets and metadata, then committed(); a simple consumer (assign()
  with a group id) resumes from them;
- a commit of the positions carries the leader epoch of the last consumed record (KIP-320),
  and a member resuming from that commit commits it again;
- a static member that closes and restarts with the same group_instance_id gets the same
  partitions back, and the other member keeps its own throughout;
- a member that stops polling for max_poll_interval_ms leaves (the other takes everything)
  and, polled again, loses its partitions and rejoins;
- a pattern subscription (the coordinator resolves the regex);
- an exception from a rebalance callback is raised from poll() once its step completed; a fatal
  heartbeat error (UNSUPPORTED_ASSIGNOR) is raised from poll() by its Kafka name, every poll.

Every wait is bounded (``WAIT_S``); the module takes well under a minute and a half.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from cluster_harness import ClusterHarness

from tidelog.client import (
    Admin,
    Consumer,
    ConsumerRebalanceListener,
    ConsumerRecord,
    NewTopic,
    OffsetAndMetadata,
    Producer,
    TopicPartition,
)
from tidelog.errors import UnsupportedAssignorError
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.broker_pb2_grpc import BrokerServiceStub

pytestmark = pytest.mark.integration

OVERRIDES = {
    "controller": {"broker_session_timeout_ms": 3_000, "fence_check_interval_ms": 100},
    "broker": {"offsets_topic_num_partitions": 3, "heartbeat_interval_ms": 500,
               "group_consumer_heartbeat_interval_ms": 200,
               "group_consumer_session_timeout_ms": 6_000},
}
WAIT_S = 30.0
FAST = {"request_timeout_ms": 5_000, "retry_backoff_ms": 20, "retry_backoff_max_ms": 200,
        "fetch_max_wait_ms": 100, "auto_offset_reset": "earliest"}
PARTITIONS = 6
PER_PARTITION = 50
_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("group-consumer")
    with ClusterHarness.started(base / "cluster", controllers=1, brokers=3,
                                overrides=OVERRIDES) as cluster:
        cluster.start_brokers()
        yield cluster


def new_topic(cluster: ClusterHarness, prefix: str = "t", *, records: int = PER_PARTITION,
              partitions: int = PARTITIONS) -> str:
    """A topic with ``records`` records per partition, value b"<partition>-<i>"."""
    name = f"{prefix}{next(_names)}"
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name, partitions, 3)]).all()
    produce(cluster, name, range(records), partitions)
    return name


def produce(cluster: ClusterHarness, topic: str, indexes: range, partitions: int) -> None:
    with Producer(cluster.bootstrap, linger_ms=5) as producer:
        for p in range(partitions):
            for i in indexes:
                producer.send(topic, b"%d-%d" % (p, i), partition=p)
        producer.flush(30_000)


def consumer(cluster: ClusterHarness, group: str, **config: object) -> Consumer:
    return Consumer(cluster.bootstrap, group_id=group, **{**FAST, **config})  # type: ignore[arg-type]


def poll_until(consumers: list[Consumer], done: Callable[[], bool],
               got: list[ConsumerRecord] | None = None, what: str = "the condition") -> None:
    """Poll every consumer in turn until ``done()``, collecting records; bounded by WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {WAIT_S}s")
        for c in consumers:
            records = c.poll(timeout_ms=50)
            if got is not None:
                got.extend(records)


def values(records: list[ConsumerRecord]) -> list[bytes]:
    return [r.value or b"" for r in records]


def everything(topic: str, indexes: range = range(PER_PARTITION),
               partitions: int = PARTITIONS) -> set[bytes]:
    return {b"%d-%d" % (p, i) for p in range(partitions) for i in indexes}


def all_partitions(topic: str) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(PARTITIONS)}


class Recorder(ConsumerRebalanceListener):
    """Appends (name, event, partitions) to a shared list."""

    def __init__(self, name: str, events: list[tuple[str, str, frozenset[TopicPartition]]]
                 ) -> None:
        self.name = name
        self.events = events

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append((self.name, "revoked", frozenset(revoked)))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append((self.name, "assigned", frozenset(assigned)))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.events.append((self.name, "lost", frozenset(lost)))


def test_two_members_split_the_partitions_and_read_every_record_once(
        cluster: ClusterHarness) -> None:
    topic = new_topic(cluster)
    with consumer(cluster, "split") as a, consumer(cluster, "split") as b:
        a.subscribe([topic])
        b.subscribe([topic])
        got: list[ConsumerRecord] = []
        poll_until([a, b], lambda: len(got) >= PARTITIONS * PER_PARTITION and bool(
            a.assignment()) and bool(b.assignment()), got, "both members reading everything")
        assert not a.assignment() & b.assignment()
        assert a.assignment() | b.assignment() == all_partitions(topic)
        assert a.subscription() == {topic}
    assert sorted(values(got)) == sorted(everything(topic))  # each exactly once


def test_a_closing_member_hands_over_from_the_committed_offsets(
        cluster: ClusterHarness) -> None:
    topic = new_topic(cluster)
    a = consumer(cluster, "handover", enable_auto_commit=False, max_poll_records=40)
    a.subscribe([topic])
    first: list[ConsumerRecord] = []
    poll_until([a], lambda: len(first) >= 120, first, "a first read")
    a.commit()  # the positions of everything returned so far
    after_commit: list[ConsumerRecord] = []
    poll_until([a], lambda: len(after_commit) >= 40, after_commit, "a read after the commit")
    a.close()  # auto-commit off: what came after the commit is not committed
    with consumer(cluster, "handover") as b:
        b.subscribe([topic])
        rest: list[ConsumerRecord] = []
        expected = PARTITIONS * PER_PARTITION - len(first)
        poll_until([b], lambda: len(rest) >= expected, rest, "b reading the rest")
        assert b.assignment() == all_partitions(topic)
    assert set(values(first)) | set(values(rest)) == everything(topic)  # nothing skipped
    assert not set(values(first)) & set(values(rest))  # the committed part is not re-read
    assert set(values(after_commit)) <= set(values(rest))  # re-read: never committed


def test_a_restarted_consumer_resumes_at_the_committed_offsets(cluster: ClusterHarness) -> None:
    topic = new_topic(cluster, partitions=1)
    tp = TopicPartition(topic, 0)
    with consumer(cluster, "resume", max_poll_records=10) as first:
        first.subscribe([topic])
        got: list[ConsumerRecord] = []
        poll_until([first], lambda: len(got) >= 20, got, "the first read")
        first.commit({tp: got[19].offset + 1})
    with consumer(cluster, "resume") as second:
        second.subscribe([topic])
        again: list[ConsumerRecord] = []
        poll_until([second], lambda: len(again) >= PER_PARTITION - 20, again, "the resume")
    assert again[0].offset == 20 and [r.offset for r in again] == list(range(20, PER_PARTITION))


def test_a_partition_is_revoked_from_one_member_before_the_other_gets_it(
        cluster: ClusterHarness) -> None:
    topic = new_topic(cluster, records=1)
    events: list[tuple[str, str, frozenset[TopicPartition]]] = []
    with consumer(cluster, "order") as a:
        a.subscribe([topic], listener=Recorder("a", events))
        poll_until([a], lambda: a.assignment() == all_partitions(topic), what="a owning all")
        with consumer(cluster, "order") as b:
            b.subscribe([topic], listener=Recorder("b", events))
            poll_until([a, b], lambda: len(b.assignment()) == PARTITIONS // 2,
                       what="b owning half")
            moved = b.assignment()
    assert events[0] == ("a", "assigned", frozenset(all_partitions(topic)))
    for tp in moved:
        revoked = next(i for i, e in enumerate(events) if e[:2] == ("a", "revoked")
                       and tp in e[2])
        assigned = next(i for i, e in enumerate(events) if e[:2] == ("b", "assigned")
                        and tp in e[2])
        assert revoked < assigned, events
    assert not any(e[1] == "lost" for e in events)


def coordinator_stub(cluster: ClusterHarness, group: str) -> BrokerServiceStub:
    address = cluster.bootstrap.split(",")[0]
    with grpc.insecure_channel(address) as channel:
        found = BrokerServiceStub(channel).FindCoordinator(  # type: ignore[no-untyped-call]
            pb.FindCoordinatorRequest(group_ids=[group]), timeout=10)
    endpoint = found.coordinators[0].endpoint
    channel = grpc.insecure_channel(f"{endpoint.host}:{endpoint.port}")
    return BrokerServiceStub(channel)  # type: ignore[no-untyped-call]


def test_a_member_removed_by_the_coordinator_loses_its_partitions_and_rejoins(
        cluster: ClusterHarness) -> None:
    topic = new_topic(cluster, records=1)
    events: list[tuple[str, str, frozenset[TopicPartition]]] = []
    with consumer(cluster, "fenced") as a, Admin(cluster.bootstrap) as admin:
        a.subscribe([topic], listener=Recorder("a", events))
        poll_until([a], lambda: a.assignment() == all_partitions(topic), what="a owning all")
        [member] = admin.describe_groups(["fenced"])["fenced"].members
        # Someone else makes the coordinator drop the member (a leave in its name): its next
        # heartbeat gets UNKNOWN_MEMBER_ID, so its partitions are lost.
        left = coordinator_stub(cluster, "fenced").ConsumerGroupHeartbeat(
            pb.ConsumerGroupHeartbeatRequest(group_id="fenced", member_id=member.member_id,
                                             member_epoch=-1), timeout=10)
        assert left.error_code == 0, left
        poll_until([a], lambda: any(e[1] == "lost" for e in events) and
                   a.assignment() == all_partitions(topic), what="lost, then assigned again")
        kinds = [e[1] for e in events]
        assert kinds[:3] == ["assigned", "lost", "assigned"], events
        assert events[1][2] == frozenset(all_partitions(topic))
        assert "revoked" not in kinds  # the default lost -> revoked is overridden here


def test_commit_explicit_offsets_then_committed(cluster: ClusterHarness) -> None:
    topic = new_topic(cluster, records=10, partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with consumer(cluster, "explicit", enable_auto_commit=False) as c:
        c.assign([tp0, tp1])  # a simple consumer with a group id: commits as member ""
        assert c.committed([tp0, tp1]) == {tp0: None, tp1: None}
        c.commit({tp0: OffsetAndMetadata(7, "seven", leader_epoch=0), tp1: 3})
        assert c.committed([tp0, tp1]) == {tp0: OffsetAndMetadata(7, "seven", 0),
                                           tp1: OffsetAndMetadata(3)}
        calls: list[tuple[dict[TopicPartition, OffsetAndMetadata], BaseException | None]] = []
        c.commit_async({tp1: 4}, lambda offsets, error: calls.append((offsets, error)))
        poll_until([c], lambda: bool(calls), what="the commit callback")
        assert calls == [({tp1: OffsetAndMetadata(4)}, None)]
    with consumer(cluster, "explicit") as again:
        again.assign([tp0, tp1])
        assert (again.position(tp0), again.position(tp1)) == (7, 4)


def test_position_commits_carry_the_leader_epoch_of_the_last_consumed_record(
        cluster: ClusterHarness) -> None:
    topic = new_topic(cluster, records=10, partitions=1)
    tp = TopicPartition(topic, 0)
    with consumer(cluster, "epochs", enable_auto_commit=False) as c:
        c.subscribe([topic])
        got: list[ConsumerRecord] = []
        poll_until([c], lambda: len(got) >= 10, got, "the read")
        epoch = got[-1].leader_epoch
        assert epoch >= 0
        c.commit()  # the positions
        assert c.committed([tp]) == {tp: OffsetAndMetadata(10, "", epoch)}
    with Admin(cluster.bootstrap) as admin:
        assert admin.list_group_offsets("epochs")[tp].leader_epoch == epoch
    with consumer(cluster, "epochs", enable_auto_commit=False) as again:
        again.subscribe([topic])
        poll_until([again], lambda: again.assignment() == {tp}, what="the assignment")
        assert again.position(tp) == 10  # from the commit, with its leader epoch
        again.commit()
        assert again.committed([tp]) == {tp: OffsetAndMetadata(10, "", epoch)}


def test_a_static_member_gets_its_partitions_back_and_the_other_keeps_its_own(
        cluster: ClusterHarness) -> None:
    topic = new_topic(cluster, records=1)
    b = consumer(cluster, "static")
    try:
        a = consumer(cluster, "static", group_instance_id="static-a")
        a.subscribe([topic])
        b.subscribe([topic])
        poll_until([a, b], lambda: len(a.assignment()) == len(b.assignment()) == 3,
                   what="a and b with 3 each")
        mine, theirs = a.assignment(), b.assignment()
        a.close()  # leaves with epoch -2: its partitions wait for it
        a = consumer(cluster, "static", group_instance_id="static-a")
        a.subscribe([topic])
        poll_until([a, b], lambda: a.assignment() == mine, what="a's partitions back")
        assert b.assignment() == theirs
        a.close()
    finally:
        b.close()


def test_a_member_that_stops_polling_leaves_and_rejoins(cluster: ClusterHarness) -> None:
    topic = new_topic(cluster, records=1)
    events: list[tuple[str, str, frozenset[TopicPartition]]] = []
    with consumer(cluster, "slow", max_poll_interval_ms=1_500) as a, \
            consumer(cluster, "slow") as b:
        a.subscribe([topic], listener=Recorder("a", events))
        b.subscribe([topic])
        poll_until([a, b], lambda: len(a.assignment()) == len(b.assignment()) == 3,
                   what="a and b with 3 each")
        mine = a.assignment()
        # a does not poll for longer than max_poll_interval_ms: its heartbeat task leaves.
        poll_until([b], lambda: b.assignment() == all_partitions(topic),
                   what="b taking a's partitions")
        poll_until([a, b], lambda: any(e[1] == "lost" for e in events) and len(
            a.assignment()) == 3, what="a losing its partitions, then rejoining")
        kinds = [e[1] for e in events]
        lost = kinds.index("lost")
        assert events[lost][2] == frozenset(mine), events  # what it owned when it left
        assert "assigned" in kinds[lost + 1:] and "revoked" not in kinds[lost:], events


def test_a_pattern_subscription_gets_every_matching_topic(cluster: ClusterHarness) -> None:
    first = new_topic(cluster, "pat-", records=2, partitions=2)
    second = new_topic(cluster, "pat-", records=2, partitions=2)
    other = new_topic(cluster, "nopat-", records=2, partitions=2)
    with consumer(cluster, "pattern") as c:
        c.subscribe(pattern="pat-.*")
        got: list[ConsumerRecord] = []
        poll_until([c], lambda: len(got) >= 8, got, "both matching topics read")
        assert {r.topic for r in got} == {first, second}
        assert other not in c.subscription()


class Raising(ConsumerRebalanceListener):
    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if assigned:
            raise KeyError("from the listener")


def test_a_callback_error_is_raised_from_poll_after_the_step_completed(
        cluster: ClusterHarness) -> None:
    topic = new_topic(cluster, records=1)
    with consumer(cluster, "raising") as c:
        c.subscribe([topic], listener=Raising())
        deadline = time.monotonic() + WAIT_S
        with pytest.raises(KeyError, match="from the listener"):
            while time.monotonic() < deadline:  # bounded
                c.poll(timeout_ms=50)
        assert c.assignment() == all_partitions(topic)  # the step completed
        got: list[ConsumerRecord] = []
        poll_until([c], lambda: len(got) >= PARTITIONS, got, "reading after the error")


def test_a_fatal_heartbeat_error_is_raised_from_poll_by_name(cluster: ClusterHarness) -> None:
    topic = new_topic(cluster, records=1)
    with consumer(cluster, "fatal", group_remote_assignor="no-such-assignor") as c:
        c.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        with pytest.raises(UnsupportedAssignorError, match="no-such-assignor"):
            while time.monotonic() < deadline:  # bounded
                c.poll(timeout_ms=50)
        with pytest.raises(UnsupportedAssignorError):  # the member stays stopped
            c.poll(timeout_ms=0)


def test_describe_shows_each_members_client_id_and_host(cluster: ClusterHarness) -> None:
    """The consumer sends its client_id with every call (gRPC metadata ``client-id``, as
    Kafka's request header carries client.id); the coordinator keeps it in the member record."""
    topic = new_topic(cluster, records=1, partitions=2)
    with consumer(cluster, "described", client_id="orders-reader-7") as c:
        c.subscribe([topic])
        poll_until([c], lambda: len(c.assignment()) == 2, what="the assignment")
        with Admin(cluster.bootstrap) as admin:
            group = admin.describe_groups(["described"]).all()["described"]
        [member] = group.members
        assert (member.client_id, member.client_host) == ("orders-reader-7", "127.0.0.1")
