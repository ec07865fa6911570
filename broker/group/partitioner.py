"""Which ``__consumer_offsets`` partition holds a group: Kafka's
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``.

Kafka's hash is Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over the string's
UTF-16 code units (a character outside the Basic Multilingual Plane counts as its two
surrogates), in wrapping 32-bit signed arithmetic. ``Utils.abs`` maps Integer.MIN_VALUE to 0
(Java's Math.abs would leave it negative). Using the same function means a group lands on the
same partition number as it would in Kafka with the same partition count.
"""

from __future__ import annotations

from tidelog.invariants import check

__all__ = ["java_string_hash", "kafka_abs", "partition_for"]

_INT32_MIN = -(1 << 31)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text``: a signed 32-bit int."""
    h = 0
    units = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``|n|``, except Integer.MIN_VALUE gives 0."""
    return 0 if n == _INT32_MIN else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group_id`` among ``num_partitions``."""
    check(num_partitions > 0, f"the offsets topic has {num_partitions} partitions")
    return kafka_abs(java_string_hash(group_id)) % num_partitions
