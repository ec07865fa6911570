"""Record batches: build (producers), validate and stamp (brokers), decode (consumers).

A batch is a ``RecordBatch`` protobuf message (proto/tidelog/v1/common.proto): a header plus an
opaque ``records`` payload, the serialized ``Records`` message compressed as a whole. The broker's
hot path is :func:`validate_batch` then :func:`assign`: it checks sizes, counts and the CRC-32C and
writes the three fields the leader owns (base offset, leader epoch, append time), without ever
decoding a record. Consumers call :func:`decode_records` (or :func:`parse_records` on a payload).

The CRC covers every field the producer sets (the layout is in common.proto), so the leader's own
fields can be rewritten without recomputing it, as in Kafka.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from tidelog import limits
from tidelog.compression import compress, decompress
from tidelog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
)
from tidelog.invariants import InvariantViolation
from tidelog.v1.common_pb2 import (
    CompressionType,
    RecordBatch,
    Records,
    TimestampType,
)

__all__ = [
    "BatchInfo",
    "ConsumerRecord",
    "NewRecord",
    "RecordBatch",
    "RecordSlots",
    "RecordsBuilder",
    "assign",
    "batch_crc",
    "build_batch",
    "check_record_framing",
    "checked_payload",
    "checked_records",
    "decode_batch",
    "decode_payload",
    "decode_records",
    "last_offset",
    "next_offset",
    "parse_batch",
    "parse_records",
    "to_consumer_record",
    "validate_batch",
    "validate_header",
    "validate_records",
]

MAGIC = 2  # Kafka's current record-batch format number; part of the CRC input
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
_INT16_MAX = 0x7FFF
_INT32_MAX = 0x7FFFFFFF

# magic, compression, timestamp_type, producer_id, producer_epoch, base_sequence, record_count,
# first_timestamp, max_timestamp, uncompressed_size -- the CRC input before the payload.
_CRC_HEADER = struct.Struct(">Bbbqhiiqqi")
_SUPPORTED_CODECS = frozenset(
    (
        CompressionType.COMPRESSION_NONE,
        CompressionType.COMPRESSION_GZIP,
        CompressionType.COMPRESSION_LZ4,
        CompressionType.COMPRESSION_ZSTD,
    )
)


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A record a producer wants to send. ``None`` key/value are Kafka's null (not empty)."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp_ms: int | None = None  # None: the batch's ``now_ms``


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """A record as a consumer sees it: where it is, when, and what it holds."""

    offset: int
    timestamp_ms: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    leader_epoch: int


def batch_crc(batch: RecordBatch) -> int:
    """CRC-32C over the producer-set header fields and the payload (layout in common.proto)."""
    return _crc(batch, batch.records)


def _crc(batch: RecordBatch, payload: bytes, gil_release_mode: int = -1) -> int:
    """:func:`batch_crc` with the payload already read (each read of ``batch.records`` copies
    it). ``gil_release_mode``: crc32c's (-1: release the GIL for large payloads, 0: never)."""
    header = _CRC_HEADER.pack(
        MAGIC,
        batch.compression,
        batch.timestamp_type,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        batch.record_count,
        batch.first_timestamp,
        batch.max_timestamp,
        batch.uncompressed_size,
    )
    return int(crc32c.crc32c(payload, value=crc32c.crc32c(header),
                             gil_release_mode=gil_release_mode))


def next_offset(batch: RecordBatch) -> int:
    """The offset after the batch's last record."""
    return int(batch.base_offset + batch.record_count)


def last_offset(batch: RecordBatch) -> int:
    """The offset of the batch's last record."""
    return int(batch.base_offset + batch.record_count - 1)


def build_batch(
    records: Iterable[NewRecord],
    *,
    now_ms: int,
    compression: int = CompressionType.COMPRESSION_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    max_bytes: int = limits.MESSAGE_BYTES_MAX,
) -> bytes:
    """Build, compress and checksum a batch; returns the serialized ``RecordBatch``.

    Raises InvalidRecordError for an empty batch or bad headers, MessageTooLargeError when the
    result exceeds ``max_bytes``, UnsupportedCompressionTypeError for an unknown codec.
    """
    if compression not in _SUPPORTED_CODECS:
        raise UnsupportedCompressionTypeError(f"compression codec {compression} is not supported")
    builder = RecordsBuilder()
    for new in records:
        builder.append(new.key, new.value, new.headers,
                       now_ms if new.timestamp_ms is None else new.timestamp_ms)
    return builder.build(compression=compression, producer_id=producer_id,
                         producer_epoch=producer_epoch, base_sequence=base_sequence,
                         max_bytes=max_bytes)


# Protobuf wire encoding of ``Records`` (common.proto), written by hand so a producer can encode
# each record as it is appended (one pass, no message objects). The bytes are exactly what
# ``Records.SerializeToString()`` gives for the same records: fields in number order, proto3
# zero values (offset_delta 0, timestamp_delta 0, an empty header key) left out, optional
# fields written whenever present (an empty key or value too). tests/unit/test_record_batch.py
# checks that equality.
_VARINT_TABLE_SIZE = 1 << 14  # every one- and two-byte varint
_VARINTS: list[bytes] = [bytes((n,)) for n in range(0x80)] + [
    bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(0x80, _VARINT_TABLE_SIZE)
]
_TAG_RECORD = b"\x0a"  # Records.records = 1, length-delimited
_TAG_OFFSET_DELTA = b"\x08"  # Record.offset_delta = 1, varint
_TAG_TIMESTAMP_DELTA = b"\x10"  # Record.timestamp_delta = 2, varint
_TAG_KEY = b"\x1a"  # Record.key = 3
_TAG_VALUE = b"\x22"  # Record.value = 4
_TAG_HEADER = b"\x2a"  # Record.headers = 5
_TAG_HEADER_KEY = b"\x0a"  # Header.key = 1
_TAG_HEADER_VALUE = b"\x12"  # Header.value = 2
#: Whole fields for the common values: offset_delta (the record's index), and timestamp_delta
#: (milliseconds since the batch's first record: usually a few).
_OFFSET_DELTA_TABLE_SIZE = 4096
_OFFSET_DELTA_FIELDS: list[bytes] = [_TAG_OFFSET_DELTA + v
                                     for v in _VARINTS[:_OFFSET_DELTA_TABLE_SIZE]]
