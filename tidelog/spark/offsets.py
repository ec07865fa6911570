"""Per-topic-partition offsets as Spark's Kafka source writes them: parsing and serialisation.

Spark's Kafka source speaks one JSON shape for offsets, ``{"orders":{"0":23,"1":-2}}``: topic →
partition (a decimal string) → offset, where -2 means earliest (the log start offset) and -1 latest
(the high watermark). The same shape carries timestamps (``startingOffsetsByTimestamp``) and, as
a list per topic, assignments (``assign``: ``{"orders":[0,1]}``). A streaming query's offsets are
this JSON too: it is what Spark keeps in the query's checkpoint, so :func:`offsets_to_json` and
:func:`offsets_from_json` must round-trip exactly (sorted by topic then partition, no spaces, as
Spark's Jackson writer does).

Every parser names the option it parses and says what it expected (Spark's example text) and
what it got; it raises :class:`SparkOptionError`. Pure: no I/O, no pyspark, no client import
(:class:`TopicPartition` is a plain named tuple equal to the client's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import NamedTuple

__all__ = [
    "EARLIEST",
    "LATEST",
    "SparkOptionError",
    "TopicPartition",
    "assignment_from_json",
    "offsets_from_dict",
    "offsets_from_json",
    "offsets_to_dict",
    "offsets_to_json",
    "timestamps_from_json",
]

#: In the offsets JSON: start at the partition's log start offset (Spark's -2).
EARLIEST = -2
#: In the offsets JSON: the partition's high watermark (Spark's -1).
LATEST = -1

OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1000,"1":1000},"topicB":{"0":2000}}'
ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[2,4]}'


class SparkOptionError(ValueError):
    """A source or sink option that is unknown, malformed or contradicts another one. ``option``
    is the option's name as documented (e.g. ``startingOffsets``); the message names it too."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(message)


class TopicPartition(NamedTuple):
    """A partition of a topic; equal to the client's ``TopicPartition`` of the same values."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def offsets_from_json(text: str, *, option: str = "startingOffsets") -> dict[TopicPartition, int]:
    """``{"t":{"0":23,"1":-2}}`` → {t-0: 23, t-1: -2}. Offsets are ≥ 0, or -2/-1."""
    return offsets_from_dict(_load(text, option, OFFSETS_EXAMPLE), option=option, text=text)


def offsets_from_dict(value: object, *, option: str = "offsets",
                      text: str | None = None) -> dict[TopicPartition, int]:
    """The parsed form of :func:`offsets_from_json` (a streaming offset as PySpark hands it
    back: the dict ``json.loads`` made of our JSON)."""
    got = text if text is not None else json.dumps(value)
    parsed = _partition_map(value, option, OFFSETS_EXAMPLE, got)
    for tp, offset in parsed.items():
        if offset < EARLIEST:
            raise SparkOptionError(option, f"option '{option}': offset {offset} for {tp} is "
                                   f"invalid: use an offset >= 0, -2 for earliest or -1 for "
                                   f"latest")
    return parsed


def timestamps_from_json(text: str, *, option: str) -> dict[TopicPartition, int]:
    """``{"t":{"0":1700000000000}}`` → {t-0: 1700000000000}: milliseconds since the epoch, ≥ 0."""
    parsed = _partition_map(_load(text, option, TIMESTAMPS_EXAMPLE), option, TIMESTAMPS_EXAMPLE,
                            text)
    for tp, timestamp in parsed.items():
        if timestamp < 0:
            raise SparkOptionError(option, f"option '{option}': timestamp {timestamp} for {tp} "
                                   f"is negative: use milliseconds since the epoch")
    return parsed


def assignment_from_json(text: str, *, option: str = "assign") -> tuple[TopicPartition, ...]:
    """``{"t":[0,1]}`` → (t-0, t-1), sorted; at least one partition, none twice."""
    value = _load(text, option, ASSIGN_EXAMPLE)
    expected = f"option '{option}': expected e.g. {ASSIGN_EXAMPLE}, got {text}"
    if not isinstance(value, dict) or not value:
        raise SparkOptionError(option, expected)
    found: set[TopicPartition] = set()
    for topic, partitions in value.items():
        if not topic or not isinstance(partitions, list):
            raise SparkOptionError(option, expected)
        for partition in partitions:
            if not _is_int(partition) or partition < 0:
                raise SparkOptionError(option, expected)
            tp = TopicPartition(topic, partition)
            if tp in found:
                raise SparkOptionError(option, f"option '{option}': {tp} is assigned twice")
            found.add(tp)
    if not found:
        raise SparkOptionError(option, f"No topicpartitions to assign as specified value for "
                               f"option '{option}' is '{text}'")
    return tuple(sorted(found))


def offsets_to_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The JSON-able form: topics sorted, partitions sorted by number (what PySpark keeps)."""
    result: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        result.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return result


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> str:
    """Spark's text of a per-partition offset map: ``{"t":{"0":23,"1":5}}`` (no spaces)."""
    return json.dumps(offsets_to_dict(offsets), separators=(",", ":"))


def _load(text: str, option: str, example: str) -> object:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        raise SparkOptionError(option, f"option '{option}': expected e.g. {example}, "
                               f"got {text}") from None


def _partition_map(value: object, option: str, example: str,
                   got: str) -> dict[TopicPartition, int]:
    """topic → {"<partition>": integer} → {TopicPartition: integer}; the shape only."""
    expected = f"option '{option}': expected e.g. {example}, got {got}"
    if not isinstance(value, dict):
        raise SparkOptionError(option, expected)
    result: dict[TopicPartition, int] = {}
    for topic, partitions in value.items():
        if not topic or not isinstance(partitions, dict):
            raise SparkOptionError(option, expected)
        for key, number in partitions.items():
            # The partition key is a decimal string (JSON keys are strings); "01" or " 1" would
            # name the same partition twice, so only the canonical spelling is accepted.
            if not (key.isascii() and key.isdigit() and str(int(key)) == key):
                raise SparkOptionError(option, f"{expected} (partition '{key}' of topic "
                                       f"'{topic}' is not a partition number)")
            if not _is_int(number):
                raise SparkOptionError(option, f"{expected} (the value for {topic}-{key} is "
                                       f"not an integer)")
            result[TopicPartition(topic, int(key))] = number
    return result


def _is_int(value: object) -> bool:
    # bool is an int subclass in Python, and true is no offset.
    return isinstance(value, int) and not isinstance(value, bool)
