"""The application-thread half of a group consumer: reconciliation steps, rebalance callbacks,
commits and positions from committed offsets.

The membership (``_membership.py``) decides; this carries its work out inside ``poll()`` (and
``close()`` / ``unsubscribe()``), on the thread that uses the Consumer, never on the I/O thread:

- :class:`~tidelog.client._membership.Reconciliation`: with auto-commit on, commit the positions
  first (synchronously, bounded by ``request_timeout_ms``; a failure is logged and the revocation
  goes on, as Kafka's), then ``on_partitions_revoked``, then drop the revoked partitions' fetch
  state (records fetched and not returned are discarded: they are never returned after the
  revocation); then add the new partitions (waiting for their committed offsets) and run
  ``on_partitions_assigned``. Then the membership acknowledges with a heartbeat at once.
- :class:`~tidelog.client._membership.PartitionsLost`: ``on_partitions_lost`` and drop them,
  without committing (a fenced member's commit would be refused anyway); then it rejoins.

An exception from a callback does not stop the step: the step completes and the exception is
raised from poll() afterwards (Kafka's behaviour). Partitions kept across a step keep their
position and fetched records. Commits go through ``GroupCoordinator.commit``; an asynchronous
commit's callback runs on the application thread in a later poll(), commit() or close().
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from tidelog import limits
from tidelog.client._fetcher import SubscriptionState
from tidelog.client._group_coordinator import GroupCoordinator
from tidelog.client._io import IOThread, monotonic_ms
from tidelog.client._membership import PartitionsLost, Reconciliation
from tidelog.client._metadata import Backoff, MetadataManager
from tidelog.client.records import OffsetAndMetadata, TopicPartition
from tidelog.errors import RequestTimedOutError, TidelogError
from tidelog.metadata.topic_names import validate_topic_name

__all__ = ["CommitCallback", "CommitDone", "CommittedDone", "ConsumerRebalanceListener",
           "GroupMember", "check_group_texts", "check_subscription"]

log = logging.getLogger(__name__)

#: Reconciliation steps one poll() runs at most (the rest in the next poll()).
STEPS_PER_POLL_MAX = 4

CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], None]


class ConsumerRebalanceListener:
    """Told when the group moves partitions to or from this consumer (Kafka's
    ConsumerRebalanceListener). Every method runs on the application thread, inside poll(),
    unsubscribe() or close(); override the ones you need (they do nothing by default)."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Before these partitions go to another member: commit what you processed here (with
        auto-commit on, positions were just committed)."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """After these partitions were added (maybe none); a seek() here overrides the
        committed offset the consumer would start from."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """The member was fenced or left for not polling: these partitions may already be
        another member's, so do not commit them. By default, as Kafka: on_partitions_revoked."""
        self.on_partitions_revoked(lost)


@dataclass(frozen=True, slots=True)
class CommitDone:
    offsets: dict[TopicPartition, OffsetAndMetadata]
    error: BaseException | None
    callback: CommitCallback | None


@dataclass(frozen=True, slots=True)
class CommittedDone:
    requested: list[TopicPartition]
    committed: dict[TopicPartition, OffsetAndMetadata | None] | None
    error: TidelogError | None