_TIMESTAMP_DELTA_TABLE_SIZE = 0x80
_TIMESTAMP_DELTA_FIELDS: list[bytes] = [_TAG_TIMESTAMP_DELTA + v
                                        for v in _VARINTS[:_TIMESTAMP_DELTA_TABLE_SIZE]]


def _varint(n: int) -> bytes:
    """Protobuf varint of ``n`` (a negative int64 takes ten bytes, as protobuf writes it)."""
    if 0 <= n < _VARINT_TABLE_SIZE:
        return _VARINTS[n]
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _encode_headers(headers: Sequence[tuple[str, bytes | None]], index: int) -> bytes:
    if len(headers) > limits.RECORD_HEADERS_MAX:
        raise InvalidRecordError(
            f"record {index} has {len(headers)} headers (limit {limits.RECORD_HEADERS_MAX})"
        )
    out = bytearray()
    for name, value in headers:
        try:
            name_bytes = name.encode()
        except UnicodeEncodeError as e:
            raise InvalidRecordError(f"record {index} has a header name that is not UTF-8: "
                                     f"{e}") from None
        body = _TAG_HEADER_KEY + _varint(len(name_bytes)) + name_bytes if name_bytes else b""
        if value is not None:
            body += _TAG_HEADER_VALUE + _varint(len(value)) + value
        out += _TAG_HEADER
        out += _varint(len(body))
        out += body
    return bytes(out)


class RecordsBuilder:
    """A batch's ``Records`` payload, encoded one record at a time (the producer appends each
    record as it is sent, so draining a batch only adds the header, compression and CRC).

    Timestamps are deltas from the first record's; ``append`` raises InvalidRecordError for a
    negative timestamp or too many headers, before anything is written.
    """

    __slots__ = ("_records", "count", "first_timestamp", "max_timestamp")

    def __init__(self) -> None:
        # Each record's encoding, joined by build(): a list append is cheaper per record than
        # growing a bytearray (which reallocates and copies as the batch grows).
        self._records: list[bytes] = []
        self.count = 0
        self.first_timestamp = 0
        self.max_timestamp = 0

    @property
    def size_bytes(self) -> int:
        """Bytes of the encoded (uncompressed) payload so far."""
        return sum(map(len, self._records))

    def append(self, key: bytes | None, value: bytes | None,
               headers: Sequence[tuple[str, bytes | None]], timestamp_ms: int) -> None:
        """Encode one record (``bytes`` key/value, or None for null)."""
        # The producer's hot path: one formatted bytes object per record; the offset-delta and
        # small timestamp-delta fields come whole from tables.
        count = self.count
        tail = _encode_headers(headers, count) if headers else b""
        if count:
            delta = timestamp_ms - self.first_timestamp
            head = (_OFFSET_DELTA_FIELDS[count] if count < _OFFSET_DELTA_TABLE_SIZE
                    else _TAG_OFFSET_DELTA + _varint(count))
            if delta:
                if timestamp_ms > self.max_timestamp:
                    self.max_timestamp = timestamp_ms
                elif timestamp_ms < 0:
                    raise InvalidRecordError(
                        f"record {count} has a negative timestamp {timestamp_ms}")
                head += (_TIMESTAMP_DELTA_FIELDS[delta] if 0 < delta < _TIMESTAMP_DELTA_TABLE_SIZE
                         else _TAG_TIMESTAMP_DELTA + _varint(delta))
        else:
            if timestamp_ms < 0:
                raise InvalidRecordError(f"record {count} has a negative timestamp {timestamp_ms}")
            self.first_timestamp = self.max_timestamp = timestamp_ms
            head = b""
        if key is not None:
            n = len(key)
            head += b"\x1a%b%b" % (_VARINTS[n] if n < _VARINT_TABLE_SIZE else _varint(n), key)
        if value is not None:
            n = len(value)
            length = _VARINTS[n] if n < _VARINT_TABLE_SIZE else _varint(n)
            size = len(head) + 1 + len(length) + n + len(tail)
            self._records.append(b"\x0a%b%b\x22%b%b%b" % (
                _VARINTS[size] if size < _VARINT_TABLE_SIZE else _varint(size),
                head, length, value, tail))
        else:
            size = len(head) + len(tail)
            self._records.append(b"\x0a%b%b%b" % (
                _VARINTS[size] if size < _VARINT_TABLE_SIZE else _varint(size), head, tail))
        self.count = count + 1

    def build(
        self,
        *,
        compression: int = CompressionType.COMPRESSION_NONE,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        max_bytes: int = limits.MESSAGE_BYTES_MAX,
    ) -> bytes:
        """Compress and checksum the records into a serialized ``RecordBatch`` (as
        :func:`build_batch`, with the same errors)."""
        if compression not in _SUPPORTED_CODECS:
            raise UnsupportedCompressionTypeError(
                f"compression codec {compression} is not supported")
        count = self.count
        if count == 0:
            raise InvalidRecordError("a batch needs at least one record")
        if count > limits.BATCH_RECORDS_MAX:
            raise InvalidRecordError(
                f"batch has {count} records (limit {limits.BATCH_RECORDS_MAX})")
        payload = b"".join(self._records)
        records = compress(compression, payload)
        batch = RecordBatch(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            record_count=count,
            first_timestamp=self.first_timestamp,
            max_timestamp=self.max_timestamp,
            compression=compression,  # type: ignore[arg-type]
            timestamp_type=TimestampType.CREATE_TIME,
            uncompressed_size=len(payload),
            records=records,
        )
        batch.crc = _crc(batch, records)  # not batch_crc: reading batch.records copies them
        data: bytes = batch.SerializeToString()
        if len(data) > max_bytes:
            raise MessageTooLargeError(
                f"batch of {count} records is {len(data)} bytes, above the limit of {max_bytes}"
            )
        return data


