"""The client's view of the cluster: brokers, topics, partition leaders; refreshed on demand.

``ClusterSnapshot`` is an immutable picture built from a MetadataResponse; readers on any thread
take ``MetadataManager.snapshot`` and use it without locks, and updates replace it whole. A
refresh happens when a client asks (a topic it needs, an error that means "your metadata is
stale": NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH...), when the
snapshot is older than ``metadata_max_age_ms``, and never more often than the backoff allows:
``retry_backoff_ms`` growing exponentially with jitter to ``retry_backoff_max_ms`` while refreshes
fail (Kafka's ExponentialBackoff). A refresh asks the known brokers in turn, then the bootstrap
list, until one answers.

A refresh that fails with anything but a TidelogError (a bug, an answer the client cannot read)
is logged with its traceback and handed to the failure listeners (the producer's sender stops
for good on it: ``Sender.crash``), instead of ending the background task unseen.

A leader hint in an error response (KIP-951) moves the partition's leader at once, without
waiting for the refresh, when its leader epoch is newer than the one we hold.
"""

from __future__ import annotations

import asyncio
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
        info = self.partition(tp)
        if info is None or info.leader < 0 or info.leader not in self.brokers:
            return None
        return info.leader

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
        # Copy-on-write so other threads can add topics while the loop iterates the old set.
        self._topics: frozenset[str] = frozenset()
        self._topics_lock = threading.Lock()
        self._all_topics = False
        self._failures = 0
        self._last_attempt_ms = -(10**12)
        self._refresh: asyncio.Task[ClusterSnapshot] | None = None
        self._update_wanted = False
        self._background: asyncio.Task[None] | None = None
        self._next_address = 0
        self._listeners: list[Callable[[], None]] = []
        self._failure_listeners: list[Callable[[BaseException], None]] = []
        self.last_error: TidelogError | None = None
        self._closed = False

    # ------------------------------------------------------------------ any thread
    def add_topics(self, topics: Iterable[str]) -> bool:
        """Track these topics from now on; True when one was new (then refresh)."""
        with self._topics_lock:
            new = frozenset(topics) - self._topics
            if new:
                self._topics = self._topics | new
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
        """Ask for a refresh as soon as the backoff allows (thread-safe, never blocks)."""
        self._update_wanted = True
        self._loop.call_soon_threadsafe(self._ensure_background)

    def apply_leader_hint(self, tp: TopicPartition, hint: common_pb2.LeaderHint) -> None:
        """Thread-safe: the swap happens on the loop."""
        self._loop.call_soon_threadsafe(self._apply_hint, tp, hint)

    # ------------------------------------------------------------------ loop only
    def _apply_hint(self, tp: TopicPartition, hint: common_pb2.LeaderHint) -> None:
        self.snapshot = self.snapshot.with_leader_hint(tp, hint)

    def maybe_expire(self, now_ms: int) -> None:
        """Refresh when the snapshot is older than ``metadata_max_age_ms``."""
        if now_ms - self.snapshot.updated_ms >= self._max_age_ms:
            self.request_update()

    def next_refresh_delay_ms(self, now_ms: int) -> int:
        # Even after a success, refreshes are at least retry_backoff_ms apart (Kafka's
        # refreshBackoff): errors that keep asking for one must not turn into a request storm.
        wait = max(self._backoff.initial_ms, self._backoff.delay_ms(self._failures, self._rng))
        return max(0, self._last_attempt_ms + wait - now_ms)

    def _ensure_background(self) -> None:
        if self._closed or (self._background is not None and not self._background.done()):
            return
        self._background = self._loop.create_task(self._background_refresh())

    async def _background_refresh(self) -> None:
        # Bounded: each round either succeeds (and clears the wish) or waits out the backoff,
        # which is at least retry_backoff_ms; it stops when no refresh is wanted or on close.
        while self._update_wanted and not self._closed:
            delay = self.next_refresh_delay_ms(monotonic_ms())
            if delay > 0:
                await asyncio.sleep(delay / 1000)
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
        self._last_attempt_ms = monotonic_ms()
        self._update_wanted = False
        topics = sorted(self._topics)
        all_topics = self._all_topics or not topics
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
                self.snapshot = ClusterSnapshot.from_response(
                    resp, now_ms=monotonic_ms(), previous=self.snapshot, all_topics=all_topics
                )
                self._failures = 0
                self.last_error = None
                for callback in self._listeners:
                    callback()
            except Exception as e:
                self._unexpected(e, address)
                raise
            return self.snapshot
        self._failures += 1
        self._update_wanted = True
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
        with backoff until ``deadline_ms``. Raises the topic's error if it is not retriable (an
        invalid name), the brokers' refusal of the client's credentials at once
        (SaslAuthenticationFailedError), else UnknownTopicOrPartitionError / NetworkError at the
        deadline."""
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
            delay = self.next_refresh_delay_ms(now)
            if delay:
                await asyncio.sleep(min(delay, deadline_ms - now) / 1000)
                continue
            try:
                await asyncio.wait_for(self.refresh(), max(deadline_ms - now, 1) / 1000)
            except AUTHENTICATION_ERRORS:
                raise  # refused credentials: waiting out the deadline would not help
            except (TidelogError, TimeoutError):
                continue

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


def _consume_outcome(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _unreachable(bootstrap: list[str], last: TidelogError | None) -> TidelogError:
    if last is None or not isinstance(last, NetworkError | RequestTimedOutError):
        return last or NetworkError(f"no broker of {','.join(bootstrap)} could be reached")
    if isinstance(last, NetworkError) and "no broker" in last.message:
        return last
    return NetworkError(f"no broker of {','.join(bootstrap)} could be reached; last error: {last}")
