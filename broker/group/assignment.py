"""What a server-side assignor sees and returns (KIP-848): the one interface between the group
coordinator (broker/group/coordinator.py) and the assignors (broker/group/assignors.py).

Pure data, no I/O. Topics are named by id (a topic deleted and re-created is another topic);
partitions are ints. An assignor takes every member's subscription and its current target
assignment, plus the subscribed topics' metadata, and returns the new target assignment of
every member. It must be deterministic (same input, same output: every coordinator replaying the
same records must compute the same target), assign each partition of a subscribed topic to
exactly one member subscribed to it, and leave partitions of topics nobody subscribes to
unassigned. Stickiness (keep what a member has when the result stays balanced) is what makes
KIP-848's incremental rebalances cheap: a partition that does not move is never revoked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Assignment", "Assignor", "MemberSubscription", "TopicMetadata"]

#: member target: topic id -> partitions.
Assignment = Mapping[bytes, frozenset[int]]


@dataclass(frozen=True)
class MemberSubscription:
    """One member as the assignor sees it."""

    member_id: str
    subscribed_topic_ids: frozenset[bytes]
    #: the member's current target assignment (empty for a new member): what stickiness keeps.
    current: Assignment = field(default_factory=dict)
    instance_id: str | None = None
    rack_id: str | None = None


@dataclass(frozen=True)
class TopicMetadata:
    """A subscribed topic: its id, name and partition count (from the broker's metadata)."""

    topic_id: bytes
    name: str
    partitions: int
    #: partition -> racks of its replicas (rack-aware assignors may use it; may be empty).
    partition_racks: Mapping[int, frozenset[str]] = field(default_factory=dict)


class Assignor(Protocol):
    """A server-side assignor: Kafka's ConsumerGroupPartitionAssignor."""

    #: the name members ask for in ConsumerGroupHeartbeatRequest.server_assignor.
    name: str

    def assign(self, members: Mapping[str, MemberSubscription],
               topics: Mapping[bytes, TopicMetadata]) -> dict[str, Assignment]:
        """The new target assignment: member id -> topic id -> partitions (every member of
        ``members`` has an entry, possibly empty)."""
        ...
