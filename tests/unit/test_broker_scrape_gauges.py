"""An idle broker's periodic work is not per partition: the partition gauges are computed at
scrape time and topic flush.ms is checked only for partitions holding unflushed appends
(broker/metrics.py PartitionGaugeCollector, ReplicaManager._update_gauges, Partition.maybe_flush);
the controller's stats() walks the partitions only after they changed (ControllerLogic.stats).

What it checks:

* a scrape reports exactly what the timer-set gauges used to (:func:`timer_gauges` below is the
  old ``_update_gauges`` computation, kept here as the reference), for leaders and followers, an
  under-replicated and an under-min-ISR partition, follower lags (one -1), acks=all produces and
  fetch long-polls waiting, and the same after a partition moved away (its series go);
* a scrape from another thread (the metrics HTTP server's) gets the loop's snapshot; when the
  loop does not answer in time it reports the previous one;
* the gauges tick of an idle broker walks no partition (the partition map is never iterated,
  no ``maybe_flush`` call); with flush.ms set, only the partition that was appended to is
  checked, it is fsynced exactly when flush.ms has passed, then no longer checked; a follower's
  appends are checked too; a flush.ms lowered by a config change applies to appends counted
  before it; a partition deleted while holding unflushed appends is dropped;
* ``ControllerLogic.stats()`` recomputes the image counts only when the committed cluster or
  topics image changed, and its values equal a fresh count.

How: the in-process cluster of tests/unit/test_replica_manager.py (real partitions and RocksDB)
and the controller test kit; calls are counted, nothing is timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from controller_testkit import TOPIC, TestCluster, alter_op, create_topic
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from test_replica_manager import Cluster, batch, scenario, until

import tidelog.broker.metrics as broker_metrics
import tidelog.broker.replica_manager as replica_manager
from tidelog.broker.metrics import PARTITION_GAUGE_NAMES
from tidelog.broker.partition import Partition
from tidelog.broker.partition_writer import TopicIdPartition
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.metadata.image import TopicsImage
from tidelog.metadata.records import metadata_record
from tidelog.observability import DirectExposition, exposition
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1 import metadata_pb2
from tidelog.v1.common_pb2 import ErrorCode

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def timer_gauges(manager: ReplicaManager) -> Samples:
    """What the old timer job (``_update_gauges`` before scrape-time gauges) set, as samples."""
    out: Samples = {}

    def put(name: str, value: float, **labels: str) -> None:
        out[("tidelog_broker_" + name, tuple(sorted(labels.items())))] = float(value)

    leaders = under_replicated = under_min_isr = waiting = 0
    for partition in manager.partitions():
        topic, pid = partition.topic_name, str(partition.partition_id)
        put("log_size_bytes", partition.log.size_bytes, topic=topic, partition=pid)
        state = partition.state
        if not state.is_leader:
            continue
        leaders += 1
        waiting += partition.acks_waiting
        under_replicated += len(state.isr) < len(state.replicas)
        under_min_isr += state.is_under_min_isr(partition.config.min_insync_replicas)
        leo = partition.log.log_end_offset
        put("high_watermark_lag_messages", leo - partition.log.high_watermark, topic=topic,
            partition=pid)
        for replica in state.replicas:
            follower = state.follower_state(replica)
            if follower is not None:
                lag = -1 if follower.log_end_offset < 0 else leo - follower.log_end_offset
                put("follower_lag_messages", lag, topic=topic, partition=pid,
                    follower=str(replica))
    put("leader_count", leaders)
    put("partition_count", len(manager.partitions()))
    put("under_replicated_partitions", under_replicated)
    put("under_min_isr_partitions", under_min_isr)
    put("acks_all_waiting", waiting)
    put("delayed_fetches", len(manager.follower_waiters), kind="follower")
    put("delayed_fetches", len(manager.consumer_waiters), kind="consumer")
    return out


def scraped(registry: CollectorRegistry) -> Samples:
    """The partition gauge samples of one scrape (from the calling thread)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() if family.name in PARTITION_GAUGE_NAMES
            for s in family.samples}


