"""The Producer: send records to topics, batched per partition, delivered at least once (exactly
once per partition with idempotence, the default).

``send()`` runs on the caller's thread: it makes sure the topic's metadata is known (blocking up
to ``max_block_ms`` the first time), picks the partition, and appends the record to the
accumulator, blocking while ``buffer_memory`` is full (again up to ``max_block_ms``). The one
sender task on the shared client I/O thread does the rest (see ``_sender``). Futures complete,
and delivery callbacks run, on that I/O thread: keep callbacks short and never block in them.

Should the sender fail with an exception it did not expect (a bug, a broker answer it cannot
handle, a callback raising something that is not an ``Exception``, the I/O thread stopping), the
producer is done: every record not yet acknowledged fails with a ProducerSenderError carrying
that exception, it is logged, and ``send()``, ``send_many()`` and ``flush()`` raise it from then
on; ``close()`` still returns.
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
from tidelog.client._accumulator import (
    RECORD_OVERHEAD_BYTES,
    ProducerBatch,
    RecordAccumulator,
    estimate_bytes,
)
from tidelog.client._idempotence import IdempotenceState
from tidelog.client._io import Connections, io_thread, monotonic_ms
from tidelog.client._metadata import ClusterSnapshot, MetadataManager
from tidelog.client._partitioner import (
    PartitionerCallable,
    StickyPartitionCache,
    partition_for_key,
)
from tidelog.client._sender import ProducerSenderError, Sender, SenderConfig
from tidelog.client.bootstrap import parse_bootstrap
from tidelog.client.futures import BatchResult, DeliveryCallback, FutureRecordMetadata
from tidelog.client.records import TopicPartition
from tidelog.compression import codec_from_name
from tidelog.errors import (
    InvalidRecordError,
    MessageTooLargeError,
    RequestTimedOutError,
    TidelogError,
)
from tidelog.metadata.topic_names import validate_topic_name
from tidelog.tls import ClientSecurity

__all__ = ["Producer", "ProducerSenderError"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Header = tuple[str, bytes | None]
_ACKS = {"all": -1, "-1": -1, "1": 1, "0": 0, -1: -1, 1: 1, 0: 0}
#: Kafka's max.in.flight.requests.per.connection bound for idempotence (the leader keeps 5).
IDEMPOTENT_IN_FLIGHT_MAX = 5
#: Records send_many() appends per acquisition of the producer's lock (the sender waits no longer).
SEND_MANY_CHUNK = 1_000
#: Topic names send() has found valid, remembered so the check runs once per name (bounded).
VALID_TOPICS_CACHED_MAX = 10_000


class Producer:
    """Sends records to a Tidelog cluster. Thread-safe; use one per process and share it.

    >>> with Producer("127.0.0.1:9092") as producer:
    ...     meta = producer.send("orders", b"hello", key=b"user-1").result(timeout=10)

    Every argument after ``bootstrap_servers`` is keyword-only and named as Kafka's producer
    config in snake_case; docs/client.md lists each with its default.

    Security, with Kafka's names (docs/security.md): ``security_protocol`` is PLAINTEXT, SSL
    (TLS: ``ssl_cafile`` verifies the brokers; ``ssl_certfile``/``ssl_keyfile`` for a listener
    that asks for a client certificate) or SASL_SSL (TLS as SSL, the certificate optional, and a
    SCRAM user: ``sasl_username``, ``sasl_password``, ``sasl_mechanism`` SCRAM-SHA-256 (default)
    or SCRAM-SHA-512). Credentials the brokers refuse fail send() (or the records' futures)
    with SaslAuthenticationFailedError (or UnsupportedSaslMechanismError), never retried.
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
        security_protocol: str = "PLAINTEXT",
        ssl_cafile: str = "",
        ssl_certfile: str = "",
        ssl_keyfile: str = "",
        sasl_mechanism: str = "SCRAM-SHA-256",
        sasl_username: str = "",
        sasl_password: str = "",
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
        self._batch_size = batch_size
        self._partitioner = partitioner
        self._sticky = StickyPartitionCache(random.Random())
        # send() takes the lock itself: ``with`` on an RLock is C code, on a Condition it is two
        # Python calls (~0.1 µs more per record). The condition is for waiting and notifying.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._valid_topics: set[str] = set()
        self._tps: dict[str, list[TopicPartition]] = {}
        #: Per topic, the batch its keyless records go to now (the open batch of KIP-480's
        #: sticky partition) and the metadata snapshot that partition was chosen from: send()'s
        #: fast path. Kept under the lock.
        self._sticky_batches: dict[str, tuple[ClusterSnapshot, ProducerBatch[BatchResult]]] = {}
        self._memory_waiters = 0
        self._closed = False
        self._acc: RecordAccumulator[BatchResult] = RecordAccumulator(
            new_result=BatchResult, batch_size=batch_size, linger_ms=linger_ms,
            buffer_memory=buffer_memory,
            retry_backoff_ms=retry_backoff_ms, delivery_timeout_ms=delivery_timeout_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
        )
        self._io = io_thread()
        security = ClientSecurity(security_protocol, ssl_cafile, ssl_certfile, ssl_keyfile,
                                  sasl_mechanism, sasl_username, sasl_password)
        self._conns = Connections(client_id, security.channel_factory())
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
        self._io.add_stop_listener(self._io_stopped)
        self._io.call_soon(self._sender.start)
        self.idempotent = idempotent

    def _io_stopped(self, error: BaseException) -> None:
        """The client I/O thread stopped (on that thread, its loop no longer running)."""
        self._sender.crash(error, "the client I/O thread, which stopped")

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
        if self._closed or self._sender.fatal_error is not None:
            self._check_usable()
        if value is not None and type(value) is not bytes:
            value = _as_bytes("value", value)
        if key is not None and type(key) is not bytes:
            key = _as_bytes("key", key)
        # send_many() makes the same checks (and metadata look-up below) once per call. They are
        # written out here rather than shared: send() is the per-record hot path, and the shared
        # helpers measured 6-8% slower (100k sends against the fake broker, 4 alternating runs).
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        else:
            _check_timestamp(timestamp_ms)
        hdrs = _check_headers(headers) if headers is not None else ()
        if topic not in self._valid_topics:
            self._validate_topic(topic)
        if partition is not None and (not isinstance(partition, int) or partition < 0):
            raise ValueError(f"partition must be a non-negative int, got {partition!r}")
        if key is None and not hdrs:
            size = RECORD_OVERHEAD_BYTES if value is None else RECORD_OVERHEAD_BYTES + len(value)
        else:
            size = estimate_bytes(key, value, hdrs)
        if size > self._max_request_size or size > self._buffer_memory:
            raise self._too_large(size)
        sticky = key is None and partition is None and self._partitioner is None
        if sticky:
            # The fast path (most sends): a keyless record joins the batch the last keyless
            # record of its topic went to (its sticky partition's, for this metadata snapshot)
            # while that batch is open and has room. No clock, metadata or partitioner call; one
            # accumulator call, written out here (as in _append_sticky) to save a call layer.
            # Anything else (no sticky partition yet, a new snapshot, a batch to open, memory to
            # wait for) takes the general path below. acquire()/release() rather than ``with``:
            # ~75 ns less per record.
            batch = None
            self._lock.acquire()
            try:
                remembered = self._sticky_batches.get(topic)
                if (remembered is not None and remembered[0] is self._metadata.snapshot
                        and self._acc.buffer_used_bytes + size <= self._buffer_memory
                        and self._acc.append_to(remembered[1], None, value, hdrs, timestamp_ms,
                                                size)):
                    batch = remembered[1]
                    future = FutureRecordMetadata(timestamp_ms, on_delivery, batch.result,
                                                  batch.builder.count - 1)
                    full = batch.size_bytes >= self._batch_size
            finally:
                self._lock.release()
            if batch is not None:
                if full:
                    self._sender.wake()
                return future
        now = time.monotonic_ns() // 1_000_000  # monotonic_ms(), inline
        deadline = now + self._max_block_ms
        snapshot = self._metadata.snapshot
        count = snapshot.num_partitions(topic)
        if count is None or count <= (0 if partition is None else partition):
            count = self._wait_on_metadata(topic, partition, deadline)
        tps = self._tps.get(topic)
        if tps is None or len(tps) < count:
            tps = self._tps[topic] = [TopicPartition(topic, p) for p in range(count)]
        if partition is None and not sticky:
            partition = self._choose(topic, key, count)
        with self._lock:
            if self._sender.fatal_error is not None:  # under the lock: crash() aborts after it
                raise self._sender.fatal_error
            if self._acc.buffer_used_bytes + size > self._buffer_memory:
                self._wait_for_room(size, deadline)
            if partition is None:
                batch = self._append_sticky(topic, snapshot, count, tps, value, hdrs,
                                            timestamp_ms, size, now)
            else:
                batch = self._acc.append_fields(tps[partition], key, value, hdrs, timestamp_ms,
                                                size, now_ms=now)
            n = batch.builder.count
            future = FutureRecordMetadata(timestamp_ms, on_delivery, batch.result, n - 1)
            wake = n == 1 or batch.size_bytes >= self._batch_size
        if wake:
            self._sender.wake()
        return future

    def send_many(
        self,
        topic: str,
        values: Iterable[bytes | None],
        *,
        keys: Iterable[bytes | None] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Iterable[Header] | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> list[FutureRecordMetadata]:
        """Queue many records of one topic: the same as calling ``send(topic, value, key, ...)``
        for each value in order (with ``keys[i]`` when ``keys`` is given; ``partition``,
        ``timestamp_ms``, ``headers`` and ``on_delivery`` apply to every record), but cheaper:
        arguments and metadata are checked once and the records are appended under one lock
        acquisition per ``SEND_MANY_CHUNK`` records. Returns the futures, in order.

        Every argument is checked before anything is queued (the same errors as ``send()``;
        ``ValueError`` when ``keys`` and ``values`` differ in length). When waiting for buffer
        memory then fails (RequestTimedOutError after ``max_block_ms``, the producer closed or
        failed), the records before that point are queued and will be delivered; the exception's
        ``futures`` attribute holds their futures.
        """
        self._check_usable()
        vals = [v if v is None or type(v) is bytes else _as_bytes("value", v) for v in values]
        if keys is None:
            keys_list: list[bytes | None] | None = None
        else:
            keys_list = [k if k is None or type(k) is bytes else _as_bytes("key", k)
                         for k in keys]
            if len(keys_list) != len(vals):
                raise ValueError(f"send_many got {len(vals)} values but {len(keys_list)} keys")
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        else:
            _check_timestamp(timestamp_ms)
        hdrs = _check_headers(headers) if headers is not None else ()
        if topic not in self._valid_topics:
            self._validate_topic(topic)
        if partition is not None and (not isinstance(partition, int) or partition < 0):
            raise ValueError(f"partition must be a non-negative int, got {partition!r}")
        if not vals:
            return []
        if hdrs:
            sizes = [estimate_bytes(k, v, hdrs) for k, v in
                     zip(keys_list or [None] * len(vals), vals, strict=True)]
        else:
            base = RECORD_OVERHEAD_BYTES
            sizes = [base + (len(v) if v is not None else 0) for v in vals]
            if keys_list is not None:
                sizes = [s + len(k) if k is not None else s
                         for s, k in zip(sizes, keys_list, strict=True)]
        largest = max(sizes)
        if largest > self._max_request_size or largest > self._buffer_memory:
            raise self._too_large(largest)
        now = time.monotonic_ns() // 1_000_000  # monotonic_ms(), inline
        deadline = now + self._max_block_ms
        snapshot = self._metadata.snapshot
        count = snapshot.num_partitions(topic)
        if count is None or count <= (0 if partition is None else partition):
            count = self._wait_on_metadata(topic, partition, deadline)
        # The partition of each record; -1: the sticky partitioner's (a keyless record).
        if partition is not None:
            parts = [partition] * len(vals)
        elif self._partitioner is not None:
            parts = [self._choose(topic, k, count) for k in keys_list or [None] * len(vals)]
        elif keys_list is not None:
            parts = [-1 if k is None else partition_for_key(k, count) for k in keys_list]
        else:
            parts = [-1] * len(vals)
        tps = self._tps.get(topic)
        if tps is None or len(tps) < count:
            tps = self._tps[topic] = [TopicPartition(topic, p) for p in range(count)]
        futures: list[FutureRecordMetadata] = []
        while len(futures) < len(vals):  # bounded: each pass queues up to SEND_MANY_CHUNK records
            if self._append_many(topic, snapshot, count, tps, keys_list, vals, hdrs,
                                 timestamp_ms, sizes, parts, on_delivery, futures, now, deadline):
                self._sender.wake()
        return futures

    def _append_many(self, topic: str, snapshot: ClusterSnapshot, count: int,
                     tps: list[TopicPartition], keys: list[bytes | None] | None,
                     vals: list[bytes | None], hdrs: tuple[Header, ...], timestamp_ms: int,
                     sizes: list[int], parts: list[int], on_delivery: DeliveryCallback | None,
                     futures: list[FutureRecordMetadata], now: int, deadline: int) -> bool:
        """Append the records from ``len(futures)`` on (up to SEND_MANY_CHUNK) under the lock,
        adding their futures to ``futures``; returns whether the sender should be woken."""
        acc = self._acc
        append = acc.append_fields
        batch_size = self._batch_size
        wake = False
        start = len(futures)
        with self._cond:
            try:
                self._check_usable()
                for i in range(start, min(len(vals), start + SEND_MANY_CHUNK)):
                    size = sizes[i]
                    if acc.buffer_used_bytes + size > self._buffer_memory:
                        self._wait_for_room(size, deadline)
                    p = parts[i]
                    if p < 0:
                        batch = self._append_sticky(topic, snapshot, count, tps, vals[i], hdrs,
                                                    timestamp_ms, size, now)
                    else:
                        batch = append(tps[p], keys[i] if keys is not None else None, vals[i],
                                       hdrs, timestamp_ms, size, now_ms=now)
                    n = batch.builder.count
                    futures.append(FutureRecordMetadata(timestamp_ms, on_delivery, batch.result,
                                                        n - 1))
                    if n == 1 or batch.size_bytes >= batch_size:
                        wake = True
            except BaseException as e:
                if wake:
                    self._sender.wake()
                if futures:
                    e.futures = futures  # type: ignore[attr-defined]
                raise
        return wake

    def _append_sticky(self, topic: str, snapshot: ClusterSnapshot, count: int,
                       tps: list[TopicPartition], value: bytes | None, hdrs: tuple[Header, ...],
                       timestamp_ms: int, size: int, now: int) -> ProducerBatch[BatchResult]:
        """Append a keyless record to its topic's sticky partition (KIP-480), moving the topic to
        another partition when the record would open a new batch; the caller holds the lock and
        checked for room. Remembers the batch with ``snapshot`` (which ``count`` is from) for
        send()'s fast path: every choice of a sticky partition is made here, under the lock, so
        that batch is always on the partition StickyPartitionCache holds."""
        acc = self._acc
        remembered = self._sticky_batches.get(topic)
        if (remembered is not None and remembered[0] is snapshot
                and acc.append_to(remembered[1], None, value, hdrs, timestamp_ms, size)):
            return remembered[1]
        available = snapshot.available_partitions(topic)
        partition = self._sticky.partition(topic, count, available)
        batch = acc.open_batch(tps[partition])
        if batch is None or not acc.append_to(batch, None, value, hdrs, timestamp_ms, size):
            partition = self._sticky.next_partition(topic, partition, count, available)
            batch = acc.append_fields(tps[partition], None, value, hdrs, timestamp_ms, size,
                                      now_ms=now)
        self._sticky_batches[topic] = (snapshot, batch)
        return batch

    def _validate_topic(self, topic: str) -> None:
        validate_topic_name(topic)
        if len(self._valid_topics) < VALID_TOPICS_CACHED_MAX:
            self._valid_topics.add(topic)

    def _too_large(self, size: int) -> MessageTooLargeError:
        return MessageTooLargeError(
            f"the record is about {size} bytes, above max_request_size "
            f"({self._max_request_size}) or buffer_memory ({self._buffer_memory})"
        )

    def _wait_on_metadata(self, topic: str, partition: int | None, deadline_ms: int) -> int:
        count = self._metadata.snapshot.num_partitions(topic)
        wanted = 1 if partition is None else partition + 1
        if count is not None and count >= wanted:
            return count
        info = self._io.run(
            self._metadata.wait_for_topic(topic, min_partitions=wanted, deadline_ms=deadline_ms),
            self._max_block_ms / 1000,
        )
        return len(info.partitions)

    def _choose(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        """The partition of a record with a key, or of any record with the user's partitioner
        (keyless records otherwise go to the sticky partition: ``_append_sticky``)."""
        if self._partitioner is not None:
            available = self._metadata.snapshot.available_partitions(topic)
            chosen = self._partitioner(key, list(range(num_partitions)), list(available))
            if not isinstance(chosen, int) or not 0 <= chosen < num_partitions:
                raise ValueError(f"the partitioner returned {chosen!r}; topic {topic!r} has "
                                 f"partitions 0..{num_partitions - 1}")
            return chosen
        assert key is not None
        return partition_for_key(key, num_partitions)

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

        Raises RequestTimedOutError if that takes longer than ``timeout_ms`` (None: no limit),
        and the producer's fatal error (ProducerSenderError when its sender failed; a fenced
        producer's error) if it has one, at once or as soon as it happens while waiting.
        Failures of individual records are reported through their futures, not here.
        """
        if self._io.in_io_thread():
            raise RuntimeError("flush() from a delivery callback would deadlock")
        self._raise_fatal()
        with self._cond:
            self._acc.begin_flush()
        try:
            self._sender.wake()
            try:
                results = self._io.run(_call(self._sender.pending_results), None)
            except TidelogError:  # the I/O thread stopped meanwhile: the producer's error first
                self._raise_fatal()
                raise
            deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
            for result in results:  # bounded: one wait per unfinished batch, up to the deadline
                while not result.wait(_slice(deadline)):  # each slice: has the sender failed?
                    self._raise_fatal()
                    if deadline is not None and time.monotonic() >= deadline:
                        raise RequestTimedOutError(
                            f"flush did not complete within {timeout_ms} ms")
            self._raise_fatal()
        finally:
            with self._cond:
                self._acc.end_flush()

    def _raise_fatal(self) -> None:
        """Raise the producer's fatal error, if it has one (its sender or I/O thread failed, or
        it was fenced)."""
        if self._sender.fatal_error is not None:
            raise self._sender.fatal_error
        if not self._io.alive:  # the stop listener sets fatal_error; this is the backstop
            raise ProducerSenderError("the client I/O thread stopped; the producer cannot send")

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


#: Longest flush() waits on a batch before it looks whether the producer failed meanwhile.
FLUSH_CHECK_S = 0.5


def _slice(deadline: float | None) -> float:
    """The next wait of flush(): FLUSH_CHECK_S, or less to end at the deadline."""
    if deadline is None:
        return FLUSH_CHECK_S
    return max(0.0, min(FLUSH_CHECK_S, deadline - time.monotonic()))


async def _call(fn: Callable[[], T]) -> T:
    """Run ``fn`` on the loop (for a view that must not race the sender)."""
    return fn()


def _as_bytes(name: str, item: object) -> bytes:
    """A key or value that is not ``bytes``: a bytes-like copy, or TypeError."""
    if not isinstance(item, bytes | bytearray | memoryview):
        raise TypeError(f"{name} must be bytes or None, got {type(item).__name__} (encode "
                        "strings first)")
    return bytes(item)


def _check_timestamp(timestamp_ms: object) -> None:
    if not isinstance(timestamp_ms, int) or timestamp_ms < 0:
        raise ValueError(f"timestamp_ms must be a non-negative int, got {timestamp_ms!r}")


def _check_headers(headers: Iterable[Header]) -> tuple[Header, ...]:
    hdrs = tuple(headers)
    for h in hdrs:
        if (not isinstance(h, tuple) or len(h) != 2 or not isinstance(h[0], str)
                or not (h[1] is None or isinstance(h[1], bytes))):
            raise TypeError(f"headers must be (str, bytes | None) pairs, got {h!r}")
    if len(hdrs) > limits.RECORD_HEADERS_MAX:
        raise InvalidRecordError(
            f"a record has {len(hdrs)} headers (limit {limits.RECORD_HEADERS_MAX})")
    return hdrs


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
