"""Segments of a partition log: how the log is cut into ranges that retention removes whole.

A segment here is not a file (the batches live in RocksDB) but an index entry: a run of
consecutive batches with its byte size, largest timestamp and the time of its first append. The
entry of the active (last) segment is rewritten in the same write batch as every append, so
retention by time and by size decides from this index alone, without reading the log, and removes
whole leading segments with one ``delete_range`` -- as Kafka deletes whole segment files.
Pure logic: no I/O, no clock (``now_ms`` and append times come from the caller).
"""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.broker.storage.keys import SEGMENT

__all__ = ["RetentionDecision", "Segment", "plan_retention", "should_roll"]


@dataclass(slots=True)
class Segment:
    """Batches with base_offset <= offset < next_offset, as the index knows them."""

    base_offset: int
    next_offset: int
    size_bytes: int
    max_timestamp_ms: int
    #: Log append time of the segment's first batch, which starts the segment.ms clock.
    first_append_time_ms: int

    def encode(self) -> bytes:
        return SEGMENT.pack(
            self.next_offset, self.size_bytes, self.max_timestamp_ms, self.first_append_time_ms
        )

    @classmethod
    def decode(cls, base_offset: int, data: bytes) -> Segment:
        next_offset, size_bytes, max_timestamp_ms, first_append_ms = SEGMENT.unpack(data)
        return cls(base_offset, next_offset, size_bytes, max_timestamp_ms, first_append_ms)


def should_roll(
    active: Segment | None,
    *,
    batch_bytes: int,
    append_time_ms: int,
    segment_bytes: int,
    segment_ms: int,
) -> bool:
    """Whether the next batch starts a new segment (Kafka's LogSegment.shouldRoll, minus the
    index-file conditions that RocksDB does not have)."""
    if active is None:
        return True
    if active.size_bytes > 0 and active.size_bytes + batch_bytes > segment_bytes:
        return True
    return active.size_bytes > 0 and append_time_ms - active.first_append_time_ms >= segment_ms


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    """How many leading segments retention removes, and why (for logs and metrics)."""

    segment_count: int
    removed_bytes: int
    new_log_start_offset: int
    reason: str


def plan_retention(
    segments: list[Segment],
    *,
    now_ms: int,
    log_start_offset: int,
    high_watermark: int,
    retention_ms: int,
    retention_bytes: int,
) -> RetentionDecision | None:
    """Leading segments that may go, Kafka's deletableSegments: walk from the oldest while the
    segment lies wholly below the HW (never delete what consumers cannot have read) and one of
    the breaches holds -- below the log start offset, older than ``retention_ms`` by its largest
    timestamp, or not needed to keep ``retention_bytes``. A negative limit means unlimited.

    The active segment may go too when it breaches (an idle, expired partition empties, as in
    Kafka); the log end offset stays where it was and the next append starts a new segment.
    """
    remaining_bytes = sum(s.size_bytes for s in segments)
    count = 0
    removed = 0
    reasons: set[str] = set()
    for segment in segments:
        if segment.next_offset > high_watermark:
            break
        reason = _breach(segment, remaining_bytes, now_ms, log_start_offset, retention_ms,
                         retention_bytes)
        if reason is None:
            break
        reasons.add(reason)
        count += 1
        removed += segment.size_bytes
        remaining_bytes -= segment.size_bytes
    if count == 0:
        return None
    new_start = max(log_start_offset, segments[count - 1].next_offset)
    return RetentionDecision(count, removed, new_start, "+".join(sorted(reasons)))


def _breach(
    segment: Segment,
    remaining_bytes: int,
    now_ms: int,
    log_start_offset: int,
    retention_ms: int,
    retention_bytes: int,
) -> str | None:
    if segment.next_offset <= log_start_offset:
        return "log_start_offset"
    if retention_ms >= 0 and now_ms - segment.max_timestamp_ms > retention_ms:
        return "retention_ms"
    if retention_bytes >= 0 and remaining_bytes - segment.size_bytes >= retention_bytes:
        return "retention_bytes"
    return None
