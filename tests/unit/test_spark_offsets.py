"""Spark's per-topic-partition offsets JSON (tidelog/spark/offsets.py).

Parsing accepts exactly Spark's shapes (offsets with -2/-1, timestamps, assignments) and names
the option in every error; serialisation is Spark's (sorted, no spaces) and round-trips, which
is what a streaming query's checkpoint relies on: a seeded property test over random offset
maps, through the JSON text and through the dict PySpark hands back.
"""

from __future__ import annotations

import json
import random

import pytest

from tidelog.spark.offsets import (
    EARLIEST,
    LATEST,
    SparkOptionError,
    TopicPartition,
    assignment_from_json,
    offsets_from_dict,
    offsets_from_json,
    offsets_to_dict,
    offsets_to_json,
    timestamps_from_json,
)


def test_spark_example_parses() -> None:
    parsed = offsets_from_json('{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}')
    assert parsed == {TopicPartition("topicA", 0): 23, TopicPartition("topicA", 1): LATEST,
                      TopicPartition("topicB", 0): EARLIEST}
    assert offsets_from_json("{}") == {}


def test_serialisation_is_sorted_and_compact_as_spark_writes_it() -> None:
    offsets = {TopicPartition("b", 10): 7, TopicPartition("b", 2): 5, TopicPartition("a", 0): 1}
    assert offsets_to_json(offsets) == '{"a":{"0":1},"b":{"2":5,"10":7}}'
    assert offsets_to_dict(offsets) == {"a": {"0": 1}, "b": {"2": 5, "10": 7}}


def test_round_trips_through_text_and_dict() -> None:
    """Seeded and bounded: 300 random maps (odd topic names, large offsets, -2/-1)."""
    rng = random.Random(1212)
    names = ["t", "orders.eu", "a-b_c", "ünïcode", "x" * 200, "1"]
    for _ in range(300):
        offsets = {TopicPartition(rng.choice(names), rng.randrange(0, 1000)):
                   rng.choice([EARLIEST, LATEST, 0, rng.randrange(0, 2**63)])
                   for _ in range(rng.randrange(0, 12))}
        text = offsets_to_json(offsets)
        assert offsets_from_json(text) == offsets
        assert offsets_from_dict(json.loads(text)) == offsets
        assert offsets_to_json(offsets_from_json(text)) == text


@pytest.mark.parametrize(("text", "words"), [
    ("[1,2]", "got [1,2]"),
    ('{"t":[0,1]}', "got"),
    ('{"t":{"x":1}}', "partition 'x' of topic 't' is not a partition number"),
    ('{"t":{"-1":1}}', "partition '-1'"),
    ('{"t":{"01":1}}', "partition '01'"),
    ('{"t":{"0":1.5}}', "the value for t-0 is not an integer"),
    ('{"t":{"0":true}}', "the value for t-0 is not an integer"),
    ('{"t":{"0":"5"}}', "the value for t-0 is not an integer"),
    ('{"":{"0":5}}', "expected e.g."),
    ('{"t":{"0":-7}}', "offset -7 for t-0 is invalid"),
    ("not json", "got not json"),
])
def test_bad_offsets_name_the_option(text: str, words: str) -> None:
    with pytest.raises(SparkOptionError) as caught:
        offsets_from_json(text, option="endingOffsets")
    assert caught.value.option == "endingOffsets"
    assert "option 'endingOffsets'" in str(caught.value) and words in str(caught.value)


def test_a_checkpointed_dict_that_is_not_offsets_is_refused() -> None:
    with pytest.raises(SparkOptionError, match="offsets"):
        offsets_from_dict({"t": 5}, option="offsets")


def test_timestamps_and_assignments() -> None:
    assert timestamps_from_json('{"t":{"1":1000}}', option="startingOffsetsByTimestamp") == {
        TopicPartition("t", 1): 1000}
    assert assignment_from_json('{"b":[1],"a":[3,0]}') == (
        TopicPartition("a", 0), TopicPartition("a", 3), TopicPartition("b", 1))
    with pytest.raises(SparkOptionError, match="timestamp -1 for t-1 is negative"):
        timestamps_from_json('{"t":{"1":-1}}', option="startingOffsetsByTimestamp")
    with pytest.raises(SparkOptionError, match=r"assign.*expected e\.g\."):
        assignment_from_json('{"t":[-1]}')
    with pytest.raises(SparkOptionError, match=r"assign.*expected e\.g\."):
        assignment_from_json('{"t":0}')


def test_topic_partition_equals_the_clients() -> None:
    from tidelog.client.records import TopicPartition as ClientTopicPartition

    assert TopicPartition("t", 3) == ClientTopicPartition("t", 3)
    assert str(TopicPartition("t", 3)) == "t-3"
