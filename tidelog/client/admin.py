"""The Admin client: topics, partitions, configs, and the cluster and its controller quorum.

Every call goes to any reachable broker (the bootstrap list, then brokers learned from it); the
broker answers reads itself and forwards writes to the active controller, answering only after
the change is committed. A request-level error that is retriable (NOT_CONTROLLER while the
quorum elects a leader, a broker that cannot be reached) is retried with backoff until the call's
``timeout_ms`` (default ``default_api_timeout_ms``); others raise their typed error.

Calls that name several items (topics, resources) report per item, as Kafka's Admin does: they
return an ``AdminResult`` whose ``values`` hold what succeeded and ``errors`` the typed error of
each item that failed. ``result.all()`` returns the values or raises the first error (in request
order); ``result[name]`` returns one value or raises that item's error. Nothing per item is raised
by the call itself, so one bad topic does not hide what happened to the others.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

from tidelog.client._fetcher import EARLIEST, LATEST, list_offsets
from tidelog.client._io import Connections, io_thread, monotonic_ms, parse_bootstrap
from tidelog.client._metadata import Backoff, ClusterSnapshot, MetadataManager
from tidelog.client.records import TopicPartition
from tidelog.errors import (
    DuplicateResourceError,
    ErrorCode,
    InvalidGroupIdError,
    InvalidRequestError,
    NetworkError,
    RequestTimedOutError,
    TidelogError,
    UnknownMemberIdError,
    error_for_code,
)
from tidelog.metadata.topic_names import validate_topic_name
from tidelog.v1 import broker_pb2, controller_pb2, metadata_pb2

__all__ = [
    "Admin",
    "AdminResult",
    "AlterConfigOp",
    "BrokerDescription",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "CreatedTopic",
    "GroupDescription",
    "GroupListing",
    "GroupMemberDescription",
    "GroupOffset",
    "NewTopic",
    "PartitionDescription",
    "QuorumDescription",
    "TopicDescription",
    "TopicListing",
    "VoterDescription",
]

K = TypeVar("K")
V = TypeVar("V")

#: Request-level codes that say "the same write may succeed if sent again" without the risk that
#: the first one was applied; REQUEST_TIMED_OUT is not among them (its outcome is unknown).
_WRITE_RETRY_CODES = frozenset({
    ErrorCode.NOT_CONTROLLER, ErrorCode.BROKER_NOT_AVAILABLE, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION,
})
#: Codes that say "find the coordinator again and resend" (Kafka's coordinator errors).
_COORDINATOR_RETRY_CODES = frozenset({
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
})
_SOURCES = {
    controller_pb2.CONFIG_SOURCE_DEFAULT: "default",
    controller_pb2.CONFIG_SOURCE_TOPIC: "topic",
    controller_pb2.CONFIG_SOURCE_CLUSTER: "cluster",
    controller_pb2.CONFIG_SOURCE_BROKER: "broker",
}
_OPS = {
    "set": controller_pb2.ALTER_CONFIG_SET,
    "delete": controller_pb2.ALTER_CONFIG_DELETE,
    "append": controller_pb2.ALTER_CONFIG_APPEND,
    "subtract": controller_pb2.ALTER_CONFIG_SUBTRACT,
}
_RESOURCE_TYPES = {
    "topic": metadata_pb2.CONFIG_RESOURCE_TOPIC,
    "broker": metadata_pb2.CONFIG_RESOURCE_BROKER,
}


# ---------------------------------------------------------------------------------- results
@dataclass
class AdminResult(Generic[K, V]):
    """Per-item outcome of a call that names several items."""

    values: dict[K, V] = field(default_factory=dict)
    errors: dict[K, TidelogError] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def __getitem__(self, key: K) -> V:
        """The item's value, or raise its error (KeyError for an item not in the request)."""
        if key in self.errors:
            raise self.errors[key]
        return self.values[key]

    def all(self) -> dict[K, V]:
        """Every value, or raise the first item's error."""
        for error in self.errors.values():
            raise error
        return dict(self.values)


@dataclass(frozen=True)
class NewTopic:
    """A topic to create. -1 means the cluster default (num.partitions,
    default.replication.factor). ``replica_assignment`` maps partition -> broker ids (preferred
    leader first) and then requires num_partitions and replication_factor to be -1."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)
    replica_assignment: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True)
class CreatedTopic:
    name: str
    topic_id: str
    num_partitions: int
    replication_factor: int
    configs: dict[str, str]


@dataclass(frozen=True)
class TopicListing:
    name: str
    topic_id: str
    is_internal: bool
    num_partitions: int


@dataclass(frozen=True)
class PartitionDescription:
    """A partition's placement and, where the leader answered, its log offsets (-1: unknown)."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    log_start_offset: int = -1
    high_watermark: int = -1
    log_end_offset: int = -1
    size_bytes: int = -1


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: str
    is_internal: bool
    partitions: tuple[PartitionDescription, ...]