def scraped_text(registry: CollectorRegistry,
                 direct: Sequence[DirectExposition] = ()) -> Samples:
    """The same, parsed from /metrics' text (what the HTTP thread serves: the partition
    families written directly by their collector and not collected again, each family once)."""
    families = list(text_string_to_metric_families(exposition(registry, direct).decode()))
    names = [f.name for f in families]
    assert len(names) == len(set(names)), names
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in families
            if family.name in PARTITION_GAUGE_NAMES for s in family.samples}


def test_scrape_reports_what_the_timer_gauges_reported(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3], [2, 1, 3], [1, 2, 3]])
        c.create_topic("rf2", [[1, 2]], {"min.insync.replicas": "3"})  # always under min ISR
        c.create_topic("solo", [[3]])
        for partition in range(3):
            assert (await c.produce("t", batch(b"a"), partition=partition)).error_code \
                == ErrorCode.NONE
            await c.converged("t", (1, 2, 3), partition=partition)
        assert (await c.produce("rf2", batch(b"r"), acks=1)).error_code == ErrorCode.NONE
        # From here nothing moves (the followers are cut off, ISR expiry is 30 s away), so
        # values read at different moments agree.
        c.network.cut = {2, 3}
        # A fetch sent before the cut and parked at its leader would still be answered there
        # when the ISR change below wakes it: follower 3, caught up, would be added back to
        # t-2's ISR. Wait until no such fetch is left.
        await until(lambda: c.network.in_flight == 0, "fetches sent before the cut end")
        c.create_topic("late", [[1, 3]])  # follower 3 never fetches: its lag is -1
        altered = c.controller.alter_partition(1, "t", 2, [1, 2])  # t-2 under-replicated
        assert altered.topics[0].partitions[0].error_code == ErrorCode.NONE, altered
        c.publish()
        manager = c.managers[1]
        tp = TopicIdPartition(c.controller.topic_id("t"), 0)
        pending = [manager.start_append(tp, batch(b"w%d" % i), acks=-1,
                                        now_ms=int(time.time() * 1000),
                                        monotonic_ms=int(time.monotonic() * 1000))
                   for i in range(2)]
        assert all(p.waiter is not None and not p.waiter.done() for p in pending)
        poll = asyncio.ensure_future(c.fetch("t", 1, partition=0, max_wait_ms=10_000,
                                             min_bytes=1 << 20))
        await until(lambda: len(manager.consumer_waiters) == 1, "the long-poll waits")

        for broker in (1, 2, 3):
            c.managers[broker].run_job("gauges")
        for broker in (1, 2, 3):
            assert scraped(c.registries[broker]) == timer_gauges(c.managers[broker]), broker
        expected = timer_gauges(manager)
        assert expected[("tidelog_broker_leader_count", ())] == 4
        assert expected[("tidelog_broker_partition_count", ())] == 5
        assert expected[("tidelog_broker_under_replicated_partitions", ())] == 1
        assert expected[("tidelog_broker_under_min_isr_partitions", ())] == 1
        assert expected[("tidelog_broker_acks_all_waiting", ())] == 2
        assert expected[("tidelog_broker_delayed_fetches", (("kind", "consumer"),))] == 1
        lag = "tidelog_broker_follower_lag_messages"
        assert expected[(lag, (("follower", "2"), ("partition", "0"), ("topic", "t")))] == 2
        assert expected[(lag, (("follower", "3"), ("partition", "0"), ("topic", "late")))] == -1
        assert expected[("tidelog_broker_high_watermark_lag_messages",
                         (("partition", "0"), ("topic", "t")))] == 2

        # From another thread, as the metrics HTTP server scrapes: the loop answers.
        assert await asyncio.to_thread(scraped_text, c.registries[1]) == timer_gauges(manager)
        assert manager.metrics is not None
        direct = [manager.metrics.partition_gauges]
        assert await asyncio.to_thread(scraped_text, c.registries[1], direct) \
            == timer_gauges(manager)

        # rf2 is deleted: its series go.
        c.controller.submit(c.controller.logic.handle_delete_topics(
            cpb.DeleteTopicsRequest(names=["rf2"]), c.controller.now_ms))
        c.publish()
        taken = scraped(c.registries[1])
        assert not [key for key in taken if ("topic", "rf2") in key[1]]
        assert taken == timer_gauges(manager)
        poll.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poll
    scenario(tmp_path, body)


