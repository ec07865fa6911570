"""Consumer internals: per-partition fetch state, lazy decoding of fetched batches, ListOffsets.

``SubscriptionState`` holds, for each assigned partition, the position (the next offset to
return) and the leader epoch of the record before it (what a commit of the position carries),
whether it waits for the group's committed offset, a pending offset reset, pause
state, the last high watermark and log start offset, a backoff deadline after errors, and the
fetched batches not yet returned (``PartitionRecords``).
It is only touched by the thread that uses the Consumer (a Consumer, like Kafka's, is not
thread-safe); the I/O loop only runs requests and posts their results back.

``list_offsets`` resolves offsets for timestamps (or earliest/latest) at each partition's
leader, refreshing metadata and retrying on retriable errors until a deadline; the consumer and
the admin client share it.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from tidelog.client._io import Connections, monotonic_ms
from tidelog.client._metadata import STALE_METADATA_CODES, Backoff, MetadataManager
from tidelog.client.records import EARLIEST, LATEST, ConsumerRecord, TopicPartition
from tidelog.errors import (
    CorruptMessageError,
    ErrorCode,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    TidelogError,
    error_for_code,
)
from tidelog.record_batch import (
    RecordBatch,
    RecordSlots,
    decode_batch,
    last_offset,
    parse_batch,
)
from tidelog.v1 import broker_pb2

__all__ = [
    "EARLIEST",
    "LATEST",
    "CorruptRecordError",
    "NoOffsetForPartitionError",
    "PartitionRecords",
    "PartitionState",
    "SubscriptionState",
    "list_offsets",
]

_rng = random.Random()



class CorruptRecordError(CorruptMessageError):
    """A fetched batch failed its CRC or could not be decoded (CORRUPT_MESSAGE).

    ``topic_partition`` and ``offset`` say where: the consumer's position stays at ``offset``, so
    the next poll() raises again; ``seek()`` past the batch to skip it deliberately.
    """

    def __init__(self, message: str, *, topic_partition: TopicPartition, offset: int) -> None:
        super().__init__(message)
        self.topic_partition = topic_partition
        self.offset = offset


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """OFFSET_OUT_OF_RANGE with ``auto_offset_reset="none"``: the consumer will not guess.

    ``partitions`` maps each partition to the offset the leader refused (-1 when there was no
    position at all). ``seek()`` (or ``seek_to_beginning``/``seek_to_end``) to go on.
    """

    def __init__(self, message: str, *, partitions: Mapping[TopicPartition, int]) -> None:
        super().__init__(message)
        self.partitions = dict(partitions)


class PartitionRecords:
    """Batches fetched for one partition and not yet returned, decoded one batch at a time (so a
    large fetch is not decoded all at once and a corrupt batch is reported where it is)."""

    def __init__(self, tp: TopicPartition, fetch_offset: int, batches: list[bytes]) -> None:
        self.tp = tp
        self.fetch_offset = fetch_offset
        self._batches: deque[bytes] = deque(batches)
        # The decoded batch being returned and the index of its next record. Its records have
        # consecutive offsets (decoding checks each offset delta), so taking is slicing.
        self._records: list[ConsumerRecord] = []
        self._next = 0

    @property
    def exhausted(self) -> bool:
        return self._next >= len(self._records) and not self._batches

    def take(self, position: int, max_records: int) -> list[ConsumerRecord]:
        """Up to ``max_records`` records at or after ``position``, in offset order."""
        out: list[ConsumerRecord] = []
        # Bounded: every pass takes records, moves past a decoded batch, or decodes a batch.
        while len(out) < max_records:
            records = self._records
            start = self._next
            if start >= len(records):
                if not self._batches:
                    break
                self._decode_next(position)
                continue
            behind = position - records[start].offset
            if behind > 0:
                start += behind
            stop = min(len(records), start + max_records - len(out))
            self._next = max(start, stop)
            if start < stop:
                out += records[start:stop]
                position = records[stop - 1].offset + 1
        return out

    def _decode_next(self, position: int) -> None:
        data = self._batches.popleft()
        self._records = []
        self._next = 0
        try:
            batch = parse_batch(data)
            if last_offset(batch) < position:
                return  # the batch that holds the fetch offset is returned whole
            self._records = _decode(batch, self.tp)
        except TidelogError as e:
            self._batches.clear()
            raise CorruptRecordError(
                f"a fetched batch of {self.tp} at or after offset {position} is corrupt ({e}); "
                "the position stays there: seek past it to skip it",
                topic_partition=self.tp, offset=position,
            ) from None


def _decode(batch: RecordBatch, tp: TopicPartition) -> list[ConsumerRecord]:
    """The batch's records (CRC, counts and offset deltas checked), as ConsumerRecords of
    ``tp``. Each is built as a ``RecordSlots`` (plain attribute stores) and made a ConsumerRecord
    by assigning ``__class__``: the same object ConsumerRecord's constructor makes, at about half
    the cost (the frozen dataclass sets each field through ``object.__setattr__``)."""
    records: list[ConsumerRecord] = decode_batch(batch, RecordSlots, ConsumerRecord,
                                                 topic=tp.topic, partition=tp.partition)
    return records


@dataclass
class PartitionState:
    position: int | None = None
    #: The leader epoch of the record before ``position`` (the last one consumed), or of the
    #: committed offset the position came from; None after a seek or reset. Commits of the
    #: position carry it, as Kafka's do (KIP-320).
    position_leader_epoch: int | None = None
    reset_to: int | None = None  # EARLIEST or LATEST, pending
    paused: bool = False
    high_watermark: int = -1
    log_start_offset: int = -1
    retry_at_ms: int = 0
    failures: int = 0
    records: PartitionRecords | None = None
    reset_in_flight: bool = False
    unknown_since_ms: int | None = None
    #: A group member's new partition: its position comes from the group's committed offset
    #: (OffsetFetch) before auto_offset_reset is considered; a seek settles it too.
    awaiting_committed: bool = False
    committed_in_flight: bool = False

    def seek(self, offset: int, leader_epoch: int | None = None) -> None:
        self.position = offset
        self.position_leader_epoch = leader_epoch
        self.reset_to = None
        self.records = None
        self.awaiting_committed = False

    def request_reset(self, timestamp: int) -> None:
        self.reset_to = timestamp
        self.records = None
        self.awaiting_committed = False

    @property
    def has_valid_position(self) -> bool:
        return self.position is not None and self.reset_to is None


class SubscriptionState:
    """The assigned partitions and their fetch state, in assignment order."""

    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, PartitionState] = {}
        #: Changes whenever partitions are assigned, added or removed (what per-poll checks
        #: remember their last answer against).
        self.version = 0

    def assign(self, tps: list[TopicPartition], *, committed_first: bool = False) -> None:
        """Replace the assignment; partitions kept keep their state. New ones start from the
        group's committed offset when ``committed_first`` (a consumer with a group id)."""
        self.partitions = {tp: self.partitions.get(tp)
                           or PartitionState(awaiting_committed=committed_first) for tp in tps}
        self.version += 1

    def add(self, tps: list[TopicPartition]) -> None:
        """A group gave these partitions: they start from the group's committed offsets."""
        for tp in tps:
            if tp not in self.partitions:
                self.partitions[tp] = PartitionState(awaiting_committed=True)
        self.version += 1

    def remove(self, tps: list[TopicPartition]) -> None:
        """Revoked or lost: their state goes, and with it any fetched records not returned
        (they must never be returned after the revocation)."""
        for tp in tps:
            self.partitions.pop(tp, None)
        self.version += 1

    def awaiting_committed(self) -> list[TopicPartition]:
        """Partitions whose committed offset is wanted and not being fetched."""
        return [tp for tp, st in self.partitions.items()
                if st.awaiting_committed and not st.committed_in_flight]

    def state(self, tp: TopicPartition) -> PartitionState:
        st = self.partitions.get(tp)
        if st is None:
            raise ValueError(f"{tp} is not assigned to this consumer")
        return st

    def backoff(self, tp: TopicPartition, now_ms: int, backoff: Backoff) -> None:
        """Wait before fetching ``tp`` again: exponentially longer after each failure."""
        st = self.partitions.get(tp)
        if st is None:
            return
        st.failures += 1
        st.retry_at_ms = now_ms + backoff.delay_ms(st.failures, _rng)

    def backoff_together(self, tps: list[TopicPartition], now_ms: int,
                         backoff: Backoff) -> None:
        """Back these off by one delay (a request that failed as a whole): they become
        fetchable at the same moment, and so go in one fetch again."""
        states = [st for tp in tps if (st := self.partitions.get(tp)) is not None]
        if not states:
            return
        failures = max(st.failures for st in states) + 1
        retry_at_ms = now_ms + backoff.delay_ms(failures, _rng)
        for st in states:
            st.failures = failures
            st.retry_at_ms = retry_at_ms

    def succeeded(self, tp: TopicPartition) -> None:
        st = self.partitions.get(tp)
        if st is not None:
            st.failures = 0
            st.retry_at_ms = 0


