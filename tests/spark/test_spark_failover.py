"""A broker killed (kill -9) while Spark reads from or writes to it.

What it checks: a batch read planned before the kill, whose tasks run while the leader of a
partition is dead, returns every record exactly once (each task's Consumer follows the
partition to its new leader, elected from the ISR once the dead broker's session expires); and
a batch write during which a leader dies writes every row (the idempotent producer retries to
the new leader; duplicates are possible in general, as with Spark's Kafka sink, but none when
the retried produce is deduplicated by sequence). The killed broker is started again after each
test, so the session cluster is whole for the next one.

How: the session and cluster of conftest.py (broker session timeout 3 s). The read is split
into many small tasks (maxRecordsPerPartition) so that it is still running when the broker is
killed; the test asserts that it was.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cluster_harness import ClusterHarness
from conftest import wait_for

from tidelog.client import Admin, TopicPartition

pytestmark = pytest.mark.integration

Produce = Callable[[str, list[tuple[Any, ...]]], list[Any]]
RECORDS = 20_000


@pytest.fixture
def leader_killer(cluster: ClusterHarness, admin: Admin) -> Iterator[Callable[[str], str]]:
    """kill(topic) kills the broker leading partition 0 of ``topic``; restarted afterwards."""
    killed: list[str] = []

    def kill(topic: str) -> str:
        leader = admin.describe_topics([topic]).all()[topic].partitions[0].leader
        name = next(spec.name for spec in cluster.local.brokers() if spec.node_id == leader)
        cluster.kill(name)
        killed.append(name)
        return name
    yield kill
    for name in killed:
        cluster.start(name)
    wait_for(lambda: all(len(p.isr) == 3 for t in admin.list_topics() for p in
                         admin.describe_topics([t]).all()[t].partitions), "full ISRs again",
             timeout_s=60)


class KillWhen(threading.Thread):
    """Kills the leader of ``topic``'s partition 0 once ``ready()`` holds (polled, at most
    60 s), while the test thread runs the Spark action (Spark actions stay on the thread that
    owns the session). ``killed_at`` is the monotonic time of the kill."""

    def __init__(self, kill: Callable[[str], str], topic: str, ready: Callable[[], bool]) -> None:
        super().__init__(daemon=True)
        self.kill, self.topic, self.ready = kill, topic, ready
        self.killed_at: float | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            wait_for(self.ready, "the Spark action to be under way", timeout_s=60)
            self.kill(self.topic)
            self.killed_at = time.monotonic()
        except BaseException as error:
            self.error = error


def finished_after_the_kill(killer: KillWhen) -> None:
    ended = time.monotonic()
    killer.join(60)
    assert killer.error is None, killer.error
    assert killer.killed_at is not None and killer.killed_at < ended, \
        "the action finished before the broker was killed: make it larger"


def test_batch_read_survives_a_killed_leader(
        spark: Any, bootstrap: str, new_topic: Callable[..., str], produce: Produce,
        leader_killer: Callable[[str], str]) -> None:
    topic = new_topic("spark-failover-read")
    produce(topic, [(None, f"{i}".encode(), i % 2, None, None) for i in range(RECORDS)])
    df = (spark.read.format("tidelog").option("bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("maxRecordsPerPartition", "400").load())
    started = time.monotonic()
    killer = KillWhen(leader_killer, topic, lambda: time.monotonic() - started > 2.0)
    killer.start()
    values = [r.value for r in df.select("value").collect()]
    finished_after_the_kill(killer)
    assert sorted(int(v) for v in values) == list(range(RECORDS))


def test_batch_write_survives_a_killed_leader(
        spark: Any, bootstrap: str, admin: Admin, new_topic: Callable[..., str],
        leader_killer: Callable[[str], str]) -> None:
    topic = new_topic("spark-failover-write")
    rows = 200_000
    df = spark.range(rows, numPartitions=2).selectExpr(
        "CAST(id AS STRING) AS value", "CAST(id % 2 AS INT) AS partition")
    written = {TopicPartition(topic, p): -1 for p in (0, 1)}
    killer = KillWhen(leader_killer, topic,
                      lambda: sum(admin.list_offsets(written).values()) > 20_000)
    killer.start()
    (df.write.format("tidelog").option("bootstrap.servers", bootstrap)
     .option("topic", topic).mode("append").save())
    finished_after_the_kill(killer)
    got = [r.value for r in spark.read.format("tidelog").option("bootstrap.servers", bootstrap)
           .option("subscribe", topic).load().select("value").collect()]
    assert sorted(int(v) for v in got) == list(range(rows))
