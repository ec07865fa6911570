"""The adapter's snapshot file (log compaction): encode and decode, with a CRC. Pure.

pysyncobj writes and reads snapshots through ``SyncObjConf(serializer=, deserializer=)``, which
quorum.py points at this format instead of pysyncobj's own gzipped pickle: a header (magic,
version, last/prev index, last/prev term), the two Raft entries pysyncobj needs, the cluster's
addresses, and ``StateMachine.snapshot()`` bytes, with a CRC-32 checked on read. pysyncobj
pickles no attributes when a custom serializer is set. A file that fails a check raises
SnapshotCorruptError; the quorum then stops instead of carrying on from an empty state machine.
"""

from __future__ import annotations

import struct
import zlib

_SNAPSHOT_MAGIC = b"TLRAFTSN"
_SNAPSHOT_FORMAT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct("<8sIQQQQ")  # magic, version, last/prev index, last/prev term
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class SnapshotCorruptError(Exception):
    """A snapshot file failed its magic, version, length or CRC check."""


def _encode_snapshot(last_entry: tuple[bytes, int, int], prev_entry: tuple[bytes, int, int],
                     cluster: list[str], state: bytes) -> bytes:
    """Layout: header (magic, version, last/prev index, last/prev term), then u32-length-prefixed
    last and prev entry commands and the '\\n'-joined cluster addresses, then u64-length-prefixed
    state, then CRC-32 (zlib) of everything before it."""
    assert last_entry[1] == prev_entry[1] + 1, (last_entry[1], prev_entry[1])
    cluster_bytes = "\n".join(cluster).encode()
    parts = [
        _SNAPSHOT_HEADER.pack(_SNAPSHOT_MAGIC, _SNAPSHOT_FORMAT_VERSION, last_entry[1],
                              prev_entry[1], last_entry[2], prev_entry[2]),
        _U32.pack(len(last_entry[0])), bytes(last_entry[0]),
        _U32.pack(len(prev_entry[0])), bytes(prev_entry[0]),
        _U32.pack(len(cluster_bytes)), cluster_bytes,
        _U64.pack(len(state)), state,
    ]
    body = b"".join(parts)
    return body + _U32.pack(zlib.crc32(body))


def _decode_snapshot(
    data: bytes,
) -> tuple[tuple[bytes, int, int], tuple[bytes, int, int], list[str], bytes]:
    if len(data) < _SNAPSHOT_HEADER.size + _U32.size:
        raise SnapshotCorruptError(f"snapshot of {len(data)} bytes is too short")
    body, (crc,) = data[:-_U32.size], _U32.unpack(data[-_U32.size:])
    if zlib.crc32(body) != crc:
        raise SnapshotCorruptError("snapshot CRC mismatch")
    magic, version, last_index, prev_index, last_term, prev_term = \
        _SNAPSHOT_HEADER.unpack_from(body, 0)
    if magic != _SNAPSHOT_MAGIC or version != _SNAPSHOT_FORMAT_VERSION:
        raise SnapshotCorruptError(f"not a snapshot of format {_SNAPSHOT_FORMAT_VERSION}")
    offset = _SNAPSHOT_HEADER.size
    fields: list[bytes] = []
    for prefix in (_U32, _U32, _U32, _U64):
        (length,) = prefix.unpack_from(body, offset)
        offset += prefix.size
        if offset + length > len(body):
            raise SnapshotCorruptError("snapshot field runs past the end")
        fields.append(body[offset:offset + length])
        offset += length
    if offset != len(body) or last_index != prev_index + 1:
        raise SnapshotCorruptError("snapshot has trailing bytes or non-adjacent entries")
    last_command, prev_command, cluster_bytes, state = fields
    cluster = cluster_bytes.decode().split("\n") if cluster_bytes else []
    # Tuples of exactly (bytes, int, int): pysyncobj compares them with its journal's entries and
    # clears the journal on a mismatch.
    return (last_command, last_index, last_term), (prev_command, prev_index, prev_term), \
        cluster, state
