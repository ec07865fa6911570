"""broker/group/runtime.py on a real replica manager (real partitions, real RocksDB, in-process).

What it checks:

* a shard loads when its broker leads the offsets partition, and answers
  COORDINATOR_LOAD_IN_PROGRESS until the load ran; a broker that does not lead it answers
  NOT_COORDINATOR; with no offsets topic the answer is COORDINATOR_NOT_AVAILABLE and the topic's
  creation is asked for (once while it runs);
* what a shard wrote (a member joining, an offset commit) is in the partition: a second runtime
  loading the same partition gets the same state (same digest) and the committed offset;
* a failed append (the broker refuses appends while its metadata catches up) answers
  NOT_COORDINATOR and reloads the shard from the log, so the commit that failed is not visible
  afterwards (without the reload the shard's memory would keep it);
* the image losing the topic unloads the shard;
* the runtime's timer fences a member whose session expired, and writes it: a coordinator
  loading the partition afterwards has the group (kept by its offset) without the member;
* writes pipeline (a second commit is appended while the first waits for its follower) and a
  read answers only once what it may have seen is committed;
* concurrent writes coalesce: two commits made together are one batch in the log, both
  answered once it is committed; commits made while a batch waits for its follower gather
  into the next batch (the adaptive linger); an append that fails fails both, and the
  reloaded shard has neither; a write that makes no records (a heartbeat changing nothing)
  answers only once the batch it may have seen is committed.

How: the in-process cluster of tests/unit/test_replica_manager.py with one broker; the runtime
and the group handlers are driven directly.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_replica_manager import Cluster, scenario, until

from tidelog.broker.group.coordinator import GroupCoordinatorConfig
from tidelog.broker.group.runtime import GroupCoordinatorRuntime
from tidelog.broker.handlers.groups import GroupHandlers
from tidelog.broker.metadata_listener import MetadataUpdate
from tidelog.broker.partition import Partition
from tidelog.broker.partition_writer import TopicIdPartition
from tidelog.config import parse_config
from tidelog.errors import InvalidConfigError
from tidelog.metadata.delta import LocalReplicaChanges
from tidelog.metadata.image import MetadataImage
from tidelog.metadata.topic_names import OFFSETS_TOPIC
from tidelog.record_batch import parse_batch
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode

GROUP = "group"
TOPIC = "orders"


class Runtime:
    """A runtime and its handlers on broker 1's replica manager, fed the broker's image."""

    def __init__(self, c: Cluster, broker_id: int = 1,
                 config: GroupCoordinatorConfig | None = None) -> None:
        self.c = c
        self.creations = 0
        self.runtime = GroupCoordinatorRuntime(
            broker_id=broker_id, partitions=c.managers[1], image=lambda: self.image,
            create_topic=self._create, config=config, seed=7)
        self.image = c.managers[1].image
        self.handlers = GroupHandlers(self.runtime, lambda: self.image)

    async def _create(self) -> None:
        self.creations += 1

    def publish(self, image: MetadataImage) -> None:
        self.image = image
        self.runtime.on_metadata_update(
            MetadataUpdate(MetadataImage.empty(), image, None, LocalReplicaChanges((), (), ())),
            image)

    async def loaded(self) -> None:
        await until(lambda: bool(self.runtime.active_shards()), "the shard to load")

    async def join(self) -> pb.ConsumerGroupHeartbeatResponse:
        return await self.handlers.consumer_group_heartbeat(pb.ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_epoch=0, rebalance_timeout_ms=30_000,
            subscribed_topic_names=[TOPIC], subscription_changed=True))

    async def commit(self, member: pb.ConsumerGroupHeartbeatResponse, offset: int
                     ) -> pb.OffsetCommitResponse:
        return await self.handlers.offset_commit(pb.OffsetCommitRequest(
            group_id=GROUP, member_id=member.member_id, member_epoch=member.member_epoch,
            topics=[pb.OffsetCommitRequest.Topic(name=TOPIC, partitions=[
                pb.OffsetCommitRequest.Partition(partition_id=0, committed_offset=offset,
                                                 committed_leader_epoch=-1)])]))

    async def committed(self) -> int:
        answer = await self.handlers.offset_fetch(pb.OffsetFetchRequest(
            group_id=GROUP, topics=[pb.OffsetFetchRequest.Topic(name=TOPIC, partitions=[0])]))
        assert answer.error_code == ErrorCode.NONE, answer
        return int(answer.topics[0].partitions[0].committed_offset)


async def replicated_coordinator(c: Cluster
                                 ) -> tuple[Runtime, pb.ConsumerGroupHeartbeatResponse]:
    """Brokers 1 and 2 started, the data topic and the offsets topic on both (1 leads), the
    shard loaded on broker 1 and one member joined: the set-up of the tests where the
    follower (broker 2) can be cut off so that acks=all waits."""
    await c.start_all()
    c.create_topic(TOPIC, [[1, 2]])
    c.create_topic(OFFSETS_TOPIC, [[1, 2]])
    coordinator = Runtime(c)
    coordinator.publish(c.managers[1].image)
    await coordinator.loaded()
    member = await coordinator.join()
    assert member.error_code == ErrorCode.NONE, member
    return coordinator, member


def offsets_partition(c: Cluster) -> Partition:
    """Broker 1's replica of the offsets partition the tests' group lives in."""
    partition = c.managers[1].partition(
        c.managers[1].image.topics.by_name[OFFSETS_TOPIC].topic_id, 0)
    assert partition is not None
    return partition


def test_load_write_replay_and_reload_after_a_failed_append(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic(TOPIC, [[1], [1]])
        c.create_topic(OFFSETS_TOPIC, [[1]], {"cleanup.policy": "compact"})
        first = Runtime(c)
        first.publish(c.managers[1].image)
        assert (await first.join()).error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await first.loaded()

        member = await first.join()
        assert member.error_code == ErrorCode.NONE, member
        commit = await first.commit(member, 42)
        assert commit.topics[0].partitions[0].error_code == ErrorCode.NONE, commit
        assert await first.committed() == 42

        # Another coordinator loading the partition replays the same state.
        second = Runtime(c)
        second.publish(c.managers[1].image)
        await second.loaded()
        assert second.runtime.active_shards()[0].state.digest() == \
            first.runtime.active_shards()[0].state.digest()
        assert await second.committed() == 42

        # A failed append: the commit is answered NOT_COORDINATOR and not kept in memory.
        c.caught_up[1] = False
        failed = await first.commit(member, 99)
        assert failed.error_code == ErrorCode.NOT_COORDINATOR, failed
        assert failed.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
        c.caught_up[1] = True
        await first.loaded()
        assert await first.committed() == 42, "the shard was reloaded from the log"

        # The topic gone from the image: unloaded, and its creation asked for.
        first.publish(MetadataImage.empty())
        assert first.runtime.active_shards() == []
        assert (await first.join()).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert (await first.join()).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        await asyncio.sleep(0.01)  # the creation task runs
        assert first.creations == 1
    scenario(tmp_path, body, broker_ids=(1,))


def test_the_timer_fences_an_expired_member_and_writes_it(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic(TOPIC, [[1]])
        c.create_topic(OFFSETS_TOPIC, [[1]])
        fast = GroupCoordinatorConfig(session_timeout_ms=300, heartbeat_interval_ms=100)
        first = Runtime(c, config=fast)
        await first.runtime.start()
        try:
            first.publish(c.managers[1].image)
            await first.loaded()
            member = await first.join()
            assert member.error_code == ErrorCode.NONE, member
            # An offset keeps the group once empty (an empty group without offsets is deleted).
            assert (await first.commit(member, 5)).topics[0].partitions[0].error_code == \
                ErrorCode.NONE

            async def members() -> int:
                answer = await first.handlers.describe_groups(
                    pb.DescribeGroupsRequest(group_ids=[GROUP]))
                assert answer.groups[0].error_code == ErrorCode.NONE, answer
                return len(answer.groups[0].members)
            assert await members() == 1
            for _ in range(100):  # the session (300 ms) and a timer tick (500 ms), bounded
                if await members() == 0:
                    break
                await asyncio.sleep(0.05)
            assert await members() == 0, "the member was not fenced"
        finally:
            await first.runtime.stop()
        second = Runtime(c)
        second.publish(c.managers[1].image)
        await second.loaded()
        described = await second.handlers.describe_groups(
            pb.DescribeGroupsRequest(group_ids=[GROUP]))
        assert described.groups[0].error_code == ErrorCode.NONE, described
        assert list(described.groups[0].members) == [], "the fencing was written"
        assert described.groups[0].state == "Empty"
        assert await second.committed() == 5
    scenario(tmp_path, body, broker_ids=(1,))


def test_writes_pipeline_and_reads_wait_for_what_they_saw_to_commit(tmp_path: Path) -> None:
    """A second commit is applied and appended while the first still waits for its follower
    (the shard is not held across the acks=all wait); an OffsetFetch made meanwhile answers
    only once the appends it may have seen are committed, so it never shows a commit that
    could still fail."""
    async def body(c: Cluster) -> None:
        coordinator, member = await replicated_coordinator(c)
        assert (await coordinator.commit(member, 1)).topics[0].partitions[0].error_code == \
            ErrorCode.NONE
        log = offsets_partition(c)
        end = log.log.log_end_offset

        c.network.cut.add(2)  # the follower stops fetching: acks=all waits
        first = asyncio.create_task(coordinator.commit(member, 10))
        second = asyncio.create_task(coordinator.commit(member, 20))
        await until(lambda: log.log.log_end_offset >= end + 2,
                    "both commits in the leader's log while the first is not committed")
        read = asyncio.create_task(coordinator.committed())
        await asyncio.sleep(0.05)
        assert not (first.done() or second.done() or read.done()), \
            "nothing is answered before the follower has the records"

        c.network.cut.discard(2)
        for task in (first, second):
            answer = await asyncio.wait_for(task, 10)
            assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE, answer
        assert await asyncio.wait_for(read, 10) == 20
    scenario(tmp_path, body, broker_ids=(1, 2))


def offsets_batches(c: Cluster, start: int) -> list[tuple[int, int]]:
    """(base offset, record count) of the committed batches of the offsets partition from
    ``start``."""
    topic_id = c.managers[1].image.topics.by_name[OFFSETS_TOPIC].topic_id
    info = c.managers[1].read(TopicIdPartition(topic_id, 0), start, 1 << 20)
    return [(b.base_offset, b.record_count) for b in map(parse_batch, info.batches)
            if b.base_offset >= start]


def test_concurrent_commits_are_one_batch_and_a_failed_append_fails_them_all(tmp_path: Path
                                                                             ) -> None:
    async def body(c: Cluster) -> None:
        coordinator, member = await replicated_coordinator(c)
        log = offsets_partition(c)
        end = log.log.log_end_offset

        answers = await asyncio.wait_for(asyncio.gather(
            coordinator.commit(member, 10), coordinator.commit(member, 20)), 10)
        for answer in answers:
            assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE, answer
        assert offsets_batches(c, end) == [(end, 2)], "both commits in one batch"
        assert await coordinator.committed() == 20

        # The append of the shared batch fails: both are failed, neither is kept.
        c.caught_up[1] = False
        failed = await asyncio.wait_for(asyncio.gather(
            coordinator.commit(member, 30), coordinator.commit(member, 40)), 10)
        for answer in failed:
            assert answer.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR, \
                answer
        c.caught_up[1] = True
        await coordinator.loaded()
        assert await coordinator.committed() == 20, "the shard was reloaded from the log"
    scenario(tmp_path, body, broker_ids=(1, 2))


def test_writes_made_while_a_batch_waits_for_its_acks_gather_into_the_next(tmp_path: Path
                                                                            ) -> None:
    """The adaptive linger: while a batch waits for its follower, later commits (arriving
    one at a time) gather in the open batch and go out as one when the first is committed."""
    async def body(c: Cluster) -> None:
        coordinator, member = await replicated_coordinator(c)
        log = offsets_partition(c)
        end = log.log.log_end_offset

        c.network.cut.add(2)  # the follower stops fetching: the first batch waits
        commits = [asyncio.create_task(coordinator.commit(member, 10))]
        await until(lambda: log.log.log_end_offset == end + 1, "the first batch appended")
        for offset in (20, 30):
            commits.append(asyncio.create_task(coordinator.commit(member, offset)))
            await asyncio.sleep(0.02)  # one at a time, each in an event loop pass of its own
        assert log.log.log_end_offset == end + 1, "the later commits wait in the open batch"
        c.network.cut.discard(2)
        for answer in await asyncio.wait_for(asyncio.gather(*commits), 10):
            assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE, answer
        assert offsets_batches(c, end) == [(end, 1), (end + 1, 2)]
        assert await coordinator.committed() == 30
    scenario(tmp_path, body, broker_ids=(1, 2))


def test_a_write_without_records_answers_once_what_it_saw_is_committed(tmp_path: Path
                                                                       ) -> None:
    """A heartbeat that changes nothing makes no records, but its answer (the member's epoch
    and assignment) may rest on a commit still waiting for its follower: it waits for it, as
    Kafka's runtime answers an empty write once the last written offset is committed."""
    async def body(c: Cluster) -> None:
        coordinator, member = await replicated_coordinator(c)
        heartbeat = pb.ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id=member.member_id, member_epoch=member.member_epoch)
        assert (await coordinator.handlers.consumer_group_heartbeat(heartbeat)).error_code \
            == ErrorCode.NONE

        c.network.cut.add(2)  # the follower stops fetching: acks=all waits
        commit = asyncio.create_task(coordinator.commit(member, 10))
        await asyncio.sleep(0.05)
        beat = asyncio.create_task(coordinator.handlers.consumer_group_heartbeat(heartbeat))
        await asyncio.sleep(0.05)
        assert not (commit.done() or beat.done()), \
            "no answer before the follower has the commit"
        c.network.cut.discard(2)
        assert (await asyncio.wait_for(beat, 10)).error_code == ErrorCode.NONE
        assert (await asyncio.wait_for(commit, 10)).topics[0].partitions[0].error_code == \
            ErrorCode.NONE
    scenario(tmp_path, body, broker_ids=(1, 2))


