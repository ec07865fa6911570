"""The ``range`` assignor (Kafka's server-side RangeAssignor, KIP-848): contiguous ranges per topic.

For each subscribed topic, its N subscribers in member order share its P partitions in contiguous
ranges: the first ``P % N`` get ``P // N + 1`` partitions, the others ``P // N`` (so with more
subscribers than partitions the last ones get none of that topic). Member order is Kafka's: static
members (with a ``group.instance.id``) first, by instance id, then the others by member id. When
every member subscribes to the same topics and the topics have the same partition count, each
member gets the same partition numbers of every topic (co-partitioning, what joins need).

Stickiness is Kafka's: the current assignment is not consulted (Kafka's sticky-range variant of
3.7 was replaced by this plain one), the result depends only on the member order, the
subscriptions and the partition counts. A static member that restarts keeps its instance id and
so its place in the order and its partitions; a dynamic member joining or leaving shifts the
ranges of the members after it.

Bad input is handled as in :mod:`broker.group.assignors.common` (unknown topics ignored, topics
with no partitions give nothing). Cost: O(P + M log M); 1,000 members x 10,000 partitions in
about 0.05 s (one-off measurement, ``python -m bench.assignors``).
"""

from __future__ import annotations

from collections.abc import Mapping

from tidelog.broker.group.assignment import Assignment, MemberSubscription, TopicMetadata
from tidelog.broker.group.assignors.common import check_assignment, group_spec, to_assignments

__all__ = ["RangeAssignor"]


class RangeAssignor:
    """Kafka's server-side RangeAssignor: see the module docstring."""

    name = "range"

    def assign(self, members: Mapping[str, MemberSubscription],
               topics: Mapping[bytes, TopicMetadata]) -> dict[str, Assignment]:
        spec = group_spec(members, topics)
        if not spec.member_ids:
            return {}
        # Kafka's sortMemberIds: static members first by instance id, then the rest by member id.
        order = sorted(range(len(spec.member_ids)), key=lambda i: _sort_key(
            members[spec.member_ids[i]].instance_id, spec.member_ids[i]))
        owners: dict[bytes, list[int]] = {}
        for topic_id, count in spec.partition_counts.items():
            subscribers = [i for i in order if topic_id in spec.subscriptions[i]]
            min_quota, extra = divmod(count, len(subscribers))
            owners[topic_id] = topic_owners = []
            for rank, index in enumerate(subscribers):
                quota = min_quota + (1 if rank < extra else 0)
                topic_owners.extend([index] * quota)
        result = to_assignments(spec, owners)
        check_assignment(spec, result)
        return result


def _sort_key(instance_id: str | None, member_id: str) -> tuple[int, str, str]:
    if instance_id is not None:
        return (0, instance_id, member_id)
    return (1, member_id, "")
