"""The data plane's protobuf request handlers, one module per API (Kafka's KafkaApis, split).

Each ``handle_<rpc>(registry, request)`` takes the partition registry, through the narrow
:class:`~broker.handlers.common.HandlerRegistry` interface that
:class:`~broker.replica_manager.ReplicaManager` implements, and returns the response; nothing a
client sends makes one raise (errors are codes in the response).

* :mod:`.produce` — Produce (through the registry's typed append);
* :mod:`.fetch` — consumer Fetch and the follower's ReplicaService.Fetch, with the long-poll,
  and the followers' fetch sessions; :mod:`.consumer_session` — the consumers' ones;
* :mod:`.offsets` — ListOffsets;
* :mod:`.logs` — DescribeLogs;
* :mod:`.producer_ids` — InitProducerId;
* :mod:`.groups` — the group RPCs (FindCoordinator, ConsumerGroupHeartbeat, OffsetCommit,
  OffsetFetch, List/Describe/DeleteGroups), bound to the group coordinator's runtime rather
  than the registry (:class:`GroupHandlers`, ``BrokerRuntime.groups``).

:class:`DataPlaneHandlers` binds them to one registry: it is what ``BrokerRuntime.data_plane``
holds and broker/service.py's servicers call.
"""

from __future__ import annotations

from tidelog.broker.handlers.common import HandlerRegistry
from tidelog.broker.handlers.consumer_session import ConsumerFetchSession
from tidelog.broker.handlers.fetch import (
    ReplicaFetchSession,
    handle_fetch,
    handle_replica_fetch,
    handle_session_fetch,
)
from tidelog.broker.handlers.groups import GroupHandlers
from tidelog.broker.handlers.logs import handle_describe_logs
from tidelog.broker.handlers.offsets import handle_list_offsets
from tidelog.broker.handlers.produce import handle_produce
from tidelog.broker.handlers.producer_ids import handle_init_producer_id
from tidelog.v1 import broker_pb2 as pb

__all__ = [
    "DataPlaneHandlers",
    "GroupHandlers",
    "HandlerRegistry",
    "handle_describe_logs",
    "handle_fetch",
    "handle_init_producer_id",
    "handle_list_offsets",
    "handle_produce",
    "handle_replica_fetch",
]


class DataPlaneHandlers:
    """The request handlers bound to one partition registry."""

    def __init__(self, registry: HandlerRegistry) -> None:
        self.registry = registry

    async def handle_produce(self, request: pb.ProduceRequest) -> pb.ProduceResponse:
        return await handle_produce(self.registry, request)

    async def handle_fetch(self, request: pb.FetchRequest) -> pb.FetchResponse:
        return await handle_fetch(self.registry, request)

    async def handle_replica_fetch(self, request: pb.FetchRequest,
                                   session: ReplicaFetchSession | None = None
                                   ) -> pb.FetchResponse:
        return await handle_replica_fetch(self.registry, request, session)

    async def handle_session_fetch(self, request: pb.FetchRequest,
                                   session: ConsumerFetchSession) -> pb.FetchResponse:
        """A consumer's fetch within its FetchStream's session (after the gate)."""
        return await handle_session_fetch(self.registry, request, session)

    def open_consumer_fetch_session(self) -> ConsumerFetchSession:
        """A consumer FetchStream's fetch session; the stream's end must close it."""
        return ConsumerFetchSession(self.registry)

    def open_replica_fetch_session(self) -> ReplicaFetchSession:
        """A FetchStream's fetch session; the stream's end must close it."""
        return ReplicaFetchSession(self.registry)

    async def handle_list_offsets(self, request: pb.ListOffsetsRequest
                                  ) -> pb.ListOffsetsResponse:
        return await handle_list_offsets(self.registry, request)

    async def handle_describe_logs(self, request: pb.DescribeLogsRequest
                                   ) -> pb.DescribeLogsResponse:
        return await handle_describe_logs(self.registry, request)

    async def handle_init_producer_id(self, request: pb.InitProducerIdRequest
                                      ) -> pb.InitProducerIdResponse:
        return await handle_init_producer_id(self.registry, request)
