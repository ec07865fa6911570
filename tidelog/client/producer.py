"""The Producer: send records to topics, batched per partition, delivered at least once (exactly
once per partition with idempotence, the default).

``send()`` runs on the caller's thread: it makes sure the topic's metadata is known (blocking up
to ``max_block_ms`` the first time), picks the partition, and appends the record to the
accumulator, blocking while ``buffer_memory`` is full (again up to ``max_block_ms``). The one
sender task on the shared client I/O thread does the rest (see ``_sender``). Futures complete,
and delivery callbacks run, on that I/O thread: keep callbacks short and never block in them.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Literal, TypeVar

from tidelog import limits
from tidelog.client._accumulator import RecordAccumulator, estimate_record_bytes
from tidelog.client._idempotence import IdempotenceState
from tidelog.client._io import Connections, io_thread, monotonic_ms, parse_bootstrap, wall_ms
from tidelog.client._metadata import MetadataManager
from tidelog.client._partitioner import (
    PartitionerCallable,
    StickyPartitionCache,
    partition_for_key,
)
from tidelog.client._sender import (
    DeliveryCallback,
    FutureRecordMetadata,
    RecordHandle,
    Sender,
    SenderConfig,
)
from tidelog.client.records import TopicPartition
from tidelog.compression import codec_from_name
from tidelog.errors import MessageTooLargeError, RequestTimedOutError
from tidelog.metadata.topic_names import validate_topic_name
from tidelog.record_batch import NewRecord

__all__ = ["Producer"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Header = tuple[str, bytes | None]
_ACKS = {"all": -1, "-1": -1, "1": 1, "0": 0, -1: -1, 1: 1, 0: 0}
#: Kafka's max.in.flight.requests.per.connection bound for idempotence (the leader keeps 5).
IDEMPOTENT_IN_FLIGHT_MAX = 5
#: Topic names send() has found valid, remembered so the check runs once per name (bounded).
VALID_TOPICS_CACHED_MAX = 10_000


class Producer:
    """Sends records to a Tidelog cluster. Thread-safe; use one per process and share it.

    >>> with Producer("127.0.0.1:9092") as producer:
    ...     meta = producer.send("orders", b"hello", key=b"user-1").result(timeout=10)

    Every argument after ``bootstrap_servers`` is keyword-only and named as Kafka's producer
    config in snake_case; docs/client.md lists each with its default.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "tidelog-producer",
        acks: Literal["all", "0", "1", -1, 0, 1] = "all",
        linger_ms: int = 5,
        batch_size: int = 16_384,
        compression_type: str = "none",
        enable_idempotence: bool | None = None,
        retries: int = 2_147_483_647,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        max_in_flight: int = 5,
        buffer_memory: int = 32 * 1024 * 1024,
        max_block_ms: int = 60_000,
        max_request_size: int = limits.MESSAGE_BYTES_MAX,
        partitioner: PartitionerCallable | None = None,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        metadata_max_age_ms: int = 300_000,
    ) -> None:
        if acks not in _ACKS:
            raise ValueError(f"acks must be 'all', 0 or 1, got {acks!r}")
        acks_value = _ACKS[acks]
        _check_positive(batch_size=batch_size, buffer_memory=buffer_memory,
                        request_timeout_ms=request_timeout_ms, max_in_flight=max_in_flight,
                        max_request_size=max_request_size)
        _check_non_negative(linger_ms=linger_ms, retries=retries, max_block_ms=max_block_ms,
                            retry_backoff_ms=retry_backoff_ms)
        if delivery_timeout_ms < linger_ms + request_timeout_ms:
            raise ValueError("delivery_timeout_ms must be >= linger_ms + request_timeout_ms "
                             f"({delivery_timeout_ms} < {linger_ms} + {request_timeout_ms})")
        if max_request_size > limits.MESSAGE_BYTES_MAX_CONFIGURABLE:
            raise ValueError(f"max_request_size is above {limits.MESSAGE_BYTES_MAX_CONFIGURABLE}")
        if partitioner is not None and not callable(partitioner):
            raise TypeError("partitioner must be callable(key, all_partitions, available)")
        idempotent = _idempotence(enable_idempotence, acks_value, retries, max_in_flight)
        self.client_id = client_id
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self._max_block_ms = max_block_ms
        self._max_request_size = max_request_size
        self._buffer_memory = buffer_memory
        self._partitioner = partitioner
        self._sticky = StickyPartitionCache(random.Random())
        self._cond = threading.Condition()
        self._valid_topics: set[str] = set()
        self._memory_waiters = 0
        self._closed = False
        self._acc: RecordAccumulator[RecordHandle] = RecordAccumulator(
            batch_size=batch_size, linger_ms=linger_ms, buffer_memory=buffer_memory,
            retry_backoff_ms=retry_backoff_ms, delivery_timeout_ms=delivery_timeout_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
        )
        self._io = io_thread()
        self._conns = Connections()
        self._metadata = MetadataManager(
            self._bootstrap, self._conns, loop=self._io.loop,
            request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms, metadata_max_age_ms=metadata_max_age_ms,
        )
        self._sender = Sender(
            acc=self._acc, cond=self._cond, metadata=self._metadata, conns=self._conns,
            idem=IdempotenceState(enabled=idempotent, max_in_flight=max_in_flight),
            config=SenderConfig(
                acks=acks_value, compression=codec_from_name(compression_type),
                request_timeout_ms=request_timeout_ms, delivery_timeout_ms=delivery_timeout_ms,
                retries=retries, max_in_flight=max_in_flight, max_request_size=max_request_size,
                retry_backoff_ms=retry_backoff_ms,
            ),
            loop=self._io.loop,
        )
        self._io.call_soon(self._sender.start)
        self.idempotent = idempotent

    # ------------------------------------------------------------------ sending
    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Iterable[Header] | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> FutureRecordMetadata:
        """Queue one record; returns a future of its RecordMetadata(topic, partition, offset,
        timestamp_ms): a FutureRecordMetadata, with ``result(timeout)``, ``exception(timeout)``,
        ``done()`` and ``add_done_callback(fn)`` as on a ``concurrent.futures.Future``.
        ``on_delivery(metadata, error)`` runs on the client's I/O thread when the record is
        acknowledged or fails.

        Blocks up to ``max_block_ms`` for the topic's metadata and for buffer memory. Raises
        InvalidTopicError (bad name), UnknownTopicOrPartitionError (no such topic or partition
        after ``max_block_ms``), NetworkError (no broker reachable), RequestTimedOutError (buffer
        still full after ``max_block_ms``), MessageTooLargeError, or the producer's fatal error;
        TypeError/ValueError for malformed arguments. Delivery errors arrive through the future.
        """
        self._check_usable()
        record = _new_record(value, key, timestamp_ms, headers)
        if topic not in self._valid_topics:
            validate_topic_name(topic)
            if len(self._valid_topics) < VALID_TOPICS_CACHED_MAX:
                self._valid_topics.add(topic)
        if partition is not None and (not isinstance(partition, int) or partition < 0):
            raise ValueError(f"partition must be a non-negative int, got {partition!r}")
        size = estimate_record_bytes(record)
        if size > self._max_request_size or size > self._buffer_memory:
            raise MessageTooLargeError(
                f"the record is about {size} bytes, above max_request_size "
                f"({self._max_request_size}) or buffer_memory ({self._buffer_memory})"
            )
        deadline = monotonic_ms() + self._max_block_ms
        num_partitions = self._wait_on_metadata(topic, partition, deadline)
        handle = FutureRecordMetadata(record.timestamp_ms or 0, on_delivery)
        self._append(topic, partition, num_partitions, record, size, handle, deadline)
        return handle

    def _wait_on_metadata(self, topic: str, partition: int | None, deadline_ms: int) -> int:
        count = self._metadata.snapshot.num_partitions(topic)
        wanted = 1 if partition is None else partition + 1
        if count is not None and count >= wanted:
            return count
        if self._metadata.add_topics([topic]):
            self._metadata.request_update()
        info = self._io.run(
            self._metadata.wait_for_topic(topic, min_partitions=wanted, deadline_ms=deadline_ms),
            self._max_block_ms / 1000,
        )
        return len(info.partitions)

    def _choose(self, topic: str, key: bytes | None, num_partitions: int) -> tuple[int, bool]:
        """(partition, sticky?) for a record without an explicit partition."""
        if self._partitioner is not None:
            available = self._metadata.snapshot.available_partitions(topic)
            chosen = self._partitioner(key, list(range(num_partitions)), list(available))
            if not isinstance(chosen, int) or not 0 <= chosen < num_partitions:
                raise ValueError(f"the partitioner returned {chosen!r}; topic {topic!r} has "
                                 f"partitions 0..{num_partitions - 1}")
            return chosen, False
        if key is not None:
            return partition_for_key(key, num_partitions), False
        available = self._metadata.snapshot.available_partitions(topic)
        return self._sticky.partition(topic, num_partitions, available), True

    def _append(self, topic: str, partition: int | None, num_partitions: int, record: NewRecord,
                size: int, handle: RecordHandle, deadline_ms: int) -> None:
        sticky = False
        if partition is None:
            partition, sticky = self._choose(topic, record.key, num_partitions)
        with self._cond:
            self._wait_for_room(size, deadline_ms)
            result = self._acc.append(TopicPartition(topic, partition), record, handle,
                                      now_ms=monotonic_ms(), abort_on_new_batch=sticky)
            if result.aborted_for_new_batch:
                # KIP-480: a new batch is a chance to move keyless records to another partition.
                available = self._metadata.snapshot.available_partitions(topic)
                partition = self._sticky.next_partition(topic, partition, num_partitions,
                                                        available)
                result = self._acc.append(TopicPartition(topic, partition), record, handle,
                                          now_ms=monotonic_ms())
        if result.new_batch or result.batch_full:
            self._sender.wake()

    def _wait_for_room(self, size: int, deadline_ms: int) -> None:
        """Block (holding nothing but the condition) until ``size`` bytes of buffer are free."""
        if self._acc.has_room(size):
            return
        if self._io.in_io_thread():
            raise RequestTimedOutError(
                "buffer_memory is full and send() was called on the client I/O thread (from a "
                "delivery callback?), where it cannot wait"
            )
        self._memory_waiters += 1
        self._acc.set_memory_waiters(self._memory_waiters)
        self._sender.wake()  # full buffers make every batch ready, so memory comes back soonest
        try:
            # Bounded: each wait ends at the deadline at the latest.
            while not self._acc.has_room(size):
                self._check_usable()
                remaining = deadline_ms - monotonic_ms()
                if remaining <= 0:
                    raise RequestTimedOutError(
                        f"could not allocate {size} bytes of buffer_memory "
                        f"({self._buffer_memory}) within max_block_ms={self._max_block_ms}"
                    )
                self._cond.wait(remaining / 1000)
        finally:
            self._memory_waiters -= 1
            self._acc.set_memory_waiters(self._memory_waiters)

    # ------------------------------------------------------------------ flush and close
    def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything queued now and wait until it is acknowledged or failed.

        Raises RequestTimedOutError if that takes longer than ``timeout_ms`` (None: no limit).
        Failures of individual records are reported through their futures, not here.
        """
        if self._io.in_io_thread():
            raise RuntimeError("flush() from a delivery callback would deadlock")
        with self._cond:
            self._acc.begin_flush()
        try:
            self._sender.wake()
            futures = self._io.run(_call(self._sender.pending_futures), None)
            deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
            for future in futures:  # bounded: one wait per unfinished batch, up to the deadline
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not future.wait(remaining):
                    raise RequestTimedOutError(f"flush did not complete within {timeout_ms} ms")
        finally:
            with self._cond:
                self._acc.end_flush()

    def close(self, timeout_ms: int | None = None) -> None:
        """Stop accepting records, deliver those queued (up to ``timeout_ms``; None: until each
        succeeds or its ``delivery_timeout_ms`` runs out), then fail whatever is left and release
        the connections. Idempotent."""
        if self._io.in_io_thread():
            raise RuntimeError("close() from a delivery callback would deadlock")
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        try:
            self._io.run(self._close(timeout_ms), None)
        except Exception:  # pragma: no cover - close must not raise past cleanup
            log.exception("error while closing the producer")

    async def _close(self, timeout_ms: int | None) -> None:
        try:
            await self._sender.close(timeout_ms)
        finally:
            await self._metadata.close()
            await self._conns.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------ introspection
    def partitions_for(self, topic: str, timeout_ms: int | None = None) -> list[int]:
        """The topic's partition ids (fetching its metadata if needed)."""
        self._check_usable()
        validate_topic_name(topic)
        wait_ms = self._max_block_ms if timeout_ms is None else timeout_ms
        count = self._wait_on_metadata(topic, None, monotonic_ms() + wait_ms)
        return list(range(count))

    def _check_usable(self) -> None:
        if self._sender.fatal_error is not None:
            raise self._sender.fatal_error
        if self._closed:
            raise RuntimeError("the producer is closed")


