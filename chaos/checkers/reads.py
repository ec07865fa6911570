"""Reads of what was never written: G1a (aborted read) and unexpected values.

- **G1a**: a poll read the value of a send that *failed*. Jepsen's ``g1a-cases``
  (jepsen-io/jepsen ``jepsen/src/jepsen/tests/kafka.clj``). A workload records ``fail`` only
  when the error proves the record was not appended (docs/chaos.md), so reading it means the
  broker appended what it refused, or told a producer it refused what it appended.
- **unexpected-value**: a poll read a value no send in the history wrote, or read it in a
  topic other than the one it was sent to. Jepsen stops with ``:no-writer-of`` here; a history
  is user input, so we report it instead.

Both are forbidden whatever the promise: no configuration makes them legal.
"""

from __future__ import annotations

from tidelog.chaos.checkers.model import Anomaly, Collector, Promise, evidence
from tidelog.chaos.checkers.observations import Observations
from tidelog.chaos.history import Send

__all__ = ["check_reads"]


def check_reads(obs: Observations, promise: Promise, out: Collector) -> None:
    del promise  # no promise allows these
    for value, reader in obs.first_read.items():
        send = obs.sends.get(value)
        if send is None:
            out.add(Anomaly(
                "unexpected-value", True, f"value {value} was read but never sent",
                evidence(reader), {"value": value}))
            continue
        if send.op.type == "fail":
            out.add(Anomaly(
                "G1a", True, f"value {value} was read though its send failed "
                             f"({send.op.error or 'no error given'})",
                evidence(send, reader), {"value": value}))
        sent_to = send.op.topic if isinstance(send.op, Send) else None
        elsewhere = sorted(p for p in obs.positions.get(value, ()) if p[0] != sent_to)
        if elsewhere:
            topic = elsewhere[0][0]
            out.add(Anomaly(
                "unexpected-value", True,
                f"value {value} was sent to topic {sent_to} but read in {topic}",
                evidence(send, obs.read_at.get(elsewhere[0], {}).get(value)),
                {"value": value, "topic": topic}))
