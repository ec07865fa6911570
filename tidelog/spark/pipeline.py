"""``make pipeline``: a Structured Streaming job from one Tidelog topic to another.

On the local cluster of ``make run`` (reused when it runs), it recreates topics ``page-views``
and ``page-view-counts`` (compacted), produces 2,000 JSON page views keyed by user, and runs a
streaming query with ``trigger(availableNow=True)``: ``readStream.format("tidelog")`` → parse →
1-minute watermark → views per (1-minute window, page) → back to Tidelog in update mode. It
reads the counts back (latest value per key, as compaction keeps) and checks every event is
counted once; then produces 500 more and reruns the query from its checkpoint: it reads only
the new events and updates the counts of the window they share with the first ones.

pyspark is imported inside the functions that use it: importing this module needs no Spark.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidelog import Admin, NewTopic, Producer, TidelogError
from tidelog.local_cluster import LocalCluster

RUN_DIR = Path(".tidelog/run")  # the cluster `make run` starts and `make stop` stops
CHECKPOINT = Path(".tidelog/pipeline/checkpoint")
INPUT_TOPIC = "page-views"
OUTPUT_TOPIC = "page-view-counts"
PARTITIONS = 3
FIRST_EVENTS = 2_000
MORE_EVENTS = 500
USERS = 50
PAGES = ("/", "/blog", "/docs", "/pricing", "/signup")
SEED = 7
MINUTE_MS = 60_000
WAIT_S = 30.0

# pyspark's types, named for the signatures below (pyspark is only imported inside functions).
SparkSession = Any
DataFrame = Any
Counts = dict[str, dict[str, int]]  # window ("07:24-07:25") -> page -> views


def say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def start_or_reuse_cluster() -> str:
    """The bootstrap address of the ``make run`` cluster, started here when it is not running."""
    if (RUN_DIR / "cluster.json").exists():
        cluster = LocalCluster.load(RUN_DIR)
        if all(cluster.is_running(name) for name in cluster.nodes):
            say(f"reusing the running cluster in {RUN_DIR}")
            cluster.wait_ready()
            return cluster.bootstrap
        cluster.down()  # a partly running leftover: start afresh, as `make run` does
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    say(f"starting 3 controllers and 3 brokers as local processes in {RUN_DIR}")
    cluster = LocalCluster.create(RUN_DIR, controllers=3, brokers=3)
    cluster.start_all()
    cluster.wait_ready()
    return cluster.bootstrap


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except TidelogError:
            pass  # e.g. a broker that has not learned of a new topic yet: ask again
        time.sleep(0.2)
    sys.exit(f"FAILED: timed out after {WAIT_S:.0f}s waiting for {what}")


def reset_topics(bootstrap: str) -> None:
    """Fresh topics and no checkpoint. The checkpoint goes too: it holds offsets of the old
    topics, which recreated topics do not have (the query would fail with a data-loss error)."""
    shutil.rmtree(CHECKPOINT.parent, ignore_errors=True)
    names = [INPUT_TOPIC, OUTPUT_TOPIC]
    with Admin(bootstrap) as admin:
        existing = [name for name in names if name in admin.list_topics()]
        if existing:
            say(f"deleting {' and '.join(existing)} from an earlier run")
            admin.delete_topics(existing).all()
            wait_until(lambda: not set(existing) & set(admin.list_topics()), "topic deletion")
        say(f"creating {INPUT_TOPIC} and {OUTPUT_TOPIC} (compacted): {PARTITIONS} partitions, "
            "RF=3, min.insync.replicas=2")
        admin.create_topics([
            NewTopic(INPUT_TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                     configs={"min.insync.replicas": "2"}),
            # Compacted: the query writes a new value for a (window, page) key at each update
            # of its count, and compaction keeps the latest, one count per key.
            NewTopic(OUTPUT_TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                     configs={"cleanup.policy": "compact", "min.insync.replicas": "2"}),
        ]).all()
        wait_until(lambda: all(p.leader >= 0 for d in admin.describe_topics(names).all().values()
                               for p in d.partitions), "partition leaders")


def produce_views(bootstrap: str, rng: random.Random, count: int, start_ms: int,
                  minutes: int) -> None:
    """``count`` page views with event times spread over ``minutes`` from ``start_ms``, keyed
    by user. The record timestamp is the event time, so Spark's ``timestamp`` column is too."""
    with Producer(bootstrap, acks="all") as producer:
        futures = []
        for _ in range(count):
            user = f"u{rng.randrange(USERS)}"
            ts = start_ms + rng.randrange(minutes * MINUTE_MS)
            event = {"user": user, "page": rng.choice(PAGES), "ts": ts}
            futures.append(producer.send(INPUT_TOPIC, json.dumps(event).encode(),
                                         key=user.encode(), timestamp_ms=ts))
        producer.flush()
    failed = sum(1 for f in futures if f.exception() is not None)
    if failed:
        sys.exit(f"FAILED: {failed} of {count} events were not acknowledged")
    first, last = (time.strftime("%H:%M", time.gmtime(ms / 1000))
                   for ms in (start_ms, start_ms + minutes * MINUTE_MS))
    print(f"{count:,} events acknowledged (acks=all), event times {first} to {last} UTC")


