"""A producer worker of the queue workload: one thread, one ``tidelog.client.Producer``,
unique values at a bounded rate, each send recorded as ``invoke`` then ``ok``/``fail``/``info``.

The thread paces its sends (:class:`~chaos.workload.pacing.Pacer`) and keeps up to
``spec.in_flight`` of them open at once. Each open send holds a *slot*, and each slot is a
history process (a process has one operation open at a time), so the producer still batches
and pipelines as an application's would. The order for one send:

1. take a free slot (wait for one, bounded by the deadline), take the next value;
2. write the ``invoke``;
3. ``Producer.send()``; if it raises, the record never joined a batch: write ``fail``;
4. otherwise the future's callback (on the client's I/O thread) writes the completion
   (chaos/workload/outcomes.py decides ``ok``/``fail``/``info``) and frees the slot.

At the deadline (or the run's stop signal) the thread stops sending, flushes, and closes the
producer, both bounded by ``finish_timeout_s``; close() fails whatever is left, which the
callbacks record as ``info``. A completion that arrives after the worker gave up is dropped, and
its invoke stays open: an unknown outcome, which the checkers treat as ``info``. No client error
ends the worker early: a producer that cannot even be created is counted in the stats.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Literal, Protocol

from tidelog.chaos.history import HistoryError, Send
from tidelog.chaos.workload.config import ClientSettings, ProducerSpec
from tidelog.chaos.workload.context import RunContext
from tidelog.chaos.workload.outcomes import delivery_error_type, describe_error
from tidelog.chaos.workload.pacing import Pacer
from tidelog.chaos.workload.stats import WorkerStats
from tidelog.chaos.workload.values import ValueSequence, encode_value
from tidelog.client import Producer, RecordMetadata

__all__ = ["ProducerWorker"]

Outcome = Literal["ok", "fail", "info"]


class _Delivery(Protocol):
    """What the workload uses of the future ``Producer.send()`` returns."""

    def exception(self, timeout: float | None = None) -> BaseException | None: ...

    def result(self, timeout: float | None = None) -> RecordMetadata: ...


class ProducerWorker(threading.Thread):
    """Sends values of producer ``index`` to ``topic`` until ``deadline_s`` (monotonic)."""

    def __init__(self, ctx: RunContext, *, index: int, spec: ProducerSpec, bootstrap: str,
                 topic: str, rate_per_s: float, deadline_s: float, finish_timeout_s: float,
                 client: ClientSettings) -> None:
        super().__init__(name=f"chaos-producer-{index}", daemon=True)
        self.ctx = ctx
        self.index = index
        self.spec = spec
        self.topic = topic
        self.stats = WorkerStats()
        self.processes = [ctx.new_process() for _ in range(spec.in_flight)]
        self._servers = bootstrap
        self._rate_per_s = rate_per_s
        self._deadline_s = deadline_s
        self._finish_timeout_s = finish_timeout_s
        self._client = client
        self._values = ValueSequence(index)
        self._free: queue.Queue[int] = queue.Queue()
        for process in self.processes:
            self._free.put(process)
        self._lock = threading.Lock()  # guards _gave_up, the stats and the completions
        self._gave_up = False

    def run(self) -> None:
        try:
            producer = self._producer()
        except Exception as e:  # a bad address, the I/O thread: nothing was sent
            self.stats.count_error(e)
            return
        try:
            self._send_until_deadline(producer)
        except HistoryError:
            pass  # a workload bug: the context keeps it and stops the run
        finally:
            self._finish(producer)

    def _producer(self) -> Producer:
        c = self._client
        return Producer(
            self._servers, client_id=f"chaos-producer-{self.index}", acks=self.spec.acks,
            enable_idempotence=self.spec.idempotent, retries=self.spec.retries,
            linger_ms=c.linger_ms, request_timeout_ms=c.request_timeout_ms,
            delivery_timeout_ms=c.delivery_timeout_ms, max_block_ms=c.max_block_ms,
            retry_backoff_ms=c.retry_backoff_ms, retry_backoff_max_ms=c.retry_backoff_max_ms,
            max_in_flight=min(self.spec.in_flight, 5),
        )

    def _send_until_deadline(self, producer: Producer) -> None:
        pacer = Pacer(self._rate_per_s, now_s=time.monotonic())
        # Bounded: every wait ends at the deadline, and the loop ends there too.
        while not self.ctx.stop.is_set():
            now = time.monotonic()
            if now >= self._deadline_s:
                return
            delay = pacer.delay_s(now)
            if delay > 0:
                self.ctx.stop.wait(min(delay, self._deadline_s - now))
                continue
            try:
                process = self._free.get(timeout=min(0.1, self._deadline_s - now))
            except queue.Empty:
                continue
            pacer.taken(time.monotonic())
            self._send_one(producer, process)

    def _send_one(self, producer: Producer, process: int) -> None:
        value = self._values.next()
        invoke = Send("invoke", process, self.ctx.now_ns(), self.topic, value,
                      self.spec.acks, self.spec.idempotent)
        with self._lock:
            self.ctx.write(invoke)
            self.stats.invoked += 1
        try:
            future = producer.send(self.topic, encode_value(value))
        except Exception as e:  # raised before the record joined a batch: never sent
            self._complete(invoke, "fail", error=e)
            return
        future.add_done_callback(lambda done: self._on_delivery(invoke, done))

    def _on_delivery(self, invoke: Send, future: _Delivery) -> None:
        """On the client's I/O thread: record the send's outcome and free its slot."""
        error = future.exception(0)
        if error is not None:
            self._complete(invoke, delivery_error_type(error, retries=self.spec.retries),
                           error=error)
            return
        meta = future.result(0)
        if invoke.acks == "0":
            self._complete(invoke, "ok", partition=meta.partition)
        elif meta.offset < 0:
            self._complete(invoke, "info", partition=meta.partition, note=(
                "DUPLICATE_SEQUENCE_NUMBER: written, but the leader no longer knows the offset"))
        else:
            self._complete(invoke, "ok", partition=meta.partition, offset=meta.offset)

    def _complete(self, invoke: Send, op_type: Outcome, *, partition: int | None = None,
                  offset: int | None = None, error: BaseException | None = None,
                  note: str | None = None) -> None:
        text = describe_error(error) if error is not None else note
        with self._lock:
            if self._gave_up:
                return  # its invoke stays open: an unknown outcome
            try:
                self.ctx.write(Send(
                    op_type, invoke.process, self.ctx.now_ns(), invoke.topic, invoke.value,
                    invoke.acks, invoke.idempotent, partition if op_type == "ok" else None,
                    offset, text))
            except HistoryError:
                return  # kept by the context; the slot stays taken, the run is stopping
            if op_type == "ok":
                self.stats.ok += 1
            elif op_type == "fail":
                self.stats.fail += 1
            else:
                self.stats.info += 1
            if error is not None:
                self.stats.count_error(error)
        self._free.put(invoke.process)

    def _finish(self, producer: Producer) -> None:
        """Flush and close, bounded; then drop completions that come later."""
        timeout_ms = int(self._finish_timeout_s * 1000) // 2
        try:
            producer.flush(timeout_ms)
        except Exception as e:
            self.stats.count_error(e)
        try:
            producer.close(timeout_ms)
        except Exception as e:
            self.stats.count_error(e)
        with self._lock:
            self._gave_up = True
