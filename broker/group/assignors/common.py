"""What the server-side assignors share: reading their input defensively and checking their output.

:func:`group_spec` turns the coordinator's ``members`` and ``topics`` into Kafka's GroupSpec: the
member ids sorted (so no result depends on dict order), each member's subscription cut down to the
topics that exist, and the partition count of every subscribed topic. Bad input is ignored, not
fatal, because the coordinator must always get an assignment back:

- a subscribed topic id missing from ``topics`` is ignored for that member (the coordinator passes
  only topics it knows; Kafka raises PartitionAssignorException here instead);
- a topic with 0 (or a negative number of) partitions has nothing to assign;
- the key of ``members`` is the member id (``MemberSubscription.member_id`` is not consulted).

:func:`sticky_partitions` gives each member the part of its current assignment that it may keep:
partitions of topics it still subscribes to, that still exist, and that no member earlier in
member-id order also claims (the coordinator never hands a partition to two members, but two
claims must not yield two owners).

:func:`check_assignment` is the postcondition both assignors end with: every partition of every
subscribed topic has exactly one owner, that owner subscribes to the topic, and every member has
an entry. It raises InvariantViolation (a bug in the assignor, never the caller's input).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tidelog.broker.group.assignment import Assignment, MemberSubscription, TopicMetadata
from tidelog.invariants import InvariantViolation

__all__ = [
    "GroupSpec",
    "TopicPartition",
    "check_assignment",
    "group_spec",
    "sticky_partitions",
    "to_assignments",
]

#: (topic id, partition).
TopicPartition = tuple[bytes, int]


@dataclass(frozen=True)
class GroupSpec:
    """The assignors' view of a group (Kafka's GroupSpec), with members numbered 0..M-1."""

    #: member ids in ascending order; a member's index in this tuple is its number.
    member_ids: tuple[str, ...]
    #: per member number: the subscribed topics that exist.
    subscriptions: tuple[frozenset[bytes], ...]
    #: every topic some member subscribes to -> its partition count (>= 0).
    partition_counts: Mapping[bytes, int]

    @property
    def homogeneous(self) -> bool:
        """Kafka's SubscriptionType.HOMOGENEOUS: every member subscribes to the same topics."""
        return all(s == self.subscriptions[0] for s in self.subscriptions)


def group_spec(members: Mapping[str, MemberSubscription],
               topics: Mapping[bytes, TopicMetadata]) -> GroupSpec:
    """The GroupSpec of ``members``: see the module docstring for what is ignored."""
    member_ids = tuple(sorted(members))
    subscriptions = tuple(
        frozenset(t for t in members[m].subscribed_topic_ids if t in topics) for m in member_ids
    )
    subscribed = frozenset().union(*subscriptions)
    partition_counts = {t: max(0, topics[t].partitions) for t in sorted(subscribed)}
    return GroupSpec(member_ids, subscriptions, partition_counts)


def sticky_partitions(spec: GroupSpec, members: Mapping[str, MemberSubscription]
                      ) -> list[list[TopicPartition]]:
    """Per member number, the current partitions it may keep, in (topic, partition) order."""
    claimed: set[TopicPartition] = set()
    kept: list[list[TopicPartition]] = []
    for index, member_id in enumerate(spec.member_ids):
        subscribed = spec.subscriptions[index]
        mine: list[TopicPartition] = []
        current = members[member_id].current
        for topic_id in sorted(t for t in current if t in subscribed):
            count = spec.partition_counts[topic_id]
            for partition in sorted(current[topic_id]):
                tp = (topic_id, partition)
                if 0 <= partition < count and tp not in claimed:
                    claimed.add(tp)
                    mine.append(tp)
        kept.append(mine)
    return kept


def to_assignments(spec: GroupSpec, owners: Mapping[bytes, Sequence[int]]
                   ) -> dict[str, Assignment]:
    """The result from owner arrays (topic -> owner number per partition): member id -> topic ->
    partitions, with an entry for every member and no empty partition sets."""
    per_member: list[dict[bytes, list[int]]] = [{} for _ in spec.member_ids]
    for topic_id in sorted(owners):
        for partition, owner in enumerate(owners[topic_id]):
            if owner < 0:
                raise InvariantViolation(f"partition {partition} of {topic_id.hex()} unassigned")
            per_member[owner].setdefault(topic_id, []).append(partition)
    result: dict[str, Assignment] = {}
    for index, member_id in enumerate(spec.member_ids):
        result[member_id] = {t: frozenset(ps) for t, ps in per_member[index].items()}
    return result


def check_assignment(spec: GroupSpec, result: Mapping[str, Assignment]) -> None:
    """Raise InvariantViolation unless every subscribed partition has exactly one owner, that
    owner subscribes to its topic, and every member (and nobody else) has an entry."""
    if sorted(result) != list(spec.member_ids):
        raise InvariantViolation("the assignment's members differ from the group's")
    assigned = dict.fromkeys(spec.partition_counts, 0)
    covered: dict[bytes, set[int]] = {t: set() for t in spec.partition_counts}
    for index, member_id in enumerate(spec.member_ids):
        for topic_id, partitions in result[member_id].items():
            if topic_id not in spec.subscriptions[index]:
                raise InvariantViolation(
                    f"member {member_id} got topic {topic_id.hex()} it does not subscribe to")
            assigned[topic_id] += len(partitions)
            covered[topic_id].update(partitions)
    for topic_id, count in spec.partition_counts.items():
        # As many assignments as partitions and all of them covered: none twice, none missing.
        if assigned[topic_id] != count or covered[topic_id] != set(range(count)):
            raise InvariantViolation(
                f"topic {topic_id.hex()}: {assigned[topic_id]} assignments of {count} partitions, "
                f"{len(covered[topic_id])} distinct")
