"""Record batches: build (producers), validate and stamp (brokers), decode (consumers).

A batch is a ``RecordBatch`` protobuf message (proto/tidelog/v1/common.proto): a header plus an
opaque ``records`` payload, the serialized ``Records`` message compressed as a whole. The broker's
hot path is :func:`validate_batch` then :func:`assign`: it checks sizes, counts and the CRC-32C and
writes the three fields the leader owns (base offset, leader epoch, append time), without ever
decoding a record. Consumers call :func:`decode_records`.

The CRC covers every field the producer sets (the layout is in common.proto), so the leader's own
fields can be rewritten without recomputing it, as in Kafka.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import crc32c
from google.protobuf.message import DecodeError

from tidelog import limits
from tidelog.compression import compress, decompress
from tidelog.errors import (
    CorruptMessageError,
    InvalidRecordError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
)
from tidelog.v1.common_pb2 import (
    CompressionType,
    RecordBatch,
    Records,
    TimestampType,
)

__all__ = [
    "ConsumerRecord",
    "NewRecord",
    "RecordBatch",
    "assign",
    "batch_crc",
    "build_batch",
    "decode_record_fields",
    "decode_records",
    "last_offset",
    "next_offset",
    "parse_batch",
    "validate_batch",
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
    return int(crc32c.crc32c(batch.records, value=crc32c.crc32c(header)))


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
    payload, count, first_ts, max_ts = _encode_records(records, now_ms)
    batch = RecordBatch(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=count,
        first_timestamp=first_ts,
        max_timestamp=max_ts,
        compression=compression,  # type: ignore[arg-type]
        timestamp_type=TimestampType.CREATE_TIME,
        uncompressed_size=len(payload),
        records=compress(compression, payload),
    )
    batch.crc = batch_crc(batch)
    data: bytes = batch.SerializeToString()
    if len(data) > max_bytes:
        raise MessageTooLargeError(
            f"batch of {count} records is {len(data)} bytes, above the limit of {max_bytes}"
        )
    return data


def _encode_records(records: Iterable[NewRecord], now_ms: int) -> tuple[bytes, int, int, int]:
    """Serialize records; returns (payload, count, first timestamp, max timestamp)."""
    message = Records()
    first_ts = max_ts = 0
    count = 0
    for i, new in enumerate(records):
        ts = now_ms if new.timestamp_ms is None else new.timestamp_ms
        if ts < 0:
            raise InvalidRecordError(f"record {i} has a negative timestamp {ts}")
        if count == 0:
            first_ts = max_ts = ts
        max_ts = max(max_ts, ts)
        if len(new.headers) > limits.RECORD_HEADERS_MAX:
            raise InvalidRecordError(
                f"record {i} has {len(new.headers)} headers (limit {limits.RECORD_HEADERS_MAX})"
            )
        rec = message.records.add()
        rec.offset_delta = i
        rec.timestamp_delta = ts - first_ts
        if new.key is not None:
            rec.key = new.key
        if new.value is not None:
            rec.value = new.value
        for name, value in new.headers:
            h = rec.headers.add()
            h.key = name
            if value is not None:
                h.value = value
        count += 1
    if count == 0:
        raise InvalidRecordError("a batch needs at least one record")
    if count > limits.BATCH_RECORDS_MAX:
        raise InvalidRecordError(f"batch has {count} records (limit {limits.BATCH_RECORDS_MAX})")
    payload: bytes = message.SerializeToString()
    return payload, count, first_ts, max_ts


def parse_batch(data: bytes) -> RecordBatch:
    """Parse the header (the payload stays opaque). CorruptMessageError on malformed bytes."""
    try:
        batch: RecordBatch = RecordBatch.FromString(data)
    except DecodeError as e:
        raise CorruptMessageError(f"record batch is not a valid RecordBatch message: {e}") from None
    return batch


def validate_batch(data: bytes, *, max_bytes: int = limits.MESSAGE_BYTES_MAX) -> RecordBatch:
    """The broker's check of an incoming batch: size, structure and CRC, without decoding records.

    Raises MessageTooLargeError (size), CorruptMessageError (structure or CRC) or
    UnsupportedCompressionTypeError; returns the parsed header on success.
    """
    if len(data) > max_bytes:
        raise MessageTooLargeError(
            f"record batch is {len(data)} bytes, above max.message.bytes {max_bytes}"
        )
    batch = parse_batch(data)
    _check_header(batch)
    expected = batch_crc(batch)
    if batch.crc != expected:
        raise CorruptMessageError(
            f"record batch CRC mismatch: header says {batch.crc:#010x}, content gives "
            f"{expected:#010x}"
        )
    return batch


def _check_header(batch: RecordBatch) -> None:
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
    if batch.compression == CompressionType.COMPRESSION_NONE and batch.uncompressed_size != len(
        batch.records
    ):
        raise CorruptMessageError(
            f"uncompressed batch declares {batch.uncompressed_size} bytes but holds "
            f"{len(batch.records)}"
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
    if batch.base_sequence < -1 or batch.base_sequence + batch.record_count - 1 > _INT32_MAX:
        raise CorruptMessageError(
            f"record batch base_sequence {batch.base_sequence} is out of range"
        )


def assign(
    batch: RecordBatch, *, base_offset: int, leader_epoch: int, log_append_time_ms: int
) -> bytes:
    """Write the leader-owned fields into ``batch`` and return its serialized bytes.

    These fields are outside the CRC, so the producer's checksum stays valid.
    """
    assert base_offset >= 0, base_offset
    assert leader_epoch >= 0, leader_epoch
    batch.base_offset = base_offset
    batch.partition_leader_epoch = leader_epoch
    batch.log_append_time_ms = log_append_time_ms
    data: bytes = batch.SerializeToString()
    return data


_LOG_APPEND_TIME = int(TimestampType.LOG_APPEND_TIME)


def decode_records(batch: RecordBatch) -> list[ConsumerRecord]:
    """Decompress and decode a batch's records (consumers). Verifies CRC and counts first."""
    return [ConsumerRecord(*fields) for fields in decode_record_fields(batch)]


