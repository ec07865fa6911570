"""Jepsen-style checkers over a chaos run's history, and the verdict from the scenario's promise.

    from tidelog.chaos.history import read_history
    from tidelog.chaos.checkers import Promise, check_history

    result = check_history(read_history("history.jsonl"), Promise(min_insync_replicas=2))
    result.valid              # False when an anomaly the promise forbids was found
    result.to_json()          # counts per kind, the first few anomalies with their operations

One module per checker, all pure (a history in, anomalies out): lost.py (lost-write, unseen),
duplicates.py, offsets.py (inconsistent-offsets), reads.py (G1a, unexpected-value), polls.py
(int-nonmonotonic-poll, int-poll-skip, nonmonotonic-poll, poll-skip) and divergence.py (replica
divergence, over replica dumps rather than the history). observations.py indexes the history
once for all of them; model.py holds the promise and the result types. Definitions follow
Jepsen's queue workload checker (jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``);
docs/chaos.md states each one and where ours differ. Out of scope, as there are no
transactions: G0, G1c, int-send-skip, precommitted reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tidelog.chaos.checkers.divergence import ReplicaDumps, check_replicas
from tidelog.chaos.checkers.duplicates import check_duplicates
from tidelog.chaos.checkers.lost import check_lost
from tidelog.chaos.checkers.model import (
    ANOMALY_EXAMPLES_MAX,
    EVIDENCE_OPS_MAX,
    KINDS,
    Anomaly,
    CheckerResult,
    Collector,
    Json,
    Promise,
)
from tidelog.chaos.checkers.observations import TopicPartition, observe
from tidelog.chaos.checkers.offsets import check_inconsistent_offsets
from tidelog.chaos.checkers.polls import check_polls
from tidelog.chaos.checkers.reads import check_reads
from tidelog.chaos.history import History

__all__ = [
    "ANOMALY_EXAMPLES_MAX",
    "EVIDENCE_OPS_MAX",
    "KINDS",
    "Anomaly",
    "CheckerResult",
    "HistoryCheck",
    "Promise",
    "ReplicaDumps",
    "check_history",
]


@dataclass(frozen=True, slots=True)
class HistoryCheck:
    """Every checker's result over one history, and the verdict."""

    promise: Promise
    #: f -> type -> operations (invokes and completions counted apart)
    op_counts: Mapping[str, Mapping[str, int]]
    results: tuple[CheckerResult, ...]  # one per kind, in KINDS order

    @property
    def valid(self) -> bool:
        """The promise held: no anomaly it forbids."""
        return not any(r.forbidden_count for r in self.results)

    @property
    def forbidden_kinds(self) -> tuple[str, ...]:
        return tuple(r.kind for r in self.results if r.forbidden_count)

    def result(self, kind: str) -> CheckerResult:
        for r in self.results:
            if r.kind == kind:
                return r
        raise KeyError(kind)

    def to_json(self) -> dict[str, Json]:
        counts: dict[str, Json] = {f: dict(types) for f, types in self.op_counts.items()}
        return {"valid": self.valid, "promise": self.promise.to_json(), "ops": counts,
                "forbidden_kinds": list(self.forbidden_kinds),
                "anomalies": {r.kind: r.to_json() for r in self.results}}


def check_history(history: History, promise: Promise, *,
                  replicas: ReplicaDumps | None = None,
                  high_watermarks: Mapping[TopicPartition, int] | None = None) -> HistoryCheck:
    """Run every checker over ``history`` (and ``replicas``, when collected) under ``promise``.
    """
    obs = observe(history)
    out = Collector()
    check_lost(obs, promise, out)
    check_duplicates(obs, promise, out)
    check_inconsistent_offsets(obs, promise, out)
    check_reads(obs, promise, out)
    check_polls(obs, promise, out, history.entries)
    if replicas is not None:
        check_replicas(replicas, high_watermarks or {}, out)
    return HistoryCheck(promise, _op_counts(history), out.results())


def _op_counts(history: History) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for entry in history:
        by_type = counts.setdefault(entry.op.f, {"invoke": 0, "ok": 0, "fail": 0, "info": 0})
        by_type[entry.op.type] += 1
    return counts
