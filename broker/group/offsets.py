"""Committed offsets (Kafka's OffsetMetadataManager): OffsetCommit, OffsetFetch and expiry.

A commit is fenced by the member epoch: a member must commit with its current epoch (else
STALE_MEMBER_EPOCH, so a zombie that was fenced and replaced cannot overwrite its successor's
offsets); an unknown member gets UNKNOWN_MEMBER_ID. A simple consumer (``assign()``, Spark, an
admin resetting offsets) commits with member id "" and epoch -1, which is accepted only while the
group has no members, as Kafka does. Offsets of a group with no members expire
``offsets.retention.minutes`` after their commit; a group left with neither members nor offsets
is then deleted. OffsetDelete removes chosen partitions' offsets (tombstones), except those of
topics the group's members subscribe to.
"""

from __future__ import annotations

from tidelog import limits
from tidelog.broker.group.group import GroupState
from tidelog.broker.group.records import GroupRecord, offset_commit_record, offset_commit_tombstone
from tidelog.broker.group.responses import set_error
from tidelog.errors import (
    GroupSubscribedToTopicError,
    OffsetMetadataTooLargeError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    StaleMemberEpochError,
    TidelogError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import groups_pb2 as gpb

__all__ = ["delete_offset_records", "expire_offsets", "fetch_offsets",
           "partition_commit_records", "validate_offset_commit"]


def validate_offset_commit(state: GroupState, request: pb.OffsetCommitRequest) -> None:
    """Raise unless this committer may commit to the group now."""
    group = state.groups.get(request.group_id)
    members = group.members if group is not None else {}
    if request.member_epoch < 0 and not request.member_id and not members:
        return
    member = members.get(request.member_id)
    if member is None:
        if not request.member_id:
            raise UnknownMemberIdError(
                f"group {request.group_id} has members: a commit without a member id (a simple "
                f"consumer) is accepted only while it has none")
        raise UnknownMemberIdError(
            f"member {request.member_id} is not a member of group {request.group_id}")
    if request.member_epoch != member.member_epoch:
        raise StaleMemberEpochError(
            f"member {request.member_id} of group {request.group_id} committed with epoch "
            f"{request.member_epoch}, its current epoch is {member.member_epoch}")


def partition_commit_records(
    state: GroupState, request: pb.OffsetCommitRequest, response: pb.OffsetCommitResponse,
    *, now_ms: int, metadata_bytes_max: int,
) -> list[GroupRecord]:
    """One record per valid partition; per-partition errors into ``response``."""
    records = []
    known = state.offsets.get(request.group_id, {})
    room = limits.OFFSETS_PER_GROUP_MAX - len(known)
    for topic in request.topics:
        out = response.topics.add(name=topic.name)
        for partition in topic.partitions:
            result = out.partitions.add(partition_id=partition.partition_id)
            try:
                _validate_partition(topic.name, partition, metadata_bytes_max)
                if (topic.name, partition.partition_id) not in known:
                    if room <= 0:
                        raise PolicyViolationError(
                            f"group {request.group_id} has {limits.OFFSETS_PER_GROUP_MAX} "
                            f"committed offsets (limits.OFFSETS_PER_GROUP_MAX)")
                    room -= 1
            except TidelogError as error:
                set_error(result, error)
                continue
            records.append(offset_commit_record(
                request.group_id, topic.name, partition.partition_id, gpb.OffsetCommitValue(
                    offset=partition.committed_offset,
                    leader_epoch=partition.committed_leader_epoch,
                    metadata=partition.metadata, commit_timestamp_ms=now_ms,
                    expire_timestamp_ms=-1)))
    return records


def _validate_partition(topic: str, partition: pb.OffsetCommitRequest.Partition,
                        metadata_bytes_max: int) -> None:
    if not topic or len(topic) > limits.TOPIC_NAME_LENGTH_MAX or partition.partition_id < 0:
        raise UnknownTopicOrPartitionError(
            f"{topic!r}-{partition.partition_id} is not a valid topic partition")
    if partition.committed_offset < 0:
        raise OffsetOutOfRangeError(
            f"committed offset {partition.committed_offset} of {topic}-"
            f"{partition.partition_id} is negative")
    size = len(partition.metadata.encode())
    if size > metadata_bytes_max:
        raise OffsetMetadataTooLargeError(
            f"metadata of {topic}-{partition.partition_id} is {size} bytes, more than "
            f"offset.metadata.max.bytes {metadata_bytes_max}")


def fetch_offsets(state: GroupState, request: pb.OffsetFetchRequest) -> pb.OffsetFetchResponse:
    """Committed offsets; -1 for a partition with none (also for a group that does not exist,
    as Kafka answers). Lag is left -1: the runtime knows the high watermarks."""
    response = pb.OffsetFetchResponse()
    offsets = state.offsets.get(request.group_id, {})
    wanted: dict[str, list[int]] = {}
    if not request.topics:
        for topic, partition in sorted(offsets):
            wanted.setdefault(topic, []).append(partition)
    for topic in request.topics:
        wanted[topic.name] = list(topic.partitions) or sorted(
            p for t, p in offsets if t == topic.name)
    for name, partitions in wanted.items():
        out = response.topics.add(name=name)
        for partition in partitions:
            committed = offsets.get((name, partition))
            if committed is None:
                out.partitions.add(partition_id=partition, committed_offset=-1,
                                   committed_leader_epoch=-1, lag=-1)
            else:
                out.partitions.add(partition_id=partition, committed_offset=committed.offset,
                                   committed_leader_epoch=committed.leader_epoch,
                                   metadata=committed.metadata, lag=-1)
    return response


def expire_offsets(state: GroupState, *, now_ms: int, retention_ms: int,
                   records_max: int) -> list[GroupRecord]:
    """Tombstones for the expired offsets of groups without members (at most ``records_max``;
    the rest on a later timer)."""
    records: list[GroupRecord] = []
    for group_id in sorted(state.offsets):
        group = state.groups.get(group_id)
        if group is not None and group.members:
            continue
        for (topic, partition), offset in sorted(state.offsets[group_id].items()):
            expires_ms = (offset.expire_timestamp_ms if offset.expire_timestamp_ms >= 0
                          else offset.commit_timestamp_ms + retention_ms)
            if expires_ms <= now_ms and len(records) < records_max:
                records.append(offset_commit_tombstone(group_id, topic, partition))
    return records


def delete_offset_records(state: GroupState, request: pb.OffsetDeleteRequest,
                          response: pb.OffsetDeleteResponse, *, subscribed: set[str]
                          ) -> list[GroupRecord]:
    """Kafka's OffsetDelete for an existing group: a tombstone per named partition that has a
    commit (a partition without one just succeeds, as Kafka answers); every partition of a
    topic in ``subscribed`` (the topics the group's members subscribe to now, regexes
    resolved) gets GROUP_SUBSCRIBED_TO_TOPIC instead, since its members would commit it again
    or lose their place. A topic given without partitions means all of its committed ones."""
    records: list[GroupRecord] = []
    offsets = state.offsets.get(request.group_id, {})
    deleted: set[tuple[str, int]] = set()
    for topic in request.topics:
        out = response.topics.add(name=topic.name)
        partitions = list(topic.partitions) or sorted(p for t, p in offsets if t == topic.name)
        for partition_id in partitions:
            result = out.partitions.add(partition_id=partition_id)
            try:
                if (not topic.name or len(topic.name) > limits.TOPIC_NAME_LENGTH_MAX
                        or partition_id < 0):
                    raise UnknownTopicOrPartitionError(
                        f"{topic.name[:50]!r}-{partition_id} is not a valid topic partition")
                if topic.name in subscribed:
                    raise GroupSubscribedToTopicError(
                        f"group {request.group_id} has members subscribed to topic "
                        f"{topic.name!r}: its offsets are deleted only once none is")
            except TidelogError as error:
                set_error(result, error)
                continue
            key = (topic.name, partition_id)
            if key in offsets and key not in deleted:
                deleted.add(key)
                records.append(offset_commit_tombstone(request.group_id, *key))
    return records
