"""The group coordinator shard (Kafka's GroupCoordinatorShard): the pure core of one
``__consumer_offsets`` partition.

Each request handler validates first, then makes records and replays each one into
:class:`~broker.group.group.GroupState` as it goes (later steps see the earlier ones, as Kafka's
timeline does), and returns ``(records, response)``. Nothing else changes the state, so a new
coordinator replaying the partition gets the same groups. The runtime (later) writes the
records to the partition with acks=all and answers once they are committed; if the write fails
it must unload the shard and reload it from the log, since the records are already replayed
here. No I/O, no clocks (``now_ms`` is an argument), randomness only from the injected
``random.Random`` (member ids).

KIP-848's ConsumerGroupHeartbeat: join (epoch 0; a static member rejoining with its instance id
takes over its predecessor's partitions), heartbeat (the member's current epoch and owned
partitions), leave (epoch -1; a static member's -2 keeps its partitions until its session
expires). A change of members, subscriptions, assignor or subscribed topics' metadata bumps the
group epoch; the target assignment is then recomputed (target_assignment.py) and each member
reconciles towards it on its own heartbeats (reconcile.py). :meth:`on_timer` fences members
whose session or rebalance timeout passed and expires offsets of empty groups.
"""

from __future__ import annotations

import base64
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from tidelog import limits
from tidelog.broker.group.assignment import Assignor, TopicMetadata
from tidelog.broker.group.deadlines import MemberDeadlines
from tidelog.broker.group.group import ConsumerGroup, ConsumerGroupMember, GroupState
from tidelog.broker.group.heartbeat_checks import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ClientIdentity,
    check_member_epoch,
    validate_heartbeat,
)
from tidelog.broker.group.offsets import (
    delete_offset_records,
    expire_offsets,
    fetch_offsets,
    partition_commit_records,
    validate_offset_commit,
)
from tidelog.broker.group.reconcile import reconcile
from tidelog.broker.group.records import (
    GroupRecord,
    Partitions,
    current_assignment_record,
    current_assignment_tombstone,
    group_metadata_record,
    group_metadata_tombstone,
    member_metadata_record,
    member_metadata_tombstone,
    offset_commit_tombstone,
    target_assignment_member_record,
    target_assignment_member_tombstone,
    target_assignment_metadata_tombstone,
)
from tidelog.broker.group.responses import error_code, set_error
from tidelog.broker.group.target_assignment import (
    compute_target_assignment,
    metadata_hash,
    preferred_assignor,
)
from tidelog.errors import (
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    InvalidGroupIdError,
    NonEmptyGroupError,
    PolicyViolationError,
    TidelogError,
    UnknownMemberIdError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)
from tidelog.invariants import InvariantViolation, check
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import groups_pb2 as gpb

__all__ = ["GroupCoordinatorConfig", "GroupCoordinatorShard", "GroupCounters"]

#: Records one on_timer call makes at most (fencing and expiry); the rest on the next call.
TIMER_RECORDS_SOFT_MAX = 10_000


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    """Kafka's GroupCoordinatorConfig settings the shard uses, with Kafka's defaults."""

    #: group.consumer.session.timeout.ms: a member silent for longer is fenced.
    session_timeout_ms: int = 45_000
    #: group.consumer.heartbeat.interval.ms: told to members in every heartbeat response.
    heartbeat_interval_ms: int = 5_000
    #: offsets.retention.minutes (7 days), in ms: offsets of an empty group expire after it.
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000
    #: group.consumer.max.size.
    members_max: int = limits.GROUP_MEMBERS_MAX
    #: offset.metadata.max.bytes.
    offset_metadata_bytes_max: int = limits.OFFSET_METADATA_BYTES_MAX
    #: The assignor of a group whose members name none (Kafka's first of group.consumer.assignors).
    default_assignor: str = "uniform"

    def __post_init__(self) -> None:
        check(0 < self.heartbeat_interval_ms < self.session_timeout_ms,
              "the heartbeat interval must be positive and below the session timeout")
        check(1 <= self.members_max <= limits.GROUP_MEMBERS_MAX, "members_max out of range")
        check(0 <= self.offset_metadata_bytes_max <= limits.OFFSET_METADATA_BYTES_MAX,
              "offset_metadata_bytes_max out of range")
        check(self.offsets_retention_ms > 0, "offsets retention must be positive")