async def list_offsets(
    metadata: MetadataManager,
    conns: Connections,
    timestamps: Mapping[TopicPartition, int],
    *,
    deadline_ms: int,
    request_timeout_ms: int,
    backoff: Backoff,
) -> dict[TopicPartition, tuple[int, int]]:
    """(offset, timestamp) per partition for ``timestamps`` (EARLIEST, LATEST or ms), asking each
    partition's leader; retriable errors refresh metadata and retry until ``deadline_ms``.
    Offset -1 means no record has a timestamp at or after the one asked."""
    remaining = dict(timestamps)
    results: dict[TopicPartition, tuple[int, int]] = {}
    attempts = 0
    last: TidelogError | None = None
    # Bounded: every round ends in results, an error, or a backoff sleep toward the deadline.
    while remaining:
        by_node: dict[int, dict[TopicPartition, int]] = {}
        for tp in remaining:
            if metadata.snapshot.leader_of(tp) is None:
                await metadata.wait_for_topic(tp.topic, min_partitions=tp.partition + 1,
                                              deadline_ms=deadline_ms)
            leader = metadata.snapshot.leader_of(tp)
            if leader is not None:
                by_node.setdefault(leader, {})[tp] = remaining[tp]
        calls = [
            _list_offsets_at(metadata, conns, node, parts, deadline_ms, request_timeout_ms)
            for node, parts in by_node.items()
        ]
        for outcome in await asyncio.gather(*calls):
            for tp, value in outcome.items():
                if isinstance(value, TidelogError):
                    if not value.retriable:
                        raise value
                    last = value
                else:
                    results[tp] = value
                    remaining.pop(tp, None)
        if not remaining:
            break
        attempts += 1
        now = monotonic_ms()
        delay = backoff.delay_ms(attempts, _rng)
        if now + delay >= deadline_ms:
            raise last or RequestTimedOutError(
                f"offsets of {sorted(map(str, remaining))} not found before the deadline"
            )
        metadata.request_update()
        await asyncio.sleep(delay / 1000)
    return results


