"""The target assignment of a group (Kafka's TargetAssignmentBuilder) and its inputs.

When the group epoch moves past the assignment epoch, the coordinator runs the group's assignor
over every member's subscription (topic names, and the names its regex matches, resolved to
ids through the broker's metadata; names of topics that do not exist are left out until they
do) and writes one record per member
whose target changed, then the new assignment epoch. The assignor's output is checked before any
record is made: every member has an entry, no partition goes to two members, and every partition
exists and belongs to a topic the member subscribes to.

The group's assignor is the one most of its members ask for (ties: the first name in order), or
the configured default (Kafka's preferred server assignor).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping

from tidelog.broker.group.assignment import Assignment, Assignor, MemberSubscription, TopicMetadata
from tidelog.broker.group.group import ConsumerGroup
from tidelog.broker.group.records import (
    GroupRecord,
    target_assignment_member_record,
    target_assignment_metadata_record,
)
from tidelog.invariants import InvariantViolation

__all__ = ["compute_target_assignment", "metadata_hash", "preferred_assignor"]


def preferred_assignor(group: ConsumerGroup, default: str) -> str:
    counts = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
    if not counts:
        return default
    return min(counts, key=lambda name: (-counts[name], name))


def metadata_hash(group: ConsumerGroup, topics: Mapping[str, TopicMetadata]) -> int:
    """A hash of the subscribed topics' names, ids and partition counts (KIP-1101): a new
    partition, a re-created topic or a newly created subscribed topic changes it; so does a
    topic created or deleted that a member's regex matches (regexes are resolved here, against
    the metadata of this request). With authorization on, each member's subscription is what
    its principal may describe, so the hash covers each such member's topics too: an ACL
    granted or removed changes what that member may be assigned, even when another member
    still subscribes to the topic."""
    digest = hashlib.sha256()
    for name in sorted(group.subscribed_topic_names(topics)):
        topic = topics.get(name)
        if topic is not None:
            digest.update(f"{name}\0{topic.topic_id.hex()}\0{topic.partitions}\n".encode())
    for member_id, member in sorted(group.members.items()):
        if member.principal:
            names = ",".join(sorted(member.subscribed_topics(topics)))
            digest.update(f"member\0{member_id}\0{names}\n".encode())
    return int.from_bytes(digest.digest()[:8], "big", signed=True)


def compute_target_assignment(group: ConsumerGroup, assignor: Assignor,
                              topics: Mapping[str, TopicMetadata]) -> list[GroupRecord]:
    """Records for the new target assignment at the group's epoch."""
    subscribed = {name: topics[name] for name in group.subscribed_topic_names(topics)
                  if name in topics}
    by_id = {t.topic_id: t for t in subscribed.values()}
    members = {
        member_id: MemberSubscription(
            member_id=member_id,
            subscribed_topic_ids=frozenset(
                subscribed[n].topic_id for n in m.subscribed_topics(topics) if n in subscribed),
            current=group.target_assignment.get(member_id, {}),
            instance_id=m.instance_id or None, rack_id=m.rack_id or None)
        for member_id, m in sorted(group.members.items())
    }
    result = assignor.assign(members, by_id)
    _check_assignment(group.group_id, assignor.name, members, by_id, result)
    records = []
    for member_id in sorted(members):
        new = {t: frozenset(p) for t, p in result[member_id].items() if p}
        old = {t: p for t, p in group.target_assignment.get(member_id, {}).items() if p}
        if new != old or member_id not in group.target_assignment:
            records.append(target_assignment_member_record(group.group_id, member_id, new))
    records.append(target_assignment_metadata_record(group.group_id, group.group_epoch))
    return records


def _check_assignment(group_id: str, assignor: str, members: Mapping[str, MemberSubscription],
                      topics: Mapping[bytes, TopicMetadata],
                      result: Mapping[str, Assignment]) -> None:
    """An assignor's bug must not become records: a partition given twice would be consumed
    twice."""
    if set(result) != set(members):
        raise InvariantViolation(
            f"assignor {assignor} for group {group_id} returned members {sorted(result)}, "
            f"not {sorted(members)}")
    seen: set[tuple[bytes, int]] = set()
    for member_id, assignment in result.items():
        for topic_id, partitions in assignment.items():
            topic = topics.get(topic_id)
            if topic is None or topic_id not in members[member_id].subscribed_topic_ids:
                raise InvariantViolation(
                    f"assignor {assignor} gave member {member_id} of group {group_id} topic "
                    f"{topic_id.hex()} it does not subscribe to")
            for partition in partitions:
                if not 0 <= partition < topic.partitions or (topic_id, partition) in seen:
                    raise InvariantViolation(
                        f"assignor {assignor} gave {topic.name}-{partition} of group {group_id} "
                        f"twice or out of range")
                seen.add((topic_id, partition))