@dataclass(frozen=True)
class ConfigResource:
    """What a config belongs to: ``ConfigResource("topic", "orders")`` or
    ``ConfigResource("broker", "101")`` (``"broker", ""`` is the cluster-wide default)."""

    resource_type: Literal["topic", "broker"]
    name: str

    def __post_init__(self) -> None:
        if self.resource_type not in _RESOURCE_TYPES:
            raise ValueError(f"resource_type must be 'topic' or 'broker', got "
                             f"{self.resource_type!r}")


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str
    source: str  # "default", "topic", "cluster" or "broker"
    read_only: bool = False
    sensitive: bool = False
    documentation: str = ""


@dataclass(frozen=True)
class AlterConfigOp:
    """One incremental change: set (the default), delete (back to the default), append to or
    subtract from a list-valued config."""

    name: str
    value: str | None = None
    op: Literal["set", "delete", "append", "subtract"] = "set"

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"op must be one of {sorted(_OPS)}, got {self.op!r}")
        if self.op != "delete" and self.value is None:
            raise ValueError(f"config {self.name!r}: op {self.op!r} needs a value")


@dataclass(frozen=True)
class BrokerDescription:
    broker_id: int
    host: str
    port: int
    rack: str
    fenced: bool


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerDescription, ...]
    metadata_offset: int


@dataclass(frozen=True)
class VoterDescription:
    node_id: int
    raft_address: str
    host: str
    port: int
    commit_index: int
    applied_index: int
    metadata_offset: int
    lag: int
    connected: bool
    is_leader: bool


@dataclass(frozen=True)
class QuorumDescription:
    cluster_id: str
    leader_id: int
    leader_epoch: int
    high_watermark: int
    responder_id: int
    metadata_offset: int
    voters: tuple[VoterDescription, ...]


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