def parse_batch(data: bytes) -> RecordBatch:
    """Parse the header (the payload stays opaque). CorruptMessageError on malformed bytes."""
    try:
        batch: RecordBatch = RecordBatch.FromString(data)
    except DecodeError as e:
        raise CorruptMessageError(f"record batch is not a valid RecordBatch message: {e}") from None
    return batch


def validate_batch(data: bytes, *, max_bytes: int = limits.MESSAGE_BYTES_MAX) -> RecordBatch:
    """A stored or fetched batch's check (followers, storage): size, structure and CRC, without
    decoding records. The leader checks more: :func:`validate_header` then
    :func:`validate_records`.

    Raises MessageTooLargeError (size), CorruptMessageError (structure or CRC) or
    UnsupportedCompressionTypeError; returns the parsed header on success.
    """
    batch = validate_header(data, max_bytes=max_bytes)
    _check_crc(batch, batch.records)
    return batch


def validate_header(data: bytes, *, max_bytes: int = limits.MESSAGE_BYTES_MAX) -> RecordBatch:
    """Size and header of a batch (no CRC, no payload work: cheap enough for the event loop).
    Raises as :func:`validate_batch`; returns the parsed header."""
    if len(data) > max_bytes:
        raise MessageTooLargeError(
            f"record batch is {len(data)} bytes, above max.message.bytes {max_bytes}"
        )
    batch = parse_batch(data)
    _check_header(batch)
    return batch


def _check_crc(batch: RecordBatch, payload: bytes) -> None:
    expected = _crc(batch, payload)
    if batch.crc != expected:
        raise CorruptMessageError(
            f"record batch CRC mismatch: header says {batch.crc:#010x}, content gives "
            f"{expected:#010x}"
        )


def _check_header(batch: RecordBatch, payload_size: int | None = None) -> None:
    """The header's own consistency; ``payload_size``: ``len(batch.records)`` when the caller
    has read it already."""
    if batch.compression not in _SUPPORTED_CODECS:
        raise UnsupportedCompressionTypeError(
            f"record batch uses compression codec {batch.compression}, which is not supported"
        )
    if not 1 <= batch.record_count <= limits.BATCH_RECORDS_MAX:
        raise CorruptMessageError(
            f"record batch has record_count {batch.record_count} "
            f"(must be 1..{limits.BATCH_RECORDS_MAX})"
        )
    if not 0 <= batch.uncompressed_size <= limits.BATCH_UNCOMPRESSED_BYTES_MAX:
        raise CorruptMessageError(
            f"record batch declares uncompressed_size {batch.uncompressed_size} "
            f"(must be 0..{limits.BATCH_UNCOMPRESSED_BYTES_MAX})"
        )
    if batch.compression == CompressionType.COMPRESSION_NONE:
        if payload_size is None:
            payload_size = len(batch.records)
        if batch.uncompressed_size != payload_size:
            raise CorruptMessageError(
                f"uncompressed batch declares {batch.uncompressed_size} bytes but holds "
                f"{payload_size}"
            )
    if batch.max_timestamp < batch.first_timestamp:
        raise CorruptMessageError(
            f"record batch max_timestamp {batch.max_timestamp} is below first_timestamp "
            f"{batch.first_timestamp}"
        )
    if not -1 <= batch.producer_epoch <= _INT16_MAX or batch.producer_id < -1:
        raise CorruptMessageError(
            f"record batch has producer id {batch.producer_id} / epoch {batch.producer_epoch} "
            "out of range"
        )
    # Sequences are int32s that wrap from 2**31 - 1 to 0, inside a batch too (Kafka's
    # DefaultRecordBatch.incrementSequence): base_sequence + record_count may pass the maximum.
    if not -1 <= batch.base_sequence <= _INT32_MAX:
        raise CorruptMessageError(
            f"record batch base_sequence {batch.base_sequence} is out of range"
        )


def assign(
    batch: RecordBatch, *, base_offset: int, leader_epoch: int, log_append_time_ms: int
) -> bytes:
    """Write the leader-owned fields into ``batch`` and return its serialized bytes.

    These fields are outside the CRC, so the producer's checksum stays valid.
    """
    if base_offset < 0:
        raise InvariantViolation(f"base offset {base_offset} is negative")
    if leader_epoch < 0:
        raise InvariantViolation(f"leader epoch {leader_epoch} is negative")
    batch.base_offset = base_offset
    batch.partition_leader_epoch = leader_epoch
    batch.log_append_time_ms = log_append_time_ms
    data: bytes = batch.SerializeToString()
    return data


