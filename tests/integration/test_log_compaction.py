"""Log compaction on a real broker process: the cleaner wired into the broker's timer.

What it checks: a topic with cleanup.policy=compact, segment.ms=100 (every round of writes
rolls a segment, so only the last round stays in the active segment) and
min.cleanable.dirty.ratio=0.01 (every pass due, whenever it runs) gets the same five keys
written in five rounds; within a bounded wait a consumer reading from the beginning sees each key
once, with its latest value, at the offset it was written at; and the same after the broker is
killed (kill -9) and started again (the cleaned batches and the cleaner checkpoint are in its
RocksDB).

How: tests/integration/cluster_harness.py runs 1 controller + 1 broker with
log.retention.check.interval.ms at 300 ms (the cleaner checks at that pace when shorter than
Kafka's 15 s log.cleaner.backoff.ms); records go through tidelog's Admin, Producer and Consumer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_harness import ClusterHarness

from tidelog.client import Admin, Consumer, ConsumerRecord, NewTopic, Producer, TopicPartition

pytestmark = pytest.mark.integration

TOPIC = "compacted"
KEYS = [b"k%d" % i for i in range(5)]
ROUNDS = 5
WAIT_S = 60.0
FAST = {"broker": {"log_retention_check_interval_ms": 300}}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterHarness]:
    with ClusterHarness.started(tmp_path / "cluster", controllers=1, brokers=1,
                                overrides=FAST) as cluster:
        cluster.start_brokers()
        yield cluster


def read_from_start(cluster: ClusterHarness) -> list[ConsumerRecord]:
    tp = TopicPartition(TOPIC, 0)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        end = consumer.end_offsets([tp])[tp]
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out: list[ConsumerRecord] = []
        deadline = time.monotonic() + WAIT_S
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, "could not read up to the high watermark"
            out += consumer.poll(timeout_ms=500)
        return out


def wait_until_compacted(cluster: ClusterHarness, expected: list[tuple[int, bytes, bytes]]
                         ) -> None:
    deadline = time.monotonic() + WAIT_S
    got: list[tuple[int, bytes | None, bytes | None]] = []
    while time.monotonic() < deadline:
        try:
            got = [(r.offset, r.key, r.value) for r in read_from_start(cluster)]
        except Exception:  # the broker may still be starting
            got = []
        if got == expected:
            return
        time.sleep(0.5)
    raise AssertionError(f"not compacted within {WAIT_S} s: read {got}, expected {expected}")


def test_a_compacted_topic_keeps_the_latest_value_per_key(cluster: ClusterHarness) -> None:
    with Admin(cluster.bootstrap) as admin:
        # A low min.cleanable.dirty.ratio (Kafka's own cleaner tests do the same): with the
        # default 0.5, a pass that ran between rounds 3 and 4 leaves round 3 clean and round 4
        # dirty, a ratio of about 0.5 that may fall just short, and round 3 is kept for good.
        topic = NewTopic(TOPIC, 1, 1, {"cleanup.policy": "compact", "segment.ms": "100",
                                       "min.cleanable.dirty.ratio": "0.01"})
        error = admin.create_topics([topic]).errors.get(TOPIC)
        assert error is None, error
    with Producer(cluster.bootstrap, acks="all") as producer:
        for round_ in range(ROUNDS):
            futures = [producer.send(TOPIC, b"v%d" % round_, key, partition=0) for key in KEYS]
            producer.flush()
            assert all(f.result(timeout=WAIT_S) for f in futures)
            time.sleep(0.3)  # segment.ms passed: the next round rolls a new segment
        producer.send(TOPIC, b"tail", b"z", partition=0).result(timeout=WAIT_S)
    last = (ROUNDS - 1) * len(KEYS)
    expected = [(last + i, key, b"v%d" % (ROUNDS - 1)) for i, key in enumerate(KEYS)]
    expected.append((ROUNDS * len(KEYS), b"z", b"tail"))
    wait_until_compacted(cluster, expected)
    broker = cluster.broker_names[0]
    cluster.kill(broker)
    cluster.start(broker)
    wait_until_compacted(cluster, expected)