def test_the_direct_exposition_is_what_prometheus_client_would_write() -> None:
    taken = broker_metrics.PartitionGauges(
        partitions=3, leaders=2, under_replicated=1, under_min_isr=1, acks_all_waiting=4,
        delayed_fetches=(("follower", 2), ("consumer", 1)),
        log_sizes=[("a", 0, 10), ("a", 1, 0), ("b.c-d_e", 7, 5), ("a", 0, 11)],  # last wins
        high_watermark_lags=[("a", 0, 3)],
        follower_lags=[("a", 0, 102, 7), ("a", 0, 103, -1)])

    class Once:
        def collect(self) -> Iterator[Any]:
            return broker_metrics.partition_families(taken)

    def parsed(text: bytes) -> list[tuple[str, str, str, Samples]]:
        return [(f.name, f.type, f.documentation,
                 {(s.name, tuple(sorted(s.labels.items()))): s.value for s in f.samples})
                for f in text_string_to_metric_families(text.decode())]
    expected = parsed(generate_latest(Once()))  # type: ignore[arg-type]
    assert parsed(broker_metrics.partition_exposition(taken)) == expected
    assert len(expected) == len(PARTITION_GAUGE_NAMES)
    assert expected[-1][3][("tidelog_broker_log_size_bytes",
                            (("partition", "0"), ("topic", "a")))] == 11


def test_before_the_timer_binds_them_the_counts_are_zero_and_no_series_exist() -> None:
    registry = CollectorRegistry()
    broker_metrics.BrokerMetrics(registry)
    assert scraped(registry) == {
        ("tidelog_broker_" + name, ()): 0.0
        for name in ("leader_count", "partition_count", "under_replicated_partitions",
                     "under_min_isr_partitions", "acks_all_waiting")}
    names = [f.name for f in registry.collect() if f.name in PARTITION_GAUGE_NAMES]
    assert tuple(names) == PARTITION_GAUGE_NAMES


def test_a_loop_that_does_not_answer_gets_the_previous_snapshot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(broker_metrics, "SNAPSHOT_TIMEOUT_S", 0.05)

    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1]])
        manager, registry = c.managers[1], c.registries[1]
        manager.run_job("gauges")
        before = await asyncio.to_thread(scraped, registry)
        assert before[("tidelog_broker_partition_count", ())] == 1
        c.create_topic("u", [[1]])
        got: list[Samples] = []
        scraper = threading.Thread(target=lambda: got.append(scraped(registry)))
        with caplog.at_level(logging.WARNING, logger="tidelog.broker.metrics"):
            scraper.start()
            time.sleep(0.5)  # the event loop is busy: the scrape gives up waiting for it
            scraper.join()
        assert got == [before], "the previous snapshot, not an empty or a partial one"
        assert "no partition snapshot" in caplog.text
        after = await asyncio.to_thread(scraped, registry)
        assert after[("tidelog_broker_partition_count", ())] == 2
        assert after == timer_gauges(manager)
    scenario(tmp_path, body, broker_ids=(1,))


# --- the gauges tick of an idle broker ----------------------------------------------------------


class _WatchedPartitions(dict[Any, Partition]):
    """The replica manager's partition map, counting the walks over it."""

    walks = 0

    def values(self) -> Any:
        type(self).walks += 1
        return super().values()

    def items(self) -> Any:
        type(self).walks += 1
        return super().items()

    def keys(self) -> Any:
        type(self).walks += 1
        return super().keys()

    def __iter__(self) -> Iterator[Any]:
        type(self).walks += 1
        return super().__iter__()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[Partition]:
    """Partition.maybe_flush calls, by partition."""
    calls: list[Partition] = []
    real = Partition.maybe_flush

    def maybe_flush(self: Partition, now_ms: int) -> bool:
        calls.append(self)
        return real(self, now_ms)
    monkeypatch.setattr(Partition, "maybe_flush", maybe_flush)
    _WatchedPartitions.walks = 0
    return calls


