"""Commits of the group consumer against a fake coordinator: the STALE_MEMBER_EPOCH retry, the
leader epoch a commit of positions carries (KIP-320), and the coordinator lookup and retry
policy the Admin and the consumer share (_coordinator_lookup.py).

The brokers are tests/unit/fake_broker.py's (real gRPC servers on 127.0.0.1 over an in-memory
log, records produced by a real Producer), extended here with a minimal group coordinator:
FindCoordinator names broker 1, ConsumerGroupHeartbeat admits one member and answers the
group's current epoch (nothing assigned), OffsetCommit and OffsetFetch keep offsets in memory
and record every commit. Its one knob, ``stale_commits``: that many commits each find the
group's epoch moved on just before them (the epoch is bumped and the commit answered
STALE_MEMBER_EPOCH, as the real coordinator answers an older member epoch); the next heartbeat
then gives the member the new epoch. Checks are on what the coordinator received and on what
the consumer raised, never on timing. ``fetch_faults``: request-level codes the next
OffsetFetch requests answer, one each.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import fake_broker
import pytest
from fake_broker import FakeBroker, FakeCluster

from tidelog.client import (
    Admin,
    Consumer,
    ConsumerRecord,
    OffsetAndMetadata,
    Producer,
    TopicPartition,
)
from tidelog.client._group_coordinator import STALE_EPOCH_RETRIES_MAX
from tidelog.errors import ErrorCode, StaleMemberEpochError, TidelogError
from tidelog.v1 import broker_pb2 as pb

WAIT_MS = 15_000  # upper bound on any wait; tests finish far sooner
FAST = dict(request_timeout_ms=5_000, retry_backoff_ms=10, retry_backoff_max_ms=50,
            fetch_max_wait_ms=50)
#: The fake coordinator's heartbeat interval: short, so a commit waiting for the next
#: heartbeat's epoch waits little.
HEARTBEAT_INTERVAL_MS = 100
_names = itertools.count()


@dataclass
class FakeGroups:
    """The fake coordinator's state (touched on the fake brokers' loop only)."""

    epoch: int = 1
    stale_commits: int = 0
    fetch_faults: list[int] = field(default_factory=list)
    heartbeats: int = 0
    #: Every OffsetCommit: (member epoch, {(topic, partition): (offset, leader epoch)}).
    commits: list[tuple[int, dict[tuple[str, int], tuple[int, int]]]] = field(
        default_factory=list)
    committed: dict[tuple[str, str, int], tuple[int, int, str]] = field(default_factory=dict)


class GroupFakeBroker(FakeBroker):
    """FakeBroker plus the minimal coordinator of the module doc."""

    groups = FakeGroups()

    async def FindCoordinator(self, request: Any, context: Any) -> Any:
        await self._enter("FindCoordinator")
        response = pb.FindCoordinatorResponse()
        for group_id in request.group_ids:
            response.coordinators.add(group_id=group_id, node_id=1, endpoint=self.c.endpoint(1))
        return response

    async def ConsumerGroupHeartbeat(self, request: Any, context: Any) -> Any:
        g = self.groups
        g.heartbeats += 1
        if request.member_epoch < 0:  # leaving
            return pb.ConsumerGroupHeartbeatResponse(member_id=request.member_id,
                                                     member_epoch=request.member_epoch)
        return pb.ConsumerGroupHeartbeatResponse(
            member_id=request.member_id or "member-1", member_epoch=g.epoch,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, assignment_changed=True)

    async def OffsetCommit(self, request: Any, context: Any) -> Any:
        g = self.groups
        offsets = {(t.name, p.partition_id): (p.committed_offset, p.committed_leader_epoch)
                   for t in request.topics for p in t.partitions}
        g.commits.append((request.member_epoch, offsets))
        if request.member_epoch >= 0 and g.stale_commits > 0:
            g.stale_commits -= 1
            g.epoch += 1
        if request.member_epoch >= 0 and request.member_epoch != g.epoch:
            return pb.OffsetCommitResponse(error_code=ErrorCode.STALE_MEMBER_EPOCH,
                                           error_message=f"the group's epoch is {g.epoch}")
        response = pb.OffsetCommitResponse()
        for t in request.topics:
            out = response.topics.add(name=t.name)
            for p in t.partitions:
                g.committed[(request.group_id, t.name, p.partition_id)] = (
                    p.committed_offset, p.committed_leader_epoch, p.metadata)
                out.partitions.add(partition_id=p.partition_id)
        return response

    async def OffsetFetch(self, request: Any, context: Any) -> Any:
        await self._enter("OffsetFetch")
        if self.groups.fetch_faults:
            code = self.groups.fetch_faults.pop(0)
            return pb.OffsetFetchResponse(error_code=code, error_message="injected")
        response = pb.OffsetFetchResponse()
        for t in request.topics:
            out = response.topics.add(name=t.name)
            for partition_id in t.partitions:
                offset, epoch, metadata = self.groups.committed.get(
                    (request.group_id, t.name, partition_id), (-1, -1, ""))
                out.partitions.add(partition_id=partition_id, committed_offset=offset,
                                   committed_leader_epoch=epoch, metadata=metadata, lag=-1)
        return response


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fake_broker, "FakeBroker", GroupFakeBroker)  # what FakeCluster serves
        with FakeCluster(2) as fc:
            yield fc


@pytest.fixture()
def groups(cluster: FakeCluster) -> Iterator[FakeGroups]:
    GroupFakeBroker.groups = FakeGroups()
    yield GroupFakeBroker.groups


def new_topic(cluster: FakeCluster, count: int) -> str:
    name = f"g{next(_names)}"
    cluster.create_topic(name)
    produce(cluster, name, count)
    return name


def produce(cluster: FakeCluster, topic: str, count: int) -> None:
    with Producer(cluster.bootstrap, linger_ms=0, request_timeout_ms=2_000) as producer:
        for i in range(count):
            producer.send(topic, b"%d" % i, partition=0)
        producer.flush(WAIT_MS)


def joined(consumer: Consumer, groups: FakeGroups) -> None:
    """Poll until the member has joined and acknowledged (two heartbeats answered)."""
    for _ in range(300):  # bounded; each poll waits up to 50 ms
        consumer.poll(timeout_ms=50)
        if groups.heartbeats >= 2:
            return
    raise AssertionError("the member did not join")


def consume(consumer: Consumer, count: int, *, max_records: int | None = None
            ) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    for _ in range(300):  # bounded; each poll waits up to 50 ms
        out += consumer.poll(timeout_ms=50, max_records=max_records)
        if len(out) >= count:
            return out
    raise AssertionError(f"read {len(out)} of {count} records")


# ---------------------------------------------------------------------- STALE_MEMBER_EPOCH
def test_a_stale_commit_is_retried_with_the_next_heartbeats_epoch(
        cluster: FakeCluster, groups: FakeGroups) -> None:
    topic = new_topic(cluster, 0)
    tp = TopicPartition(topic, 0)
    with Consumer(cluster.bootstrap, group_id="stale-once", enable_auto_commit=False,
                  **FAST) as consumer:
        consumer.subscribe([topic])
        joined(consumer, groups)
        groups.stale_commits = 1  # the epoch moves on (1 -> 2) just before the commit
        consumer.commit({tp: 5})
        assert consumer.committed([tp]) == {tp: OffsetAndMetadata(5)}
    # The first try with epoch 1 was refused; a retry carried the new epoch. (A heartbeat
    # answered just before the epoch moved may end the first wait with epoch 1 still: then
    # one more retry is spent, within the bound.)
    epochs = [epoch for epoch, _ in groups.commits]
    assert epochs[0] == 1 and epochs[-1] == 2, epochs
    assert len(epochs) <= 1 + STALE_EPOCH_RETRIES_MAX
    assert groups.commits[-1][1] == {(topic, 0): (5, -1)}


def test_a_commit_stale_every_time_gives_up_after_the_retries(
        cluster: FakeCluster, groups: FakeGroups) -> None:
    topic = new_topic(cluster, 0)
    tp = TopicPartition(topic, 0)
    with Consumer(cluster.bootstrap, group_id="stale-always", enable_auto_commit=False,
                  **FAST) as consumer:
        consumer.subscribe([topic])
        joined(consumer, groups)
        groups.stale_commits = 1_000
        with pytest.raises(StaleMemberEpochError, match="epoch"):
            consumer.commit({tp: 5})
        groups.stale_commits = 0
    # One try and STALE_EPOCH_RETRIES_MAX retries, each with the epoch the last heartbeat
    # gave (never an older one).
    epochs = [epoch for epoch, _ in groups.commits]
    assert len(epochs) == 1 + STALE_EPOCH_RETRIES_MAX, epochs
    assert epochs == sorted(epochs) and epochs[-1] > epochs[0], epochs


# ---------------------------------------------------------------------- leader epochs
def test_position_commits_carry_the_leader_epoch_of_the_last_consumed_record(
        cluster: FakeCluster, groups: FakeGroups) -> None:
    topic = new_topic(cluster, 3)
    cluster.move_leader(topic, 0, 2)  # a new leader epoch for the records that follow
    produce(cluster, topic, 2)
    tp = TopicPartition(topic, 0)
    with Consumer(cluster.bootstrap, group_id="epochs", enable_auto_commit=False,
                  auto_offset_reset="earliest", **FAST) as consumer:
        consumer.assign([tp])  # a simple consumer: commits as member "" with epoch -1
        records = consume(consumer, 5)
        first, last = records[2].leader_epoch, records[4].leader_epoch
        assert 0 <= first < last
        consumer.commit()  # the positions
        assert groups.commits[-1][1] == {(topic, 0): (5, last)}
        assert consumer.committed([tp]) == {tp: OffsetAndMetadata(5, "", last)}
        consumer.seek(tp, 3)  # a seek knows no epoch (as Kafka's seek(offset))
        consumer.commit()
        assert groups.commits[-1][1] == {(topic, 0): (3, -1)}
        consumer.seek(tp, 2)
        [record] = consume(consumer, 1, max_records=1)  # offset 2, the old leader's
        consumer.commit()
        assert groups.commits[-1][1] == {(topic, 0): (3, first)}
        assert record.leader_epoch == first


def test_a_position_from_the_committed_offset_keeps_its_leader_epoch(
        cluster: FakeCluster, groups: FakeGroups) -> None:
    topic = new_topic(cluster, 4)
    tp = TopicPartition(topic, 0)
    groups.committed[("resume", topic, 0)] = (4, 7, "")
    with Consumer(cluster.bootstrap, group_id="resume", auto_offset_reset="earliest",
                  **FAST) as consumer:  # auto-commit on: close() commits the positions
        consumer.assign([tp])
        assert consumer.position(tp) == 4
    assert groups.commits[-1][1] == {(topic, 0): (4, 7)}


# ---------------------------------------------------------------------- the shared lookup
LOOKUP_FAULTS = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR]


def test_admin_and_consumer_retry_coordinator_errors_alike(
        cluster: FakeCluster, groups: FakeGroups) -> None:
    """COORDINATOR_LOAD_IN_PROGRESS is retried at the same coordinator, NOT_COORDINATOR finds
    it again: two FindCoordinator and three OffsetFetch per call, for both clients."""
    topic = new_topic(cluster, 0)
    tp = TopicPartition(topic, 0)
    groups.committed[("lookup", topic, 0)] = (3, -1, "m")
    seen: dict[str, tuple[int, int]] = {}
    with Admin(cluster.bootstrap, retry_backoff_ms=10, retry_backoff_max_ms=50) as admin:
        finds, fetches = cluster.count("FindCoordinator"), cluster.count("OffsetFetch")
        groups.fetch_faults = list(LOOKUP_FAULTS)
        assert admin.list_group_offsets("lookup", [tp])[tp].offset == 3
        seen["admin"] = (cluster.count("FindCoordinator") - finds,
                         cluster.count("OffsetFetch") - fetches)
    with Consumer(cluster.bootstrap, group_id="lookup", **FAST) as consumer:
        finds, fetches = cluster.count("FindCoordinator"), cluster.count("OffsetFetch")
        groups.fetch_faults = list(LOOKUP_FAULTS)
        assert consumer.committed([tp]) == {tp: OffsetAndMetadata(3, "m")}
        seen["consumer"] = (cluster.count("FindCoordinator") - finds,
                            cluster.count("OffsetFetch") - fetches)
    assert seen == {"admin": (2, 3), "consumer": (2, 3)}


def test_a_non_retriable_coordinator_answer_is_raised_at_once_naming_the_group(
        cluster: FakeCluster, groups: FakeGroups) -> None:
    groups.fetch_faults = [ErrorCode.INVALID_GROUP_ID]
    fetches = cluster.count("OffsetFetch")
    with (Admin(cluster.bootstrap, retry_backoff_ms=10) as admin,
          pytest.raises(TidelogError, match="group 'denied'") as raised):
        admin.list_group_offsets("denied", timeout_ms=WAIT_MS)
    assert raised.value.code == ErrorCode.INVALID_GROUP_ID
    assert cluster.count("OffsetFetch") - fetches == 1
