"""The Admin's consumer-group operations (Kafka's listConsumerGroups, describeConsumerGroups,
deleteConsumerGroups, listConsumerGroupOffsets, alterConsumerGroupOffsets,
deleteConsumerGroupOffsets) and their value types.

:class:`GroupAdmin` runs on the client's I/O loop; ``Admin`` keeps the public methods (their
arguments, checks and docstrings) and hands each to it. A group's requests go to its coordinator
through :class:`~tidelog.client._coordinator_lookup.CoordinatorLookup`, the lookup and retry
policy the consumer uses too (coordinator errors and unreachable brokers retried with backoff
until the call's deadline, the coordinator found again after it moved); ListGroups goes to every
live broker under the same policy. Every error raised names the group.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tidelog.client._admin_types import AdminResult, topic_id_text
from tidelog.client._coordinator_lookup import CoordinatorLookup, group_error, retrying
from tidelog.client._io import Connections, monotonic_ms
from tidelog.client._metadata import Backoff, ClusterSnapshot, MetadataManager
from tidelog.client.records import TopicPartition
from tidelog.errors import (
    ErrorCode,
    InvalidGroupIdError,
    InvalidRequestError,
    TidelogError,
    UnknownMemberIdError,
    error_for_code,
)
from tidelog.v1 import broker_pb2

__all__ = [
    "GroupAdmin",
    "GroupDescription",
    "GroupListing",
    "GroupMemberDescription",
    "GroupOffset",
    "alter_offsets_request",
    "offset_delete_request",
    "offset_fetch_request",
]

V = TypeVar("V")


@dataclass(frozen=True)
class GroupListing:
    """A consumer group as its coordinator lists it (state: Empty, Assigning, Reconciling,
    Stable or Dead) and the broker that coordinates it."""

    group_id: str
    state: str
    coordinator: int


@dataclass(frozen=True)
class GroupMemberDescription:
    """A member of a consumer group: its ids, epoch, subscription (topic names and/or a
    regex), current assignment and the target assignment it is moving to."""

    member_id: str
    instance_id: str
    client_host: str
    member_epoch: int
    subscribed_topics: tuple[str, ...]
    assignment: tuple[TopicPartition, ...]
    client_id: str = ""
    subscribed_topic_regex: str = ""
    target_assignment: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class GroupDescription:
    """A consumer group: state, group and assignment epochs, server assignor, members."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[GroupMemberDescription, ...]
    coordinator: int


@dataclass(frozen=True)
class GroupOffset:
    """A committed offset of a group: the next offset to consume, its leader epoch (-1
    unknown), the committer's metadata, and the lag (high watermark - offset, floored at 0;
    -1 when the coordinator's broker does not host the partition)."""

    offset: int
    leader_epoch: int
    metadata: str
    lag: int


# ---------------------------------------------------------------------------------- requests
def offset_fetch_request(group_id: str, partitions: Iterable[TopicPartition] | None
                         ) -> broker_pb2.OffsetFetchRequest:
    """OffsetFetch of ``partitions`` (None: every committed offset of the group)."""
    request = broker_pb2.OffsetFetchRequest(group_id=group_id)
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        for topic, pids in sorted(by_topic.items()):
            request.topics.add(name=topic, partitions=sorted(set(pids)))
    return request


def offset_delete_request(group_id: str, partitions: Iterable[TopicPartition | str]
                          ) -> broker_pb2.OffsetDeleteRequest:
    """OffsetDelete of ``partitions``; a topic name stands for all its committed partitions."""
    by_topic: dict[str, set[int]] = {}
    whole: set[str] = set()
    for item in partitions:
        if isinstance(item, str):
            whole.add(item)
        else:
            by_topic.setdefault(item.topic, set()).add(item.partition)
    request = broker_pb2.OffsetDeleteRequest(group_id=group_id)
    for topic in sorted(whole | set(by_topic)):
        request.topics.add(name=topic, partitions=(
            [] if topic in whole else sorted(by_topic[topic])))
    return request


def alter_offsets_request(group_id: str, offsets: Mapping[TopicPartition, int]
                          ) -> broker_pb2.OffsetCommitRequest:
    """The OffsetCommit of a simple consumer (member id "", epoch -1) setting ``offsets``;
    InvalidRequestError for a negative offset, before anything is sent."""
    request = broker_pb2.OffsetCommitRequest(group_id=group_id, member_id="", member_epoch=-1)
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for tp, offset in offsets.items():
        if offset < 0:
            raise InvalidRequestError(f"group {group_id!r}: offset {offset} of {tp} is "
                                      f"negative")
        by_topic.setdefault(tp.topic, []).append((tp.partition, offset))
    for topic, parts in sorted(by_topic.items()):
        item = request.topics.add(name=topic)
        for pid, offset in sorted(parts):
            item.partitions.add(partition_id=pid, committed_offset=offset,
                                committed_leader_epoch=-1)
    return request


