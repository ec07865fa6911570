"""The leader's record check (``record_batch.check_record_framing`` / ``validate_records``)
against what consumers can decode.

The property: a payload passes the check exactly when protobuf's parser reads exactly the
declared number of records from it with offset deltas 0, 1, 2... -- which is exactly when
``decode_payload``, the consumers' decoder, reads them (tests/unit/test_client_decode.py holds
the decoder to protobuf). Checked on payloads RecordsBuilder writes (they always pass, with the
right first keyless record), on hand-assembled wire bytes (reordered, repeated, unknown,
mistyped, padded fields), on every kind of corruption of a built payload (flipped, cut,
inserted, overwritten bytes) and on random bytes: the check never raises anything but
CorruptMessageError, and a refusal's message names a record. Then whole batches: a valid CRC
over an undecodable or miscounted payload, for every codec, is refused.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_client_decode import (
    SETTINGS,
    build_payload,
    built_records,
    delimited,
    reference,
    tag,
    varint,
    wire_payloads,
)

from tidelog.compression import compress
from tidelog.errors import CorruptMessageError
from tidelog.record_batch import (
    _PARSE_RECORDS_MAX,
    NewRecord,
    RecordBatch,
    RecordsBuilder,
    _build_offset_deltas,
    _crc,
    _NotCanonical,
    _RecordOffsets,
    _walk_records,
    batch_crc,
    build_batch,
    check_record_framing,
    checked_records,
    decode_records,
    parse_batch,
    to_consumer_record,
    validate_header,
    validate_records,
)
from tidelog.v1.common_pb2 import CompressionType, Records, TimestampType

CODECS = [CompressionType.COMPRESSION_NONE, CompressionType.COMPRESSION_GZIP,
          CompressionType.COMPRESSION_LZ4, CompressionType.COMPRESSION_ZSTD]
BuiltRecords = list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]


def first_keyless(payload: bytes) -> int:
    records = Records.FromString(payload).records
    return next((i for i, r in enumerate(records) if not r.HasField("key")), -1)


def walk_agrees(payload: bytes, count: int) -> None:
    """The walk that large batches take (``_walk_records``): what it accepts protobuf reads,
    with the same first keyless record; what it refuses protobuf refuses too; what is not in
    RecordsBuilder's layout it leaves to protobuf (no claim)."""
    expected = reference(payload)
    try:
        keyless = _walk_records(payload, count)
    except _NotCanonical:
        return
    except CorruptMessageError:
        assert expected is None or len(expected) != count
        return
    assert expected is not None and len(expected) == count, "the walk accepted a bad payload"
    assert keyless == first_keyless(payload)


def agrees_with_protobuf(payload: bytes, record_count: int | None = None) -> None:
    """The property, for ``record_count`` (default: what protobuf reads, so the count holds),
    for both ways of checking."""
    expected = reference(payload)
    count = record_count if record_count is not None else len(expected or [])
    walk_agrees(payload, count)
    if expected is None or len(expected) != count:
        with pytest.raises(CorruptMessageError, match="record"):
            check_record_framing(payload, count, find_keyless=True)
        with pytest.raises(CorruptMessageError):
            check_record_framing(payload, count)
        return
    assert check_record_framing(payload, count) == -1
    assert check_record_framing(payload, count, find_keyless=True) == first_keyless(payload)


@SETTINGS
@given(built_records)
def test_built_payloads_pass_and_find_their_first_keyless_record(recs: BuiltRecords) -> None:
    payload = build_payload(recs)
    assert check_record_framing(payload, len(recs)) == -1
    keyless = next((i for i, (key, *_) in enumerate(recs) if key is None), -1)
    assert check_record_framing(payload, len(recs), find_keyless=True) == keyless
    assert _walk_records(payload, len(recs)) == keyless


