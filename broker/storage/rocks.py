"""The one module that imports rocksdict: a RocksDB with the broker's three column families.

Everything RocksDB-specific lives here (options, column-family handles, write options, iterator
bounds, error translation), so the partition log above it is plain logic over a small interface:
write batches, point reads, bounded scans. Facts this relies on were measured on this machine
(shared/reference/libraries.md §2): ``WriteOptions.sync`` is a property; iterators, not snapshots,
give consistent scans; a close needs every column-family view, handle and iterator released first.

Any failure of RocksDB itself surfaces as KafkaStorageErrorError naming the operation.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rocksdict import (
    DBCompressionType,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from tidelog.errors import KafkaStorageErrorError

__all__ = ["Column", "RocksStore", "StoreWriteBatch"]

#: Scans yield at most this many entries per call before re-checking their bound (a safety net).
SCAN_ENTRIES_MAX = 10_000_000


class Column(enum.IntEnum):
    """The column families; their values index the handle tuples below."""

    DEFAULT = 0  # store-level metadata (format version)
    LOG = 1  # topic_id | partition | base_offset -> stored batch bytes
    PARTITION_STATE = 2  # topic_id | partition | kind [| base_offset] -> state structs
    PRODUCER_STATE = 3  # topic_id | partition -> opaque bytes of the replication layer


_CF_NAMES = ("default", "log", "partition_state", "producer_state")
_COMPRESSIONS = {
    "lz4": DBCompressionType.lz4,
    "zstd": DBCompressionType.zstd,
    "snappy": DBCompressionType.snappy,
    "none": DBCompressionType.none,
}


def _cf_options(compression: str) -> Options:
    opts = Options(raw_mode=True)
    opts.set_compression_type(_COMPRESSIONS[compression]())
    return opts


class StoreWriteBatch:
    """An atomic group of writes across column families (one RocksDB WriteBatch)."""

    __slots__ = ("_batch", "_handles")

    def __init__(self, handles: tuple[Any, ...]) -> None:
        self._batch = WriteBatch(raw_mode=True)
        self._handles = handles

    def put(self, column: Column, key: bytes, value: bytes) -> None:
        self._batch.put(key, value, self._handles[column])

    def delete(self, column: Column, key: bytes) -> None:
        self._batch.delete(key, self._handles[column])

    def delete_range(self, column: Column, begin: bytes, end: bytes) -> None:
        """Delete keys in [begin, end)."""
        self._batch.delete_range(begin, end, self._handles[column])

    def __len__(self) -> int:
        return int(self._batch.len())


class RocksStore:
    """An open RocksDB (raw bytes mode) with the column families in :class:`Column`."""

    def __init__(
        self,
        path: Path | str,
        *,
        compression: str = "lz4",
        write_buffer_bytes: int = 64 << 20,
        write_buffers_max: int = 3,
        parallelism: int = 2,
        sync: bool = False,
    ) -> None:
        if compression not in _COMPRESSIONS:
            raise ValueError(f"compression must be one of {sorted(_COMPRESSIONS)}: {compression}")
        self.path = Path(path)
        opts = _cf_options(compression)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        opts.set_write_buffer_size(write_buffer_bytes)
        opts.set_max_write_buffer_number(write_buffers_max)
        opts.increase_parallelism(parallelism)
        families = {name: _cf_options(compression) for name in _CF_NAMES[1:]}
        try:
            self._db: Rdict | None = Rdict(str(self.path), opts, column_families=families)
        except Exception as e:
            raise KafkaStorageErrorError(
                f"cannot open RocksDB at {self.path}: {e} (is another process using it?)"
            ) from None
        db = self._db
        self._views = (db, *(db.get_column_family(n) for n in _CF_NAMES[1:]))
        self._handles = (None, *(db.get_column_family_handle(n) for n in _CF_NAMES[1:]))
        self._write_options = WriteOptions()
        self._write_options.sync = sync

    # --- writes ----------------------------------------------------------------------------

    def new_batch(self) -> StoreWriteBatch:
        return StoreWriteBatch(self._handles)

    def write(self, batch: StoreWriteBatch) -> None:
        """Apply the batch atomically (WAL on; fsync when the store was opened with sync)."""
        db = self._db
        if db is None:
            raise KafkaStorageErrorError(f"RocksDB at {self.path} is closed")
        try:
            db.write(batch._batch, self._write_options)
        except Exception as e:
            raise KafkaStorageErrorError(f"write to RocksDB at {self.path} failed: {e}") from None

    def sync_wal(self) -> None:
        """fsync the WAL: every write so far survives a machine crash, not only a process kill."""
        try:
            self._open_db().flush_wal(True)
        except KafkaStorageErrorError:
            raise
        except Exception as e:
            raise KafkaStorageErrorError(f"WAL sync of {self.path} failed: {e}") from None

    # --- reads -----------------------------------------------------------------------------

    def get(self, column: Column, key: bytes) -> bytes | None:
        self._open_db()
        value: bytes | None = self._views[column].get(key)
        return value

    def last_entry(self, column: Column, lower: bytes, upper: bytes) -> tuple[bytes, bytes] | None:
        """The last entry with lower <= key < upper, or None."""
        it = self._iter(column, upper)
        it.seek_to_last()
        if not it.valid() or it.key() < lower:
            return None
        return it.key(), it.value()

    def scan(
        self, column: Column, lower: bytes, upper: bytes, *, backwards: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with lower <= key < upper in key order (or reversed), as of one instant."""
        it = self._iter(column, upper)
        if backwards:
            it.seek_to_last()
            step = it.prev
        else:
            it.seek(lower)
            step = it.next
        for _ in range(SCAN_ENTRIES_MAX):
            if not it.valid():
                return
            key = it.key()
            if key < lower:
                return
            yield key, it.value()
            step()
        raise KafkaStorageErrorError(f"scan of {column.name} exceeded {SCAN_ENTRIES_MAX} entries")

    def values_from_floor(
        self, column: Column, key: bytes, lower: bytes, upper: bytes, bytes_max: int
    ) -> list[bytes]:
        """Values from the last entry <= ``key`` (or the first after it) up to ``upper``.

        The first value is always returned, whatever its size; further ones while the total stays
        within ``bytes_max``. This is the fetch pattern: seek_for_prev, then forward.
        """
        it = self._iter(column, upper)
        it.seek_for_prev(key)
        if not it.valid() or it.key() < lower:
            it.seek(max(key, lower))
        values: list[bytes] = []
        total = 0
        while it.valid():
            value = it.value()
            total += len(value)
            if values and total > bytes_max:
                break
            values.append(value)
            it.next()
        return values

    def _iter(self, column: Column, upper: bytes) -> Any:
        """An iterator bounded above by ``upper``. rocksdict 0.3.29 ignores
        ``set_iterate_lower_bound`` (measured: seek_to_first, seek_for_prev and prev all go
        below it), so callers check the lower bound themselves."""
        self._open_db()
        ro = ReadOptions()
        ro.set_iterate_upper_bound(upper)
        return self._views[column].iter(ro)

    # --- lifecycle -------------------------------------------------------------------------

    def _open_db(self) -> Rdict:
        if self._db is None:
            raise KafkaStorageErrorError(f"RocksDB at {self.path} is closed")
        return self._db

    @property
    def closed(self) -> bool:
        return self._db is None

    def property_int(self, column: Column, name: str) -> int | None:
        """A RocksDB integer property of a column family (e.g. 'rocksdb.live-sst-files-size')."""
        value = self._views[column].property_int_value(name)
        return None if value is None else int(value)

    def compact(self, column: Column, begin: bytes | None, end: bytes | None) -> None:
        """Compact a key range now, so deleted ranges give their disk space back."""
        self._views[column].compact_range(begin, end)

    def close(self) -> None:
        """Flush the WAL and close; a second close is a no-op."""
        db = self._db
        if db is None:
            return
        # The LOCK is only released once every view and handle is gone (libraries.md §2).
        self._views = ()
        self._handles = ()
        self._db = None
        try:
            db.flush_wal(True)
        finally:
            db.close()
