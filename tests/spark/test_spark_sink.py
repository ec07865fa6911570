"""Writes through ``df.write/writeStream.format("tidelog")``, read back, against a real cluster.

What it checks: a batch write of key/value/partition/headers columns lands as written (string
columns UTF-8 encoded, the ``topic`` option or a ``topic`` column routing rows, null values as
tombstones); a streaming query from one topic to another, restarted from its checkpoint, writes
each input record once per run; a DataFrame without the columns the sink needs, or with wrong
types, is refused at planning with Spark's message naming the column; a record the broker
refuses fails the job with Tidelog's error (MESSAGE_TOO_LARGE here), and a null topic fails the
task with Spark's message.

How: the session and cluster of conftest.py; what was written is read back with the source.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

Produce = Callable[[str, list[tuple[Any, ...]]], list[Any]]


def write(df: Any, bootstrap: str, **options: str) -> None:
    out = df.write.format("tidelog").option("bootstrap.servers", bootstrap).mode("append")
    for name, value in options.items():
        out = out.option(name, value)
    out.save()


def read_back(spark: Any, bootstrap: str, topic: str) -> list[Any]:
    return sorted(spark.read.format("tidelog").option("bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("includeHeaders", "true").load().collect(),
                  key=lambda r: (r.partition, r.offset))


def test_batch_write_lands_as_written(spark: Any, bootstrap: str,
                                      new_topic: Callable[..., str]) -> None:
    topic = new_topic("spark-sink")
    df = spark.createDataFrame(
        [(f"k{i}", f"v{i}".encode(), i % 2, [("h", f"{i}".encode())]) for i in range(100)],
        "key string, value binary, partition int, headers array<struct<key: string, "
        "value: binary>>").repartition(3)
    write(df, bootstrap, topic=topic)
    got = read_back(spark, bootstrap, topic)
    assert len(got) == 100
    for row in got:
        i = int(row.key.decode()[1:])
        assert (row.value, row.partition) == (f"v{i}".encode(), i % 2)
        assert [(h.key, h.value) for h in row.headers] == [("h", f"{i}".encode())]
    for partition in (0, 1):
        assert [r.offset for r in got if r.partition == partition] == list(range(50))


def test_topic_column_routes_rows_and_null_values_are_tombstones(
        spark: Any, bootstrap: str, new_topic: Callable[..., str]) -> None:
    first, second = new_topic("spark-route"), new_topic("spark-route")
    df = spark.createDataFrame([(first, "a", "1"), (second, "b", None), (first, "c", "3")],
                               "topic string, key string, value string")
    write(df, bootstrap)
    assert sorted((r.key, r.value) for r in read_back(spark, bootstrap, first)) == \
        [(b"a", b"1"), (b"c", b"3")]
    assert [(r.key, r.value) for r in read_back(spark, bootstrap, second)] == [(b"b", None)]


def test_streaming_write_restarted_writes_each_record_once(
        spark: Any, bootstrap: str, new_topic: Callable[..., str], produce: Produce,
        tmp_path: Path) -> None:
    source, sink = new_topic("spark-pipe-in"), new_topic("spark-pipe-out")
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        query = (spark.readStream.format("tidelog").option("bootstrap.servers", bootstrap)
                 .option("subscribe", source).option("startingOffsets", "earliest").load()
                 .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
                 .writeStream.format("tidelog").option("bootstrap.servers", bootstrap)
                 .option("topic", sink).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert not query.isActive and query.exception() is None

    produce(source, [(f"k{i}".encode(), f"v{i}".encode(), i % 2, None, None)
                     for i in range(20)])
    run()
    produce(source, [(b"late", b"w", 0, None, None)])
    run()
    got = sorted((r.key, r.value) for r in read_back(spark, bootstrap, sink))
    assert got == sorted([(f"k{i}".encode(), f"V{i}".encode()) for i in range(20)] +
                         [(b"late", b"W")])


BAD_SCHEMAS = [
    ("key string", {"topic": "t"}, "Required attribute 'value' not found"),
    ("value string", {}, "topic option required when no 'topic' attribute is present"),
    ("value int", {"topic": "t"}, "value attribute type must be a string or binary"),
    ("value string, key array<int>", {"topic": "t"}, "key attribute type must be a string"),
    ("value string, partition string", {"topic": "t"}, "partition attribute type must be an int"),
    ("value string, topic int", {}, "topic attribute type must be a string"),
    ("value string, headers array<string>", {"topic": "t"}, "headers attribute type must be"),
    ("value string", {"topic": " "}, "option 'topic' is empty"),
    ("value string", {"topic": "t", "acks": "1"}, "unknown option 'acks'"),
]


@pytest.mark.parametrize(("ddl", "options", "message"), BAD_SCHEMAS)
def test_bad_dataframe_or_option_is_refused_naming_it(
        spark: Any, bootstrap: str, ddl: str, options: dict[str, str], message: str) -> None:
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception) as failure:
        write(df, bootstrap, **options)
    assert message in str(failure.value)


def test_a_refused_record_fails_the_job_with_tidelogs_error(
        spark: Any, bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic("spark-small", **{"max.message.bytes": "2000"})
    df = spark.createDataFrame([("x" * 10_000,)], "value string")
    with pytest.raises(Exception) as failure:
        write(df, bootstrap, topic=topic)
    assert "MessageTooLargeError" in str(failure.value)
    assert "Tidelog sink: writing a record failed" in str(failure.value)


def test_a_null_topic_fails_the_task_with_sparks_message(spark: Any, bootstrap: str) -> None:
    df = spark.createDataFrame([(None, "v")], "topic string, value string")
    with pytest.raises(Exception, match="null topic present in the data"):
        write(df, bootstrap)


def test_save_modes_append_only(spark: Any, bootstrap: str,
                                new_topic: Callable[..., str]) -> None:
    topic = new_topic("spark-modes")
    df = spark.createDataFrame([("v",)], "value string")
    for _ in range(2):
        write(df, bootstrap, topic=topic)
    assert [r.value for r in read_back(spark, bootstrap, topic)] == [b"v", b"v"]
    # Spark's default (errorifexists) is refused by Spark itself for Python data sources.
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        df.write.format("tidelog").option("bootstrap.servers", bootstrap) \
            .option("topic", topic).save()
    with pytest.raises(Exception, match="Save mode Overwrite not allowed for Tidelog"):
        (df.write.format("tidelog").option("bootstrap.servers", bootstrap)
         .option("topic", "t").mode("overwrite").save())
