"""The queue workload's consumers: one thread each, recording every poll as ``invoke`` then
``ok`` (with its records ``[partition, offset, value]``) or ``info`` (the poll raised).

Two kinds, as in Jepsen's queue workload:

- :class:`AssignConsumerWorker`: a Consumer without a group that ``assign``s every partition
  of the topic and reads from the log start. One session per Consumer: its positions only
  move forward, so its polls must continue one another.
- :class:`GroupConsumerWorker`: a Consumer in group ``group_id`` that ``subscribe``s to the
  topic, auto-commits (every ``auto_commit_interval_ms``, before a revocation and on close) and
  also commits asynchronously after every poll that returned records. Its sessions follow the
  group's rebalances (chaos/workload/sessions.py): a new one whenever partitions were revoked,
  lost or assigned.

A poll that raises is recorded as ``info`` with the error, the Consumer is closed (bounded)
and, after ``reopen_backoff_ms``, a new one is opened: a new session, since it starts from the
log start (assign) or from the group's committed offsets (subscribe). A Consumer that cannot
be opened is retried the same way; no client error ends the worker. Every wait is bounded by
the deadline; the worker stops at the deadline or the run's stop signal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from tidelog.chaos.history import HistoryError, Poll, PolledRecord
from tidelog.chaos.workload.config import ClientSettings
from tidelog.chaos.workload.context import RunContext
from tidelog.chaos.workload.outcomes import describe_error
from tidelog.chaos.workload.sessions import GroupSessions
from tidelog.chaos.workload.stats import WorkerStats
from tidelog.chaos.workload.values import decode_value
from tidelog.client import (
    Consumer,
    ConsumerRebalanceListener,
    ConsumerRecord,
    OffsetAndMetadata,
    TopicPartition,
)

__all__ = ["AssignConsumerWorker", "GroupConsumerWorker", "polled_records"]


def polled_records(records: Sequence[ConsumerRecord], topic: str) -> tuple[PolledRecord, ...]:
    """A poll's records of ``topic`` as the history records them, values decoded
    (chaos/workload/values.py: a record the run did not write gets a foreign value)."""
    return tuple(PolledRecord(r.partition, r.offset, decode_value(r.value))
                 for r in records if r.topic == topic)


class _ConsumerWorker(threading.Thread):
    """The shared loop: open a Consumer, poll and record until the deadline, reopen on error."""

    kind = "consumer"

    def __init__(self, ctx: RunContext, *, index: int, bootstrap: str, topic: str,
                 deadline_s: float, client: ClientSettings) -> None:
        super().__init__(name=f"chaos-{self.kind}-{index}", daemon=True)
        self.ctx = ctx
        self.index = index
        self.topic = topic
        self.process = ctx.new_process()
        self.stats = WorkerStats()
        self._servers = bootstrap
        self._deadline_s = deadline_s
        self._client = client

    def _running(self) -> bool:
        return not self.ctx.stop.is_set() and time.monotonic() < self._deadline_s

    def run(self) -> None:
        # Bounded: each pass polls until the deadline or an error, then waits a backoff step.
        while self._running():
            consumer = None
            try:
                consumer = self._open()
                self.stats.opened += 1
                self._poll_until_deadline(consumer)
            except HistoryError:
                return  # a workload bug: the context keeps it and stops the run
            except Exception as e:  # a client error: counted (and recorded if a poll's)
                self.stats.count_error(e)
            finally:
                if consumer is not None:
                    self._close(consumer)
            remaining = self._deadline_s - time.monotonic()
            if remaining > 0:
                self.ctx.stop.wait(min(self._client.reopen_backoff_ms / 1000, remaining))

    def _consumer(self, group_id: str | None = None) -> Consumer:
        c = self._client
        return Consumer(
            self._servers, client_id=f"chaos-{self.kind}-{self.index}", group_id=group_id,
            enable_auto_commit=group_id is not None,
            auto_commit_interval_ms=c.auto_commit_interval_ms,
            auto_offset_reset="earliest", request_timeout_ms=c.request_timeout_ms,
            retry_backoff_ms=c.retry_backoff_ms, retry_backoff_max_ms=c.retry_backoff_max_ms,
            fetch_max_wait_ms=c.fetch_max_wait_ms, max_poll_records=c.max_poll_records,
        )

    def _close(self, consumer: Consumer) -> None:
        try:
            consumer.close(self._client.close_timeout_ms)
        except Exception as e:
            self.stats.count_error(e)

    def _poll(self, consumer: Consumer, session: int) -> list[ConsumerRecord]:
        """One recorded poll: invoke, then ok with its records, or info (and re-raise)."""
        self.ctx.write(Poll("invoke", self.process, self.ctx.now_ns(), self.topic, session))
        self.stats.invoked += 1
        try:
            records = consumer.poll(timeout_ms=self._client.poll_timeout_ms)
        except Exception as e:
            self.ctx.write(Poll("info", self.process, self.ctx.now_ns(), self.topic, session,
                                error=describe_error(e)))
            self.stats.info += 1
            raise
        return records

    def _record_ok(self, session: int, records: Sequence[ConsumerRecord]) -> None:
        polled = polled_records(records, self.topic)
        self.ctx.write(Poll("ok", self.process, self.ctx.now_ns(), self.topic, session,
                            records=polled))
        self.stats.ok += 1
        self.stats.records += len(polled)

    def _open(self) -> Consumer:
        raise NotImplementedError

    def _poll_until_deadline(self, consumer: Consumer) -> None:
        raise NotImplementedError


class AssignConsumerWorker(_ConsumerWorker):
    """Assigns every partition of the topic and reads from the log start."""

    kind = "assign-consumer"

    def _open(self) -> Consumer:
        consumer = self._consumer()
        try:
            partitions = consumer.partitions_for(self.topic)
            tps = [TopicPartition(self.topic, p) for p in partitions]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
        except BaseException:
            self._close(consumer)
            raise
        return consumer

    def _poll_until_deadline(self, consumer: Consumer) -> None:
        session = self.ctx.new_session()  # one per Consumer: its positions only move forward
        while self._running():
            records = self._poll(consumer, session)
            self._record_ok(session, records)


class _Listener(ConsumerRebalanceListener):
    def __init__(self, sessions: GroupSessions, topic: str) -> None:
        self._sessions = sessions
        self._topic = topic

    def _mine(self, tps: set[TopicPartition]) -> list[int]:
        return [tp.partition for tp in tps if tp.topic == self._topic]

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._sessions.on_assigned(self._mine(assigned))

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._sessions.on_revoked(self._mine(revoked))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self._sessions.on_lost(self._mine(lost))


class GroupConsumerWorker(_ConsumerWorker):
    """Subscribes in ``group_id``, commits, and starts a session at each rebalance."""

    kind = "group-consumer"

    def __init__(self, ctx: RunContext, *, index: int, bootstrap: str, topic: str,
                 deadline_s: float, client: ClientSettings, group_id: str) -> None:
        super().__init__(ctx, index=index, bootstrap=bootstrap, topic=topic,
                         deadline_s=deadline_s, client=client)
        self.group_id = group_id
        self._sessions = GroupSessions(ctx.new_session)

    def _open(self) -> Consumer:
        consumer = self._consumer(self.group_id)
        self._sessions = GroupSessions(self.ctx.new_session)  # a new consumer: a new session
        try:
            consumer.subscribe([self.topic], listener=_Listener(self._sessions, self.topic))
        except BaseException:
            self._close(consumer)
            raise
        return consumer

    def _poll_until_deadline(self, consumer: Consumer) -> None:
        while self._running():
            session = self._sessions.begin_poll()
            records = self._poll(consumer, session)
            if self._sessions.end_poll(r.partition for r in records if r.topic == self.topic):
                self._record_ok(session, records)
            else:
                self.ctx.write(Poll(
                    "info", self.process, self.ctx.now_ns(), self.topic, session,
                    error="a partition this session had read was revoked and assigned again "
                          "inside this poll: its records may restart from the committed offset"))
                self.stats.info += 1
            if records:
                consumer.commit_async(callback=self._on_commit)

    def _on_commit(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                   error: BaseException | None) -> None:
        if error is not None:
            self.stats.commits_failed += 1
