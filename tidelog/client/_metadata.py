"""The client's view of the cluster: brokers, topics, partition leaders; refreshed on demand.

``ClusterSnapshot`` is an immutable picture built from a MetadataResponse; readers on any thread
take ``MetadataManager.snapshot`` and use it without locks, and updates replace it whole. A
refresh asks the known brokers in turn, then the bootstrap list, until one answers. It happens:

* for topics the client has not asked about yet (``add_topics``: a producer's first send to a
  topic, a consumer's assignment): at once, unless the last attempt failed. Such a refresh names
  only the new topics and its answer is merged in (Kafka's partial update, KIP-526); topics added
  while one is in flight go together in the next one, sent as soon as it ends. No startup
  refresh: a client that tracks no topic fetches nothing until it needs something.
* when an error says "your metadata is stale" (NOT_LEADER_OR_FOLLOWER,
  UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH...: ``request_update``), or the snapshot is
  older than ``metadata_max_age_ms``: a full refresh of every tracked topic, at least
  ``retry_backoff_ms`` after the previous attempt (Kafka's refresh backoff), so errors that keep
  asking cannot become a request storm;
* after a failed attempt, whatever the reason, only once its backoff has passed:
  ``retry_backoff_ms`` growing exponentially with jitter to ``retry_backoff_max_ms`` (Kafka's
  ExponentialBackoff).

Waiters (``wait_for_topic``) wake when an attempt ends, not after a fixed sleep.

A refresh that fails with anything but a TidelogError (a bug, an answer the client cannot read)
is logged with its traceback and handed to the failure listeners (the producer's sender stops
for good on it: ``Sender.crash``), instead of ending the background task unseen.

A leader hint in an error response (KIP-951) moves the partition's leader at once, without
waiting for the refresh, when its leader epoch is newer than the one we hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tidelog.client._io import AUTHENTICATION_ERRORS, Connections, monotonic_ms
from tidelog.client.records import TopicPartition
from tidelog.errors import (
    ErrorCode,
    NetworkError,
    RequestTimedOutError,
    TidelogError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from tidelog.v1 import broker_pb2, common_pb2

__all__ = [
    "Backoff",
    "BrokerNode",
    "ClusterSnapshot",
    "MetadataManager",
    "PartitionInfo",
    "TopicInfo",
]

log = logging.getLogger(__name__)

#: Response codes that mean the client's metadata is stale (Kafka's InvalidMetadataException
#: family, plus transport failures): refresh before retrying.
STALE_METADATA_CODES = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)
#: Bound on one refresh's attempts: every known broker plus the bootstrap list, at most this many.
REFRESH_ADDRESSES_MAX = 16


_ERROR_NONE = int(ErrorCode.NONE)
#: Not looked up yet (ClusterSnapshot.leader_of's cache: None is an answer).
_UNKNOWN: Any = object()


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with jitter: ``initial_ms * 2**attempts``, capped, +-20 %."""

    initial_ms: int
    max_ms: int
    jitter: float = 0.2

    def delay_ms(self, attempts: int, rng: random.Random) -> int:
        if attempts <= 0:
            return 0
        base = min(self.initial_ms * (2 ** min(attempts - 1, 30)), self.max_ms)
        spread = base * self.jitter
        return max(0, int(base + rng.uniform(-spread, spread)))


@dataclass(frozen=True, slots=True)
class BrokerNode:
    broker_id: int
    host: str
    port: int
    rack: str = ""
    fenced: bool = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error_code: int = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: bytes = b""
    error_code: int = ErrorCode.NONE
    error_message: str = ""
    is_internal: bool = False
    partitions: tuple[PartitionInfo, ...] = ()

    @property
    def exists(self) -> bool:
        return self.error_code == _ERROR_NONE  # a plain int: ErrorCode.NONE is a slow lookup


