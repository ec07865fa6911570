"""Segment rolling and retention planning (broker/storage/segments.py), pure functions.

Checks Kafka's rules on hand-made segment lists: a segment rolls when the next batch would pass
segment.bytes or segment.ms has passed since its first append; retention removes leading segments
only, only wholly below the HW, by time (largest timestamp older than retention.ms), by size (what
is left still holds retention.bytes) or below the log start offset; -1 means unlimited.
"""

from __future__ import annotations

import struct

import pytest

from tidelog.broker.storage.segments import Segment, plan_retention, should_roll


def seg(base: int, nxt: int, size: int = 100, max_ts: int = 1000, first_ms: int = 0) -> Segment:
    return Segment(base, nxt, size, max_ts, first_ms)


def three_segments() -> list[Segment]:
    return [seg(0, 10, max_ts=100), seg(10, 20, max_ts=200), seg(20, 30, max_ts=300)]


def plan(segments: list[Segment], **kw: int) -> tuple[int, int, int] | None:
    args = {"now_ms": 1000, "log_start_offset": 0, "high_watermark": 30, "retention_ms": -1,
            "retention_bytes": -1}
    args.update(kw)
    d = plan_retention(segments, **args)  # type: ignore[arg-type]
    return None if d is None else (d.segment_count, d.removed_bytes, d.new_log_start_offset)


def test_roll_rules() -> None:
    kw = {"segment_bytes": 250, "segment_ms": 60_000}
    assert should_roll(None, batch_bytes=10, append_time_ms=0, **kw)
    active = seg(0, 10, size=200, first_ms=1_000)
    assert not should_roll(active, batch_bytes=50, append_time_ms=1_000, **kw)
    assert should_roll(active, batch_bytes=51, append_time_ms=1_000, **kw)
    assert should_roll(active, batch_bytes=1, append_time_ms=61_000, **kw)
    assert not should_roll(active, batch_bytes=1, append_time_ms=60_999, **kw)


def test_an_oversized_batch_still_fits_an_empty_segment() -> None:
    empty = seg(0, 0, size=0)
    assert not should_roll(empty, batch_bytes=10_000, append_time_ms=0, segment_bytes=100,
                           segment_ms=1)


def test_unlimited_retention_removes_nothing() -> None:
    assert plan(three_segments()) is None


def test_time_retention_removes_expired_leading_segments() -> None:
    # now 1000, retention 750: segments whose largest timestamp < 250 go.
    assert plan(three_segments(), retention_ms=750) == (2, 200, 20)


def test_time_retention_stops_at_the_first_young_segment() -> None:
    segments = [seg(0, 10, max_ts=900), seg(10, 20, max_ts=100)]
    assert plan(segments, retention_ms=500) is None


def test_size_retention_keeps_at_least_retention_bytes() -> None:
    assert plan(three_segments(), retention_bytes=150) == (1, 100, 10)
    assert plan(three_segments(), retention_bytes=100) == (2, 200, 20)
    assert plan(three_segments(), retention_bytes=201) is None


def test_retention_never_passes_the_high_watermark() -> None:
    assert plan(three_segments(), retention_ms=0, high_watermark=19) == (1, 100, 10)
    assert plan(three_segments(), retention_ms=0, high_watermark=9) is None


def test_an_expired_active_segment_goes_when_the_hw_is_at_the_end() -> None:
    assert plan(three_segments(), retention_ms=0) == (3, 300, 30)
    assert plan(three_segments(), retention_bytes=0) == (3, 300, 30)


def test_segments_below_the_log_start_offset_go() -> None:
    assert plan(three_segments(), log_start_offset=25) == (2, 200, 25)
    assert plan(three_segments(), log_start_offset=20) == (2, 200, 20)


@pytest.mark.parametrize("data", [b"", b"\x00" * 31, b"\x00" * 33])
def test_segment_decode_refuses_wrong_sizes(data: bytes) -> None:
    with pytest.raises(struct.error):
        Segment.decode(0, data)


def test_segment_encoding_round_trips() -> None:
    s = seg(5, 17, size=12345, max_ts=99, first_ms=7)
    assert Segment.decode(5, s.encode()) == s
