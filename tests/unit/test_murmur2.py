"""Partitioning matches Kafka's Java client: murmur2, toPositive, key -> partition, sticky.

Checks ``murmur2`` against the test vectors of Kafka's own ``UtilsTest.testMurmur2`` (signed Java
ints), key -> partition over 1000 partitions against the values Kafka's DefaultPartitioner gives
(the table kafka-python checks its port against), and the KIP-480 sticky partitioner's rules with
a seeded random: it sticks until told a batch was completed, then moves to another available
partition, and only the first caller that reports the old partition moves it.
"""

from __future__ import annotations

import random

import pytest

from tidelog.client._partitioner import (
    StickyPartitionCache,
    murmur2,
    partition_for_key,
    to_positive,
)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
        (b"", 275646681),
    ],
)
def test_murmur2_matches_kafka_utils_test_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@pytest.mark.parametrize(
    ("key", "partition"),
    [(b"", 681), (b"a", 524), (b"ab", 434), (b"abc", 107), (b"123456789", 566), (b"\x00 ", 742)],
)
def test_key_lands_where_kafkas_default_partitioner_puts_it(key: bytes, partition: int) -> None:
    assert partition_for_key(key, 1000) == partition


def test_to_positive_clears_the_sign_bit_like_java() -> None:
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0  # abs() would overflow in Java; masking does not
    assert to_positive(5) == 5


def test_every_tail_length_and_high_bytes_hash_as_unsigned_bytes() -> None:
    # Java's bytes are signed; Kafka masks them (& 0xff). 0x80..0xff must not sign-extend.
    values = {murmur2(bytes([0xFF] * n)) for n in range(9)}
    assert len(values) == 9
    assert all(-(2**31) <= v < 2**31 for v in values)


def test_partition_for_key_refuses_no_partitions() -> None:
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


def test_sticky_partition_holds_until_a_new_batch_then_moves() -> None:
    cache = StickyPartitionCache(random.Random(7))
    first = cache.partition("t", 4, [0, 1, 2, 3])
    assert all(cache.partition("t", 4, [0, 1, 2, 3]) == first for _ in range(10))
    moved = cache.next_partition("t", first, 4, [0, 1, 2, 3])
    assert moved != first
    assert cache.partition("t", 4, [0, 1, 2, 3]) == moved


def test_sticky_only_the_first_report_of_a_completed_batch_moves_it() -> None:
    cache = StickyPartitionCache(random.Random(1))
    first = cache.partition("t", 8, list(range(8)))
    moved = cache.next_partition("t", first, 8, list(range(8)))
    # A second sender that also saw ``first`` fill up gets the partition already chosen.
    assert cache.next_partition("t", first, 8, list(range(8))) == moved


def test_sticky_prefers_available_partitions_and_falls_back_to_all() -> None:
    cache = StickyPartitionCache(random.Random(3))
    assert cache.partition("t", 5, [4]) == 4
    assert cache.next_partition("t", 4, 5, [4]) == 4  # the only available one
    other = StickyPartitionCache(random.Random(3))
    assert 0 <= other.partition("u", 3, []) < 3


def test_sticky_topics_are_independent() -> None:
    cache = StickyPartitionCache(random.Random(5))
    a = cache.partition("a", 100, list(range(100)))
    cache.next_partition("b", -1, 100, list(range(100)))
    assert cache.partition("a", 100, list(range(100))) == a
