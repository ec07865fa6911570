"""Settings of the broker's storage (per data dir) and of each partition log (per topic).

Names follow Kafka's configs (log.flush.policy is ours: Kafka spreads it over
log.flush.interval.messages/ms); defaults are Kafka's unless a comment says why.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["FlushPolicy", "LogConfig", "StorageConfig"]

#: Kafka's segment.bytes default (1 GiB) and its smallest allowed value.
SEGMENT_BYTES_DEFAULT = 1 << 30
SEGMENT_BYTES_MIN = 14
#: Kafka's segment.ms default: 7 days.
SEGMENT_MS_DEFAULT = 7 * 24 * 3600 * 1000


class FlushPolicy(enum.StrEnum):
    """When appends are fsynced. The RocksDB WAL is always written, so a killed process loses
    nothing either way; fsync guards against a machine crash or power loss."""

    NEVER = "never"  # as Kafka: durability comes from replication (acks=all, min ISR)
    INTERVAL = "interval"  # fsync the WAL every flush_interval_ms (Storage.maybe_flush)
    EVERY_BATCH = "every_batch"  # fsync inside every append (about 10x slower here)


@dataclass(frozen=True, slots=True)
class StorageConfig:
    """One RocksDB per data dir."""

    flush_policy: FlushPolicy = FlushPolicy.NEVER
    flush_interval_ms: int = 1000
    compression: str = "lz4"  # lz4 | zstd | snappy | none (RocksDB block compression)
    write_buffer_bytes: int = 64 << 20
    write_buffers_max: int = 3
    parallelism: int = 2  # RocksDB background threads; this machine has 2 cores

    def __post_init__(self) -> None:
        if self.flush_interval_ms <= 0:
            raise ValueError(f"flush_interval_ms must be > 0, got {self.flush_interval_ms}")
        if self.write_buffer_bytes < 1 << 20:
            raise ValueError(f"write_buffer_bytes must be >= 1 MiB, got {self.write_buffer_bytes}")


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-partition settings that shape segments (topic configs segment.bytes / segment.ms).

    Retention limits are not here: the caller passes the topic's current retention.ms and
    retention.bytes to ``enforce_retention``, so a config change needs no call into storage.
    """

    segment_bytes: int = SEGMENT_BYTES_DEFAULT
    segment_ms: int = SEGMENT_MS_DEFAULT

    def __post_init__(self) -> None:
        if self.segment_bytes < SEGMENT_BYTES_MIN:
            raise ValueError(f"segment_bytes must be >= {SEGMENT_BYTES_MIN}: {self.segment_bytes}")
        if self.segment_ms <= 0:
            raise ValueError(f"segment_ms must be > 0, got {self.segment_ms}")