_LOG_APPEND_TIME = int(TimestampType.LOG_APPEND_TIME)


def decode_records(batch: RecordBatch) -> list[ConsumerRecord]:
    """Decompress and decode a batch's records. Verifies CRC, counts and offset deltas first."""
    return [ConsumerRecord(r.offset, r.timestamp_ms, r.timestamp_type, r.key, r.value, r.headers,
                           r.leader_epoch)
            for r in decode_batch(batch, RecordSlots, RecordSlots)]

#: One record of a ``Records`` payload as :func:`parse_records` returns it: timestamp delta, key,
#: value (None when absent: Kafka's null), headers as (name, value or None) pairs. Its offset
#: delta is its index (checked).
ParsedRecord = tuple[int, "bytes | None", "bytes | None", "tuple[tuple[str, bytes | None], ...]"]


class RecordSlots:
    """What :func:`decode_payload` fills for each record: a plain object with these slots (a
    class may reuse the layout, e.g. to become a frozen dataclass with the same slots by
    assigning ``__class__``)."""

    __slots__ = (
        "headers",
        "key",
        "leader_epoch",
        "offset",
        "partition",
        "timestamp_ms",
        "timestamp_type",
        "topic",
        "value",
    )


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """A checked batch's decompressed payload and the batch-level values each record takes
    (read once: protobuf field and enum look-ups are slow). ``log_append_ms`` is None when the
    records keep their create time."""

    payload: bytes
    record_count: int
    base_offset: int
    timestamp_type: int
    log_append_ms: int | None
    first_timestamp: int
    leader_epoch: int


def checked_payload(batch: RecordBatch) -> BatchInfo:
    """The batch's payload after the header and CRC checks, decompressed (CorruptMessageError,
    UnsupportedCompressionTypeError)."""
    stored = batch.records
    _check_header(batch, len(stored))
    # The GIL is kept: a ~256 KiB batch takes ~10 µs, and a consumer that let it go would wait up
    # to the interpreter's switch interval (5 ms) to get it back from its I/O thread.
    if batch.crc != _crc(batch, stored, gil_release_mode=0):
        raise CorruptMessageError(
            f"record batch at offset {batch.base_offset} failed its CRC check"
        )
    timestamp_type = int(batch.timestamp_type)
    return BatchInfo(
        payload=decompress(batch.compression, stored, expected_size=batch.uncompressed_size),
        record_count=batch.record_count,
        base_offset=batch.base_offset,
        timestamp_type=timestamp_type,
        log_append_ms=(batch.log_append_time_ms
                       if timestamp_type == _LOG_APPEND_TIME else None),
        first_timestamp=batch.first_timestamp,
        leader_epoch=batch.partition_leader_epoch,
    )


def decode_batch(batch: RecordBatch, slots_cls: type[RecordSlots], record_cls: type[Any], *,
                 topic: str = "", partition: int = -1) -> list[Any]:
    """The batch's records (CRC, counts and offset deltas checked) as ``record_cls`` objects:
    see :func:`decode_payload`."""
    info = checked_payload(batch)
    records = decode_payload(info, slots_cls, record_cls, topic=topic, partition=partition)
    if len(records) != info.record_count:
        raise CorruptMessageError(
            f"batch declares {info.record_count} records but holds {len(records)}"
        )
    return records


def parse_records(payload: bytes) -> list[ParsedRecord]:
    """Decode an uncompressed ``Records`` payload: (timestamp delta, key, value, headers) per
    record, exactly what protobuf's parser gives. CorruptMessageError when the payload is not a
    valid ``Records`` message or a record's offset delta is not its index."""
    info = BatchInfo(payload, -1, 0, 0, None, 0, 0)
    return [(r.timestamp_ms, r.key, r.value, r.headers)
            for r in decode_payload(info, RecordSlots, RecordSlots)]


# Decoding ``Records`` by hand. Reading fields out of protobuf's Record objects costs ~0.6 µs per
# record (each attribute, HasField and the headers container is a call into upb); a Python loop
# over the bytes in the layout RecordsBuilder writes is about twice as fast, and builds each
# record in the same pass (no intermediate object). Anything else -- fields out of order or
# repeated, unknown fields, a malformed or truncated payload, an offset delta that is not the
# record's index -- is left to protobuf's own parser (``_decode_protobuf``), so the result (or the
# CorruptMessageError) is always protobuf's. tests/unit/test_client_decode.py checks that
# equivalence on arbitrary, reordered and corrupted payloads.
_UINT64 = (1 << 64) - 1
_INT64_SIGN = 1 << 63


class _NotCanonical(Exception):
    """The fast decoder met something it leaves to protobuf."""


