"""Fixtures of the Spark tests: one local SparkSession and one real Tidelog cluster for the run.

Both are expensive (a session starts in ~6 s, a cluster in a few), so every Spark test shares
them and makes its own topics. The cluster is 1 controller and 3 broker processes on 127.0.0.1
(tests/integration/cluster_harness.py), with a short broker session timeout so that a killed
broker's leaderships move within seconds, and a short retention check interval for the
data-loss tests. The session is ``local[2]`` with the environment Spark's Python workers need
(shared/reference/libraries.md §5: PYSPARK_PYTHON, SPARK_LOCAL_IP).
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from cluster_harness import ClusterHarness

from tidelog.client import Admin, NewTopic, Producer, TopicPartition

FAST = {"controller": {"broker_session_timeout_ms": 3_000, "fence_check_interval_ms": 100},
        "broker": {"log_retention_check_interval_ms": 200}}
WAIT_S = 30.0


#: What the session fixtures started, stopped as soon as the last Spark test has run (not at the
#: end of the whole run: the unit tests after them should not share the cores with a cluster and
#: a JVM). Each is also stopped by its fixture's teardown; stopping twice does nothing.
_STOP_AFTER_SPARK_TESTS: list[Callable[[], None]] = []


@pytest.hookimpl(trylast=True)  # after pytest's own teardown has closed the module fixtures
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if nextitem is None or Path(str(nextitem.path)).parent != Path(__file__).parent:
        while _STOP_AFTER_SPARK_TESTS:
            _STOP_AFTER_SPARK_TESTS.pop()()


def _once(stop: Callable[[], None]) -> Callable[[], None]:
    done: list[bool] = []

    def run() -> None:
        if not done:
            done.append(True)
            stop()
    return run


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base = tmp_path_factory.mktemp("spark-cluster") / "cluster"
    with ClusterHarness.started(base, controllers=1, brokers=3, overrides=FAST) as harness:
        stop = _once(harness.close)
        _STOP_AFTER_SPARK_TESTS.append(stop)
        harness.start_brokers()
        yield harness
        stop()


@pytest.fixture(scope="session")
def bootstrap(cluster: ClusterHarness) -> str:
    return cluster.bootstrap


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from tidelog.spark import register

    session = (SparkSession.builder.master("local[2]").appName("tidelog-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    stop = _once(session.stop)
    _STOP_AFTER_SPARK_TESTS.append(stop)
    yield session
    stop()


# The clients are per module, not per session: the client library's I/O thread is shared by the
# process, and a unit test later in the run stops it on purpose (test_client_sender_failure);
# a session-scoped client would then fail to close at the very end of the run.
@pytest.fixture(scope="module")
def admin(bootstrap: str) -> Iterator[Admin]:
    with Admin(bootstrap) as client:
        yield client


#: Numbers the topics of the whole run, so that names never repeat across modules.
_CREATED = itertools.count(1)


@pytest.fixture(scope="module")
def new_topic(admin: Admin) -> Callable[..., str]:
    """Create a topic named ``<prefix>-<n>`` (RF 3, min.insync.replicas=2, n unique in the
    run) and wait until every partition has a leader; returns its name."""
    created = _CREATED

    def create(prefix: str, partitions: int = 2, **configs: str) -> str:
        name = f"{prefix}-{next(created)}"
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=3,
                                      configs={"min.insync.replicas": "2", **configs})]).all()
        wait_for(lambda: all(p.leader >= 0 for p in
                             admin.describe_topics([name]).all()[name].partitions),
                 f"leaders of {name}")
        return name
    return create


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture(scope="module")
def produce(bootstrap: str) -> Iterator[Callable[..., list[Any]]]:
    """produce(topic, [(key, value, partition, headers, timestamp_ms)...]) → RecordMetadata
    list, acks=all, idempotent."""
    producer = Producer(bootstrap, acks="all", linger_ms=5)

    def send(topic: str, records: list[tuple[Any, ...]]) -> list[Any]:
        futures = []
        for key, value, partition, headers, timestamp_ms in records:
            futures.append(producer.send(topic, value, key, partition=partition,
                                         headers=headers, timestamp_ms=timestamp_ms))
        producer.flush()
        return [f.result(WAIT_S) for f in futures]
    yield send
    producer.close()


def end_offsets(admin: Admin, topic: str, partitions: int) -> dict[int, int]:
    found = admin.list_offsets({TopicPartition(topic, p): -1 for p in range(partitions)})
    return {tp.partition: offset for tp, offset in found.items()}
