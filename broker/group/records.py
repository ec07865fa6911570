"""The records of ``__consumer_offsets`` (proto/tidelog/v1/groups.proto): build, encode, decode.

A :class:`GroupRecord` is a typed key message and a value message, or ``None`` for a tombstone.
On the log it is a Kafka-style record with a key: :meth:`GroupRecord.encode` gives
``(key bytes, value bytes | None)``, where the key is a big-endian uint16 record type (Kafka's
numbers) followed by the serialized key message, so that compaction keeps one latest value per
group, member or partition. :func:`decode` reverses it and refuses bytes it cannot read
(CorruptMessageError): a coordinator must not build state from a record it misread.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from google.protobuf.message import DecodeError

from tidelog.errors import CorruptMessageError
from tidelog.v1 import groups_pb2 as gpb

__all__ = [
    "GroupRecord",
    "KeyMessage",
    "Partitions",
    "RecordType",
    "ValueMessage",
    "current_assignment_record",
    "current_assignment_tombstone",
    "decode",
    "from_topic_partitions",
    "group_metadata_record",
    "group_metadata_tombstone",
    "member_metadata_record",
    "member_metadata_tombstone",
    "offset_commit_record",
    "offset_commit_tombstone",
    "target_assignment_member_record",
    "target_assignment_member_tombstone",
    "target_assignment_metadata_record",
    "target_assignment_metadata_tombstone",
    "to_topic_partitions",
]

#: Partitions by topic id: a member's assignment.
Partitions = Mapping[bytes, frozenset[int]]

KeyMessage = (gpb.OffsetCommitKey | gpb.ConsumerGroupMetadataKey
              | gpb.ConsumerGroupMemberMetadataKey | gpb.ConsumerGroupTargetAssignmentMetadataKey
              | gpb.ConsumerGroupTargetAssignmentMemberKey
              | gpb.ConsumerGroupCurrentMemberAssignmentKey)
ValueMessage = (gpb.OffsetCommitValue | gpb.ConsumerGroupMetadataValue
                | gpb.ConsumerGroupMemberMetadataValue
                | gpb.ConsumerGroupTargetAssignmentMetadataValue
                | gpb.ConsumerGroupTargetAssignmentMemberValue
                | gpb.ConsumerGroupCurrentMemberAssignmentValue)


class RecordType(IntEnum):
    """Kafka's CoordinatorRecordType numbers (the key's first two bytes)."""

    OFFSET_COMMIT = 1
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8


#: record type -> (key class, value class).
_TYPES: dict[RecordType, tuple[type[KeyMessage], type[ValueMessage]]] = {
    RecordType.OFFSET_COMMIT: (gpb.OffsetCommitKey, gpb.OffsetCommitValue),
    RecordType.CONSUMER_GROUP_METADATA: (
        gpb.ConsumerGroupMetadataKey, gpb.ConsumerGroupMetadataValue),
    RecordType.CONSUMER_GROUP_MEMBER_METADATA: (
        gpb.ConsumerGroupMemberMetadataKey, gpb.ConsumerGroupMemberMetadataValue),
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: (
        gpb.ConsumerGroupTargetAssignmentMetadataKey,
        gpb.ConsumerGroupTargetAssignmentMetadataValue),
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: (
        gpb.ConsumerGroupTargetAssignmentMemberKey, gpb.ConsumerGroupTargetAssignmentMemberValue),
    RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: (
        gpb.ConsumerGroupCurrentMemberAssignmentKey,
        gpb.ConsumerGroupCurrentMemberAssignmentValue),
}
_TYPE_OF_KEY: dict[type[KeyMessage], RecordType] = {k: t for t, (k, _) in _TYPES.items()}
_TYPE_PREFIX = struct.Struct(">H")


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One record: a key naming a group, member or offset, and its value (None deletes it)."""

    key: KeyMessage
    value: ValueMessage | None

    def __post_init__(self) -> None:
        # The same fact checked when a record is made and when it is read back (decode).
        record_type = _TYPE_OF_KEY.get(type(self.key))
        if record_type is None:
            raise TypeError(f"not a group record key: {type(self.key).__name__}")
        if self.value is not None and type(self.value) is not _TYPES[record_type][1]:
            raise TypeError(f"{type(self.value).__name__} is not the value of {record_type.name}")

    @property
    def record_type(self) -> RecordType:
        return _TYPE_OF_KEY[type(self.key)]

    def encode(self) -> tuple[bytes, bytes | None]:
        """The record's key and value bytes as written to ``__consumer_offsets``."""
        key = _TYPE_PREFIX.pack(self.record_type) + self.key.SerializeToString(deterministic=True)
        if self.value is None:
            return key, None
        return key, self.value.SerializeToString(deterministic=True)


