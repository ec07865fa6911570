"""Produce/consume benchmark against a local 3-controller + 3-broker cluster.

``python -m bench.produce_consume [--records 200000] [--seconds 20]`` starts the cluster as local
processes, then measures with the Tidelog client library (100-byte values):

1. produce throughput, RF=1, acks=1 (topic of 6 partitions);
2. produce throughput, RF=3, acks=all, min.insync.replicas=2;
3. consume throughput, reading back what phase 1 wrote;
4. end-to-end latency (send → poll) at a fixed 2,000 records/s, RF=3, acks=all: p50/p99.

Servers and the client share the machine's cores, as in the issue's reference figures. Every
phase is bounded by ``--records`` and ``--seconds``. Prints readable lines and a final JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from typing import Any

from tidelog import Admin, Consumer, NewTopic, Producer, TopicPartition
from tidelog.local_cluster import LocalCluster

VALUE = b"x" * 100
E2E_RATE = 2_000


def produce(bootstrap: str, topic: str, *, acks: Any, records: int, seconds: float,
            linger_ms: int = 5, batch_size: int = 256 * 1024) -> dict[str, float]:
    with Producer(bootstrap, acks=acks, linger_ms=linger_ms, batch_size=batch_size) as p:
        started = time.perf_counter()
        deadline = started + seconds
        sent = 0
        while sent < records and time.perf_counter() < deadline:
            for _ in range(1000):
                p.send(topic, VALUE)
            sent += 1000
        p.flush()
        elapsed = time.perf_counter() - started
    return {"records": sent, "seconds": round(elapsed, 3), "records_per_s": round(sent / elapsed)}


def consume(bootstrap: str, topic: str, *, partitions: int, records: int,
            seconds: float) -> dict[str, float]:
    with Consumer(bootstrap, max_poll_records=10_000) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        c.seek_to_beginning(*c.assignment())
        started = time.perf_counter()
        deadline = started + seconds
        got = 0
        while got < records and time.perf_counter() < deadline:
            got += len(c.poll(timeout_ms=500))
        elapsed = time.perf_counter() - started
    return {"records": got, "seconds": round(elapsed, 3), "records_per_s": round(got / elapsed)}


def end_to_end(bootstrap: str, topic: str, *, seconds: float) -> dict[str, float]:
    """Send at E2E_RATE with the send time in the value; a consumer thread measures arrival."""
    latencies_ms: list[float] = []
    stop = threading.Event()
    with Consumer(bootstrap, fetch_max_wait_ms=100) as c:
        c.assign([TopicPartition(topic, 0)])
        c.seek_to_end(*c.assignment())
        c.position(TopicPartition(topic, 0))

        def reader() -> None:
            while not stop.is_set():
                for r in c.poll(timeout_ms=100):
                    sent_ns = int.from_bytes((r.value or b"")[:8], "big")
                    latencies_ms.append((time.perf_counter_ns() - sent_ns) / 1e6)

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        with Producer(bootstrap, acks="all", linger_ms=0) as p:
            interval = 1.0 / E2E_RATE
            started = time.perf_counter()
            n = 0
            while time.perf_counter() - started < seconds:
                # Sleep (not spin) to the next send: a spinning loop would take a core from the
                # servers on this 2-core machine and inflate the latencies measured.
                delay = started + n * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                p.send(topic, time.perf_counter_ns().to_bytes(8, "big") + VALUE[8:], partition=0)
                n += 1
            p.flush()
        time.sleep(1.0)
        stop.set()
        thread.join(5)
    lat = sorted(latencies_ms)
    return {"records": len(lat), "rate_per_s": E2E_RATE,
            "p50_ms": round(statistics.median(lat), 2) if lat else -1,
            "p99_ms": round(lat[int(len(lat) * 0.99) - 1], 2) if lat else -1}


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as tmp:
        cluster = LocalCluster.create(tmp, controllers=3, brokers=3)
        with cluster.running():
            bootstrap = cluster.bootstrap
            with Admin(bootstrap) as admin:
                admin.create_topics([
                    NewTopic("rf1", num_partitions=6, replication_factor=1),
                    NewTopic("rf3", num_partitions=6, replication_factor=3,
                             configs={"min.insync.replicas": "2"}),
                    NewTopic("e2e", num_partitions=1, replication_factor=3,
                             configs={"min.insync.replicas": "2"}),
                ]).all()
            time.sleep(1.0)  # leaders take over their partitions
            rf1 = produce(bootstrap, "rf1", acks=1, records=args.records, seconds=args.seconds)
            print(f"produce RF=1 acks=1: {rf1['records_per_s']:,} records/s")
            rf3 = produce(bootstrap, "rf3", acks="all", records=args.records,
                          seconds=args.seconds)
            print(f"produce RF=3 acks=all: {rf3['records_per_s']:,} records/s")
            cons = consume(bootstrap, "rf1", partitions=6, records=int(rf1["records"]),
                           seconds=args.seconds)
            print(f"consume: {cons['records_per_s']:,} records/s")
            e2e = end_to_end(bootstrap, "e2e", seconds=min(10.0, args.seconds))
            print(f"end-to-end at {E2E_RATE}/s RF=3 acks=all: p50 {e2e['p50_ms']} ms, "
                  f"p99 {e2e['p99_ms']} ms")
    return {
        "bench": "produce_consume", "value_bytes": len(VALUE),
        "produce_rf1_acks1": rf1, "produce_rf3_acks_all": rf3, "consume": cons,
        "end_to_end_rf3_acks_all": e2e,
        "targets": {"produce_rf1_acks1": 300_000, "produce_rf3_acks_all": 100_000,
                    "consume": 500_000, "e2e_p99_ms": 4.0},
        "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
