"""The group RPCs (Kafka's GroupCoordinatorService): FindCoordinator, ConsumerGroupHeartbeat,
OffsetCommit, OffsetFetch, OffsetDelete, ListGroups, DescribeGroups, DeleteGroups.

Each routes a group to its ``__consumer_offsets`` shard on this broker through
:class:`~broker.group.runtime.GroupCoordinatorRuntime` and answers what the shard's pure handler
answers, once its records are committed. A group this broker does not coordinate gets
NOT_COORDINATOR; while its partition loads, COORDINATOR_LOAD_IN_PROGRESS; while the offsets
topic is being created or has no leader, COORDINATOR_NOT_AVAILABLE (all three retriable: the
client finds the coordinator again). An invalid group id is INVALID_GROUP_ID before any
routing. Nothing a client sends makes a handler raise.

A heartbeat also carries who sent it (:func:`client_identity`): the ``client-id`` gRPC metadata
entry (Kafka's client.id from the request header) and the peer's host, which DescribeGroups
shows per member.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from tidelog import limits
from tidelog.broker.authz.principal import peer_host
from tidelog.broker.group.assignment import TopicMetadata
from tidelog.broker.group.coordinator import GroupCoordinatorShard
from tidelog.broker.group.heartbeat_checks import ClientIdentity
from tidelog.broker.group.records import GroupRecord
from tidelog.broker.group.responses import error_code, set_error
from tidelog.broker.group.runtime import GroupCoordinatorRuntime
from tidelog.errors import (
    CoordinatorNotAvailableError,
    InvalidGroupIdError,
    InvalidRequestError,
    TidelogError,
)
from tidelog.metadata.image import MetadataImage
from tidelog.metadata.topic_names import OFFSETS_TOPIC
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import common_pb2

__all__ = ["CLIENT_ID_METADATA_KEY", "GROUP_IDS_PER_REQUEST_MAX", "GroupHandlers",
           "client_identity"]

#: Group ids one FindCoordinator / DescribeGroups / DeleteGroups request may name.
GROUP_IDS_PER_REQUEST_MAX = 1_000
#: The gRPC metadata entry a client names itself with (Kafka's client.id).
CLIENT_ID_METADATA_KEY = "client-id"


def client_identity(peer: str, metadata: Iterable[tuple[str, str | bytes]], *,
                    principal: str = "") -> ClientIdentity:
    """Who sent a request: the ``client-id`` metadata entry, the host of gRPC's peer string
    (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``; other kinds are shown whole) and the
    authenticated ``principal`` (empty with authorization off)."""
    client_id = ""
    for key, value in metadata:
        if key == CLIENT_ID_METADATA_KEY:
            client_id = value if isinstance(value, str) else value.decode(errors="replace")
    return ClientIdentity(client_id, peer_host(peer), principal)


def _check_group_id(group_id: str) -> None:
    if not group_id or len(group_id) > limits.GROUP_TEXT_LENGTH_MAX:
        raise InvalidGroupIdError(
            f"group id must be 1..{limits.GROUP_TEXT_LENGTH_MAX} characters, got {len(group_id)}")


def _check_count(group_ids: list[str]) -> None:
    if len(group_ids) > GROUP_IDS_PER_REQUEST_MAX:
        raise InvalidRequestError(
            f"{len(group_ids)} group ids in one request, more than {GROUP_IDS_PER_REQUEST_MAX}")


class GroupHandlers:
    """The group RPCs of one broker."""

    def __init__(self, runtime: GroupCoordinatorRuntime,
                 image: Callable[[], MetadataImage]) -> None:
        self.runtime = runtime
        self._image = image

    # --- FindCoordinator ---------------------------------------------------------------------

    async def find_coordinator(self, request: pb.FindCoordinatorRequest
                               ) -> pb.FindCoordinatorResponse:
        response = pb.FindCoordinatorResponse()
        group_ids = list(request.group_ids)
        try:
            _check_count(group_ids)
        except TidelogError as error:
            response.coordinators.add(error_code=error_code(error.code),
                                      error_message=error.message, node_id=-1)
            return response
        for group_id in group_ids:
            out = response.coordinators.add(group_id=group_id, node_id=-1)
            try:
                _check_group_id(group_id)
                self._find(group_id, out)
            except TidelogError as error:
                set_error(out, error)
        return response

    def _find(self, group_id: str, out: pb.FindCoordinatorResponse.Coordinator) -> None:
        image = self._image()
        topic = image.topics.by_name.get(OFFSETS_TOPIC)
        if topic is None:
            self.runtime.ensure_offsets_topic()
            raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} is being created; retry")
        pid = self.runtime.partition_of(group_id, topic)
        leader = topic.partitions[pid].leader
        broker = image.cluster.brokers.get(leader)
        if broker is None or broker.fenced:
            raise CoordinatorNotAvailableError(
                f"{OFFSETS_TOPIC}-{pid} has no leader now; retry")
        out.node_id = leader
        out.endpoint.CopyFrom(common_pb2.Endpoint(host=broker.host, port=broker.port))

    # --- ConsumerGroupHeartbeat ---------------------------------------------------------------

    async def consumer_group_heartbeat(self, request: pb.ConsumerGroupHeartbeatRequest,
                                       client: ClientIdentity | None = None
                                       ) -> pb.ConsumerGroupHeartbeatResponse:
        def op(shard: GroupCoordinatorShard
               ) -> tuple[list[GroupRecord], pb.ConsumerGroupHeartbeatResponse]:
            return shard.consumer_group_heartbeat(
                request, now_ms=_monotonic_ms(), topics=self.runtime.topics(), client=client)

        try:
            _check_group_id(request.group_id)
            return await self.runtime.write(request.group_id, op)
        except TidelogError as error:
            response = pb.ConsumerGroupHeartbeatResponse()
            set_error(response, error)
            return response

    # --- offsets -------------------------------------------------------------------------------

    async def offset_commit(self, request: pb.OffsetCommitRequest) -> pb.OffsetCommitResponse:
        try:
            _check_group_id(request.group_id)
            return await self.runtime.write(
                request.group_id, lambda shard: shard.offset_commit(request, now_ms=_wall_ms()))
        except TidelogError as error:
            response = pb.OffsetCommitResponse()
            set_error(response, error)
            for topic in request.topics:
                out = response.topics.add(name=topic.name)
                for partition in topic.partitions:
                    out.partitions.add(partition_id=partition.partition_id,
                                       error_code=error_code(error.code),
                                       error_message=error.message)
            return response

    async def offset_fetch(self, request: pb.OffsetFetchRequest) -> pb.OffsetFetchResponse:
        try:
            _check_group_id(request.group_id)
            response = await self.runtime.read(request.group_id,
                                               lambda shard: shard.offset_fetch(request))
        except TidelogError as error:
            response = pb.OffsetFetchResponse()
            set_error(response, error)
            return response
        self._fill_lag(response)
        return response

    async def offset_delete(self, request: pb.OffsetDeleteRequest) -> pb.OffsetDeleteResponse:
        """Kafka's OffsetDelete (coordinator.offset_delete); a request naming more than
        PARTITIONS_PER_REQUEST_MAX partitions is INVALID_REQUEST before any routing."""
        def op(shard: GroupCoordinatorShard
               ) -> tuple[list[GroupRecord], pb.OffsetDeleteResponse]:
            return shard.offset_delete(request, topics=self.runtime.topics())

        try:
            _check_group_id(request.group_id)
            named = sum(len(t.partitions) for t in request.topics)
            if named > limits.PARTITIONS_PER_REQUEST_MAX:
                raise InvalidRequestError(
                    f"{named} partitions in one OffsetDelete, more than "
                    f"{limits.PARTITIONS_PER_REQUEST_MAX}")
            return await self.runtime.write(request.group_id, op)
        except TidelogError as error:
            response = pb.OffsetDeleteResponse()
            set_error(response, error)
            return response

    def _fill_lag(self, response: pb.OffsetFetchResponse) -> None:
        """lag = HW - committed offset (floored at 0: a commit may run ahead of a follower's
        HW) where this broker hosts the partition; else it stays -1 (the shard stays pure: it
        knows offsets, not logs)."""
        for topic in response.topics:
            for partition in topic.partitions:
                if partition.error_code != common_pb2.NONE or partition.committed_offset < 0:
                    continue
                hw = self.runtime.high_watermark(topic.name, partition.partition_id)
                if hw is not None:
                    partition.lag = max(0, hw - partition.committed_offset)

    # --- admin ---------------------------------------------------------------------------------

    async def list_groups(self, request: pb.ListGroupsRequest) -> pb.ListGroupsResponse:
        """The groups of the shards this broker has loaded (an admin asks every broker)."""
        response = pb.ListGroupsResponse()
        for shard in self.runtime.active_shards():
            response.groups.extend(shard.list_groups().groups)
        return response

    async def describe_groups(self, request: pb.DescribeGroupsRequest
                              ) -> pb.DescribeGroupsResponse:
        response = pb.DescribeGroupsResponse()
        group_ids = list(request.group_ids)
        try:
            _check_count(group_ids)
        except TidelogError as error:
            out = response.groups.add(state="Dead")
            set_error(out, error)
            return response
        for group_id in group_ids:
            try:
                _check_group_id(group_id)
                answer = await self.runtime.read(
                    group_id, _describe_one(group_id, self.runtime.topics()))
                response.groups.extend(answer.groups)
            except TidelogError as error:
                out = response.groups.add(group_id=group_id, state="Dead")
                set_error(out, error)
        return response

    async def delete_groups(self, request: pb.DeleteGroupsRequest) -> pb.DeleteGroupsResponse:
        response = pb.DeleteGroupsResponse()
        group_ids = list(request.group_ids)
        try:
            _check_count(group_ids)
        except TidelogError as error:
            set_error(response.results.add(), error)
            return response
        for group_id in group_ids:
            try:
                _check_group_id(group_id)
                answer = await self.runtime.write(group_id, _delete_one(group_id))
                response.results.extend(answer.results)
            except TidelogError as error:
                set_error(response.results.add(group_id=group_id), error)
        return response


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _describe_one(group_id: str, topics: Mapping[str, TopicMetadata]
                  ) -> Callable[[GroupCoordinatorShard], pb.DescribeGroupsResponse]:
    def op(shard: GroupCoordinatorShard) -> pb.DescribeGroupsResponse:
        return shard.describe_groups([group_id], topics)
    return op


def _delete_one(group_id: str
                ) -> Callable[[GroupCoordinatorShard],
                              tuple[list[GroupRecord], pb.DeleteGroupsResponse]]:
    def op(shard: GroupCoordinatorShard) -> tuple[list[GroupRecord], pb.DeleteGroupsResponse]:
        return shard.delete_groups([group_id])
    return op