#: A decoded record's fields, in ConsumerRecord's order: offset, timestamp_ms, timestamp_type,
#: key, value, headers, leader_epoch.
RecordFields = tuple[int, int, int, "bytes | None", "bytes | None",
                     "tuple[tuple[str, bytes | None], ...]", int]


def decode_record_fields(batch: RecordBatch) -> list[RecordFields]:
    """:func:`decode_records` as tuples (the client builds its own record type from them without
    an intermediate object). Verifies CRC, counts and offset deltas."""
    _check_header(batch)
    if batch.crc != batch_crc(batch):
        raise CorruptMessageError(
            f"record batch at offset {batch.base_offset} failed its CRC check"
        )
    payload = decompress(batch.compression, batch.records, expected_size=batch.uncompressed_size)
    try:
        records = Records.FromString(payload).records
    except DecodeError as e:
        raise CorruptMessageError(f"records payload is not a valid Records message: {e}") from None
    if len(records) != batch.record_count:
        raise CorruptMessageError(
            f"batch declares {batch.record_count} records but holds {len(records)}"
        )
    # Batch-level values once, not per record (protobuf field and enum look-ups are slow).
    base_offset = batch.base_offset
    timestamp_type = batch.timestamp_type
    log_append_ms = (batch.log_append_time_ms
                     if timestamp_type == _LOG_APPEND_TIME else None)
    first_ts = batch.first_timestamp
    leader_epoch = batch.partition_leader_epoch
    out: list[RecordFields] = []
    for index, rec in enumerate(records):
        if rec.offset_delta != index:
            raise CorruptMessageError(
                f"record {index} of batch at offset {base_offset} has offset_delta "
                f"{rec.offset_delta}"
            )
        out.append((
            base_offset + index,
            log_append_ms if log_append_ms is not None else first_ts + rec.timestamp_delta,
            timestamp_type,
            rec.key if rec.HasField("key") else None,
            rec.value if rec.HasField("value") else None,
            tuple((h.key, h.value if h.HasField("value") else None) for h in rec.headers)
            if rec.headers else (),
            leader_epoch,
        ))
    return out