@SETTINGS
@given(built_records, st.integers(-2, 2).filter(bool))
def test_a_count_that_disagrees_is_refused(recs: BuiltRecords, wrong: int) -> None:
    payload = build_payload(recs)
    with pytest.raises(CorruptMessageError, match=f"declares {len(recs) + wrong} records"):
        check_record_framing(payload, len(recs) + wrong)
    with pytest.raises(CorruptMessageError, match=f"declares {len(recs) + wrong} records"):
        _walk_records(payload, len(recs) + wrong)


@SETTINGS
@given(wire_payloads())
def test_hand_assembled_payloads_pass_exactly_when_protobuf_reads_them(payload: bytes) -> None:
    agrees_with_protobuf(payload)


@SETTINGS
@given(built_records, st.data())
def test_every_corruption_is_refused_unless_protobuf_still_reads_it(
        recs: BuiltRecords, data: st.DataObject) -> None:
    payload = bytearray(build_payload(recs))
    for _ in range(data.draw(st.integers(1, 3))):
        what = data.draw(st.sampled_from(["flip", "cut", "insert", "set"]))
        where = data.draw(st.integers(0, max(len(payload) - 1, 0)))
        if what == "flip" and payload:
            payload[where] ^= 1 << data.draw(st.integers(0, 7))
        elif what == "cut":
            del payload[where:]
        elif what == "insert":
            payload[where:where] = data.draw(st.binary(min_size=1, max_size=3))
        elif payload:
            payload[where] = data.draw(st.sampled_from([0x00, 0x08, 0x0A, 0x10, 0x1A, 0x22,
                                                        0x2A, 0x7F, 0x80, 0xFF]))
    # The batch's header still declares the built count: a corruption that changes the count
    # is refused even when protobuf reads the result.
    agrees_with_protobuf(bytes(payload), len(recs))


@SETTINGS
@given(st.binary(max_size=200), st.integers(0, 5))
def test_random_bytes_are_refused_unless_protobuf_reads_them(payload: bytes, count: int) -> None:
    agrees_with_protobuf(payload, count)


@pytest.mark.parametrize(("record", "count"), [
    (b"\x08\x80\x80\x80\x80\x10", 1),  # offset delta 2**32 is int32 0: protobuf reads it
    (b"\x08\x00\x22\x01v", 1),  # an explicit zero offset delta
    (b"\x22\x01v\x08\x00", 1),  # fields out of order
    (b"\x1a\x01a\x1a\x01b", 1),  # a key twice: the last one counts
])
def test_unusual_but_valid_encodings_pass(record: bytes, count: int) -> None:
    payload = delimited(1, record)
    assert reference(payload) is not None
    assert check_record_framing(payload, count) == -1


@pytest.mark.parametrize("count", [1, 2, 127, 128, 129, 16_383, 16_384, 16_385, 70_000])
def test_the_expected_offsets_are_what_protobuf_writes(count: int) -> None:
    expected = _RecordOffsets()
    for i in range(count):
        expected.records.add(offset_delta=i)
    assert _build_offset_deltas(count) == expected.SerializeToString()


def test_a_key_written_twice_does_not_hide_a_keyless_record() -> None:
    # Two key fields in record 0, none in record 1: as many key fields as records.
    payload = (delimited(1, b"\x1a\x01a\x1a\x01b")
               + delimited(1, tag(1, 0) + varint(1) + b"\x22\x01v"))
    assert check_record_framing(payload, 2, find_keyless=True) == 1


@pytest.mark.parametrize(("payload", "count", "message"), [
    (b"\x0a\x05\x08", 1, "record 0's length 5 runs past the payload's end"),
    (delimited(1, b"\x22\x01v") + delimited(1, b"\x08\x05"), 2, "record 1 has offset_delta 5"),
    (delimited(1, b"\x22\x05v"), 1, "record 0's value runs past the record's end"),
    (delimited(1, b"\x22\x01v") * 2, 2, "record 1 has offset_delta 0"),
    (delimited(1, b"\x22\x01v"), 2, "declares 2 records but its payload holds 1"),
])
def test_a_refusal_names_the_record_and_the_field(payload: bytes, count: int,
                                                  message: str) -> None:
    with pytest.raises(CorruptMessageError, match=message):
        check_record_framing(payload, count)