def decode_payload(info: BatchInfo, slots_cls: type[RecordSlots], record_cls: type[Any], *,
                   topic: str = "", partition: int = -1) -> list[Any]:
    """Decode ``info.payload`` (an uncompressed ``Records`` message): one ``slots_cls()`` object
    per record with every RecordSlots slot filled (offset = base offset + index, timestamp_ms =
    first timestamp + delta or the log append time), then made a ``record_cls`` by assigning
    ``__class__`` (``record_cls`` must have the same slots). Exactly protobuf's reading of the
    payload; CorruptMessageError when it is not a valid ``Records`` message or an offset delta
    is not its record's index. The record count is the caller's to check."""
    try:
        return _decode_fast(info, slots_cls, record_cls, topic, partition)
    except (_NotCanonical, IndexError):
        return _decode_protobuf(info, slots_cls, record_cls, topic, partition)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the varint at ``pos``, as protobuf reads it: at most ten
    bytes, bits above 64 dropped. IndexError past the end."""
    result = 0
    shift = 0
    while shift < 70:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & _UINT64, pos
        shift += 7
    raise _NotCanonical


def _read_headers(buf: bytes, pos: int, end: int) -> tuple[tuple[tuple[str, bytes | None], ...],
                                                           int]:
    """The Header messages (tag 0x2A) from ``pos`` up to ``end``; (headers, position after)."""
    headers: list[tuple[str, bytes | None]] = []
    while pos < end and buf[pos] == 0x2A:
        n, pos = _read_varint(buf, pos + 1)
        hend = pos + n
        if hend > end:
            raise _NotCanonical
        name = ""
        value: bytes | None = None
        if pos < hend and buf[pos] == 0x0A:
            n, pos = _read_varint(buf, pos + 1)
            if pos + n > hend:
                raise _NotCanonical
            try:
                name = buf[pos:pos + n].decode()
            except UnicodeDecodeError:
                raise _NotCanonical from None
            pos += n
        if pos < hend and buf[pos] == 0x12:
            n, pos = _read_varint(buf, pos + 1)
            value = buf[pos:pos + n]
            pos += n
        if pos != hend:
            raise _NotCanonical
        headers.append((name, value))
    return tuple(headers), pos


def _decode_fast(info: BatchInfo, slots_cls: type[RecordSlots], record_cls: type[Any],
                 topic: str, partition: int) -> list[Any]:
    """:func:`decode_payload` for a payload in RecordsBuilder's layout; _NotCanonical or
    IndexError for anything else. Each record: [08 offset_delta] [10 timestamp_delta] [1A key]
    [22 value] [2A header]*, each field at most once and in that order."""
    payload = info.payload
    # A sentinel byte after the payload: the check for an optional field at a record's end reads
    # the next record's tag (0x0A, not a Record field tag) or the sentinel, never past the end.
    # A read into the next record (malformed lengths) leaves pos past the record's end: refused.
    buf = payload + b"\x00"
    size = len(payload)
    base_offset = info.base_offset
    timestamp_type = info.timestamp_type
    leader_epoch = info.leader_epoch
    log_append_ms = info.log_append_ms
    first_ts = info.first_timestamp if log_append_ms is None else log_append_ms
    ts_scale = 1 if log_append_ms is None else 0  # LOG_APPEND_TIME: every record has the same
    out: list[Any] = []
    append = out.append
    read_varint = _read_varint
    new = object.__new__
    pos = 0
    index = 0
    while pos < size:
        if buf[pos] != 0x0A:
            raise _NotCanonical
        n = buf[pos + 1]
        if n < 0x80:
            pos += 2
        else:
            n, pos = read_varint(buf, pos + 1)
        end = pos + n
        if buf[pos] == 0x08:
            delta = buf[pos + 1]
            if delta < 0x80:
                pos += 2
            else:
                high = buf[pos + 2]  # offset deltas 128..16383: two bytes, read inline
                if high < 0x80:
                    delta = (delta & 0x7F) | high << 7
                    pos += 3
                else:
                    delta, pos = read_varint(buf, pos + 1)
            if delta != index:
                raise _NotCanonical  # int32 wrap-around or a corrupt batch: protobuf decides
        elif index:
            raise _NotCanonical
        r: Any = new(slots_cls)
        if buf[pos] == 0x10:
            ts = buf[pos + 1]
            if ts < 0x80:
                pos += 2
            else:
                ts, pos = read_varint(buf, pos + 1)
                if ts >= _INT64_SIGN:
                    ts -= 1 << 64
            r.timestamp_ms = first_ts + ts * ts_scale
        else:
            r.timestamp_ms = first_ts
        if buf[pos] == 0x1A:
            n = buf[pos + 1]
            if n < 0x80:
                pos += 2
            else:
                n, pos = read_varint(buf, pos + 1)
            r.key = buf[pos:pos + n]
            pos += n
        else:
            r.key = None
        if buf[pos] == 0x22:
            n = buf[pos + 1]
            if n < 0x80:
                pos += 2
            else:
                n, pos = read_varint(buf, pos + 1)
            r.value = buf[pos:pos + n]
            pos += n
        else:
            r.value = None
        if buf[pos] == 0x2A:
            r.headers, pos = _read_headers(buf, pos, end)
        else:
            r.headers = ()
        if pos != end:
            raise _NotCanonical
        r.topic = topic
        r.partition = partition
        r.offset = base_offset + index
        r.timestamp_type = timestamp_type
        r.leader_epoch = leader_epoch
        r.__class__ = record_cls
        append(r)
        index += 1
    if pos != size:
        raise _NotCanonical
    return out


def _decode_protobuf(info: BatchInfo, slots_cls: type[RecordSlots], record_cls: type[Any],
                     topic: str, partition: int) -> list[Any]:
    """:func:`decode_payload` through protobuf's parser (any valid encoding; the reference)."""
    try:
        records = Records.FromString(info.payload).records
    except DecodeError as e:
        raise CorruptMessageError(f"records payload is not a valid Records message: {e}") from None
    out: list[Any] = []
    for index, rec in enumerate(records):
        if rec.offset_delta != index:
            raise CorruptMessageError(
                f"record {index} of batch at offset {info.base_offset} has offset_delta "
                f"{rec.offset_delta}")
        r: Any = object.__new__(slots_cls)
        r.topic = topic
        r.partition = partition
        r.offset = info.base_offset + index
        r.timestamp_ms = (info.first_timestamp + rec.timestamp_delta
                          if info.log_append_ms is None else info.log_append_ms)
        r.timestamp_type = info.timestamp_type
        r.key = rec.key if rec.HasField("key") else None
        r.value = rec.value if rec.HasField("value") else None
        r.headers = tuple((h.key, h.value if h.HasField("value") else None)
                          for h in rec.headers)
        r.leader_epoch = info.leader_epoch
        r.__class__ = record_cls
        out.append(r)
    return out


