"""The queue workload (Jepsen's kafka queue workload): producers of unique values and consumers,
all recording into one history, for a bounded time.

    ctx = RunContext(HistoryWriter(run_dir / "history.jsonl"))
    workload = QueueWorkload(QueueWorkloadConfig(bootstrap, "queue", duration_s=60), ctx)
    workload.start()
    ...                               # the nemesis breaks and heals the cluster meanwhile
    result = workload.join()          # at the deadline; bounded by finish_timeout_s
    drained = drain(ctx, bootstrap=bootstrap, topic="queue", timeout_s=30)

One thread per client, in the runner's process: a workload generator on a small machine spends
its time waiting on the network, and threads share one history writer (thread-safe) and one
clock without inter-process plumbing. The clients are tidelog's own (``Producer``,
``Consumer``), each with its own connections and the client library's shared I/O thread.

- producers (chaos/workload/producers.py): one per :class:`ProducerSpec` (acks 0/1/all,
  idempotence on/off), together at most ``rate_per_s`` sends per second;
- assign consumers and group consumers (chaos/workload/consumers.py).

Every worker stops at the deadline (``duration_s`` after :meth:`QueueWorkload.start`) or when
the run's stop signal is set (:meth:`QueueWorkload.stop`, or a workload bug);
:meth:`QueueWorkload.join` waits for them at most ``finish_timeout_s`` past the deadline and
names any that did not stop (they are daemon threads: they cannot keep the process alive). A
client error never stops the workload: it is recorded in the history (``fail``/``info``) and
counted. A history line the writer refuses is a workload bug: :meth:`join` raises it as
:class:`WorkloadBugError`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from tidelog.chaos.history import HistoryError
from tidelog.chaos.workload.config import QueueWorkloadConfig
from tidelog.chaos.workload.consumers import AssignConsumerWorker, GroupConsumerWorker
from tidelog.chaos.workload.context import RunContext
from tidelog.chaos.workload.producers import ProducerWorker
from tidelog.chaos.workload.stats import WorkerStats

__all__ = ["QueueWorkload", "WorkerSummary", "WorkloadBugError", "WorkloadResult"]


class WorkloadBugError(RuntimeError):
    """The workload wrote an operation the history refuses: a bug in chaos/workload."""

    def __init__(self, error: HistoryError) -> None:
        super().__init__(f"the workload wrote an invalid history line: {error}")
        self.error = error


@dataclass(frozen=True, slots=True)
class WorkerSummary:
    """One worker: its kind (``producer``, ``assign-consumer``, ``group-consumer``), what it
    is, its history processes, and its stats."""

    name: str
    kind: str
    description: str
    processes: tuple[int, ...]
    stats: WorkerStats

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "description": self.description,
                "processes": list(self.processes), "stats": self.stats.to_json()}


@dataclass(frozen=True, slots=True)
class WorkloadResult:
    workers: tuple[WorkerSummary, ...]
    #: Workers still running when join() gave up (names)
    stuck: tuple[str, ...]

    def processes_of(self, kind: str) -> set[int]:
        return {p for w in self.workers if w.kind == kind for p in w.processes}

    def to_json(self) -> dict[str, object]:
        return {"workers": [w.to_json() for w in self.workers], "stuck": list(self.stuck)}


class QueueWorkload:
    """Starts the workers of ``config``; see the module doc."""

    def __init__(self, config: QueueWorkloadConfig, ctx: RunContext) -> None:
        self.config = config
        self.ctx = ctx
        self.deadline_s: float | None = None
        self._producers: list[ProducerWorker] = []
        self._consumers: list[AssignConsumerWorker | GroupConsumerWorker] = []

    def start(self) -> None:
        if self.deadline_s is not None:
            raise RuntimeError("the workload was already started")
        c = self.config
        deadline = self.deadline_s = time.monotonic() + c.duration_s
        rate = c.rate_per_s / max(1, len(c.producers))
        self._producers = [
            ProducerWorker(self.ctx, index=i, spec=spec, bootstrap=c.bootstrap, topic=c.topic,
                           rate_per_s=rate, deadline_s=deadline,
                           finish_timeout_s=c.finish_timeout_s, client=c.client)
            for i, spec in enumerate(c.producers)
        ]
        self._consumers = [
            AssignConsumerWorker(self.ctx, index=i, bootstrap=c.bootstrap, topic=c.topic,
                                 deadline_s=deadline, client=c.client)
            for i in range(c.assign_consumers)
        ]
        self._consumers += [
            GroupConsumerWorker(self.ctx, index=i, bootstrap=c.bootstrap, topic=c.topic,
                                deadline_s=deadline, client=c.client, group_id=c.group_id)
            for i in range(c.group_consumers)
        ]
        for worker in self._threads():
            worker.start()

    def stop(self) -> None:
        """Ask every worker to stop now (before the deadline)."""
        self.ctx.stop.set()

    def join(self) -> WorkloadResult:
        """Wait for the workers (until the deadline, then at most ``finish_timeout_s``);
        WorkloadBugError if the workload wrote an invalid operation."""
        if self.deadline_s is None:
            raise RuntimeError("the workload was not started")
        until = self.deadline_s + self.config.finish_timeout_s
        for worker in self._threads():
            worker.join(max(0.0, until - time.monotonic()))
        stuck = tuple(w.name for w in self._threads() if w.is_alive())
        if self.ctx.bug is not None:
            raise WorkloadBugError(self.ctx.bug)
        return WorkloadResult(self._summaries(), stuck)

    def run(self) -> WorkloadResult:
        """start() then join(): the whole workload, in the caller's thread."""
        self.start()
        return self.join()

    def _threads(self) -> list[threading.Thread]:
        return [*self._producers, *self._consumers]

    def _summaries(self) -> tuple[WorkerSummary, ...]:
        out = [WorkerSummary(w.name, "producer", w.spec.describe(), tuple(w.processes),
                             w.stats) for w in self._producers]
        for consumer in self._consumers:
            what = (f"group {consumer.group_id}" if isinstance(consumer, GroupConsumerWorker)
                    else "assign every partition")
            out.append(WorkerSummary(consumer.name, consumer.kind, what, (consumer.process,),
                                     consumer.stats))
        return tuple(out)