def test_a_broker_that_does_not_lead_the_partition_is_not_the_coordinator(tmp_path: Path
                                                                          ) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic(OFFSETS_TOPIC, [[1]])
        other = Runtime(c, broker_id=2)  # broker 1 leads the partition
        other.publish(c.managers[1].image)
        assert other.runtime.active_shards() == []
        assert (await other.join()).error_code == ErrorCode.NOT_COORDINATOR
        fetched = await other.handlers.offset_fetch(pb.OffsetFetchRequest(group_id=GROUP))
        assert fetched.error_code == ErrorCode.NOT_COORDINATOR
        found = await other.handlers.find_coordinator(
            pb.FindCoordinatorRequest(group_ids=[GROUP, ""]))
        assert [(f.error_code, f.node_id) for f in found.coordinators] == [
            (ErrorCode.NONE, 1), (ErrorCode.INVALID_GROUP_ID, -1)]
    scenario(tmp_path, body, broker_ids=(1,))


def test_offsets_topic_partitions_config_is_bounded() -> None:
    base = 'node_id = 1\ndata_dir = "d"\nroles = ["broker"]\n' \
           '[[controller.voters]]\nid = 9\nhost = "127.0.0.1"\nport = 1\nraft_port = 2\n'
    assert parse_config(base).broker.offsets_topic_num_partitions == 50
    assert parse_config(base + "[broker]\noffsets_topic_num_partitions = 3\n") \
        .broker.offsets_topic_num_partitions == 3
    for bad in (0, 1001):
        try:
            parse_config(base + f"[broker]\noffsets_topic_num_partitions = {bad}\n")
        except InvalidConfigError as error:
            assert "offsets_topic_num_partitions" in str(error)
        else:
            raise AssertionError(f"{bad} accepted")
