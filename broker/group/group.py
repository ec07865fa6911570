"""The state of one coordinator shard (one ``__consumer_offsets`` partition), built only by replay.

:class:`GroupState` holds the consumer groups (Kafka's ConsumerGroup: epoch, members, target
assignment, each member's current assignment) and the committed offsets of every group, and
changes only through :meth:`GroupState.replay`, one record at a time: the coordinator replays
its own records as it writes them, and a new coordinator rebuilds the same state by replaying the
partition from the start. :meth:`GroupState.digest` is a canonical rendering used to check that
both give the same result.

A group's state (Empty, Assigning, Reconciling, Stable) is derived, never stored, as Kafka's is.
Session deadlines are soft state of the coordinator (coordinator.py), not part of this.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tidelog.broker.group.assignment import TopicMetadata
from tidelog.broker.group.records import GroupRecord, Partitions, from_topic_partitions
from tidelog.broker.group.topic_regex import RegexTopics, matching_topics
from tidelog.errors import InvalidRegularExpressionError
from tidelog.invariants import InvariantViolation
from tidelog.v1 import groups_pb2 as gpb

__all__ = [
    "ConsumerGroup",
    "ConsumerGroupMember",
    "GroupState",
    "GroupStateName",
    "OffsetAndMetadata",
    "owned_partitions",
]

#: Kafka's ConsumerGroupState names, as ListGroups and DescribeGroups show them.
GroupStateName = str
EMPTY, ASSIGNING, RECONCILING, STABLE = "Empty", "Assigning", "Reconciling", "Stable"


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """One member: what it said about itself (metadata record) and where its reconciliation
    stands (current assignment record)."""

    member_id: str
    instance_id: str = ""
    rack_id: str = ""
    client_id: str = ""
    client_host: str = ""
    #: The principal of its latest heartbeat ("" with authorization off): with client_host,
    #: whom its subscriptions are authorized for (see :meth:`subscribed_topics`).
    principal: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    #: A regex over topic names (full match), or "": its matches join the names above.
    subscribed_topic_regex: str = ""
    server_assignor: str = ""
    rebalance_timeout_ms: int = 0
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: gpb.MemberState = gpb.MEMBER_STATE_STABLE
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)

    def metadata_value(self) -> gpb.ConsumerGroupMemberMetadataValue:
        return gpb.ConsumerGroupMemberMetadataValue(
            instance_id=self.instance_id, rack_id=self.rack_id, client_id=self.client_id,
            client_host=self.client_host, subscribed_topic_names=self.subscribed_topic_names,
            subscribed_topic_regex=self.subscribed_topic_regex,
            server_assignor=self.server_assignor, rebalance_timeout_ms=self.rebalance_timeout_ms,
            principal=self.principal)

    def subscribed_topics(self, topics: Mapping[str, TopicMetadata]) -> set[str]:
        """The topic names the member subscribes to: its names (existing or not) and what its
        regex matches in ``topics``, of those its principal may describe (``topics`` decides,
        when it is a :class:`RegexTopics` view that knows the ACLs: a member is never assigned,
        or told of, a topic it may not see, as in Kafka 4). A stored regex that no longer
        compiles matches nothing (heartbeats refuse new invalid ones; an old record must not
        stop the group)."""
        names = set(self.subscribed_topic_names)
        if self.subscribed_topic_regex:
            with contextlib.suppress(InvalidRegularExpressionError):
                names |= matching_topics(self.subscribed_topic_regex, topics)
        if isinstance(topics, RegexTopics):
            return topics.describable(self.principal, self.client_host, names)
        return names

    def same_assignment(self, other: ConsumerGroupMember) -> bool:
        return (self.member_epoch, self.previous_member_epoch, self.state,
                _canonical(self.assigned), _canonical(self.pending_revocation)) == (
            other.member_epoch, other.previous_member_epoch, other.state,
            _canonical(other.assigned), _canonical(other.pending_revocation))


def owned_partitions(member: ConsumerGroupMember) -> set[tuple[bytes, int]]:
    """What a member may be consuming: its assignment plus what it has not yet revoked."""
    return {(topic_id, p) for parts in (member.assigned, member.pending_revocation)
            for topic_id, partitions in parts.items() for p in partitions}


@dataclass
class ConsumerGroup:
    """A consumer group (KIP-848)."""

    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    #: member id -> its target partitions, computed at ``assignment_epoch``.
    target_assignment: dict[str, Partitions] = field(default_factory=dict)
    assignment_epoch: int = 0

    @property
    def state(self) -> GroupStateName:
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        for member in self.members.values():
            if (member.member_epoch != self.assignment_epoch
                    or member.state != gpb.MEMBER_STATE_STABLE):
                return RECONCILING
        return STABLE

    def static_member_id(self, instance_id: str) -> str | None:
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member.member_id
        return None

    def subscribed_topic_names(self, topics: Mapping[str, TopicMetadata]) -> set[str]:
        """Every member's subscribed names and regex matches (regexes resolved in
        ``topics``)."""
        return {name for m in self.members.values() for name in m.subscribed_topics(topics)}

    def partition_owners(self) -> dict[tuple[bytes, int], str]:
        """partition -> the member that owns it (assigned or not yet revoked)."""
        owners: dict[tuple[bytes, int], str] = {}
        for member in self.members.values():
            for tp in owned_partitions(member):
                owners[tp] = member.member_id
        return owners


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset (Kafka's OffsetAndMetadata)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int


class GroupState:
    """Every group and committed offset of one shard."""

    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroup] = {}
        #: group id -> (topic, partition) -> offset. Apart from the groups: a group with no
        #: members (an assign()-based consumer, Spark) still has offsets.
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}

    def group_ids(self) -> list[str]:
        return sorted(set(self.groups) | set(self.offsets))

    def replay(self, record: GroupRecord) -> None:
        """Apply one record (the only way this state changes)."""
        key, value = record.key, record.value
        if isinstance(key, gpb.OffsetCommitKey):
            self._replay_offset(key, value)
        elif isinstance(key, gpb.ConsumerGroupMetadataKey):
            self._replay_group_metadata(key, value)
        elif isinstance(key, gpb.ConsumerGroupMemberMetadataKey):
            self._replay_member_metadata(key, value)
        elif isinstance(key, gpb.ConsumerGroupTargetAssignmentMetadataKey):
            group = self._group(key.group_id)
            if isinstance(value, gpb.ConsumerGroupTargetAssignmentMetadataValue):
                group.assignment_epoch = value.assignment_epoch
            else:
                group.assignment_epoch = 0
        elif isinstance(key, gpb.ConsumerGroupTargetAssignmentMemberKey):
            group = self._group(key.group_id)
            if isinstance(value, gpb.ConsumerGroupTargetAssignmentMemberValue):
                group.target_assignment[key.member_id] = from_topic_partitions(
                    value.topic_partitions)
            else:
                group.target_assignment.pop(key.member_id, None)
        else:
            self._replay_current_assignment(key, value)

    def _group(self, group_id: str) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ConsumerGroup(group_id)
        return group

    def _replay_offset(self, key: gpb.OffsetCommitKey, value: object) -> None:
        offsets = self.offsets.setdefault(key.group_id, {})
        if isinstance(value, gpb.OffsetCommitValue):
            offsets[(key.topic, key.partition)] = OffsetAndMetadata(
                value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms,
                value.expire_timestamp_ms)
        else:
            offsets.pop((key.topic, key.partition), None)
        if not offsets:
            del self.offsets[key.group_id]

    def _replay_group_metadata(self, key: gpb.ConsumerGroupMetadataKey, value: object) -> None:
        if isinstance(value, gpb.ConsumerGroupMetadataValue):
            group = self._group(key.group_id)
            group.group_epoch = value.epoch
            group.metadata_hash = value.metadata_hash
            return
        existing = self.groups.get(key.group_id)
        if existing is not None and existing.members:
            # Kafka refuses the same: members are removed (tombstoned) before their group.
            raise InvariantViolation(f"group {key.group_id} deleted with members")
        self.groups.pop(key.group_id, None)

    def _replay_member_metadata(self, key: gpb.ConsumerGroupMemberMetadataKey,
                                value: object) -> None:
        group = self._group(key.group_id)
        if not isinstance(value, gpb.ConsumerGroupMemberMetadataValue):
            group.members.pop(key.member_id, None)
            return
        member = group.members.get(key.member_id, ConsumerGroupMember(key.member_id))
        group.members[key.member_id] = replace(
            member, instance_id=value.instance_id, rack_id=value.rack_id,
            client_id=value.client_id, client_host=value.client_host,
            subscribed_topic_names=tuple(value.subscribed_topic_names),
            subscribed_topic_regex=value.subscribed_topic_regex,
            server_assignor=value.server_assignor,
            rebalance_timeout_ms=value.rebalance_timeout_ms, principal=value.principal)

    def _replay_current_assignment(self, key: object, value: object) -> None:
        if not isinstance(key, gpb.ConsumerGroupCurrentMemberAssignmentKey):
            raise InvariantViolation(f"unknown group record key {type(key).__name__}")
        group = self._group(key.group_id)
        member = group.members.get(key.member_id, ConsumerGroupMember(key.member_id))
        if isinstance(value, gpb.ConsumerGroupCurrentMemberAssignmentValue):
            group.members[key.member_id] = replace(
                member, member_epoch=value.member_epoch,
                previous_member_epoch=value.previous_member_epoch, state=value.state,
                assigned=from_topic_partitions(value.assigned_partitions),
                pending_revocation=from_topic_partitions(value.partitions_pending_revocation))
        elif key.member_id in group.members:
            # The member is leaving: its metadata tombstone follows and removes it.
            group.members[key.member_id] = replace(
                member, member_epoch=-1, previous_member_epoch=-1,
                state=gpb.MEMBER_STATE_STABLE, assigned={}, pending_revocation={})

    # --- a canonical rendering ----------------------------------------------------------------

    def canonical_lines(self) -> list[str]:
        lines: list[str] = []
        for group in sorted(self.groups.values(), key=lambda g: g.group_id):
            lines.append(f"group {group.group_id} epoch={group.group_epoch} "
                         f"assignment_epoch={group.assignment_epoch} state={group.state} "
                         f"hash={group.metadata_hash}")
            for member in sorted(group.members.values(), key=lambda m: m.member_id):
                lines.append(_member_line(member, group.target_assignment.get(member.member_id)))
            for member_id in sorted(set(group.target_assignment) - set(group.members)):
                lines.append(f"  target-only {member_id} "
                             f"{_canonical(group.target_assignment[member_id])}")
        for group_id in sorted(self.offsets):
            for (topic, partition), offset in sorted(self.offsets[group_id].items()):
                lines.append(f"offset {group_id} {topic}-{partition} {offset}")
        return lines

    def digest(self) -> str:
        return hashlib.sha256("\n".join(self.canonical_lines()).encode()).hexdigest()


def _member_line(member: ConsumerGroupMember, target: Partitions | None) -> str:
    m = member
    return (f"  member {m.member_id} epoch={m.member_epoch} previous={m.previous_member_epoch} "
            f"state={m.state} instance={m.instance_id!r} rack={m.rack_id!r} "
            f"client={m.client_id!r}@{m.client_host!r} topics={list(m.subscribed_topic_names)} "
            f"regex={m.subscribed_topic_regex!r} "
            f"assignor={m.server_assignor!r} rebalance_timeout={m.rebalance_timeout_ms} "
            f"assigned={_canonical(m.assigned)} pending={_canonical(m.pending_revocation)} "
            f"target={None if target is None else _canonical(target)}")


def _canonical(partitions: Partitions) -> list[tuple[str, list[int]]]:
    return [(t.hex(), sorted(p)) for t, p in sorted(partitions.items()) if p]