def _default_assignors() -> Mapping[str, Assignor]:
    from tidelog.broker.group.assignors import (
        ASSIGNORS,  # written alongside; imported when first used
    )

    return ASSIGNORS


@dataclass
class GroupCounters:
    """Soft counts of one group since this shard was loaded (for metrics, not in records):
    group epoch bumps (rebalances) and offsets committed."""

    rebalances: int = 0
    offset_commits: int = 0


class GroupCoordinatorShard:
    """The groups and offsets of one ``__consumer_offsets`` partition."""

    def __init__(self, config: GroupCoordinatorConfig, *, rng: random.Random,
                 assignors: Mapping[str, Assignor] | None = None) -> None:
        self.config = config
        self.state = GroupState()
        self._rng = rng
        self._assignors = dict(assignors if assignors is not None else _default_assignors())
        check(config.default_assignor in self._assignors, "the default assignor must exist")
        self._deadlines = MemberDeadlines()
        #: Members replayed from the log have no session deadline until the next timer.
        self._unscheduled_members = False
        #: group id -> counts of what this shard wrote for it (dropped with the group).
        self.counters: dict[str, GroupCounters] = {}

    def replay(self, record: GroupRecord) -> None:
        """Apply a record read from the partition (loading) or just made (writing)."""
        self.state.replay(record)
        self._unscheduled_members = True

    def replay_written(self, record: GroupRecord) -> None:
        """Apply a record made for this shard outside its handlers (the runtime's wall-clock
        offset expiry), counted as the handlers' records are."""
        self.state.replay(record)
        self._count(record)

    def _append(self, records: list[GroupRecord], new: Iterable[GroupRecord]) -> None:
        for record in new:
            self.state.replay(record)
            records.append(record)
            self._count(record)

    def _count(self, record: GroupRecord) -> None:
        """Metrics' counts: a plain integer per written record (no Prometheus call here; the
        metrics collector reads them at scrape time)."""
        key = record.key
        if isinstance(key, gpb.OffsetCommitKey | gpb.ConsumerGroupMetadataKey):
            group_id = key.group_id
            if record.value is None:
                if group_id not in self.state.groups and group_id not in self.state.offsets:
                    self.counters.pop(group_id, None)
                return
            counters = self.counters.setdefault(group_id, GroupCounters())
            if isinstance(key, gpb.OffsetCommitKey):
                counters.offset_commits += 1
            else:
                counters.rebalances += 1

    # --- ConsumerGroupHeartbeat ---------------------------------------------------------------

    def consumer_group_heartbeat(
        self, request: pb.ConsumerGroupHeartbeatRequest, *, now_ms: int,
        topics: Mapping[str, TopicMetadata], client: ClientIdentity | None = None,
    ) -> tuple[list[GroupRecord], pb.ConsumerGroupHeartbeatResponse]:
        """``client``: the client id and host the request came with (Kafka's request header and
        connection), kept in the member's record for DescribeGroups."""
        response = pb.ConsumerGroupHeartbeatResponse()
        records: list[GroupRecord] = []
        client = client or ClientIdentity()
        try:
            validate_heartbeat(request)
            client.validate()
            if request.server_assignor and request.server_assignor not in self._assignors:
                raise UnsupportedAssignorError(
                    f"assignor {request.server_assignor!r} is not one of "
                    f"{sorted(self._assignors)}")
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH,
                                        LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                self._consumer_group_leave(request, records, response)
            else:
                self._consumer_group_join_or_heartbeat(request, now_ms, topics, client,
                                                       records, response)
        except TidelogError as error:
            if records:
                raise InvariantViolation(f"records made before {error!r}") from error
            set_error(response, error)
        return records, response

    def _consumer_group_join_or_heartbeat(
        self, request: pb.ConsumerGroupHeartbeatRequest, now_ms: int,
        topics: Mapping[str, TopicMetadata], client: ClientIdentity,
        records: list[GroupRecord], response: pb.ConsumerGroupHeartbeatResponse,
    ) -> None:
        group = self.state.groups.get(request.group_id)
        joining = request.member_epoch == 0
        member, replaced = self._member_for(request, group, topics)
        owned = _owned(request, topics)
        if not joining:
            check_member_epoch(member, request.member_epoch, owned)
        # Validation is over: from here on only records.
        group_id, member_id = request.group_id, member.member_id
        if replaced is not None:
            self._append(records, self._replace_static_member(group_id, replaced, member))
        updated = _updated_member(member, request, client)
        is_new = replaced is None and (group is None or member_id not in group.members)
        if is_new or updated.metadata_value() != member.metadata_value():
            self._append(records, [member_metadata_record(group_id, member_id,
                                                          updated.metadata_value())])
        group = self.state.groups[group_id]
        self._maybe_bump_group_epoch(group, member, updated, replaced is None and joining,
                                     topics, records)
        if group.group_epoch > group.assignment_epoch:
            assignor = self._assignors[preferred_assignor(group, self.config.default_assignor)]
            self._append(records, compute_target_assignment(group, assignor, topics))
        current = group.members[member_id]
        if joining and replaced is None:
            current = replace(current, member_epoch=0, previous_member_epoch=0,
                              state=gpb.MEMBER_STATE_STABLE, assigned={}, pending_revocation={})
            owned = {}
        self._reconcile_member(group, current, owned, now_ms, records)
        self._deadlines.set_session((group_id, member_id), now_ms + self.config.session_timeout_ms)
        final = group.members[member_id]
        response.member_id = member_id
        response.member_epoch = final.member_epoch
        response.heartbeat_interval_ms = self.config.heartbeat_interval_ms
        if joining or dict(final.assigned) != owned:
            response.assignment_changed = True
            response.assignment.extend(_wire_partitions(final.assigned, topics))

    def _member_for(
        self, request: pb.ConsumerGroupHeartbeatRequest, group: ConsumerGroup | None,
        topics: Mapping[str, TopicMetadata],
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """The member the request speaks for, and the static member it replaces (if any)."""
        members = group.members if group is not None else {}
        if request.member_epoch != 0:
            member = members.get(request.member_id)
            if member is None:
                raise UnknownMemberIdError(
                    f"member {request.member_id} is not a member of group {request.group_id}")
            if request.instance_id and member.instance_id != request.instance_id:
                raise FencedInstanceIdError(
                    f"member {request.member_id} of group {request.group_id} does not hold "
                    f"instance id {request.instance_id!r}")
            return member, None
        if group is None and len(self.state.groups) >= limits.GROUPS_PER_SHARD_MAX:
            raise PolicyViolationError(
                f"this coordinator holds {limits.GROUPS_PER_SHARD_MAX} groups "
                f"(limits.GROUPS_PER_SHARD_MAX)")
        member_id = request.member_id or self._new_member_id()
        existing = members.get(member_id)
        if existing is not None:
            return existing, None  # a member rejoining (epoch 0) owns nothing any more
        previous_id = group.static_member_id(request.instance_id) if (
            group is not None and request.instance_id) else None
        if previous_id is not None:
            previous = members[previous_id]
            if previous.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise UnreleasedInstanceIdError(
                    f"instance id {request.instance_id!r} of group {request.group_id} is held "
                    f"by member {previous_id}, which has not left")
            return replace(previous, member_id=member_id), previous
        if len(members) >= self.config.members_max:
            raise GroupMaxSizeReachedError(
                f"group {request.group_id} has reached its maximum size of "
                f"{self.config.members_max} members (group.consumer.max.size)")
        return ConsumerGroupMember(member_id), None

    def _new_member_id(self) -> str:
        """A Kafka-style Uuid string (URL-safe base64 of 16 bytes) from the seeded rng."""
        raw = self._rng.getrandbits(128).to_bytes(16, "big")
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    def _replace_static_member(self, group_id: str, previous: ConsumerGroupMember,
                               new: ConsumerGroupMember) -> list[GroupRecord]:
        """The new incarnation of a static member takes its predecessor's place, epoch and
        partitions, without a rebalance (KIP-345's promise, kept by KIP-848)."""
        group = self.state.groups[group_id]
        target = group.target_assignment.get(previous.member_id, {})
        self._deadlines.forget(group_id, previous.member_id)
        return [
            *_removal_records(group_id, previous.member_id),
            member_metadata_record(group_id, new.member_id, new.metadata_value()),
            target_assignment_member_record(group_id, new.member_id, target),
            current_assignment_record(
                group_id, new.member_id, member_epoch=previous.previous_member_epoch,
                previous_member_epoch=previous.previous_member_epoch, state=previous.state,
                assigned=previous.assigned, pending_revocation=previous.pending_revocation),
        ]

    def _maybe_bump_group_epoch(self, group: ConsumerGroup, member: ConsumerGroupMember,
                                updated: ConsumerGroupMember, new_member: bool,
                                topics: Mapping[str, TopicMetadata],
                                records: list[GroupRecord]) -> None:
        hash_now = metadata_hash(group, topics)
        changed = (new_member
                   or updated.subscribed_topic_names != member.subscribed_topic_names
                   or updated.subscribed_topic_regex != member.subscribed_topic_regex
                   # Whom its subscriptions are authorized for (only with authorization on).
                   or (bool(updated.principal) and (updated.principal, updated.client_host)
                       != (member.principal, member.client_host))
                   or updated.server_assignor != member.server_assignor
                   or hash_now != group.metadata_hash)
        if changed:
            self._append(records, [group_metadata_record(
                group.group_id, epoch=group.group_epoch + 1, metadata_hash=hash_now)])

    def _reconcile_member(self, group: ConsumerGroup, member: ConsumerGroupMember,
                          owned: Partitions, now_ms: int, records: list[GroupRecord]) -> None:
        owners = group.partition_owners()
        updated = reconcile(
            member, target_epoch=group.assignment_epoch,
            target=group.target_assignment.get(member.member_id, {}), owned=owned,
            owned_by_other=lambda t, p: owners.get((t, p), member.member_id) != member.member_id)
        stored = group.members[member.member_id]
        if not updated.same_assignment(stored):
            self._append(records, [_current_assignment(group.group_id, updated)])
        key = (group.group_id, member.member_id)
        if updated.state == gpb.MEMBER_STATE_UNREVOKED_PARTITIONS:
            if key not in self._deadlines.rebalance_ms:
                self._deadlines.set_rebalance(key, now_ms + updated.rebalance_timeout_ms,
                                              updated.member_epoch)
        else:
            self._deadlines.clear_rebalance(key)

    def _consumer_group_leave(self, request: pb.ConsumerGroupHeartbeatRequest,
                              records: list[GroupRecord],
                              response: pb.ConsumerGroupHeartbeatResponse) -> None:
        group = self.state.groups.get(request.group_id)
        member = group.members.get(request.member_id) if group is not None else None
        if group is None or member is None:
            raise UnknownMemberIdError(
                f"member {request.member_id} is not a member of group {request.group_id}")
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if member.instance_id != request.instance_id:
                raise FencedInstanceIdError(
                    f"member {request.member_id} does not hold instance id "
                    f"{request.instance_id!r}")
            left = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                           previous_member_epoch=member.member_epoch)
            self._append(records, [_current_assignment(group.group_id, left)])
            self._deadlines.clear_rebalance((group.group_id, member.member_id))
        else:
            self._append(records, self._fence_member(group, member.member_id))
        response.member_id = request.member_id
        response.member_epoch = request.member_epoch

    def _fence_member(self, group: ConsumerGroup, member_id: str) -> list[GroupRecord]:
        """Remove a member (its partitions are free at once) and bump the group epoch."""
        self._deadlines.forget(group.group_id, member_id)
        return [*_removal_records(group.group_id, member_id), group_metadata_record(
            group.group_id, epoch=group.group_epoch + 1, metadata_hash=group.metadata_hash)]

    # --- timers -------------------------------------------------------------------------------

    def on_timer(self, now_ms: int) -> list[GroupRecord]:
        """Fence members past their session or rebalance timeout; expire offsets of empty
        groups and delete empty groups left without offsets."""
        records = self.on_deadlines(now_ms)
        self._append(records, expire_offsets(
            self.state, now_ms=now_ms, retention_ms=self.config.offsets_retention_ms,
            records_max=max(0, TIMER_RECORDS_SOFT_MAX - len(records))))
        for group_id in sorted(g for g, group in self.state.groups.items()
                               if not group.members and g not in self.state.offsets):
            # Kafka deletes an empty group without offsets on the same cleanup pass.
            self._append(records, _group_tombstones(self.state.groups[group_id]))
        return records

    def on_deadlines(self, now_ms: int) -> list[GroupRecord]:
        """Fence the members whose session or rebalance timeout passed (only what is due is
        visited: the runtime calls this at :meth:`next_deadline_ms`), in (group, member)
        order, at most about TIMER_RECORDS_SOFT_MAX records; the rest on the next call."""
        records: list[GroupRecord] = []
        expired = self._expired_members(now_ms)
        for index, (group_id, member_id) in enumerate(expired):
            if len(records) >= TIMER_RECORDS_SOFT_MAX:
                self._deadlines.restore(expired[index:])
                break
            self._append(records, self._fence_member(self.state.groups[group_id], member_id))
        return records

    def next_deadline_ms(self) -> int | None:
        """When :meth:`on_deadlines` next has something to do (None: no member has a deadline;
        members just loaded get theirs at the next on_timer)."""
        return self._deadlines.next_deadline_ms()

    def _expired_members(self, now_ms: int) -> list[tuple[str, str]]:
        self._schedule_loaded_members(now_ms)
        expired = []
        for key in self._deadlines.due(now_ms):
            group = self.state.groups.get(key[0])
            member = group.members.get(key[1]) if group is not None else None
            if member is None:
                self._deadlines.forget(*key)
                continue
            session = self._deadlines.session_ms.get(key)
            rebalance = self._deadlines.rebalance_ms.get(key)
            passed = rebalance is not None and rebalance[0] <= now_ms
            stuck = (passed and rebalance is not None
                     and member.state == gpb.MEMBER_STATE_UNREVOKED_PARTITIONS
                     and member.member_epoch == rebalance[1])
            if (session is not None and session <= now_ms) or stuck:
                expired.append(key)
            elif passed:
                # The member moved past that epoch in time: the deadline no longer applies.
                self._deadlines.clear_rebalance(key)
        return expired

    def _schedule_loaded_members(self, now_ms: int) -> None:
        """A member loaded from the log gets a whole session from now (one pass after a
        load, not one per timer)."""
        if not self._unscheduled_members:
            return
        self._unscheduled_members = False
        for group_id, group in sorted(self.state.groups.items()):
            for member_id in sorted(group.members):
                if (group_id, member_id) not in self._deadlines.session_ms:
                    self._deadlines.set_session((group_id, member_id),
                                                now_ms + self.config.session_timeout_ms)

    # --- offsets ------------------------------------------------------------------------------

    def offset_commit(self, request: pb.OffsetCommitRequest, *, now_ms: int
                      ) -> tuple[list[GroupRecord], pb.OffsetCommitResponse]:
        response = pb.OffsetCommitResponse()
        try:
            _validate_group_id(request.group_id)
            validate_offset_commit(self.state, request)
            if (request.group_id not in self.state.groups
                    and request.group_id not in self.state.offsets
                    and len(self.state.group_ids()) >= limits.GROUPS_PER_SHARD_MAX):
                raise PolicyViolationError(
                    f"this coordinator holds {limits.GROUPS_PER_SHARD_MAX} groups "
                    f"(limits.GROUPS_PER_SHARD_MAX)")
        except TidelogError as error:
            set_error(response, error)
            for topic in request.topics:
                out = response.topics.add(name=topic.name)
                for partition in topic.partitions:
                    out.partitions.add(partition_id=partition.partition_id,
                                       error_code=error_code(error.code),
                                       error_message=error.message)
            return [], response
        records: list[GroupRecord] = []
        self._append(records, partition_commit_records(
            self.state, request, response, now_ms=now_ms,
            metadata_bytes_max=self.config.offset_metadata_bytes_max))
        return records, response

    def offset_fetch(self, request: pb.OffsetFetchRequest) -> pb.OffsetFetchResponse:
        return fetch_offsets(self.state, request)

    def offset_delete(self, request: pb.OffsetDeleteRequest, *,
                      topics: Mapping[str, TopicMetadata]
                      ) -> tuple[list[GroupRecord], pb.OffsetDeleteResponse]:
        """Kafka's OffsetDelete: GROUP_ID_NOT_FOUND for a group with neither members nor
        offsets; else per partition (offsets.delete_offset_records). ``topics`` resolves the
        members' regex subscriptions."""
        response = pb.OffsetDeleteResponse()
        group = self.state.groups.get(request.group_id)
        try:
            _validate_group_id(request.group_id)
            if group is None and request.group_id not in self.state.offsets:
                raise GroupIdNotFoundError(f"group {request.group_id} does not exist")
        except TidelogError as error:
            set_error(response, error)
            return [], response
        subscribed = group.subscribed_topic_names(topics) if group is not None else set()
        records: list[GroupRecord] = []
        self._append(records, delete_offset_records(self.state, request, response,
                                                    subscribed=subscribed))
        return records, response

    # --- admin --------------------------------------------------------------------------------

    def list_groups(self) -> pb.ListGroupsResponse:
        response = pb.ListGroupsResponse()
        for group_id in self.state.group_ids():
            group = self.state.groups.get(group_id)
            response.groups.add(group_id=group_id,
                                state=group.state if group is not None else "Empty")
        return response

    def describe_groups(self, group_ids: Iterable[str],
                        topics: Mapping[str, TopicMetadata] | None = None
                        ) -> pb.DescribeGroupsResponse:
        """``topics`` (the broker's metadata) names the assignments' topic ids; without it
        they are given by id only."""
        names = topics or {}
        response = pb.DescribeGroupsResponse()
        for group_id in group_ids:
            out = response.groups.add(group_id=group_id)
            group = self.state.groups.get(group_id)
            if group is None and group_id not in self.state.offsets:
                out.error_code = error_code(GroupIdNotFoundError.code)
                out.error_message = f"group {group_id} does not exist"
                out.state = "Dead"
                continue
            group = group or ConsumerGroup(group_id)
            out.state = group.state
            out.group_epoch = group.group_epoch
            out.assignment_epoch = group.assignment_epoch
            out.assignor_name = preferred_assignor(group, self.config.default_assignor)
            for member in sorted(group.members.values(), key=lambda m: m.member_id):
                out.members.add(
                    member_id=member.member_id, instance_id=member.instance_id,
                    client_host=member.client_host, member_epoch=member.member_epoch,
                    assignment=_wire_partitions(member.assigned, names),
                    subscribed_topic_names=member.subscribed_topic_names,
                    subscribed_topic_regex=member.subscribed_topic_regex,
                    client_id=member.client_id,
                    target_assignment=_wire_partitions(
                        group.target_assignment.get(member.member_id, {}), names))
        return response

    def delete_groups(self, group_ids: Iterable[str]
                      ) -> tuple[list[GroupRecord], pb.DeleteGroupsResponse]:
        response = pb.DeleteGroupsResponse()
        records: list[GroupRecord] = []
        for group_id in group_ids:
            result = response.results.add(group_id=group_id)
            group = self.state.groups.get(group_id)
            if group is None and group_id not in self.state.offsets:
                result.error_code = error_code(GroupIdNotFoundError.code)
                result.error_message = f"group {group_id} does not exist"
                continue
            if group is not None and group.members:
                result.error_code = error_code(NonEmptyGroupError.code)
                count = len(group.members)
                result.error_message = (f"group {group_id} has {count} "
                                        f"member{'' if count == 1 else 's'}: they must leave first")
                continue
            self._append(records, [offset_commit_tombstone(group_id, t, p)
                                   for t, p in sorted(self.state.offsets.get(group_id, {}))])
            if group is not None:
                self._append(records, _group_tombstones(group))
        return records, response


