"""Workloads of a chaos run: clients that record a history while the nemesis breaks the
cluster, a final drain on the healed cluster, and replica dumps for the divergence checker.

    from tidelog.chaos.history import HistoryWriter
    from tidelog.chaos.workload import (QueueWorkload, QueueWorkloadConfig, RunContext, drain,
                                dump_replicas, wait_for_replicas_in_sync)

    with HistoryWriter(run_dir / "history.jsonl") as writer:
        ctx = RunContext(writer)
        result = QueueWorkload(QueueWorkloadConfig(bootstrap, "queue", duration_s=30),
                               ctx).run()
        drained = drain(ctx, bootstrap=bootstrap, topic="queue", timeout_s=30)
    in_sync = wait_for_replicas_in_sync(bootstrap, ["queue"], timeout_s=30)
    ...                                   # stop the brokers
    dumps = dump_replicas({101: data_dir_101, ...}, in_sync.topic_ids)
    check_history(read_history(...), promise, replicas=dumps,
                  high_watermarks=in_sync.high_watermarks)

Modules: queue.py (the workload), producers.py and consumers.py (its workers), drain.py,
replicas.py; the pure parts: values.py (unique values and their bytes), pacing.py (the send
rate), outcomes.py (ok/fail/info of a send), sessions.py (a group consumer's sessions),
config.py, stats.py; context.py (what a run's workers share). docs/chaos.md, "Workloads",
describes them for users.
"""

from tidelog.chaos.workload.config import ClientSettings, ProducerSpec, QueueWorkloadConfig
from tidelog.chaos.workload.context import RunContext
from tidelog.chaos.workload.drain import DrainResult, drain
from tidelog.chaos.workload.queue import (
    QueueWorkload,
    WorkerSummary,
    WorkloadBugError,
    WorkloadResult,
)
from tidelog.chaos.workload.replicas import (
    InSyncPartitions,
    dump_replicas,
    wait_for_replicas_in_sync,
)

__all__ = [
    "ClientSettings",
    "DrainResult",
    "InSyncPartitions",
    "ProducerSpec",
    "QueueWorkload",
    "QueueWorkloadConfig",
    "RunContext",
    "WorkerSummary",
    "WorkloadBugError",
    "WorkloadResult",
    "drain",
    "dump_replicas",
    "wait_for_replicas_in_sync",
]
