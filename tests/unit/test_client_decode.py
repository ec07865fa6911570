"""The consumer's hand-written ``Records`` decoder against protobuf's own parser.

``record_batch.decode_payload`` reads the payload bytes directly when they are in the layout
``RecordsBuilder`` writes and leaves anything else to protobuf. These properties check, on
arbitrary inputs, that the result is always exactly what protobuf's parser gives (timestamp
deltas of any sign, null vs empty keys, values and header values, header names, offset deltas),
that unknown, repeated, reordered or wrongly typed fields go to protobuf instead of being
misread, and that malformed, truncated or corrupted payloads raise CorruptMessageError (never
another exception, a wrong result or a hang). Then the client's use of it: ConsumerRecords that
are indistinguishable from constructed ones, and ``PartitionRecords.take``.
"""

from __future__ import annotations

import dataclasses

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tidelog.client._fetcher import PartitionRecords, _decode
from tidelog.client.records import ConsumerRecord, TopicPartition
from tidelog.errors import CorruptMessageError
from tidelog.record_batch import (
    BatchInfo,
    ParsedRecord,
    RecordsBuilder,
    RecordSlots,
    _decode_fast,
    _NotCanonical,
    assign,
    batch_crc,
    parse_batch,
    parse_records,
    validate_batch,
)
from tidelog.v1.common_pb2 import RecordBatch, Records, TimestampType

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# --- the reference: protobuf's parser ------------------------------------------------------------

def reference(payload: bytes) -> list[ParsedRecord] | None:
    """What protobuf reads from ``payload``; None when it refuses the payload or an offset delta
    is not its record's index (both must be CorruptMessageError)."""
    try:
        records = Records.FromString(payload).records
    except DecodeError:
        return None
    out: list[ParsedRecord] = []
    for index, rec in enumerate(records):
        if rec.offset_delta != index:
            return None
        out.append((
            rec.timestamp_delta,
            rec.key if rec.HasField("key") else None,
            rec.value if rec.HasField("value") else None,
            tuple((h.key, h.value if h.HasField("value") else None) for h in rec.headers),
        ))
    return out


def fast(payload: bytes) -> list[ParsedRecord] | None:
    """The hand-written path alone; None when it hands the payload to protobuf."""
    info = BatchInfo(payload, -1, 0, 0, None, 0, 0)
    try:
        records = _decode_fast(info, RecordSlots, RecordSlots, "", -1)
    except (_NotCanonical, IndexError):
        return None
    return [(r.timestamp_ms, r.key, r.value, r.headers) for r in records]


def check_against_protobuf(payload: bytes) -> list[ParsedRecord] | None:
    """The property: parse_records gives protobuf's result or CorruptMessageError exactly when
    protobuf refuses; the fast path, when it answers, agrees."""
    expected = reference(payload)
    fast_result = fast(payload)
    if fast_result is not None:
        assert expected is not None, "the fast path accepted what protobuf refuses"
        assert fast_result == expected
    if expected is None:
        with pytest.raises(CorruptMessageError):
            parse_records(payload)
    else:
        assert parse_records(payload) == expected
    return fast_result


# --- payloads in RecordsBuilder's layout: always the fast path ----------------------------------

def sized_bytes() -> st.SearchStrategy[bytes | None]:
    """None, empty, short, and lengths whose varint takes 2 and 3 bytes (built cheaply)."""
    return st.one_of(
        st.none(), st.just(b""), st.binary(max_size=12),
        st.integers(120, 140).map(lambda n: b"\x07" * n),
        st.integers(16_380, 16_390).map(lambda n: b"\x09" * n),
    )


header_values = st.one_of(st.none(), st.just(b""), st.binary(max_size=8))
header_lists = st.lists(st.tuples(st.text(max_size=6), header_values), max_size=3)
timestamps = st.one_of(st.integers(0, 2**41), st.integers(0, 200))
built_records = st.lists(st.tuples(sized_bytes(), sized_bytes(), header_lists, timestamps),
                         min_size=1, max_size=12)


def build_payload(recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]],
                                   int]]) -> bytes:
    builder = RecordsBuilder()
    for key, value, headers, ts in recs:
        builder.append(key, value, headers, ts)
    payload: bytes = parse_batch(builder.build()).records
    return payload


