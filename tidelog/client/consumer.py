"""The Consumer: read assigned partitions from positions you choose, following leader changes.

Kafka's consumer model without groups (yet): ``assign()`` a set of partitions, optionally
``seek()`` each, then ``poll()`` in a loop. ``poll()`` returns what earlier fetches brought back
and, before returning, sends the next fetches (one request in flight per leader, covering every
assigned partition that leader has and whose fetched records are used up), so the network works
while the application processes records: that is the prefetching, and it is bounded to one
fetch response per leader (``fetch_max_bytes``), as in Kafka.

A partition's position starts unknown; ``auto_offset_reset`` ("earliest", "latest", or "none":
raise) decides where it starts, by ListOffsets at the leader, and where it goes when the leader
answers OFFSET_OUT_OF_RANGE. Errors meaning stale metadata (NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH...) apply the response's leader hint and refresh metadata; the partition
backs off and is fetched from the new leader. Fetched batches are CRC-checked when decoded; a
corrupt one raises CorruptRecordError (a CorruptMessageError) naming the partition and offset,
and the position does not move past it.

Consumer groups will add ``subscribe()``, ``commit()`` and ``committed()`` on top of the same
subscription state; ``group_id`` is not accepted yet so that code written today keeps working.
"""

from __future__ import annotations

import collections
import random
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

