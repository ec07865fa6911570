"""Histories for the chaos history and checker tests: a builder for hand-made ones, and a seeded
simulation of clients against a correct log (what a run on a cluster that keeps every promise
would record).

Both go through the real format: ``lines()`` encodes each operation and ``history()`` parses
those lines back with chaos.history.parse_history, so every test history is also a valid file.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from tidelog.chaos.history import (
    Acks,
    Fault,
    History,
    Op,
    OpType,
    Poll,
    PolledRecord,
    Send,
    encode_op,
    parse_history,
)

TOPIC = "t"


@dataclass
class Builder:
    """Operations in order; each helper returns the 1-based line of the completion."""

    ops: list[Op] = field(default_factory=list)
    time_ns: int = 0

    def _add(self, op: Op) -> int:
        self.ops.append(op)
        return len(self.ops)

    def _tick(self) -> int:
        self.time_ns += 1_000
        return self.time_ns

    def send(self, process: int, value: int, *, partition: int = 0, offset: int | None = None,
             outcome: OpType | None = "ok", acks: Acks = "all", idempotent: bool = True,
             topic: str = TOPIC) -> int:
        """``outcome`` None leaves the invoke open (the run was cut short)."""
        invoke = Send("invoke", process, self._tick(), topic, value, acks, idempotent)
        line = self._add(invoke)
        if outcome is None:
            return line
        if outcome == "ok":
            return self._add(replace(invoke, type="ok", time_ns=self._tick(),
                                     partition=partition, offset=offset))
        return self._add(replace(invoke, type=outcome, time_ns=self._tick(), error="TIMEOUT"))

    def poll(self, process: int, session: int, records: list[tuple[int, int, int]], *,
             outcome: OpType | None = "ok", drain: bool = False, topic: str = TOPIC) -> int:
        invoke = Poll("invoke", process, self._tick(), topic, session, drain)
        line = self._add(invoke)
        if outcome is None:
            return line
        polled = tuple(PolledRecord(*r) for r in records) if outcome == "ok" else ()
        return self._add(replace(invoke, type=outcome, time_ns=self._tick(), records=polled))

    def fault(self, name: str, *, start: bool, targets: tuple[str, ...] = ()) -> int:
        f = "start" if start else "stop"
        self._add(Fault("invoke", f, self._tick(), name, targets))
        return self._add(Fault("ok", f, self._tick(), name, targets))

    def lines(self) -> list[str]:
        return [encode_op(op) for op in self.ops]

    def history(self) -> History:
        return parse_history(self.lines())


# ============================================================================ simulation
@dataclass
class Simulation:
    """What a correct cluster did: the builder's operations plus the true logs."""

    builder: Builder
    logs: dict[int, list[int]]                 # partition -> values in offset order
    drain_lines: list[int]                     # completion lines of the drain's ok polls
    drain_session: int


def simulate(seed: int, *, steps: int = 120, partitions: int = 3) -> Simulation:
    """Producers (processes 0-2) and consumers (3-4) interleaved against correct logs, then a
    drain (process 9) that reads every partition from offset 0 to its end."""
    rng = random.Random(seed)
    b = Builder()
    logs: dict[int, list[int]] = {p: [] for p in range(partitions)}
    next_value = iter(range(1, 1_000_000))
    sessions = iter(range(1_000_000))
    consumers = {c: (next(sessions), dict.fromkeys(range(partitions), 0)) for c in (3, 4)}
    for _ in range(steps):
        if rng.random() < 0.6:
            _simulate_send(rng, b, logs, rng.randrange(3), next(next_value))
        else:
            _simulate_poll(rng, b, logs, consumers, rng.randrange(3, 5), sessions)
    if rng.random() < 0.5:  # a send cut short by the end of the run, appended or not
        value = next(next_value)
        b.send(rng.randrange(3), value, outcome=None)
        if rng.random() < 0.5:
            logs[rng.randrange(partitions)].append(value)
    drain_session = next(sessions)
    drain_lines = []
    for p in range(partitions):
        for start in range(0, len(logs[p]), 4):
            records = [(p, o, logs[p][o]) for o in range(start, min(start + 4, len(logs[p])))]
            drain_lines.append(b.poll(9, drain_session, records, drain=True))
    return Simulation(b, logs, drain_lines, drain_session)


def _simulate_send(rng: random.Random, b: Builder, logs: dict[int, list[int]], process: int,
                   value: int) -> None:
    partition = rng.randrange(len(logs))
    acks: Acks = rng.choice(["all", "all", "1", "0"])
    roll = rng.random()
    if roll < 0.7:
        offset = len(logs[partition])
        logs[partition].append(value)
        b.send(process, value, partition=partition,
               offset=None if acks == "0" else offset, acks=acks, idempotent=acks == "all")
    elif roll < 0.85:
        b.send(process, value, outcome="fail", acks=acks, idempotent=acks == "all")
    else:  # unknown outcome: it may or may not have been appended
        if rng.random() < 0.5:
            logs[partition].append(value)
        b.send(process, value, outcome="info", acks=acks, idempotent=acks == "all")


def _simulate_poll(rng: random.Random, b: Builder, logs: dict[int, list[int]],
                   consumers: dict[int, tuple[int, dict[int, int]]], process: int,
                   sessions: Iterator[int]) -> None:
    session, positions = consumers[process]
    if rng.random() < 0.1:  # a seek: a new session, anywhere in the logs
        session = next(sessions)
        positions = {p: rng.randint(0, len(log)) for p, log in logs.items()}
        consumers[process] = (session, positions)
    roll = rng.random()
    if roll < 0.1:
        b.poll(process, session, [], outcome=rng.choice(["fail", "info"]))
        return
    records = []
    for p in rng.sample(sorted(logs), rng.randint(1, len(logs))):
        end = min(len(logs[p]), positions[p] + rng.randint(0, 3))
        records += [(p, o, logs[p][o]) for o in range(positions[p], end)]
        positions[p] = end
    b.poll(process, session, records)