# ---------------------------------------------------------------------------------- client
class Admin:
    """Administers a Tidelog cluster. Thread-safe.

    >>> with Admin("127.0.0.1:9092") as admin:
    ...     admin.create_topics([NewTopic("orders", num_partitions=3)]).all()
    ...     print(admin.describe_topics(["orders"])["orders"].partitions)
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "tidelog-admin",
        request_timeout_ms: int = 30_000,
        default_api_timeout_ms: int = 60_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
    ) -> None:
        if request_timeout_ms <= 0 or default_api_timeout_ms <= 0:
            raise ValueError("timeouts must be positive")
        self.client_id = client_id
        self._request_timeout_ms = request_timeout_ms
        self._default_timeout_ms = default_api_timeout_ms
        self._backoff = Backoff(retry_backoff_ms, max(retry_backoff_ms, retry_backoff_max_ms))
        self._io = io_thread()
        self._conns = Connections(client_id)
        self._metadata = MetadataManager(
            parse_bootstrap(bootstrap_servers), self._conns, loop=self._io.loop,
            request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms, metadata_max_age_ms=300_000,
        )
        self._closed = False

    # ------------------------------------------------------------------ topics
    def create_topics(self, new_topics: Iterable[NewTopic], *, validate_only: bool = False,
                      timeout_ms: int | None = None) -> AdminResult[str, CreatedTopic]:
        """Create topics. Per-topic errors: InvalidTopicError, TopicAlreadyExistsError,
        InvalidPartitionsError, InvalidReplicationFactorError, InvalidReplicaAssignmentError,
        InvalidConfigError, PolicyViolationError."""
        topics = list(new_topics)
        _no_duplicates(t.name for t in topics)
        result: AdminResult[str, CreatedTopic] = AdminResult()
        request = controller_pb2.CreateTopicsRequest(validate_only=validate_only)
        for t in topics:
            error = _name_error(t.name)
            if error is not None:
                result.errors[t.name] = error
                continue
            item = request.topics.add(name=t.name, num_partitions=t.num_partitions,
                                      replication_factor=t.replication_factor)
            for name, value in t.configs.items():
                item.configs.add(name=name, value=str(value))
            for pid, brokers in sorted((t.replica_assignment or {}).items()):
                item.assignments.add(partition_id=pid, broker_ids=list(brokers))
        if request.topics:
            wait = self._timeout(timeout_ms)
            request.timeout_ms = wait
            resp = self._run(self._write("CreateTopics", request, wait), wait)
            for r in resp.topics:
                if r.error_code:
                    result.errors[r.name] = error_for_code(r.error_code, r.error_message)
                else:
                    result.values[r.name] = CreatedTopic(
                        r.name, _topic_id(r.topic_id), r.num_partitions, r.replication_factor,
                        {c.name: c.value for c in r.configs})
        return _ordered(result, [t.name for t in topics])

    def delete_topics(self, names: Iterable[str], *,
                      timeout_ms: int | None = None) -> AdminResult[str, None]:
        """Delete topics. Per-topic errors: UnknownTopicOrPartitionError, InvalidTopicError."""
        wanted = list(names)
        _no_duplicates(wanted)
        result: AdminResult[str, None] = AdminResult()
        request = controller_pb2.DeleteTopicsRequest()
        for name in wanted:
            error = _name_error(name)
            if error is not None:
                result.errors[name] = error
            else:
                request.names.append(name)
        if request.names:
            wait = self._timeout(timeout_ms)
            request.timeout_ms = wait
            resp = self._run(self._write("DeleteTopics", request, wait), wait)
            for r in resp.topics:
                if r.error_code:
                    result.errors[r.name] = error_for_code(r.error_code, r.error_message)
                else:
                    result.values[r.name] = None
        return _ordered(result, wanted)

    def list_topics(self, *, include_internal: bool = False,
                    timeout_ms: int | None = None) -> dict[str, TopicListing]:
        """Every topic the cluster has, by name (internal ones such as __consumer_offsets only
        with ``include_internal``)."""
        wait = self._timeout(timeout_ms)
        resp = self._run(self._read("Metadata", broker_pb2.MetadataRequest(), wait), wait)
        return {
            t.name: TopicListing(t.name, _topic_id(t.topic_id), t.is_internal, len(t.partitions))
            for t in sorted(resp.topics, key=lambda t: t.name)
            if t.error_code == ErrorCode.NONE and (include_internal or not t.is_internal)
        }

    def describe_topics(self, names: Iterable[str], *, include_offsets: bool = True,
                        timeout_ms: int | None = None) -> AdminResult[str, TopicDescription]:
        """Partitions of each topic (leader, epoch, replicas, ISR) and, with
        ``include_offsets``, each partition's log start offset, HW, log end offset and size as
        its leader reports them (DescribeLogs, else ListOffsets; -1 where it did not answer).
        Per-topic error: UnknownTopicOrPartitionError."""
        wanted = list(names)
        _no_duplicates(wanted)
        result: AdminResult[str, TopicDescription] = AdminResult()
        valid = []
        for name in wanted:
            error = _name_error(name)
            if error is not None:
                result.errors[name] = error
            else:
                valid.append(name)
        if valid:
            wait = self._timeout(timeout_ms)
            found = self._run(self._describe_topics(valid, include_offsets, wait), wait)
            result.values.update(found.values)
            result.errors.update(found.errors)
        return _ordered(result, wanted)

    async def _describe_topics(self, names: list[str], include_offsets: bool,
                               wait_ms: int) -> AdminResult[str, TopicDescription]:
        deadline = monotonic_ms() + wait_ms
        resp = await self._read("Metadata", broker_pb2.MetadataRequest(topics=names), wait_ms)
        snap = ClusterSnapshot.from_response(resp, now_ms=monotonic_ms(), previous=None,
                                             all_topics=True)
        offsets: dict[TopicPartition, tuple[int, int, int, int]] = {}
        if include_offsets:
            offsets = await self._log_offsets(snap, deadline)
        result: AdminResult[str, TopicDescription] = AdminResult()
        for t in resp.topics:
            if t.error_code:
                result.errors[t.name] = error_for_code(t.error_code, t.error_message)
                continue
            parts = tuple(
                PartitionDescription(
                    p.partition, p.leader, p.leader_epoch, p.replicas, p.isr, p.offline_replicas,
                    *offsets.get(TopicPartition(t.name, p.partition), (-1, -1, -1, -1)),
                )
                for p in snap.topics[t.name].partitions
            )
            result.values[t.name] = TopicDescription(t.name, _topic_id(t.topic_id),
                                                     t.is_internal, parts)
        return result

    async def _log_offsets(self, snap: ClusterSnapshot, deadline_ms: int
                           ) -> dict[TopicPartition, tuple[int, int, int, int]]:
        """(log start, HW, LEO, size) per partition from its leader; best effort, one round."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic in snap.topics.values():
            for p in topic.partitions:
                if p.leader >= 0 and snap.address_of(p.leader) is not None:
                    by_leader.setdefault(p.leader, []).append(TopicPartition(topic.name,
                                                                             p.partition))
        found: dict[TopicPartition, tuple[int, int, int, int]] = {}
        outcomes = await asyncio.gather(*(
            self._leader_log_offsets(snap, node, tps, deadline_ms)
            for node, tps in by_leader.items()
        ))
        for outcome in outcomes:
            found.update(outcome)
        return found

    async def _leader_log_offsets(
        self, snap: ClusterSnapshot, node: int, tps: list[TopicPartition], deadline_ms: int
    ) -> dict[TopicPartition, tuple[int, int, int, int]]:
        address = snap.address_of(node)
        assert address is not None
        timeout = max(1, min(self._request_timeout_ms, deadline_ms - monotonic_ms()))
        found: dict[TopicPartition, tuple[int, int, int, int]] = {}
        request = broker_pb2.DescribeLogsRequest()
        for topic in sorted({tp.topic for tp in tps}):
            request.topics.add(name=topic, partitions=[tp.partition for tp in tps
                                                       if tp.topic == topic])
        try:
            logs = await self._conns.call(address, "DescribeLogs", request, timeout_ms=timeout)
            for p in logs.partitions:
                tp = TopicPartition(p.topic, p.partition_id)
                if p.error_code == ErrorCode.NONE and p.is_leader and tp in tps:
                    found[tp] = (p.log_start_offset, p.high_watermark, p.log_end_offset,
                                 p.size_bytes)
        except TidelogError:
            pass  # fall back to ListOffsets below
        missing = [tp for tp in tps if tp not in found]
        if missing:
            request2 = broker_pb2.ListOffsetsRequest()
            for ts in (EARLIEST, LATEST):
                for topic in sorted({tp.topic for tp in missing}):
                    item = request2.topics.add(name=topic)
                    for tp in missing:
                        if tp.topic == topic:
                            item.partitions.add(partition_id=tp.partition, timestamp=ts,
                                                current_leader_epoch=-1)
            try:
                resp = await self._conns.call(address, "ListOffsets", request2,
                                              timeout_ms=timeout)
            except TidelogError:
                return found
            starts: dict[TopicPartition, int] = {}
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_id)
                    if p.error_code != ErrorCode.NONE or tp not in missing:
                        continue
                    if tp not in starts:
                        starts[tp] = p.offset  # EARLIEST comes first in the request
                    else:
                        found[tp] = (starts[tp], p.offset, -1, -1)
        return found

    def create_partitions(self, new_counts: Mapping[str, int], *, validate_only: bool = False,
                          timeout_ms: int | None = None) -> AdminResult[str, None]:
        """Grow topics to the given total partition counts. Per-topic errors:
        InvalidPartitionsError (not above the current count), UnknownTopicOrPartitionError."""
        result: AdminResult[str, None] = AdminResult()
        request = controller_pb2.CreatePartitionsRequest(validate_only=validate_only)
        for name, count in new_counts.items():
            error = _name_error(name)
            if error is not None:
                result.errors[name] = error
            else:
                request.topics.add(name=name, count=count)
        if request.topics:
            wait = self._timeout(timeout_ms)
            request.timeout_ms = wait
            resp = self._run(self._write("CreatePartitions", request, wait), wait)
            for r in resp.topics:
                if r.error_code:
                    result.errors[r.name] = error_for_code(r.error_code, r.error_message)
                else:
                    result.values[r.name] = None
        return _ordered(result, list(new_counts))

    # ------------------------------------------------------------------ configs
    def describe_configs(self, resources: Iterable[ConfigResource], *,
                         timeout_ms: int | None = None
                         ) -> AdminResult[ConfigResource, dict[str, ConfigEntry]]:
        """Every config of each resource with its value and source. Per-resource errors:
        UnknownTopicOrPartitionError / ResourceNotFoundError."""
        wanted = list(resources)
        _no_duplicates(wanted)
        request = controller_pb2.DescribeConfigsRequest()
        for r in wanted:
            request.resources.add(resource_type=_RESOURCE_TYPES[r.resource_type],
                                  resource_name=r.name)
        wait = self._timeout(timeout_ms)
        resp = self._run(self._read("DescribeConfigs", request, wait), wait)
        result: AdminResult[ConfigResource, dict[str, ConfigEntry]] = AdminResult()
        for rr in resp.resources:
            key = _resource_key(rr.resource_type, rr.resource_name)
            if rr.error_code:
                result.errors[key] = error_for_code(rr.error_code, rr.error_message)
            else:
                result.values[key] = {
                    c.name: ConfigEntry(c.name, c.value, _SOURCES.get(c.source, "default"),
                                        c.read_only, c.sensitive, c.documentation)
                    for c in rr.configs
                }
        return _ordered(result, wanted)

    def alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[AlterConfigOp] | Mapping[str, str | None]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> AdminResult[ConfigResource, None]:
        """Change configs incrementally (Kafka's incrementalAlterConfigs). Each resource maps to
        AlterConfigOps, or to ``{name: value}`` where None deletes the key. Per-resource errors:
        InvalidConfigError, UnknownTopicOrPartitionError, InvalidRequestError."""
        request = controller_pb2.AlterConfigsRequest(validate_only=validate_only)
        for resource, ops in changes.items():
            item = request.resources.add(resource_type=_RESOURCE_TYPES[resource.resource_type],
                                         resource_name=resource.name)
            for op in _as_ops(ops):
                item.ops.add(name=op.name, value=op.value or "", op=_OPS[op.op])
        wait = self._timeout(timeout_ms)
        resp = self._run(self._write("AlterConfigs", request, wait), wait)
        result: AdminResult[ConfigResource, None] = AdminResult()
        for rr in resp.resources:
            key = _resource_key(rr.resource_type, rr.resource_name)
            if rr.error_code:
                result.errors[key] = error_for_code(rr.error_code, rr.error_message)
            else:
                result.values[key] = None
        return _ordered(result, list(changes))

    # ------------------------------------------------------------------ cluster
    def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        """The cluster id, the active controller and every registered broker (fenced marked)."""
        wait = self._timeout(timeout_ms)
        resp = self._run(self._read("DescribeCluster", broker_pb2.DescribeClusterRequest(),
                                    wait), wait)
        brokers = tuple(
            BrokerDescription(b.broker_id, b.endpoint.host, b.endpoint.port, b.rack, b.fenced)
            for b in sorted(resp.brokers, key=lambda b: b.broker_id)
        )
        return ClusterDescription(resp.cluster_id, resp.controller_id, brokers,
                                  resp.metadata_offset)

    def describe_quorum(self, *, timeout_ms: int | None = None) -> QuorumDescription:
        """The controller quorum: leader, its epoch, commit index and each voter's progress."""
        wait = self._timeout(timeout_ms)
        resp = self._run(self._read("DescribeQuorum", controller_pb2.DescribeQuorumRequest(),
                                    wait), wait)
        voters = tuple(
            VoterDescription(v.node_id, v.raft_address, v.endpoint.host, v.endpoint.port,
                             v.commit_index, v.applied_index, v.metadata_offset, v.lag,
                             v.connected, v.is_leader)
            for v in sorted(resp.voters, key=lambda v: v.node_id)
        )
        return QuorumDescription(resp.cluster_id, resp.leader_id, resp.leader_epoch,
                                 resp.high_watermark, resp.responder_id, resp.metadata_offset,
                                 voters)

    # ------------------------------------------------------------------ groups
    def list_groups(self, *, timeout_ms: int | None = None) -> dict[str, GroupListing]:
        """Every consumer group of the cluster, by id: ListGroups to every live broker (each
        lists the groups it coordinates), merged. A broker that does not answer by the
        deadline raises its error."""
        wait = self._timeout(timeout_ms)
        return dict(sorted(self._run(self._list_groups(wait), wait).items()))

    async def _list_groups(self, wait_ms: int) -> dict[str, GroupListing]:
        deadline = monotonic_ms() + wait_ms
        resp = await self._read("Metadata", broker_pb2.MetadataRequest(topics=[]), wait_ms)
        snap = ClusterSnapshot.from_response(resp, now_ms=monotonic_ms(), previous=None,
                                             all_topics=False)
        live = sorted((b.broker_id, b.address) for b in snap.brokers.values() if not b.fenced)
        answers = await asyncio.gather(*(
            self._retrying(f"ListGroups to broker {node}", deadline, idempotent=True,
                           send=_send_to(self._conns, address, "ListGroups",
                                         broker_pb2.ListGroupsRequest(), self._request_timeout_ms,
                                         deadline))
            for node, address in live))
        found: dict[str, GroupListing] = {}
        for (node, _), answer in zip(live, answers, strict=True):
            for g in answer.groups:
                found[g.group_id] = GroupListing(g.group_id, g.state, node)
        return found

    def describe_groups(self, group_ids: Iterable[str], *, timeout_ms: int | None = None
                        ) -> AdminResult[str, GroupDescription]:
        """Each group's state, epochs, assignor and members, from its coordinator. Per-group
        errors: GroupIdNotFoundError, InvalidGroupIdError, a coordinator error past the
        deadline."""
        wanted = list(group_ids)
        _no_duplicates(wanted)
        wait = self._timeout(timeout_ms)
        result: AdminResult[str, GroupDescription] = self._run(
            self._per_group(wanted, wait, self._describe_group), wait)
        return _ordered(result, wanted)

    async def _describe_group(self, group_id: str, deadline: int) -> GroupDescription:
        node, resp = await self._group_call(
            group_id, "DescribeGroups", broker_pb2.DescribeGroupsRequest(group_ids=[group_id]),
            deadline, idempotent=True, first=lambda r: r.groups)
        g = resp.groups[0]
        names = await self._topic_names(
            [a for m in g.members for a in (*m.assignment, *m.target_assignment)
             if not a.topic], deadline)

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
                                g.assignor_name, members, node)

    async def _topic_names(self, unnamed: list[broker_pb2.TopicPartitions], deadline: int
                           ) -> dict[bytes, str]:
        """Topic id -> name for assignments given by id only (from Metadata); a topic deleted
        since keeps its id as its name."""
        if not unnamed:
            return {}
        resp = await self._metadata.call_any("Metadata", broker_pb2.MetadataRequest(),
                                             deadline_ms=deadline)
        names = {bytes(t.topic_id): t.name for t in resp.topics if t.error_code == 0}
        for a in unnamed:
            names.setdefault(bytes(a.topic_id), _topic_id(a.topic_id))
        return names

    def delete_groups(self, group_ids: Iterable[str], *, timeout_ms: int | None = None
                      ) -> AdminResult[str, None]:
        """Delete groups and their committed offsets. Per-group errors: NonEmptyGroupError
        (members are in it), GroupIdNotFoundError, InvalidGroupIdError."""
        wanted = list(group_ids)
        _no_duplicates(wanted)
        wait = self._timeout(timeout_ms)
        result: AdminResult[str, None] = self._run(
            self._per_group(wanted, wait, self._delete_group), wait)
        return _ordered(result, wanted)

    async def _delete_group(self, group_id: str, deadline: int) -> None:
        await self._group_call(
            group_id, "DeleteGroups", broker_pb2.DeleteGroupsRequest(group_ids=[group_id]),
            deadline, idempotent=False, first=lambda r: r.results)

    def list_group_offsets(self, group_id: str,
                           partitions: Iterable[TopicPartition] | None = None, *,
                           timeout_ms: int | None = None) -> dict[TopicPartition, GroupOffset]:
        """The group's committed offsets (all of them, or those of ``partitions``; a partition
        without a commit has offset -1), with metadata and lag. Raises the group's error
        (InvalidGroupIdError, a coordinator error past the deadline) or a partition's."""
        request = broker_pb2.OffsetFetchRequest(group_id=group_id)
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            for topic, pids in sorted(by_topic.items()):
                request.topics.add(name=topic, partitions=sorted(set(pids)))
        wait = self._timeout(timeout_ms)
        _, resp = self._run(self._group_call(
            group_id, "OffsetFetch", request, monotonic_ms() + wait, idempotent=True,
            first=None), wait)
        found: dict[TopicPartition, GroupOffset] = {}
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    raise _group_error(group_id, p.error_code,
                                       f"{t.name}-{p.partition_id}: {p.error_message}")
                found[TopicPartition(t.name, p.partition_id)] = GroupOffset(
                    p.committed_offset, p.committed_leader_epoch, p.metadata, p.lag)
        return dict(sorted(found.items()))

    def delete_group_offsets(self, group_id: str,
                             partitions: Iterable[TopicPartition | str], *,
                             timeout_ms: int | None = None) -> AdminResult[TopicPartition, None]:
        """Delete the group's committed offsets of ``partitions`` (Kafka's
        deleteConsumerGroupOffsets); a topic name instead of a partition means every committed
        partition of it. Per partition: deleted (a partition without a commit counts as
        deleted, as Kafka answers), or GroupSubscribedToTopicError while a member of the group
        subscribes to its topic. Raises the group's error (GroupIdNotFoundError,
        InvalidGroupIdError, a coordinator error past the deadline)."""
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
        result: AdminResult[TopicPartition, None] = AdminResult()
        if not request.topics:
            return result
        wait = self._timeout(timeout_ms)
        _, resp = self._run(self._group_call(
            group_id, "OffsetDelete", request, monotonic_ms() + wait, idempotent=True,
            first=None), wait)
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_id)
                if p.error_code:
                    result.errors[tp] = _group_error(group_id, p.error_code,
                                                     f"{tp.topic}-{tp.partition}: "
                                                     f"{p.error_message}")
                else:
                    result.values[tp] = None
        return result

    def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int], *,
                            timeout_ms: int | None = None) -> None:
        """Set the group's committed offsets (Kafka's alterConsumerGroupOffsets): an
        OffsetCommit as a simple consumer (member id "", epoch -1), which the coordinator
        accepts only while the group has no members. Raises UnknownMemberIdError saying the
        group has active members, the group's error, or the first partition's error (naming
        the group and the partition)."""
        if not offsets:
            return
        request = broker_pb2.OffsetCommitRequest(group_id=group_id, member_id="",
                                                 member_epoch=-1)
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
        wait = self._timeout(timeout_ms)
        try:
            _, resp = self._run(self._group_call(
                group_id, "OffsetCommit", request, monotonic_ms() + wait, idempotent=True,
                first=None), wait)
        except UnknownMemberIdError as error:
            raise UnknownMemberIdError(
                f"group {group_id!r} has active members; stop them first "
                f"(a simple commit is accepted only while the group has none)") from error
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    raise _group_error(group_id, p.error_code,
                                       f"{t.name}-{p.partition_id}: {p.error_message}")

    def list_offsets(self, timestamps: Mapping[TopicPartition, int], *,
                     timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """The offset of each partition at a timestamp (ms), or at EARLIEST (-2, the log start
        offset) / LATEST (-1, the high watermark), asked of each partition's leader (ListOffsets,
        retried on leader changes until the deadline). -1 for a timestamp after every record.
        Raises the first partition's non-retriable error (UnknownTopicOrPartitionError)."""
        wait = self._timeout(timeout_ms)
        found: dict[TopicPartition, tuple[int, int]] = self._run(list_offsets(
            self._metadata, self._conns, timestamps, deadline_ms=monotonic_ms() + wait,
            request_timeout_ms=self._request_timeout_ms, backoff=self._backoff), wait)
        return {tp: found[tp][0] for tp in sorted(found)}

    async def _per_group(self, group_ids: list[str], wait_ms: int,
                         one: Any) -> AdminResult[str, Any]:
        deadline = monotonic_ms() + wait_ms
        result: AdminResult[str, Any] = AdminResult()
        outcomes = await asyncio.gather(*(one(g, deadline) for g in group_ids),
                                        return_exceptions=True)
        for group_id, outcome in zip(group_ids, outcomes, strict=True):
            if isinstance(outcome, TidelogError):
                result.errors[group_id] = outcome
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                result.values[group_id] = outcome
        return result

    async def _group_call(self, group_id: str, method: str, request: Any, deadline: int, *,
                          idempotent: bool, first: Any) -> tuple[int, Any]:
        """(coordinator id, response) of ``method`` sent to the group's coordinator, found
        again on every retriable error until ``deadline``. ``first`` picks the per-group
        items of the response (None: the error is request-level)."""
        if not group_id:
            raise InvalidGroupIdError("the group id must not be empty")
        where: list[int] = [-1]

        async def send() -> Any:
            node, address = await self._find_coordinator(group_id, deadline)
            where[0] = node
            resp = await self._conns.call(address, method, request,
                                          timeout_ms=_remaining(self, deadline))
            items = list(first(resp)) if first is not None else []
            code, message = ((items[0].error_code, items[0].error_message) if items
                             else (resp.error_code, resp.error_message) if first is None
                             else (ErrorCode.NONE, ""))
            if code:
                raise _group_error(group_id, code, message)
            return resp

        resp = await self._retrying(f"group {group_id!r}", deadline, idempotent=idempotent,
                                    send=send)
        return where[0], resp

    async def _find_coordinator(self, group_id: str, deadline: int) -> tuple[int, str]:
        resp = await self._metadata.call_any(
            "FindCoordinator", broker_pb2.FindCoordinatorRequest(group_ids=[group_id]),
            deadline_ms=deadline)
        if not resp.coordinators:
            raise _group_error(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               "FindCoordinator answered nothing")
        c = resp.coordinators[0]
        if c.error_code:
            raise _group_error(group_id, c.error_code, c.error_message)
        return c.node_id, f"{c.endpoint.host}:{c.endpoint.port}"

    async def _retrying(self, what: str, deadline: int, *, idempotent: bool, send: Any) -> Any:
        """``send()`` until it succeeds, retrying the coordinator errors and unreachable
        brokers (and timeouts, if ``idempotent``) with backoff; bounded by ``deadline``."""
        retried: tuple[type[TidelogError], ...] = (
            (NetworkError, RequestTimedOutError) if idempotent else (NetworkError,))
        attempts = 0
        while True:
            try:
                return await send()
            except TidelogError as error:
                if error.code not in _COORDINATOR_RETRY_CODES and not isinstance(error, retried):
                    raise
                attempts += 1
                delay = self._backoff.delay_ms(attempts, _rng)
                if monotonic_ms() + delay >= deadline:
                    raise
                await asyncio.sleep(delay / 1000)


    # ------------------------------------------------------------------ plumbing
    def _timeout(self, timeout_ms: int | None) -> int:
        if timeout_ms is not None and timeout_ms <= 0:
            raise ValueError("timeout_ms must be positive")
        return self._default_timeout_ms if timeout_ms is None else timeout_ms

    def _run(self, coro: Any, wait_ms: int) -> Any:
        if self._closed:
            coro.close()
            raise RuntimeError("the admin client is closed")
        return self._io.run(coro, wait_ms / 1000)

    async def _read(self, method: str, request: Any, wait_ms: int) -> Any:
        return await self._call(method, request, wait_ms, write=False)

    async def _write(self, method: str, request: Any, wait_ms: int) -> Any:
        return await self._call(method, request, wait_ms, write=True)

    async def _call(self, method: str, request: Any, wait_ms: int, *, write: bool) -> Any:
        """Call until a response without a retriable request-level error, or the deadline."""
        deadline = monotonic_ms() + wait_ms
        attempts = 0
        # Bounded by the deadline: every failed round sleeps a backoff step first.
        while True:
            resp = await self._metadata.call_any(method, request, deadline_ms=deadline,
                                                 idempotent=not write)
            code = getattr(resp, "error_code", ErrorCode.NONE)
            if code == ErrorCode.NONE:
                return resp
            error = error_for_code(code, getattr(resp, "error_message", ""))
            retry = code in _WRITE_RETRY_CODES if write else error.retriable
            attempts += 1
            delay = self._backoff.delay_ms(attempts, _rng)
            if not retry or monotonic_ms() + delay >= deadline:
                raise error
            await asyncio.sleep(delay / 1000)

    def close(self) -> None:
        """Release the connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._io.run(self._close(), None)

    async def _close(self) -> None:
        await self._metadata.close()
        await self._conns.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


_rng = random.Random()


def _group_error(group_id: str, code: int, message: str) -> TidelogError:
    """The typed error of ``code``, its message naming the group."""
    return error_for_code(code, f"group {group_id!r}: {message or ErrorCode.Name(code)}")


def _remaining(admin: Admin, deadline: int) -> int:
    return max(1, min(admin._request_timeout_ms, deadline - monotonic_ms()))


def _send_to(conns: Connections, address: str, method: str, request: Any, request_timeout_ms: int,
             deadline: int) -> Any:
    """A ``send()`` for :meth:`Admin._retrying`: one call to one broker, its request-level
    error raised."""
    async def send() -> Any:
        timeout = max(1, min(request_timeout_ms, deadline - monotonic_ms()))
        resp = await conns.call(address, method, request, timeout_ms=timeout)
        if resp.error_code:
            raise error_for_code(resp.error_code, f"{address}: {resp.error_message}")
        return resp
    return send


def _name_error(name: str) -> TidelogError | None:
    try:
        validate_topic_name(name)
    except TidelogError as e:
        return e
    return None


def _no_duplicates(items: Iterable[Any]) -> None:
    seen: set[Any] = set()
    for item in items:
        if item in seen:
            raise DuplicateResourceError(f"{item!r} appears more than once in the request")
        seen.add(item)


def _topic_id(raw: bytes) -> str:
    return str(uuid.UUID(bytes=bytes(raw))) if len(raw) == 16 else ""


def _resource_key(resource_type: int, name: str) -> ConfigResource:
    if resource_type == metadata_pb2.CONFIG_RESOURCE_TOPIC:
        return ConfigResource("topic", name)
    return ConfigResource("broker", name)


def _as_ops(ops: Iterable[AlterConfigOp] | Mapping[str, str | None]) -> list[AlterConfigOp]:
    if isinstance(ops, Mapping):
        return [AlterConfigOp(k, None, "delete") if v is None else AlterConfigOp(k, str(v))
                for k, v in ops.items()]
    out = list(ops)
    for op in out:
        if not isinstance(op, AlterConfigOp):
            raise TypeError(f"expected AlterConfigOp, got {op!r}")
    return out


def _ordered(result: AdminResult[K, V], order: list[K]) -> AdminResult[K, V]:
    """Values and errors in request order; an item the response left out is an error."""
    out: AdminResult[K, V] = AdminResult()
    for key in order:
        if key in result.errors:
            out.errors[key] = result.errors[key]
        elif key in result.values:
            out.values[key] = result.values[key]
        else:
            out.errors[key] = InvalidRequestError(f"the response did not mention {key!r}")
    return out