# --- the leader's record check --------------------------------------------------------------
# DESIGN §4: the leader checks "record framing where a wrong record would poison readers" and
# never materialises records. A batch whose CRC is valid but whose records do not decode would
# otherwise be stored and replicated, and every consumer (and the log cleaner) would fail on it.
# A walk over the bytes in Python costs ~1 µs per record here; protobuf's parser (C) does it in
# ~100 ns. One parse, through a message that keeps only each record's offset_delta and headers
# (its other fields are skipped as unknown, with the same wire checks), serialized again without
# the unknown fields, is compared with the serialization of offset deltas 0, 1, 2...; a batch
# with headers, or one that fails, is parsed as Records too, which says what is wrong.
# Protobuf's parser decides, so a payload passes exactly when decode_payload (whose fast path
# matches protobuf, tests/unit/test_client_decode.py) reads ``record_count`` records from it
# (tests/unit/test_record_framing.py). Batches of more than _PARSE_RECORDS_MAX records are
# walked in Python (_walk_records), so that no one call holds the GIL long; the walk also
# explains refusals.
# This is the function to rewrite for Kafka's v2 format (issue 29): varint-framed records, no
# protobuf, so a walk like _walk_records (or C) does the work there.


def validate_records(batch: RecordBatch, *, find_keyless: bool = False) -> int:
    """The leader's check of a batch's records, after :func:`validate_header`: the CRC, the
    payload decompressed (never beyond its declared size) and its framing
    (:func:`check_record_framing`). Returns what that returns. CorruptMessageError naming what
    is wrong. Safe off the event loop: a pure function of ``batch`` (crc32c and the
    decompressors release the GIL on large inputs; protobuf's parser holds it ~0.1 µs per
    record, and parses batches of at most _PARSE_RECORDS_MAX records)."""
    stored = batch.records
    _check_crc(batch, stored)
    payload = decompress(batch.compression, stored, expected_size=batch.uncompressed_size)
    return check_record_framing(payload, batch.record_count, find_keyless=find_keyless)


def check_record_framing(payload: bytes, record_count: int, *, find_keyless: bool = False
                         ) -> int:
    """Check an uncompressed ``Records`` payload without building records: exactly
    ``record_count`` records that decode, with offset deltas 0, 1, 2... CorruptMessageError
    names the record and what is wrong with it. With ``find_keyless`` (compacted topics), the
    index of the first record without a key (-1: every record has one); else -1."""
    if record_count > _PARSE_RECORDS_MAX:
        # Protobuf's parser would hold the GIL for the whole batch (~90 ns per record: 45 ms
        # for 500,000), and with it every other thread, the event loop first. The walk is
        # slower (~1 µs per record) but Python code: other threads get the GIL every 5 ms.
        try:
            keyless = _walk_records(payload, record_count)
            return keyless if find_keyless else -1
        except _NotCanonical:
            pass  # not RecordsBuilder's layout: protobuf decides, as the consumers' decoder does
    if not find_keyless:
        if _offsets_are_indexes(payload, record_count):
            return -1
        # Headers, or a count or an offset that is wrong: the whole check says which.
        _checked_message(payload, record_count)
        return -1
    message = _checked_message(payload, record_count)
    # Every record has a key when the payload holds as many keys as records and none twice:
    # protobuf's own serialization of what it parsed is exactly as long as the payload only
    # when no field is repeated (nor padded, nor an explicit default), and _RecordsKeys
    # counts every key field of every record. Otherwise find the keyless one record by record.
    if (len(_RecordsKeys.FromString(payload).records.key) == record_count
            and message.ByteSize() == len(payload)):
        return -1
    return next((i for i, r in enumerate(message.records) if not r.HasField("key")), -1)


def checked_records(batch: RecordBatch, *, sliced: bool = True) -> Iterator[Any]:
    """A batch's records as protobuf ``Record`` messages (parsed in C, each read on access: no
    Python object per record until then), after the checks of :func:`validate_records`
    (CorruptMessageError). For the broker's own reads of many records (the log cleaner);
    :func:`to_consumer_record` makes one a ConsumerRecord, as :func:`decode_records` would.
    ``sliced`` (off the event loop): a batch of more than _PARSE_RECORDS_MAX records is walked
    first and parsed a slice of that many records at a time, so no one call holds the GIL long
    (on the loop one parse costs it less)."""
    stored = batch.records
    _check_crc(batch, stored)
    payload = decompress(batch.compression, stored, expected_size=batch.uncompressed_size)
    count = batch.record_count
    if sliced and count > _PARSE_RECORDS_MAX:
        marks: list[int] = []
        try:
            _walk_records(payload, count, marks)
        except _NotCanonical:
            pass  # protobuf decides, in one call
        else:
            marks.append(len(payload))
            return itertools.chain.from_iterable(
                Records.FromString(payload[start:end]).records
                for start, end in itertools.pairwise(marks))
    return iter(_checked_message(payload, count).records)


