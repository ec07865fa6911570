"""Partitioners: which partition a record goes to, exactly as Kafka's Java client decides.

* A record with an explicit partition goes there.
* A record with a key goes to ``toPositive(murmur2(key)) % num_partitions`` over *all* partitions
  (Kafka's ``Utils.murmur2`` and ``Utils.toPositive``), so a key lands on the partition a Kafka
  client would choose for the same partition count; unavailable partitions are not skipped, since
  that would move keys whenever a leader is down.
* A record without a key uses the sticky partitioner of KIP-480: every keyless record of a topic
  goes to one partition until the accumulator starts a new batch for it, then a new partition is
  picked at random among those with a leader (different from the previous one when there is a
  choice). Batches fill up, so keyless traffic gets Kafka's batching and latency benefits.
* Or a user callable ``partitioner(key, all_partitions, available_partitions) -> partition``
  (kafka-python's shape).

Pure: no I/O, no clock; randomness comes from a ``random.Random`` the caller owns.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

__all__ = [
    "PartitionerCallable",
    "StickyPartitionCache",
    "murmur2",
    "partition_for_key",
    "to_positive",
]

#: A user partitioner: (key, all partition ids, partition ids with a leader) -> partition id.
PartitionerCallable = Callable[[bytes | None, Sequence[int], Sequence[int]], int]

_MASK32 = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the 32-bit MurmurHash2 variant, as a signed Java int.

    Java's ints wrap at 32 bits and ``>>>`` is a logical shift; here every product is masked to 32
    bits and the value is kept unsigned until the end, which gives the same bits.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = length & 3
    # Java's switch falls through from case 3 to case 1; the multiply happens once, after case 1.
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which overflows MIN_VALUE)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key`` among ``num_partitions``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitionCache:
    """KIP-480's sticky partition per topic, changed only when a new batch is started.

    ``partition(topic, ...)`` returns the topic's current sticky partition (choosing one the first
    time); ``next_partition(topic, previous, ...)`` is called when the accumulator would open a new
    batch for ``previous`` and moves the topic to another partition. Only the first caller that
    reports a given ``previous`` moves it, so concurrent senders do not skip partitions.
    """

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        current = self._sticky.get(topic)
        if current is not None and current < num_partitions:
            return current
        return self.next_partition(topic, -1, num_partitions, available)

    def next_partition(
        self, topic: str, previous: int, num_partitions: int, available: Sequence[int]
    ) -> int:
        if num_partitions <= 0:
            raise ValueError(f"num_partitions must be positive, got {num_partitions}")
        current = self._sticky.get(topic)
        if current is not None and current != previous and current < num_partitions:
            return current  # someone already moved it on from ``previous``
        candidates = [p for p in available if p < num_partitions] or list(range(num_partitions))
        if len(candidates) > 1:
            candidates = [p for p in candidates if p != previous] or candidates
        chosen = candidates[self._rng.randrange(len(candidates))]
        self._sticky[topic] = chosen
        return chosen