# ---------------------------------------------------------------------------------- calls
class GroupAdmin:
    """The Admin's group calls, on the I/O loop; every call is bounded by ``deadline_ms``."""

    def __init__(self, *, metadata: MetadataManager, conns: Connections,
                 request_timeout_ms: int, backoff: Backoff) -> None:
        self._metadata = metadata
        self._conns = conns
        self._request_timeout_ms = request_timeout_ms
        self._backoff = backoff
        self._rng = random.Random()

    async def list_groups(self, deadline_ms: int) -> dict[str, GroupListing]:
        """ListGroups to every live broker (each lists the groups it coordinates), merged."""
        resp = await self._metadata.call_any(
            "Metadata", broker_pb2.MetadataRequest(topics=[]), deadline_ms=deadline_ms)
        snap = ClusterSnapshot.from_response(resp, now_ms=monotonic_ms(), previous=None,
                                             all_topics=False)
        live = sorted((b.broker_id, b.address) for b in snap.brokers.values() if not b.fenced)
        answers = await asyncio.gather(*(
            retrying(self._list_groups_at(address, deadline_ms), deadline_ms=deadline_ms,
                     idempotent=True, backoff=self._backoff, rng=self._rng)
            for _, address in live))
        found: dict[str, GroupListing] = {}
        for (node, _), answer in zip(live, answers, strict=True):
            for g in answer.groups:
                found[g.group_id] = GroupListing(g.group_id, g.state, node)
        return found

    def _list_groups_at(self, address: str, deadline_ms: int
                        ) -> Callable[[], Awaitable[broker_pb2.ListGroupsResponse]]:
        async def send() -> broker_pb2.ListGroupsResponse:
            timeout = max(1, min(self._request_timeout_ms, deadline_ms - monotonic_ms()))
            resp: broker_pb2.ListGroupsResponse = await self._conns.call(
                address, "ListGroups", broker_pb2.ListGroupsRequest(), timeout_ms=timeout)
            if resp.error_code:
                raise error_for_code(resp.error_code, f"{address}: {resp.error_message}")
            return resp
        return send

    async def describe_groups(self, group_ids: list[str], deadline_ms: int
                              ) -> AdminResult[str, GroupDescription]:
        return await self._per_group(group_ids, deadline_ms, self._describe_group)

    async def _describe_group(self, group_id: str, deadline_ms: int) -> GroupDescription:
        lookup = self._lookup(group_id)
        resp = await lookup.call(
            "DescribeGroups", broker_pb2.DescribeGroupsRequest(group_ids=[group_id]),
            deadline_ms=deadline_ms, idempotent=True, check=_first_item_error(
                group_id, lambda r: r.groups))
        g = resp.groups[0]
        names = await self._topic_names(
            [a for m in g.members for a in (*m.assignment, *m.target_assignment)
             if not a.topic], deadline_ms)

        def partitions(entries: Iterable[broker_pb2.TopicPartitions]
                       ) -> tuple[TopicPartition, ...]:
            return tuple(TopicPartition(a.topic or names.get(bytes(a.topic_id), ""), p)
                         for a in entries for p in a.partitions)
        members = tuple(
            GroupMemberDescription(
                m.member_id, m.instance_id, m.client_host, m.member_epoch,
                tuple(m.subscribed_topic_names), partitions(m.assignment),
                client_id=m.client_id, subscribed_topic_regex=m.subscribed_topic_regex,
                target_assignment=partitions(m.target_assignment))
            for m in g.members)
        return GroupDescription(g.group_id, g.state, g.group_epoch, g.assignment_epoch,
                                g.assignor_name, members, lookup.node_id)

    async def _topic_names(self, unnamed: list[broker_pb2.TopicPartitions], deadline_ms: int
                           ) -> dict[bytes, str]:
        """Topic id -> name for assignments given by id only (from Metadata); a topic deleted
        since keeps its id as its name."""
        if not unnamed:
            return {}
        resp = await self._metadata.call_any("Metadata", broker_pb2.MetadataRequest(),
                                             deadline_ms=deadline_ms)
        names = {bytes(t.topic_id): t.name for t in resp.topics if t.error_code == 0}
        for a in unnamed:
            names.setdefault(bytes(a.topic_id), topic_id_text(a.topic_id))
        return names

    async def delete_groups(self, group_ids: list[str], deadline_ms: int
                            ) -> AdminResult[str, None]:
        return await self._per_group(group_ids, deadline_ms, self._delete_group)

    async def _delete_group(self, group_id: str, deadline_ms: int) -> None:
        # Not idempotent: a DeleteGroups that timed out may have been applied, and sent again
        # it would answer GROUP_ID_NOT_FOUND for a group it deleted.
        await self._lookup(group_id).call(
            "DeleteGroups", broker_pb2.DeleteGroupsRequest(group_ids=[group_id]),
            deadline_ms=deadline_ms, idempotent=False,
            check=_first_item_error(group_id, lambda r: r.results))

    async def list_offsets(self, group_id: str, request: broker_pb2.OffsetFetchRequest,
                           deadline_ms: int) -> dict[TopicPartition, GroupOffset]:
        resp = await self._lookup(group_id).call(
            "OffsetFetch", request, deadline_ms=deadline_ms, idempotent=True,
            check=_request_error(group_id))
        found: dict[TopicPartition, GroupOffset] = {}
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    raise group_error(group_id, p.error_code,
                                      f"{t.name}-{p.partition_id}: {p.error_message}")
                found[TopicPartition(t.name, p.partition_id)] = GroupOffset(
                    p.committed_offset, p.committed_leader_epoch, p.metadata, p.lag)
        return dict(sorted(found.items()))

    async def delete_offsets(self, group_id: str, request: broker_pb2.OffsetDeleteRequest,
                             deadline_ms: int) -> AdminResult[TopicPartition, None]:
        resp = await self._lookup(group_id).call(
            "OffsetDelete", request, deadline_ms=deadline_ms, idempotent=True,
            check=_request_error(group_id))
        result: AdminResult[TopicPartition, None] = AdminResult()
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_id)
                if p.error_code:
                    result.errors[tp] = group_error(group_id, p.error_code,
                                                    f"{tp.topic}-{tp.partition}: "
                                                    f"{p.error_message}")
                else:
                    result.values[tp] = None
        return result

    async def alter_offsets(self, group_id: str, request: broker_pb2.OffsetCommitRequest,
                            deadline_ms: int) -> None:
        try:
            resp = await self._lookup(group_id).call(
                "OffsetCommit", request, deadline_ms=deadline_ms, idempotent=True,
                check=_request_error(group_id))
        except UnknownMemberIdError as error:
            raise UnknownMemberIdError(
                f"group {group_id!r} has active members; stop them first "
                f"(a simple commit is accepted only while the group has none)") from error
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    raise group_error(group_id, p.error_code,
                                      f"{t.name}-{p.partition_id}: {p.error_message}")

    # --- plumbing -------------------------------------------------------------------------------

    def _lookup(self, group_id: str) -> CoordinatorLookup:
        """A lookup for one call (the coordinator is found afresh by each Admin call)."""
        if not group_id:
            raise InvalidGroupIdError("the group id must not be empty")
        return CoordinatorLookup(group_id, metadata=self._metadata, conns=self._conns,
                                 request_timeout_ms=self._request_timeout_ms,
                                 backoff=self._backoff, rng=self._rng)

    async def _per_group(self, group_ids: list[str], deadline_ms: int,
                         one: Callable[[str, int], Awaitable[V]]) -> AdminResult[str, V]:
        """``one`` for every group at once; a group's TidelogError is its item's error."""
        result: AdminResult[str, V] = AdminResult()
        outcomes = await asyncio.gather(*(one(g, deadline_ms) for g in group_ids),
                                        return_exceptions=True)
        for group_id, outcome in zip(group_ids, outcomes, strict=True):
            if isinstance(outcome, TidelogError):
                result.errors[group_id] = outcome
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                result.values[group_id] = outcome
        return result


def _request_error(group_id: str) -> Callable[[Any], TidelogError | None]:
    """A ``check`` of an answer's request-level error (its per-partition ones are the
    caller's)."""
    def check(resp: Any) -> TidelogError | None:
        if resp.error_code:
            return group_error(group_id, resp.error_code, resp.error_message)
        return None
    return check


def _first_item_error(group_id: str, items: Callable[[Any], Any]
                      ) -> Callable[[Any], TidelogError | None]:
    """A ``check`` of the error of the answer's first per-group item (one group per request)."""
    def check(resp: Any) -> TidelogError | None:
        found = list(items(resp))
        if not found:
            return group_error(group_id, ErrorCode.UNKNOWN_SERVER_ERROR,
                               "the answer named no group")
        if found[0].error_code:
            return group_error(group_id, found[0].error_code, found[0].error_message)
        return None
    return check
