"""``make run``: bring up a local cluster and show it working.

Starts 3 controllers and 3 brokers as local processes (``.tidelog/run``), creates topic ``demo``
(6 partitions, RF=3, min.insync.replicas=2), produces 10,000 records with acks=all, kills the
leader of partition 0 with SIGKILL while producing more, restarts it, consumes everything back
and checks none is missing or duplicated, prints the topic's partitions (leader, replicas, ISR,
offsets), and leaves the cluster running with instructions for exploring and stopping it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from tidelog import Admin, Consumer, NewTopic, Producer, TopicPartition
from tidelog.local_cluster import LocalCluster

RUN_DIR = Path(".tidelog/run")
TOPIC = "demo"
PARTITIONS = 6
RECORDS = 10_000


def say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def tidelog_cmd(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "tidelog.cli", *args], check=False)


def describe(admin: Admin) -> None:
    desc = admin.describe_topics([TOPIC]).all()[TOPIC]
    print(f"topic {TOPIC} (id {desc.topic_id}):")
    print(f"  {'PART':>4} {'LEADER':>6} {'EPOCH':>5}  {'REPLICAS':<14} {'ISR':<14} "
          f"{'START':>6} {'HW':>6} {'END':>6}")
    for p in desc.partitions:
        print(f"  {p.partition:>4} {p.leader:>6} {p.leader_epoch:>5}  "
              f"{','.join(map(str, p.replicas)):<14} {','.join(map(str, p.isr)):<14} "
              f"{p.log_start_offset:>6} {p.high_watermark:>6} {p.log_end_offset:>6}")


def produce(bootstrap: str, start: int, count: int) -> int:
    with Producer(bootstrap, acks="all") as producer:
        futures = [producer.send(TOPIC, f"record-{i}".encode(), key=f"key-{i % 100}".encode())
                   for i in range(start, start + count)]
        producer.flush()
    return sum(1 for f in futures if f.exception() is None)


def main() -> None:
    if (RUN_DIR / "cluster.json").exists():
        LocalCluster.load(RUN_DIR).down()
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    say("starting 3 controllers and 3 brokers as local processes")
    cluster = LocalCluster.create(RUN_DIR, controllers=3, brokers=3)
    cluster.start_all()
    cluster.wait_ready()
    tidelog_cmd("cluster", "status", "--dir", str(RUN_DIR))
    bootstrap = cluster.bootstrap

    say(f"creating topic '{TOPIC}': {PARTITIONS} partitions, RF=3, min.insync.replicas=2")
    with Admin(bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                                      configs={"min.insync.replicas": "2"})]).all()
        time.sleep(1.0)  # leaders take over their partitions
        say(f"producing {RECORDS:,} records with acks=all (idempotent producer)")
        started = time.monotonic()
        acked = produce(bootstrap, 0, RECORDS)
        print(f"{acked:,} acknowledged in {time.monotonic() - started:.1f}s")

        leader = admin.describe_topics([TOPIC]).all()[TOPIC].partitions[0].leader
        victim = next(b.name for b in cluster.brokers() if b.node_id == leader)
        say(f"kill -9 of {victim} (leader of partition 0), then producing {RECORDS:,} more")
        cluster.kill(victim)
        started = time.monotonic()
        acked += produce(bootstrap, RECORDS, RECORDS)
        print(f"{acked:,} acknowledged in total; the second round took "
              f"{time.monotonic() - started:.1f}s including the failover")
        describe(admin)

        say(f"restarting {victim}: it rejoins as a follower and catches up")
        cluster.start(victim)
        cluster.wait_ready([victim])
        time.sleep(2.0)
        describe(admin)

    say("consuming everything back from the beginning")
    seen: set[bytes] = set()
    total = 0
    with Consumer(bootstrap) as consumer:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning(*consumer.assignment())
        deadline = time.monotonic() + 60
        while len(seen) < acked and time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=500):
                total += 1
                seen.add(record.value or b"")
    print(f"read {total:,} records, {len(seen):,} distinct: "
          + ("every acknowledged record, no duplicates" if total == len(seen) >= acked
             else "MISMATCH (see above)"))

    tidelog = Path(sys.executable).parent / "tidelog"
    say("the cluster keeps running. Try:")
    print(f"  export TIDELOG_BROKERS={bootstrap}")
    print(f"  {tidelog} cluster status --dir {RUN_DIR}")
    print(f"  {tidelog} cluster quorum --dir {RUN_DIR}")
    print(f"  {tidelog} cluster stop-node broker-2 --signal KILL --dir {RUN_DIR}")
    print(f"  {tidelog} cluster start-node broker-2 --dir {RUN_DIR}")
    print("  and from Python: see the README's client example (bootstrap above)")
    print(f"stop it with:  make stop   (or {tidelog} cluster down --dir {RUN_DIR})")


if __name__ == "__main__":
    main()
