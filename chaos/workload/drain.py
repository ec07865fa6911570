"""The final drain: on the healed cluster, read every partition of the topic from its log start
to its high watermark, recording each poll with ``drain: true``.

What the checkers make of it (docs/chaos.md): a topic whose drain *completed* (an ``ok`` drain
poll, none that ended ``info`` or was left open) was read in full, so an acknowledged write the
drain did not see is lost, not merely unseen. Hence the drain is careful to claim completion
only when it read up to the high watermarks it captured:

1. open a Consumer without a group (one process, one session for the whole drain), find the
   partitions, capture each one's HW (ListOffsets latest, *after* heal and after the workload
   stopped) and log start, ``assign`` them all and seek each to its log start; a failure here
   is retried with a new Consumer (nothing is recorded: no poll was made yet);
2. poll (``invoke``, then ``ok`` with the records) until every partition's position reaches its
   captured HW, at least once even when every partition is empty;
3. a poll that raises ends ``info``; the drain goes on reading but is incomplete;
4. at the deadline, if some partition did not reach its HW, one more drain poll is invoked and
   ended ``info``, naming the partitions left, so the history itself says the drain did not
   complete.

Returns the captured HWs and whether the drain completed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tidelog.chaos.history import HistoryError, Poll
from tidelog.chaos.workload.config import ClientSettings
from tidelog.chaos.workload.consumers import polled_records
from tidelog.chaos.workload.context import RunContext
from tidelog.chaos.workload.outcomes import describe_error
from tidelog.client import Consumer, TopicPartition

__all__ = ["DrainResult", "drain"]

#: Partitions named in the error of an incomplete drain (the rest are counted).
PARTITIONS_NAMED_MAX = 8


@dataclass(frozen=True, slots=True)
class DrainResult:
    topic: str
    complete: bool
    #: partition -> the HW captured when the drain began (empty if it never began)
    high_watermarks: dict[int, int]
    polls: int
    records: int
    process: int | None
    error: str | None = None


class _Drain:
    def __init__(self, ctx: RunContext, bootstrap: str, topic: str, deadline_s: float,
                 client: ClientSettings) -> None:
        self.ctx = ctx
        self.bootstrap = bootstrap
        self.topic = topic
        self.deadline_s = deadline_s
        self.client = client
        self.process = ctx.new_process()
        self.session = ctx.new_session()
        self.polls = 0
        self.records = 0
        self.failed = False
        self.last_error: str | None = None

    def consumer(self) -> Consumer:
        c = self.client
        return Consumer(self.bootstrap, client_id="chaos-drain", auto_offset_reset="earliest",
                        request_timeout_ms=c.request_timeout_ms,
                        retry_backoff_ms=c.retry_backoff_ms,
                        retry_backoff_max_ms=c.retry_backoff_max_ms,
                        fetch_max_wait_ms=c.fetch_max_wait_ms,
                        max_poll_records=c.max_poll_records)

    def prepare(self, consumer: Consumer) -> dict[TopicPartition, int]:
        """Assign every partition at its log start; the HWs to read up to."""
        tps = [TopicPartition(self.topic, p) for p in consumer.partitions_for(self.topic)]
        ends = consumer.end_offsets(tps)
        starts = consumer.beginning_offsets(tps)
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, starts[tp])
        return ends

    def left(self, consumer: Consumer, ends: dict[TopicPartition, int]) -> list[str]:
        """The partitions not read up to their HW yet, as ``partition@position/hw``."""
        out = []
        for tp, hw in sorted(ends.items()):
            position = consumer.position(tp, timeout_ms=self.client.request_timeout_ms)
            if position < hw:
                out.append(f"{tp.partition}@{position}/{hw}")
        return out

    def poll(self, consumer: Consumer) -> None:
        self.ctx.write(Poll("invoke", self.process, self.ctx.now_ns(), self.topic,
                            self.session, drain=True))
        self.polls += 1
        try:
            records = consumer.poll(timeout_ms=self.client.poll_timeout_ms)
        except Exception as e:
            self.failed = True
            self.last_error = describe_error(e)
            self.ctx.write(Poll("info", self.process, self.ctx.now_ns(), self.topic,
                                self.session, drain=True, error=self.last_error))
            return
        polled = polled_records(records, self.topic)
        self.records += len(polled)
        self.ctx.write(Poll("ok", self.process, self.ctx.now_ns(), self.topic, self.session,
                            drain=True, records=polled))

    def incomplete(self, reason: str) -> None:
        """Record that the drain did not read everything: one drain poll ended info."""
        self.failed = True
        self.last_error = reason
        self.ctx.write(Poll("invoke", self.process, self.ctx.now_ns(), self.topic,
                            self.session, drain=True))
        self.ctx.write(Poll("info", self.process, self.ctx.now_ns(), self.topic, self.session,
                            drain=True, error=reason))


def drain(ctx: RunContext, *, bootstrap: str, topic: str, timeout_s: float,
          client: ClientSettings | None = None) -> DrainResult:
    """Read ``topic`` to its HWs on the healed cluster (see the module doc); bounded by
    ``timeout_s``. A workload bug (a refused history line) is raised; client errors are not."""
    run = _Drain(ctx, bootstrap, topic, time.monotonic() + timeout_s, client or ClientSettings())
    ends: dict[TopicPartition, int] = {}
    try:
        ends = _read(run)
    except HistoryError:
        raise
    except Exception as e:  # the deadline passed with a client error in the way
        run.incomplete(f"drain incomplete: {describe_error(e)}")
    return DrainResult(topic, not run.failed, {tp.partition: hw for tp, hw in ends.items()},
                       run.polls, run.records, run.process, run.last_error)


def _read(run: _Drain) -> dict[TopicPartition, int]:
    # Bounded: each pass ends at the deadline; a failed set-up waits a backoff step.
    while True:
        consumer = run.consumer()
        try:
            try:
                ends = run.prepare(consumer)
            except Exception as e:
                if time.monotonic() >= run.deadline_s:
                    raise
                run.last_error = describe_error(e)
                time.sleep(run.client.reopen_backoff_ms / 1000)
                continue
            _poll_to_ends(run, consumer, ends)
            return ends
        finally:
            consumer.close(run.client.close_timeout_ms)


def _poll_to_ends(run: _Drain, consumer: Consumer, ends: dict[TopicPartition, int]) -> None:
    run.poll(consumer)  # at least one drain poll, even when every partition is empty
    while True:
        left = run.left(consumer, ends)
        if not left:
            return
        if time.monotonic() >= run.deadline_s:
            named = ", ".join(left[:PARTITIONS_NAMED_MAX])
            more = f" and {len(left) - PARTITIONS_NAMED_MAX} more" if (
                len(left) > PARTITIONS_NAMED_MAX) else ""
            run.incomplete(f"drain incomplete: {run.topic} partitions {named}{more} "
                           f"(partition@position/high watermark) not read by the deadline")
            return
        run.poll(consumer)
