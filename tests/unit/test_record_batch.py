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
    RecordsBuilder,
    assign,
    batch_crc,
    build_batch,
    decode_records,
    last_offset,
    next_offset,
    parse_batch,
    validate_batch,
)
from tidelog.v1.common_pb2 import CompressionType, ErrorCode, RecordBatch, Records

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


# --- the hand-written Records encoder ------------------------------------------------------------

# Sizes around 16,384 take the encoder past its table of two-byte varints; built cheaply (random
# 16 KiB binaries make hypothesis's input generation too slow).
big_bytes = st.one_of(st.none(), st.binary(max_size=8),
                      st.integers(16_380, 16_400).map(lambda n: b"\xab" * n))


def protobuf_payload(recs: list[tuple[bytes | None, bytes | None,
                                      list[tuple[str, bytes | None]], int]]) -> bytes:
    """The same records through protobuf's own serializer (the reference encoding)."""
    message = Records()
    first = recs[0][3]
    for i, (key, value, hdrs, ts) in enumerate(recs):
        rec = message.records.add(offset_delta=i, timestamp_delta=ts - first)
        if key is not None:
            rec.key = key
        if value is not None:
            rec.value = value
        for name, hvalue in hdrs:
            h = rec.headers.add(key=name)
            if hvalue is not None:
                h.value = hvalue
    payload: bytes = message.SerializeToString()
    return payload


@settings(max_examples=200)
@given(st.lists(st.tuples(big_bytes, big_bytes, headers, st.integers(0, 2**41)),
                min_size=1, max_size=12))
def test_records_builder_writes_exactly_what_protobuf_writes(
        recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]
) -> None:
    """Timestamps in any order (negative deltas are 10-byte varints), null and empty keys,
    values and header values, and sizes on both sides of the two-byte varint table."""
    builder = RecordsBuilder()
    for key, value, hdrs, ts in recs:
        builder.append(key, value, hdrs, ts)
    expected = protobuf_payload(recs)
    batch = parse_batch(builder.build())
    assert batch.records == expected
    assert builder.size_bytes == len(expected)
    assert (builder.first_timestamp, builder.max_timestamp) == (
        recs[0][3], max(r[3] for r in recs))


def test_records_builder_past_the_varint_table() -> None:
    """More than 16,384 records: offset deltas leave the precomputed varint table."""
    builder = RecordsBuilder()
    recs = [(None, b"v", [], 1_000 + (i % 7)) for i in range(16_400)]
    for key, value, hdrs, ts in recs:
        builder.append(key, value, list(hdrs), ts)
    assert parse_batch(builder.build()).records == protobuf_payload(
        [(k, v, list(h), t) for k, v, h, t in recs])


def test_records_builder_refuses_bad_records_before_writing() -> None:
    builder = RecordsBuilder()
    builder.append(b"k", b"v", [], 5)
    with pytest.raises(InvalidRecordError, match="negative timestamp"):
        builder.append(b"k", b"v", [], -1)
    with pytest.raises(InvalidRecordError, match="headers"):
        builder.append(b"k", b"v", [("h", None)] * (limits.RECORD_HEADERS_MAX + 1), 5)
    assert builder.count == 1 and parse_batch(builder.build()).record_count == 1
    with pytest.raises(InvalidRecordError, match="at least one record"):
        RecordsBuilder().build()