def spark_session() -> SparkSession:
    # Spark's Python workers must run this interpreter (it has tidelog installed), and the
    # machine's hostname may not resolve: Spark binds to loopback.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from tidelog.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("tidelog-pipeline")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")  # the default 200 is for clusters
             .config("spark.sql.session.timeZone", "UTC")  # window keys the same everywhere
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)  # format("tidelog") for this session
    return spark


def views_per_minute(spark: SparkSession, bootstrap: str) -> DataFrame:
    """The streaming counts, as the sink's ``key`` and ``value`` columns: one row per
    (window, page) whose count a micro-batch changed."""
    from pyspark.sql import functions as F

    views = (spark.readStream.format("tidelog")
             .option("bootstrap.servers", bootstrap)
             .option("subscribe", INPUT_TOPIC)
             .option("startingOffsets", "earliest")  # a new query reads the topic from the start
             .load())
    event = F.from_json(F.col("value").cast("string"), "user STRING, page STRING, ts LONG")
    counts = (views.select(event.alias("event"), "timestamp")
              # Events over a minute behind the latest one seen are dropped, so Spark can drop a
              # window's state once the watermark passes its end.
              .withWatermark("timestamp", "1 minute")
              .groupBy(F.window("timestamp", "1 minute"), F.col("event.page").alias("page"))
              .count())
    return counts.select(
        F.concat(F.col("window.start").cast("string"), F.lit("|"), "page").alias("key"),
        F.to_json(F.struct(F.col("window.start").alias("start"),
                           F.col("window.end").alias("end"), "page", "count")).alias("value"))


def run_query(spark: SparkSession, bootstrap: str) -> int:
    """Run the query until it has processed what the input topic holds now (availableNow);
    the number of input rows it read."""

    def write_updates(updates: DataFrame, batch_id: int) -> None:
        # Spark refuses outputMode("update") for every Python data source sink ("tidelog does
        # not support Update mode"), so each micro-batch's updated rows go through the batch
        # sink: the records writeStream.format("tidelog") would write, at-least-once as there.
        (updates.write.format("tidelog")
         .option("bootstrap.servers", bootstrap)
         .option("topic", OUTPUT_TOPIC)
         .mode("append")
         .save())

    query = (views_per_minute(spark, bootstrap).writeStream
             .foreachBatch(write_updates)
             # The offsets read and the counts so far live here: a rerun continues from them.
             .option("checkpointLocation", str(CHECKPOINT))
             .outputMode("update")  # each micro-batch writes only the counts it changed
             .trigger(availableNow=True)
             .start())
    query.awaitTermination()
    progress = query.recentProgress
    rows = int(sum(p.numInputRows for p in progress))
    print(f"query done: {len(progress)} micro-batches, {rows:,} input rows")
    return rows


