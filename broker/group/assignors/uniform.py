"""The ``uniform`` assignor (Kafka's UniformAssignor, KIP-848's default): balanced, then sticky.

Two builders, chosen as Kafka chooses them:

- **Homogeneous** (every member subscribes to the same topics; Kafka's
  UniformHomogeneousAssignmentBuilder, once OptimizedUniformAssignmentBuilder). With P partitions
  and M members each member's quota is ``P // M``, and ``P % M`` members get one more. Each member
  keeps its current partitions up to its quota, the rest are revoked, and the unowned partitions,
  in (topic id, partition) order, fill the members below quota in member-id order. Per-member
  counts differ by at most one. Unlike Kafka, which hands the ``P % M`` larger quotas out in
  member order, the larger quotas go first to members that already hold more than ``P // M``: so
  when a member joins, the others lose exactly the partitions the newcomer gets, and when one
  leaves, only its partitions move.
- **Heterogeneous** (Kafka's UniformHeterogeneousAssignmentBuilder, once
  GeneralUniformAssignmentBuilder). Each member keeps every current partition of a topic it still
  subscribes to. The unowned partitions are handed out topic by topic (most partitions per
  subscriber first, then fewest subscribers, then topic id), each to the least loaded subscriber
  (ties: lowest member id). Then balancing rounds: for each topic with two or more subscribers,
  move its partitions from the most loaded subscriber that holds one (its highest partition) to
  the least loaded subscriber while their loads differ by more than one. A round that moves
  nothing ends it. Each move lowers the sum of squared loads, so the rounds converge; the result
  is then balanced per topic (no subscriber of a topic holding one of its partitions has two more
  than another subscriber of it). That is the stopping rule of Kafka's builder, and as its own
  comments say, not always the global optimum for overlapping subscriptions (members on topics
  {1}, {1, 2}, {2} can end with 3, 4, 5 partitions where 4, 4, 4 exists). Kafka stops after 16
  rounds; here the limit is higher since the rounds converge anyway.

Everything is ordered (members by id, topics by id, partitions by number), so the same input gives
the same output whatever the order of the input mappings. Racks are not used yet
(``TopicMetadata.partition_racks`` and ``MemberSubscription.rack_id`` are ignored).

Bounds (one-off measurement, ``python -m bench.assignors`` on the 2-core dev machine, Python
3.11; not asserted by any test): 1,000 members x 10,000 partitions (100 topics of 100) take about
0.02 s homogeneous, from scratch and for a rebalance after a member leaves or joins (which moves
10 and 9 partitions); heterogeneous, with each member subscribed to 30 random topics, about
0.04 s from scratch and after a member leaves (10 partitions move). Harder overlapping shapes
measured alongside (each member on two adjacent topics of a ring; 1-50 random topics of 1-400
partitions, 15,844 partitions) stay under 0.06 s. Cost: O(P + M log M) homogeneous;
heterogeneous O(P log M) to hand out plus, per balancing round, O(P + M log M + moves log M),
at most BALANCE_ROUNDS_MAX rounds.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from fractions import Fraction

from tidelog.broker.group.assignment import Assignment, MemberSubscription, TopicMetadata
from tidelog.broker.group.assignors.common import (
    GroupSpec,
    TopicPartition,
    check_assignment,
    group_spec,
    sticky_partitions,
    to_assignments,
)

__all__ = ["BALANCE_ROUNDS_MAX", "UniformAssignor"]

#: The heterogeneous builder's limit on balancing rounds (Kafka: MAX_ITERATION_COUNT = 16). Every
#: round but the last moves at least one partition and the rounds converge on their own; the
#: limit only bounds the time spent on pathological overlapping subscriptions.
BALANCE_ROUNDS_MAX = 64


class UniformAssignor:
    """Kafka's UniformAssignor: see the module docstring."""

    name = "uniform"

    def assign(self, members: Mapping[str, MemberSubscription],
               topics: Mapping[bytes, TopicMetadata]) -> dict[str, Assignment]:
        spec = group_spec(members, topics)
        if not spec.member_ids:
            return {}
        kept = sticky_partitions(spec, members)
        if spec.homogeneous:
            owners = _assign_homogeneous(spec, kept)
        else:
            owners = _assign_heterogeneous(spec, kept)
        result = to_assignments(spec, owners)
        check_assignment(spec, result)
        return result


def _empty_owners(spec: GroupSpec) -> dict[bytes, list[int]]:
    """topic -> owner number per partition, -1 for none yet."""
    return {t: [-1] * count for t, count in spec.partition_counts.items()}