@dataclass(frozen=True)
class ClusterSnapshot:
    """One immutable picture of the cluster."""

    cluster_id: str = ""
    controller_id: int = -1
    brokers: Mapping[int, BrokerNode] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    metadata_offset: int = -1
    updated_ms: int = -1
    #: available_partitions per topic, computed once per snapshot (send() asks for every record).
    _available: dict[str, list[int]] = field(default_factory=dict, init=False, repr=False,
                                             compare=False)
    #: leader_of per partition, computed once per snapshot: the sender and the consumer ask it
    #: for every partition with data on each turn or poll (10,000 partitions: 10,000 times).
    _leaders: dict[TopicPartition, int | None] = field(default_factory=dict, init=False,
                                                       repr=False, compare=False)

    @classmethod
    def from_response(
        cls, resp: broker_pb2.MetadataResponse, *, now_ms: int, previous: ClusterSnapshot | None,
        all_topics: bool,
    ) -> ClusterSnapshot:
        """Merge a response in: its topics replace ours (all of them when ``all_topics``)."""
        brokers = {
            b.broker_id: BrokerNode(b.broker_id, b.endpoint.host, b.endpoint.port, b.rack, b.fenced)
            for b in resp.brokers
        }
        topics: dict[str, TopicInfo] = {}
        if previous is not None and not all_topics:
            topics.update(previous.topics)
        for t in resp.topics:
            topics[t.name] = TopicInfo(
                name=t.name,
                topic_id=bytes(t.topic_id),
                error_code=t.error_code,
                error_message=t.error_message,
                is_internal=t.is_internal,
                partitions=tuple(
                    sorted(
                        (
                            PartitionInfo(
                                p.partition_id, p.leader, p.leader_epoch, tuple(p.replicas),
                                tuple(p.isr), tuple(p.offline_replicas), p.error_code,
                            )
                            for p in t.partitions
                        ),
                        key=lambda p: p.partition,
                    )
                ),
            )
        return cls(resp.cluster_id, resp.controller_id, brokers, topics, resp.metadata_offset,
                   now_ms)

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        topic = self.topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < len(topic.partitions):
            return None
        info = topic.partitions[tp.partition]
        return info if info.partition == tp.partition else None

    def leader_of(self, tp: TopicPartition) -> int | None:
        """The partition's leader if it has one whose address we know, else None."""
        leaders = self._leaders
        found: int | None = leaders.get(tp, _UNKNOWN)
        if found is not _UNKNOWN:
            return found
        info = self.partition(tp)
        leader = None if info is None or info.leader < 0 or info.leader not in self.brokers else (
            info.leader)
        leaders[tp] = leader  # the same answer whichever thread stores it
        return leader

    def leader_epoch(self, tp: TopicPartition) -> int:
        info = self.partition(tp)
        return -1 if info is None else info.leader_epoch

    def address_of(self, broker_id: int) -> str | None:
        node = self.brokers.get(broker_id)
        return None if node is None else node.address

    def num_partitions(self, topic: str) -> int | None:
        info = self.topics.get(topic)
        if info is None or not info.exists:
            return None
        return len(info.partitions)

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions with a known, reachable leader (cached: callers must not change it)."""
        cached = self._available.get(topic)
        if cached is not None:
            return cached
        info = self.topics.get(topic)
        if info is None:
            return []
        found = [p.partition for p in info.partitions
                 if p.leader >= 0 and p.leader in self.brokers]
        self._available[topic] = found
        return found

    def with_leader_hint(self, tp: TopicPartition, hint: common_pb2.LeaderHint) -> ClusterSnapshot:
        """Apply a response's leader hint when it is newer than what we hold (else unchanged)."""
        info = self.partition(tp)
        if info is None or hint.leader_id < 0 or hint.leader_epoch <= info.leader_epoch:
            return self
        brokers = dict(self.brokers)
        if hint.leader_id not in brokers:
            if not hint.endpoint.host:
                return self  # a leader we cannot reach is no better than none
            brokers[hint.leader_id] = BrokerNode(
                hint.leader_id, hint.endpoint.host, hint.endpoint.port
            )
        topic = self.topics[tp.topic]
        parts = list(topic.partitions)
        parts[tp.partition] = replace(info, leader=hint.leader_id, leader_epoch=hint.leader_epoch)
        topics = dict(self.topics)
        topics[tp.topic] = replace(topic, partitions=tuple(parts))
        return replace(self, brokers=brokers, topics=topics)


