"""Spark source and sink benchmark against a local 3-controller + 3-broker cluster.

``python -m bench.spark [--records 1000000] [--partitions 6] [--replication-factor 1]
[--phases source,sink,pieces]`` starts the cluster as local processes and a ``local[2]``
SparkSession in this process, then measures in the same run (100-byte values, every client on
its default configs unless labelled otherwise):

* **load** (info, not a headline): ``--records`` keyless values written with
  ``Producer.send_many`` (1,000 values per call), acks=all, to a topic of ``--partitions``
  partitions at ``--replication-factor``. The defaults are the layout of
  ``bench.produce_consume``'s consume figure (its topic ``rf1``: 6 partitions, RF 1), so the
  Consumer figure here is comparable with that one.
* **source** (headline): a batch read of the whole topic through ``format("tidelog")`` into
  Spark's ``noop`` sink (every row is read and converted, nothing is collected to the driver),
  timed from ``load()`` to the end of the job; run twice, cold (the session's first read: Python
  workers start, modules are imported) and warm (the headline). Between the two, the same
  records read by the Python ``Consumer`` in this process (assign every partition, seek to the
  beginning, poll until all are read): the comparison figure, taken between the two source runs
  so that both see the same machine. Then, labelled: the Consumer with ``max_poll_records=10000``
  (what bench.produce_consume uses), the source with ``minPartitions=2``
  when the topic has fewer partitions than Spark has cores, and a ``count()`` of the source that
  checks every record was read.
* **sink** (headline): ``--sink-records`` rows built in Spark (``spark.range`` over 2 partitions,
  ``key`` the id as a string, ``value`` 100 bytes) written with ``df.write.format("tidelog")``
  to a new topic of the same layout; warmed up with a small write to another topic first, then
  timed; checked by the topic's end offsets summing to the rows written. Labelled: the same rows
  without a key column.
* **pieces** (diagnostic, no Spark): what one source task does, run in this process over the
  partitions one after another: ``tidelog.spark.cluster.read_range`` whole, then its loop taken
  apart (time in ``Consumer.poll`` vs ``records_to_arrow``); and Spark's own cost of taking
  prebuilt Arrow batches of the source's schema from a Python data source into ``noop``.

Every timed figure also says where the CPU went, in µs per row, from ``/proc``: this process
(``driver``: the Consumer's figure), Spark's JVM and its Python workers (the processes this one
started that are not cluster nodes), the brokers, the controllers, and the rest of the machine's
busy time (``others``: load that is not this bench's). On a shared machine the rows/s move with
the others' load; the CPU per row much less.

Targets (the issue): the warm source ≥ 0.8 times the Consumer and ≥ 500,000 rows/s; the sink
≥ 200,000 rows/s. Servers, Spark's JVM, its Python workers and the Consumer share the machine's
cores. Every wait is bounded: the load and the Consumer reads by ``--seconds``, each Spark job by
a watchdog that cancels it after ``--job-seconds`` (Spark's planning before a job starts, in its
Python workers, is bounded by the source's own lookup timeouts); the cluster (stopped by pid)
and the session are always stopped.
Prints readable lines as it goes and a final JSON line with the figures, the targets met, and
the machine's state (cores, load average before and after).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

from tidelog import Admin, Consumer, NewTopic, Producer, TopicPartition
from tidelog.local_cluster import LocalCluster

VALUE = b"x" * 100
#: bench.produce_consume's consume figure reads its topic "rf1": 6 partitions, RF 1.
PARTITIONS = 6
REPLICATION_FACTOR = 1
SEND_MANY_VALUES = 1_000
SPARK_MASTER = "local[2]"
SPARK_CORES = 2
SINK_WARMUP_ROWS = 10_000
#: Rows per prebuilt Arrow batch of the pieces phase's in-memory source (the source's chunk).
ARROW_BATCH_ROWS = 10_000
POLL_MS = 500
TARGETS = {"source_rows_per_s": 500_000, "source_vs_consumer": 0.8,
           "sink_rows_per_s": 200_000}
PHASES = ("source", "sink", "pieces")


def _rate(rows: int, seconds: float) -> int:
    return round(rows / seconds) if seconds > 0 else 0


# ======================================================================= CPU accounting
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CPU_GROUPS = ("driver", "spark_jvm", "spark_python", "brokers", "controllers")


def _proc_stat(pid: str) -> tuple[int, float, float, str] | None:
    """(ppid, own CPU s, own + reaped children's CPU s, command name) of a process, None when
    it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            head, rest = f.read().rsplit(")", 1)
        fields = rest.split()
    except (OSError, ValueError):
        return None
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return int(fields[1]), (utime + stime) / _CLOCK_TICKS, \
        (utime + stime + cutime + cstime) / _CLOCK_TICKS, head.split("(", 1)[-1]


def _machine_busy_s() -> float:
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / _CLOCK_TICKS


def cpu_sample(cluster: LocalCluster) -> dict[str, float]:
    """CPU seconds used so far by this process (``driver``: its own threads, the Consumer's
    included), the cluster's brokers and controllers (by pid), everything else this process
    started (Spark: ``spark_jvm``, the JVM, and ``spark_python``, its Python workers; a reaped
    worker's time is in its parent's children's time), and the whole machine (``machine``)."""
    stats = {int(pid): st for pid in os.listdir("/proc") if pid.isdigit()
             and (st := _proc_stat(pid)) is not None}
    me = os.getpid()
    nodes = {spec.pid: ("brokers" if spec.is_broker else "controllers")
             for spec in cluster.nodes.values() if spec.pid}
    out = dict.fromkeys(CPU_GROUPS, 0.0)
    out["driver"] = stats[me][1] if me in stats else 0.0
    for pid, (ppid, _, total, name) in stats.items():
        group, up, hops = None, ppid, 0
        if pid in nodes:
            group = nodes[pid]
        # Climb to this process or a cluster node; bounded by the depth of the process tree.
        while group is None and up > 1 and hops < 64:
            if up in nodes:
                group = nodes[up]
            elif up == me:
                group = "spark_jvm" if name == "java" else "spark_python"
            else:
                up = stats[up][0] if up in stats else 0
                hops += 1
        if group is not None:
            out[group] += total
    out["machine"] = _machine_busy_s()
    return out


@contextlib.contextmanager
def cpu_meter(cluster: LocalCluster, into: dict[str, Any]) -> Iterator[None]:
    """Fill ``into`` with the CPU seconds each group used during the block, the machine's
    other load (``others``: busy time not ours), and the wall time."""
    before, started = cpu_sample(cluster), time.perf_counter()
    yield
    after, wall = cpu_sample(cluster), time.perf_counter() - started
    # A worker that exited between the samples and is not reaped yet takes its time with it
    # (a few tenths of a µs per row at most, seen here): a group never goes below zero.
    used = {k: round(max(0.0, after[k] - before[k]), 3) for k in after}
    used["others"] = round(max(0.0, used["machine"] - sum(used[k] for k in CPU_GROUPS)), 3)
    into.update(used, wall_s=round(wall, 3),
                machine_busy_share=round(used["machine"] / (wall * (os.cpu_count() or 1)), 3))


def cpu_per_row(cpu: dict[str, Any], rows: int) -> dict[str, float]:
    """Microseconds of CPU per row, per group, and ``ours`` (the four groups together)."""
    per = {k: round(cpu[k] / rows * 1e6, 2) for k in (*CPU_GROUPS, "others")}
    per["ours"] = round(sum(per[k] for k in CPU_GROUPS), 2)
    per["spark"] = round(per["spark_jvm"] + per["spark_python"], 2)
    return per


# ======================================================================= cluster side
def load(cluster: LocalCluster, topic: str, records: int, seconds: float) -> dict[str, Any]:
    """``records`` keyless 100-byte values through send_many, default producer configs."""
    values = [VALUE] * SEND_MANY_VALUES
    sent = 0
    cpu: dict[str, Any] = {}
    with Producer(cluster.bootstrap) as producer, cpu_meter(cluster, cpu):
        started = time.perf_counter()
        deadline = started + seconds
        # Bounded by the record count and the deadline.
        while sent < records and time.perf_counter() < deadline:
            chunk = min(SEND_MANY_VALUES, records - sent)
            producer.send_many(topic, values[:chunk])
            sent += chunk
        producer.flush()
        elapsed = time.perf_counter() - started
    return {"records": sent, "seconds": round(elapsed, 3), "records_per_s": _rate(sent, elapsed),
            "producer": "send_many, default configs (acks=all)", "cpu_s": cpu,
            "cpu_us_per_row": cpu_per_row(cpu, max(sent, 1))}


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    with Admin(bootstrap) as admin:
        found = admin.list_offsets({TopicPartition(topic, p): -1 for p in range(partitions)})
    return {tp.partition: offset for tp, offset in found.items()}


def consume(cluster: LocalCluster, topic: str, *, partitions: int, records: int,
            seconds: float, **config: Any) -> dict[str, Any]:
    """Read ``records`` from the beginning of every partition with one Consumer."""
    cpu: dict[str, Any] = {}
    with Consumer(cluster.bootstrap, **config) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        c.seek_to_beginning(*c.assignment())
        started = time.perf_counter()
        deadline = started + seconds
        got = 0
        with cpu_meter(cluster, cpu):
            # Bounded by the record count and the deadline.
            while got < records and time.perf_counter() < deadline:
                got += len(c.poll(timeout_ms=POLL_MS))
        elapsed = time.perf_counter() - started
    return {"records": got, "seconds": round(elapsed, 3), "rows_per_s": _rate(got, elapsed),
            "config": config or "defaults", "cpu_s": cpu,
            "cpu_us_per_row": cpu_per_row(cpu, max(got, 1))}


# ======================================================================= Spark side
def start_spark() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from tidelog.spark.datasource import register

    spark = (SparkSession.builder.master(SPARK_MASTER).appName("tidelog-bench-spark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(SPARK_CORES))
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


@contextlib.contextmanager
def watchdog(spark: Any, seconds: float, what: str) -> Iterator[None]:
    """Cancel every Spark job if the block takes longer than ``seconds`` (the job then fails)."""
    fired = threading.Event()

    def cancel() -> None:
        fired.set()
        spark.sparkContext.cancelAllJobs()

    timer = threading.Timer(seconds, cancel)
    timer.daemon = True
    timer.start()
    try:
        yield
    except Exception as error:
        if fired.is_set():
            raise TimeoutError(f"{what}: cancelled after {seconds:.0f} s") from error
        raise
    finally:
        timer.cancel()


def source_reader(spark: Any, bootstrap: str, topic: str, options: dict[str, str]) -> Any:
    reader = (spark.read.format("tidelog").option("bootstrap.servers", bootstrap)
              .option("subscribe", topic))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def source_read(spark: Any, cluster: LocalCluster, topic: str, *, records: int,
                job_seconds: float, label: str, **options: str) -> dict[str, Any]:
    """The whole topic through the source into Spark's noop sink, timed from load()."""
    bootstrap = cluster.bootstrap
    cpu: dict[str, Any] = {}
    started = time.perf_counter()
    with watchdog(spark, job_seconds, f"source read ({label})"), cpu_meter(cluster, cpu):
        df = source_reader(spark, bootstrap, topic, options).load()
        loaded = time.perf_counter() - started
        df.write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - started
    tasks = source_reader(spark, bootstrap, topic, options).load().rdd.getNumPartitions()
    return {"records": records, "seconds": round(elapsed, 3),
            "rows_per_s": _rate(records, elapsed), "spark_tasks": tasks,
            "load_call_s": round(loaded, 3), "options": options or "defaults", "cpu_s": cpu,
            "cpu_us_per_row": cpu_per_row(cpu, records)}


def source_count(spark: Any, bootstrap: str, topic: str, job_seconds: float) -> dict[str, Any]:
    started = time.perf_counter()
    with watchdog(spark, job_seconds, "source count"):
        count = source_reader(spark, bootstrap, topic, {}).load().count()
    return {"rows": count, "seconds": round(time.perf_counter() - started, 3)}


def sink_frame(spark: Any, rows: int, *, keyed: bool) -> Any:
    columns = ["CAST(repeat('x', 100) AS BINARY) AS value"]
    if keyed:
        columns.insert(0, "CAST(id AS STRING) AS key")
    return spark.range(rows, numPartitions=SPARK_CORES).selectExpr(*columns)


def sink_write(spark: Any, cluster: LocalCluster, topic: str, *, rows: int, partitions: int,
               keyed: bool, job_seconds: float) -> dict[str, Any]:
    """``rows`` rows built in Spark written to ``topic`` through the sink, timed; then the
    topic's end offsets are checked against the rows written."""
    bootstrap = cluster.bootstrap
    df = sink_frame(spark, rows, keyed=keyed)
    cpu: dict[str, Any] = {}
    started = time.perf_counter()
    with watchdog(spark, job_seconds, f"sink write to {topic}"), cpu_meter(cluster, cpu):
        (df.write.format("tidelog").option("bootstrap.servers", bootstrap)
         .option("topic", topic).mode("append").save())
    elapsed = time.perf_counter() - started
    in_log = sum(end_offsets(bootstrap, topic, partitions).values())
    return {"records": rows, "seconds": round(elapsed, 3), "rows_per_s": _rate(rows, elapsed),
            "keyed": keyed, "spark_tasks": SPARK_CORES, "records_in_topic": in_log,
            "verified": in_log == rows, "cpu_s": cpu, "cpu_us_per_row": cpu_per_row(cpu, rows)}


# ======================================================================= pieces (diagnostic)
def read_range_pieces(cluster: LocalCluster, topic: str, ends: dict[int, int]
                      ) -> dict[str, Any]:
    """One source task's code, in this process, over the partitions one after another: the
    whole read_range, then its loop with poll() and records_to_arrow() timed apart."""
    from tidelog.spark.arrow import records_to_arrow
    from tidelog.spark.cluster import POLL_WAIT_MS, READ_CHUNK_RECORDS, read_range
    from tidelog.spark.options import parse_source_options
    from tidelog.spark.ranges import InputRange

    bootstrap = cluster.bootstrap
    options = parse_source_options({"bootstrap.servers": bootstrap, "subscribe": topic},
                                   streaming=False)
    total = sum(ends.values())
    cpu: dict[str, Any] = {}
    started = time.perf_counter()
    rows = 0
    with cpu_meter(cluster, cpu):
        for partition, end in ends.items():
            for batch in read_range(InputRange(topic, partition, 0, end), options):
                rows += batch.num_rows
    whole_s = time.perf_counter() - started

    poll_s = arrow_s = open_s = 0.0
    split_rows = 0
    for partition, end in ends.items():
        t0 = time.perf_counter()
        tp = TopicPartition(topic, partition)
        consumer = Consumer(bootstrap, client_id="bench-pieces", auto_offset_reset="none",
                            max_poll_records=READ_CHUNK_RECORDS, fetch_max_wait_ms=POLL_WAIT_MS)
        try:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            open_s += time.perf_counter() - t0
            position = 0
            deadline = time.monotonic() + 120
            # Bounded by the partition's end and a deadline.
            while position < end and time.monotonic() < deadline:
                t0 = time.perf_counter()
                records = consumer.poll(timeout_ms=POLL_WAIT_MS)
                t1 = time.perf_counter()
                wanted = [r for r in records if r.offset < end]
                if wanted:
                    split_rows += records_to_arrow(wanted, topic=topic, partition=partition,
                                                   include_headers=False).num_rows
                poll_s += t1 - t0
                arrow_s += time.perf_counter() - t1
                position = consumer.position(tp)
        finally:
            consumer.close()
    split_s = poll_s + arrow_s + open_s
    return {
        "records": total,
        "read_range": {"rows": rows, "seconds": round(whole_s, 3),
                       "rows_per_s": _rate(rows, whole_s), "cpu_s": cpu,
                       "cpu_us_per_row": cpu_per_row(cpu, max(rows, 1))},
        "split": {"rows": split_rows, "seconds": round(split_s, 3),
                  "rows_per_s": _rate(split_rows, split_s),
                  "open_s": round(open_s, 3), "poll_s": round(poll_s, 3),
                  "records_to_arrow_s": round(arrow_s, 3),
                  "poll_us_per_row": round(poll_s / max(split_rows, 1) * 1e6, 3),
                  "records_to_arrow_us_per_row": round(arrow_s / max(split_rows, 1) * 1e6, 3)},
    }


def arrow_only_source(spark: Any, cluster: LocalCluster, *, records: int, partitions: int,
                      job_seconds: float) -> dict[str, Any]:
    """Spark's share: a Python data source that yields prebuilt Arrow batches of the source's
    schema (100-byte values, no cluster) into noop, warm (run twice, the second timed)."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from tidelog.spark.arrow import arrow_schema, source_schema_ddl

    def batch(rows: int, partition: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([
            pa.array([None] * rows, pa.binary()), pa.array([VALUE] * rows, pa.binary()),
            pa.array(["bench"] * rows, pa.string()), pa.array([partition] * rows, pa.int32()),
            pa.array(range(rows), pa.int64()),
            pa.array([1_700_000_000_000_000] * rows, pa.int64()).cast(
                pa.timestamp("us", tz="UTC")),
            pa.array([0] * rows, pa.int32())], schema=arrow_schema(False))

    per_partition = -(-records // partitions)

    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in range(partitions)]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            p = partition.value
            left = min(per_partition, records - p * per_partition)
            full = batch(ARROW_BATCH_ROWS, p)
            # Bounded by the partition's share of the records.
            while left > 0:
                yield full if left >= ARROW_BATCH_ROWS else full.slice(0, left)
                left -= ARROW_BATCH_ROWS

    class ArrowOnly(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_arrow_only"

        def schema(self) -> str:
            return source_schema_ddl(False)

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader()

    spark.dataSource.register(ArrowOnly)
    runs = []
    cpu: dict[str, Any] = {}
    for _ in range(2):
        started = time.perf_counter()
        with watchdog(spark, job_seconds, "arrow-only source"), cpu_meter(cluster, cpu):
            spark.read.format("bench_arrow_only").load().write.format("noop") \
                .mode("overwrite").save()
        runs.append(time.perf_counter() - started)
    return {"records": records, "spark_tasks": partitions, "seconds_cold": round(runs[0], 3),
            "seconds_warm": round(runs[1], 3), "rows_per_s_warm": _rate(records, runs[1]),
            "cpu_s_warm": cpu, "cpu_us_per_row_warm": cpu_per_row(cpu, records)}


# ======================================================================= the run
def machine_facts() -> dict[str, Any]:
    from importlib.metadata import version

    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True,
                              timeout=30).stderr.splitlines()[0]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        java = "unknown"
    return {"nproc": os.cpu_count(), "python": platform.python_version(),
            "pyspark": version("pyspark"), "pyarrow": version("pyarrow"), "java": java,
            "spark_master": SPARK_MASTER}


def meets(out: dict[str, Any]) -> dict[str, bool]:
    met: dict[str, bool] = {}
    if out.get("source_rows_per_s_warm") is not None:
        met["source_rows_per_s"] = out["source_rows_per_s_warm"] >= TARGETS["source_rows_per_s"]
        met["source_vs_consumer"] = out["source_vs_consumer"] >= TARGETS["source_vs_consumer"]
    if out.get("sink_rows_per_s") is not None:
        met["sink_rows_per_s"] = (out["sink_rows_per_s"] >= TARGETS["sink_rows_per_s"]
                                  and out["sink"]["verified"])
    return met


def run(args: argparse.Namespace) -> dict[str, Any]:
    facts = machine_facts()
    load_before = os.getloadavg()
    print(f"machine: nproc {facts['nproc']}, load average {load_before[0]:.2f} "
          f"{load_before[1]:.2f} {load_before[2]:.2f}; pyspark {facts['pyspark']}, "
          f"{facts['java']}", flush=True)
    topic, sink_topic, warm_topic = "spark-source", "spark-sink", "spark-sink-warmup"
    sink_keyless_topic = "spark-sink-keyless"
    partitions, rf = args.partitions, args.replication_factor
    configs = {"min.insync.replicas": "2"} if rf >= 3 else {}
    out: dict[str, Any] = {"bench": "spark", "records": args.records, "value_bytes": len(VALUE),
                           "partitions": partitions, "replication_factor": rf,
                           "layout": (f"topics of {partitions} partition"
                                      f"{'' if partitions == 1 else 's'}, RF {rf}"
                                      + (" (bench.produce_consume's consume topic)"
                                         if (partitions, rf) == (PARTITIONS, REPLICATION_FACTOR)
                                         else ""))}
    durations: dict[str, float] = {}
    spark = None
    t_run = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as tmp:
        cluster = LocalCluster.create(tmp, controllers=3, brokers=3)
        try:
            t0 = time.perf_counter()
            cluster.start_all()
            cluster.wait_ready()
            bootstrap = cluster.bootstrap
            with Admin(bootstrap) as admin:
                admin.create_topics([NewTopic(name, num_partitions=partitions,
                                              replication_factor=rf, configs=configs)
                                     for name in (topic, sink_topic, warm_topic,
                                                  sink_keyless_topic)]).all()
            time.sleep(1.0)  # leaders take over their partitions
            durations["cluster_start_s"] = round(time.perf_counter() - t0, 3)
            print(f"cluster: 3 controllers + 3 brokers; {out['layout']}", flush=True)

            t0 = time.perf_counter()
            out["load"] = load(cluster, topic, args.records, args.seconds)
            ends = end_offsets(bootstrap, topic, partitions)
            out["load"]["records_in_topic"] = sum(ends.values())
            durations["load_s"] = round(time.perf_counter() - t0, 3)
            records = sum(ends.values())
            print(f"load (info): {out['load']['records']:,} records with send_many in "
                  f"{out['load']['seconds']} s ({out['load']['records_per_s']:,}/s); "
                  f"{records:,} in the topic; {_cpu_line(out['load'])}", flush=True)
            if records != args.records:
                raise RuntimeError(f"the topic holds {records} records, not {args.records}")

            t0 = time.perf_counter()
            spark = start_spark()
            durations["spark_start_s"] = round(time.perf_counter() - t0, 3)
            print(f"spark: {SPARK_MASTER} session started in {durations['spark_start_s']} s",
                  flush=True)
            if "source" in args.phases:
                source_phase(out, spark, cluster, topic, records, args, durations)
            if "sink" in args.phases:
                sink_phase(out, spark, cluster, (warm_topic, sink_topic, sink_keyless_topic),
                           args, durations)
            if "pieces" in args.phases:
                t0 = time.perf_counter()
                pieces = read_range_pieces(cluster, topic, ends)
                pieces["spark_arrow_only"] = arrow_only_source(
                    spark, cluster, records=records, partitions=partitions,
                    job_seconds=args.job_seconds)
                out["pieces"] = pieces
                durations["pieces_s"] = round(time.perf_counter() - t0, 3)
                split = pieces["split"]
                print(f"pieces (diagnostic, no Spark, one process, partitions in turn): "
                      f"read_range {pieces['read_range']['rows_per_s']:,} rows/s; split: "
                      f"poll {split['poll_us_per_row']} µs/row, records_to_arrow "
                      f"{split['records_to_arrow_us_per_row']} µs/row; read_range "
                      f"{_cpu_line(pieces['read_range'])}", flush=True)
                print(f"pieces: Spark alone, prebuilt Arrow batches into noop (warm): "
                      f"{pieces['spark_arrow_only']['rows_per_s_warm']:,} rows/s", flush=True)
        finally:
            if spark is not None:
                spark.stop()
            cluster.down()
    durations["total_s"] = round(time.perf_counter() - t_run, 3)
    out["targets"] = TARGETS
    out["meets_targets"] = meets(out)
    out["durations"] = durations
    out["machine"] = {**facts, "load_average_before": [round(x, 2) for x in load_before],
                      "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    print_table(out)
    return out


def _cpu_line(figure: dict[str, Any]) -> str:
    per = figure["cpu_us_per_row"]
    return (f"CPU µs/row: ours {per['ours']} (driver {per['driver']}, Spark JVM "
            f"{per['spark_jvm']}, Spark Python workers {per['spark_python']}, brokers "
            f"{per['brokers']}); others' load {per['others']}; machine "
            f"{figure['cpu_s']['machine_busy_share']:.0%} busy")


def source_phase(out: dict[str, Any], spark: Any, cluster: LocalCluster, topic: str,
                 records: int, args: argparse.Namespace, durations: dict[str, float]) -> None:
    t0 = time.perf_counter()
    partitions = args.partitions
    common = {"records": records, "job_seconds": args.job_seconds}
    cold = source_read(spark, cluster, topic, label="cold", **common)
    print(f"source cold: {cold['rows_per_s']:,} rows/s ({cold['seconds']} s, of which load() "
          f"{cold['load_call_s']} s; {cold['spark_tasks']} tasks)", flush=True)
    cons = consume(cluster, topic, partitions=partitions, records=records,
                   seconds=args.seconds)
    print(f"Consumer (defaults): {cons['rows_per_s']:,} rows/s ({cons['seconds']} s); "
          f"{_cpu_line(cons)}", flush=True)
    warm = source_read(spark, cluster, topic, label="warm", **common)
    print(f"source warm: {warm['rows_per_s']:,} rows/s ({warm['seconds']} s, of which load() "
          f"{warm['load_call_s']} s); "
          f"{_cpu_line(warm)}", flush=True)
    cons_10k = consume(cluster, topic, partitions=partitions, records=records,
                       seconds=args.seconds, max_poll_records=10_000)
    print(f"Consumer (max_poll_records=10000, labelled): {cons_10k['rows_per_s']:,} rows/s; "
          f"{_cpu_line(cons_10k)}", flush=True)
    out["consumer"], out["consumer_max_poll_10k"] = cons, cons_10k
    out["source_cold"], out["source_warm"] = cold, warm
    if partitions < SPARK_CORES:
        mp = source_read(spark, cluster, topic, label="minPartitions", minPartitions="2",
                         **common)
        out["source_warm_min_partitions_2"] = mp
        print(f"source warm, minPartitions=2 (labelled): {mp['rows_per_s']:,} rows/s "
              f"({mp['spark_tasks']} tasks)", flush=True)
    check = source_count(spark, cluster.bootstrap, topic, args.job_seconds)
    out["source_count_check"] = {**check, "matches": check["rows"] == records}
    print(f"source count() check: {check['rows']:,} rows "
          f"({'matches' if check['rows'] == records else 'MISMATCH'}, {check['seconds']} s)",
          flush=True)
    if cons["records"] != records:
        raise RuntimeError(f"the Consumer read {cons['records']} of {records} records")
    out["consumer_rows_per_s"] = cons["rows_per_s"]
    out["source_rows_per_s_cold"] = cold["rows_per_s"]
    out["source_rows_per_s_warm"] = warm["rows_per_s"]
    out["source_vs_consumer"] = round(warm["rows_per_s"] / max(cons["rows_per_s"], 1), 3)
    durations["source_phase_s"] = round(time.perf_counter() - t0, 3)


def sink_phase(out: dict[str, Any], spark: Any, cluster: LocalCluster,
               topics: tuple[str, str, str], args: argparse.Namespace,
               durations: dict[str, float]) -> None:
    warm_topic, sink_topic, keyless_topic = topics
    t0 = time.perf_counter()
    common = {"partitions": args.partitions, "job_seconds": args.job_seconds}
    warmup = sink_write(spark, cluster, warm_topic, rows=SINK_WARMUP_ROWS, keyed=True,
                        **common)
    print(f"sink warm-up: {SINK_WARMUP_ROWS:,} rows in {warmup['seconds']} s", flush=True)
    sink = sink_write(spark, cluster, sink_topic, rows=args.sink_records, keyed=True, **common)
    print(f"sink (key + 100-byte value): {sink['rows_per_s']:,} rows/s ({sink['seconds']} s); "
          f"{sink['records_in_topic']:,} records in the topic "
          f"({'verified' if sink['verified'] else 'MISMATCH'}); {_cpu_line(sink)}", flush=True)
    keyless = sink_write(spark, cluster, keyless_topic, rows=args.sink_records, keyed=False,
                         **common)
    print(f"sink without a key column (labelled): {keyless['rows_per_s']:,} rows/s "
          f"({'verified' if keyless['verified'] else 'MISMATCH'}); {_cpu_line(keyless)}",
          flush=True)
    out["sink_warmup"], out["sink"], out["sink_keyless"] = warmup, sink, keyless
    out["sink_rows_per_s"] = sink["rows_per_s"]
    durations["sink_phase_s"] = round(time.perf_counter() - t0, 3)


def print_table(out: dict[str, Any]) -> None:
    met = out["meets_targets"]
    rows: list[tuple[str, str, str, str, str]] = []

    def mark(name: str) -> str:
        return "—" if name not in met else ("yes" if met[name] else "NO")

    def cpu(figure: dict[str, Any], key: str = "cpu_us_per_row") -> str:
        return f"{figure[key]['ours']}" if key in figure else ""

    if "consumer" in out:
        rows += [
            ("Consumer, defaults (comparison)", f"{out['consumer_rows_per_s']:,}", "", "",
             cpu(out["consumer"])),
            ("source, cold (first read)", f"{out['source_rows_per_s_cold']:,}", "", "",
             cpu(out["source_cold"])),
            ("source, warm (headline)", f"{out['source_rows_per_s_warm']:,}", "≥ 500,000",
             mark("source_rows_per_s"), cpu(out["source_warm"])),
            ("source warm / Consumer", f"{out['source_vs_consumer']}", "≥ 0.8",
             mark("source_vs_consumer"), ""),
            ("Consumer, max_poll_records=10000",
             f"{out['consumer_max_poll_10k']['rows_per_s']:,}", "", "",
             cpu(out["consumer_max_poll_10k"])),
        ]
        if "source_warm_min_partitions_2" in out:
            mp = out["source_warm_min_partitions_2"]
            rows.append(("source, minPartitions=2", f"{mp['rows_per_s']:,}", "", "", cpu(mp)))
    if "sink" in out:
        rows += [("sink, key + value (headline)", f"{out['sink_rows_per_s']:,}", "≥ 200,000",
                  mark("sink_rows_per_s"), cpu(out["sink"])),
                 ("sink, value only", f"{out['sink_keyless']['rows_per_s']:,}", "", "",
                  cpu(out["sink_keyless"]))]
    if "pieces" in out:
        pieces = out["pieces"]
        rows += [("read_range in-process (no Spark)",
                  f"{pieces['read_range']['rows_per_s']:,}", "", "", cpu(pieces["read_range"])),
                 ("Spark alone: Arrow batches → noop",
                  f"{pieces['spark_arrow_only']['rows_per_s_warm']:,}", "", "",
                  cpu(pieces["spark_arrow_only"], "cpu_us_per_row_warm"))]
    machine = out["machine"]
    print(f"\n{out['records']:,} records of {out['value_bytes']} B; {out['layout']}; "
          f"{SPARK_MASTER}; nproc {machine['nproc']}, load average "
          f"{machine['load_average_before'][0]} → {machine['load_average_after'][0]}")
    width = max(len(r[0]) for r in rows) if rows else 0
    print(f"{'figure':<{width}}  {'rows/s':>10}  {'target':>10}  {'met':>3}  "
          f"CPU µs/row (driver + Spark + servers)")
    for name, value, target, ok, cpu_us in rows:
        print(f"{name:<{width}}  {value:>10}  {target:>10}  {ok:>3}  {cpu_us}")
    print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="records loaded and read by the source and the Consumer")
    parser.add_argument("--sink-records", type=int, default=0,
                        help="rows written through the sink (default: --records)")
    parser.add_argument("--partitions", type=int, default=PARTITIONS,
                        help="partitions of each topic (default: bench.produce_consume's 6)")
    parser.add_argument("--replication-factor", type=int, default=REPLICATION_FACTOR,
                        choices=(1, 2, 3), help="of each topic (RF 3 adds min.insync.replicas=2)")
    parser.add_argument("--seconds", type=float, default=300.0,
                        help="bound of the load and of each Consumer read")
    parser.add_argument("--job-seconds", type=float, default=600.0,
                        help="bound of each Spark job: it is cancelled after this")
    parser.add_argument("--phases", type=lambda v: v.split(","), default=list(PHASES),
                        help="comma-separated: source, sink, pieces")
    args = parser.parse_args()
    unknown = set(args.phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases: {sorted(unknown)}")
    if args.records <= 0 or args.partitions <= 0:
        parser.error("--records and --partitions must be positive")
    args.sink_records = args.sink_records or args.records
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
