"""FetchMetadata: the committed metadata log, streamed to brokers (Kafka's brokers fetch the
__cluster_metadata log from the controllers).

:class:`MetadataTail` keeps the last committed batches whole (replay applies a batch all or
nothing, so a broker is only ever sent whole batches, starting at a batch boundary);
:class:`MetadataStreamer` serves one stream per broker from it: the batches from the offset the
broker asks for, a snapshot first when that offset is older than the tail, and an empty
progress message every FETCH_METADATA_IDLE_MS while nothing commits. Any controller streams,
from its own committed image; when a broker's stream ends the runtime hears of it (the broker
may have died: controller/broker_prober.py).
"""

from __future__ import annotations

import asyncio
import bisect
import threading
from collections.abc import AsyncIterator, Callable

from tidelog.controller.control import ControllerLogic
from tidelog.invariants import check
from tidelog.v1 import controller_pb2, metadata_pb2
from tidelog.v1.common_pb2 import ErrorCode

__all__ = [
    "FETCH_METADATA_IDLE_MS",
    "FETCH_METADATA_RECORDS_MAX",
    "METADATA_TAIL_RECORDS_MAX",
    "MetadataStreamer",
    "MetadataTail",
]

#: Committed records kept in memory for FetchMetadata; older offsets get a snapshot first.
METADATA_TAIL_RECORDS_MAX = 200_000
#: Records per FetchMetadata response message.
FETCH_METADATA_RECORDS_MAX = 5_000
#: A FetchMetadata stream sends an (empty) progress message at least this often.
FETCH_METADATA_IDLE_MS = 1_000

check(
    FETCH_METADATA_RECORDS_MAX < METADATA_TAIL_RECORDS_MAX,
    "a metadata fetch must be smaller than the kept tail",
)


class MetadataTail:
    """Committed batches kept for streaming, whole: offsets base_offset .. end_offset - 1.

    Batches stay whole because replay applies a batch all or nothing; a follower is only ever
    sent whole batches, starting at a batch boundary.
    """

    def __init__(self) -> None:
        self.base_offset = 0
        self._starts: list[int] = []  # first offset of each batch, ascending
        self._batches: list[list[metadata_pb2.MetadataRecord]] = []
        self._records = 0

    @property
    def end_offset(self) -> int:
        return self.base_offset + self._records

    def reset(self, next_offset: int) -> None:
        self.base_offset = next_offset
        self._starts, self._batches, self._records = [], [], 0

    def append(self, base_offset: int, records: list[metadata_pb2.MetadataRecord]) -> None:
        if base_offset != self.end_offset:
            self.reset(base_offset)
        self._starts.append(base_offset)
        self._batches.append(records)
        self._records += len(records)
        if self._records > METADATA_TAIL_RECORDS_MAX:
            self._trim(self._records - METADATA_TAIL_RECORDS_MAX // 10 * 9)

    def _trim(self, records_to_drop: int) -> None:
        """Drop leading whole batches (in one go, so the cost is amortized over appends)."""
        dropped = count = 0
        while count < len(self._batches) - 1 and dropped < records_to_drop:
            dropped += len(self._batches[count])
            count += 1
        del self._starts[:count], self._batches[:count]
        self._records -= dropped
        self.base_offset += dropped

    def batches_from(self, offset: int, records_max: int
                     ) -> list[list[metadata_pb2.MetadataRecord]] | None:
        """Whole batches from the one starting at ``offset``, up to ``records_max`` records (at
        least one batch). None when ``offset`` is not a batch start held here."""
        i = bisect.bisect_left(self._starts, offset)
        if i == len(self._starts) or self._starts[i] != offset:
            return None
        out: list[list[metadata_pb2.MetadataRecord]] = []
        total = 0
        for batch in self._batches[i:]:
            if out and total + len(batch) > records_max:
                break
            out.append(batch)
            total += len(batch)
        return out


class MetadataStreamer:
    """The FetchMetadata streams of one controller (see the module doc)."""

    def __init__(self, *, cluster_id: str, logic: ControllerLogic, lock: threading.RLock,
                 waiters: set[asyncio.Event], on_stream_end: Callable[[int], None]) -> None:
        """``waiters``: the runtime's wake-ups, all set whenever a batch commits here (a
        stream waits on one of its own); ``on_stream_end``: called with the broker id (-1 for
        a tool) when a stream ends."""
        self.cluster_id = cluster_id
        self.tail = MetadataTail()
        self._logic = logic
        self._lock = lock
        self._waiters = waiters
        self._on_stream_end = on_stream_end

    async def stream(
        self, request: controller_pb2.FetchMetadataRequest, is_done: Callable[[], bool]
    ) -> AsyncIterator[controller_pb2.FetchMetadataResponse]:
        if request.cluster_id and request.cluster_id != self.cluster_id:
            yield controller_pb2.FetchMetadataResponse(
                error_code=ErrorCode.INCONSISTENT_CLUSTER_ID,
                error_message=f"this controller quorum belongs to cluster {self.cluster_id}, "
                f"not {request.cluster_id}")
            return
        next_offset = max(0, request.from_offset)
        wake = asyncio.Event()
        self._waiters.add(wake)
        try:
            while not is_done():
                wake.clear()
                response, next_offset = self.next_message(next_offset)
                if response is not None:
                    yield response
                    continue
                try:
                    await asyncio.wait_for(wake.wait(), FETCH_METADATA_IDLE_MS / 1000)
                except TimeoutError:
                    with self._lock:
                        committed = self._logic.committed_offset
                    yield controller_pb2.FetchMetadataResponse(
                        base_offset=next_offset, committed_offset=committed)
        finally:
            self._waiters.discard(wake)
            self._on_stream_end(request.broker_id)

    def next_message(
        self, next_offset: int
    ) -> tuple[controller_pb2.FetchMetadataResponse | None, int]:
        """The next message for a follower at ``next_offset``, or None when it is caught up."""
        with self._lock:
            committed = self._logic.committed_offset
            if next_offset > committed:
                return None, next_offset
            batches = None
            if next_offset >= self.tail.base_offset:
                batches = self.tail.batches_from(next_offset, FETCH_METADATA_RECORDS_MAX)
            if batches is None:  # older than the tail, or inside a batch: start from a snapshot
                snap = self._logic.committed_snapshot()
                after = snap.metadata_offset + 1
                return controller_pb2.FetchMetadataResponse(
                    snapshot=snap, base_offset=after, committed_offset=committed), after
        records = [r for batch in batches for r in batch]
        response = controller_pb2.FetchMetadataResponse(
            records=records, base_offset=next_offset, committed_offset=committed,
            batch_record_counts=[len(b) for b in batches])
        return response, next_offset + len(records)
