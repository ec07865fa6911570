"""What the request handlers share: the narrow interface they need of the partition registry
(:class:`HandlerRegistry`, which :class:`~broker.replica_manager.ReplicaManager` implements) and
the per-partition error answer (:func:`set_error`: code, message, the leader hint for the errors
a client retries elsewhere, the error counter)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol, cast

from tidelog.broker.delayed import ConsumerFetchWaiters, FollowerFetchWaiters
from tidelog.broker.metrics import BrokerMetrics
from tidelog.broker.partition import Partition
from tidelog.broker.partition_writer import AppendOutcome, PendingAppend, TopicIdPartition
from tidelog.broker.producer_ids import ProducerIdManager
from tidelog.errors import TidelogError
from tidelog.metadata.image import MetadataImage
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import common_pb2
from tidelog.v1.common_pb2 import ErrorCode

__all__ = ["ErrorTarget", "HandlerRegistry", "error_code", "set_error"]

#: Errors answered with the leader as this broker knows it, so a client retries there.
_HINTED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                     ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.LEADER_NOT_AVAILABLE})

#: A per-partition answer that carries an error and a leader hint.
ErrorTarget = (pb.ProduceResponse.PartitionResponse | pb.FetchResponse.PartitionData
               | pb.ListOffsetsResponse.PartitionData)


class HandlerRegistry(Protocol):
    """What the protobuf handlers need of the partition registry."""

    @property
    def broker_id(self) -> int: ...

    @property
    def metrics(self) -> BrokerMetrics | None: ...

    @property
    def image(self) -> MetadataImage: ...

    @property
    def produce_request_bytes_max(self) -> int: ...

    @property
    def producer_ids(self) -> ProducerIdManager: ...

    @property
    def follower_waiters(self) -> FollowerFetchWaiters:
        """Follower fetches wait here for data; fetch sessions register here."""
        ...

    @property
    def consumer_waiters(self) -> ConsumerFetchWaiters:
        """Consumer fetches wait here for the HW; consumers' fetch sessions register here."""
        ...

    def broker_epoch(self) -> int: ...

    def metadata_caught_up(self) -> bool: ...

    def metadata_refusal(self) -> TidelogError | None: ...

    def partitions(self) -> list[Partition]: ...

    def lookup(self, topic_id: bytes | None, name: str, partition_id: int
               ) -> tuple[bytes | None, Partition | None, TidelogError | None]: ...

    def leader_hint(self, topic_id: bytes, partition_id: int) -> common_pb2.LeaderHint: ...

    def start_produce(self, batches: Sequence[tuple[TopicIdPartition, bytes]], *, acks: int,
                      now_ms: int, monotonic_ms: int) -> list[asyncio.Future[PendingAppend]]: ...

    async def await_acks(self, pending: Sequence[PendingAppend],
                         timeout_ms: int) -> list[AppendOutcome]: ...


def error_code(code: int) -> common_pb2.ErrorCode:
    return cast(common_pb2.ErrorCode, code)


def set_error(registry: HandlerRegistry, target: ErrorTarget, error: TidelogError,
              topic_id: bytes | None, partition_id: int, api: str) -> None:
    """Answer ``error`` in ``target`` (with the leader hint when the client should retry at the
    leader) and count it."""
    target.error_code = error_code(error.code)
    target.error_message = error.message
    if error.code in _HINTED and topic_id is not None:
        target.current_leader.CopyFrom(registry.leader_hint(topic_id, partition_id))
    if registry.metrics is not None:
        registry.metrics.request_errors.labels(api, error.code_name).inc()