def to_consumer_record(batch: RecordBatch, index: int, record: Any) -> ConsumerRecord:
    """Record ``index`` of ``batch`` (a ``Record`` of :func:`checked_records`) as
    :func:`decode_records` gives it."""
    timestamp_type = int(batch.timestamp_type)
    return ConsumerRecord(
        offset=batch.base_offset + index,
        timestamp_ms=(batch.log_append_time_ms if timestamp_type == _LOG_APPEND_TIME
                      else batch.first_timestamp + record.timestamp_delta),
        timestamp_type=timestamp_type,
        key=record.key if record.HasField("key") else None,
        value=record.value if record.HasField("value") else None,
        headers=tuple((h.key, h.value if h.HasField("value") else None)
                      for h in record.headers),
        leader_epoch=batch.partition_leader_epoch)


def _checked_message(payload: bytes, record_count: int) -> Records:
    """``payload`` parsed, with exactly ``record_count`` records whose offset deltas are their
    indexes (see the section's comment); CorruptMessageError otherwise."""
    try:
        message: Records = Records.FromString(payload)
    except DecodeError as e:
        raise CorruptMessageError(_why_undecodable(payload, record_count, e)) from None
    records = message.records
    if len(records) != record_count:
        raise CorruptMessageError(
            f"the batch declares {record_count} records but its payload holds {len(records)}")
    offsets = _RecordOffsets.FromString(payload)
    offsets.DiscardUnknownFields()  # every field of a record but its offset_delta
    if not _offset_deltas_encoding(record_count).startswith(offsets.SerializeToString()):
        index = next(i for i, r in enumerate(records) if r.offset_delta != i)
        raise CorruptMessageError(f"record {index} has offset_delta "
                                  f"{records[index].offset_delta} (must be its index)")
    return message


def _offsets_are_indexes(payload: bytes, record_count: int) -> bool:
    """Whether ``payload`` parses, holds ``record_count`` records, none with headers, and
    their offset deltas are 0, 1, 2...: one parse, through _RecordHeadersOffsets, which reads
    what Record does (its key, value and timestamp as unknown fields, skipped as protobuf skips
    them: the same wire checks; its headers as Headers: the same UTF-8 check), and so refuses
    exactly what Record's parse refuses. A parse through Records as well would cost twice."""
    try:
        offsets = _RecordHeadersOffsets.FromString(payload)
    except DecodeError:
        return False
    if len(offsets.records) != record_count:
        return False
    offsets.DiscardUnknownFields()
    return _offset_deltas_encoding(record_count).startswith(offsets.SerializeToString())


def _check_classes() -> tuple[type[Any], type[Any], type[Any]]:
    """Messages read from the same bytes as ``Records``: _RecordOffsets keeps only each record's
    offset_delta (``int32``, as Record's, so protobuf's truncation and wire-type rules are the
    same); _RecordHeadersOffsets its offset_delta and headers; _RecordsKeys reads every record
    into ONE message (a singular message field seen again is merged into it), whose repeated
    ``key`` then lists every key field of the payload, in C."""
    types = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="tidelog/record_checks.proto",
                                              package="tidelog.check", syntax="proto3")
    file.message_type.add(name="RecordOffset").field.add(
        name="offset_delta", number=1, type=types.TYPE_INT32, label=types.LABEL_OPTIONAL)
    file.message_type.add(name="RecordOffsets").field.add(
        name="records", number=1, type=types.TYPE_MESSAGE, label=types.LABEL_REPEATED,
        type_name=".tidelog.check.RecordOffset")
    header = file.message_type.add(name="Header")  # common.proto's, for its UTF-8 check
    header.field.add(name="key", number=1, type=types.TYPE_STRING, label=types.LABEL_OPTIONAL)
    header.field.add(name="value", number=2, type=types.TYPE_BYTES, label=types.LABEL_OPTIONAL)
    with_headers = file.message_type.add(name="RecordHeadersOffset")
    with_headers.field.add(name="offset_delta", number=1, type=types.TYPE_INT32,
                           label=types.LABEL_OPTIONAL)
    with_headers.field.add(name="headers", number=5, type=types.TYPE_MESSAGE,
                           label=types.LABEL_REPEATED, type_name=".tidelog.check.Header")
    file.message_type.add(name="RecordHeadersOffsets").field.add(
        name="records", number=1, type=types.TYPE_MESSAGE, label=types.LABEL_REPEATED,
        type_name=".tidelog.check.RecordHeadersOffset")
    file.message_type.add(name="AllKeys").field.add(
        name="key", number=3, type=types.TYPE_BYTES, label=types.LABEL_REPEATED)
    file.message_type.add(name="RecordsKeys").field.add(
        name="records", number=1, type=types.TYPE_MESSAGE, label=types.LABEL_OPTIONAL,
        type_name=".tidelog.check.AllKeys")
    classes = message_factory.GetMessages([file], pool=descriptor_pool.DescriptorPool())
    return (classes["tidelog.check.RecordOffsets"], classes["tidelog.check.RecordHeadersOffsets"],
            classes["tidelog.check.RecordsKeys"])


_RecordOffsets, _RecordHeadersOffsets, _RecordsKeys = _check_classes()
#: Batches of more records are walked in Python rather than parsed by protobuf in one call
#: (which holds the GIL throughout): ~6 ms of protobuf at most.
_PARSE_RECORDS_MAX = 65_536
#: The serialization of _RecordOffsets for offset deltas 0, 1, 2... (record 0's is proto3's
#: absent zero), built at first use for _PARSE_RECORDS_MAX records (~3 ms), then for
#: BATCH_RECORDS_MAX (~6 MB, ~50 ms) if a batch needs it; (bytes, records) assigned whole, so
#: threads may share it (two building it at once each get a right one).
_offset_deltas: tuple[bytes, int] = (b"", 0)
_VARINT_BYTES_MAX = 3  # offset deltas below 2**21: at most three varint bytes
assert limits.BATCH_RECORDS_MAX <= 1 << (7 * _VARINT_BYTES_MAX)


