"""The replica manager's typed internal append and read (broker.partition_writer), what the group
coordinator will write ``__consumer_offsets`` with instead of a protobuf ProduceRequest.

What it checks: ``append(tp, batch, acks=…, timeout_ms=…)`` returns once the acks are met with
the batch's offsets (acks=all: the HW has passed it, on every ISR member's log); a refused append
is an error value with ``appended`` false (invalid acks, not the leader, metadata not caught up);
an acks=all append whose HW cannot move times out with ``appended`` true and its offsets; ``read``
gives the committed batches; high-watermark listeners hear each HW move of a led partition and
stop hearing once removed.

How: the in-process cluster of tests/unit/test_replica_manager.py (real ControllerLogic, real
RocksDB storage, replication through each other's ReplicaService handler).
"""

from __future__ import annotations

from pathlib import Path

from test_replica_manager import Cluster, batch, scenario, until, values

from tidelog.broker.partition_writer import PartitionWriter, TopicIdPartition
from tidelog.v1.common_pb2 import ErrorCode


def test_append_returns_when_acks_all_are_met_and_read_gives_the_batch(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        topic_id = c.create_topic("t", [[1, 2, 3]])
        tp = TopicIdPartition(topic_id, 0)
        leader = c.managers[1]
        writer: PartitionWriter = leader
        heard: list[tuple[TopicIdPartition, int]] = []
        remove = writer.add_high_watermark_listener(lambda p, hw: heard.append((p, hw)))
        first = await writer.append(tp, batch(b"a", b"b"), acks=-1, timeout_ms=5_000)
        assert first.error is None and first.appended
        assert (first.base_offset, first.last_offset) == (0, 1)
        assert leader.partition(topic_id, 0) is not None
        assert heard and heard[-1] == (tp, 2), heard
        for broker in (1, 2, 3):  # acks=all: on every ISR member's log
            assert c.leo(broker, "t") >= 2
        second = await writer.append(tp, batch(b"c"), acks=1, timeout_ms=5_000)
        assert second.error is None and second.base_offset == 2
        await until(lambda: heard[-1] == (tp, 3), "the HW of the acks=1 append")
        assert values(writer.read(tp, 0, 1 << 20).batches) == [b"a", b"b", b"c"]
        remove()
        count = len(heard)
        await writer.append(tp, batch(b"d"), acks=-1, timeout_ms=5_000)
        assert len(heard) == count, "a removed listener hears nothing"
    scenario(tmp_path, body)


def test_refused_appends_are_errors_not_appended(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        topic_id = c.create_topic("t", [[1, 2, 3]])
        tp = TopicIdPartition(topic_id, 0)
        bad_acks = await c.managers[1].append(tp, batch(b"a"), acks=2, timeout_ms=1_000)
        assert bad_acks.error is not None and not bad_acks.appended
        assert bad_acks.error.code == ErrorCode.INVALID_REQUIRED_ACKS
        follower = await c.managers[2].append(tp, batch(b"a"), acks=1, timeout_ms=1_000)
        assert follower.error is not None and not follower.appended
        assert follower.error.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        unknown = await c.managers[1].append(TopicIdPartition(b"\x01" * 16, 0), batch(b"a"),
                                             acks=1, timeout_ms=1_000)
        assert unknown.error is not None and unknown.error.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        c.caught_up[1] = False
        behind = await c.managers[1].append(tp, batch(b"a"), acks=1, timeout_ms=1_000)
        assert behind.error is not None and not behind.appended
        assert behind.error.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert c.leo(1, "t") == 0, "nothing was appended"
    scenario(tmp_path, body)


def test_acks_all_that_cannot_be_met_times_out_as_appended(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        topic_id = c.create_topic("t", [[1, 2, 3]])
        tp = TopicIdPartition(topic_id, 0)
        c.network.cut |= {2, 3}  # the followers stop fetching: the HW cannot pass the batch
        outcome = await c.managers[1].append(tp, batch(b"a"), acks=-1, timeout_ms=200)
        assert outcome.error is not None
        assert outcome.error.code == ErrorCode.REQUEST_TIMED_OUT
        assert outcome.appended and outcome.base_offset == 0 and outcome.last_offset == 0
        assert c.leo(1, "t") == 1
    scenario(tmp_path, body)
