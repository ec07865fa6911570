"""Shared by the group coordinator's scenario and simulation tests: a deterministic assignor,
topic metadata, a one-line rendering of the coordinator's messages, and the invariants checked
after every step (replay from scratch gives the same state; no partition owned twice)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from tidelog.broker.group.assignment import Assignment, MemberSubscription, TopicMetadata
from tidelog.broker.group.coordinator import GroupCoordinatorShard
from tidelog.broker.group.group import GroupState, owned_partitions
from tidelog.broker.group.records import GroupRecord, decode


class RoundRobinAssignor:
    """Partitions of each topic dealt to its subscribers in member-id order: deterministic and
    deliberately not sticky, so that rebalances revoke and reassign."""

    def __init__(self, name: str) -> None:
        self.name = name

    def assign(self, members: Mapping[str, MemberSubscription],
               topics: Mapping[bytes, TopicMetadata]) -> dict[str, Assignment]:
        result: dict[str, dict[bytes, frozenset[int]]] = {m: {} for m in members}
        for topic_id in sorted(topics):
            subscribers = sorted(m for m, s in members.items()
                                 if topic_id in s.subscribed_topic_ids)
            for partition in range(topics[topic_id].partitions):
                if subscribers:
                    owner = subscribers[partition % len(subscribers)]
                    result[owner][topic_id] = result[owner].get(topic_id, frozenset()) | {
                        partition}
        return dict(result)


def scenario_assignors() -> dict[str, RoundRobinAssignor]:
    return {"simple": RoundRobinAssignor("simple"), "other": RoundRobinAssignor("other")}



def topic_metadata(name: str, partitions: int) -> TopicMetadata:
    """A topic whose id starts with its name, so it reads well in hex too."""
    return TopicMetadata(topic_id=name.encode().ljust(16, b"\0")[:16], name=name,
                         partitions=partitions)


class Renderer:
    """One line per message; topic ids shown as names, member ids as m1, m2, ..."""

    def __init__(self, topics: Mapping[str, TopicMetadata]) -> None:
        self.topics = topics
        self.aliases: dict[str, str] = {}

    def alias(self, member_id: str) -> str:
        if member_id not in self.aliases:
            self.aliases[member_id] = f"m{len(self.aliases) + 1}"
        return self.aliases[member_id]

    def member_id(self, alias: str) -> str:
        for real, known in self.aliases.items():
            if known == alias:
                return real
        return alias

    def record(self, record: GroupRecord) -> str:
        kind = type(record.key).__name__.removesuffix("Key")
        value = "<tombstone>" if record.value is None else self.message(record.value)
        return f"+ {kind} {self.message(record.key)} | {value}".rstrip()

    def message(self, message: Message) -> str:
        parts = []
        for field in message.DESCRIPTOR.fields:
            shown = self._field(message, field)
            if shown is not None:
                parts.append(f"{field.name}={shown}")
        return " ".join(parts)

    def _field(self, message: Message, field: FieldDescriptor) -> str | None:
        value = getattr(message, field.name)
        if field.is_repeated:
            if not value:
                return None
            if field.message_type is not None and field.message_type.name in (
                    "TopicIdPartitions", "TopicPartitions"):
                return "[" + " ".join(self._partitions(v) for v in value) + "]"
            if field.message_type is not None:
                return "[" + "; ".join(self.message(v) for v in value) + "]"
            return "[" + ",".join(self._scalar(field, v) for v in value) + "]"
        if field.message_type is not None:
            return "{" + self.message(value) + "}" if message.HasField(field.name) else None
        if field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES) and not value:
            return None
        return self._scalar(field, value)

    def _scalar(self, field: FieldDescriptor, value: object) -> str:
        if field.type == FieldDescriptor.TYPE_ENUM:
            assert isinstance(value, int) and field.enum_type is not None
            return field.enum_type.values_by_number[value].name
        if field.type == FieldDescriptor.TYPE_BOOL:
            return str(value).lower()
        if field.type == FieldDescriptor.TYPE_STRING:
            assert isinstance(value, str)
            if field.name == "member_id":
                return self.alias(value)
            return json.dumps(value)
        if isinstance(value, bytes):
            return value.hex()
        return str(value)

    def _partitions(self, entry: Message) -> str:
        topic_id = getattr(entry, "topic_id")  # noqa: B009 (two message types)
        names = {t.topic_id: n for n, t in self.topics.items()}
        name = names.get(topic_id, topic_id.hex())
        return f"{name}:" + ",".join(str(p) for p in getattr(entry, "partitions"))  # noqa: B009


def check_invariants(shard: GroupCoordinatorShard, log: list[GroupRecord], *,
                     replay: bool = True) -> None:
    """Replaying the log from scratch (through the bytes) gives the shard's state, and no
    partition is owned (assigned or not yet acknowledged revoked) by two members at once."""
    if replay:
        replayed = GroupState()
        for record in log:
            replayed.replay(decode(*record.encode()))
        assert replayed.canonical_lines() == shard.state.canonical_lines()
    for group in shard.state.groups.values():
        seen: dict[tuple[bytes, int], str] = {}
        for member in group.members.values():
            for tp in owned_partitions(member):
                assert tp not in seen, (
                    f"group {group.group_id}: {tp} owned by {seen[tp]} and {member.member_id}")
                seen[tp] = member.member_id