def latest_counts(spark: SparkSession, bootstrap: str) -> Counts:
    """The output topic read as a table, the latest value per key as compaction will leave it
    (the highest offset wins: a key always goes to the same partition)."""
    from pyspark.sql import functions as F

    written = (spark.read.format("tidelog")
               .option("bootstrap.servers", bootstrap)
               .option("subscribe", OUTPUT_TOPIC)
               .load())
    latest = written.groupBy("key").agg(F.max_by("value", "offset").alias("value"))
    schema = "start TIMESTAMP, end TIMESTAMP, page STRING, count LONG"
    rows = latest.select(F.from_json(F.col("value").cast("string"), schema).alias("c")).collect()
    counts: Counts = {}
    for row in rows:
        window = f"{row.c.start:%H:%M}-{row.c.end:%H:%M}"
        counts.setdefault(window, {})[row.c.page] = row.c["count"]  # row.count is tuple.count
    print(f"{written.count():,} records in {OUTPUT_TOPIC}, {len(rows)} keys")
    return counts


def show(counts: Counts, before: Counts | None = None) -> None:
    """One line per window, one column per page; ``*`` marks a count the rerun changed."""
    print(f"  {'WINDOW (UTC)':<12}" + "".join(f"{page:>10}" for page in PAGES) + f"{'ALL':>7}")
    for window in sorted(counts):
        cells = ""
        for page in PAGES:
            count = counts[window].get(page, 0)
            changed = before is not None and before.get(window, {}).get(page) not in (None, count)
            cells += f"{count:>9}{'*' if changed else ' '}"
        print(f"  {window:<12}{cells}{sum(counts[window].values()):>7}")


def check(what: str, got: int, expected: int) -> None:
    if got != expected:
        sys.exit(f"FAILED: {what}: {got:,}, expected {expected:,}")
    print(f"ok: {what}: {got:,}")


def main() -> None:
    started = time.monotonic()
    bootstrap = start_or_reuse_cluster()
    reset_topics(bootstrap)
    rng = random.Random(SEED)  # the same events, and so the same counts, on every run
    # Event times in whole minutes from 10 minutes ago: recent enough for the topic's retention.
    start_ms = (int(time.time() * 1000) // MINUTE_MS - 10) * MINUTE_MS

    say(f"producing {FIRST_EVENTS:,} page views to {INPUT_TOPIC}, over 5 minutes")
    produce_views(bootstrap, rng, FIRST_EVENTS, start_ms, minutes=5)

    say("starting Spark (local[2]) and the streaming query, trigger availableNow")
    spark = spark_session()
    try:
        check("input rows read", run_query(spark, bootstrap), FIRST_EVENTS)
        say(f"views per minute and page in {OUTPUT_TOPIC} (latest value per key)")
        first = latest_counts(spark, bootstrap)
        show(first)
        check("views counted", sum(sum(c.values()) for c in first.values()), FIRST_EVENTS)

        # The new events start in the last minute of the first ones: that window's counts get
        # new values (the watermark has not passed it, Spark still has its state).
        say(f"producing {MORE_EVENTS} more page views, then the same query from its checkpoint")
        produce_views(bootstrap, rng, MORE_EVENTS, start_ms + 4 * MINUTE_MS, minutes=3)
        check("input rows read (only the new events)", run_query(spark, bootstrap), MORE_EVENTS)
        say(f"views per minute and page in {OUTPUT_TOPIC} after the rerun (* = updated)")
        after = latest_counts(spark, bootstrap)
        show(after, before=first)
        check("views counted (each event once)", sum(sum(c.values()) for c in after.values()),
              FIRST_EVENTS + MORE_EVENTS)
    finally:
        spark.stop()

    say(f"done in {time.monotonic() - started:.0f}s; the cluster keeps running")
    print(f"  bootstrap servers: {bootstrap}")
    print(f"  the query's checkpoint: {CHECKPOINT}")
    print(f"stop the cluster with:  make stop   (or tidelog cluster down --dir {RUN_DIR})")


if __name__ == "__main__":
    main()
