"""The consumer's conversation with its group coordinator, on the client I/O loop (Kafka's
CoordinatorRequestManager, HeartbeatRequestManager and CommitRequestManager).

- **Finding the coordinator**: :class:`~tidelog.client._coordinator_lookup.CoordinatorLookup`,
  the one the Admin uses too: FindCoordinator to any broker, the answer kept until a request to
  it fails with NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a network error, and then found
  again; COORDINATOR_LOAD_IN_PROGRESS is retried at the same coordinator after a backoff.
- **Heartbeats**: one task per consumer sends what the pure :class:`Membership` says, when it
  says (every heartbeat interval, at once when the member has something to report), one at a
  time, independent of ``poll()``; after each answer it wakes the application thread (work for
  ``poll()``) and whoever waits for a new member epoch (a commit that got STALE_MEMBER_EPOCH).
  It also checks the poll timer (max_poll_interval_ms).
- **Offsets**: :meth:`GroupCoordinator.commit` (OffsetCommit with the member id and epoch) and
  :meth:`GroupCoordinator.fetch_committed` (OffsetFetch), retried by the shared coordinator
  retry policy (``_coordinator_lookup.retrying``) until their deadline; STALE_MEMBER_EPOCH (or
  no member epoch yet) waits for the next heartbeat's epoch and retries, at most
  ``STALE_EPOCH_RETRIES_MAX`` times.

The membership is shared with the application thread; every use holds ``lock`` (never across
an await, never around a user callback), so neither thread waits long for the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from collections.abc import Callable, Iterable, Mapping

from tidelog.client._coordinator_lookup import CoordinatorLookup, retrying
from tidelog.client._io import Connections, monotonic_ms
from tidelog.client._membership import Membership, MemberState
from tidelog.client._metadata import Backoff, MetadataManager
from tidelog.client.records import OffsetAndMetadata, TopicPartition
from tidelog.errors import (
    ErrorCode,
    StaleMemberEpochError,
    TidelogError,
    UnknownMemberIdError,
    error_for_code,
)
from tidelog.v1 import broker_pb2 as pb

__all__ = ["STALE_EPOCH_RETRIES_MAX", "GroupCoordinator"]

log = logging.getLogger(__name__)

#: Times a commit that got STALE_MEMBER_EPOCH is retried with the next heartbeat's epoch.
STALE_EPOCH_RETRIES_MAX = 3
#: The heartbeat task wakes at least this often even with nothing due (checks its timers).
HEARTBEAT_TASK_TICK_MS = 1_000


class _NotJoinedError(UnknownMemberIdError):
    """A commit while the member has no epoch (joining, fenced, or left): like
    STALE_MEMBER_EPOCH, it waits for the next heartbeat and tries again."""


class GroupCoordinator:
    """The coordinator side of one consumer's group membership (see the module doc)."""

    def __init__(self, *, group_id: str, membership: Membership, metadata: MetadataManager,
                 conns: Connections, loop: asyncio.AbstractEventLoop, request_timeout_ms: int,
                 backoff: Backoff, on_event: Callable[[], None]) -> None:
        self.group_id = group_id
        self.membership = membership
        self.lock = threading.Lock()
        self._metadata = metadata
        self._loop = loop
        self._request_timeout_ms = request_timeout_ms
        self._backoff = backoff
        self._on_event = on_event
        self._rng = random.Random()
        self._lookup = CoordinatorLookup(group_id, metadata=metadata, conns=conns,
                                         request_timeout_ms=request_timeout_ms,
                                         backoff=backoff, rng=self._rng)
        self._wake = asyncio.Event()
        #: Set (and replaced) after every heartbeat outcome: commits waiting for an epoch.
        self._heartbeat_done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    # --- any thread -----------------------------------------------------------------------------

    def wake(self) -> None:
        """Thread-safe: the membership may have a heartbeat due now."""
        self._loop.call_soon_threadsafe(self._wake_on_loop)

    def _wake_on_loop(self) -> None:
        self._wake.set()
        if self._task is None and not self._closed:
            self._task = self._loop.create_task(self._heartbeat_loop(),
                                                name=f"heartbeat-{self.group_id}")

    # --- heartbeats -----------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        # Bounded: every pass sends one heartbeat or waits (at most a tick); ends on close.
        while not self._closed:
            try:
                await self._heartbeat_pass()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not stop heartbeats for good: logged, retried
                log.exception("group %r: the heartbeat task failed; retrying", self.group_id)
                await asyncio.sleep(HEARTBEAT_TASK_TICK_MS / 1000)

    async def _heartbeat_pass(self) -> None:
        self._wake.clear()  # before reading the state: a wake from now on is not lost
        now = monotonic_ms()
        with self.lock:
            warning = self.membership.check_poll_timer(now)
            self._resolve_topic_names()
            delay = self.membership.heartbeat_delay_ms(now)
            poll_delay = self.membership.poll_timer_delay_ms(now)
            request = self.membership.build_heartbeat(now) if delay == 0 else None
        if warning is not None:
            log.warning(warning)
        if request is None:
            wait = min(HEARTBEAT_TASK_TICK_MS, poll_delay, HEARTBEAT_TASK_TICK_MS
                       if delay is None else delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(wait, 1) / 1000)
            return
        await self._send_heartbeat(request)

    def _resolve_topic_names(self) -> None:
        unresolved = self.membership.unresolved_topic_ids()
        if not unresolved:
            return
        for info in self._metadata.snapshot.topics.values():
            if info.topic_id in unresolved:
                self.membership.learn_topic_name(info.topic_id, info.name)
        if self.membership.unresolved_topic_ids():
            self._metadata.set_all_topics(True)
            self._metadata.request_update()

    async def _send_heartbeat(self, request: pb.ConsumerGroupHeartbeatRequest) -> None:
        deadline = monotonic_ms() + self._request_timeout_ms
        try:
            response = await self._lookup.send("ConsumerGroupHeartbeat", request,
                                               deadline_ms=deadline)
        except TidelogError as error:
            self._lookup.on_error(error.code)
            with self.lock:
                self.membership.on_heartbeat_error(error.code, error.message, monotonic_ms(),
                                                   self._rng)
        except Exception as error:  # a bug or an unreadable answer: the heartbeat must not
            # stay "in flight" for ever (that would end heartbeats silently); retried.
            log.exception("group %r: a heartbeat failed unexpectedly", self.group_id)
            self._lookup.on_error(ErrorCode.NETWORK_EXCEPTION)
            with self.lock:
                self.membership.on_heartbeat_error(ErrorCode.NETWORK_EXCEPTION, repr(error),
                                                   monotonic_ms(), self._rng)
        else:
            self._lookup.on_error(response.error_code)
            with self.lock:
                self.membership.on_heartbeat_response(response, monotonic_ms(), self._rng)
        done, self._heartbeat_done = self._heartbeat_done, asyncio.Event()
        done.set()
        self._on_event()

    async def wait_until_left(self, deadline_ms: int) -> None:
        """Wait (bounded) until a leave heartbeat has been answered or given up."""
        while monotonic_ms() < deadline_ms:
            with self.lock:
                if self.membership.state != MemberState.LEAVING:
                    return
            self._wake.set()
            try:
                await asyncio.wait_for(self._heartbeat_done.wait(),
                                       max(1, deadline_ms - monotonic_ms()) / 1000)
            except TimeoutError:
                return

    # --- offsets --------------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], *,
                     deadline_ms: int) -> None:
        """OffsetCommit with the member's id and epoch; raises the typed error of the first
        partition that failed for good, or of the deadline."""
        request = _commit_request(self.group_id, offsets)
        stale_retries = 0
        while True:  # bounded by the deadline and STALE_EPOCH_RETRIES_MAX
            try:
                await retrying(lambda: self._commit_once(request, deadline_ms),
                               deadline_ms=deadline_ms, idempotent=True,
                               backoff=self._backoff, rng=self._rng)
                return
            except (StaleMemberEpochError, _NotJoinedError) as error:
                if stale_retries >= STALE_EPOCH_RETRIES_MAX:
                    raise
                stale_retries += 1
                await self._wait_for_heartbeat(deadline_ms)
                if monotonic_ms() >= deadline_ms:
                    raise error from None

    async def _commit_once(self, request: pb.OffsetCommitRequest, deadline_ms: int) -> None:
        """One OffsetCommit with the member's identity as of now (a retry after a heartbeat
        carries the new epoch); raises the first error of the answer."""
        with self.lock:
            identity = self.membership.commit_identity()
        if identity is None:
            raise _NotJoinedError(
                f"the consumer is not a member of group {self.group_id!r} now (joining, "
                "fenced or left): it cannot commit until it has joined")
        request.member_id, request.member_epoch = identity
        response = await self._lookup.send("OffsetCommit", request, deadline_ms=deadline_ms)
        error = _commit_error(response)
        if error is not None:
            self._lookup.on_error(error.code)
            raise error

    async def fetch_committed(self, partitions: Iterable[TopicPartition], *, deadline_ms: int
                              ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets of ``partitions`` (None where nothing is)."""
        wanted = sorted(set(partitions))
        request = pb.OffsetFetchRequest(group_id=self.group_id)
        topics: dict[str, pb.OffsetFetchRequest.Topic] = {}
        for tp in wanted:
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = request.topics.add(name=tp.topic)
            topic.partitions.append(tp.partition)
        response = await self._lookup.call("OffsetFetch", request, deadline_ms=deadline_ms,
                                           idempotent=True, check=_fetch_error)
        return _committed(response, wanted)

    async def _wait_for_heartbeat(self, deadline_ms: int) -> None:
        """Until the next heartbeat outcome (a new epoch, perhaps), bounded by the deadline."""
        self._wake.set()
        waiting = self._heartbeat_done
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waiting.wait(), max(1, deadline_ms - monotonic_ms()) / 1000)

    # --- lifecycle ------------------------------------------------------------------------------

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _commit_request(group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
                    ) -> pb.OffsetCommitRequest:
    """The OffsetCommit of ``offsets`` (member id and epoch are set by each attempt)."""
    request = pb.OffsetCommitRequest(group_id=group_id)
    topics: dict[str, pb.OffsetCommitRequest.Topic] = {}
    for tp, value in sorted(offsets.items()):
        topic = topics.get(tp.topic)
        if topic is None:
            topic = topics[tp.topic] = request.topics.add(name=tp.topic)
        topic.partitions.add(partition_id=tp.partition, committed_offset=value.offset,
                             committed_leader_epoch=(-1 if value.leader_epoch is None
                                                     else value.leader_epoch),
                             metadata=value.metadata)
    return request


def _commit_error(response: pb.OffsetCommitResponse) -> TidelogError | None:
    """The answer's request-level error, else its first partition's."""
    if response.error_code != ErrorCode.NONE:
        return error_for_code(response.error_code, response.error_message)
    for topic in response.topics:
        for p in topic.partitions:
            if p.error_code != ErrorCode.NONE:
                return error_for_code(p.error_code,
                                      f"{topic.name}-{p.partition_id}: {p.error_message}")
    return None


def _fetch_error(response: pb.OffsetFetchResponse) -> TidelogError | None:
    """The answer's request-level error, else its first partition's."""
    if response.error_code != ErrorCode.NONE:
        return error_for_code(response.error_code, response.error_message)
    for topic in response.topics:
        for p in topic.partitions:
            if p.error_code != ErrorCode.NONE:
                return error_for_code(p.error_code, f"{topic.name}-{p.partition_id}: "
                                      "committed offset not fetched")
    return None


def _committed(response: pb.OffsetFetchResponse, wanted: list[TopicPartition]
               ) -> dict[TopicPartition, OffsetAndMetadata | None]:
    out: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(wanted)
    for topic in response.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_id)
            if tp in out and p.committed_offset >= 0:
                out[tp] = OffsetAndMetadata(
                    p.committed_offset, p.metadata,
                    None if p.committed_leader_epoch < 0 else p.committed_leader_epoch)
    return out
