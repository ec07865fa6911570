"""Storage: the broker's partition logs in one RocksDB per data dir (Kafka's LogManager).

Opening checks the data dir's meta.properties against the node's cluster id and node id, opens
the RocksDB under ``<data_dir>/broker-log``, and loads (and recovers) every partition found in it.
It hands out PartitionLog objects by (topic id, partition), deletes partitions with range deletes,
checkpoints high watermarks and applies the flush policy.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import TracebackType

from tidelog.broker.storage.config import FlushPolicy, LogConfig, StorageConfig
from tidelog.broker.storage.keys import (
    META,
    PREFIX_BYTES,
    PartitionKeys,
    TopicPartition,
    parse_prefix,
)
from tidelog.broker.storage.partition_log import PartitionLog
from tidelog.broker.storage.recovery import load_partition
from tidelog.broker.storage.rocks import Column, RocksStore
from tidelog.data_dir import DataDirMeta, check_data_dir
from tidelog.errors import KafkaStorageErrorError, UnknownTopicOrPartitionError

__all__ = ["DB_DIR_NAME", "Storage"]

log = logging.getLogger(__name__)

#: The RocksDB's directory inside the node's data dir (a combined node also keeps controller
#: files there).
DB_DIR_NAME = "broker-log"
#: Layout version of keys and values (broker/storage/keys.py), checked at open.
FORMAT_VERSION = 1
_FORMAT_KEY = b"tidelog.storage.format.version"
#: Above every partition_state key (16-byte topic ids): the end of a full scan.
_STATE_SCAN_UPPER = b"\xff" * (PREFIX_BYTES + 9)


class Storage:
    """The partition logs of one data dir. Use :meth:`open`; close it (or use ``with``)."""

    def __init__(self, store: RocksStore, meta: DataDirMeta, config: StorageConfig) -> None:
        self._store = store
        self.meta = meta
        self.config = config
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._last_flush_ms: int | None = None

    @classmethod
    def open(
        cls,
        data_dir: Path | str,
        *,
        cluster_id: str | None,
        node_id: int | None,
        config: StorageConfig | None = None,
        log_config: LogConfig | None = None,
    ) -> Storage:
        """Open (creating the RocksDB on first use) and recover every partition on disk.

        Raises UnformattedDataDirError / InconsistentClusterIdError / InconsistentNodeIdError
        (tidelog.data_dir) for a data dir this node must not use, KafkaStorageErrorError when the
        DB cannot be opened or its format is unknown. ``log_config`` applies to the partitions
        loaded; the broker may set each one's ``config`` from its topic afterwards.
        """
        config = config or StorageConfig()
        meta = check_data_dir(data_dir, cluster_id=cluster_id, node_id=node_id)
        store = RocksStore(
            Path(data_dir) / DB_DIR_NAME,
            compression=config.compression,
            write_buffer_bytes=config.write_buffer_bytes,
            write_buffers_max=config.write_buffers_max,
            parallelism=config.parallelism,
            sync=config.flush_policy == FlushPolicy.EVERY_BATCH,
        )
        storage = cls(store, meta, config)
        try:
            storage._check_format()
            storage._load_partitions(log_config or LogConfig())
        except BaseException:
            store.close()
            raise
        return storage

    def _check_format(self) -> None:
        version = self._store.get(Column.DEFAULT, _FORMAT_KEY)
        if version is None:
            wb = self._store.new_batch()
            wb.put(Column.DEFAULT, _FORMAT_KEY, str(FORMAT_VERSION).encode())
            self._store.write(wb)
        elif version != str(FORMAT_VERSION).encode():
            raise KafkaStorageErrorError(
                f"{self._store.path} has storage format {version!r}; this release reads "
                f"format {FORMAT_VERSION} only"
            )

    def _load_partitions(self, log_config: LogConfig) -> None:
        rows_by_partition: dict[bytes, list[tuple[bytes, bytes]]] = {}
        for key, value in self._store.scan(Column.PARTITION_STATE, b"", _STATE_SCAN_UPPER):
            rows_by_partition.setdefault(key[:PREFIX_BYTES], []).append((key, value))
        for prefix, rows in rows_by_partition.items():
            tp = parse_prefix(prefix)
            self._logs[tp] = load_partition(self._store, tp, rows, log_config)
        log.info("storage %s: loaded %d partitions", self._store.path, len(self._logs))

    # --- partitions ------------------------------------------------------------------------

    def partitions(self) -> list[TopicPartition]:
        """Every partition with a log here, in key order."""
        self._check_open()
        return sorted(self._logs)

    def log(self, topic_id: bytes, partition: int) -> PartitionLog:
        """The log of a partition that exists here; UnknownTopicOrPartitionError otherwise."""
        self._check_open()
        tp = TopicPartition(topic_id, partition)
        found = self._logs.get(tp)
        if found is None:
            raise UnknownTopicOrPartitionError(f"partition {tp} has no log on this broker")
        return found

    def get_or_create_log(
        self, topic_id: bytes, partition: int, *, config: LogConfig | None = None
    ) -> PartitionLog:
        """The partition's log, created empty at offset 0 if it does not exist.

        ``config`` (segment.bytes / segment.ms) replaces the log's when given.
        """
        self._check_open()
        tp = TopicPartition(topic_id, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            if config is not None:
                existing.config = config
            return existing
        keys = PartitionKeys(tp)  # validates the ids before anything is written
        wb = self._store.new_batch()
        wb.put(Column.PARTITION_STATE, keys.meta, META.pack(0, 0))
        self._store.write(wb)
        created = load_partition(self._store, tp, [(keys.meta, META.pack(0, 0))],
                                 config or LogConfig())
        self._logs[tp] = created
        return created

    def delete_partition(self, topic_id: bytes, partition: int) -> bool:
        """Delete a partition's batches and state (range deletes: O(1) whatever its size).
        Its PartitionLog object raises UnknownTopicOrPartitionError from then on. False when the
        partition had no log here (its key ranges are cleared anyway)."""
        self._check_open()
        tp = TopicPartition(topic_id, partition)
        keys = PartitionKeys(tp)
        wb = self._store.new_batch()
        wb.delete_range(Column.LOG, keys.log_lower, keys.log_upper)
        wb.delete_range(Column.PARTITION_STATE, keys.state_lower, keys.state_upper)
        wb.delete(Column.PRODUCER_STATE, keys.producer_state)
        self._store.write(wb)
        removed = self._logs.pop(tp, None)
        if removed is not None:
            removed._mark_deleted()
        return removed is not None

    # --- durability ------------------------------------------------------------------------

    def checkpoint_high_watermarks(self) -> int:
        """Persist every changed HW / log start offset in one write; returns how many."""
        self._check_open()
        dirty = [pl for pl in self._logs.values() if pl._meta_dirty]
        if not dirty:
            return 0
        wb = self._store.new_batch()
        for pl in dirty:
            pl._put_meta(wb)
        self._store.write(wb)
        for pl in dirty:
            pl._meta_dirty = False
        return len(dirty)

    def maybe_flush(self, now_ms: int) -> bool:
        """Under FlushPolicy.INTERVAL, fsync the WAL when flush_interval_ms has passed since the
        last one. The broker calls this from its timer; other policies make it a no-op."""
        if self.config.flush_policy != FlushPolicy.INTERVAL:
            return False
        last = self._last_flush_ms
        if last is not None and now_ms - last < self.config.flush_interval_ms:
            return False
        self.flush()
        self._last_flush_ms = now_ms
        return True

    def flush(self) -> None:
        """fsync the WAL now: every append so far survives a machine crash."""
        self._check_open()
        self._store.sync_wal()

    # --- lifecycle -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._store.closed

    def close(self) -> None:
        """Checkpoint HWs, sync the WAL and close the DB. Logs handed out stop working."""
        if self._store.closed:
            return
        try:
            self.checkpoint_high_watermarks()
        finally:
            self._store.close()

    def __enter__(self) -> Storage:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._store.closed:
            raise KafkaStorageErrorError(f"storage at {self._store.path} is closed")
