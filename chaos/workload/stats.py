"""What one worker of the queue workload did, for the run's summary: operations invoked and
how they ended, records read, commits that failed, consumers opened, and client errors by
Kafka name (bounded: at most :data:`ERROR_KINDS_MAX` names, the rest under ``other``).

Each worker updates its own :class:`WorkerStats` (a producer's under its lock: completions
arrive on the client's I/O thread); the workload reads them once the workers have stopped.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from tidelog.chaos.workload.outcomes import describe_error

__all__ = ["ERROR_KINDS_MAX", "WorkerStats"]

#: Distinct error names counted per worker.
ERROR_KINDS_MAX: Final = 32


@dataclass
class WorkerStats:
    invoked: int = 0
    ok: int = 0
    fail: int = 0
    info: int = 0
    records: int = 0         # consumers: records read
    commits_failed: int = 0  # group consumers: commit_async errors
    opened: int = 0          # consumers: Consumers opened (1 + reopenings)
    errors: Counter[str] = field(default_factory=Counter)

    def count_error(self, error: BaseException) -> None:
        name = describe_error(error).split(":", 1)[0]
        known = name in self.errors or len(self.errors) < ERROR_KINDS_MAX
        self.errors[name if known else "other"] += 1

    def to_json(self) -> dict[str, object]:
        return {"invoked": self.invoked, "ok": self.ok, "fail": self.fail, "info": self.info,
                "records": self.records, "commits_failed": self.commits_failed,
                "opened": self.opened, "errors": dict(self.errors)}