def decode(key: bytes, value: bytes | None) -> GroupRecord:
    """The record a ``(key, value)`` read from ``__consumer_offsets`` holds."""
    if len(key) < _TYPE_PREFIX.size:
        raise CorruptMessageError(f"group record key of {len(key)} bytes has no record type")
    (number,) = _TYPE_PREFIX.unpack_from(key)
    try:
        key_class, value_class = _TYPES[RecordType(number)]
    except ValueError:
        raise CorruptMessageError(f"unknown group record type {number}") from None
    try:
        key_message = key_class.FromString(key[_TYPE_PREFIX.size:])
        value_message = None if value is None else value_class.FromString(value)
    except DecodeError as error:
        raise CorruptMessageError(f"group record of type {number} does not parse: {error}") \
            from None
    return GroupRecord(key_message, value_message)


# --- assignments on the wire ------------------------------------------------------------------

def to_topic_partitions(partitions: Partitions) -> list[gpb.TopicIdPartitions]:
    """Sorted by topic id and partition, empty topics left out (one encoding per assignment)."""
    return [gpb.TopicIdPartitions(topic_id=topic_id, partitions=sorted(parts))
            for topic_id, parts in sorted(partitions.items()) if parts]


def from_topic_partitions(entries: Iterable[gpb.TopicIdPartitions]) -> dict[bytes, frozenset[int]]:
    result: dict[bytes, frozenset[int]] = {}
    for entry in entries:
        parts = result.get(entry.topic_id, frozenset()) | frozenset(entry.partitions)
        if parts:
            result[entry.topic_id] = parts
    return result


# --- builders ---------------------------------------------------------------------------------

def group_metadata_record(group_id: str, *, epoch: int, metadata_hash: int) -> GroupRecord:
    return GroupRecord(gpb.ConsumerGroupMetadataKey(group_id=group_id),
                       gpb.ConsumerGroupMetadataValue(epoch=epoch, metadata_hash=metadata_hash))


def group_metadata_tombstone(group_id: str) -> GroupRecord:
    return GroupRecord(gpb.ConsumerGroupMetadataKey(group_id=group_id), None)


def member_metadata_record(group_id: str, member_id: str,
                           value: gpb.ConsumerGroupMemberMetadataValue) -> GroupRecord:
    return GroupRecord(
        gpb.ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id), value)


def member_metadata_tombstone(group_id: str, member_id: str) -> GroupRecord:
    return GroupRecord(
        gpb.ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id), None)


def target_assignment_metadata_record(group_id: str, assignment_epoch: int) -> GroupRecord:
    return GroupRecord(
        gpb.ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id),
        gpb.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=assignment_epoch))


def target_assignment_metadata_tombstone(group_id: str) -> GroupRecord:
    return GroupRecord(gpb.ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id), None)


def target_assignment_member_record(group_id: str, member_id: str,
                                    partitions: Partitions) -> GroupRecord:
    return GroupRecord(
        gpb.ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id),
        gpb.ConsumerGroupTargetAssignmentMemberValue(
            topic_partitions=to_topic_partitions(partitions)))


def target_assignment_member_tombstone(group_id: str, member_id: str) -> GroupRecord:
    return GroupRecord(
        gpb.ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), None)


def current_assignment_record(
    group_id: str, member_id: str, *, member_epoch: int, previous_member_epoch: int,
    state: gpb.MemberState, assigned: Partitions, pending_revocation: Partitions,
) -> GroupRecord:
    return GroupRecord(
        gpb.ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id),
        gpb.ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=member_epoch, previous_member_epoch=previous_member_epoch, state=state,
            assigned_partitions=to_topic_partitions(assigned),
            partitions_pending_revocation=to_topic_partitions(pending_revocation)))


def current_assignment_tombstone(group_id: str, member_id: str) -> GroupRecord:
    return GroupRecord(
        gpb.ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), None)


def offset_commit_record(group_id: str, topic: str, partition: int,
                         value: gpb.OffsetCommitValue) -> GroupRecord:
    return GroupRecord(
        gpb.OffsetCommitKey(group_id=group_id, topic=topic, partition=partition), value)


def offset_commit_tombstone(group_id: str, topic: str, partition: int) -> GroupRecord:
    return GroupRecord(gpb.OffsetCommitKey(group_id=group_id, topic=topic, partition=partition),
                       None)
