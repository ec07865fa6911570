"""The records of one coordinator shard's concurrent writes, gathered into batches (Kafka's
CoordinatorRuntime keeps a "current batch" per shard likewise): a plain data structure, no
I/O, no event loop, tested without a broker.

Each write's records are added in the order the shard applied them; they join the open batch
while it has room (:attr:`AppendAccumulator.batch_bytes_max`, keys, values and each record's
framing counted), so the records of writes made close together go to the log as one batch:
one append, one RocksDB write, one item for the followers to fetch, one acks=all wait. A write
that fits one batch is never split across two (it goes whole into the open batch, or the open
batch is closed first): all of it is in the log or none is. Only a write larger than a batch is
split, as before (see docs/decisions.md).

The runtime asks :meth:`AppendAccumulator.add` where a write's records went (the batches'
sequence numbers, which the runtime maps to the futures it answers on) and which batches are
full and must be appended now; :meth:`AppendAccumulator.drain` closes the open batch when the
runtime's linger ends; :meth:`AppendAccumulator.clear` drops what was never appended (a reload
or an unload: the runtime fails those writes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tidelog.broker.group.records import GroupRecord
from tidelog.invariants import InvariantViolation, check
from tidelog.record_batch import NewRecord

__all__ = ["RECORD_OVERHEAD_BYTES_MAX", "AppendAccumulator", "PendingBatch", "sized"]

#: Bytes one record adds to a batch beyond its key and value, at most: a tag and a varint of at
#: most 3 bytes each (a batch is under 2 MiB) for the record's length, its offset delta, its key
#: and its value lengths; the timestamp delta is 0 (one now_ms per batch) and not encoded.
#: Measured ~7 for small tombstones. If it were ever short, build_batch refuses the batch
#: (MESSAGE_TOO_LARGE) and the writes fail whole: never a batch over the limit.
RECORD_OVERHEAD_BYTES_MAX = 16


@dataclass(slots=True)
class PendingBatch:
    """Records gathered for one append; ``sequence`` increases by one per batch of a shard."""

    sequence: int
    records: list[NewRecord] = field(default_factory=list)
    size_bytes: int = 0


def sized(records: Iterable[GroupRecord]) -> list[tuple[NewRecord, int]]:
    """Each record encoded once, with the bytes it adds to a batch (framing counted)."""
    out = []
    for record in records:
        key, value = record.encode()
        out.append((NewRecord(key, value), len(key) + len(value or b"")
                    + RECORD_OVERHEAD_BYTES_MAX))
    return out


class AppendAccumulator:
    """The open batch of one shard and the sequence numbers of its batches (module doc)."""

    def __init__(self, batch_bytes_max: int) -> None:
        check(batch_bytes_max > RECORD_OVERHEAD_BYTES_MAX, "a batch must hold a record")
        self.batch_bytes_max = batch_bytes_max
        self._open: PendingBatch | None = None
        self._next_sequence = 0

    @property
    def open_batch(self) -> PendingBatch | None:
        return self._open

    def add(self, records: list[tuple[NewRecord, int]]
            ) -> tuple[list[int], list[PendingBatch]]:
        """Add one write's records (from :func:`sized`): the sequence numbers of the batches
        they went into, and the batches closed meanwhile (full: to append now, in order)."""
        if not records:
            return [], []
        closed: list[PendingBatch] = []
        total = sum(size for _, size in records)
        if (self._open is not None and total <= self.batch_bytes_max
                and self._open.size_bytes + total > self.batch_bytes_max):
            closed.append(self._close())  # the write fits a batch: keep it whole
        sequences: list[int] = []
        for record, size in records:
            batch = self._open
            if batch is not None and batch.records \
                    and batch.size_bytes + size > self.batch_bytes_max:
                closed.append(self._close())  # only a write larger than a batch splits here
                batch = None
            if batch is None:
                batch = self._open = PendingBatch(self._next_sequence)
                self._next_sequence += 1
            batch.records.append(record)
            batch.size_bytes += size
            if not sequences or sequences[-1] != batch.sequence:
                sequences.append(batch.sequence)
        return sequences, closed

    def drain(self) -> PendingBatch | None:
        """Close the open batch (the linger ended): the batch to append, or None."""
        return self._close() if self._open is not None else None

    def clear(self) -> PendingBatch | None:
        """Drop the open batch unappended (reload, unload); it is returned so its writes can
        be failed."""
        return self.drain()

    def _close(self) -> PendingBatch:
        batch = self._open
        if batch is None or not batch.records:
            raise InvariantViolation("closing an empty batch")
        self._open = None
        return batch
