"""broker/group/partitioner.py: a group's __consumer_offsets partition is Kafka's
``Utils.abs(groupId.hashCode()) % N``.

The expected values were printed by Java 17 (``String.hashCode`` and Kafka's Utils.abs) for the
same strings, so a group lands on the partition number Kafka would give it.
"""

from __future__ import annotations

import pytest

from tidelog.broker.group.partitioner import java_string_hash, kafka_abs, partition_for
from tidelog.invariants import InvariantViolation

#: (group id, Java's hashCode, partition of 50, partition of 3), from Java.
JAVA = [
    ("", 0, 0, 0),
    ("group", 98629247, 47, 2),
    ("Aa", 2112, 12, 0),
    ("BB", 2112, 12, 0),  # Java's classic collision
    ("\u00e9t\u00e9", 227742, 42, 0),  # non-ASCII, one UTF-16 unit each
    ("\U0001F600", 1772899, 49, 1),  # a surrogate pair: two units, D83D DE00
    ("polygenelubricants", -2147483648, 0, 0),  # Integer.MIN_VALUE: Utils.abs gives 0
    ("console-consumer-12345", 158455506, 6, 0),
    ("groupe-\u00e9t\u00e9-\U0001F680", 1397659225, 25, 1),
    ("my-consumer-group", 1513705513, 13, 1),
]


@pytest.mark.parametrize(("group_id", "hash_code", "of_50", "of_3"), JAVA)
def test_matches_java_and_kafka(group_id: str, hash_code: int, of_50: int, of_3: int) -> None:
    assert java_string_hash(group_id) == hash_code
    assert partition_for(group_id, 50) == of_50
    assert partition_for(group_id, 3) == of_3


def test_hash_wraps_to_a_signed_32_bit_int() -> None:
    long_id = "x" * 10_000
    h = java_string_hash(long_id)
    assert -(1 << 31) <= h < (1 << 31)
    # The recurrence by hand, in Java's int arithmetic.
    expected = 0
    for _ in long_id:
        expected = (31 * expected + ord("x")) & 0xFFFFFFFF
    assert h == (expected - (1 << 32) if expected >= 1 << 31 else expected)


def test_kafka_abs() -> None:
    assert kafka_abs(-(1 << 31)) == 0
    assert kafka_abs(-5) == 5
    assert kafka_abs(7) == 7


def test_partition_count_must_be_positive() -> None:
    with pytest.raises(InvariantViolation):
        partition_for("group", 0)
