"""What ``Producer.send()`` returns: :class:`FutureRecordMetadata` (Kafka's name), and the
:class:`BatchResult` its batch shares with every record's future.

A future is three slots (its batch's result, its record's index, its timestamp); it has the
``concurrent.futures.Future`` methods users call (``result(timeout)``, ``exception(timeout)``,
``done()``, ``add_done_callback``; ``cancel()`` is refused, as in Kafka). The sender completes a
batch in O(1), on the client's I/O thread; a thread that waits on one record gets a
``threading.Event`` made at that moment. docs/performance.md ("Client send() cost") has the
measurements that shaped it.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable

from tidelog.client.records import RecordMetadata, TopicPartition
from tidelog.errors import TidelogError

__all__ = ["BatchResult", "DeliveryCallback", "FutureRecordMetadata"]

log = logging.getLogger(__name__)

#: A delivery callback: ``(metadata, None)`` on success, ``(None, error)`` on failure.
DeliveryCallback = Callable[[RecordMetadata | None, TidelogError | None], None]

_WAITER_LOCK = threading.Lock()


class BatchResult:
    """The outcome of one batch, shared by the futures of its records: each future holds the
    batch's result and its record's index in the batch (offset = base offset + index).

    The sender completes a batch in O(1) (``complete``): per record it only runs the delivery
    callbacks and done callbacks that were given. The batch holds no reference to the futures
    that have none, so a future the caller drops is freed at once (a future per record kept
    alive until its batch completed cost the garbage collector ~0.3 µs per record).
    """

    __slots__ = ("_callbacks", "_deliveries", "_event", "base_offset", "done", "error",
                 "log_append_time_ms", "tp")

    def __init__(self) -> None:
        self.done = False
        self.tp: TopicPartition | None = None  # set on success
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.error: TidelogError | None = None
        self._event: threading.Event | None = None
        #: (future, on_delivery) in record order: registered as the record is appended (under
        #: the producer's lock, so before the batch can be drained and completed).
        self._deliveries: list[tuple[FutureRecordMetadata, DeliveryCallback]] | None = None
        #: (index, future, fn) of add_done_callback, in registration order.
        self._callbacks: list[tuple[int, FutureRecordMetadata,
                                    Callable[[FutureRecordMetadata], object]]] | None = None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the batch is acknowledged or failed; False after ``timeout`` seconds."""
        if self.done:
            return True
        with _WAITER_LOCK:
            event = self._event
            if event is None:
                event = self._event = threading.Event()
        # Set before reading done here; complete() sets done before reading _event.
        if self.done:
            return True
        return event.wait(timeout)

    def complete(self, tp: TopicPartition | None, base_offset: int, log_append_time_ms: int,
                 error: TidelogError | None) -> None:
        """Complete every record: record i at ``base_offset + i`` (-1 for all when
        ``base_offset`` is negative), or every one with ``error``. The delivery callbacks run
        first, in record order, then the futures complete together and their done callbacks run
        (in record order). A second completion is ignored."""
        if self.done:
            return
        if error is None:
            self.tp = tp
            self.base_offset = base_offset
            self.log_append_time_ms = log_append_time_ms
        else:
            self.error = error
        deliveries, self._deliveries = self._deliveries, None
        try:
            for future, on_delivery in deliveries or ():
                try:
                    on_delivery(future._metadata(), error)
                except Exception:
                    log.exception("a delivery callback raised; the producer carries on")
        finally:
            # Even when a callback raised something that is not an Exception (that ends the
            # producer: Sender.crash), these records have their outcome and waiters wake.
            with _WAITER_LOCK:
                self.done = True
                event, callbacks, self._callbacks = self._event, self._callbacks, None
            if event is not None:
                event.set()
        if callbacks:
            callbacks.sort(key=_index_of)  # stable: a record's own callbacks keep their order
            for _, future, fn in callbacks:
                _run_callback(fn, future)


def _index_of(item: tuple[int, FutureRecordMetadata, object]) -> int:
    return item[0]


class FutureRecordMetadata:
    """The result of one ``Producer.send()``: a light, future-like handle (Kafka's
    FutureRecordMetadata), with ``result(timeout)``, ``exception(timeout)``, ``done()``,
    ``add_done_callback(fn)`` as ``concurrent.futures.Future`` has them.

    A ``concurrent.futures.Future`` per record costs a ``Condition`` (a lock and a list) at every
    ``send()``; this is three slots: its batch's :class:`BatchResult`, its index in the batch and
    its create time. The batch completes all of them at once, on the I/O thread; a thread that
    waits gets a ``threading.Event`` (one per batch) made then (rarely: most callers flush, or
    never wait on single records). ``cancel()`` is refused (``False``), as in Kafka: a record
    handed to the producer cannot be taken back.

    ``FutureRecordMetadata(timestamp_ms)`` alone makes a future with a batch of its own.
    """

    __slots__ = ("_batch", "_index", "timestamp_ms")

    def __init__(self, timestamp_ms: int, on_delivery: DeliveryCallback | None = None,
                 batch: BatchResult | None = None, index: int = 0) -> None:
        if batch is None:
            batch = BatchResult()
        self._batch = batch
        self._index = index
        self.timestamp_ms = timestamp_ms  # the create time (see _metadata for the log's)
        if on_delivery is not None:
            if batch._deliveries is None:
                batch._deliveries = []
            batch._deliveries.append((self, on_delivery))

    def __repr__(self) -> str:
        r = self._batch
        state = "pending" if not r.done else (
            f"error={r.error!r}" if r.error is not None else f"result={self._metadata()!r}")
        return f"<FutureRecordMetadata {state}>"

    def _metadata(self) -> RecordMetadata | None:
        r = self._batch
        tp = r.tp
        if tp is None:
            return None
        return RecordMetadata(
            tp[0], tp[1], r.base_offset + self._index if r.base_offset >= 0 else -1,
            r.log_append_time_ms if r.log_append_time_ms >= 0 else self.timestamp_ms)

    # --- the Future interface ------------------------------------------------------------------
    def done(self) -> bool:
        return self._batch.done

    def running(self) -> bool:
        return not self._batch.done

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        return False

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the record is acknowledged or failed; False after ``timeout`` seconds."""
        return self._batch.wait(timeout)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        if not self._batch.wait(timeout):
            raise concurrent.futures.TimeoutError()
        if self._batch.error is not None:
            raise self._batch.error
        meta = self._metadata()
        assert meta is not None  # narrowing: complete() sets tp whenever there is no error
        return meta

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._batch.wait(timeout):
            raise concurrent.futures.TimeoutError()
        return self._batch.error

    def add_done_callback(self, fn: Callable[[FutureRecordMetadata], object]) -> None:
        """``fn(self)`` once done: at once (on this thread) when it already is, else on the
        client's I/O thread."""
        r = self._batch
        if not r.done:
            with _WAITER_LOCK:
                if not r.done:
                    if r._callbacks is None:
                        r._callbacks = []
                    r._callbacks.append((self._index, self, fn))
                    return
        _run_callback(fn, self)


def _run_callback(fn: Callable[[FutureRecordMetadata], object],
                  future: FutureRecordMetadata) -> None:
    try:
        fn(future)
    except Exception:
        log.exception("a done callback of a send() result raised; the producer carries on")
