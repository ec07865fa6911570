"""Hypothesis strategies for test_fuzz_rpcs.py: request bytes for any protobuf message type.

Everything is built from the message descriptors, so a new field or a new RPC is fuzzed without
editing this file. What :func:`payloads` draws for one request:

- a *valid envelope*: the message built field by field (:func:`messages`) and serialized. Ints
  come from the type's boundaries (0, -1, 2^31-1, -2^31, 2^63-1, ...), small values and values
  the cluster knows (``Pools``: broker and controller ids, topic names and ids, the cluster id),
  so a request can name a real partition with a wrong epoch, offset or size and reach deep into
  a handler; strings and bytes from the pools, random text and bytes; repeated fields of random,
  bounded length; record batches (fields named ``batch``/``batches``/``records``) valid ones from
  tidelog.record_batch, with bit flips, truncation or header fields rewritten (with or without a
  recomputed CRC, so a wrong count or size can pass the checksum);
- that envelope truncated, or with bits flipped, bytes inserted or deleted;
- random bytes, or nothing.

Broker epochs are drawn only from values no registration ever gets (boundaries, >= 10^9): an
authenticated fuzzer that guessed a real epoch could legitimately ask the controllers to shut a
broker down, which is not a bug.
"""

from __future__ import annotations

import contextlib
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import strategies as st

from tidelog import limits
from tidelog.record_batch import NewRecord, batch_crc, build_batch
from tidelog.v1.common_pb2 import CompressionType, RecordBatch

__all__ = ["Pools", "messages", "payloads"]

#: Bounds on what one drawn request may hold (a fuzzer that builds huge requests tests nothing
#: more and is slow).
REPEATED_MAX = 4
DEPTH_MAX = 4
RANDOM_BYTES_MAX = 256
#: Broker epochs are metadata offsets: a fresh test cluster never gets near this.
EPOCH_NEVER_MIN = 10**9

_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_BOUNDARIES = (0, -1, 1, 2**31 - 1, -(2**31), 2**31, 2**63 - 1, -(2**63), 2**32 - 1)
_BATCH_FIELDS = frozenset({"batch", "batches", "records"})
_CODECS = (CompressionType.COMPRESSION_NONE, CompressionType.COMPRESSION_GZIP,
           CompressionType.COMPRESSION_LZ4, CompressionType.COMPRESSION_ZSTD)


@dataclass
class Pools:
    """Values the cluster knows, so drawn requests can name real things wrongly."""

    ints: list[int] = field(default_factory=list)      # broker and controller ids
    strings: list[str] = field(default_factory=list)   # topic names, cluster id, config names...
    blobs: list[bytes] = field(default_factory=list)   # topic ids


def _ints(f: FieldDescriptor, pools: Pools) -> st.SearchStrategy[int]:
    low, high = _INT_RANGES[f.type]
    if "broker_epoch" in f.name:
        never = [v for v in _BOUNDARIES if low <= v <= high and v not in (1, 2**31)]
        return st.one_of(st.sampled_from(never), st.integers(EPOCH_NEVER_MIN, high))
    boundaries = [v for v in _BOUNDARIES if low <= v <= high]
    known = [v for v in pools.ints if low <= v <= high]
    return st.one_of(st.sampled_from(boundaries), st.integers(max(low, -3), min(high, 20)),
                     st.sampled_from(known or boundaries), st.integers(low, high))


def _strings(pools: Pools) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(pools.strings or [""]),
                     st.sampled_from(["", ".", "..", "a" * 250, "ü名\x00\n", "-1", "2"]),
                     st.text(max_size=24))


