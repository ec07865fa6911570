"""The producer's one sender task: drain ready batches, send them, complete or retry them.

It runs on the client I/O loop (one task per Producer) and is the only code that takes batches
out of the accumulator. Each turn it expires batches past ``delivery_timeout_ms``, asks the
accumulator which leaders are ready, drains at most one batch per partition for each (respecting
``max_in_flight`` requests per broker and the idempotence rules of ``_idempotence``), builds the
RecordBatch bytes (once: a retry resends the same bytes) and sends one Produce request per leader.

Responses are handled per partition (``_handle_partition``):
* NONE: complete the batch's futures in record order with (topic, partition, offset, timestamp).
* DUPLICATE_SEQUENCE_NUMBER: written earlier, offset unknown: complete with offset -1; but on a
  batch's first attempt (it cannot be its own duplicate) it is handled as out of order.
* retriable (``TidelogError.retriable``; for an idempotent producer also an out-of-order
  sequence behind a batch that is being retried): put the batch back (same producer id, epoch and
  sequence), apply the leader hint, refresh metadata when the code says it is stale; until
  ``retries`` attempts or ``delivery_timeout_ms`` run out.
* PRODUCER_FENCED / INVALID_PRODUCER_EPOCH: fatal for the producer; every later send raises it.
* anything else: fail the batch's futures with the typed error.

An exception the sender did not expect -- a bug, an answer it cannot handle, a callback raising
something that is not an ``Exception`` -- anywhere on its paths (the main loop, a produce
request's task and its answer, InitProducerId, the metadata refresh, the I/O thread itself)
ends the producer for good (``crash``): it is logged with its traceback, every batch queued or
in flight fails with a ProducerSenderError that carries it, and later ``send()``/``flush()``
raise that error. Nothing is left pending, so no ``flush()`` waits forever.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidelog.client._accumulator import ProducerBatch, RecordAccumulator
from tidelog.client._idempotence import IdempotenceState
from tidelog.client._io import Connections, monotonic_ms
from tidelog.client._metadata import STALE_METADATA_CODES, MetadataManager
from tidelog.client.futures import BatchResult
from tidelog.client.records import TopicPartition
from tidelog.errors import (
    ErrorCode,
    InvalidProducerEpochError,
    NetworkError,
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    RequestTimedOutError,
    TidelogError,
    UnknownServerError,
    error_for_code,
)
from tidelog.v1 import broker_pb2

__all__ = ["ProducerSenderError", "Sender", "SenderConfig"]

log = logging.getLogger(__name__)

#: The client waits this much longer than the Produce request's own ``timeout_ms``, so that an
#: acks=all wait that runs out reaches us as the broker's REQUEST_TIMED_OUT, not as a deadline.
RPC_SLACK_MS = 1000
#: Longest the sender sleeps while anything is queued or in flight, so expiry is noticed even
#: when no response or append wakes it.
SENDER_TICK_MS = 200


class ProducerSenderError(UnknownServerError):
    """The producer's sender failed with an exception it did not expect (``__cause__``): every
    record not yet acknowledged failed with this, and the producer refuses new records; close
    it and make a new one. A bug, or a broker answer the client cannot handle: it is logged
    with its traceback."""


@dataclass(frozen=True, slots=True)
class SenderConfig:
    acks: int
    compression: int
    request_timeout_ms: int
    delivery_timeout_ms: int
    retries: int
    max_in_flight: int
    max_request_size: int
    retry_backoff_ms: int


class Sender:
    """Drains the accumulator into Produce requests; one per Producer, on the I/O loop."""

    def __init__(
        self,
        *,
        acc: RecordAccumulator[BatchResult],
        cond: threading.Condition,
        metadata: MetadataManager,
        conns: Connections,
        idem: IdempotenceState,
        config: SenderConfig,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._acc = acc
        self._cond = cond  # the producer's lock; notified when memory is freed
        self._metadata = metadata
        self._conns = conns
        self._idem = idem
        self._cfg = config
        self._loop = loop
        self._wake = asyncio.Event()
        self._wake_scheduled = False
        self._requests_in_flight: dict[int, int] = {}
        self._sent: set[ProducerBatch[BatchResult]] = set()
        #: Batches in flight per partition (``_sent`` by partition): a partition with one holds
        #: its next batch until it is full or the response comes (the accumulator's ``ready``).
        self._sent_per_tp: dict[TopicPartition, int] = {}
        #: Per partition, the batches sent and not yet delivered, in first-send order, and the
        #: outcomes of those that finished ahead of an earlier one (see _finish).
        self._delivery_order: dict[TopicPartition, collections.deque[
            ProducerBatch[BatchResult]]] = {}
        self._outcomes: dict[ProducerBatch[BatchResult],
                             tuple[TopicPartition | None, int, int, TidelogError | None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self._forced = False
        self._pid_failures = 0
        self._pid_retry_at_ms = 0
        self._pid_task: asyncio.Task[bool] | None = None
        #: Batches out of the accumulator and not in flight when a step handling them raised
        #: (expired, aborted, being completed): ``crash`` fails them too.
        self._orphans: list[ProducerBatch[BatchResult]] = []
        self.fatal_error: TidelogError | None = None
        self.task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ control
    def start(self) -> None:
        """Start the sender task (on the loop)."""
        self.task = self._loop.create_task(self.run(), name="tidelog-producer-sender")
        self._metadata.add_listener(self._wake.set)
        self._metadata.add_failure_listener(
            lambda error: self.crash(error, "a metadata refresh"))

    def wake(self) -> None:
        """Thread-safe: look at the accumulator again now. A wake-up already scheduled and not
        yet run covers this one (it runs after the caller's append), so it is not repeated."""
        if self._wake_scheduled:
            return
        self._wake_scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._scheduled_wake)
        except BaseException:
            self._wake_scheduled = False
            raise

    def _scheduled_wake(self) -> None:
        self._wake_scheduled = False
        self._wake.set()

    def pending_results(self) -> list[BatchResult]:
        """The result of every unfinished batch (loop only: a consistent view for flush)."""
        with self._cond:
            batches = list(self._acc) + list(self._sent)
        return [b.result for b in batches]

    async def close(self, timeout_ms: int | None) -> None:
        """Send what is queued, then stop; after ``timeout_ms`` fail what is left instead."""
        self._closing = True
        with self._cond:
            self._acc.close()
        self._wake.set()
        if self.task is None:  # start() never ran: nothing was sent
            self.crash(RuntimeError("the sender task never started"), "start")
            return
        try:
            await asyncio.wait_for(
                asyncio.shield(self.task), None if timeout_ms is None else timeout_ms / 1000
            )
        except TimeoutError:
            self._force_close(NetworkError("the producer was closed before the record was sent"))
            await self.task

    def _force_close(self, error: TidelogError) -> None:
        self._forced = True
        with self._cond:
            aborted = self._acc.abort_all()
        self._for_each(aborted, lambda batch: self._fail(batch, error))
        self._cancel_tasks()

    def _cancel_tasks(self) -> None:
        """Cancel the produce requests (their batches fail) and InitProducerId, except the task
        this runs in (it is ending anyway)."""
        current = asyncio.current_task() if self._loop.is_running() else None
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        if self._pid_task is not None and self._pid_task is not current:
            self._pid_task.cancel()
        self._wake.set()

    def crash(self, error: BaseException, where: str) -> None:
        """The sender met an exception it did not expect in ``where``: log it, fail every batch
        queued, in flight or being handled with a ProducerSenderError carrying it, and refuse
        new records from now on (``fatal_error``). Runs on the I/O thread; only the first crash
        counts. It must not raise, or the futures it is there for would wait forever."""
        if isinstance(self.fatal_error, ProducerSenderError):
            return
        failure = ProducerSenderError(
            f"the producer's sender failed in {where}: {error!r}; every record not yet "
            "acknowledged failed, and the producer refuses new ones (close it)")
        failure.__cause__ = error
        log.error("the producer's sender failed in %s", where, exc_info=error)
        self.fatal_error = failure  # first: a send() racing this raises it
        self._forced = True
        with self._cond:
            batches = self._acc.abort_all() + list(self._sent) + self._orphans
            self._orphans = []
            self._cond.notify_all()  # send()s waiting for memory see fatal_error
        for batch in batches:
            try:
                self._fail(batch, failure)
            except BaseException:  # the futures first; the bookkeeping is moot now
                log.exception("failing %s after the sender failed", batch.tp)
                with contextlib.suppress(BaseException):
                    batch.result.complete(None, -1, -1, failure)
        # Whatever still waits for an earlier batch of its partition is delivered now.
        waiting, self._delivery_order = self._delivery_order, {}
        for order in waiting.values():
            for batch in order:
                with contextlib.suppress(BaseException):
                    batch.result.complete(None, -1, -1, failure)
        with contextlib.suppress(BaseException):
            self._cancel_tasks()

    def _for_each(self, batches: list[ProducerBatch[BatchResult]],
                  fn: Callable[[ProducerBatch[BatchResult]], None]) -> None:
        """``fn(batch)`` for each batch taken out of the accumulator (not in flight); should it
        raise, that batch and the ones after it are left to ``crash`` to fail."""
        for i, batch in enumerate(batches):
            try:
                fn(batch)
            except BaseException:
                self._orphans.extend(batches[i:])
                raise

    # ------------------------------------------------------------------ the loop
    def _finished(self) -> bool:
        if self._forced or self.fatal_error is not None:
            return self._closing and not self._tasks
        return self._closing and not self._sent and not self._tasks and not (
            self._acc.has_undrained()
        )

    async def run(self) -> None:
        """The sender task: ``_run`` until close; an exception it did not expect crashes the
        producer (``crash``) and the task then only waits for close, so close() returns."""
        try:
            await self._run()
        except GeneratorExit:  # the coroutine is being closed (its loop is gone): nothing to do
            raise
        except asyncio.CancelledError:
            self.crash(RuntimeError("the sender task was cancelled"), "its main loop")
            raise
        except BaseException as e:  # a bug: fail everything rather than hang flush()
            self.crash(e, "its main loop")
            await self._wait_for_close()

    async def _wait_for_close(self) -> None:
        while not self._closing:  # bounded by close(), which sets _closing and wakes this
            self._wake.clear()
            await self._wake.wait()

    async def _run(self) -> None:
        # Bounded by close(): once closing, every turn either sends, expires or waits for a
        # response, and batches expire after delivery_timeout_ms at the latest.
        while not self._finished():
            delay_ms: int | None = None
            if self.fatal_error is None and not self._forced:
                delay_ms = self._maybe_init_producer_id()
                delay_ms = _min_delay(delay_ms, self._run_once())
            if self._tasks or self._sent or self._acc.has_undrained():
                delay_ms = _min_delay(delay_ms, SENDER_TICK_MS)
            if self._finished():
                break
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._wake.wait(), None if delay_ms is None else delay_ms / 1000
                )
        if self._pid_task is not None and not self._pid_task.done():
            self._pid_task.cancel()

    def _maybe_init_producer_id(self) -> int | None:
        """Start InitProducerId in the background when a producer id (or a new epoch) is needed
        and there is something to send; returns how long to wait before trying again."""
        if not self._idem.needs_producer_id or self._idem.total_in_flight():
            return None
        if self._pid_task is not None and not self._pid_task.done():
            return None
        if not self._acc.has_undrained():
            return None  # lazily: a producer that never sends never asks for an id
        wait = self._pid_retry_at_ms - monotonic_ms()
        if wait > 0:
            return wait
        self._pid_task = self._loop.create_task(self._init_producer_id_or_crash())
        self._pid_task.add_done_callback(lambda _: self._wake.set())
        return None

    def _run_once(self) -> int | None:
        now = monotonic_ms()
        snap = self._metadata.snapshot
        self._metadata.maybe_expire(now)
        busy = {n for n, c in self._requests_in_flight.items() if c >= self._cfg.max_in_flight}
        with self._cond:
            expired = self._acc.expire(now)
            in_flight = self._sent_per_tp
            check = self._acc.ready(now, snap.leader_of, busy, in_flight)
            drained = {}
            if check.ready_nodes:
                drained = self._acc.drain(
                    check.ready_nodes, snap.leader_of, now_ms=now,
                    max_request_bytes=self._cfg.max_request_size, can_send=self._idem.can_send,
                    in_flight=in_flight,
                )
            for batches in drained.values():
                self._sent.update(batches)  # first: should a step below raise, crash fails them
                for batch in batches:
                    in_flight[batch.tp] = in_flight.get(batch.tp, 0) + 1
                    if batch.attempts <= 1:  # a retry keeps its place
                        self._delivery_order.setdefault(batch.tp, collections.deque()).append(
                            batch)
            for batches in drained.values():
                for batch in batches:
                    self._idem.on_drain(batch)
        self._for_each(expired, lambda batch: self._expire(batch, now))
        if check.unknown_leader_topics:
            self._metadata.add_topics(check.unknown_leader_topics)
            self._metadata.request_update()
        for node, batches in drained.items():
            ready = [b for b in batches if self._build(b)]
            if not ready:
                continue
            self._requests_in_flight[node] = self._requests_in_flight.get(node, 0) + 1
            task = self._loop.create_task(self._produce(node, ready))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return check.next_check_delay_ms

    def _build(self, batch: ProducerBatch[BatchResult]) -> bool:
        """Build the batch's bytes once (a retry resends them); fail it if they are invalid."""
        if batch.payload is not None:
            return True
        try:
            batch.payload = batch.builder.build(
                compression=self._cfg.compression,
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                base_sequence=batch.base_sequence,
                max_bytes=self._cfg.max_request_size,
            )
        except TidelogError as e:
            self._idem.on_response(batch)
            self._idem.rollback(batch)
            self._fail(batch, e)
            return False
        return True

    # ------------------------------------------------------------------ produce requests
    def _request(self, batches: list[ProducerBatch[BatchResult]]) -> broker_pb2.ProduceRequest:
        request = broker_pb2.ProduceRequest(acks=self._cfg.acks,
                                            timeout_ms=self._cfg.request_timeout_ms)
        by_topic: dict[str, Any] = {}
        for b in batches:
            topic = by_topic.get(b.tp.topic)
            if topic is None:
                topic = by_topic[b.tp.topic] = request.topics.add(name=b.tp.topic)
            topic.partitions.add(partition_id=b.tp.partition, batch=b.payload)
        return request

    async def _produce(self, node: int, batches: list[ProducerBatch[BatchResult]]) -> None:
        """One produce request's task: send it, handle the answer; an exception it did not
        expect (a bug, an answer it cannot handle) crashes the producer rather than leave the
        batches in flight forever."""
        try:
            await self._produce_and_handle(node, batches)
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except BaseException as e:
            self.crash(e, f"a produce request to broker {node}")
        finally:
            self._requests_in_flight[node] -= 1
            self._wake.set()

    async def _produce_and_handle(self, node: int,
                                  batches: list[ProducerBatch[BatchResult]]) -> None:
        try:
            address = self._metadata.snapshot.address_of(node)
            if address is None:
                raise NetworkError(f"broker {node} is no longer in the cluster metadata")
            # Over the broker's ProduceStream (unary Produce when it has none): appended in
            # the order sent, as on a Kafka connection (Connections.multiplex).
            resp = await self._conns.multiplex(
                address, "Produce", self._request(batches),
                timeout_ms=self._cfg.request_timeout_ms + RPC_SLACK_MS,
            )
        except TidelogError as e:
            self._metadata.request_update()
            for b in batches:
                self._handle_error(b, e, None)
        except asyncio.CancelledError:
            for b in batches:
                b.maybe_written = True
                self._fail(b, NetworkError("the producer was closed while the batch was in flight"
                                           " (it may have been written)"))
            raise
        else:
            parts = {(t.name, p.partition_id): p for t in resp.topics for p in t.partitions}
            for b in batches:
                self._handle_partition(b, parts.get(b.tp))

    def _handle_partition(
        self, batch: ProducerBatch[BatchResult],
        resp: broker_pb2.ProduceResponse.PartitionResponse | None,
    ) -> None:
        if resp is None:
            self._handle_error(batch, NetworkError(
                f"the produce response did not mention {batch.tp}"), None)
        elif resp.error_code == ErrorCode.NONE:
            self._complete(batch, resp.base_offset, resp.log_append_time_ms)
        elif resp.error_code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER and batch.attempts > 1:
            self._complete(batch, -1, -1)  # written before; the leader no longer knows where
        elif resp.error_code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
            # On its first attempt a batch cannot be a duplicate of itself: the leader's state
            # does not match ours. Completing it as written could acknowledge records that are
            # not in the log, so treat it as out of order (retry, or a new epoch, KIP-360).
            self._handle_error(batch, OutOfOrderSequenceNumberError(
                f"{batch.tp}: DUPLICATE_SEQUENCE_NUMBER for a batch sent for the first time "
                f"({resp.error_message})"), None)
        else:
            if resp.appended:
                # The leader appended it before failing (acks=all that did not complete): it
                # may be committed, so it must not be resent under a new producer epoch.
                batch.maybe_written = True
            hint = resp.current_leader if resp.HasField("current_leader") else None
            self._handle_error(batch, error_for_code(resp.error_code, resp.error_message), hint)

    def _handle_error(self, batch: ProducerBatch[BatchResult], error: TidelogError,
                      hint: Any) -> None:
        now = monotonic_ms()
        self._idem.on_response(batch)
        self._unsend(batch)
        if hint is not None:
            self._metadata.apply_leader_hint(batch.tp, hint)
        if error.code in STALE_METADATA_CODES:
            self._metadata.request_update()
        if isinstance(error, ProducerFencedError | InvalidProducerEpochError):
            self._fatal(error)  # first, so a send() after this future fails raises it
            self._fail(batch, error)
            return
        if isinstance(error, RequestTimedOutError | NetworkError):
            batch.maybe_written = True
        # A gap the leader sees at our first unacknowledged batch (or a leader that lost our
        # state) is fixed by a new epoch (KIP-360); out-of-order behind a retried batch is normal.
        reset = self._idem.enabled and (
            error.code == ErrorCode.UNKNOWN_PRODUCER_ID
            or (error.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
                and self._idem.is_first_unacked(batch))
        )
        retriable = error.retriable or reset or (
            self._idem.enabled and error.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        )
        if retriable and now - batch.created_ms >= self._cfg.delivery_timeout_ms:
            error = RequestTimedOutError(
                f"{batch.record_count} record(s) for {batch.tp} not delivered within "
                f"delivery_timeout_ms={self._cfg.delivery_timeout_ms}; last error: {error}")
        elif retriable and self._may_retry(batch, now):
            if reset:
                self._idem.request_epoch_bump()
            log.debug("retrying %s (attempt %d): %s", batch.tp, batch.attempts, error)
            with self._cond:
                self._acc.reenqueue(batch, now_ms=now)
            return
        self._fail(batch, error)
        if self._idem.enabled and batch.has_sequence:
            self._idem.request_epoch_bump()  # its sequence leaves a gap the leader would refuse

    def _may_retry(self, batch: ProducerBatch[BatchResult], now_ms: int) -> bool:
        return (
            not self._forced
            and self.fatal_error is None
            and batch.attempts <= self._cfg.retries
            and now_ms - batch.created_ms < self._cfg.delivery_timeout_ms
        )

    def _expire(self, batch: ProducerBatch[BatchResult], now_ms: int) -> None:
        waited = now_ms - batch.created_ms
        note = " (an earlier attempt may have written it)" if batch.maybe_written else ""
        self._fail(batch, RequestTimedOutError(
            f"expiring {batch.record_count} record(s) for {batch.tp}: {waited} ms passed since "
            f"the batch was created (delivery_timeout_ms={self._cfg.delivery_timeout_ms}){note}"
        ))
        if self._idem.enabled and batch.has_sequence:
            self._idem.request_epoch_bump()

    # ------------------------------------------------------------------ producer ids
    async def _init_producer_id_or_crash(self) -> bool:
        try:
            return await self._init_producer_id()
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except BaseException as e:
            self.crash(e, "InitProducerId")
            return False

    async def _init_producer_id(self) -> bool:
        bump = self._idem.has_producer_id
        request = broker_pb2.InitProducerIdRequest(
            producer_id=self._idem.producer_id if bump else -1,
            producer_epoch=self._idem.producer_epoch if bump else -1,
        )
        try:
            resp = await self._metadata.call_any(
                "InitProducerId", request,
                deadline_ms=monotonic_ms() + self._cfg.request_timeout_ms,
            )
            if resp.error_code != ErrorCode.NONE:
                raise error_for_code(resp.error_code, resp.error_message)
        except TidelogError as e:
            self._pid_failures += 1
            self._pid_retry_at_ms = monotonic_ms() + self._cfg.retry_backoff_ms * min(
                2 ** self._pid_failures, 10)
            if e.retriable:
                log.debug("InitProducerId failed, will retry: %s", e)
                return False
            self._fatal(e)
            return False
        self._pid_failures = 0
        with self._cond:
            self._idem.set_producer_id(resp.producer_id, resp.producer_epoch)
            queued = [b for b in self._acc if b.has_sequence]
            unsure = [b for b in queued if b.maybe_written and self._acc.remove(b)]
            for b in queued:
                b.unstamp()
        # Re-sequencing a batch that may already be written could write it twice.
        self._for_each(unsure, lambda b: self._fail(b, RequestTimedOutError(
            f"{b.record_count} record(s) for {b.tp} may have been written; the producer "
            "epoch was bumped so they are not retried")))
        return True

    # ------------------------------------------------------------------ completion
    def _unsend(self, batch: ProducerBatch[BatchResult]) -> None:
        """The batch is no longer in flight (answered, failed or to be retried)."""
        if batch in self._sent:
            self._sent.remove(batch)
            left = self._sent_per_tp[batch.tp] - 1
            if left:
                self._sent_per_tp[batch.tp] = left
            else:
                del self._sent_per_tp[batch.tp]

    def _fatal(self, error: TidelogError) -> None:
        if self.fatal_error is None:
            log.error("producer failed: %s", error)
            self.fatal_error = error
        with self._cond:
            aborted = self._acc.abort_all()
        self._for_each(aborted, lambda batch: self._fail(batch, error))

    def _complete(self, batch: ProducerBatch[BatchResult], base_offset: int,
                  log_append_time_ms: int) -> None:
        self._idem.on_response(batch)
        self._idem.on_acked(batch)
        self._unsend(batch)
        known = base_offset >= 0 and self._cfg.acks != 0
        self._finish(batch, (batch.tp, base_offset if known else -1, log_append_time_ms, None))

    def _fail(self, batch: ProducerBatch[BatchResult], error: TidelogError) -> None:
        self._idem.on_response(batch)
        self._unsend(batch)
        self._finish(batch, (None, -1, -1, error))

    def _finish(self, batch: ProducerBatch[BatchResult],
                outcome: tuple[TopicPartition | None, int, int, TidelogError | None]) -> None:
        """Deliver ``outcome`` to the batch's records, in send order per partition (Kafka's
        promise: callbacks of one partition's records run in the order they were sent). Answers
        of several requests in flight to one partition can be handled out of order (acks=all
        answers come as the HW passes them), so a batch that finishes ahead of an earlier one
        of its partition waits for it; a batch never sent (expired, aborted) queues behind the
        partition's batches in flight, if any."""
        order = self._delivery_order.get(batch.tp)
        if order is None:
            self._deliver(batch, outcome)
            return
        if batch not in self._outcomes and batch not in order:
            order.append(batch)
        self._outcomes[batch] = outcome
        while order and order[0] in self._outcomes:
            head = order.popleft()
            self._deliver(head, self._outcomes.pop(head))
        if not order:
            del self._delivery_order[batch.tp]

    def _deliver(self, batch: ProducerBatch[BatchResult],
                 outcome: tuple[TopicPartition | None, int, int, TidelogError | None]) -> None:
        try:
            batch.result.complete(*outcome)
        finally:  # a callback raised past complete(): the memory is still given back
            self._release(batch)

    def _release(self, batch: ProducerBatch[BatchResult]) -> None:
        with self._cond:
            if batch.reserved_bytes:
                self._acc.deallocate(batch)
            self._cond.notify_all()


def _min_delay(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
