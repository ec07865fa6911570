"""Batch reads through ``spark.read.format("tidelog")`` against a real cluster.

What it checks: the schema is Spark's Kafka schema field for field; a read returns exactly the
produced records (keys, values, headers, topic, partition, offsets, timestamps and their type)
for every offset-option form (earliest/latest, per-partition JSON with -2/-1, timestamps global
and per partition, subscribePattern, assign); minPartitions and maxRecordsPerPartition split
ranges and each record is still read once; only records below the high watermark are read; and
each bad option fails the query with a message naming it.

How: the session and the cluster of conftest.py; each test makes its own topic, produces with
acks=all and compares what Spark reads with the producer's RecordMetadata.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.integration

Produce = Callable[[str, list[tuple[Any, ...]]], list[Any]]
#: Record timestamps are T0 + 10 * i: recent, so that retention (7 days) keeps them.
T0 = (int(time.time() * 1000) // 100_000 - 1) * 100_000


def kafka_schema(headers: bool) -> Any:
    """Spark's Kafka source schema as Spark's KafkaRecordToRowConverter defines it."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if headers:
        fields.append(StructField("headers", ArrayType(StructType(
            [StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


def reader(spark: Any, bootstrap: str, **options: str) -> Any:
    read = spark.read.format("tidelog").option("bootstrap.servers", bootstrap)
    for name, value in options.items():
        read = read.option(name, value)
    return read


def rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted((r.topic, r.partition, r.offset, r.key, r.value) for r in df.collect())


@pytest.fixture(scope="module")
def events(new_topic: Callable[..., str], produce: Produce) -> tuple[str, list[Any]]:
    """Topic with 2 partitions and 20 records each, timestamps T0 + 10 * i, one header."""
    topic = new_topic("spark-batch")
    records = [(f"k{i}".encode(), f"v{i}".encode(), i % 2, [("n", str(i).encode())],
                T0 + 10 * i) for i in range(40)]
    return topic, produce(topic, records)


def test_schema_is_sparks_kafka_schema(spark: Any, bootstrap: str) -> None:
    plain = reader(spark, bootstrap, subscribe="any").load()
    with_headers = reader(spark, bootstrap, subscribe="any", includeHeaders="true").load()
    assert plain.schema == kafka_schema(headers=False)
    assert with_headers.schema == kafka_schema(headers=True)


def test_read_returns_exactly_the_produced_records(spark: Any, bootstrap: str,
                                                   events: tuple[str, list[Any]]) -> None:
    topic, sent = events
    got = reader(spark, bootstrap, subscribe=topic, includeHeaders="true").load().collect()
    assert len(got) == 40
    by_offset = {(r.partition, r.offset): r for r in got}
    for i, meta in enumerate(sent):
        row = by_offset[(meta.partition, meta.offset)]
        assert (row.key, row.value, row.topic) == (f"k{i}".encode(), f"v{i}".encode(), topic)
        assert [(h.key, h.value) for h in row.headers] == [("n", str(i).encode())]
        assert int(row.timestamp.timestamp() * 1000) == T0 + 10 * i
        assert row.timestampType == 0
    # Offsets are each partition's 0..19, in order.
    for partition in (0, 1):
        assert sorted(r.offset for r in got if r.partition == partition) == list(range(20))


def test_offset_option_forms(spark: Any, bootstrap: str, events: tuple[str, list[Any]]) -> None:
    topic, _ = events
    everything = rows(reader(spark, bootstrap, subscribe=topic).load())
    assert len(everything) == 40

    def read(**options: str) -> list[tuple[Any, ...]]:
        return rows(reader(spark, bootstrap, subscribe=topic, **options).load())

    assert read(startingOffsets="earliest", endingOffsets="latest") == everything
    spec = json.dumps({topic: {"0": 5, "1": -2}})
    end = json.dumps({topic: {"0": 15, "1": -1}})
    expected = [r for r in everything if (r[1] == 0 and 5 <= r[2] < 15) or r[1] == 1]
    assert read(startingOffsets=spec, endingOffsets=end) == expected
    # Partition 0 holds the even records (timestamp T0 + 20 * j for offset j), partition 1
    # the odd ones (T0 + 10 + 20 * j): the first record at or after T0 + 200 is offset 10 in
    # both.
    assert read(startingTimestamp=str(T0 + 200)) == [r for r in everything if r[2] >= 10]
    by_ts = json.dumps({topic: {"0": T0, "1": T0 + 390}})
    assert read(startingOffsetsByTimestamp=by_ts) == \
        [r for r in everything if r[1] == 0 or r[2] >= 19]
    assert read(endingTimestamp=str(T0 + 100)) == [r for r in everything if r[2] < 5]
    pattern = topic.replace("batch", "b.t.h")
    assert rows(reader(spark, bootstrap, subscribePattern=pattern).load()) == everything
    assign = json.dumps({topic: [1]})
    assert rows(reader(spark, bootstrap, assign=assign).load()) == \
        [r for r in everything if r[1] == 1]


def test_min_partitions_splits_and_reads_each_record_once(
        spark: Any, bootstrap: str, events: tuple[str, list[Any]]) -> None:
    topic, _ = events
    df = reader(spark, bootstrap, subscribe=topic, minPartitions="6").load()
    assert df.rdd.getNumPartitions() == 6
    got = rows(df)
    assert got == rows(reader(spark, bootstrap, subscribe=topic).load())
    assert len(set(got)) == 40
    capped = reader(spark, bootstrap, subscribe=topic, maxRecordsPerPartition="3").load()
    assert capped.rdd.getNumPartitions() == 14     # ceil(20 / 3) = 7 per partition
    assert rows(capped) == got


def test_empty_topic_and_missing_topic_read_nothing(spark: Any, bootstrap: str,
                                                    new_topic: Callable[..., str]) -> None:
    topic = new_topic("spark-empty")
    assert reader(spark, bootstrap, subscribe=topic).load().count() == 0
    assert reader(spark, bootstrap, subscribe="spark-no-such-topic").load().count() == 0


def test_reads_stop_at_the_high_watermark(spark: Any, bootstrap: str,
                                          events: tuple[str, list[Any]]) -> None:
    topic, _ = events
    end = json.dumps({topic: {"0": 1_000, "1": -1}})
    got = rows(reader(spark, bootstrap, subscribe=topic, endingOffsets=end).load())
    assert len(got) == 40


BAD_OPTIONS = [
    ({"subscrib": "t"}, "unknown option 'subscrib'"),
    ({"subscribe": "t", "assign": '{"t":[0]}'}, "Only one of the following options"),
    ({"kafka.bootstrap.servers": "x:1", "subscribe": "t"}, "no 'kafka.' prefix"),
    ({"subscribe": "t", "startingOffsets": "latest"}, "starting offset can't be latest"),
    ({"subscribe": "t", "endingOffsets": "earliest"}, "ending offset can't be earliest"),
    ({"subscribe": "t", "startingOffsets": "{bad"}, "startingOffsets"),
    ({"subscribe": "t", "minPartitions": "0"}, "minPartitions must be positive"),
    ({"subscribe": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({"subscribePattern": "(", }, "not a valid regular expression"),
    ({"assign": "[1]"}, "No topicpartitions to assign"),
    ({"subscribe": "t", "groupIdPrefix": "g"}, "not supported"),
]


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
def test_bad_option_fails_with_its_message(spark: Any, bootstrap: str, options: dict[str, str],
                                           message: str) -> None:
    read = spark.read.format("tidelog")
    if "kafka.bootstrap.servers" not in options:
        read = read.option("bootstrap.servers", bootstrap)
    for name, value in options.items():
        read = read.option(name, value)
    with pytest.raises(Exception) as failure:
        read.load().collect()
    assert message in str(failure.value)
    assert "SparkOptionError" in str(failure.value)


def test_missing_bootstrap_servers_is_named(spark: Any) -> None:
    with pytest.raises(Exception, match=r"Option 'bootstrap\.servers' must be specified"):
        spark.read.format("tidelog").option("subscribe", "t").load().collect()


def test_a_named_partition_that_does_not_exist_is_data_loss(
        spark: Any, bootstrap: str, events: tuple[str, list[Any]]) -> None:
    topic, _ = events
    assign = json.dumps({topic: [0, 7]})
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader(spark, bootstrap, assign=assign).load().collect()
    lenient = reader(spark, bootstrap, assign=assign, failOnDataLoss="false").load()
    assert len(rows(lenient)) == 20