def _enum_values(f: FieldDescriptor) -> st.SearchStrategy[int]:
    known = [v.number for v in f.enum_type.values]
    return st.one_of(st.sampled_from(known), st.sampled_from([-1, 99, 2**31 - 1]))


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    """A record batch as a producer would send it, then (usually) broken in one way."""
    values = draw(st.lists(st.binary(max_size=40), min_size=1, max_size=5))
    idempotent = draw(st.booleans())
    data = build_batch(
        [NewRecord(None, v) for v in values], now_ms=int(time.time() * 1000),
        compression=draw(st.sampled_from(_CODECS)),
        producer_id=draw(st.sampled_from([0, 1, 1000, 2**62])) if idempotent else -1,
        producer_epoch=draw(st.sampled_from([0, 1, 32767])) if idempotent else -1,
        base_sequence=draw(st.sampled_from([0, 5, 2**31 - 1])) if idempotent else -1)
    how = draw(st.sampled_from(["valid", "flip", "truncate", "header", "header+crc", "huge"]))
    if how == "flip":
        return _flip(data, draw(st.integers(0, len(data) * 8 - 1)))
    if how == "truncate":
        return data[:draw(st.integers(0, len(data) - 1))]
    if how in ("header", "header+crc"):
        batch = RecordBatch.FromString(data)
        name = draw(st.sampled_from(["base_offset", "record_count", "uncompressed_size",
                                     "first_timestamp", "max_timestamp", "compression",
                                     "partition_leader_epoch", "timestamp_type"]))
        f = RecordBatch.DESCRIPTOR.fields_by_name[name]
        value = draw(_enum_values(f) if f.type == FieldDescriptor.TYPE_ENUM
                     else _ints(f, Pools()))
        setattr(batch, name, value)
        if how == "header+crc":
            # The CRC packs compression and timestamp type in a byte: a value beyond it keeps
            # the old CRC (then the checksum is what is wrong).
            with contextlib.suppress(struct.error):
                batch.crc = batch_crc(batch)
        return batch.SerializeToString()
    if how == "huge":  # one record above the default max.message.bytes
        return build_batch([NewRecord(None, b"\x00" * limits.MESSAGE_BYTES_MAX)],
                           now_ms=0, max_bytes=limits.GRPC_MESSAGE_BYTES_MAX)
    return data


def _bytes(f: FieldDescriptor, pools: Pools) -> st.SearchStrategy[bytes]:
    plain = st.one_of(st.sampled_from(pools.blobs or [b""]),
                      st.sampled_from([b"", b"\x00" * 16, b"\xff" * 16]),
                      st.binary(max_size=64))
    if f.name in _BATCH_FIELDS:
        return st.one_of(batches(), plain)
    return plain


def _value(draw: st.DrawFn, f: FieldDescriptor, pools: Pools, depth: int) -> Any:
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        return draw(messages(f.message_type, pools, depth + 1))
    if f.type == FieldDescriptor.TYPE_ENUM:
        return draw(_enum_values(f))
    if f.type == FieldDescriptor.TYPE_BOOL:
        return draw(st.booleans())
    if f.type == FieldDescriptor.TYPE_STRING:
        return draw(_strings(pools))
    if f.type == FieldDescriptor.TYPE_BYTES:
        return draw(_bytes(f, pools))
    if f.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return draw(st.floats(allow_nan=True, width=32))
    return draw(_ints(f, pools))


@st.composite
def messages(draw: st.DrawFn, descriptor: Descriptor, pools: Pools, depth: int = 0) -> Any:
    """An instance of ``descriptor``'s message with a random subset of its fields set."""
    message = message_factory.GetMessageClass(descriptor)()
    if depth >= DEPTH_MAX:
        return message
    for f in descriptor.fields:
        if not draw(st.booleans()):
            continue
        if f.is_repeated:
            count = draw(st.integers(0, REPEATED_MAX))
            values = [_value(draw, f, pools, depth) for _ in range(count)]
            target = getattr(message, f.name)
            for v in values:
                if f.type == FieldDescriptor.TYPE_MESSAGE:
                    target.add().CopyFrom(v)
                else:
                    target.append(v)
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(message, f.name).CopyFrom(_value(draw, f, pools, depth))
        else:
            setattr(message, f.name, _value(draw, f, pools, depth))
    return message


def _flip(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


@st.composite
def payloads(draw: st.DrawFn, descriptor: Descriptor, pools: Pools) -> tuple[str, bytes, str]:
    """(kind, request bytes, a short description to report) for a request of ``descriptor``."""
    kind = draw(st.sampled_from(["valid", "valid", "valid", "truncated", "mutated", "random",
                                 "empty"]))
    if kind == "random":
        data = draw(st.binary(min_size=1, max_size=RANDOM_BYTES_MAX))
        return kind, data, data[:48].hex()
    if kind == "empty":
        return kind, b"", ""
    message = draw(messages(descriptor, pools))
    data = message.SerializeToString()
    text = str(message).replace("\n", " ")[:300]
    if kind == "truncated" and data:
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif kind == "mutated" and data:
        how = draw(st.sampled_from(["flip", "insert", "delete"]))
        at = draw(st.integers(0, len(data) - 1))
        if how == "flip":
            data = _flip(data, at * 8 + draw(st.integers(0, 7)))
        elif how == "insert":
            data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
        else:
            data = data[:at] + data[at + 1:]
    return kind, data, text
