"""The consumer's offset lookups, which need no assignment: the offset for a timestamp, a
partition's log start offset and high watermark (ListOffsets at each partition's leader, through
``_fetcher.list_offsets``, retried on leader changes and retriable errors), and a topic's
partition ids (Metadata).

``Consumer.offsets_for_times``, ``beginning_offsets``, ``end_offsets`` and ``partitions_for``
keep their public face (arguments, docstrings) and hand the work to :class:`OffsetLookups`,
which checks the arguments and runs the request on the I/O loop, bounded by ``timeout_ms``
(default ``request_timeout_ms``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from tidelog.client._fetcher import list_offsets
from tidelog.client._io import Connections, IOThread, monotonic_ms
from tidelog.client._metadata import Backoff, MetadataManager
from tidelog.client.records import EARLIEST, LATEST, OffsetAndTimestamp, TopicPartition
from tidelog.metadata.topic_names import validate_topic_name

__all__ = ["OffsetLookups"]


class OffsetLookups:
    """Offset and partition lookups for one consumer (see the module doc)."""

    def __init__(self, *, metadata: MetadataManager, conns: Connections, io: IOThread,
                 request_timeout_ms: int, backoff: Backoff,
                 check_open: Callable[[], None]) -> None:
        self._metadata = metadata
        self._check_open = check_open
        self._conns = conns
        self._io = io
        self._request_timeout_ms = request_timeout_ms
        self._backoff = backoff

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                          timeout_ms: int | None) -> dict[TopicPartition,
                                                          OffsetAndTimestamp | None]:
        for ts in timestamps.values():
            if not isinstance(ts, int) or ts < 0:
                raise ValueError(f"timestamps must be non-negative ms, got {ts!r}")
        found = self._list_offsets(dict(timestamps), timeout_ms)
        return {tp: None if off < 0 else OffsetAndTimestamp(off, ts)
                for tp, (off, ts) in found.items()}

    def beginning_offsets(self, partitions: Iterable[TopicPartition],
                          timeout_ms: int | None) -> dict[TopicPartition, int]:
        found = self._list_offsets(dict.fromkeys(partitions, EARLIEST), timeout_ms)
        return {tp: off for tp, (off, _) in found.items()}

    def end_offsets(self, partitions: Iterable[TopicPartition],
                    timeout_ms: int | None) -> dict[TopicPartition, int]:
        found = self._list_offsets(dict.fromkeys(partitions, LATEST), timeout_ms)
        return {tp: off for tp, (off, _) in found.items()}

    def partitions_for(self, topic: str, timeout_ms: int | None) -> list[int]:
        self._check_open()
        validate_topic_name(topic)
        wait = self._request_timeout_ms if timeout_ms is None else timeout_ms
        info = self._io.run(self._metadata.wait_for_topic(
            topic, min_partitions=1, deadline_ms=monotonic_ms() + wait), wait / 1000)
        return [p.partition for p in info.partitions]

    def _list_offsets(self, timestamps: dict[TopicPartition, int],
                      timeout_ms: int | None) -> dict[TopicPartition, tuple[int, int]]:
        self._check_open()
        tps = {TopicPartition(*tp): ts for tp, ts in timestamps.items()}
        for tp in tps:
            validate_topic_name(tp.topic)
        wait = self._request_timeout_ms if timeout_ms is None else timeout_ms
        self._metadata.add_topics(tp.topic for tp in tps)
        return self._io.run(
            list_offsets(self._metadata, self._conns, tps, deadline_ms=monotonic_ms() + wait,
                         request_timeout_ms=self._request_timeout_ms, backoff=self._backoff),
            wait / 1000,
        )