async def _list_offsets_at(
    metadata: MetadataManager, conns: Connections, node: int,
    parts: dict[TopicPartition, int], deadline_ms: int, request_timeout_ms: int,
) -> dict[TopicPartition, tuple[int, int] | TidelogError]:
    address = metadata.snapshot.address_of(node)
    request = broker_pb2.ListOffsetsRequest()
    topics: dict[str, broker_pb2.ListOffsetsRequest.TopicData] = {}
    for tp, ts in parts.items():
        topic = topics.get(tp.topic)
        if topic is None:
            topic = topics[tp.topic] = request.topics.add(name=tp.topic)
        topic.partitions.add(partition_id=tp.partition, timestamp=ts,
                             current_leader_epoch=metadata.snapshot.leader_epoch(tp))
    out: dict[TopicPartition, tuple[int, int] | TidelogError] = {}
    try:
        if address is None:
            raise RequestTimedOutError(f"broker {node} is not in the metadata")
        timeout = max(1, min(request_timeout_ms, deadline_ms - monotonic_ms()))
        resp = await conns.call(address, "ListOffsets", request, timeout_ms=timeout)
    except TidelogError as e:
        metadata.request_update()
        return dict.fromkeys(parts, e)
    for t in resp.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_id)
            if tp not in parts:
                continue
            if p.error_code == ErrorCode.NONE:
                out[tp] = (p.offset, p.timestamp)
                continue
            if p.HasField("current_leader"):
                metadata.apply_leader_hint(tp, p.current_leader)
            if p.error_code in STALE_METADATA_CODES:
                metadata.request_update()
            out[tp] = error_for_code(p.error_code, f"{tp}: {p.error_message}")
    for tp in parts:
        out.setdefault(tp, RequestTimedOutError(f"the ListOffsets answer left out {tp}"))
    return out

