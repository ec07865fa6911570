"""Record batches: round trips, corruption detection, size limits.

Property tests (hypothesis) build batches of arbitrary records with every codec and check that
decoding returns exactly what was built; that a flipped byte anywhere in the payload, or in any
CRC-covered header field, is refused with CORRUPT_MESSAGE; and that oversize batches and
decompression bombs are refused with a clear error instead of being allocated.
"""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog import limits
from tidelog.compression import codec_from_name, compress
from tidelog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    MessageTooLargeError,
    TidelogError,
    UnsupportedCompressionTypeError,
)
from tidelog.record_batch import (
    NewRecord,
    assign,
    batch_crc,
    build_batch,
    decode_records,
    last_offset,
    next_offset,
    parse_batch,
    validate_batch,
)
from tidelog.v1.common_pb2 import CompressionType, ErrorCode, RecordBatch

CODECS = [
    CompressionType.COMPRESSION_NONE,
    CompressionType.COMPRESSION_GZIP,
    CompressionType.COMPRESSION_LZ4,
    CompressionType.COMPRESSION_ZSTD,
]

maybe_bytes = st.one_of(st.none(), st.binary(max_size=64))
headers = st.lists(st.tuples(st.text(max_size=8), maybe_bytes), max_size=3)
records = st.lists(
    st.builds(
        NewRecord,
        key=maybe_bytes,
        value=maybe_bytes,
        headers=headers,
        timestamp_ms=st.one_of(st.none(), st.integers(0, 2**41)),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=150, deadline=None)
@given(recs=records, codec=st.sampled_from(CODECS), now_ms=st.integers(0, 2**41))
def test_every_batch_round_trips(recs: list[NewRecord], codec: int, now_ms: int) -> None:
    data = build_batch(
        recs, now_ms=now_ms, compression=codec, producer_id=7, producer_epoch=1, base_sequence=3
    )
    batch = validate_batch(data)
    stamped = assign(batch, base_offset=100, leader_epoch=4, log_append_time_ms=now_ms)
    out = decode_records(validate_batch(stamped))
    assert [r.offset for r in out] == list(range(100, 100 + len(recs)))
    assert [(r.key, r.value) for r in out] == [(r.key, r.value) for r in recs]
    assert [list(r.headers) for r in out] == [list(r.headers) for r in recs]
    expected_ts = [now_ms if r.timestamp_ms is None else r.timestamp_ms for r in recs]
    assert [r.timestamp_ms for r in out] == expected_ts
    assert all(r.leader_epoch == 4 for r in out)
    assert batch.max_timestamp == max(expected_ts)
    assert next_offset(batch) == 100 + len(recs) and last_offset(batch) == 99 + len(recs)


def _payload_span(data: bytes, batch: RecordBatch) -> tuple[int, int]:
    """Where the `records` bytes sit inside the serialized batch."""
    start = data.rindex(batch.records) if batch.records else len(data)
    return start, start + len(batch.records)


@settings(max_examples=200, deadline=None)
@given(
    recs=records,
    codec=st.sampled_from(CODECS),
    where=st.floats(0, 1, exclude_max=True),
    bit=st.integers(0, 7),
)
def test_any_flipped_payload_byte_is_detected(
    recs: list[NewRecord], codec: int, where: float, bit: int
) -> None:
    data = build_batch(recs, now_ms=1_700_000_000_000, compression=codec)
    start, end = _payload_span(data, parse_batch(data))
    pos = start + int(where * (end - start))
    corrupt = bytearray(data)
    corrupt[pos] ^= 1 << bit
    with pytest.raises(CorruptMessageError) as info:
        validate_batch(bytes(corrupt))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


COVERED_FIELDS = [
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "record_count",
    "first_timestamp",
    "max_timestamp",
    "uncompressed_size",
    "timestamp_type",
]


@pytest.mark.parametrize("field", COVERED_FIELDS)
def test_changed_covered_header_field_is_detected(field: str) -> None:
    batch = parse_batch(
        build_batch(
            [NewRecord(b"k", b"v")] * 3, now_ms=5, producer_id=9, producer_epoch=2, base_sequence=10
        )
    )
    setattr(batch, field, getattr(batch, field) + 1)
    with pytest.raises(CorruptMessageError):
        validate_batch(batch.SerializeToString())


def test_leader_fields_are_outside_the_crc() -> None:
    batch = parse_batch(build_batch([NewRecord(None, b"v")], now_ms=5))
    crc = batch_crc(batch)
    data = assign(batch, base_offset=2**40, leader_epoch=77, log_append_time_ms=123)
    again = validate_batch(data)
    assert (again.base_offset, again.partition_leader_epoch, again.crc) == (2**40, 77, crc)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_is_refused_with_a_tidelog_error(data: bytes) -> None:
    with pytest.raises(TidelogError):
        validate_batch(data)


def test_oversize_batch_is_refused_by_the_broker_check() -> None:
    data = build_batch([NewRecord(None, b"x" * 2000)], now_ms=1)
    with pytest.raises(MessageTooLargeError) as info:
        validate_batch(data, max_bytes=1000)
    assert "above max.message.bytes 1000" in str(info.value)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_oversize_batch_is_refused_by_the_builder() -> None:
    with pytest.raises(MessageTooLargeError):
        build_batch([NewRecord(None, b"x" * 5000)], now_ms=1, max_bytes=4096)


def test_empty_batch_and_negative_timestamp_are_invalid() -> None:
    with pytest.raises(InvalidRecordError):
        build_batch([], now_ms=1)
    with pytest.raises(InvalidRecordError):
        build_batch([NewRecord(None, b"v", timestamp_ms=-5)], now_ms=1)


def _forged(codec: int, payload: bytes, declared: int) -> bytes:
    """A batch whose CRC is valid but whose payload does not match its declared size."""
    batch = RecordBatch(
        record_count=1,
        compression=codec,  # type: ignore[arg-type]
        uncompressed_size=declared,
        records=compress(codec, payload),
    )
    batch.crc = batch_crc(batch)
    return batch.SerializeToString()


@pytest.mark.parametrize("codec", CODECS[1:])
def test_decompression_bomb_is_refused(codec: int) -> None:
    data = _forged(codec, b"\0" * 20_000_000, declared=100)
    batch = validate_batch(data)  # the header is consistent; only decoding finds the lie
    with pytest.raises(CorruptMessageError, match="100"):
        decode_records(batch)


def test_declared_size_above_the_limit_is_refused() -> None:
    data = _forged(
        CompressionType.COMPRESSION_GZIP, b"a", declared=limits.BATCH_UNCOMPRESSED_BYTES_MAX + 1
    )
    with pytest.raises(CorruptMessageError, match="uncompressed_size"):
        validate_batch(data)


def test_invalid_compressed_payload_is_corrupt() -> None:
    batch = RecordBatch(
        record_count=1,
        compression=CompressionType.COMPRESSION_GZIP,
        uncompressed_size=10,
        records=zlib.compress(b"x")[:3],
    )
    batch.crc = batch_crc(batch)
    with pytest.raises(CorruptMessageError):
        decode_records(validate_batch(batch.SerializeToString()))


def test_unsupported_codecs_are_named() -> None:
    with pytest.raises(UnsupportedCompressionTypeError, match="snappy"):
        codec_from_name("snappy")
    assert codec_from_name(" ZSTD ") == CompressionType.COMPRESSION_ZSTD
    batch = RecordBatch(record_count=1, compression=CompressionType.COMPRESSION_SNAPPY)
    batch.crc = batch_crc(batch)
    with pytest.raises(UnsupportedCompressionTypeError):
        validate_batch(batch.SerializeToString())


def test_record_count_must_match_payload() -> None:
    batch = parse_batch(build_batch([NewRecord(None, b"a"), NewRecord(None, b"b")], now_ms=1))
    batch.record_count = 3
    batch.crc = batch_crc(batch)
    with pytest.raises(CorruptMessageError, match="declares 3 records but holds 2"):
        decode_records(validate_batch(batch.SerializeToString()))