# --- helpers ----------------------------------------------------------------------------------

def _validate_group_id(group_id: str) -> None:
    if not group_id or len(group_id) > limits.GROUP_TEXT_LENGTH_MAX:
        raise InvalidGroupIdError(
            f"group id must be 1..{limits.GROUP_TEXT_LENGTH_MAX} characters, got {len(group_id)}")


def _updated_member(member: ConsumerGroupMember, request: pb.ConsumerGroupHeartbeatRequest,
                    client: ClientIdentity) -> ConsumerGroupMember:
    """The member with what this heartbeat says about it (absent fields: unchanged)."""
    topics = member.subscribed_topic_names
    if request.subscription_changed or request.subscribed_topic_names:
        topics = tuple(sorted(set(request.subscribed_topic_names)))
    regex = member.subscribed_topic_regex
    if request.subscription_changed or request.subscribed_topic_regex:
        regex = request.subscribed_topic_regex
    return replace(
        member, instance_id=request.instance_id or member.instance_id,
        rack_id=request.rack_id or member.rack_id, subscribed_topic_names=topics,
        subscribed_topic_regex=regex, client_id=client.client_id or member.client_id,
        client_host=client.client_host or member.client_host,
        principal=client.principal or member.principal,
        server_assignor=request.server_assignor or member.server_assignor,
        rebalance_timeout_ms=(request.rebalance_timeout_ms if request.rebalance_timeout_ms > 0
                              else member.rebalance_timeout_ms))