@SETTINGS
@given(built_records)
def test_builder_payloads_take_the_fast_path_and_match_protobuf(
        recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]
) -> None:
    """Timestamps in any order (negative deltas are ten-byte varints), null vs empty keys, values
    and header values, empty and non-ASCII header names, multi-byte lengths."""
    payload = build_payload(recs)
    got = check_against_protobuf(payload)
    assert got is not None, "a RecordsBuilder payload fell back to protobuf"
    first = recs[0][3]
    assert got == [(ts - first, key, value, tuple(headers))
                   for key, value, headers, ts in recs]


def test_offset_deltas_past_one_and_two_byte_varints() -> None:
    recs = [(None, b"v%d" % i, [], 1_000 + (i % 5)) for i in range(16_500)]
    payload = build_payload([(k, v, list(h), t) for k, v, h, t in recs])
    got = fast(payload)
    assert got is not None and got == reference(payload)
    assert len(got) == 16_500 and got[16_499][2] == b"v16499"


# --- protobuf-serialized payloads: arbitrary field values -------------------------------------

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)


@SETTINGS
@given(st.lists(st.tuples(st.one_of(st.none(), int32s), int64s, header_values, header_values,
                          header_lists), max_size=6))
def test_protobuf_serialized_records_match(
        recs: list[tuple[int | None, int, bytes | None, bytes | None,
                         list[tuple[str, bytes | None]]]]
) -> None:
    """Any int64 timestamp delta; offset deltas that are the index (None here) or anything."""
    message = Records()
    for index, (delta, ts, key, value, headers) in enumerate(recs):
        rec = message.records.add(offset_delta=index if delta is None else delta,
                                  timestamp_delta=ts)
        if key is not None:
            rec.key = key
        if value is not None:
            rec.value = value
        for name, hvalue in headers:
            h = rec.headers.add(key=name)
            if hvalue is not None:
                h.value = hvalue
    check_against_protobuf(message.SerializeToString())


# --- hand-assembled wire bytes: reordered, repeated, unknown, mistyped, overlong -----------------

