"""The Consumer: read partitions you assign, or join a consumer group and read the partitions
it gives you (KIP-848), from committed offsets, following leader changes.

Two ways to choose partitions, as Kafka's: ``assign()`` a set yourself, or ``subscribe()`` to
topics (or a pattern) with a ``group_id`` and let the group's coordinator share the topics'
partitions among its members. Then ``poll()`` in a loop. ``poll()`` returns what earlier
fetches brought back and, before returning, sends the next fetches (one request in flight per
leader), so the network works while the application processes records (``_fetch_manager.py``).

As a group member the consumer heartbeats in the background on the client's I/O thread
(``_group_coordinator.py``, driven by the pure state machine ``_membership.py``), independent of
poll(); what the coordinator asks for (revoke these partitions, take those) is carried out on the
application thread inside poll(), with the rebalance listener's callbacks
(``_group_member.py``). Positions of partitions the group gives start at the group's committed
offsets, else ``auto_offset_reset``. With ``enable_auto_commit`` (the default with a group) the
positions are committed every ``auto_commit_interval_ms`` from poll(), before a revocation and
on close(). A member that does not poll within ``max_poll_interval_ms`` leaves the group and
rejoins at its next poll().

A partition's position starts unknown; ``auto_offset_reset`` ("earliest", "latest", or "none":
raise) decides where it starts, by ListOffsets at the leader, and where it goes when the leader
answers OFFSET_OUT_OF_RANGE. Fetched batches are CRC-checked when decoded; a corrupt one raises
CorruptRecordError naming the partition and offset, and the position does not move past it.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Literal

from tidelog import limits
from tidelog.client._fetch_manager import FetchConfig, FetchDone, FetchManager, ResetDone
from tidelog.client._fetcher import (
    EARLIEST,
    LATEST,
    CorruptRecordError,
    NoOffsetForPartitionError,
    SubscriptionState,
)
from tidelog.client._group_coordinator import GroupCoordinator
from tidelog.client._group_member import (
    CommitCallback,
    CommitDone,
    CommittedDone,
    ConsumerRebalanceListener,
    GroupMember,
    check_group_texts,
    check_subscription,
)
from tidelog.client._io import Connections, io_thread, monotonic_ms
from tidelog.client._membership import Membership, MembershipConfig
from tidelog.client._metadata import Backoff, MetadataManager
from tidelog.client._offset_lookups import OffsetLookups
from tidelog.client.bootstrap import parse_bootstrap
from tidelog.client.records import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from tidelog.errors import RequestTimedOutError
from tidelog.metadata.topic_names import validate_topic_name
from tidelog.tls import ClientSecurity

__all__ = ["Consumer", "ConsumerRebalanceListener", "CorruptRecordError",
           "NoOffsetForPartitionError"]

_RESETS = {"earliest": EARLIEST, "latest": LATEST, "none": None}
_Event = FetchDone | ResetDone | CommitDone | CommittedDone


class Consumer:
    """Reads records from assigned or group-given partitions. Not thread-safe: use it from one
    thread (callbacks run on that thread too).

    >>> with Consumer("127.0.0.1:9092", group_id="billing",
    ...               auto_offset_reset="earliest") as consumer:
    ...     consumer.subscribe(["orders"])
    ...     for record in consumer.poll(timeout_ms=1000):
    ...         print(record.offset, record.key, record.value)

    Security, with Kafka's names (docs/security.md): ``security_protocol`` is PLAINTEXT, SSL
    (TLS: ``ssl_cafile`` verifies the brokers; ``ssl_certfile``/``ssl_keyfile`` for a listener
    that asks for a client certificate) or SASL_SSL (TLS as SSL, the certificate optional, and a
    SCRAM user: ``sasl_username``, ``sasl_password``, ``sasl_mechanism`` SCRAM-SHA-256 (default)
    or SCRAM-SHA-512). Credentials the brokers refuse make poll() raise
    SaslAuthenticationFailedError (or UnsupportedSaslMechanismError), never retried.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "tidelog-consumer",
        group_id: str | None = None,
        group_instance_id: str | None = None,
        group_remote_assignor: str | None = None,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        max_poll_interval_ms: int = 300_000,
        rebalance_timeout_ms: int | None = None,
        client_rack: str | None = None,
        auto_offset_reset: Literal["earliest", "latest", "none"] = "latest",
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        max_partition_fetch_bytes: int = limits.PARTITION_FETCH_BYTES_MAX_DEFAULT,
        fetch_max_bytes: int = limits.FETCH_BYTES_MAX_DEFAULT,
        max_poll_records: int = 500,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        metadata_max_age_ms: int = 300_000,
        security_protocol: str = "PLAINTEXT",
        ssl_cafile: str = "",
        ssl_certfile: str = "",
        ssl_keyfile: str = "",
        sasl_mechanism: str = "SCRAM-SHA-256",
        sasl_username: str = "",
        sasl_password: str = "",
    ) -> None:
        if auto_offset_reset not in _RESETS:
            raise ValueError("auto_offset_reset must be 'earliest', 'latest' or 'none', got "
                             f"{auto_offset_reset!r}")
        for name, value in (("fetch_max_bytes", fetch_max_bytes),
                            ("max_partition_fetch_bytes", max_partition_fetch_bytes),
                            ("max_poll_records", max_poll_records),
                            ("request_timeout_ms", request_timeout_ms),
                            ("fetch_min_bytes", fetch_min_bytes),
                            ("auto_commit_interval_ms", auto_commit_interval_ms),
                            ("max_poll_interval_ms", max_poll_interval_ms)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not 0 <= fetch_max_wait_ms <= limits.FETCH_WAIT_MS_MAX:
            raise ValueError(f"fetch_max_wait_ms must be 0..{limits.FETCH_WAIT_MS_MAX}")
        if max(fetch_max_bytes, max_partition_fetch_bytes) > limits.GRPC_MESSAGE_BYTES_MAX // 2:
            raise ValueError("fetch sizes must stay below half the gRPC message limit")
        check_group_texts(group_id, group_instance_id, group_remote_assignor, client_rack)
        self.client_id = client_id
        self.group_id = group_id
        self._reset = _RESETS[auto_offset_reset]
        self._max_poll_records = max_poll_records
        self._request_timeout_ms = request_timeout_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._backoff = Backoff(retry_backoff_ms, max(retry_backoff_ms, retry_backoff_max_ms))
        self._io = io_thread()
        security = ClientSecurity(security_protocol, ssl_cafile, ssl_certfile, ssl_keyfile,
                                  sasl_mechanism, sasl_username, sasl_password)
        self._conns = Connections(client_id, security.channel_factory())
        self._metadata = MetadataManager(
            parse_bootstrap(bootstrap_servers), self._conns, loop=self._io.loop,
            request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms, metadata_max_age_ms=metadata_max_age_ms,
        )
        self._subs = SubscriptionState()
        self._cond = threading.Condition()
        # Results posted by the I/O loop. Bounded by construction: at most one fetch per leader,
        # one reset and one committed-offset fetch per partition, and the commits in flight,
        # are outstanding, and each posts exactly one event.
        self._events: collections.deque[_Event] = collections.deque()
        self._fetcher = FetchManager(
            subs=self._subs, metadata=self._metadata, conns=self._conns, io=self._io,
            config=FetchConfig(fetch_min_bytes, fetch_max_wait_ms, max_partition_fetch_bytes,
                               fetch_max_bytes, request_timeout_ms),
            reset=self._reset, backoff=self._backoff, post=self._post)
        self._lookups = OffsetLookups(
            metadata=self._metadata, conns=self._conns, io=self._io,
            request_timeout_ms=request_timeout_ms, backoff=self._backoff,
            check_open=self._check_open)
        self._group: GroupMember | None = None
        self._mode: Literal["none", "assigned", "subscribed"] = "none"
        self._closed = False
        if group_id is not None:
            self._group = self._group_member(
                group_id, MembershipConfig(
                    group_id=group_id, instance_id=group_instance_id or "",
                    rack_id=client_rack or "", server_assignor=group_remote_assignor or "",
                    rebalance_timeout_ms=rebalance_timeout_ms or max_poll_interval_ms,
                    max_poll_interval_ms=max_poll_interval_ms),
                enable_auto_commit, auto_commit_interval_ms)
        self._metadata.add_listener(self._notify)

    def _group_member(self, group_id: str, config: MembershipConfig, auto_commit: bool,
                      auto_commit_interval_ms: int) -> GroupMember:
        membership = Membership(config, backoff=self._backoff, now_ms=monotonic_ms())
        coordinator = GroupCoordinator(
            group_id=group_id, membership=membership, metadata=self._metadata,
            conns=self._conns, loop=self._io.loop, request_timeout_ms=self._request_timeout_ms,
            backoff=self._backoff, on_event=self._notify)
        return GroupMember(
            coordinator=coordinator, subs=self._subs, io=self._io, metadata=self._metadata,
            post=self._post, enable_auto_commit=auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms,
            request_timeout_ms=self._request_timeout_ms, backoff=self._backoff)

    # ------------------------------------------------------------------ assignment
    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions from now on (replacing any earlier assignment).
        Partitions kept from the earlier assignment keep their positions. With a group id,
        new partitions start at the group's committed offsets (a simple consumer: it commits
        with no member id, which the coordinator accepts while the group has no members)."""
        self._check_open()
        if self._mode == "subscribed":
            raise RuntimeError("subscribe() and assign() cannot be mixed on one consumer: "
                               "unsubscribe() first")
        tps = [TopicPartition(*tp) for tp in partitions]
        for tp in tps:
            validate_topic_name(tp.topic)
            if not isinstance(tp.partition, int) or tp.partition < 0:
                raise ValueError(f"partition ids are non-negative ints, got {tp.partition!r}")
        self._subs.assign(list(dict.fromkeys(tps)), committed_first=self._group is not None)
        self._mode = "assigned" if tps else "none"
        self._metadata.add_topics(tp.topic for tp in tps)  # new ones are fetched at once

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: str | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        """Join the group (``group_id``) for these topics, or for every topic whose whole name
        matches ``pattern`` (resolved by the coordinator). Replaces an earlier subscription;
        ``listener`` is told of partitions revoked, assigned and lost, inside poll()."""
        self._check_open()
        group = self._group
        if group is None:
            raise ValueError("subscribe() needs a group_id: Consumer(..., group_id='name')")
        if self._mode == "assigned":
            raise RuntimeError("subscribe() and assign() cannot be mixed on one consumer: "
                               "assign([]) or unsubscribe() first")
        names = check_subscription(topics, pattern)
        if listener is not None and not isinstance(listener, ConsumerRebalanceListener):
            raise TypeError("listener must be a ConsumerRebalanceListener")
        group.listener = listener or group.listener
        with group.coordinator.lock:
            group.coordinator.membership.subscribe(names, pattern or "", monotonic_ms())
        self._mode = "subscribed"
        self._metadata.add_topics(names)  # new ones are fetched at once
        group.coordinator.wake()

    def subscription(self) -> set[str]:
        """The subscribed topic names (a pattern subscription: the topics the group gave)."""
        if self._group is None or self._mode != "subscribed":
            return set()
        membership = self._group.coordinator.membership
        if membership.pattern:
            return {tp.topic for tp in self._subs.partitions}
        return set(membership.topics)

    def unsubscribe(self) -> None:
        """Give the group's partitions back (commit with auto-commit, on_partitions_revoked)
        and leave the group; or forget an assign()ment."""
        self._check_open()
        if self._mode == "subscribed":
            self._leave_group(monotonic_ms() + self._request_timeout_ms)
        self._subs.assign([])
        self._mode = "none"

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned to this consumer (by assign() or by the group)."""
        return set(self._subs.partitions)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next offset ``poll()`` returns for ``partition``."""
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be a non-negative int, got {offset!r}")
        self._subs.state(TopicPartition(*partition)).seek(offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Start from the log start offset (all assigned partitions when none are given);
        resolved lazily, at the next poll() or position()."""
        for tp in partitions or tuple(self._subs.partitions):
            self._subs.state(TopicPartition(*tp)).request_reset(EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Start after the last committed record (the high watermark); lazily, like
        seek_to_beginning."""
        for tp in partitions or tuple(self._subs.partitions):
            self._subs.state(TopicPartition(*tp)).request_reset(LATEST)

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning and fetching records of these partitions until resume()."""
        for tp in partitions:
            self._subs.state(TopicPartition(*tp)).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch and return records of these partitions again."""
        for tp in partitions:
            self._subs.state(TopicPartition(*tp)).paused = False

    def paused(self) -> set[TopicPartition]:
        """The assigned partitions that are paused."""
        return {tp for tp, st in self._subs.partitions.items() if st.paused}

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark as of the last fetch (None before one)."""
        hw = self._subs.state(TopicPartition(*partition)).high_watermark
        return None if hw < 0 else hw

    # ------------------------------------------------------------------ positions and offsets
    def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record poll() will return for ``partition``, resolving a
        pending reset first (RequestTimedOutError when that takes over ``timeout_ms``; default
        ``request_timeout_ms``)."""
        self._check_open()
        tp = TopicPartition(*partition)
        st = self._subs.state(tp)
        deadline = monotonic_ms() + (self._request_timeout_ms if timeout_ms is None
                                     else timeout_ms)
        # Bounded: each pass waits for an event or a backoff step, and stops at the deadline.
        while True:
            self._step(run_group=False)
            if st.has_valid_position:
                assert st.position is not None
                return st.position
            now = monotonic_ms()
            if now >= deadline:
                raise RequestTimedOutError(f"the position of {tp} is not known yet")
            self._wait(min(deadline - now, self._retry_backoff_ms))

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first offset whose record timestamp is >= the given one (ms),
        or None when there is none. Partitions need not be assigned."""
        return self._lookups.offsets_for_times(timestamps, timeout_ms)

    def beginning_offsets(self, partitions: Iterable[TopicPartition],
                          timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""
        return self._lookups.beginning_offsets(partitions, timeout_ms)

    def end_offsets(self, partitions: Iterable[TopicPartition],
                    timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset the next committed record gets)."""
        return self._lookups.end_offsets(partitions, timeout_ms)

    def partitions_for(self, topic: str, timeout_ms: int | None = None) -> list[int]:
        """The topic's partition ids (UnknownTopicOrPartitionError if it does not exist)."""
        return self._lookups.partitions_for(topic, timeout_ms)

    # ------------------------------------------------------------------ polling
    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions (up to ``max_records``, default
        ``max_poll_records``), waiting up to ``timeout_ms`` for some; [] when none came.

        As a group member, poll() also runs the rebalance: the listener's callbacks, commits
        before revocation, auto-commits; and it restarts the max_poll_interval_ms timer.

        Raises CorruptRecordError, NoOffsetForPartitionError (auto_offset_reset="none"),
        UnknownTopicOrPartitionError (an assigned partition has not existed for
        ``request_timeout_ms``), the typed error of a non-retriable fetch failure, a fatal
        group error (e.g. GroupMaxSizeReachedError, UnsupportedAssignorError,
        FencedInstanceIdError: the member stopped), SaslAuthenticationFailedError (the brokers
        refuse the SCRAM credentials: every poll until they accept them), or what a rebalance
        callback raised
        (after its step completed). Records already collected are returned first; the error
        is raised by the next poll().
        """
        self._check_open()
        if self._mode == "none":
            raise RuntimeError("no partitions are assigned and no topics subscribed; call "
                               "assign() or subscribe() first")
        limit = self._max_poll_records if max_records is None else max_records
        if limit <= 0:
            raise ValueError("max_records must be positive")
        deadline = monotonic_ms() + max(timeout_ms, 0)
        # Bounded: each pass waits for an event or one backoff step, and stops at the deadline.
        while True:
            self._step()
            records = self._fetcher.collect(limit)
            self._fetcher.send_fetches()
            if records:
                return records
            self._raise_pending()
            now = monotonic_ms()
            if now >= deadline:
                return []
            self._wait(min(deadline - now, self._retry_backoff_ms))

    def _step(self, *, run_group: bool = True) -> None:
        """One pass of the application-side work before collecting records (position() runs
        no rebalance step: callbacks and the poll timer belong to poll())."""
        self._raise_pending()
        self._process_events()
        if self._group is not None:
            now = monotonic_ms()
            if self._mode == "subscribed" and run_group:
                self._group.on_poll(now)
            elif self._mode == "subscribed":
                self._group.refresh_committed(now)
            else:
                self._group.maybe_auto_commit(now)
                self._group.refresh_committed(now)
        self._fetcher.check_unknown_topics()
        self._fetcher.maybe_reset_positions()

    # ------------------------------------------------------------------ committed offsets
    def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
               *, timeout_ms: int | None = None) -> None:
        """Commit ``offsets`` (the next offset to read, per partition) to the group, or the
        current positions of all assigned partitions; waits until the coordinator has them
        (acks=all), up to ``timeout_ms`` (default ``request_timeout_ms``). Raises the typed
        error: e.g. StaleMemberEpochError/UnknownMemberIdError when this member was fenced
        (its partitions may be another member's now), RequestTimedOutError."""
        group = self._require_group()
        self._process_events()
        wanted = self._offsets(offsets)
        if wanted:
            group.commit_sync(wanted, self._timeout(timeout_ms))

    def commit_async(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None
                     = None, callback: CommitCallback | None = None) -> None:
        """Like commit() without waiting: ``callback(offsets, error)`` (error None on success)
        runs on this thread in a later poll(), commit() or close()."""
        group = self._require_group()
        self._process_events()
        wanted = self._offsets(offsets)
        if wanted:
            group.commit_async(wanted, callback)
        elif callback is not None:
            callback({}, None)

    def committed(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
                  ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of each partition (None where none is)."""
        group = self._require_group()
        tps = [TopicPartition(*tp) for tp in partitions]
        for tp in tps:
            validate_topic_name(tp.topic)
        wait = self._timeout(timeout_ms)
        return self._io.run(group.coordinator.fetch_committed(
            tps, deadline_ms=monotonic_ms() + wait), wait / 1000)

    def _offsets(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None
                 ) -> dict[TopicPartition, OffsetAndMetadata]:
        assert self._group is not None
        if offsets is None:
            return self._group.positions()
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, value in offsets.items():
            key = TopicPartition(*tp)
            validate_topic_name(key.topic)
            if not isinstance(key.partition, int) or key.partition < 0:
                raise ValueError(f"partition ids are non-negative ints, got {key.partition!r}")
            out[key] = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
        return out

    def _require_group(self) -> GroupMember:
        self._check_open()
        if self._group is None:
            raise ValueError("committing needs a group_id: Consumer(..., group_id='name')")
        return self._group

    def _timeout(self, timeout_ms: int | None) -> int:
        wait = self._request_timeout_ms if timeout_ms is None else timeout_ms
        if not isinstance(wait, int) or wait <= 0:
            raise ValueError(f"timeout_ms must be a positive int, got {timeout_ms!r}")
        return wait

    # ------------------------------------------------------------------ events from the loop
    def _post(self, event: _Event) -> None:
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _wait(self, timeout_ms: int) -> None:
        with self._cond:
            if not self._events:
                self._cond.wait(max(timeout_ms, 1) / 1000)

    def _process_events(self) -> None:
        with self._cond:
            events = list(self._events)
            self._events.clear()
        for event in events:
            if isinstance(event, FetchDone | ResetDone):
                self._fetcher.handle_event(event)
            elif self._group is None:
                continue
            elif isinstance(event, CommitDone):
                self._group.on_commit_done(event)
            else:
                self._group.on_committed_done(event)

    def _raise_pending(self) -> None:
        error = self._fetcher.pending_error
        if error is not None:
            self._fetcher.pending_error = None
            raise error
        refused = self._metadata.authentication_error
        if refused is not None:  # raised again by every poll until a refresh succeeds
            raise refused
        if self._group is not None and self._group.pending_error is not None:
            group_error, self._group.pending_error = self._group.pending_error, None
            raise group_error

    # ------------------------------------------------------------------ lifecycle
    def close(self, timeout_ms: int | None = None) -> None:
        """Leave cleanly and release the connections. Idempotent. As a group member, within
        ``timeout_ms`` (default ``request_timeout_ms``): commit the positions (with
        auto-commit), on_partitions_revoked, leave the group (a static member keeps its
        partitions until its session expires), deliver pending commit callbacks."""
        if self._closed:
            return
        if self._io.in_io_thread():
            raise RuntimeError("close() on the client I/O thread would deadlock")
        deadline = monotonic_ms() + self._timeout(timeout_ms)
        try:
            if self._group is not None:
                self._close_group(deadline)
        finally:
            self._closed = True
            self._fetcher.closed = True
            self._io.run(self._close(), None)

    def _close_group(self, deadline_ms: int) -> None:
        group = self._group
        assert group is not None
        self._process_events()
        if self._mode == "subscribed":
            self._leave_group(deadline_ms)
        elif group.auto_commit and self._mode == "assigned":
            group.commit_quietly(deadline_ms)
        # Bounded: waits for the asynchronous commits in flight until the deadline.
        while group.async_commits_in_flight > 0 and monotonic_ms() < deadline_ms:
            self._wait(min(self._retry_backoff_ms, deadline_ms - monotonic_ms()))
            self._process_events()

    def _leave_group(self, deadline_ms: int) -> None:
        assert self._group is not None
        self._mode = "none"
        self._group.leave_group(deadline_ms)

    async def _close(self) -> None:
        if self._group is not None:
            await self._group.coordinator.close()
        await self._metadata.close()
        await self._conns.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the consumer is closed")

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