from tidelog import limits
from tidelog.client._fetcher import (
    EARLIEST,
    LATEST,
    CorruptRecordError,
    NoOffsetForPartitionError,
    PartitionRecords,
    SubscriptionState,
    list_offsets,
)
from tidelog.client._io import Connections, io_thread, monotonic_ms, parse_bootstrap
from tidelog.client._metadata import STALE_METADATA_CODES, Backoff, MetadataManager
from tidelog.client.records import ConsumerRecord, OffsetAndTimestamp, TopicPartition
from tidelog.errors import (
    ErrorCode,
    RequestTimedOutError,
    TidelogError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from tidelog.metadata.topic_names import validate_topic_name
from tidelog.v1 import broker_pb2, common_pb2

__all__ = ["Consumer", "CorruptRecordError", "NoOffsetForPartitionError"]

_RESETS = {"earliest": EARLIEST, "latest": LATEST, "none": None}


@dataclass(frozen=True, slots=True)
class _FetchDone:
    node: int
    requested: dict[TopicPartition, int]
    response: broker_pb2.FetchResponse | None
    error: TidelogError | None


@dataclass(frozen=True, slots=True)
class _ResetDone:
    requested: dict[TopicPartition, int]
    results: dict[TopicPartition, tuple[int, int]] | None
    error: TidelogError | None


class Consumer:
    """Reads records from assigned partitions. Not thread-safe: use it from one thread.

    >>> with Consumer("127.0.0.1:9092", auto_offset_reset="earliest") as consumer:
    ...     consumer.assign([TopicPartition("orders", 0)])
    ...     for record in consumer.poll(timeout_ms=1000):
    ...         print(record.offset, record.key, record.value)
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "tidelog-consumer",
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
    ) -> None:
        if auto_offset_reset not in _RESETS:
            raise ValueError("auto_offset_reset must be 'earliest', 'latest' or 'none', got "
                             f"{auto_offset_reset!r}")
        for name, value in (("fetch_max_bytes", fetch_max_bytes),
                            ("max_partition_fetch_bytes", max_partition_fetch_bytes),
                            ("max_poll_records", max_poll_records),
                            ("request_timeout_ms", request_timeout_ms),
                            ("fetch_min_bytes", fetch_min_bytes)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not 0 <= fetch_max_wait_ms <= limits.FETCH_WAIT_MS_MAX:
            raise ValueError(f"fetch_max_wait_ms must be 0..{limits.FETCH_WAIT_MS_MAX}")
        if max(fetch_max_bytes, max_partition_fetch_bytes) > limits.GRPC_MESSAGE_BYTES_MAX // 2:
            raise ValueError("fetch sizes must stay below half the gRPC message limit")
        self.client_id = client_id
        self._reset = _RESETS[auto_offset_reset]
        self._fetch_min_bytes = fetch_min_bytes
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._partition_max_bytes = max_partition_fetch_bytes
        self._fetch_max_bytes = fetch_max_bytes
        self._max_poll_records = max_poll_records
        self._request_timeout_ms = request_timeout_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._backoff = Backoff(retry_backoff_ms, max(retry_backoff_ms, retry_backoff_max_ms))
        self._io = io_thread()
        self._conns = Connections()
        self._metadata = MetadataManager(
            parse_bootstrap(bootstrap_servers), self._conns, loop=self._io.loop,
            request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms, metadata_max_age_ms=metadata_max_age_ms,
        )
        self._subs = SubscriptionState()
        self._cond = threading.Condition()
        # Results posted by the I/O loop. Bounded by construction: at most one fetch per leader
        # and one reset per partition are in flight, and each posts exactly one event.
        self._events: collections.deque[_FetchDone | _ResetDone] = collections.deque()
        self._fetch_in_flight: set[int] = set()
        self._pending_error: TidelogError | None = None
        self._rng = random.Random()
        self._next_start = 0
        self._closed = False
        self._metadata.add_listener(self._notify)

    # ------------------------------------------------------------------ assignment
    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions from now on (replacing any earlier assignment).
        Partitions kept from the earlier assignment keep their positions."""
        self._check_open()
        tps = [TopicPartition(*tp) for tp in partitions]
        for tp in tps:
            validate_topic_name(tp.topic)
            if not isinstance(tp.partition, int) or tp.partition < 0:
                raise ValueError(f"partition ids are non-negative ints, got {tp.partition!r}")
        self._subs.assign(list(dict.fromkeys(tps)))
        if self._metadata.add_topics(tp.topic for tp in tps):
            self._metadata.request_update()

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned to this consumer."""
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
            self._raise_pending()
            self._process_events()
            if st.has_valid_position:
                assert st.position is not None
                return st.position
            self._check_unknown_topics()
            self._maybe_reset_positions()
            now = monotonic_ms()
            if now >= deadline:
                raise RequestTimedOutError(f"the position of {tp} is not known yet")
            self._wait(min(deadline - now, self._retry_backoff_ms))

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first offset whose record timestamp is >= the given one (ms),
        or None when there is none. Partitions need not be assigned."""
        for ts in timestamps.values():
            if not isinstance(ts, int) or ts < 0:
                raise ValueError(f"timestamps must be non-negative ms, got {ts!r}")
        found = self._list_offsets(dict(timestamps), timeout_ms)
        return {tp: None if off < 0 else OffsetAndTimestamp(off, ts)
                for tp, (off, ts) in found.items()}

    def beginning_offsets(self, partitions: Iterable[TopicPartition],
                          timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""
        found = self._list_offsets(dict.fromkeys(partitions, EARLIEST), timeout_ms)
        return {tp: off for tp, (off, _) in found.items()}

    def end_offsets(self, partitions: Iterable[TopicPartition],
                    timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset the next committed record gets)."""
        found = self._list_offsets(dict.fromkeys(partitions, LATEST), timeout_ms)
        return {tp: off for tp, (off, _) in found.items()}

    def _list_offsets(self, timestamps: dict[TopicPartition, int],
                      timeout_ms: int | None) -> dict[TopicPartition, tuple[int, int]]:
        self._check_open()
        tps = {TopicPartition(*tp): ts for tp, ts in timestamps.items()}
        for tp in tps:
            validate_topic_name(tp.topic)
        wait = self._request_timeout_ms if timeout_ms is None else timeout_ms
        self._metadata.add_topics(tp.topic for tp in tps)
        return self._io.run(
            list_offsets(self._metadata, self._conns, tps, deadline_ms=monotonic_ms() + wait,
                         request_timeout_ms=self._request_timeout_ms, backoff=self._backoff),
            wait / 1000,
        )

    def partitions_for(self, topic: str, timeout_ms: int | None = None) -> list[int]:
        """The topic's partition ids (UnknownTopicOrPartitionError if it does not exist)."""
        self._check_open()
        validate_topic_name(topic)
        wait = self._request_timeout_ms if timeout_ms is None else timeout_ms
        info = self._io.run(self._metadata.wait_for_topic(
            topic, min_partitions=1, deadline_ms=monotonic_ms() + wait), wait / 1000)
        return [p.partition for p in info.partitions]

    # ------------------------------------------------------------------ polling
    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions (up to ``max_records``, default
        ``max_poll_records``), waiting up to ``timeout_ms`` for some; [] when none came.

        Raises CorruptRecordError, NoOffsetForPartitionError (auto_offset_reset="none"),
        UnknownTopicOrPartitionError (an assigned partition has not existed for
        ``request_timeout_ms``), or the typed error of a non-retriable fetch failure. Records
        already collected are returned first; the error is raised by the next poll().
        """
        self._check_open()
        if not self._subs.partitions:
            raise RuntimeError("no partitions are assigned; call assign() first")
        limit = self._max_poll_records if max_records is None else max_records
        if limit <= 0:
            raise ValueError("max_records must be positive")
        deadline = monotonic_ms() + max(timeout_ms, 0)
        # Bounded: each pass waits for an event or one backoff step, and stops at the deadline.
        while True:
            self._raise_pending()
            self._process_events()
            self._check_unknown_topics()
            self._maybe_reset_positions()
            records = self._collect(limit)
            self._send_fetches()
            if records:
                return records
            self._raise_pending()
            now = monotonic_ms()
            if now >= deadline:
                return []
            self._wait(min(deadline - now, self._retry_backoff_ms))

    def _collect(self, limit: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        items = list(self._subs.partitions.items())
        if not items:
            return out
        start = self._next_start % len(items)
        self._next_start += 1
        for _tp, st in items[start:] + items[:start]:
            if len(out) >= limit:
                break
            if st.paused or st.records is None or not st.has_valid_position:
                continue
            assert st.position is not None
            try:
                taken = st.records.take(st.position, limit - len(out))
            except CorruptRecordError as e:
                st.records = None
                if out:
                    self._pending_error = e
                    return out
                raise
            if taken:
                st.position = taken[-1].offset + 1
                out.extend(taken)
            if st.records.exhausted:
                st.records = None
        return out

    def _send_fetches(self) -> None:
        snap = self._metadata.snapshot
        now = monotonic_ms()
        by_node: dict[int, dict[TopicPartition, int]] = {}
        buffered: set[int] = set()  # leaders of partitions with records still to return
        behind: set[int] = set()  # leaders of fetchable partitions not known to be caught up
        missing_leader = False
        for tp, st in self._subs.partitions.items():
            if st.paused or not st.has_valid_position or st.retry_at_ms > now:
                continue
            if st.records is not None:
                leader = snap.leader_of(tp)
                if leader is not None:
                    buffered.add(leader)
                continue
            leader = snap.leader_of(tp)
            if leader is None:
                missing_leader = True
                continue
            if leader not in self._fetch_in_flight:
                assert st.position is not None
                by_node.setdefault(leader, {})[tp] = st.position
                if st.position < st.high_watermark or st.high_watermark < 0:
                    behind.add(leader)
        if missing_leader:
            self._metadata.request_update()
        for node, parts in by_node.items():
            if node in buffered and node not in behind:
                # Every partition to fetch here is at its high watermark: the broker would hold
                # the fetch for up to fetch_max_wait_ms, and with one fetch per leader the
                # partitions of this leader still being returned could not be fetched meanwhile.
                # They are all fetched together once those run out.
                continue
            address = snap.address_of(node)
            assert address is not None  # leader_of only names brokers with an address
            request = self._fetch_request(parts)
            self._fetch_in_flight.add(node)
            self._io.submit(self._fetch(node, address, request, parts))

    def _fetch_request(self, parts: dict[TopicPartition, int]) -> broker_pb2.FetchRequest:
        request = broker_pb2.FetchRequest(
            replica_id=-1, max_wait_ms=self._fetch_max_wait_ms, min_bytes=self._fetch_min_bytes,
            max_bytes=self._fetch_max_bytes, isolation_level=common_pb2.READ_UNCOMMITTED,
        )
        topics: dict[str, broker_pb2.FetchRequest.TopicData] = {}
        for tp, offset in parts.items():
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = request.topics.add(name=tp.topic)
            topic.partitions.add(
                partition_id=tp.partition, fetch_offset=offset,
                current_leader_epoch=self._metadata.snapshot.leader_epoch(tp),
                last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=self._partition_max_bytes,
            )
        return request

    async def _fetch(self, node: int, address: str, request: broker_pb2.FetchRequest,
                     parts: dict[TopicPartition, int]) -> None:
        event: _FetchDone
        try:
            resp = await self._conns.exchange(
                address, "Fetch", request,
                timeout_ms=self._fetch_max_wait_ms + self._request_timeout_ms,
            )
            event = _FetchDone(node, parts, resp, None)
        except TidelogError as e:
            event = _FetchDone(node, parts, None, e)
        except BaseException as e:
            # Whatever happens, the node must leave _fetch_in_flight or it is never fetched again.
            self._post(_FetchDone(node, parts, None, RequestTimedOutError(f"fetch failed: {e!r}")))
            raise
        self._post(event)

    # ------------------------------------------------------------------ events from the loop
    def _post(self, event: _FetchDone | _ResetDone) -> None:
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
            if isinstance(event, _FetchDone):
                self._handle_fetch(event)
            else:
                self._handle_reset(event)

    def _handle_fetch(self, event: _FetchDone) -> None:
        self._fetch_in_flight.discard(event.node)
        if self._closed:
            return
        now = monotonic_ms()
        error = event.error
        if error is None and event.response is not None and event.response.error_code:
            error = error_for_code(event.response.error_code, event.response.error_message)
        if error is not None:
            if not error.retriable:
                self._pending_error = self._pending_error or error
            self._metadata.request_update()
            for tp in event.requested:
                self._subs.backoff(tp, now, self._backoff)
            return
        assert event.response is not None
        for t in event.response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_id)
                offset = event.requested.get(tp)
                st = self._subs.partitions.get(tp)
                if offset is None or st is None or st.position != offset or st.reset_to is not None:
                    continue  # the partition was reassigned or sought meanwhile: stale data
                self._handle_fetched_partition(tp, offset, p, now)

    def _handle_fetched_partition(self, tp: TopicPartition, offset: int,
                                  p: broker_pb2.FetchResponse.PartitionData, now: int) -> None:
        st = self._subs.state(tp)
        code = p.error_code
        if code == ErrorCode.NONE:
            self._subs.succeeded(tp)
            st.high_watermark = p.high_watermark
            st.log_start_offset = p.log_start_offset
            if p.batches:
                st.records = PartitionRecords(tp, offset, list(p.batches))
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self._reset is None:
                self._pending_error = self._pending_error or NoOffsetForPartitionError(
                    f"offset {offset} of {tp} is out of range [{p.log_start_offset}, "
                    f"{p.high_watermark}] and auto_offset_reset is 'none'",
                    partitions={tp: offset})
            else:
                st.request_reset(self._reset)
        else:
            if p.HasField("current_leader"):
                self._metadata.apply_leader_hint(tp, p.current_leader)
            error = error_for_code(code, f"{tp}: {p.error_message}")
            if code in STALE_METADATA_CODES:
                self._metadata.request_update()
            if error.retriable:
                self._subs.backoff(tp, now, self._backoff)
            else:
                self._pending_error = self._pending_error or error

    def _maybe_reset_positions(self) -> None:
        now = monotonic_ms()
        wanted: dict[TopicPartition, int] = {}
        missing: dict[TopicPartition, int] = {}
        for tp, st in self._subs.partitions.items():
            if st.reset_in_flight or st.retry_at_ms > now:
                continue
            if st.position is None and st.reset_to is None:
                if self._reset is None:
                    missing[tp] = -1
                    continue
                st.reset_to = self._reset
            if st.reset_to is not None:
                wanted[tp] = st.reset_to
        if missing:
            self._pending_error = self._pending_error or NoOffsetForPartitionError(
                f"no position for {sorted(map(str, missing))} and auto_offset_reset is 'none': "
                "seek() first", partitions=missing)
        if not wanted:
            return
        for tp in wanted:
            self._subs.state(tp).reset_in_flight = True
        self._io.submit(self._reset_offsets(wanted))

    async def _reset_offsets(self, wanted: dict[TopicPartition, int]) -> None:
        try:
            found = await list_offsets(
                self._metadata, self._conns, wanted,
                deadline_ms=monotonic_ms() + self._request_timeout_ms,
                request_timeout_ms=self._request_timeout_ms, backoff=self._backoff,
            )
            self._post(_ResetDone(wanted, found, None))
        except TidelogError as e:
            self._post(_ResetDone(wanted, None, e))
        except BaseException as e:
            self._post(_ResetDone(wanted, None, RequestTimedOutError(f"reset failed: {e!r}")))
            raise

    def _handle_reset(self, event: _ResetDone) -> None:
        now = monotonic_ms()
        for tp, ts in event.requested.items():
            st = self._subs.partitions.get(tp)
            if st is None:
                continue
            st.reset_in_flight = False
            if st.reset_to != ts:
                continue  # the user sought meanwhile
            if event.results is not None and tp in event.results:
                st.seek(event.results[tp][0])
                self._subs.succeeded(tp)
            else:
                self._subs.backoff(tp, now, self._backoff)
        if event.error is not None and not event.error.retriable and not isinstance(
            event.error, UnknownTopicOrPartitionError
        ):
            self._pending_error = self._pending_error or event.error

    def _check_unknown_topics(self) -> None:
        """Report a partition the cluster has said does not exist for request_timeout_ms (raised
        by the next poll; a topic created a moment ago may not have reached every broker yet,
        hence the grace)."""
        snap = self._metadata.snapshot
        now = monotonic_ms()
        for tp, st in self._subs.partitions.items():
            info = snap.topics.get(tp.topic)
            unknown = info is not None and (not info.exists or tp.partition >= len(info.partitions))
            if not unknown:
                st.unknown_since_ms = None
                continue
            if st.unknown_since_ms is None:
                st.unknown_since_ms = now
                self._metadata.request_update()
            elif now - st.unknown_since_ms >= self._request_timeout_ms:
                st.unknown_since_ms = None
                self._pending_error = self._pending_error or UnknownTopicOrPartitionError(
                    f"{tp} does not exist (the cluster has said so for "
                    f"{self._request_timeout_ms} ms)")

    def _raise_pending(self) -> None:
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            raise error

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop fetching and release the connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._io.in_io_thread():
            raise RuntimeError("close() on the client I/O thread would deadlock")
        self._io.run(self._close(), None)

    async def _close(self) -> None:
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
