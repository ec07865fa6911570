"""tidelog.spark.keyhash: the sink's column-at-a-time key partitioning equals Kafka's.

What it checks: for seeded random keys of every length from 0 to 40 bytes (every tail length
and word count), and for several partition counts, each key's partition is the one the client's
per-key ``partition_for_key`` (Kafka's murmur2, checked against Kafka's own vectors in
test_murmur2.py) gives; null keys get None; a bad partition count is refused.
"""

from __future__ import annotations

import random

import pytest

from tidelog.client._partitioner import partition_for_key
from tidelog.spark.keyhash import partitions_for_keys


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_partitions_equal_kafkas_per_key_partitioner(seed: int) -> None:
    rng = random.Random(seed)
    keys: list[bytes | None] = [
        None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 41))
        for _ in range(3_000)]
    for count in (1, 3, 6, 7, 1_000, 2**31 - 1):
        expected = [None if k is None else partition_for_key(k, count) for k in keys]
        assert partitions_for_keys(keys, count) == expected


def test_empty_null_and_bad_partition_counts() -> None:
    assert partitions_for_keys([], 3) == []
    assert partitions_for_keys([None, b""], 3) == [None, partition_for_key(b"", 3)]
    with pytest.raises(ValueError, match="num_partitions must be positive"):
        partitions_for_keys([b"k"], 0)
