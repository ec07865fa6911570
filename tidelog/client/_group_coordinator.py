"""The consumer's conversation with its group coordinator, on the client I/O loop (Kafka's
CoordinatorRequestManager, HeartbeatRequestManager and CommitRequestManager).

- **Finding the coordinator**: FindCoordinator to any broker (the known ones, then the
  bootstrap list); the answer is kept until a request to it fails with NOT_COORDINATOR,
  COORDINATOR_NOT_AVAILABLE or a network error, and then found again with backoff.
  COORDINATOR_LOAD_IN_PROGRESS is retried at the same coordinator after a backoff.
- **Heartbeats**: one task per consumer sends what the pure :class:`Membership` says, when it
  says (every heartbeat interval, at once when the member has something to report), one at a
  time, independent of ``poll()``; after each answer it wakes the application thread (work for
  ``poll()``) and whoever waits for a new member epoch (a commit that got STALE_MEMBER_EPOCH).
  It also checks the poll timer (max_poll_interval_ms).
- **Offsets**: :meth:`GroupCoordinator.commit` (OffsetCommit with the member id and epoch) and
  :meth:`GroupCoordinator.fetch_committed` (OffsetFetch), retried on retriable errors until their
  deadline; STALE_MEMBER_EPOCH waits for the next heartbeat's epoch and retries (at most
  ``STALE_EPOCH_RETRIES_MAX`` times).

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

from tidelog.client._io import Connections, monotonic_ms
from tidelog.client._membership import Membership, MemberState
from tidelog.client._metadata import Backoff, MetadataManager
from tidelog.client.records import OffsetAndMetadata, TopicPartition
from tidelog.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
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
#: Codes after which the coordinator must be found again.
_FIND_AGAIN_CODES = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT})


class GroupCoordinator:
    """The coordinator side of one consumer's group membership (see the module doc)."""

    def __init__(self, *, group_id: str, membership: Membership, metadata: MetadataManager,
                 conns: Connections, loop: asyncio.AbstractEventLoop, request_timeout_ms: int,
                 backoff: Backoff, on_event: Callable[[], None]) -> None:
        self.group_id = group_id
        self.membership = membership
        self.lock = threading.Lock()
        self._metadata = metadata
        self._conns = conns
        self._loop = loop
        self._request_timeout_ms = request_timeout_ms
        self._backoff = backoff
        self._on_event = on_event
        self._rng = random.Random()
        self._address: str | None = None
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

    # --- coordinator discovery ------------------------------------------------------------------

    async def _coordinator(self, deadline_ms: int) -> str:
        """The coordinator's address, found with FindCoordinator if not known."""
        attempts = 0
        while self._address is None:  # bounded by the deadline
            try:
                self._address = await self._find_once(deadline_ms)
                break
            except TidelogError as error:
                if not error.retriable:
                    raise
                attempts += 1
                delay = self._backoff.delay_ms(attempts, self._rng)
                if monotonic_ms() + delay >= deadline_ms:
                    raise
                await asyncio.sleep(delay / 1000)
        return self._address

    async def _find_once(self, deadline_ms: int) -> str:
        snapshot = self._metadata.snapshot
        known = [b.address for b in snapshot.brokers.values() if not b.fenced]
        addresses = list(dict.fromkeys(known + self._metadata.bootstrap))
        self._rng.shuffle(addresses)
        last: TidelogError = CoordinatorNotAvailableError(
            f"no broker answered FindCoordinator for group {self.group_id!r}")
        for address in addresses[:8]:
            timeout = min(self._request_timeout_ms, deadline_ms - monotonic_ms())
            if timeout <= 0:
                break
            try:
                response = await self._conns.call(
                    address, "FindCoordinator", pb.FindCoordinatorRequest(
                        group_ids=[self.group_id]), timeout_ms=timeout)
            except TidelogError as error:
                last = error
                continue
            if not response.coordinators:
                continue
            found = response.coordinators[0]
            if found.error_code != ErrorCode.NONE:
                raise error_for_code(found.error_code, f"group {self.group_id!r}: "
                                     f"{found.error_message}")
            return f"{found.endpoint.host}:{found.endpoint.port}"
        if last.retriable:
            raise CoordinatorNotAvailableError(
                f"the coordinator of group {self.group_id!r} could not be found: {last}")
        raise last

    def _coordinator_failed(self, code: int) -> None:
        if code in _FIND_AGAIN_CODES:
            self._address = None

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
            address = await self._coordinator(deadline)
            response = await self._conns.call(
                address, "ConsumerGroupHeartbeat", request,
                timeout_ms=max(1, deadline - monotonic_ms()))
        except TidelogError as error:
            self._coordinator_failed(error.code)
            with self.lock:
                self.membership.on_heartbeat_error(error.code, error.message, monotonic_ms(),
                                                   self._rng)
        except Exception as error:  # a bug or an unreadable answer: the heartbeat must not
            # stay "in flight" for ever (that would end heartbeats silently); retried.
            log.exception("group %r: a heartbeat failed unexpectedly", self.group_id)
            self._coordinator_failed(ErrorCode.NETWORK_EXCEPTION)
            with self.lock:
                self.membership.on_heartbeat_error(ErrorCode.NETWORK_EXCEPTION, repr(error),
                                                   monotonic_ms(), self._rng)
        else:
            self._coordinator_failed(response.error_code)
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
        stale_retries = 0
        attempts = 0
        while True:  # bounded by the deadline and STALE_EPOCH_RETRIES_MAX
            with self.lock:
                identity = self.membership.commit_identity()
            error: TidelogError | None
            if identity is None:
                error = UnknownMemberIdError(
                    f"the consumer is not a member of group {self.group_id!r} now (joining, "
                    "fenced or left): it cannot commit until it has joined")
            else:
                error = await self._commit_once(offsets, identity, deadline_ms)
            if error is None:
                return
            if error.code == ErrorCode.STALE_MEMBER_EPOCH or identity is None:
                if stale_retries >= STALE_EPOCH_RETRIES_MAX:
                    raise error
                stale_retries += 1
                await self._wait_for_heartbeat(deadline_ms)
            elif error.retriable:
                attempts += 1
                await self._backoff_sleep(attempts, deadline_ms, error)
            else:
                raise error
            if monotonic_ms() >= deadline_ms:
                raise error

    async def _commit_once(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                           identity: tuple[str, int], deadline_ms: int) -> TidelogError | None:
        request = pb.OffsetCommitRequest(group_id=self.group_id, member_id=identity[0],
                                         member_epoch=identity[1])
        topics: dict[str, pb.OffsetCommitRequest.Topic] = {}
        for tp, value in sorted(offsets.items()):
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = request.topics.add(name=tp.topic)
            topic.partitions.add(partition_id=tp.partition, committed_offset=value.offset,
                                 committed_leader_epoch=(-1 if value.leader_epoch is None
                                                         else value.leader_epoch),
                                 metadata=value.metadata)
        try:
            address = await self._coordinator(deadline_ms)
            response = await self._conns.call(
                address, "OffsetCommit", request,
                timeout_ms=max(1, min(self._request_timeout_ms, deadline_ms - monotonic_ms())))
        except TidelogError as error:
            self._coordinator_failed(error.code)
            return error
        first: TidelogError | None = None
        if response.error_code != ErrorCode.NONE:
            first = error_for_code(response.error_code, response.error_message)
        for topic_result in response.topics:
            for p in topic_result.partitions:
                if p.error_code != ErrorCode.NONE and first is None:
                    first = error_for_code(p.error_code, f"{topic_result.name}-"
                                           f"{p.partition_id}: {p.error_message}")
        if first is not None:
            self._coordinator_failed(first.code)
        return first

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
        attempts = 0
        while True:  # bounded by the deadline
            try:
                address = await self._coordinator(deadline_ms)
                response = await self._conns.call(
                    address, "OffsetFetch", request, timeout_ms=max(
                        1, min(self._request_timeout_ms, deadline_ms - monotonic_ms())))
                return _committed(response, wanted)
            except TidelogError as error:
                self._coordinator_failed(error.code)
                if not error.retriable:
                    raise
                attempts += 1
                await self._backoff_sleep(attempts, deadline_ms, error)

    async def _backoff_sleep(self, attempts: int, deadline_ms: int,
                             error: TidelogError) -> None:
        delay = self._backoff.delay_ms(attempts, self._rng)
        if monotonic_ms() + delay >= deadline_ms:
            raise error
        await asyncio.sleep(delay / 1000)

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


def _committed(response: pb.OffsetFetchResponse, wanted: list[TopicPartition]
               ) -> dict[TopicPartition, OffsetAndMetadata | None]:
    if response.error_code != ErrorCode.NONE:
        raise error_for_code(response.error_code, response.error_message)
    out: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(wanted)
    for topic in response.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_id)
            if tp not in out:
                continue
            if p.error_code != ErrorCode.NONE:
                raise error_for_code(p.error_code, f"{tp}: committed offset not fetched")
            if p.committed_offset >= 0:
                out[tp] = OffsetAndMetadata(
                    p.committed_offset, p.metadata,
                    None if p.committed_leader_epoch < 0 else p.committed_leader_epoch)
    return out