def watch(manager: ReplicaManager) -> None:
    manager._partitions = _WatchedPartitions(manager._partitions)


def flushes(c: Cluster, broker: int) -> float:
    return c.registries[broker].get_sample_value("tidelog_broker_log_flushes_total") or 0


def test_an_idle_gauges_tick_walks_no_partition(tmp_path: Path, counted: list[Partition]
                                                ) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1]] * 200)
        c.create_topic("flushed", [[1]] * 20, {"flush.ms": "1000"})
        await c.produce("t", batch(b"x"), partition=3)  # default flush settings: nothing owed
        manager = c.managers[1]
        manager.run_job("gauges")  # anything left from the set-up
        counted.clear()
        watch(manager)
        for _ in range(10):
            manager.run_job("gauges")
        assert (_WatchedPartitions.walks, counted) == (0, []), "no partition visited"
        assert len(manager.partitions()) == 220
    scenario(tmp_path, body, broker_ids=(1,))


def test_flush_ms_checks_only_partitions_with_unflushed_appends_and_flushes_on_time(
        tmp_path: Path, counted: list[Partition], monkeypatch: pytest.MonkeyPatch) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        topic_id = c.create_topic("f", [[1]] * 50, {"flush.ms": "1000"})
        manager = c.managers[1]
        watch(manager)
        clock = [1_000_000]
        monkeypatch.setattr(replica_manager, "_monotonic_ms", lambda: clock[0])
        appended = manager.start_append(TopicIdPartition(topic_id, 7), batch(b"x"), acks=1,
                                        now_ms=int(time.time() * 1000), monotonic_ms=clock[0])
        assert appended.outcome.error is None
        hosted = manager.partition(topic_id, 7)
        assert hosted is not None

        clock[0] += 999
        manager.run_job("gauges")
        assert counted == [hosted] and flushes(c, 1) == 0, "checked, not yet due"
        clock[0] += 1
        manager.run_job("gauges")
        assert counted == [hosted, hosted] and flushes(c, 1) == 1, "flushed when due"
        clock[0] += 5_000
        manager.run_job("gauges")
        assert len(counted) == 2 and flushes(c, 1) == 1, "nothing owed: no longer checked"
        assert _WatchedPartitions.walks == 0

        # Appends to two partitions: one fsync covers both (as the old walk over all did).
        for partition in (1, 2):
            manager.start_append(TopicIdPartition(topic_id, partition), batch(b"y"), acks=1,
                                 now_ms=int(time.time() * 1000), monotonic_ms=clock[0])
        clock[0] += 1_000
        manager.run_job("gauges")
        assert flushes(c, 1) == 2
        counted.clear()
        manager.run_job("gauges")
        assert counted == [] and _WatchedPartitions.walks == 0
    scenario(tmp_path, body, broker_ids=(1,))


def test_a_followers_appends_are_flushed_by_flush_ms(
        tmp_path: Path, counted: list[Partition], monkeypatch: pytest.MonkeyPatch) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("f", [[1, 2]], {"flush.ms": "60000"})
        assert (await c.produce("f", batch(b"x"))).error_code == ErrorCode.NONE
        await c.converged("f", (1, 2))
        follower = c.managers[2]
        hosted = follower.partition(c.controller.topic_id("f"), 0)
        follower.run_job("gauges")
        assert hosted in counted, "the follower's append is on the flush timer"
        before = flushes(c, 2)
        monkeypatch.setattr(replica_manager, "_monotonic_ms",
                            lambda: int(time.monotonic() * 1000) + 60_000)
        follower.run_job("gauges")
        assert flushes(c, 2) == before + 1, "fsynced once flush.ms passed"
    scenario(tmp_path, body, broker_ids=(1, 2))