class GroupMember:
    """The application side of one consumer's group membership (see the module doc)."""

    def __init__(self, *, coordinator: GroupCoordinator, subs: SubscriptionState, io: IOThread,
                 metadata: MetadataManager, post: Callable[[CommitDone | CommittedDone], None],
                 enable_auto_commit: bool, auto_commit_interval_ms: int,
                 request_timeout_ms: int, backoff: Backoff) -> None:
        self.coordinator = coordinator
        self.listener = ConsumerRebalanceListener()
        self._subs = subs
        self._io = io
        self._metadata = metadata
        self._post = post
        self.auto_commit = enable_auto_commit
        self._auto_commit_interval_ms = auto_commit_interval_ms
        self._next_auto_commit_ms = monotonic_ms() + auto_commit_interval_ms
        self._auto_commit_in_flight = False
        self.async_commits_in_flight = 0
        self._request_timeout_ms = request_timeout_ms
        self._backoff = backoff
        #: An error to raise from the next poll() (from a callback or a committed-offset fetch).
        self.pending_error: BaseException | None = None

    # --- each poll() ----------------------------------------------------------------------------

    def on_poll(self, now_ms: int) -> None:
        """Restart the poll timer; raise a fatal membership error (every poll, as the member
        is done); run pending reconciliation steps."""
        with self.coordinator.lock:
            self.coordinator.membership.on_poll(now_ms)
            fatal = self.coordinator.membership.fatal_error
        if fatal is not None:
            raise fatal
        self.run_work()
        self.maybe_auto_commit(now_ms)
        self.refresh_committed(now_ms)

    def run_work(self) -> None:
        membership = self.coordinator.membership
        for _ in range(STEPS_PER_POLL_MAX):
            with self.coordinator.lock:
                work = membership.take_work()
            if work is None:
                break
            try:
                if isinstance(work, PartitionsLost):
                    self._lose(work)
                else:
                    self._reconcile(work)
            finally:
                with self.coordinator.lock:
                    membership.work_done(work, monotonic_ms())
                self.coordinator.wake()
        if self.pending_error is not None:
            error, self.pending_error = self.pending_error, None
            raise error

    def _reconcile(self, step: Reconciliation) -> None:
        if step.revoked:
            self.revoke(set(step.revoked))
        if step.assigned:
            self._subs.add(sorted(step.assigned))
            self._metadata.add_topics(tp.topic for tp in step.assigned)  # fetched at once
        self._callback(self.listener.on_partitions_assigned, set(step.assigned))

    def revoke(self, revoked: set[TopicPartition]) -> None:
        """Commit (with auto-commit), on_partitions_revoked, drop the fetch state."""
        if self.auto_commit:
            self._commit_before_revocation()
        self._callback(self.listener.on_partitions_revoked, revoked)
        self._subs.remove(sorted(revoked))

    def _lose(self, work: PartitionsLost) -> None:
        if work.lost:
            self._callback(self.listener.on_partitions_lost, set(work.lost))
        self._subs.remove(sorted(work.lost))

    def _callback(self, method: Callable[[set[TopicPartition]], None],
                  partitions: set[TopicPartition]) -> None:
        try:
            method(partitions)
        except Exception as error:  # raised from poll() once the step is complete
            log.warning("the rebalance listener's %s raised %r", method.__name__, error)
            self.pending_error = self.pending_error or error

    def _commit_before_revocation(self) -> None:
        offsets = self.positions()
        if not offsets:
            return
        try:
            self.commit_sync(offsets, self._request_timeout_ms)
        except TidelogError as error:
            log.warning("group %r: committing %d positions before their revocation failed "
                        "(%s); they will be re-read by their next owner",
                        self.coordinator.group_id, len(offsets), error)

    # --- commits --------------------------------------------------------------------------------

    def positions(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """The position of every assigned partition that has one, with the leader epoch of
        the last consumed record (KIP-320): what auto-commit and commit() commit."""
        return {tp: OffsetAndMetadata(st.position, leader_epoch=st.position_leader_epoch)
                for tp, st in self._subs.partitions.items()
                if st.has_valid_position and st.position is not None}

    def maybe_auto_commit(self, now_ms: int) -> None:
        if not self.auto_commit or now_ms < self._next_auto_commit_ms:
            return
        self._next_auto_commit_ms = now_ms + self._auto_commit_interval_ms
        offsets = self.positions()
        if not offsets or self._auto_commit_in_flight:
            return
        self._auto_commit_in_flight = True
        self.commit_async(offsets, None, auto=True)

    def commit_sync(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                    timeout_ms: int) -> None:
        deadline = monotonic_ms() + timeout_ms
        self._io.run(self.coordinator.commit(dict(offsets), deadline_ms=deadline),
                     timeout_ms / 1000)

    def commit_async(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                     callback: CommitCallback | None, *, auto: bool = False) -> None:
        deadline = monotonic_ms() + self._request_timeout_ms
        future = self._io.submit(self.coordinator.commit(offsets, deadline_ms=deadline))
        self.async_commits_in_flight += 1

        def done(f: object) -> None:  # on the I/O thread: hand the outcome over
            error = future.exception() if not future.cancelled() else RequestTimedOutError(
                "the commit was cancelled (the consumer closed)")
            self._post(CommitDone(offsets, error, _AutoCommit(self) if auto else callback))

        future.add_done_callback(done)

    def on_commit_done(self, event: CommitDone) -> None:
        """On the application thread: the outcome of an asynchronous commit."""
        self.async_commits_in_flight -= 1
        if event.callback is None:
            if event.error is not None:
                log.warning("group %r: an asynchronous commit failed: %s",
                            self.coordinator.group_id, event.error)
            return
        try:
            event.callback(event.offsets, event.error)
        except Exception:
            log.exception("a commit callback raised (ignored)")

    # --- leaving --------------------------------------------------------------------------------

    def leave_group(self, deadline_ms: int) -> None:
        """unsubscribe() and close(): commit (with auto-commit), on_partitions_revoked, drop
        every partition, leave (epoch -1, or -2 for a static member), wait for the answer; all
        bounded by ``deadline_ms``. A member that was fenced or never joined just drops."""
        coordinator = self.coordinator
        with coordinator.lock:
            joined = coordinator.membership.prepare_leaving()
        owned = set(self._subs.partitions)
        if joined and owned:
            if self.auto_commit:
                self.commit_quietly(deadline_ms)
            auto, self.auto_commit = self.auto_commit, False  # committed just now
            try:
                self.revoke(owned)
            finally:
                self.auto_commit = auto
        self._subs.assign([])
        with coordinator.lock:
            coordinator.membership.forget_owned(frozenset(owned))
            coordinator.membership.topics, coordinator.membership.pattern = (), ""
            coordinator.membership.leave(monotonic_ms())
        if joined:
            coordinator.wake()
            wait = max(1, deadline_ms - monotonic_ms())
            self._io.run(coordinator.wait_until_left(deadline_ms), wait / 1000)
        if self.pending_error is not None:
            error, self.pending_error = self.pending_error, None
            raise error

    def commit_quietly(self, deadline_ms: int) -> None:
        """Commit the positions; a failure is logged (closing goes on)."""
        offsets = self.positions()
        if not offsets:
            return
        try:
            self.commit_sync(offsets, max(1, deadline_ms - monotonic_ms()))
        except TidelogError as error:
            log.warning("group %r: committing positions while leaving failed: %s",
                        self.coordinator.group_id, error)

    # --- positions from committed offsets -------------------------------------------------------

    def refresh_committed(self, now_ms: int) -> None:
        """Ask the coordinator for the committed offsets of partitions that wait for them."""
        wanted = [tp for tp in self._subs.awaiting_committed()
                  if self._subs.partitions[tp].retry_at_ms <= now_ms]
        if not wanted:
            return
        for tp in wanted:
            self._subs.partitions[tp].committed_in_flight = True
        self._io.submit(self._fetch_committed(wanted))

    async def _fetch_committed(self, wanted: list[TopicPartition]) -> None:
        try:
            found = await self.coordinator.fetch_committed(
                wanted, deadline_ms=monotonic_ms() + self._request_timeout_ms)
            self._post(CommittedDone(wanted, found, None))
        except TidelogError as error:
            self._post(CommittedDone(wanted, None, error))
        except BaseException as error:  # the flags must clear whatever happens
            self._post(CommittedDone(wanted, None, RequestTimedOutError(repr(error))))
            raise

    def on_committed_done(self, event: CommittedDone) -> None:
        now = monotonic_ms()
        for tp in event.requested:
            st = self._subs.partitions.get(tp)
            if st is None:
                continue
            st.committed_in_flight = False
            if not st.awaiting_committed:
                continue  # sought meanwhile
            if event.committed is None:
                self._subs.backoff(tp, now, self._backoff)
                continue
            committed = event.committed.get(tp)
            if committed is not None:
                st.seek(committed.offset, committed.leader_epoch)
            else:
                st.awaiting_committed = False  # auto_offset_reset decides
            self._subs.succeeded(tp)
        if event.error is not None and not event.error.retriable:
            self.pending_error = self.pending_error or event.error


def check_group_texts(group_id: str | None, instance_id: str | None, assignor: str | None,
                       rack: str | None) -> None:
    for name, value in (("group_id", group_id), ("group_instance_id", instance_id),
                        ("group_remote_assignor", assignor), ("client_rack", rack)):
        if value is None:
            continue
        if not isinstance(value, str) or not value or len(value) > limits.GROUP_TEXT_LENGTH_MAX:
            raise ValueError(f"{name} must be a non-empty str of at most "
                             f"{limits.GROUP_TEXT_LENGTH_MAX} characters, got {value!r}")
    if group_id is None and instance_id is not None:
        raise ValueError("group_instance_id needs a group_id")


def check_subscription(topics: Iterable[str] | None, pattern: str | None) -> tuple[str, ...]:
    if isinstance(topics, str):
        raise TypeError("topics is a list of names, not one str: subscribe(['orders'])")
    names = tuple(sorted(set(topics or ())))
    if not names and not pattern:
        raise ValueError("subscribe() needs topics or a pattern (to stop: unsubscribe())")
    if names and pattern:
        raise ValueError("subscribe() takes topics or a pattern, not both")
    for name in names:
        validate_topic_name(name)
    if pattern is not None:
        if not isinstance(pattern, str) or len(pattern) > limits.GROUP_TEXT_LENGTH_MAX:
            raise ValueError(f"pattern must be a str of at most {limits.GROUP_TEXT_LENGTH_MAX} "
                             "characters")
        try:
            re.compile(pattern)
        except re.error as error:
            raise ValueError(f"pattern {pattern!r} is not a regular expression: {error}") from None
    return names


class _AutoCommit:
    """The callback of an auto-commit: clears the in-flight flag, logs a failure."""

    def __init__(self, member: GroupMember) -> None:
        self._member = member

    def __call__(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                 error: BaseException | None) -> None:
        self._member._auto_commit_in_flight = False
        if error is not None:
            log.warning("group %r: auto-commit of %d positions failed: %s",
                        self._member.coordinator.group_id, len(offsets), error)
