"""The typed internal way into a hosted partition (Kafka's PartitionWriter, for the broker's own
components: the group coordinator appends to and reads ``__consumer_offsets`` through it).

* :class:`TopicIdPartition`: a partition by topic id and index, a value (a named tuple, so it
  equals the ``(topic id, partition)`` keys the data plane uses).
* :class:`AppendOutcome`: what one append came to, once its acks are met or it failed.
* :class:`PendingAppend`: an append done now whose acks=all wait is still ahead (the produce
  handler appends every partition of a request first, then waits for them together).
* :class:`PartitionWriter`: what a component that writes needs of the replica manager:
  ``append`` (returns when the acks are met, or with the error), ``start_append`` +
  ``await_acks`` (append now, wait later: the coordinator pipelines its writes), ``read``
  (whole batches below the high watermark) and high-watermark listeners (told when a
  leader's HW moves, so a writer learns when its records are committed).
  :class:`~broker.replica_manager.ReplicaManager` implements it.

Errors are values here, never raised: an outcome carries the TidelogError a produce would answer
with. ``appended`` tells whether the batch is in the leader's log: an error with ``appended``
true came after the append (the flush, the acks=all wait), so the batch may yet be committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from tidelog.broker.partition import Partition
from tidelog.broker.replication import AcksDone
from tidelog.broker.storage import FetchDataInfo
from tidelog.errors import TidelogError

__all__ = [
    "AppendOutcome",
    "HighWatermarkListener",
    "PartitionWriter",
    "PendingAppend",
    "TopicIdPartition",
]


class TopicIdPartition(NamedTuple):
    """A partition by topic id (Kafka's TopicIdPartition)."""

    topic_id: bytes
    partition_id: int

    def __str__(self) -> str:
        return f"{self.topic_id.hex()}-{self.partition_id}"


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """What an append came to (see the module doc). Offsets are -1 when nothing was appended;
    ``log_append_time_ms`` is -1 unless the topic uses LogAppendTime."""

    error: TidelogError | None
    appended: bool = False
    base_offset: int = -1
    last_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class PendingAppend:
    """An append made now: its outcome so far, and for acks=all the wait for the HW (None when
    there is nothing to wait for: acks 0/1, or it failed)."""

    tp: TopicIdPartition
    outcome: AppendOutcome
    partition: Partition | None = None
    waiter: asyncio.Future[AcksDone] | None = None


#: Called with (partition, new high watermark) when a leader's HW moves. It runs inside the
#: partition's bookkeeping: it must not block or raise (a raise is logged and ignored).
HighWatermarkListener = Callable[[TopicIdPartition, int], None]


class PartitionWriter(Protocol):
    """What a broker component needs to write to and read its partitions."""

    async def append(self, tp: TopicIdPartition, batch: bytes, *, acks: int,
                     timeout_ms: int) -> AppendOutcome:
        """Append one record batch as leader; returns when ``acks`` are met (acks=all: the HW
        passed the batch) or with the error."""
        ...

    def start_append(self, tp: TopicIdPartition, batch: bytes, *, acks: int, now_ms: int,
                     monotonic_ms: int) -> PendingAppend:
        """Append now as leader, awaiting nothing (so a caller's appends keep its order); the
        acks=all wait is in the result, for :meth:`await_acks`."""
        ...

    async def await_acks(self, pending: Sequence[PendingAppend],
                         timeout_ms: int) -> list[AppendOutcome]:
        """Wait, together and at most ``timeout_ms``, for the acks=all appends in ``pending``;
        their outcomes in order (a wait that times out is ended: REQUEST_TIMED_OUT)."""
        ...

    def read(self, tp: TopicIdPartition, offset: int, max_bytes: int, *,
             current_leader_epoch: int = -1) -> FetchDataInfo:
        """Whole batches from ``offset`` below the HW (leaders only); raises the TidelogError a
        fetch would answer with."""
        ...

    def add_high_watermark_listener(self, listener: HighWatermarkListener
                                    ) -> Callable[[], None]:
        """Call ``listener`` on every HW move of a partition this broker leads; returns the
        function that removes it."""
        ...
