"""Polls that step back or skip: within one poll, and between polls of one consumer session.

Jepsen's ``int-poll-skip+nonmonotonic-cases`` and ``poll-skip+nonmonotonic-cases``
(jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``), per partition:

- **int-nonmonotonic-poll** / **int-poll-skip**: two successive records of one partition in one
  poll go back (or repeat an offset), or jump over offsets known to hold records.
- **nonmonotonic-poll** / **poll-skip**: the first record of a partition in a poll against the
  last record of that partition in the session's previous ``ok`` poll (failed and unfinished
  polls move nothing, as in Jepsen). Jepsen resets a process's expectations on assign and
  subscribe; our workloads start a new ``session`` instead (history.py), which also covers a
  seek and a rebalance, so these are checked without exceptions.

"Known to hold records" is the version order (observations.py): offsets some acknowledgement or
read showed, so a skip is never claimed over a gap nobody saw filled. A durable promise forbids
them all (a consumer reads committed records only, and a clean election keeps them).
"""

from __future__ import annotations

import itertools

from tidelog.chaos.checkers.model import (
    EVIDENCE_OPS_MAX,
    Anomaly,
    Collector,
    Json,
    Promise,
    evidence,
)
from tidelog.chaos.checkers.observations import Observations, TopicPartition
from tidelog.chaos.history import Entry, Poll, PolledRecord

__all__ = ["check_polls"]


def check_polls(obs: Observations, promise: Promise, out: Collector,
                entries: tuple[Entry, ...]) -> None:
    """Check every ok poll of ``entries`` (the history, in order)."""
    last_read: dict[tuple[int, TopicPartition], tuple[PolledRecord, Entry]] = {}
    for entry in entries:
        op = entry.op
        if not isinstance(op, Poll) or op.type != "ok":
            continue
        by_partition: dict[int, list[PolledRecord]] = {}
        for record in op.records:
            by_partition.setdefault(record.partition, []).append(record)
        for partition, records in by_partition.items():
            tp = (op.topic, partition)
            for before, after in itertools.pairwise(records):
                _compare(obs, promise, out, tp, before, after, entry, None)
            previous = last_read.get((op.session, tp))
            if previous is not None:
                _compare(obs, promise, out, tp, previous[0], records[0], entry, previous[1])
            last_read[(op.session, tp)] = (records[-1], entry)


def _compare(obs: Observations, promise: Promise, out: Collector, tp: TopicPartition,
             before: PolledRecord, after: PolledRecord, entry: Entry,
             previous: Entry | None) -> None:
    """One step of a consumer from ``before`` to ``after``; ``previous`` is the earlier poll
    when the step crosses polls (None: both records are in ``entry``)."""
    prefix = "int-" if previous is None else ""
    where = "in one poll" if previous is None else f"from the poll at line {previous.line}"
    topic, partition = tp
    details: dict[str, Json] = {"topic": topic, "partition": partition,
                                "offsets": [before.offset, after.offset],
                                "values": [before.value, after.value]}
    if after.offset <= before.offset:
        out.add(Anomaly(
            f"{prefix}nonmonotonic-poll", promise.durable,
            f"{topic}-{partition} went from offset {before.offset} to {after.offset} {where}",
            evidence(previous, entry), details))
        return
    skipped = obs.offsets_between(tp, low=before.offset, high=after.offset)
    if skipped:
        listed: list[Json] = list(skipped[:EVIDENCE_OPS_MAX])
        out.add(Anomaly(
            f"{prefix}poll-skip", promise.durable,
            f"{topic}-{partition} jumped from offset {before.offset} to {after.offset} "
            f"{where}, over {len(skipped)} known record(s)",
            evidence(previous, entry), {**details, "skipped": listed,
                                        "skipped_count": len(skipped)}))