def _owned(request: pb.ConsumerGroupHeartbeatRequest,
           topics: Mapping[str, TopicMetadata]) -> dict[bytes, frozenset[int]]:
    """What the member says it owns, by topic id (a name resolves through the metadata)."""
    owned: dict[bytes, frozenset[int]] = {}
    for entry in request.owned_partitions:
        topic_id = entry.topic_id or (topics[entry.topic].topic_id if entry.topic in topics
                                      else b"")
        if topic_id and entry.partitions:
            owned[topic_id] = owned.get(topic_id, frozenset()) | frozenset(entry.partitions)
    return owned


def _wire_partitions(partitions: Partitions, topics: Mapping[str, TopicMetadata]
                     ) -> list[pb.TopicPartitions]:
    names = {t.topic_id: name for name, t in topics.items()}
    return [pb.TopicPartitions(topic_id=topic_id, topic=names.get(topic_id, ""),
                               partitions=sorted(parts))
            for topic_id, parts in sorted(partitions.items()) if parts]


def _current_assignment(group_id: str, member: ConsumerGroupMember) -> GroupRecord:
    return current_assignment_record(
        group_id, member.member_id, member_epoch=member.member_epoch,
        previous_member_epoch=member.previous_member_epoch, state=member.state,
        assigned=member.assigned, pending_revocation=member.pending_revocation)


def _removal_records(group_id: str, member_id: str) -> list[GroupRecord]:
    """Kafka's order: current assignment, target assignment, then the member itself."""
    return [current_assignment_tombstone(group_id, member_id),
            target_assignment_member_tombstone(group_id, member_id),
            member_metadata_tombstone(group_id, member_id)]


def _group_tombstones(group: ConsumerGroup) -> list[GroupRecord]:
    check(not group.members, f"group {group.group_id} deleted with members")
    return [*(target_assignment_member_tombstone(group.group_id, m)
              for m in sorted(group.target_assignment)),
            target_assignment_metadata_tombstone(group.group_id),
            group_metadata_tombstone(group.group_id)]