def _offset_deltas_encoding(record_count: int) -> bytes:
    """At least ``record_count`` records' worth of the expected offsets serialization."""
    global _offset_deltas
    if _offset_deltas[1] < record_count:
        count = (_PARSE_RECORDS_MAX if record_count <= _PARSE_RECORDS_MAX
                 else limits.BATCH_RECORDS_MAX)
        _offset_deltas = (_build_offset_deltas(count), count)
    return _offset_deltas[0]


def _build_offset_deltas(count: int) -> bytes:
    """``0a 00``, then for each i in 1..count-1: ``0a <n+1> 08 <varint i, n bytes>``. Built a
    column at a time (bytes repeated and sliced, in C) rather than record by record in Python,
    which took 0.4 s for 500,000."""
    parts = [b"\x0a\x00"]
    for width in range(1, _VARINT_BYTES_MAX + 1):
        first, end = max(1, 1 << (7 * (width - 1))), min(count, 1 << (7 * width))
        n = end - first
        if n <= 0:
            continue
        size = 3 + width
        column = bytearray(size * n)
        column[0::size] = b"\x0a" * n
        column[1::size] = bytes((1 + width,)) * n
        column[2::size] = b"\x08" * n
        for k in range(width):  # varint byte k of i is (i >> 7k) & 0x7F, high bit unless last
            flag = 0x80 if k < width - 1 else 0
            repeat = 1 << (7 * k)  # each value of byte k lasts this many consecutive i
            cycle = b"".join(bytes((flag | j,)) * repeat for j in range(128))
            start = (first >> (7 * k)) % 128 * repeat + first % repeat
            column[3 + k::size] = (cycle * (n // len(cycle) + 2))[start:start + n]
        parts.append(bytes(column))
    return b"".join(parts)


def _why_undecodable(payload: bytes, record_count: int, error: DecodeError) -> str:
    """What a payload protobuf refused has wrong, as precisely as the walk can say."""
    try:
        _walk_records(payload, record_count)
    except (_NotCanonical, CorruptMessageError) as stop:
        return f"the batch's records do not decode: {stop} (protobuf: {error})"
    return f"the batch's records do not decode (protobuf: {error})"


def _walk_records(payload: bytes, record_count: int, marks: list[int] | None = None) -> int:
    """Walk a payload in RecordsBuilder's layout (_decode_fast's fields, in its order, so what
    it accepts _decode_fast decodes) without building records: the index of its first record
    without a key (-1: none); raises, saying where, at the first thing that is not that layout
    (_NotCanonical: protobuf decides) or cannot be (CorruptMessageError). Also explains
    protobuf's refusals, which say only that it failed. ``marks`` gets the byte offset of
    every _PARSE_RECORDS_MAX-th record, from record 0."""
    buf = payload + b"\x00"  # a sentinel, as in _decode_fast
    size = len(payload)
    read_varint = _read_varint
    pos = index = 0
    keyless = -1
    mark = 0 if marks is not None else -1
    try:
        while pos < size:
            if buf[pos] != 0x0A:
                raise _NotCanonical(f"record {index} starts with tag {buf[pos]:#04x} (byte {pos})")
            if index == record_count:  # a record, or no Records message at all
                raise CorruptMessageError(
                    f"the batch declares {record_count} records but its payload holds more")
            if index == mark and marks is not None:
                marks.append(pos)
                mark += _PARSE_RECORDS_MAX
            n = buf[pos + 1]
            if n < 0x80:
                pos += 2
            else:
                n, pos = read_varint(buf, pos + 1)
            end = pos + n
            if end > size:
                raise _NotCanonical(f"record {index}'s length {n} runs past the payload's end")
            if buf[pos] == 0x08:
                delta = buf[pos + 1]
                if delta < 0x80:
                    pos += 2
                else:
                    delta, pos = read_varint(buf, pos + 1)
                if delta != index:
                    raise _NotCanonical(f"record {index} has offset_delta {delta}")
            elif index:
                raise _NotCanonical(f"record {index} has no offset_delta")
            if buf[pos] == 0x10:
                pos = pos + 2 if buf[pos + 1] < 0x80 else read_varint(buf, pos + 1)[1]
            if buf[pos] == 0x1A:
                n = buf[pos + 1]
                if n < 0x80:
                    pos += 2 + n
                else:
                    n, pos = read_varint(buf, pos + 1)
                    pos += n
                if pos > end:
                    raise _NotCanonical(f"record {index}'s key runs past the record's end")
            elif keyless < 0:
                keyless = index
            if buf[pos] == 0x22:
                n = buf[pos + 1]
                if n < 0x80:
                    pos += 2 + n
                else:
                    n, pos = read_varint(buf, pos + 1)
                    pos += n
                if pos > end:
                    raise _NotCanonical(f"record {index}'s value runs past the record's end")
            if buf[pos] == 0x2A:
                pos = _read_headers(buf, pos, end)[1]
            if pos != end:
                raise _NotCanonical(f"record {index} has an unknown or misplaced field at byte "
                                    f"{pos}")
            index += 1
    except IndexError:
        raise _NotCanonical(f"the payload ends inside record {index}") from None
    except _NotCanonical as stop:
        if stop.args:
            raise
        raise _NotCanonical(f"record {index} has a malformed varint or header") from None
    if index != record_count:
        raise CorruptMessageError(
            f"the batch declares {record_count} records but its payload holds {index}")
    return keyless
