"""The chaos queue workload (chaos/workload/) against a real cluster, without faults.

One run for the module: 1 controller + 3 broker processes (tests/integration/cluster_harness.py),
a topic of 3 partitions with replication factor 3 and min.insync.replicas 2; two idempotent
acks=all producers (and, to record those paths too, an acks=1 and an acks=0 one), one
consumer that assigns every partition and two consumers in a group that subscribe and commit,
all recording into one history for a few seconds; then the final drain, the wait for every
replica to be in sync, kill -9 of the brokers and the replica dumps read from their data
dirs. What it checks:

- the history passes every checker under the durable promise, with no anomaly at all, and it
  is a real run: acknowledged sends, polls with records from the assign consumer and from both
  group consumers, a complete drain that read every acknowledged value;
- the replica dumps of the healthy cluster agree (three replicas of every partition, the same
  batches below the HW), and a dump altered in one batch is reported as replica-divergence;
- the checkers can fail: an acknowledged value removed from every poll of a copy of the history
  (the cluster itself untouched) is a lost-write, which breaks the promise;
- client errors never end the workload: against an address where nothing listens every send
  is recorded as fail (send() raised: nothing was sent), the assign consumer keeps reopening
  until the deadline, the group consumers' polls return nothing, every worker stops, and the
  history is valid.

Every wait is bounded; the module takes about half a minute.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cluster_harness import ClusterHarness

from tidelog.chaos.checkers import HistoryCheck, Promise, ReplicaDumps, check_history
from tidelog.chaos.history import HistoryWriter, Poll, Send, read_history
from tidelog.chaos.workload import (
    ClientSettings,
    DrainResult,
    InSyncPartitions,
    ProducerSpec,
    QueueWorkload,
    QueueWorkloadConfig,
    RunContext,
    WorkloadResult,
    drain,
    dump_replicas,
    wait_for_replicas_in_sync,
)
from tidelog.client import Admin, NewTopic
from tidelog.local_cluster import HOST, free_ports

pytestmark = pytest.mark.integration

OVERRIDES = {
    "controller": {"broker_session_timeout_ms": 3_000, "fence_check_interval_ms": 100},
    "broker": {"offsets_topic_num_partitions": 3, "heartbeat_interval_ms": 500,
               "group_consumer_heartbeat_interval_ms": 200,
               "group_consumer_session_timeout_ms": 6_000},
}
TOPIC = "queue"
PARTITIONS = 3
DURATION_S = 8.0
WAIT_S = 30.0
PROMISE = Promise(replication_factor=3, min_insync_replicas=2, unclean_leader_election=False)
CLIENT = ClientSettings(request_timeout_ms=5_000, delivery_timeout_ms=10_000,
                        close_timeout_ms=5_000, poll_timeout_ms=100)


@dataclass(frozen=True)
class Run:
    history: Path
    result: WorkloadResult
    drained: DrainResult
    in_sync: InSyncPartitions
    dumps: ReplicaDumps


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    base: Path = tmp_path_factory.mktemp("chaos-workload")
    with ClusterHarness.started(base / "cluster", controllers=1, brokers=3,
                                overrides=OVERRIDES) as cluster:
        cluster.start_brokers()
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3,
                                          {"min.insync.replicas": "2"})]).all()
        config = QueueWorkloadConfig(
            cluster.bootstrap, TOPIC, duration_s=DURATION_S,
            producers=(ProducerSpec("all", True), ProducerSpec("all", True),
                       ProducerSpec("1", False), ProducerSpec("0", False)),
            assign_consumers=1, group_consumers=2, group_id="chaos", rate_per_s=200.0,
            finish_timeout_s=WAIT_S, client=CLIENT)
        history = base / "history.jsonl"
        with HistoryWriter(history) as writer:
            ctx = RunContext(writer)
            result = QueueWorkload(config, ctx).run()
            drained = drain(ctx, bootstrap=cluster.bootstrap, topic=TOPIC, timeout_s=WAIT_S,
                            client=CLIENT)
        in_sync = wait_for_replicas_in_sync(cluster.bootstrap, [TOPIC], timeout_s=WAIT_S)
        for name in cluster.broker_names:
            cluster.kill(name)
        dumps = dump_replicas({cluster.node(name).node_id: cluster.local.data_dir(name)
                               for name in cluster.broker_names}, in_sync.topic_ids)
        yield Run(history, result, drained, in_sync, dumps)


def anomalies(check: HistoryCheck) -> dict[str, list[str]]:
    return {r.kind: [a.message for a in r.examples] for r in check.results if r.count}


def test_a_run_without_faults_passes_every_checker(run: Run) -> None:
    history = read_history(run.history)
    check = check_history(history, PROMISE, replicas=run.dumps,
                          high_watermarks=run.in_sync.high_watermarks)
    assert check.valid and not anomalies(check), anomalies(check)
    assert run.result.stuck == ()
    # A real run: acknowledged sends, and records read by every kind of consumer.
    acked = {e.op.value: e.op for e in history
             if isinstance(e.op, Send) and e.op.type == "ok"}
    assert len(acked) > 200, check.op_counts
    assert {op.acks for op in acked.values()} == {"all", "1", "0"}
    assert all(op.offset is None for op in acked.values() if op.acks == "0")
    assert {op.partition for op in acked.values()} == set(range(PARTITIONS))
    readers = {e.op.process for e in history
               if isinstance(e.op, Poll) and e.op.type == "ok" and e.op.records}
    for kind in ("assign-consumer", "group-consumer"):
        for process in run.result.processes_of(kind):
            assert process in readers, f"{kind} process {process} read nothing"
    # The drain read every acknowledged value, to the HWs it captured.
    assert run.drained.complete, run.drained.error
    drained = {r.value for e in history if isinstance(e.op, Poll) and e.op.drain
               for r in e.op.records}
    assert set(acked) <= drained
    assert run.drained.high_watermarks == {
        p: hw for (_, p), hw in run.in_sync.high_watermarks.items()}


def test_the_replica_dumps_of_a_healthy_cluster_agree(run: Run) -> None:
    assert set(run.dumps) == {(TOPIC, p) for p in range(PARTITIONS)}
    for tp, replicas in run.dumps.items():
        hw = run.in_sync.high_watermarks[tp]
        assert len(replicas) == 3, (tp, sorted(replicas))
        logs = [[entry for entry in entries if entry[0] < hw] for entries in replicas.values()]
        assert logs[0], f"{tp}: nothing below HW {hw}"
        assert all(log == logs[0] for log in logs), tp
    # The divergence checker sees one replica's batch changed.
    tp = (TOPIC, 0)
    broker = min(run.dumps[tp])
    altered = {key: {b: list(entries) for b, entries in replicas.items()}
               for key, replicas in run.dumps.items()}
    offset, _ = altered[tp][broker][0]
    altered[tp][broker][0] = (offset, "0" * 32)
    check = check_history(read_history(run.history), PROMISE, replicas=altered,
                          high_watermarks=run.in_sync.high_watermarks)
    assert check.result("replica-divergence").count == 1
    assert not check.valid


def test_an_acknowledged_value_dropped_from_the_reads_is_a_lost_write(run: Run,
                                                                      tmp_path: Path) -> None:
    history = read_history(run.history)
    acked = sorted((e.op.partition or 0, e.op.offset, e.op.value) for e in history
                   if isinstance(e.op, Send) and e.op.type == "ok" and e.op.acks == "all"
                   and e.op.offset is not None)
    # Not the last of its partition: reads went past it, so it is lost rather than unseen.
    partition, offset, value = next(a for a, b in itertools.pairwise(acked)
                                    if a[0] == b[0])
    tampered = tmp_path / "history.jsonl"
    with open(run.history) as src, open(tampered, "w") as dst:
        for line in src:
            obj = json.loads(line)
            if obj["f"] == "poll" and obj["type"] == "ok":
                obj["records"] = [r for r in obj["records"] if r[2] != value]
            dst.write(json.dumps(obj) + "\n")
    check = check_history(read_history(tampered), PROMISE)
    lost = check.result("lost-write")
    assert lost.count == 1 and lost.forbidden_count == 1, anomalies(check)
    assert lost.examples[0].details["value"] == value
    assert lost.examples[0].details["offset"] == offset
    assert lost.examples[0].details["partition"] == partition
    # The reads that went past it now also jump over the offset its acknowledgement showed.
    assert set(check.forbidden_kinds) <= {"lost-write", "int-poll-skip", "poll-skip"}, (
        anomalies(check))


def test_client_errors_are_recorded_and_never_end_the_workload(tmp_path: Path) -> None:
    nowhere = f"{HOST}:{free_ports(1)[0]}"
    quick = ClientSettings(request_timeout_ms=300, delivery_timeout_ms=1_000, max_block_ms=300,
                           close_timeout_ms=1_000, reopen_backoff_ms=50)
    config = QueueWorkloadConfig(nowhere, TOPIC, duration_s=2.0, rate_per_s=20.0,
                                 finish_timeout_s=10.0, client=quick,
                                 producers=(ProducerSpec("all", True), ProducerSpec("1", False)))
    with HistoryWriter(tmp_path / "history.jsonl") as writer:
        result = QueueWorkload(config, RunContext(writer)).run()
    assert result.stuck == ()
    history = read_history(tmp_path / "history.jsonl")
    sends = [e.op for e in history if isinstance(e.op, Send) and e.op.type != "invoke"]
    assert sends and all(op.type == "fail" and op.error for op in sends)
    producers = [w for w in result.workers if w.kind == "producer"]
    assert all(w.stats.fail == w.stats.invoked > 0 for w in producers), result.to_json()
    # The assign consumer cannot even find the partitions: it reopens until the deadline.
    (assign,) = [w for w in result.workers if w.kind == "assign-consumer"]
    assert assign.stats.errors["NETWORK_EXCEPTION"] >= 2, result.to_json()
    # A group member without a coordinator polls on and gets nothing, as Kafka's does.
    polls = [e.op for e in history if isinstance(e.op, Poll) and e.op.type == "ok"]
    for process in result.processes_of("group-consumer"):
        assert any(op.process == process for op in polls), result.to_json()
    assert all(not op.records for op in polls)
