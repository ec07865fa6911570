"""Key and value layouts of the storage column families (pure: bytes in, bytes out).

Keys sort the way RocksDB iterates them, so every partition owns one contiguous key range in each
column family and a whole partition, or a run of its batches, goes with one ``delete_range``:

* ``log``:             topic_id (16 B) | partition (u32 BE) | base_offset (u64 BE) -> batch bytes
* ``partition_state``: topic_id | partition | b"M"                      -> :data:`META`
                       topic_id | partition | b"E"                      -> leader-epoch cache
                       topic_id | partition | b"S" | base_offset (u64)  -> :data:`SEGMENT`
                       topic_id | partition | b"C"    -> :data:`CLEANER_CHECKPOINT`
* ``producer_state``:  topic_id | partition                             -> opaque bytes

Values are fixed ``struct`` layouts, not JSON: the segment entry is rewritten by every append.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

__all__ = [
    "CLEANER_CHECKPOINT",
    "META",
    "PREFIX_BYTES",
    "SEGMENT",
    "TOPIC_ID_BYTES",
    "PartitionKeys",
    "TopicPartition",
    "parse_prefix",
]

TOPIC_ID_BYTES = 16
PREFIX_BYTES = TOPIC_ID_BYTES + 4
OFFSET_MAX = (1 << 63) - 1
PARTITION_MAX = (1 << 31) - 1

_PREFIX = struct.Struct(">16sI")
_OFFSET = struct.Struct(">Q")
#: Partition meta: log start offset, high watermark checkpoint.
META = struct.Struct(">qq")
#: One segment: next offset (exclusive end), bytes, max timestamp, time of its first append.
SEGMENT = struct.Struct(">qqqq")
#: The log cleaner's checkpoint: the offset below which its last pass left the log clean.
CLEANER_CHECKPOINT = struct.Struct(">q")

KIND_CLEANER = b"C"
KIND_EPOCHS = b"E"
KIND_META = b"M"
KIND_SEGMENT = b"S"
META_KEY_BYTES = PREFIX_BYTES + 1


class TopicPartition(NamedTuple):
    """A partition by topic id (a UUID's 16 bytes, so a re-created topic never reuses data)."""

    topic_id: bytes
    partition: int

    def __str__(self) -> str:
        return f"{self.topic_id.hex()}-{self.partition}"


def parse_prefix(key: bytes) -> TopicPartition:
    topic_id, partition = _PREFIX.unpack_from(key)
    return TopicPartition(topic_id, partition)


class PartitionKeys:
    """Precomputed keys of one partition; the hot path only appends 8 bytes to a prefix."""

    __slots__ = (
        "cleaner_checkpoint",
        "epochs",
        "log_lower",
        "log_upper",
        "meta",
        "prefix",
        "producer_state",
        "segment_lower",
        "segment_upper",
        "state_lower",
        "state_upper",
    )

    def __init__(self, tp: TopicPartition) -> None:
        if len(tp.topic_id) != TOPIC_ID_BYTES:
            raise ValueError(f"topic id must be {TOPIC_ID_BYTES} bytes, got {len(tp.topic_id)}")
        if not 0 <= tp.partition <= PARTITION_MAX:
            raise ValueError(f"partition must be in 0..{PARTITION_MAX}, got {tp.partition}")
        prefix = _PREFIX.pack(tp.topic_id, tp.partition)
        self.prefix = prefix
        self.log_lower = prefix
        # No offset reaches 2**64-1, so this bound is above every batch key of the partition.
        self.log_upper = prefix + b"\xff" * 8
        self.meta = prefix + KIND_META
        self.epochs = prefix + KIND_EPOCHS
        self.cleaner_checkpoint = prefix + KIND_CLEANER
        self.segment_lower = prefix + KIND_SEGMENT
        self.segment_upper = prefix + KIND_SEGMENT + b"\xff" * 8
        self.state_lower = prefix
        self.state_upper = prefix + b"\xff"
        self.producer_state = prefix

    def log(self, base_offset: int) -> bytes:
        return self.prefix + _OFFSET.pack(base_offset)

    def segment(self, base_offset: int) -> bytes:
        return self.segment_lower + _OFFSET.pack(base_offset)


def offset_of(key: bytes) -> int:
    """The base offset at the end of a log or segment key."""
    value: int = _OFFSET.unpack_from(key, len(key) - 8)[0]
    return value
