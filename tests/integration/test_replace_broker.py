"""Replacing a broker (docs/operations.md, "Replace a broker"): a new, empty data dir under the
same node id, formatted with the cluster id, re-replicates every partition from the leaders.

The proof: once the replaced broker is back in every ISR, the two other brokers are stopped
(controlled shutdown moves every leadership to it), and a consumer reads every acknowledged
record from it alone.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_harness import ClusterHarness

from tidelog.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from tidelog.data_dir import format_data_dir

pytestmark = pytest.mark.integration

TOPIC = "replaced"
RECORDS = 3_000
REPLACED = 102
FAST = {"controller": {"broker_session_timeout_ms": 3000, "fence_check_interval_ms": 100}}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterHarness]:
    with ClusterHarness.started(tmp_path / "cluster", controllers=1, brokers=3,
                                overrides=FAST) as cluster:
        cluster.start_brokers()
        yield cluster


def wait_isrs_include(admin: Admin, broker_id: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        desc = admin.describe_topics([TOPIC], include_offsets=False).all()[TOPIC]
        if all(broker_id in p.isr for p in desc.partitions):
            return
        time.sleep(0.2)
    raise AssertionError(f"broker {broker_id} did not rejoin every ISR: {desc.partitions}")


def test_a_broker_replaced_with_an_empty_disk_refetches_everything(
        cluster: ClusterHarness) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, 3, 3, configs={"min.insync.replicas": "2"})]).all()
        with Producer(cluster.bootstrap) as producer:
            for i in range(RECORDS):
                producer.send(TOPIC, b"r-%d" % i, key=b"k-%d" % (i % 50))
            producer.flush()
        name = "broker-2"  # LocalCluster names brokers broker-1..3, node ids 101..103
        cluster.stop(name)
        data_dir = cluster.base_dir / name
        shutil.rmtree(data_dir)  # the dead disk
        format_data_dir(data_dir, cluster_id=cluster.cluster_id, node_id=REPLACED)
        cluster.start(name)
        wait_isrs_include(admin, REPLACED, 60)
    for other in ("broker-1", "broker-3"):
        cluster.stop(other, timeout_s=30)
    bootstrap = f"127.0.0.1:{cluster.node(name).broker_port}"
    seen: set[bytes] = set()
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(3)])
        deadline = time.monotonic() + 30
        while len(seen) < RECORDS and time.monotonic() < deadline:
            seen.update(r.value for r in consumer.poll(timeout_ms=500) if r.value is not None)
    assert seen == {b"r-%d" % i for i in range(RECORDS)}
