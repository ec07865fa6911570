"""Inconsistent offsets: one position holding different values.

Jepsen's ``version-orders`` errors (jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``):
every send acknowledgement and every poll must agree on the value at a (topic, partition,
offset). Two reads that disagree saw a committed record replaced: consumers read only below
the HW, and a clean leader election keeps everything below it. An acks=1 acknowledgement that
disagrees with a read is the trace of an acks=1 write lost in a failover (its offset was
taken by another), which acks=1 allows. So the promise, when durable, forbids a disagreement
between two *committed* observations: reads, and acknowledgements of acks=all sends.
"""

from __future__ import annotations

from tidelog.chaos.checkers.model import Anomaly, Collector, Json, Promise, evidence
from tidelog.chaos.checkers.observations import Observations
from tidelog.chaos.history import Entry, Send

__all__ = ["check_inconsistent_offsets"]


def check_inconsistent_offsets(obs: Observations, promise: Promise, out: Collector) -> None:
    for position in sorted({*obs.read_at, *obs.acked_at}):
        read = obs.read_at.get(position, {})
        acked = obs.acked_at.get(position, {})
        values = sorted({*read, *acked})
        if len(values) < 2:
            continue
        committed = set(read) | {v for v, e in acked.items() if _acks_all(e)}
        topic, partition, offset = position
        listed: list[Json] = list(values[:8])
        out.add(Anomaly(
            "inconsistent-offsets", promise.durable and len(committed) >= 2,
            f"{topic}-{partition}@{offset} holds {len(values)} values: "
            + ", ".join(str(v) for v in values[:8]),
            evidence(*(e for v in values for e in (acked.get(v), read.get(v)))),
            {"topic": topic, "partition": partition, "offset": offset, "values": listed}))


def _acks_all(entry: Entry) -> bool:
    return isinstance(entry.op, Send) and entry.op.acks == "all"
