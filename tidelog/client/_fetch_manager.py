"""The consumer's fetching (Kafka's FetchRequestManager and OffsetsRequestManager): fetches per
leader, positions reset by ListOffsets, unknown partitions, and collecting fetched records.

``poll()`` (on the application thread) calls, in order: :meth:`FetchManager.handle_event` for
each result the I/O loop posted, :meth:`check_unknown_topics`, :meth:`maybe_reset_positions`,
:meth:`collect` and :meth:`send_fetches`. The I/O loop only runs the requests and posts each
result (``FetchDone``, ``ResetDone``) back through ``post``; all state is in the
:class:`~tidelog.client._fetcher.SubscriptionState`, touched by the application thread only.

One fetch is in flight per leader, covering every fetchable partition it leads whose fetched
records are used up (the prefetch, bounded to one response per leader). Each leader's fetches
run in a fetch session (tidelog.client._fetch_session, KIP-227): after a full first request, a
request lists only the partitions whose (offset, leader epoch) changed and forgets the ones not
fetched now, and an answer carries only the partitions with something new; any failure or
request-level error resets it to a full request. Errors meaning stale
metadata apply the leader hint and refresh; retriable ones back the partition off; others are
kept in ``pending_error`` for poll() to raise. A partition waiting for its committed offset
(a group member's new partition) is neither reset nor fetched until it has a position.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tidelog.client._fetch_session import FetchSessionHandler
from tidelog.client._fetcher import (
    CorruptRecordError,
    NoOffsetForPartitionError,
    PartitionRecords,
    SubscriptionState,
    list_offsets,
)
from tidelog.client._io import Connections, IOThread, monotonic_ms
from tidelog.client._metadata import (
    STALE_METADATA_CODES,
    Backoff,
    ClusterSnapshot,
    MetadataManager,
)
from tidelog.client.records import ConsumerRecord, TopicPartition
from tidelog.errors import (
    ErrorCode,
    InvalidFetchSessionEpochError,
    RequestTimedOutError,
    TidelogError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from tidelog.v1 import broker_pb2, common_pb2

__all__ = ["FetchDone", "FetchManager", "ResetDone"]


@dataclass(frozen=True, slots=True)
class FetchDone:
    node: int
    requested: dict[TopicPartition, int]
    response: broker_pb2.FetchResponse | None
    error: TidelogError | None


@dataclass(frozen=True, slots=True)
class ResetDone:
    requested: dict[TopicPartition, int]
    results: dict[TopicPartition, tuple[int, int]] | None
    error: TidelogError | None


@dataclass(frozen=True, slots=True)
class FetchConfig:
    fetch_min_bytes: int
    fetch_max_wait_ms: int
    max_partition_fetch_bytes: int
    fetch_max_bytes: int
    request_timeout_ms: int


class FetchManager:
    """Fetching for one consumer (see the module doc)."""

    def __init__(self, *, subs: SubscriptionState, metadata: MetadataManager,
                 conns: Connections, io: IOThread, config: FetchConfig, reset: int | None,
                 backoff: Backoff, post: Callable[[FetchDone | ResetDone], None]) -> None:
        self._subs = subs
        self._metadata = metadata
        self._conns = conns
        self._io = io
        self._fetch_min_bytes = config.fetch_min_bytes
        self._fetch_max_wait_ms = config.fetch_max_wait_ms
        self._partition_max_bytes = config.max_partition_fetch_bytes
        self._fetch_max_bytes = config.fetch_max_bytes
        self._request_timeout_ms = config.request_timeout_ms
        self._reset = reset
        self._backoff = backoff
        self._post = post
        self._fetch_in_flight: set[int] = set()
        #: The fetch session with each broker (tidelog.client._fetch_session): after a full
        #: request, a fetch lists only the partitions whose (offset, leader epoch) changed.
        self._sessions: dict[int, FetchSessionHandler[TopicPartition, tuple[int, int]]] = {}
        #: Partitions given fetched records (in the order they came), as a set: what collect()
        #: looks at, rather than every assigned partition. A partition whose records are gone
        #: (returned, sought, reset, unassigned) leaves it when collect() next meets it.
        self._buffered: dict[TopicPartition, None] = {}
        self._next_start = 0
        #: check_unknown_topics' last look: the snapshot and assignment it saw, and the
        #: partitions it found unknown then (only those need a look until either changes).
        self._unknown_seen: tuple[ClusterSnapshot | None, int] = (None, -1)
        self._unknown: set[TopicPartition] = set()
        #: A non-retriable error to raise from the next poll().
        self.pending_error: TidelogError | None = None
        self.closed = False

    def handle_event(self, event: FetchDone | ResetDone) -> None:
        if isinstance(event, FetchDone):
            self._handle_fetch(event)
        else:
            self._handle_reset(event)

    def collect(self, limit: int) -> list[ConsumerRecord]:
        """Up to ``limit`` records from the partitions with fetched records, starting one
        partition further each call (none starves). Costs what it returns, not the size of the
        assignment: only partitions in ``_buffered`` are looked at."""
        out: list[ConsumerRecord] = []
        buffered = self._buffered
        if not buffered:
            return out
        tps = list(buffered)
        start = self._next_start % len(tps)
        self._next_start += 1
        partitions = self._subs.partitions
        for tp in tps[start:] + tps[:start]:
            if len(out) >= limit:
                break
            st = partitions.get(tp)
            if st is None or st.records is None:
                del buffered[tp]
                continue
            if st.paused or not st.has_valid_position:
                continue
            assert st.position is not None
            try:
                taken = st.records.take(st.position, limit - len(out))
            except CorruptRecordError as e:
                st.records = None
                del buffered[tp]
                if out:
                    self.pending_error = e
                    return out
                raise
            if taken:
                st.position = taken[-1].offset + 1
                epoch = taken[-1].leader_epoch  # the batch's partition_leader_epoch
                st.position_leader_epoch = epoch if epoch >= 0 else None
                out.extend(taken)
            if st.records.exhausted:
                st.records = None
                del buffered[tp]
        return out

    def send_fetches(self) -> None:
        """One fetch to each leader without one in flight, covering every fetchable partition
        it leads that has no fetched records left to return. One pass over the assignment, and
        a cheap one per partition: no leader look-up for a partition that is not fetchable."""
        snap = self._metadata.snapshot
        in_flight = self._fetch_in_flight
        if snap.brokers and in_flight.issuperset(snap.brokers):
            return  # one fetch per leader: every broker has one out, nothing could be sent
        now = monotonic_ms()
        leader_of = snap.leader_of
        by_node: dict[int, dict[TopicPartition, int]] = {}
        behind: set[int] = set()  # leaders of fetchable partitions not known to be caught up
        missing_leader = False
        for tp, st in self._subs.partitions.items():
            position = st.position
            if (st.records is not None or position is None or st.reset_to is not None
                    or st.paused or st.retry_at_ms > now):
                continue
            leader = leader_of(tp)
            if leader is None:
                missing_leader = True
                continue
            if leader not in in_flight:
                parts = by_node.get(leader)
                if parts is None:
                    parts = by_node[leader] = {}
                parts[tp] = position
                if position < st.high_watermark or st.high_watermark < 0:
                    behind.add(leader)
        if missing_leader:
            self._metadata.request_update()
        if not by_node:
            return
        # Leaders with records still to return: looked up only among the partitions that have
        # some (``_buffered``), and only when a leader to fetch from is caught up.
        buffered = self._buffered_leaders(snap, now, set(by_node) - behind)
        for node, parts in by_node.items():
            if node in buffered:
                # Every partition to fetch here is at its high watermark: the broker would hold
                # the fetch for up to fetch_max_wait_ms, and with one fetch per leader the
                # partitions of this leader still being returned could not be fetched meanwhile.
                # They are all fetched together once those run out.
                continue
            address = snap.address_of(node)
            assert address is not None  # leader_of only names brokers with an address
            request = self._fetch_request(node, parts)
            in_flight.add(node)
            self._io.submit(self._fetch(node, address, request, parts))

    def _buffered_leaders(self, snap: ClusterSnapshot, now: int, nodes: set[int]) -> set[int]:
        """Which of ``nodes`` lead a fetchable partition with fetched records not returned yet."""
        found: set[int] = set()
        if not nodes:
            return found
        partitions = self._subs.partitions
        for tp in self._buffered:
            st = partitions.get(tp)
            if (st is None or st.records is None or st.paused or not st.has_valid_position
                    or st.retry_at_ms > now):
                continue
            leader = snap.leader_of(tp)
            if leader in nodes:
                found.add(leader)
                if len(found) == len(nodes):
                    break
        return found

    def _fetch_request(self, node: int,
                       parts: dict[TopicPartition, int]) -> broker_pb2.FetchRequest:
        """The request to ``node`` for ``parts`` within its fetch session: every partition in a
        full request, else the ones whose (offset, leader epoch) changed and the ones to forget."""
        leader_epoch = self._metadata.snapshot.leader_epoch
        wanted = {tp: (offset, leader_epoch(tp)) for tp, offset in parts.items()}
        session = self._sessions.get(node)
        if session is None:
            session = self._sessions[node] = FetchSessionHandler()
        planned = session.build(wanted)
        request = broker_pb2.FetchRequest(
            replica_id=-1, max_wait_ms=self._fetch_max_wait_ms, min_bytes=self._fetch_min_bytes,
            max_bytes=self._fetch_max_bytes, isolation_level=common_pb2.READ_UNCOMMITTED,
            open_session=True, session_epoch=planned.session_epoch,
        )
        topics: dict[str, broker_pb2.FetchRequest.TopicData] = {}
        for tp, (offset, epoch) in planned.listed.items():
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = request.topics.add(name=tp.topic)
            topic.partitions.add(
                partition_id=tp.partition, fetch_offset=offset, current_leader_epoch=epoch,
                last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=self._partition_max_bytes,
            )
        forgotten: dict[str, broker_pb2.FetchRequest.ForgottenTopic] = {}
        for tp in planned.forgotten:
            entry = forgotten.get(tp.topic)
            if entry is None:
                entry = forgotten[tp.topic] = request.forgotten.add(name=tp.topic)
            entry.partitions.append(tp.partition)
        return request

    async def _fetch(self, node: int, address: str, request: broker_pb2.FetchRequest,
                     parts: dict[TopicPartition, int]) -> None:
        event: FetchDone
        try:
            resp = await self._conns.exchange(
                address, "Fetch", request,
                timeout_ms=self._fetch_max_wait_ms + self._request_timeout_ms,
            )
            event = FetchDone(node, parts, resp, None)
        except TidelogError as e:
            event = FetchDone(node, parts, None, e)
        except BaseException as e:
            # Whatever happens, the node must leave _fetch_in_flight or it is never fetched again.
            self._post(FetchDone(node, parts, None, RequestTimedOutError(f"fetch failed: {e!r}")))
            raise
        self._post(event)


    def _handle_fetch(self, event: FetchDone) -> None:
        self._fetch_in_flight.discard(event.node)
        if self.closed:
            return
        now = monotonic_ms()
        error = event.error
        if error is None and event.response is not None and event.response.error_code:
            error = error_for_code(event.response.error_code, event.response.error_message)
        session = self._sessions.get(event.node)
        if error is not None and session is not None:
            session.reset()  # the broker forgot it, or may have: the next request is full
        if isinstance(error, InvalidFetchSessionEpochError):
            return  # (a changed ACL, a stream opened again): a full request at once, no delay
        if error is not None:
            if not error.retriable:
                self.pending_error = self.pending_error or error
            self._metadata.request_update()
            # One delay for the whole request, so its partitions are fetched together again
            # (a jittered delay each would let the first due go alone and, once caught up, be
            # long-polled while the others wait behind it).
            self._subs.backoff_together(list(event.requested), now, self._backoff)
            return
        assert event.response is not None
        if session is not None:
            session.on_answer(event.response.next_session_epoch)
        for t in event.response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_id)
                offset = event.requested.get(tp)
                st = self._subs.partitions.get(tp)
                if p.error_code and session is not None:
                    session.relist(tp)
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
                self._buffered[tp] = None
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self._reset is None:
                self.pending_error = self.pending_error or NoOffsetForPartitionError(
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
                self.pending_error = self.pending_error or error

    def maybe_reset_positions(self) -> None:
        now = monotonic_ms()
        wanted: dict[TopicPartition, int] = {}
        missing: dict[TopicPartition, int] = {}
        for tp, st in self._subs.partitions.items():
            if st.position is not None and st.reset_to is None:
                continue  # the common case, first: a position and no reset pending
            if st.reset_in_flight or st.retry_at_ms > now or st.awaiting_committed:
                continue
            if st.position is None and st.reset_to is None:
                if self._reset is None:
                    missing[tp] = -1
                    continue
                st.reset_to = self._reset
            if st.reset_to is not None:
                wanted[tp] = st.reset_to
        if missing:
            self.pending_error = self.pending_error or NoOffsetForPartitionError(
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
            self._post(ResetDone(wanted, found, None))
        except TidelogError as e:
            self._post(ResetDone(wanted, None, e))
        except BaseException as e:
            self._post(ResetDone(wanted, None, RequestTimedOutError(f"reset failed: {e!r}")))
            raise

    def _handle_reset(self, event: ResetDone) -> None:
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
            self.pending_error = self.pending_error or event.error

    def check_unknown_topics(self) -> None:
        """Report a partition the cluster has said does not exist for request_timeout_ms (raised
        by the next poll; a topic created a moment ago may not have reached every broker yet,
        hence the grace)."""
        snap = self._metadata.snapshot
        now = monotonic_ms()
        seen_snap, seen_version = self._unknown_seen
        if snap is seen_snap and self._subs.version == seen_version:
            # Neither the metadata nor the assignment changed since the last look: only the
            # partitions unknown then can be unknown now (poll() costs O(assignment) otherwise).
            if not self._unknown:
                return
            candidates = [(tp, st) for tp in list(self._unknown)
                          if (st := self._subs.partitions.get(tp)) is not None]
        else:
            candidates = list(self._subs.partitions.items())
            self._unknown_seen = (snap, self._subs.version)
        self._unknown = set()
        for tp, st in candidates:
            info = snap.topics.get(tp.topic)
            unknown = info is not None and (not info.exists or tp.partition >= len(info.partitions))
            if not unknown:
                st.unknown_since_ms = None
                continue
            self._unknown.add(tp)
            if st.unknown_since_ms is None:
                st.unknown_since_ms = now
                self._metadata.request_update()
            elif now - st.unknown_since_ms >= self._request_timeout_ms:
                st.unknown_since_ms = None
                self.pending_error = self.pending_error or UnknownTopicOrPartitionError(
                    f"{tp} does not exist (the cluster has said so for "
                    f"{self._request_timeout_ms} ms)")

