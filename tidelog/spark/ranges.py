"""Offset ranges and the two pieces of arithmetic Spark's Kafka source does on them.

* :func:`split_ranges` is Spark's ``KafkaOffsetRangeCalculator``: with ``minPartitions`` above
  the number of non-empty ranges, the ranges holding more than their share of the records are cut
  into contiguous pieces, as many as their share of ``minPartitions`` (rounded half up, at least
  one), while the small ones stay whole; the pieces of one range are as equal as integer division
  makes them, the last taking the remainder. Then, with ``maxRecordsPerPartition``, any piece
  still larger than that is cut into equal pieces no larger. Empty ranges are dropped. Every
  offset of the input is in exactly one output piece.
* :func:`rate_limit` is the micro-batch stream's ``rateLimit`` for ``maxOffsetsPerTrigger``:
  the limit is shared among partitions in proportion to the records each has available, rounded
  down, except that a partition whose share is below one record gets one (Spark's "don't
  completely starve small topicpartitions"), so a batch may read a few records more than the
  limit, never more than the limit plus the number of partitions.

Spark computes the shares in floating point; here they are exact integer arithmetic (the same
results wherever a double is exact, i.e. below 2**53 records). Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tidelog.spark.offsets import TopicPartition

__all__ = ["InputRange", "rate_limit", "split_ranges"]


@dataclass(frozen=True, slots=True)
class InputRange:
    """Records ``from_offset`` ≤ offset < ``until_offset`` of one partition: one Spark input
    partition. Plain values, so it pickles to a worker as is."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def split_ranges(ranges: Sequence[InputRange], *, min_partitions: int | None,
                 max_records_per_partition: int | None = None) -> list[InputRange]:
    """The input partitions for ``ranges`` (see the module docstring), in input order."""
    pieces = [r for r in ranges if r.size > 0]
    if min_partitions is not None and min_partitions > len(pieces):
        pieces = _split_for_min_partitions(pieces, min_partitions)
    if max_records_per_partition is not None:
        pieces = [piece for r in pieces
                  for piece in _divide(r, -(-r.size // max_records_per_partition))]
    return pieces


def _split_for_min_partitions(ranges: list[InputRange], min_partitions: int) -> list[InputRange]:
    total = sum(r.size for r in ranges)
    # The small ranges (a share of at most one piece) stay whole and leave the proportional
    # split of the others to the remaining pieces, as Spark's calculator does.
    unsplit = {r.topic_partition for r in ranges
               if _part_count(r.size, total, min_partitions) == 1}
    unsplit_total = sum(r.size for r in ranges if r.topic_partition in unsplit)
    split_total = total - unsplit_total
    split_min_partitions = max(min_partitions - len(unsplit), 1)
    result: list[InputRange] = []
    for r in ranges:
        parts = 1 if r.topic_partition in unsplit else _part_count(r.size, split_total,
                                                                   split_min_partitions)
        result.extend(_divide(r, parts))
    return [r for r in result if r.size > 0]


def _part_count(size: int, total: int, min_parts: int) -> int:
    """max(round(size / total * min_parts), 1), rounding half up as Scala's math.round."""
    return max((2 * size * min_parts + total) // (2 * total), 1)


def _divide(r: InputRange, parts: int) -> list[InputRange]:
    """``parts`` contiguous pieces of ``r``: each ``remaining // parts_left`` long."""
    pieces: list[InputRange] = []
    remaining, start = r.size, r.from_offset
    for part in range(parts):
        length = remaining // (parts - part)
        remaining -= length
        end = min(start + length, r.until_offset)
        pieces.append(InputRange(r.topic, r.partition, start, end))
        start = end
    return pieces


def rate_limit(limit: int, start: Mapping[TopicPartition, int],
               latest: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """End offsets for one micro-batch: at most ``limit`` records (plus one per starved
    partition) from ``start``, proportionally to what each partition has up to ``latest``.
    ``start`` must hold every partition of ``latest`` (new partitions at their log start)."""
    if limit <= 0:
        raise ValueError(f"rate limit must be positive, got {limit}")
    sizes = {tp: end - start[tp] for tp, end in latest.items() if end - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    ends: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        if tp not in sizes:
            ends[tp] = end
            continue
        share_numerator = limit * sizes[tp]
        # A share below one record is rounded up to one, a larger one down.
        share = 1 if share_numerator < total else share_numerator // total
        ends[tp] = min(end, start[tp] + share)
    return ends
