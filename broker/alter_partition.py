"""The AlterPartition sender (Kafka's AlterPartitionManager).

A leader's :class:`~broker.replication.partition_state.PartitionState` proposes ISR changes
(``ProposeIsr`` effects); the replica manager hands them to :meth:`AlterPartitionManager.submit`.
One task sends them: at most one AlterPartition request in flight, carrying the pending
proposals (the latest per partition; at most ALTER_PARTITION_ITEMS_MAX of them, the rest in the
next request at once), answered back to each partition through
``Partition.on_alter_partition_response``. A failed send (the controller unreachable, or a
request-level error) backs off, doubling from ALTER_PARTITION_BACKOFF_MS up to
ALTER_PARTITION_BACKOFF_MAX_MS; the partitions whose core asks for the very same proposal
again are re-sent after the pause. A partition no longer hosted (deleted, closed) when the
answer arrives is skipped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from tidelog import limits
from tidelog.broker.partition import Partition, PartitionKey
from tidelog.broker.producer_ids import ControllerChannel
from tidelog.broker.replication import ProposeIsr
from tidelog.errors import TidelogError
from tidelog.invariants import check
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode

__all__ = ["ALTER_PARTITION_BACKOFF_MAX_MS", "ALTER_PARTITION_BACKOFF_MS",
           "ALTER_PARTITION_ITEMS_MAX", "AlterPartitionManager"]

log = logging.getLogger("tidelog.broker.replica_manager")

#: AlterPartition retry pause after a failed send: doubles up to the max.
ALTER_PARTITION_BACKOFF_MS = 50
ALTER_PARTITION_BACKOFF_MAX_MS = 2_000
#: Partitions in one AlterPartition request. Each becomes a PartitionChangeRecord in one metadata
#: batch, which every controller replays on its Raft thread (~43 µs each): one request for the
#: ISRs expanding after 10,000-partition topics were created on a 100,000-partition cluster made
#: a 1.8 MB batch the quorum refuses, and the broker resent it for ever. Kafka has no such bound.
#: In tidelog.limits, where the controller listener's message limit is sized from it.
ALTER_PARTITION_ITEMS_MAX = limits.ALTER_PARTITION_ITEMS_MAX

check(
    ALTER_PARTITION_BACKOFF_MS < ALTER_PARTITION_BACKOFF_MAX_MS,
    "the AlterPartition backoff must have room to grow",
)


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class AlterPartitionManager:
    """Batches ISR proposals into AlterPartition requests (see the module doc)."""

    def __init__(self, *, broker_id: int, broker_epoch: Callable[[], int],
                 controller: ControllerChannel,
                 is_hosted: Callable[[Partition], bool]) -> None:
        self.broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._controller = controller
        self._is_hosted = is_hosted  # False for a partition deleted or replaced meanwhile
        self._pending: dict[PartitionKey, tuple[Partition, ProposeIsr]] = {}
        self._wake = asyncio.Event()

    def submit(self, partition: Partition, proposal: ProposeIsr) -> None:
        """Send ``proposal`` with the next request (it replaces an unsent one of the same
        partition)."""
        self._pending[partition.key] = (partition, proposal)
        self._wake.set()

    def forget(self, key: PartitionKey) -> None:
        """Drop an unsent proposal (the partition is deleted)."""
        self._pending.pop(key, None)

    async def run(self) -> None:
        """One AlterPartition in flight, carrying every pending proposal; failed sends back
        off, doubling. Runs until cancelled."""
        backoff_ms = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            if backoff_ms:
                await asyncio.sleep(backoff_ms / 1000)
            if len(self._pending) <= ALTER_PARTITION_ITEMS_MAX:
                batch, self._pending = self._pending, {}
            else:  # the oldest first; the rest go in the next request, without waiting
                keys = list(self._pending)[:ALTER_PARTITION_ITEMS_MAX]
                batch = {key: self._pending.pop(key) for key in keys}
                self._wake.set()
            if not batch:
                continue
            try:
                failed = await self.send(list(batch.values()))
            except Exception:
                log.exception("broker %d: AlterPartition round failed", self.broker_id)
                failed = True
            if failed:
                backoff_ms = min(ALTER_PARTITION_BACKOFF_MAX_MS,
                                 max(ALTER_PARTITION_BACKOFF_MS, backoff_ms * 2))
            else:
                backoff_ms = 0

    def _request(self, batch: list[tuple[Partition, ProposeIsr]]
                 ) -> cpb.AlterPartitionRequest:
        request = cpb.AlterPartitionRequest(broker_id=self.broker_id,
                                            broker_epoch=self._broker_epoch())
        topics: dict[bytes, cpb.AlterPartitionRequest.TopicData] = {}
        for partition, proposal in batch:
            topic = topics.get(partition.topic_id)
            if topic is None:
                topic = topics[partition.topic_id] = request.topics.add(
                    topic_id=partition.topic_id)
            data = topic.partitions.add(partition_id=partition.partition_id,
                                        leader_epoch=proposal.leader_epoch,
                                        new_isr=proposal.new_isr,
                                        partition_epoch=proposal.partition_epoch)
            # KIP-903: the epochs the members fetched with; the controller refuses an addition
            # whose epoch is not its current registration's. The leader's own is ours.
            epochs = proposal.new_isr_broker_epochs or (-1,) * len(proposal.new_isr)
            for broker_id, epoch in zip(proposal.new_isr, epochs, strict=True):
                data.new_isr_with_epochs.add(
                    broker_id=broker_id,
                    broker_epoch=request.broker_epoch if broker_id == self.broker_id else epoch)
        return request

    async def send(self, batch: list[tuple[Partition, ProposeIsr]]) -> bool:
        """Send one AlterPartition; True when something must be re-sent."""
        request = self._request(batch)
        results: dict[PartitionKey, cpb.AlterPartitionResponse.PartitionResult] = {}
        request_error: int = ErrorCode.NONE
        try:
            response: cpb.AlterPartitionResponse = await self._controller.call(
                "AlterPartition", request)
            request_error = response.error_code
            for topic_result in response.topics:
                for result in topic_result.partitions:
                    results[(topic_result.topic_id, result.partition_id)] = result
        except TidelogError as error:
            log.info("broker %d: AlterPartition failed: %s", self.broker_id, error)
            request_error = error.code
        now_ms = _monotonic_ms()
        for partition, proposal in batch:
            if partition.closed or not self._is_hosted(partition):
                continue
            found = results.get(partition.key)
            if request_error != ErrorCode.NONE or found is None:
                code = request_error if request_error != ErrorCode.NONE \
                    else ErrorCode.UNKNOWN_SERVER_ERROR
                partition.on_alter_partition_response(proposal, error_code=code, now_ms=now_ms)
                continue
            partition.on_alter_partition_response(
                proposal, error_code=found.error_code, leader_id=found.leader,
                leader_epoch=found.leader_epoch, isr=list(found.isr),
                partition_epoch=found.partition_epoch, now_ms=now_ms)
            if found.error_code != ErrorCode.NONE:
                log.info("broker %d: AlterPartition %s %s: %s %s", self.broker_id,
                         partition.name, list(proposal.new_isr),
                         ErrorCode.Name(found.error_code), found.error_message)
        # Something must be re-sent when the core asked for the very same proposal again.
        return any(self._pending.get(partition.key, (None, None))[1] == proposal
                   for partition, proposal in batch)
