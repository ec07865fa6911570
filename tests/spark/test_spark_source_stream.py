"""Streaming reads through ``spark.readStream.format("tidelog")`` against a real cluster.

What it checks: a query with the availableNow trigger reads what is there, and restarted from
its checkpoint reads exactly what was produced in between (no record twice, none missed);
maxOffsetsPerTrigger bounds each micro-batch; a running query (processing-time trigger) picks up
partitions added to its topic and new topics matching its pattern, from their first offset;
offsets removed by retention before the query read them fail the query with
``failOnDataLoss=true`` and are skipped with ``false``; and streaming-only option rules.

How: queries write to Parquet files (a sink that restarts from a checkpoint) in the test's tmp
dir, or to the memory sink where no restart is needed; the session and cluster of conftest.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for

from tidelog.client import Admin, ConfigResource, TopicPartition

pytestmark = pytest.mark.integration

Produce = Callable[[str, list[tuple[Any, ...]]], list[Any]]


def stream(spark: Any, bootstrap: str, **options: str) -> Any:
    read = spark.readStream.format("tidelog").option("bootstrap.servers", bootstrap)
    for name, value in options.items():
        read = read.option(name, value)
    return read.load()


def run_available_now(df: Any, out: Path, checkpoint: Path) -> list[int]:
    """Run the query to the end of what is available; each micro-batch's input row count."""
    query = (df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive, "the availableNow query did not finish in 120 s"
    if query.exception() is not None:
        raise AssertionError(f"query failed: {query.exception()}")
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


def values(spark: Any, out: Path) -> list[str]:
    return sorted(r.value for r in spark.read.parquet(str(out)).collect())


def records(prefix: str, count: int, partitions: int = 2) -> list[tuple[Any, ...]]:
    return [(None, f"{prefix}{i}".encode(), i % partitions, None, None) for i in range(count)]


def test_available_now_restart_reads_only_what_is_new(
        spark: Any, bootstrap: str, new_topic: Callable[..., str], produce: Produce,
        tmp_path: Path) -> None:
    topic = new_topic("spark-stream")
    produce(topic, records("a", 30))
    df = stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert sum(run_available_now(df, out, checkpoint)) == 30
    assert values(spark, out) == sorted(f"a{i}" for i in range(30))

    produce(topic, records("b", 20))
    assert sum(run_available_now(df, out, checkpoint)) == 20
    assert values(spark, out) == sorted([f"a{i}" for i in range(30)] +
                                        [f"b{i}" for i in range(20)])
    # Nothing new: a third run reads nothing.
    assert sum(run_available_now(df, out, checkpoint)) == 0


def test_starting_offsets_latest_is_the_default(
        spark: Any, bootstrap: str, new_topic: Callable[..., str], produce: Produce,
        tmp_path: Path) -> None:
    topic = new_topic("spark-latest")
    produce(topic, records("old", 10))
    df = stream(spark, bootstrap, subscribe=topic)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert sum(run_available_now(df, out, checkpoint)) == 0
    produce(topic, records("new", 4))
    assert sum(run_available_now(df, out, checkpoint)) == 4
    assert values(spark, out) == [f"new{i}" for i in range(4)]


def test_max_offsets_per_trigger_bounds_each_micro_batch(
        spark: Any, bootstrap: str, new_topic: Callable[..., str], produce: Produce,
        tmp_path: Path) -> None:
    topic = new_topic("spark-rate")
    produce(topic, records("r", 50))
    df = stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest",
                maxOffsetsPerTrigger="10")
    batches = run_available_now(df, tmp_path / "out", tmp_path / "checkpoint")
    assert sum(batches) == 50
    assert len(batches) >= 5 and max(batches) <= 10, batches
    assert len(set(values(spark, tmp_path / "out"))) == 50


def test_running_query_picks_up_new_partitions_and_topics(
        spark: Any, bootstrap: str, admin: Admin, new_topic: Callable[..., str],
        produce: Produce) -> None:
    topic = new_topic("spark-grow", partitions=1)
    pattern = topic.rsplit("-", 1)[0] + "-.*"
    produce(topic, records("x", 5, partitions=1))
    query = (stream(spark, bootstrap, subscribePattern=pattern, startingOffsets="earliest")
             .selectExpr("topic", "partition", "CAST(value AS STRING) AS value")
             .writeStream.format("memory").queryName("grow")
             .trigger(processingTime="500 milliseconds").start())
    try:
        def seen() -> set[tuple[str, int, str]]:
            return {(r.topic, r.partition, r.value) for r in
                    spark.sql("SELECT * FROM grow").collect()}
        wait_for(lambda: len(seen()) == 5, "the first 5 records")
        admin.create_partitions({topic: 2}).all()
        wait_for(lambda: all(p.leader >= 0 for p in
                             admin.describe_topics([topic]).all()[topic].partitions)
                 and len(admin.describe_topics([topic]).all()[topic].partitions) == 2,
                 "the new partition's leader")
        produce(topic, [(None, b"y0", 1, None, None)])
        other = new_topic("spark-grow", partitions=1)
        produce(other, [(None, b"z0", 0, None, None)])
        wait_for(lambda: len(seen()) == 7, "records of the new partition and topic")
        assert (topic, 1, "y0") in seen() and (other, 0, "z0") in seen()
        assert query.exception() is None
    finally:
        query.stop()


def test_offsets_removed_by_retention_are_data_loss(
        spark: Any, bootstrap: str, admin: Admin, new_topic: Callable[..., str],
        produce: Produce, tmp_path: Path) -> None:
    topic = new_topic("spark-loss", partitions=1)
    produce(topic, records("kept", 10, partitions=1))
    df = stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert sum(run_available_now(df, out, checkpoint)) == 10

    admin.alter_configs({ConfigResource("topic", topic): {"retention.ms": "500"}}).all()
    produce(topic, records("gone", 10, partitions=1))
    time.sleep(0.6)
    wait_for(lambda: admin.list_offsets({_tp(topic): -2})[_tp(topic)] == 20,
             "retention to remove offsets 10 to 19")
    with pytest.raises(Exception, match="failOnDataLoss"):
        run_available_now(df, out, checkpoint)

    lenient = stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest",
                     failOnDataLoss="false")
    assert sum(run_available_now(lenient, out, checkpoint)) == 0
    assert values(spark, out) == sorted(f"kept{i}" for i in range(10))


def test_ending_offsets_are_refused_in_a_streaming_query(spark: Any, bootstrap: str) -> None:
    df = stream(spark, bootstrap, subscribe="t", endingOffsets="latest")
    with pytest.raises(Exception, match="ending offset not valid in streaming queries"):
        df.writeStream.format("memory").queryName("never").start().awaitTermination(30)


def _tp(topic: str) -> TopicPartition:
    return TopicPartition(topic, 0)
