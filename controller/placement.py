"""Replica placement for new partitions: spread over brokers and racks, leaders balanced.

The algorithm is Kafka's rack-aware assignment (``AdminUtils.assignReplicasToBrokers``, the one
``StripedReplicaPlacer`` refines for KRaft), chosen because its guarantees are simple to state
and test:

1. Brokers are arranged in a *rack-alternated* list: racks in a shuffled order, brokers within a
   rack shuffled, then one broker from each rack in turn (a, b, c, a, b, c, ...).
2. Partition p's leader (first replica) is ``list[(p + start) % n]``: leaders go round-robin over
   the brokers, so within one call no broker leads more than one partition more than another.
3. Followers are taken after the leader at a shift that grows by one every n partitions (so the
   follower sets differ between rounds), skipping a broker whose rack already holds a replica of
   the partition until every rack holds one. With at least RF racks, a partition's replicas are
   all in different racks; with fewer, every rack holds one.

Brokers without a rack label form one rack named "" (as StripedReplicaPlacer does). The only
randomness is the ``random.Random`` passed in, so a seeded simulation places identically.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from tidelog import limits
from tidelog.invariants import InvariantViolation

__all__ = ["place_replicas"]


def _rack_alternated(brokers: Mapping[int, str], rng: random.Random) -> list[int]:
    racks: dict[str, list[int]] = {}
    for broker_id in sorted(brokers):
        racks.setdefault(brokers[broker_id], []).append(broker_id)
    rack_names = sorted(racks)
    rng.shuffle(rack_names)
    for rack_name in rack_names:
        rng.shuffle(racks[rack_name])
    arranged: list[int] = []
    for index in range(max(len(members) for members in racks.values())):
        for rack_name in rack_names:
            if index < len(racks[rack_name]):
                arranged.append(racks[rack_name][index])
    if sorted(arranged) != sorted(brokers):
        raise InvariantViolation(
            f"the rack alternation lost or added brokers: {arranged} from {sorted(brokers)}")
    return arranged


def _replica_index(first_index: int, shift: int, k: int, n: int) -> int:
    """Kafka's replicaIndex: never ``first_index``; cycles over all others as k grows."""
    return (first_index + 1 + (shift + k) % (n - 1)) % n


def place_replicas(
    brokers: Mapping[int, str],
    *,
    num_partitions: int,
    replication_factor: int,
    rng: random.Random,
    first_partition_id: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists (preferred leader first) for partitions first_partition_id.. of a topic.

    ``brokers`` maps each eligible (active) broker id to its rack ("" = none). The caller has
    checked 1 <= replication_factor <= len(brokers) and the partition count.
    """
    n = len(brokers)
    if not 1 <= replication_factor <= min(n, limits.REPLICATION_FACTOR_MAX):
        raise InvariantViolation(
            f"replication factor {replication_factor} outside "
            f"1..{min(n, limits.REPLICATION_FACTOR_MAX)}")
    if not 0 < num_partitions <= limits.PARTITIONS_PER_TOPIC_MAX:
        raise InvariantViolation(
            f"{num_partitions} partitions outside 1..{limits.PARTITIONS_PER_TOPIC_MAX}")
    if not 0 <= first_partition_id < limits.PARTITIONS_PER_TOPIC_MAX:
        raise InvariantViolation(
            f"first partition id {first_partition_id} outside "
            f"0..{limits.PARTITIONS_PER_TOPIC_MAX - 1}")
    arranged = _rack_alternated(brokers, rng)
    num_racks = len(set(brokers.values()))
    start = rng.randrange(n)
    shift = rng.randrange(n)
    placements: list[tuple[int, ...]] = []
    for partition_id in range(first_partition_id, first_partition_id + num_partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first_index = (partition_id + start) % n
        replicas = [arranged[first_index]]
        racks_used = {brokers[replicas[0]]}
        k = 0
        while len(replicas) < replication_factor:
            # An acceptable broker is among any n-1 consecutive candidates (see module doc).
            if k >= replication_factor * (n - 1):
                raise InvariantViolation(
                    f"partition {partition_id}: no acceptable replica after {k} candidates")
            candidate = arranged[_replica_index(first_index, shift * num_racks, k, n)]
            k += 1
            if candidate in replicas:
                continue
            if brokers[candidate] in racks_used and len(racks_used) < num_racks:
                continue
            replicas.append(candidate)
            racks_used.add(brokers[candidate])
        placements.append(tuple(replicas))
    return placements