async def _call(fn: Callable[[], T]) -> T:
    """Run ``fn`` on the loop (for a view that must not race the sender)."""
    return fn()


def _new_record(value: bytes | None, key: bytes | None, timestamp_ms: int | None,
                headers: Iterable[Header] | None) -> NewRecord:
    for name, item in (("value", value), ("key", key)):
        if item is not None and not isinstance(item, bytes | bytearray | memoryview):
            raise TypeError(f"{name} must be bytes or None, got {type(item).__name__} (encode "
                            "strings first)")
    if timestamp_ms is not None and (not isinstance(timestamp_ms, int) or timestamp_ms < 0):
        raise ValueError(f"timestamp_ms must be a non-negative int, got {timestamp_ms!r}")
    hdrs: list[Header] = []
    for h in headers or ():
        if (not isinstance(h, tuple) or len(h) != 2 or not isinstance(h[0], str)
                or not (h[1] is None or isinstance(h[1], bytes))):
            raise TypeError(f"headers must be (str, bytes | None) pairs, got {h!r}")
        hdrs.append(h)
    return NewRecord(
        key=None if key is None else bytes(key),
        value=None if value is None else bytes(value),
        headers=tuple(hdrs),
        timestamp_ms=wall_ms() if timestamp_ms is None else timestamp_ms,
    )


def _idempotence(enable: bool | None, acks: int, retries: int, max_in_flight: int) -> bool:
    compatible = acks == -1 and retries > 0 and max_in_flight <= IDEMPOTENT_IN_FLIGHT_MAX
    if enable is None:
        return compatible  # Kafka: on by default unless the other settings contradict it
    if enable and not compatible:
        raise ValueError("enable_idempotence=True needs acks='all', retries > 0 and "
                         f"max_in_flight <= {IDEMPOTENT_IN_FLIGHT_MAX}")
    return enable


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_non_negative(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
