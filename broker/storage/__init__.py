"""The broker's storage: partition logs in one RocksDB per data dir (DESIGN §5).

Public API (guarded by a test): open a :class:`Storage` on a formatted data dir, get a
:class:`PartitionLog` per (topic id, partition), append, read, truncate, retain. rocksdict is
imported by ``broker.storage.rocks`` only; the other modules are logic over it.
"""

from tidelog.broker.storage.config import FlushPolicy, LogConfig, StorageConfig
from tidelog.broker.storage.epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochCache,
)
from tidelog.broker.storage.keys import TopicPartition
from tidelog.broker.storage.partition_log import (
    AppendInfo,
    EpochEndOffset,
    FetchDataInfo,
    OffsetAndTimestamp,
    PartitionLog,
)
from tidelog.broker.storage.segments import Segment
from tidelog.broker.storage.storage import Storage

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "AppendInfo",
    "EpochEndOffset",
    "FetchDataInfo",
    "FlushPolicy",
    "LeaderEpochCache",
    "LogConfig",
    "OffsetAndTimestamp",
    "PartitionLog",
    "Segment",
    "Storage",
    "StorageConfig",
    "TopicPartition",
]