def _assign_homogeneous(spec: GroupSpec, kept: list[list[TopicPartition]]
                        ) -> dict[bytes, list[int]]:
    members = len(spec.member_ids)
    min_quota, extra = divmod(sum(spec.partition_counts.values()), members)
    quotas = [min_quota] * members
    # The larger quotas go first to members that hold more than the minimum, so that they keep
    # what they have; what is left of them goes in member-id order.
    for prefer_holders in (True, False):
        for index in range(members):
            if extra > 0 and quotas[index] == min_quota and (
                    len(kept[index]) > min_quota or not prefer_holders):
                quotas[index] += 1
                extra -= 1
    owners = _empty_owners(spec)
    for index, partitions in enumerate(kept):
        for topic_id, partition in partitions[:quotas[index]]:
            owners[topic_id][partition] = index
    unowned = [(t, p) for t in sorted(owners) for p, o in enumerate(owners[t]) if o < 0]
    # The quotas add up to the partition count, so the members below quota take exactly these.
    next_unowned = 0
    for index in range(members):
        wanted = quotas[index] - min(len(kept[index]), quotas[index])
        for topic_id, partition in unowned[next_unowned:next_unowned + wanted]:
            owners[topic_id][partition] = index
        next_unowned += wanted
    return owners


def _assign_heterogeneous(spec: GroupSpec, kept: list[list[TopicPartition]]
                          ) -> dict[bytes, list[int]]:
    subscribers: dict[bytes, list[int]] = {t: [] for t in spec.partition_counts}
    for index, subscription in enumerate(spec.subscriptions):
        for topic_id in subscription:
            subscribers[topic_id].append(index)
    loads = [0] * len(spec.member_ids)
    owners = _empty_owners(spec)
    for index, partitions in enumerate(kept):
        for topic_id, partition in partitions:
            owners[topic_id][partition] = index
        loads[index] = len(partitions)

    # Kafka's topic order: most partitions per subscriber first, then fewest subscribers, then id.
    topic_order = sorted(spec.partition_counts, key=lambda t: (
        -Fraction(spec.partition_counts[t], len(subscribers[t])), len(subscribers[t]), t))
    for topic_id in topic_order:
        _hand_out(owners[topic_id], subscribers[topic_id], loads)

    movable = [t for t in topic_order if len(subscribers[t]) >= 2]
    for _ in range(BALANCE_ROUNDS_MAX):
        moves = sum(_balance_topic(owners[t], subscribers[t], loads) for t in movable)
        if moves == 0:
            break
    return owners


def _hand_out(owners: list[int], subscribers: list[int], loads: list[int]) -> None:
    """Give each unowned partition of a topic to its least loaded subscriber (ties: lowest
    member number)."""
    least_loaded = [(loads[i], i) for i in subscribers]
    heapq.heapify(least_loaded)
    for partition, owner in enumerate(owners):
        if owner >= 0:
            continue
        load, index = heapq.heappop(least_loaded)
        owners[partition] = index
        loads[index] = load + 1
        heapq.heappush(least_loaded, (load + 1, index))


def _balance_topic(owners: list[int], subscribers: list[int], loads: list[int]) -> int:
    """Move partitions of one topic from its most loaded holder to its least loaded subscriber
    until their loads differ by one or less; return how many moved.

    Two heaps with lazy deletion: an entry whose load is no longer the member's load is stale and
    dropped when it comes to the top."""
    held: dict[int, list[int]] = {i: [] for i in subscribers}
    for partition, owner in enumerate(owners):
        held[owner].append(partition)
    most_loaded = [(-loads[i], i) for i in subscribers if held[i]]
    least_loaded = [(loads[i], i) for i in subscribers]
    heapq.heapify(most_loaded)
    heapq.heapify(least_loaded)
    moves = 0
    while most_loaded:
        negative_load, giver = most_loaded[0]
        if -negative_load != loads[giver] or not held[giver]:
            heapq.heappop(most_loaded)
            continue
        load, taker = least_loaded[0]
        if load != loads[taker]:
            heapq.heappop(least_loaded)
            continue
        if loads[giver] - loads[taker] <= 1:
            break
        heapq.heappop(most_loaded)
        heapq.heappop(least_loaded)
        partition = held[giver].pop()
        held[taker].append(partition)
        owners[partition] = taker
        loads[giver] -= 1
        loads[taker] += 1
        moves += 1
        if held[giver]:
            heapq.heappush(most_loaded, (-loads[giver], giver))
        heapq.heappush(least_loaded, (loads[giver], giver))
        heapq.heappush(most_loaded, (-loads[taker], taker))
        heapq.heappush(least_loaded, (loads[taker], taker))
    return moves
