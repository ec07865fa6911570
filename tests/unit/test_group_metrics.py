"""broker/group/metrics.py on a real runtime (real replica manager and RocksDB, in-process):
the collector reads the loaded shards at scrape time, from another thread (as the metrics HTTP
server does), through the event loop; the series caps hold and say what they left out.

How: the runtime helper of test_group_runtime.py; ``generate_latest`` runs in a worker thread
while the loop keeps serving, so the snapshot has to hop onto the loop to be taken.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from test_group_runtime import GROUP, TOPIC, Runtime
from test_replica_manager import Cluster, scenario

from tidelog.broker.group import metrics
from tidelog.broker.group.metrics import GroupMetricsCollector
from tidelog.metadata.topic_names import OFFSETS_TOPIC
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def scrape(registry: CollectorRegistry
                 ) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return await asyncio.get_running_loop().run_in_executor(None, samples, registry)


def test_group_series_after_a_join_and_commits(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic(TOPIC, [[1], [1]])
        c.create_topic(OFFSETS_TOPIC, [[1]], {"cleanup.policy": "compact"})
        rt = Runtime(c)
        registry = CollectorRegistry()
        registry.register(GroupMetricsCollector(rt.runtime))
        before = await scrape(registry)  # not started: no loop to ask, no group series
        assert before[("tidelog_group_metrics_snapshot_failed", ())] == 1
        await rt.runtime.start()
        try:
            rt.publish(c.managers[1].image)
            await rt.loaded()
            member = await rt.join()
            assert member.error_code == ErrorCode.NONE, member
            for offset in (3, 5):
                answer = await rt.commit(member, offset)
                assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE
            found = await scrape(registry)
        finally:
            await rt.runtime.stop()
        g = (("group", GROUP),)
        part = (("group", GROUP), ("partition", "0"), ("topic", TOPIC))
        assert found[("tidelog_group_metrics_snapshot_failed", ())] == 0
        assert found[("tidelog_group_members", g)] == 1
        assert found[("tidelog_group_epoch", g)] == 1
        assert found[("tidelog_group_state", (("group", GROUP), ("state", "Stable")))] == 1
        assert found[("tidelog_group_rebalances_total", g)] == 1
        assert found[("tidelog_group_offset_commits_total", g)] == 2
        assert found[("tidelog_group_committed_offset", part)] == 5
        assert found[("tidelog_group_lag", part)] == 0  # nothing produced: HW 0, floored
    scenario(tmp_path, body, broker_ids=(1,))


def test_series_caps_count_what_they_leave_out(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "GROUPS_MAX", 2)
    monkeypatch.setattr(metrics, "PARTITION_SERIES_MAX", 3)

    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic(TOPIC, [[1], [1]])
        c.create_topic(OFFSETS_TOPIC, [[1]], {"cleanup.policy": "compact"})
        rt = Runtime(c)
        rt.publish(c.managers[1].image)
        await rt.loaded()
        for group in ("a", "b", "c"):  # simple consumers: 2 partitions each
            answer = await rt.handlers.offset_commit(simple_commit(group))
            assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE, answer
        taken = metrics.snapshot(rt.runtime)
        assert len(taken.groups) == 2 and taken.groups_omitted == 1
        assert len(taken.partitions) == 3 and taken.partitions_omitted == 1
    scenario(tmp_path, body, broker_ids=(1,))


def simple_commit(group: str) -> pb.OffsetCommitRequest:
    return pb.OffsetCommitRequest(group_id=group, member_id="", member_epoch=-1, topics=[
        pb.OffsetCommitRequest.Topic(name=TOPIC, partitions=[
            pb.OffsetCommitRequest.Partition(partition_id=p, committed_offset=1,
                                             committed_leader_epoch=-1) for p in (0, 1)])])
