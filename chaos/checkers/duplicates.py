"""Duplicates: one value at more than one position.

Jepsen's ``duplicate-cases`` (jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``): values
are unique per run, so a value acknowledged or read at two positions (two offsets, or two
partitions) was appended twice. That is what a producer's retry does without idempotence, so
the promise forbids it only for an idempotent acks=all send under a durable promise (the
leader's producer state answers a retried batch with its first offset, DESIGN.md §9).
"""

from __future__ import annotations

from tidelog.chaos.checkers.model import Anomaly, Collector, Json, Promise, evidence
from tidelog.chaos.checkers.observations import Observations
from tidelog.chaos.history import Entry, Send

__all__ = ["check_duplicates"]


def check_duplicates(obs: Observations, promise: Promise, out: Collector) -> None:
    for value, positions in obs.positions.items():
        if len(positions) < 2:
            continue
        ordered = sorted(positions)
        shown: list[Entry | None] = []
        for position in ordered:
            shown.append(obs.acked_at.get(position, {}).get(value))
            shown.append(obs.read_at.get(position, {}).get(value))
        send = obs.sends.get(value)
        op = send.op if send is not None else None
        forbidden = (promise.durable and isinstance(op, Send) and op.idempotent
                     and op.acks == "all")
        where = ", ".join(f"{t}-{p}@{o}" for t, p, o in ordered[:8])
        listed: list[Json] = [[t, p, o] for t, p, o in ordered[:8]]
        out.add(Anomaly(
            "duplicate", forbidden,
            f"value {value} is at {len(ordered)} positions: {where}",
            evidence(send, *shown), {"value": value, "positions": listed}))