class MetadataManager:
    """Owns the snapshot and its refreshes; lives on the I/O loop, read from any thread."""

    def __init__(
        self,
        bootstrap: list[str],
        conns: Connections,
        *,
        loop: asyncio.AbstractEventLoop,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        metadata_max_age_ms: int,
        rng: random.Random | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.snapshot = ClusterSnapshot()
        self._conns = conns
        self._loop = loop
        self._request_timeout_ms = request_timeout_ms
        self._backoff = Backoff(retry_backoff_ms, max(retry_backoff_ms, retry_backoff_max_ms))
        self._max_age_ms = metadata_max_age_ms
        self._rng = rng or random.Random()
        # Added from any thread under the lock; the loop copies them when it builds a request.
        self._topics: set[str] = set()
        #: Tracked topics no answer has covered yet: a refresh for them goes out at once.
        self._new_topics: set[str] = set()
        #: Topics whose answer did not do (not created yet, too few partitions): asked again,
        #: alone, after the refresh backoff.
        self._recheck_topics: set[str] = set()
        self._topics_lock = threading.Lock()
        self._all_topics = False
        self._failures = 0
        self._last_attempt_ms = -(10**12)
        self._refresh: asyncio.Task[ClusterSnapshot] | None = None
        #: A full refresh (every tracked topic) is wanted: stale metadata, or the snapshot's age.
        self._update_wanted = False
        self._background: asyncio.Task[None] | None = None
        #: Set (on the loop) when new topics arrive, to cut the background task's wait short.
        self._kick = asyncio.Event()
        #: Done when the refresh attempt in flight (or the next one) ends: its result None, or
        #: the exception it met that was not a TidelogError (a bug: waiters raise it).
        self._attempt_end: asyncio.Future[None] | None = None
        self._next_address = 0
        self._listeners: list[Callable[[], None]] = []
        self._failure_listeners: list[Callable[[BaseException], None]] = []
        self.last_error: TidelogError | None = None
        self._closed = False

    # ------------------------------------------------------------------ any thread
    def add_topics(self, topics: Iterable[str]) -> bool:
        """Track these topics from now on; True when one was new. New topics are fetched at
        once (unless the last attempt failed: then after its backoff), in one request with any
        other new topics, or in the next one when a refresh is in flight."""
        with self._topics_lock:
            new = set(topics) - self._topics
            if new:
                self._topics |= new
                self._new_topics |= new
        if new:
            self._loop.call_soon_threadsafe(self._on_new_topics)
        return bool(new)

    def set_all_topics(self, value: bool) -> None:
        self._all_topics = value

    def add_listener(self, callback: Callable[[], None]) -> None:
        """``callback()`` runs on the loop after each successful refresh."""
        self._listeners.append(callback)

    def add_failure_listener(self, callback: Callable[[BaseException], None]) -> None:
        """``callback(error)`` runs on the loop when a refresh fails with an unexpected
        exception (not a TidelogError)."""
        self._failure_listeners.append(callback)

    def request_update(self) -> None:
        """Ask for a full refresh as soon as the backoff allows (thread-safe, never blocks)."""
        self._update_wanted = True
        self._loop.call_soon_threadsafe(self._ensure_background)

    def apply_leader_hint(self, tp: TopicPartition, hint: common_pb2.LeaderHint) -> None:
        """Thread-safe: the swap happens on the loop."""
        self._loop.call_soon_threadsafe(self._apply_hint, tp, hint)

    # ------------------------------------------------------------------ loop only
    def _apply_hint(self, tp: TopicPartition, hint: common_pb2.LeaderHint) -> None:
        self.snapshot = self.snapshot.with_leader_hint(tp, hint)

    def maybe_expire(self, now_ms: int) -> None:
        """Refresh when the snapshot is older than ``metadata_max_age_ms``. Nothing before the
        first answer: until then there is nothing to expire, and a refresh is under way when a
        topic is wanted (a full one now would ask for every topic of the cluster)."""
        updated = self.snapshot.updated_ms
        if updated >= 0 and now_ms - updated >= self._max_age_ms:
            self.request_update()

    def next_refresh_delay_ms(self, now_ms: int) -> int:
        """How long the next refresh must wait: after a failed attempt its backoff; else none
        for topics never asked about; else (stale metadata, age) ``retry_backoff_ms`` after the
        last attempt (Kafka's refresh backoff: errors that keep asking for one must not turn
        into a request storm)."""
        if self._failures:
            wait = max(self._backoff.initial_ms, self._backoff.delay_ms(self._failures, self._rng))
        elif self._new_topics:
            return 0
        else:
            wait = self._backoff.initial_ms
        return max(0, self._last_attempt_ms + wait - now_ms)

    def _wanted(self) -> bool:
        return self._update_wanted or bool(self._new_topics) or bool(self._recheck_topics)

    def _on_new_topics(self) -> None:
        self._kick.set()
        self._ensure_background()

    def _ensure_background(self) -> None:
        if self._closed or (self._background is not None and not self._background.done()):
            return
        self._background = self._loop.create_task(self._background_refresh())

    async def _background_refresh(self) -> None:
        # Bounded: each round refreshes or waits out the delay (cut short only by new topics,
        # each name once); it stops when no refresh is wanted or on close.
        while self._wanted() and not self._closed:
            delay = self.next_refresh_delay_ms(monotonic_ms())
            if delay > 0:
                self._kick.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._kick.wait(), delay / 1000)
                continue
            try:
                await self.refresh()
            except TidelogError as e:
                log.debug("metadata refresh failed: %s", e)
            except Exception:  # _do_refresh logged it and told the failure listeners
                return

    async def refresh(self) -> ClusterSnapshot:
        """Fetch metadata now (one refresh at a time; concurrent callers share it)."""
        if self._refresh is None or self._refresh.done():
            self._refresh = self._loop.create_task(self._do_refresh())
            # Callers may stop waiting (a deadline); the outcome is still consumed here.
            self._refresh.add_done_callback(_consume_outcome)
        return await asyncio.shield(self._refresh)

    def _addresses(self) -> list[str]:
        known = [b.address for b in self.snapshot.brokers.values() if not b.fenced]
        ordered = list(dict.fromkeys(known + self.bootstrap))[:REFRESH_ADDRESSES_MAX]
        start = self._next_address % len(ordered)
        self._next_address += 1
        return ordered[start:] + ordered[:start]

    async def _do_refresh(self) -> ClusterSnapshot:
        bug: Exception | None = None
        try:
            return await self._attempt()
        except TidelogError:
            raise
        except Exception as e:
            bug = e
            raise
        finally:
            end, self._attempt_end = self._attempt_end, None
            if end is not None and not end.done():
                if bug is None:
                    end.set_result(None)
                else:
                    end.set_exception(bug)

    async def _attempt(self) -> ClusterSnapshot:
        self._last_attempt_ms = monotonic_ms()
        full = self._update_wanted or self._all_topics
        self._update_wanted = False
        with self._topics_lock:
            asked = frozenset(self._new_topics | self._recheck_topics)
            tracked = sorted(self._topics)
        if full or not asked:
            topics = tracked
            all_topics = self._all_topics or not topics
            partial = False
        else:  # only the topics waited for: the answer is merged into what we hold
            topics = sorted(asked)
            all_topics = False
            partial = True
        request = broker_pb2.MetadataRequest(topics=[] if all_topics else topics)
        last: TidelogError | None = None
        addresses = self._addresses()
        for address in addresses:
            try:
                resp = await self._conns.call(
                    address, "Metadata", request, timeout_ms=self._request_timeout_ms
                )
            except TidelogError as e:
                last = e
                if isinstance(e, AUTHENTICATION_ERRORS):
                    break  # the credentials are the cluster's: another broker refuses them too
                continue
            try:
                previous = self.snapshot
                # A partial answer does not make the other topics any fresher: it keeps the
                # snapshot's age (metadata_max_age_ms), unless nothing was fetched before.
                updated = (previous.updated_ms if partial and previous.updated_ms >= 0
                           else monotonic_ms())
                self.snapshot = ClusterSnapshot.from_response(
                    resp, now_ms=updated, previous=previous, all_topics=all_topics
                )
                with self._topics_lock:
                    self._new_topics -= asked
                    self._recheck_topics -= asked
                self._failures = 0
                self.last_error = None
                for callback in self._listeners:
                    callback()
            except Exception as e:
                self._unexpected(e, address)
                raise
            return self.snapshot
        self._failures += 1
        if not partial:
            self._update_wanted = True  # (the topics of a partial one stay wanted)
        assert last is not None  # narrowing: the loop ran at least once, each time failing
        self.last_error = NetworkError(
            f"no broker answered a metadata request (tried {', '.join(addresses)}); "
            f"last error: {last}"
        ) if last.retriable else last
        raise self.last_error

    @property
    def authentication_error(self) -> TidelogError | None:
        """The last refresh's error when the brokers refused the client's credentials (cleared
        by a refresh that succeeds)."""
        error = self.last_error
        return error if isinstance(error, AUTHENTICATION_ERRORS) else None

    def _unexpected(self, error: Exception, address: str) -> None:
        log.error("handling the metadata from %s failed", address, exc_info=error)
        for callback in self._failure_listeners:
            try:
                callback(error)
            except Exception:
                log.exception("a metadata failure listener raised")

    async def call_any(self, method: str, request: Any, *, deadline_ms: int,
                       idempotent: bool = True) -> Any:
        """Send ``request`` to any broker, moving on from ones that cannot be reached; retry with
        backoff until ``deadline_ms`` (monotonic). Request-level error codes are the caller's.
        A request that is not ``idempotent`` (an admin write) is not sent again after a timeout,
        since the first one may have been applied: RequestTimedOutError is raised instead."""
        retried: tuple[type[TidelogError], ...] = (
            (NetworkError, RequestTimedOutError) if idempotent else (NetworkError,))
        attempts = 0
        last: TidelogError | None = None
        while True:
            for address in self._addresses():
                remaining = deadline_ms - monotonic_ms()
                if remaining <= 0:
                    break
                try:
                    return await self._conns.call(
                        address, method, request,
                        timeout_ms=min(remaining, self._request_timeout_ms),
                    )
                except retried as e:
                    last = e
                    self.request_update()
            attempts += 1
            delay = self._backoff.delay_ms(attempts, self._rng)
            if monotonic_ms() + delay >= deadline_ms:
                raise _unreachable(self.bootstrap, last)
            await asyncio.sleep(delay / 1000)

    async def wait_for_topic(
        self, topic: str, *, min_partitions: int, deadline_ms: int
    ) -> TopicInfo:
        """Metadata for ``topic`` with more than ``min_partitions - 1`` partitions, refreshing
        until ``deadline_ms``: a topic not asked about yet is fetched at once (one round trip),
        one whose answer did not do (not created yet, too few partitions) again after the
        refresh backoff. Each wait ends with a refresh attempt. Raises the topic's error if it
        is not retriable (an invalid name), the brokers' refusal of the client's credentials at
        once (SaslAuthenticationFailedError), else UnknownTopicOrPartitionError / NetworkError
        at the deadline. Loop only."""
        self.add_topics([topic])
        while True:
            info = self.snapshot.topics.get(topic)
            if info is not None and info.exists and len(info.partitions) >= min_partitions:
                return info
            refused = self.authentication_error
            if refused is not None:
                raise refused  # the last refresh was refused: waiting would not help
            if info is not None and not info.exists:
                err = error_for_code(info.error_code, info.error_message)
                if not err.retriable:
                    raise err
            now = monotonic_ms()
            if now >= deadline_ms:
                raise self._missing(topic, info, min_partitions)
            if self._closed:
                raise NetworkError(f"the client was closed while waiting for topic {topic!r}")
            with self._topics_lock:
                if topic not in self._new_topics:  # an answer came and did not do: ask again
                    self._recheck_topics.add(topic)
            self._ensure_background()
            await self._attempt_ended(deadline_ms - now)

    async def _attempt_ended(self, timeout_ms: int) -> None:
        """Wait until the refresh attempt in flight, or the next one, ends (or ``timeout_ms``);
        raise what it met if that was not a TidelogError (an answer the client cannot handle,
        logged already) rather than wait out the deadline."""
        end = self._attempt_end
        if end is None:
            end = self._attempt_end = self._loop.create_future()
            end.add_done_callback(_consume_outcome)  # a waiter that gave up does not read it
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(end), max(timeout_ms, 1) / 1000)

    def _missing(self, topic: str, info: TopicInfo | None, min_partitions: int) -> TidelogError:
        if info is None:
            if self.last_error is not None:
                return _unreachable(self.bootstrap, self.last_error)
            return RequestTimedOutError(f"no metadata for topic {topic!r} arrived in time")
        if info is not None and info.exists:
            return UnknownTopicOrPartitionError(
                f"partition {min_partitions - 1} of topic {topic!r} does not exist (it has "
                f"{len(info.partitions)} partitions)"
            )
        return UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")

    async def close(self) -> None:
        self._closed = True
        for task in (self._background, self._refresh):
            if task is not None and not task.done():
                task.cancel()
        end, self._attempt_end = self._attempt_end, None
        if end is not None and not end.done():
            end.set_result(None)  # waiters look again and meet their deadline


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _unreachable(bootstrap: list[str], last: TidelogError | None) -> TidelogError:
    if last is None or not isinstance(last, NetworkError | RequestTimedOutError):
        return last or NetworkError(f"no broker of {','.join(bootstrap)} could be reached")
    if isinstance(last, NetworkError) and "no broker" in last.message:
        return last
    return NetworkError(f"no broker of {','.join(bootstrap)} could be reached; last error: {last}")