def test_large_batches_are_walked_and_refused_alike() -> None:
    count = _PARSE_RECORDS_MAX + 10
    payload = parse_batch(build_batch(
        [NewRecord(b"%d" % i if i != count - 3 else None, b"") for i in range(count)],
        now_ms=1, max_bytes=1 << 30)).records
    assert check_record_framing(payload, count, find_keyless=True) == count - 3
    assert check_record_framing(payload, count) == -1
    with pytest.raises(CorruptMessageError, match="record"):
        check_record_framing(payload[:-2], count)
    with pytest.raises(CorruptMessageError, match=f"declares {count + 1} records"):
        check_record_framing(payload, count + 1)
    # Not RecordsBuilder's layout (an explicit zero offset delta): protobuf decides, and reads it.
    unusual = delimited(1, b"\x08\x00\x22\x01v") + payload[payload.index(b"\x0a", 1):]
    assert check_record_framing(unusual, count) == -1


@SETTINGS
@given(built_records, st.sampled_from(CODECS), st.booleans())
def test_checked_records_read_what_decode_records_reads(recs: BuiltRecords, codec: int,
                                                        log_append_time: bool) -> None:
    builder = RecordsBuilder()
    for key, value, headers, ts in recs:
        builder.append(key, value, headers, ts)
    batch = parse_batch(builder.build(compression=codec))
    batch.base_offset, batch.partition_leader_epoch = 1000, 3
    if log_append_time:
        batch.timestamp_type, batch.log_append_time_ms = TimestampType.LOG_APPEND_TIME, 77
        batch.crc = batch_crc(batch)
    read = [to_consumer_record(batch, i, r) for i, r in enumerate(checked_records(batch))]
    assert read == decode_records(batch)


def test_checked_records_of_a_large_batch_come_in_slices_and_in_order() -> None:
    count = 2 * _PARSE_RECORDS_MAX + 5
    batch = parse_batch(build_batch([NewRecord(b"%d" % i, None) for i in range(count)],
                                    now_ms=1, max_bytes=1 << 30))
    assert [r.key for r in checked_records(batch)] == [b"%d" % i for i in range(count)]
    cut = crc_valid_batch(batch.records[:-1], record_count=count,
                          codec=CompressionType.COMPRESSION_NONE)
    with pytest.raises(CorruptMessageError):
        list(checked_records(parse_batch(cut)))


def crc_valid_batch(payload: bytes, *, record_count: int, codec: int) -> bytes:
    """A batch whose header and CRC are right for ``payload``, whatever ``payload`` holds."""
    stored = compress(codec, payload)
    batch = RecordBatch(record_count=record_count, first_timestamp=1, max_timestamp=1,
                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                        compression=codec,  # type: ignore[arg-type]
                        uncompressed_size=len(payload), records=stored)
    batch.crc = _crc(batch, stored)
    data: bytes = batch.SerializeToString()
    return data


@pytest.mark.parametrize("codec", CODECS)
def test_a_crc_valid_batch_that_does_not_decode_is_refused(codec: int) -> None:
    good = parse_batch(build_batch([NewRecord(b"k", b"v" * 50)] * 3, now_ms=1)).records
    for payload, count in [(good[:-7], 3), (good, 4), (good + good[:5], 3)]:
        batch = validate_header(crc_valid_batch(payload, record_count=count, codec=codec))
        with pytest.raises(CorruptMessageError, match="record"):
            validate_records(batch)
        with pytest.raises(CorruptMessageError):
            decode_records(batch)  # what a consumer would have met


@pytest.mark.parametrize("codec", CODECS)
def test_valid_batches_pass_with_every_codec(codec: int) -> None:
    data = build_batch([NewRecord(b"k%d" % i if i != 7 else None, b"v") for i in range(20)],
                       now_ms=1, compression=codec)
    assert validate_records(validate_header(data)) == -1
    assert validate_records(validate_header(data), find_keyless=True) == 7
