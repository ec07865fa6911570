"""Public value types of the client library: where a record is, and what came back.

They are plain frozen dataclasses (and one NamedTuple) so that users can hash, compare, print and
pickle them, and so the pure parts of the client (the accumulator, the partitioner) can use them
without importing any I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "EARLIEST",
    "LATEST",
    "ConsumerRecord",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "RecordMetadata",
    "TopicPartition",
]

#: ListOffsets timestamps with a special meaning (Kafka's): the log start offset, and the HW
#: (``Admin.list_offsets({tp: EARLIEST})``, as Kafka's OffsetSpec.earliest()).
EARLIEST = -2
LATEST = -1


class TopicPartition(NamedTuple):
    """A partition of a topic, as Kafka's ``TopicPartition``: ``TopicPartition("orders", 3)``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where the cluster put a sent record (the result of ``Producer.send(...)``'s future).

    ``offset`` is -1 when it is not known: with ``acks=0``, or when the leader reported the batch
    as a duplicate older than the five it remembers (DUPLICATE_SEQUENCE_NUMBER: written, offset
    unknown). ``timestamp_ms`` is the record's create time, or the leader's append time when the
    topic uses LOG_APPEND_TIME.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int

    @property
    def timestamp(self) -> int:
        """Kafka's name for ``timestamp_ms`` (milliseconds since the epoch)."""
        return self.timestamp_ms

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """A record returned by ``Consumer.poll()``.

    ``key``/``value`` are ``None`` for Kafka's null (a null value is a tombstone); ``headers`` keep
    their order and may repeat a key. ``timestamp_type`` is 0 (CREATE_TIME) or 1 (LOG_APPEND_TIME);
    ``leader_epoch`` is the leader epoch of the batch that holds the record.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    leader_epoch: int

    @property
    def timestamp(self) -> int:
        """Kafka's name for ``timestamp_ms`` (milliseconds since the epoch)."""
        return self.timestamp_ms

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    """The answer of ``Consumer.offsets_for_times``: the first offset at or after a timestamp."""

    offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset: the next offset to consume, free-text ``metadata`` (at most 4096
    bytes on the coordinator), and the leader epoch of the last consumed record when known."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.offset, int) or isinstance(self.offset, bool) or self.offset < 0:
            raise ValueError(f"a committed offset is a non-negative int, got {self.offset!r}")
        if not isinstance(self.metadata, str):
            raise ValueError(f"offset metadata is a str, got {type(self.metadata).__name__}")