def varint(n: int, pad: int = 0) -> bytes:
    """Protobuf varint of ``n`` (two's complement on 64 bits), with ``pad`` redundant bytes."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n or pad:
            out.append(byte | 0x80)
            if not n:
                pad -= 1
                if not pad:
                    out.append(0)
                    break
        else:
            out.append(byte)
            break
    return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def delimited(number: int, body: bytes) -> bytes:
    return tag(number, 2) + varint(len(body)) + body


pads = st.sampled_from([0, 0, 0, 1, 3])


@st.composite
def unknown_field(draw: st.DrawFn, numbers: st.SearchStrategy[int]) -> bytes:
    number = draw(numbers)
    wire_type = draw(st.sampled_from([0, 1, 2, 5]))
    if wire_type == 0:
        return tag(number, 0) + varint(draw(int64s), draw(pads))
    if wire_type == 1:
        return tag(number, 1) + draw(st.binary(min_size=8, max_size=8))
    if wire_type == 5:
        return tag(number, 5) + draw(st.binary(min_size=4, max_size=4))
    return delimited(number, draw(st.binary(max_size=6)))


@st.composite
def header_body(draw: st.DrawFn) -> bytes:
    parts = []
    for kind in draw(st.lists(st.sampled_from(["key", "badkey", "value", "unknown"]),
                              max_size=3)):
        if kind == "key":
            parts.append(delimited(1, draw(st.text(max_size=4)).encode()))
        elif kind == "badkey":
            parts.append(delimited(1, draw(st.binary(max_size=4))))  # maybe not UTF-8
        elif kind == "value":
            parts.append(delimited(2, draw(st.binary(max_size=4))))
        else:
            parts.append(draw(unknown_field(st.integers(1, 9))))
    return b"".join(parts)


@st.composite
def record_body(draw: st.DrawFn, index: int) -> bytes:
    """Mostly RecordsBuilder's layout, with draws that reorder, repeat, mistype, pad or add
    unknown fields."""
    canonical = [
        ("od", None), ("ts", None), ("key", None), ("value", None),
        *[("header", None)] * draw(st.integers(0, 2)),
    ]
    fields = [f for f in canonical if draw(st.booleans()) or f[0] in ("od", "value")]
    if draw(st.booleans()):
        extra = draw(st.lists(st.sampled_from(
            ["od", "ts", "key", "value", "header", "unknown", "mistyped"]), max_size=3))
        for name in extra:
            fields.insert(draw(st.integers(0, len(fields))), (name, None))
    out = []
    for name, _ in fields:
        if name == "od":
            delta = draw(st.one_of(st.just(index), st.just(index), int32s,
                                   st.just(index + 2**32)))
            out.append(tag(1, 0) + varint(delta, draw(pads)))
        elif name == "ts":
            out.append(tag(2, 0) + varint(draw(st.one_of(int64s, st.integers(0, 300))),
                                          draw(pads)))
        elif name == "key":
            out.append(tag(3, 2) + varint(len(k := draw(st.binary(max_size=5))), draw(pads)) + k)
        elif name == "value":
            out.append(delimited(4, draw(st.binary(max_size=140))))
        elif name == "header":
            out.append(delimited(5, draw(header_body())))
        elif name == "unknown":
            out.append(draw(unknown_field(st.integers(6, 40))))
        else:  # a known field number with the other wire type
            number = draw(st.integers(1, 5))
            out.append(delimited(number, b"\x01") if number <= 2
                       else tag(number, 0) + varint(draw(int64s)))
    return b"".join(out)


@st.composite
def wire_payloads(draw: st.DrawFn) -> bytes:
    records = []
    for index in range(draw(st.integers(0, 5))):
        body = draw(record_body(index))
        records.append(tag(1, 2) + varint(len(body), draw(pads)) + body)
    if draw(st.integers(0, 9)) == 0:
        records.insert(draw(st.integers(0, len(records))), draw(unknown_field(st.integers(2, 9))))
    return b"".join(records)


@SETTINGS
@given(wire_payloads())
def test_hand_assembled_payloads_match_protobuf(payload: bytes) -> None:
    check_against_protobuf(payload)


# --- corruption: flipped, cut, inserted and random bytes ---------------------------------------

@SETTINGS
@given(built_records, st.data())
def test_corrupted_payloads_match_protobuf_or_raise(
        recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
        data: st.DataObject,
) -> None:
    payload = bytearray(build_payload(recs))
    assume(len(payload) < 50_000)
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
    check_against_protobuf(bytes(payload))


@SETTINGS
@given(st.binary(max_size=200))
def test_random_bytes_match_protobuf_or_raise(payload: bytes) -> None:
    check_against_protobuf(payload)


@pytest.mark.parametrize("payload", [
    b"\x0a", b"\x0a\x05", b"\x0a\x02\x08", b"\x0a\x80", b"\x0a\x01\xff",
    b"\x0a\x03\x22\x05ab", b"\x0a\x0b\x10" + b"\xff" * 10, b"\x0a\x02\x2a\x05",
    b"\x0a\x04\x2a\x02\x0a\x05", b"\x0a\x04\x2a\x02\x12\x05",
])
def test_truncated_payloads_raise_corrupt_message(payload: bytes) -> None:
    assert reference(payload) is None
    with pytest.raises(CorruptMessageError):
        parse_records(payload)


@pytest.mark.parametrize("record", [
    b"\x10" + b"\xff" * 9 + b"\x01" + b"\x22\x01v",  # -1 as protobuf writes it
    b"\x10" + b"\xff" * 9 + b"\x7f" + b"\x22\x01v",  # bits above 64 are dropped
    b"\x10" + b"\xff" * 9 + b"\x02" + b"\x22\x01v",
    b"\x10" + b"\xff" * 10 + b"\x01" + b"\x22\x01v",  # eleven bytes: refused
    b"\x08\x80\x80\x80\x80\x10",  # offset delta 2**32: int32 0 (protobuf's path)
    b"\x10\x80\x00\x1a\x80\x00\x22\x81\x00v",  # overlong (padded) varints
])
def test_edge_varints_match_protobuf(record: bytes) -> None:
    check_against_protobuf(delimited(1, record))


def test_unknown_fields_are_left_to_protobuf_which_skips_them() -> None:
    record = b"\x08\x00" + b"\x22\x01v" + delimited(9, b"xyz") + tag(7, 0) + varint(5)
    payload = delimited(1, record) + tag(3, 0) + varint(1)
    assert fast(payload) is None
    assert parse_records(payload) == [(0, None, b"v", ())]


# --- the client's records --------------------------------------------------------------------

def stamped_batch(recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]],
                                   int]], *, log_append: bool = False) -> RecordBatch:
    builder = RecordsBuilder()
    for key, value, headers, ts in recs:
        builder.append(key, value, headers, ts)
    batch = validate_batch(builder.build())
    if log_append:
        batch.timestamp_type = TimestampType.LOG_APPEND_TIME
        batch.crc = batch_crc(batch)
    return validate_batch(assign(batch, base_offset=500, leader_epoch=7,
                                 log_append_time_ms=1_234))


def test_record_slots_match_consumer_record() -> None:
    assert sorted(RecordSlots.__slots__) == sorted(ConsumerRecord.__slots__)


@SETTINGS
@given(built_records, st.booleans())
def test_decoded_consumer_records_are_ordinary_consumer_records(
        recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
        log_append: bool,
) -> None:
    tp = TopicPartition("orders", 3)
    got = _decode(stamped_batch(recs, log_append=log_append), tp)
    expected = [
        ConsumerRecord("orders", 3, 500 + i, 1_234 if log_append else ts,
                       int(log_append), key, value, tuple(headers), 7)
        for i, (key, value, headers, ts) in enumerate(recs)
    ]
    assert got == expected
    for g, e in zip(got, expected, strict=True):
        assert type(g) is ConsumerRecord
        assert hash(g) == hash(e) and repr(g) == repr(e)
        assert dataclasses.astuple(g) == dataclasses.astuple(e)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got[0].value = b"changed"  # type: ignore[misc]


def test_the_protobuf_path_makes_the_same_consumer_records() -> None:
    """A payload protobuf wrote in another order (value before key): decoded by protobuf."""
    record = b"\x08\x00\x22\x01v\x1a\x01k" + delimited(5, delimited(1, b"h"))
    batch = RecordBatch(record_count=1, first_timestamp=10, max_timestamp=10,
                        uncompressed_size=len(delimited(1, record)),
                        records=delimited(1, record))
    batch.crc = batch_crc(batch)
    assert fast(batch.records) is None
    (got,) = _decode(validate_batch(batch.SerializeToString()), TopicPartition("t", 0))
    assert type(got) is ConsumerRecord
    assert got == ConsumerRecord("t", 0, 0, 10, 0, b"k", b"v", (("h", None),), 0)


def test_take_slices_batches_from_the_position() -> None:
    tp = TopicPartition("t", 0)
    batches = []
    for base in (0, 4, 8):
        builder = RecordsBuilder()
        for i in range(4):
            builder.append(None, b"%d" % (base + i), (), 5)
        batches.append(assign(validate_batch(builder.build()), base_offset=base,
                              leader_epoch=0, log_append_time_ms=0))
    records = PartitionRecords(tp, 2, batches)
    first = records.take(2, 3)
    assert [r.offset for r in first] == [2, 3, 4]
    assert [r.offset for r in records.take(5, 2)] == [5, 6]
    assert [r.offset for r in records.take(9, 100)] == [9, 10, 11]  # 7 and 8 skipped
    assert records.exhausted and records.take(12, 5) == []


def test_take_skips_batches_before_the_position() -> None:
    tp = TopicPartition("t", 0)
    batches = []
    for base in (0, 3):
        builder = RecordsBuilder()
        for _ in range(3):
            builder.append(None, b"v", (), 5)
        batches.append(assign(validate_batch(builder.build()), base_offset=base,
                              leader_epoch=0, log_append_time_ms=0))
    records = PartitionRecords(tp, 4, batches)
    assert [r.offset for r in records.take(4, 10)] == [4, 5]
    assert records.exhausted
