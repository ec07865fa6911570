"""OffsetFetch's lag (broker/handlers/groups.py ``_fill_lag``): the high watermark of a
partition the coordinator's broker hosts minus the committed offset, floored at 0; -1 where the
broker does not host the partition (the image alone says nothing of a HW) or nothing is
committed.

How: the in-process cluster of tests/unit/test_replica_manager.py with one broker and the
``Runtime`` driver of tests/unit/test_group_runtime.py.
"""

from __future__ import annotations

from pathlib import Path

from test_group_runtime import GROUP, TOPIC, Runtime
from test_replica_manager import Cluster, batch, scenario

from tidelog.metadata.topic_names import OFFSETS_TOPIC
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode


async def _lags(runtime: Runtime, topic: str) -> dict[int, int]:
    answer = await runtime.handlers.offset_fetch(pb.OffsetFetchRequest(
        group_id=GROUP, topics=[pb.OffsetFetchRequest.Topic(name=topic)]))
    assert answer.error_code == ErrorCode.NONE, answer
    return {p.partition_id: p.lag for t in answer.topics for p in t.partitions}


async def _commit(runtime: Runtime, member: pb.ConsumerGroupHeartbeatResponse, topic: str,
                  partition: int, offset: int) -> None:
    answer = await runtime.handlers.offset_commit(pb.OffsetCommitRequest(
        group_id=GROUP, member_id=member.member_id, member_epoch=member.member_epoch,
        topics=[pb.OffsetCommitRequest.Topic(name=topic, partitions=[
            pb.OffsetCommitRequest.Partition(partition_id=partition, committed_offset=offset,
                                             committed_leader_epoch=-1)])]))
    assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE, answer


def test_lag_is_the_high_watermark_minus_the_committed_offset(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic(TOPIC, [[1], [1]])
        c.create_topic(OFFSETS_TOPIC, [[1]], {"cleanup.policy": "compact"})
        runtime = Runtime(c)
        runtime.publish(c.managers[1].image)
        await runtime.loaded()
        member = await runtime.join()
        assert member.error_code == ErrorCode.NONE, member
        for _ in range(5):
            await c.produce(TOPIC, batch(b"v"))  # HW of partition 0: 5
        await _commit(runtime, member, TOPIC, 0, 2)
        await _commit(runtime, member, TOPIC, 1, 7)  # ahead of the HW (0): floored
        assert await _lags(runtime, TOPIC) == {0: 3, 1: 0}

        # A topic this broker does not host (only in the image it is given): lag unknown.
        await _commit(runtime, member, "elsewhere", 0, 1)
        assert await _lags(runtime, "elsewhere") == {0: -1}
    scenario(tmp_path, body, broker_ids=(1,))