def test_a_lowered_flush_ms_applies_to_appends_counted_before_it(
        tmp_path: Path, counted: list[Partition], monkeypatch: pytest.MonkeyPatch) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        # flush.messages set, flush.ms Kafka's default: appends are counted, never timed.
        c.create_topic("f", [[1]], {"flush.messages": "100"})
        assert (await c.produce("f", batch(b"x"), acks=1)).error_code == ErrorCode.NONE
        manager = c.managers[1]
        manager.run_job("gauges")
        assert counted == [] and flushes(c, 1) == 0
        response = c.controller.alter_configs(TOPIC, "f", alter_op("flush.ms", "10000"))
        assert all(r.error_code == ErrorCode.NONE for r in response.resources), response
        c.publish()
        monkeypatch.setattr(replica_manager, "_monotonic_ms",
                            lambda: int(time.monotonic() * 1000) + 10_000)
        manager.run_job("gauges")
        assert counted and flushes(c, 1) == 1, "the earlier append is fsynced"
    scenario(tmp_path, body, broker_ids=(1,))


def test_a_partition_deleted_with_unflushed_appends_is_dropped(
        tmp_path: Path, counted: list[Partition]) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("f", [[1]], {"flush.ms": "60000"})
        assert (await c.produce("f", batch(b"x"), acks=1)).error_code == ErrorCode.NONE
        manager = c.managers[1]
        manager.run_job("gauges")
        checked = len(counted)
        assert checked >= 1
        c.controller.submit(c.controller.logic.handle_delete_topics(
            cpb.DeleteTopicsRequest(names=["f"]), c.controller.now_ms))
        c.publish()
        manager.run_job("gauges")
        manager.run_job("gauges")
        assert len(counted) == checked and flushes(c, 1) == 0
    scenario(tmp_path, body, broker_ids=(1,))


# --- the controller's stats -------------------------------------------------------------------


def test_controller_stats_walk_the_partitions_only_after_they_changed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    walks = [0]
    real = TopicsImage.iter_partitions

    def iter_partitions(self: TopicsImage) -> Any:
        walks[0] += 1
        return real(self)
    monkeypatch.setattr(TopicsImage, "iter_partitions", iter_partitions)

    def fresh(c: TestCluster) -> tuple[int, ...]:
        image = c.logic.committed_image
        return (len(image.cluster.brokers),
                sum(1 for b in image.cluster.brokers.values() if b.fenced),
                len(image.topics.by_id),
                sum(t.num_partitions for t in image.topics.by_id.values()),
                sum(1 for _, _, p in real(image.topics) if not p.has_leader))

    def stats(c: TestCluster) -> tuple[int, ...]:
        s = c.logic.stats()
        return (s.registered_brokers, s.fenced_brokers, s.topics, s.partitions,
                s.offline_partitions)

    c = TestCluster()
    c.activate()
    c.add_brokers([1, 2])
    assert c.create_topics(create_topic("t", partitions=4, replication_factor=2)) \
        .topics[0].error_code == ErrorCode.NONE
    def walked(c: TestCluster) -> int:
        """How many partition walks one stats() call made."""
        before = walks[0]
        assert stats(c) == fresh(c)
        return walks[0] - before

    assert walked(c) == 1
    assert [walked(c) for _ in range(5)] == [0] * 5, "memoised"
    offset = c.logic.committed_offset
    # A committed NoOp: a new image, the same cluster and topics.
    c.commit_records([metadata_record(metadata_pb2.NoOpRecord(controller_id=1))])
    assert c.logic.committed_offset == offset + 1
    assert walked(c) == 0
    c.heartbeat(2, want_fence=True)  # broker 2 fenced: cluster and topics (leaders, ISR) change
    assert walked(c) == 1 and stats(c)[1] == 1
    assert walked(c) == 0
    c.autocommit = False  # a proposal in flight: pending_batches is read at each call
    c.heartbeat(2)
    assert c.logic.stats().pending_batches == len(c.in_flight) == 1
    assert walked(c) == 0
    c.commit()
    assert c.logic.stats().pending_batches == 0
    assert stats(c) == fresh(c)
