"""Lost and unseen writes: acknowledged sends that no poll ever read.

Jepsen's ``lost-write-cases`` and ``unseen`` (jepsen-io/jepsen
``jepsen/src/jepsen/tests/kafka.clj``):

- **lost-write**: an ``ok`` send acknowledged at offset *o* of a partition whose value no
  ``ok`` poll read, although some poll of that partition read offset *o* or beyond. Reads got
  past it, so it should have been read: it is gone (or was overwritten, which
  inconsistent-offsets shows as well). Jepsen bounds by the highest read *index* in the version
  order; offsets are contiguous in Tidelog's chaos topics, so the highest offset read is the
  same bound.
- **unseen**: an ``ok`` send no poll read that is not a lost write (nothing read got as far:
  it may just not have been polled yet; acks=0 sends, which carry no offset, always land here).
  Once a topic's drain completed (the final read of every partition to its end on the healed
  cluster) an unseen write is a lost one all the same, so the promise judges it like one.
  Jepsen's ``unseen`` also counts the lost writes; ours leaves them out so each write is
  reported once.

A send whose outcome is unknown (``info``, or an invoke never completed) is never lost or
unseen: it may never have been appended. A ``fail`` send is not expected anywhere (reading one
is G1a, checked in reads.py). The promise forbids a loss of an acks=all send when durable.
"""

from __future__ import annotations

from tidelog.chaos.checkers.model import Anomaly, Collector, Json, Promise, evidence
from tidelog.chaos.checkers.observations import Observations
from tidelog.chaos.history import Send

__all__ = ["check_lost"]


def check_lost(obs: Observations, promise: Promise, out: Collector) -> None:
    for value, entry in obs.sends.items():
        op = entry.op
        if not isinstance(op, Send) or op.type != "ok" or value in obs.first_read:
            continue
        assert op.partition is not None  # an ok send has its partition (history.py checks)
        max_read = obs.max_read.get((op.topic, op.partition))
        where = f"{op.topic}-{op.partition}" + (f"@{op.offset}" if op.offset is not None else "")
        details: dict[str, Json] = {"topic": op.topic, "partition": op.partition,
                                    "offset": op.offset, "value": value, "acks": op.acks}
        forbidden = promise.durable and op.acks == "all"
        if op.offset is not None and max_read is not None and max_read[0] >= op.offset:
            out.add(Anomaly(
                "lost-write", forbidden,
                f"value {value} acknowledged at {where} (acks={op.acks}) was never read, "
                f"though a poll read offset {max_read[0]} (line {max_read[1].line})",
                evidence(entry, max_read[1]), {**details, "max_read_offset": max_read[0]}))
            continue
        drained = op.topic in obs.drained_topics
        reach = "nothing" if max_read is None else f"offset {max_read[0]}"
        out.add(Anomaly(
            "unseen", forbidden and drained,
            f"value {value} acknowledged at {where} (acks={op.acks}) was never read; reads "
            f"reached {reach}" + ("" if drained else ", and the topic has no completed drain"),
            evidence(entry), {**details, "drained": drained}))
