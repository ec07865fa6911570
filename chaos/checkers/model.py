"""What the checkers report: the scenario's :class:`Promise`, each :class:`Anomaly` with the
operations that show it, and the bounded per-kind :class:`CheckerResult`.

The promise decides whether an anomaly breaks the run (``forbidden``) or is only reported (an
acks=1 write lost in a failover is what acks=1 allows). The names of the anomaly kinds are
Jepsen's (jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``, ``analysis`` and
``condense-error``); ``unexpected-value`` and ``replica-divergence`` are ours. As in Jepsen's
``condense-error``, a result keeps every count but only the first
:data:`ANOMALY_EXAMPLES_MAX` anomalies of a kind, each naming at most
:data:`EVIDENCE_OPS_MAX` operations, so a huge history gives a report of bounded size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, TypeAlias, cast

from tidelog.chaos.history import Entry, op_to_json

__all__ = [
    "ANOMALY_EXAMPLES_MAX",
    "EVIDENCE_OPS_MAX",
    "KINDS",
    "Anomaly",
    "CheckerResult",
    "Collector",
    "Json",
    "Promise",
]

#: Anomalies kept per kind (all are counted). Jepsen keeps 8 to 32 depending on the kind.
ANOMALY_EXAMPLES_MAX: Final = 32
#: Operations named per anomaly, and offsets listed for one skip.
EVIDENCE_OPS_MAX: Final = 8

#: Every kind, in report order: losses first, then what reads show, then the replicas.
KINDS: Final = (
    "lost-write", "unseen", "duplicate", "inconsistent-offsets", "G1a", "unexpected-value",
    "int-nonmonotonic-poll", "int-poll-skip", "nonmonotonic-poll", "poll-skip",
    "replica-divergence",
)

Json: TypeAlias = "bool | int | str | list[Json] | dict[str, Json] | None"


@dataclass(frozen=True, slots=True)
class Promise:
    """What the scenario's cluster promises, from its configuration (DESIGN.md §10).

    ``durable``: acks=all writes survive the faults, which takes ``min.insync.replicas`` >= 2
    (so an acknowledged write is on two replicas) and no unclean leader election (which may
    elect a replica without it). Under a durable promise an acks=all send must never be lost,
    an idempotent send never duplicated, and no two committed reads disagree. Whatever the
    configuration, a failed send is never read, nothing is read that nobody sent, and the
    replicas agree below the HW after heal.
    """

    replication_factor: int = 3
    min_insync_replicas: int = 2
    unclean_leader_election: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.min_insync_replicas <= self.replication_factor:
            raise ValueError(f"min.insync.replicas must be within 1..replication factor "
                             f"({self.replication_factor}), got {self.min_insync_replicas}")

    @property
    def durable(self) -> bool:
        return self.min_insync_replicas >= 2 and not self.unclean_leader_election

    def to_json(self) -> dict[str, Json]:
        return {"replication_factor": self.replication_factor,
                "min_insync_replicas": self.min_insync_replicas,
                "unclean_leader_election": self.unclean_leader_election,
                "durable": self.durable}


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One anomaly: its kind, whether the promise forbids it, a one-line description, the
    operations that show it (by line, in history order) and its facts (topic, offset, ...)."""

    kind: str
    forbidden: bool
    message: str
    evidence: tuple[Entry, ...] = ()
    details: Mapping[str, Json] = field(default_factory=dict)

    def to_json(self) -> dict[str, Json]:
        ops: list[Json] = [{"line": e.line, "op": cast(Json, op_to_json(e.op))}
                           for e in self.evidence]
        return {"kind": self.kind, "forbidden": self.forbidden, "message": self.message,
                **self.details, "ops": ops}


@dataclass(frozen=True, slots=True)
class CheckerResult:
    """One kind's outcome: how many anomalies, how many the promise forbids, the first few."""

    kind: str
    count: int
    forbidden_count: int
    examples: tuple[Anomaly, ...]

    def to_json(self) -> dict[str, Json]:
        return {"kind": self.kind, "count": self.count,
                "forbidden_count": self.forbidden_count,
                "examples": [a.to_json() for a in self.examples]}


class Collector:
    """Counts every anomaly found and keeps the first :data:`ANOMALY_EXAMPLES_MAX` per kind,
    forbidden ones first (a report should show what broke the promise)."""

    def __init__(self) -> None:
        self._count: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._forbidden: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._examples: dict[str, list[Anomaly]] = {kind: [] for kind in KINDS}

    def add(self, anomaly: Anomaly) -> None:
        if anomaly.kind not in self._count:
            raise ValueError(f"unknown anomaly kind {anomaly.kind!r}")
        self._count[anomaly.kind] += 1
        self._forbidden[anomaly.kind] += anomaly.forbidden
        kept = self._examples[anomaly.kind]
        if len(kept) < ANOMALY_EXAMPLES_MAX:
            kept.append(anomaly)
        elif anomaly.forbidden:
            # Replace the last allowed example, so forbidden ones are never crowded out.
            for index in range(len(kept) - 1, -1, -1):
                if not kept[index].forbidden:
                    kept[index] = anomaly
                    break

    def results(self) -> tuple[CheckerResult, ...]:
        return tuple(CheckerResult(kind, self._count[kind], self._forbidden[kind],
                                   tuple(sorted(self._examples[kind],
                                                key=lambda a: not a.forbidden)))
                     for kind in KINDS)


def evidence(*entries: Entry | None) -> tuple[Entry, ...]:
    """The named operations: present ones, each once, in history order, at most
    :data:`EVIDENCE_OPS_MAX`."""
    unique = {e.line: e for e in entries if e is not None}
    return tuple(unique[line] for line in sorted(unique))[:EVIDENCE_OPS_MAX]
