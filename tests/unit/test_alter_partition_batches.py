"""AlterPartitionManager splits many pending ISR proposals into bounded requests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from tidelog.broker.alter_partition import ALTER_PARTITION_ITEMS_MAX, AlterPartitionManager
from tidelog.broker.replication.effects import ProposeIsr
from tidelog.v1 import controller_pb2 as cpb


@dataclass
class _Partition:
    """What the manager reads of a partition and calls on it."""

    topic_id: bytes
    partition_id: int
    closed: bool = False
    answers: list[int] = field(default_factory=list)

    @property
    def key(self) -> tuple[bytes, int]:
        return self.topic_id, self.partition_id

    @property
    def name(self) -> str:
        return f"t-{self.partition_id}"

    def on_alter_partition_response(self, proposal: Any, *, error_code: int,
                                    **_: Any) -> None:
        self.answers.append(error_code)


class _Controller:
    """Answers every AlterPartition with success for each partition, recording its size."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    async def call(self, method: str, request: cpb.AlterPartitionRequest) -> Any:
        self.sizes.append(sum(len(t.partitions) for t in request.topics))
        response = cpb.AlterPartitionResponse()
        for topic in request.topics:
            answer = response.topics.add(topic_id=topic.topic_id)
            for p in topic.partitions:
                answer.partitions.add(partition_id=p.partition_id, leader=1, isr=p.new_isr,
                                      leader_epoch=p.leader_epoch,
                                      partition_epoch=p.partition_epoch + 1)
        return response


def test_a_burst_of_proposals_goes_out_in_bounded_requests() -> None:
    count = 2 * ALTER_PARTITION_ITEMS_MAX + 500
    controller = _Controller()
    partitions = [_Partition(b"t" * 16, i) for i in range(count)]

    async def scenario() -> None:
        manager = AlterPartitionManager(broker_id=1, broker_epoch=lambda: 7,
                                        controller=controller,  # type: ignore[arg-type]
                                        is_hosted=lambda _: True)
        for p in partitions:
            manager.submit(p, ProposeIsr(new_isr=(1, 2), leader_epoch=0,  # type: ignore[arg-type]
                                         partition_epoch=0))
        task = asyncio.create_task(manager.run())
        for _ in range(1000):  # bounded: until every partition has its answer
            if all(p.answers for p in partitions):
                break
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(scenario())
    assert controller.sizes == [ALTER_PARTITION_ITEMS_MAX, ALTER_PARTITION_ITEMS_MAX, 500]
    assert all(p.answers == [0] for p in partitions)
