"""One hosted partition replica: the I/O shell around the replication core (Kafka's Partition).

A :class:`Partition` owns a :class:`~broker.storage.PartitionLog`, the pure
:class:`~broker.replication.PartitionState` that decides (roles, ISR, HW, epochs, acks) and the
:class:`~broker.replication.ProducerStateTable` (idempotence). It drives them exactly as the
core's module doc says, all on the broker's event loop and without an ``await`` inside any step,
so no other request sees a half-done one:

* **produce** (leader): ``check_produce`` → ``validate_header`` (size, header) → the records
  checked (``validate_records``: CRC, decompression, framing, keys for compacted topics; records
  are never built), off the loop when large (broker/produce_checks.py; appends keep each
  partition's order) → ``check_produce`` again → producer check → ``append_as_leader`` (one
  WriteBatch) → ``ProducerStateTable.on_append`` → ``on_local_append`` and its effects, before
  anything else can serve a fetch (no await from the second ``check_produce`` on).
  acks=all gets a waiter resolved by ``acks_all_outcome`` whenever the HW, role or ISR moves.
  Once the storage append returned, the batch is in the log: nothing after it (bookkeeping, a
  metric, the flush, the waiter) may raise to the caller, because an error that does not say
  "appended" lets an idempotent producer re-sequence a batch that may be committed. Such a
  failure is logged and returned in :attr:`AppendResult.error` with the batch's offsets.
* **flush** (leader and follower alike): topic ``flush.messages`` counts appended batches and
  fsyncs at the limit; ``flush.ms`` is checked on the replica manager's timer, for the
  partitions that told it they hold unflushed appends (``PartitionContext.on_unflushed``) only,
  so an idle broker checks none. A follower counts
  the batches of each fetch response and fsyncs before it fetches again, so the LEO it reports
  to the leader (which moves the HW, and so acks=all) is on disk when the topic asks for it.
* **follower fetch served** (leader): ``on_follower_fetch`` (epochs, divergence, follower LEO,
  HW, ISR expansion) → its effects → a read of whole batches from the fetch offset.
* **fetch response applied** (follower): ``on_fetch_response`` → effects: truncate (and the
  producer state with it), append the leader's bytes unchanged, follow its HW and log start.
* **effects** run in list order -- persist, then send (``ProposeIsr`` goes to the replica
  manager's AlterPartition sender), then acknowledge (waiters, woken long-polls).

What a partition needs from the replica manager is the small :class:`PartitionContext`.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tidelog import invariants
from tidelog.broker.metrics import TopicMetrics
from tidelog.broker.replication import (
    AcksDone,
    AppendFetchedBatches,
    BackoffFetch,
    BatchHeader,
    CheckProduceWaiters,
    DivergingEpoch,
    Duplicate,
    Effect,
    FollowerFetch,
    FollowerFetchDecision,
    LeaderFetchResponse,
    MaybeIncrementLogStartOffset,
    PartitionState,
    ProducerStateTable,
    ProposeIsr,
    Reject,
    TruncateFullyAndStartAt,
    TruncateTo,
    UpdateHighWatermark,
)
from tidelog.broker.storage import AppendInfo, FetchDataInfo, LogConfig, PartitionLog
from tidelog.configs import TopicConfig
from tidelog.errors import (
    InvalidRecordError,
    NotLeaderOrFollowerError,
    RecordListTooLargeError,
    RequestTimedOutError,
    TidelogError,
    UnknownServerError,
)
from tidelog.metadata.image import PartitionRegistration
from tidelog.record_batch import (
    RecordBatch,
    batch_crc,
    parse_batch,
    validate_header,
    validate_records,
)
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode, TimestampType

__all__ = [
    "ACKS_WAITERS_MAX",
    "AppendResult",
    "Partition",
    "PartitionContext",
    "PartitionKey",
    "log_config_of",
]

log = logging.getLogger("tidelog.broker.partition")

PartitionKey = tuple[bytes, int]  # (topic id, partition id): what data is keyed by (DESIGN §5)
#: acks=all produces waiting per partition; one more is refused before it appends
#: (REQUEST_TIMED_OUT, retriable) rather than growing memory without bound.
ACKS_WAITERS_MAX = 10_000
#: Bytes read per step when replaying batch headers into the producer state (startup only).
REPLAY_READ_BYTES = 4 << 20
#: Batches replayed into the producer state at open, at most (a bound on startup work).
REPLAY_BATCHES_MAX = 50_000_000
_LOG_APPEND_TIME = TimestampType.LOG_APPEND_TIME
#: flush.messages / flush.ms at or above this never force an fsync (Kafka's default: Long.MAX).
_NEVER = 2**62
_ACKS_ALL = -1


class PartitionContext(Protocol):
    """What a partition asks of its replica manager."""

    def propose_isr(self, partition: Partition, proposal: ProposeIsr) -> None:
        """Send AlterPartition for ``proposal`` (batched, retried); answer through
        ``Partition.on_alter_partition_response``."""

    def on_new_data(self, partition: Partition) -> None:
        """The leader's log grew, or something else a follower fetch decides on or answers
        changed (an ISR change resolved, the log start moved): wake follower long-polls and
        fetch sessions."""

    def on_high_watermark(self, partition: Partition) -> None:
        """The HW moved: wake consumer long-polls."""

    def flush(self) -> None:
        """fsync the storage now (topic flush.messages / flush.ms)."""

    def on_unflushed(self, partition: Partition) -> None:
        """``partition`` has appends a topic flush.ms may have to fsync: call its
        ``maybe_flush`` on the flush timer until it answers False."""

    @property
    def flush_generation(self) -> int:
        """Counts storage flushes, so a partition knows its appends were flushed meanwhile."""


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where a produced batch landed (or, for a duplicate, where it had landed)."""

    base_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    waiter: asyncio.Future[AcksDone] | None  # acks=all: resolved by the HW (or an error)
    #: Something failed after the batch was in the log (the flush: KAFKA_STORAGE_ERROR; a bug:
    #: UNKNOWN_SERVER_ERROR). Answer it with ``appended=true``: the batch may be committed.
    error: TidelogError | None = None
    last_offset: int = -1  # the batch's last offset (the acks=all wait is for last + 1)


@dataclass(order=True, slots=True)
class _AcksWaiter:
    required_offset: int
    leader_epoch: int = field(compare=False)
    future: asyncio.Future[AcksDone] = field(compare=False)


def log_config_of(config: TopicConfig) -> LogConfig:
    return LogConfig(segment_bytes=config.segment_bytes, segment_ms=config.segment_ms)


class Partition:
    """One partition replica on this broker (see the module doc)."""

    def __init__(
        self,
        *,
        broker_id: int,
        topic_name: str,
        topic_id: bytes,
        partition_id: int,
        log: PartitionLog,
        config: TopicConfig,
        context: PartitionContext,
        replica_lag_time_max_ms: int,
        metrics: TopicMetrics | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.topic_name = topic_name
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.key: PartitionKey = (topic_id, partition_id)
        self.log = log
        self.config = config
        self.context = context
        self.metrics = metrics
        self.state = PartitionState(broker_id, replica_lag_time_max_ms=replica_lag_time_max_ms)
        self.producers = load_producer_state(log)
        self.closed = False
        self._waiters: list[_AcksWaiter] = []
        self._producer_state_saved_at = self.producers.end_offset
        self._unflushed_batches = 0
        self._first_unflushed_ms = 0
        self._flush_generation = context.flush_generation
        #: The turn of the last produced append that waits for its records' check (off the
        #: loop): a later append of this partition waits for it (:meth:`next_turn`).
        self._append_tail: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"Partition({self.topic_name}-{self.partition_id}, {self.state!r})"

    @property
    def name(self) -> str:
        return f"{self.topic_name}-{self.partition_id}"

    @property
    def acks_waiting(self) -> int:
        return len(self._waiters)

    # --- metadata ------------------------------------------------------------------------------

    def apply_registration(self, registration: PartitionRegistration, *, now_ms: int) -> None:
        """Become leader or follower as the metadata says (stale registrations are ignored by
        the core)."""
        state = self.state
        before = self._leader_isr()
        if registration.leader == self.broker_id:
            effects = state.become_leader(
                leader_epoch=registration.leader_epoch,
                partition_epoch=registration.partition_epoch,
                replicas=registration.replicas, isr=registration.isr,
                log_end_offset=self.log.log_end_offset,
                high_watermark=self.log.high_watermark, now_ms=now_ms)
        else:
            effects = state.become_follower(
                leader_id=registration.leader, leader_epoch=registration.leader_epoch,
                partition_epoch=registration.partition_epoch,
                replicas=registration.replicas, isr=registration.isr)
        self.run_effects(effects)
        self._note_isr_change(before)

    def set_ineligible_replicas(self, broker_ids: frozenset[int], *, now_ms: int) -> None:
        self.run_effects(self.state.set_ineligible_replicas(broker_ids, now_ms=now_ms))

    def update_config(self, config: TopicConfig) -> None:
        if config != self.config:
            self.config = config
            self.log.config = log_config_of(config)
            if self._unflushed_batches:
                # A shorter flush.ms applies to appends already counted: back on the timer.
                self.context.on_unflushed(self)
            # A lower min.insync.replicas may complete waiters at once.
            self._check_waiters()

    def on_alter_partition_response(self, proposal: ProposeIsr, *, error_code: int,
                                    leader_id: int = -1, leader_epoch: int = -1,
                                    isr: Sequence[int] = (), partition_epoch: int = -1,
                                    now_ms: int) -> None:
        before = self._leader_isr()
        pending = self.state.pending_isr_change
        self.run_effects(self.state.on_alter_partition_response(
            proposal, error_code=error_code, leader_id=leader_id, leader_epoch=leader_epoch,
            isr=isr, partition_epoch=partition_epoch, now_ms=now_ms))
        self._note_isr_change(before)
        if pending is not None and self.state.pending_isr_change is None:
            # Resolved: a caught-up follower's ISR expansion may be proposed now (follower
            # fetch sessions evaluate what changed only).
            self.context.on_new_data(self)

    def _leader_isr(self) -> tuple[int, tuple[int, ...]] | None:
        state = self.state
        return (state.leader_epoch, state.isr) if state.is_leader else None

    def _note_isr_change(self, before: tuple[int, tuple[int, ...]] | None) -> None:
        """Count and log an ISR change of this leader within one leader epoch (committed by the
        controller: seen in its answer or in the metadata, whichever came first)."""
        after = self._leader_isr()
        if before is None or after is None or before[0] != after[0] or before[1] == after[1]:
            return
        log.info("%s: ISR %s -> %s", self.name, list(before[1]), list(after[1]))
        if self.metrics is not None:
            counter = self.metrics.isr_shrinks if len(after[1]) < len(before[1]) \
                else self.metrics.isr_expands
            counter.inc()

    def close(self) -> None:
        """No longer hosted here (deleted, or the broker stops): fail waiting produces."""
        self.closed = True
        error = NotLeaderOrFollowerError(f"{self.name} is no longer hosted on this broker")
        for waiter in self._waiters:
            if not waiter.future.done():
                waiter.future.set_result(AcksDone(error))
        self._waiters.clear()

    # --- leader: produce -----------------------------------------------------------------------

    def append_as_leader(self, data: bytes, *, acks: int, now_ms: int,
                         monotonic_ms: int) -> AppendResult:
        """Validate, check and append one produced batch, all now (the typed append and tests;
        the produce handler checks records off the loop: broker/produce_checks.py); raises the
        TidelogError to answer with. ``now_ms`` is the wall clock (append time),
        ``monotonic_ms`` the core's clock."""
        batch = self.validate_produced(data, acks=acks)
        keyless = validate_records(batch, find_keyless=self.keys_required)
        return self.append_checked(batch, len(data), keyless if self.keys_required else None,
                                   acks=acks, now_ms=now_ms, monotonic_ms=monotonic_ms)

    @property
    def appends_queued(self) -> bool:
        """Whether a produced append taken earlier has not had its turn yet: a later append
        must take a turn behind it (:meth:`next_turn`) rather than append now."""
        tail = self._append_tail
        return tail is not None and not tail.done()

    def next_turn(self) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        """A place in line for a produced append that cannot append now (its records are
        checked off the loop, or one before it is): (the turn to wait for, None when nothing
        is ahead; its own turn, which the caller ends with ``set_result(None)`` once it has
        appended or was refused, never earlier). Taken synchronously in request order, turns
        keep the partition's appends in the order their requests arrived."""
        before = self._append_tail if self.appends_queued else None
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._append_tail = mine
        return before, mine

    @property
    def keys_required(self) -> bool:
        """Kafka's LogValidator: a compacted topic keeps the latest record per key, so a record
        without a key has no place in it."""
        return "compact" in self.config.cleanup_policy

    def validate_produced(self, data: bytes, *, acks: int) -> RecordBatch:
        """The cheap half of a produce's checks, on the event loop, in Kafka's order:
        leadership and min.insync.replicas, then size (max.message.bytes, segment.bytes) and
        header; raises the TidelogError to answer with. The records are checked next
        (``record_batch.validate_records``, off the loop when large), then
        :meth:`append_checked`, which checks leadership again."""
        config = self.config
        error = self.state.check_produce(acks, config.min_insync_replicas)
        if error is not None:
            raise error
        batch = validate_header(data, max_bytes=config.max_message_bytes)
        if len(data) > config.segment_bytes:
            raise RecordListTooLargeError(
                f"batch of {len(data)} bytes is larger than segment.bytes {config.segment_bytes}")
        return batch

    def append_checked(self, batch: RecordBatch, size: int, keyless: int | None, *, acks: int,
                       now_ms: int, monotonic_ms: int) -> AppendResult:
        """Append a batch whose records were checked; ``keyless`` is the check's first record
        without a key (-1: none; None: keys not looked for, the topic was not compacted then).
        Leadership, min.insync.replicas and the producer's sequence are checked now, at the
        append; raises the TidelogError to answer with (nothing appended)."""
        state, config = self.state, self.config
        if self.closed:
            raise NotLeaderOrFollowerError(f"{self.name} is no longer hosted on this broker")
        error = state.check_produce(acks, config.min_insync_replicas)
        if error is not None:
            raise error
        if self.keys_required:
            if keyless is None:  # the topic became compacted while its records were checked
                keyless = validate_records(batch, find_keyless=True)
            self._refuse_keyless(keyless)
        if acks == _ACKS_ALL and len(self._waiters) >= ACKS_WAITERS_MAX:
            raise RequestTimedOutError(
                f"{self.name}: {ACKS_WAITERS_MAX} acks=all produces are waiting already")
        check = self.producers.check(producer_id=batch.producer_id,
                                     producer_epoch=batch.producer_epoch,
                                     base_sequence=batch.base_sequence,
                                     record_count=batch.record_count)
        if isinstance(check, Reject):
            raise check.error
        append_time_ms = -1
        if isinstance(check, Duplicate):
            base_offset, last_offset = check.base_offset, check.last_offset
            # A retry must not be answered "written" while the flush the topic asks for is
            # still owed (it failed when the batch was first appended): try it again.
            error = self._after_append("flush", self._flush_if_owed, base_offset)
        else:
            info = self._append(batch, now_ms)
            base_offset, last_offset = info.base_offset, info.last_offset
            if config.message_timestamp_type == "LogAppendTime":
                append_time_ms = info.log_append_time_ms
            # From here on the batch is in the log: failures are answered as appended.
            error = self._after_append(
                "bookkeeping",
                lambda: self._on_leader_append(batch, info, size, monotonic_ms),
                base_offset)
            # flush.ms is a duration: measured on the monotonic clock, so a wall-clock step
            # neither forces nor postpones an fsync.
            error = self._after_append(
                "flush", lambda: self._count_unflushed(monotonic_ms, 1), base_offset) or error
        waiter = None
        if acks == _ACKS_ALL and error is None:
            try:
                waiter = self._add_waiter(last_offset + 1, state.leader_epoch)
            except Exception as e:  # a bug; the batch is in the log all the same
                error = self._after_append_failed("the acks=all wait", e, base_offset)
        return AppendResult(base_offset, append_time_ms, self.log.log_start_offset, waiter,
                            error, last_offset=last_offset)

    def _refuse_keyless(self, keyless: int) -> None:
        """INVALID_RECORD for a compacted topic's batch with a keyless record (nothing is
        appended), as Kafka's LogValidator."""
        if keyless >= 0:
            policy = ",".join(sorted(self.config.cleanup_policy))
            raise InvalidRecordError(
                f"{self.name}: topic {self.topic_name!r} is compacted (cleanup.policy="
                f"{policy}) and compacted topics need a key on every record; record {keyless} "
                "of the batch has none")

    def _append(self, batch: RecordBatch, now_ms: int) -> AppendInfo:
        """The storage append alone. When it raises, nothing was written and the error is
        answered as such."""
        if (self.config.message_timestamp_type == "LogAppendTime"
                and batch.timestamp_type != _LOG_APPEND_TIME):
            # timestamp_type is under the CRC (common.proto): recompute it, as Kafka's leader
            # does when it rewrites a batch's timestamp type.
            batch.timestamp_type = _LOG_APPEND_TIME
            batch.crc = batch_crc(batch)
        return self.log.append_as_leader(batch, leader_epoch=self.state.leader_epoch,
                                         now_ms=now_ms)

    def _on_leader_append(self, batch: RecordBatch, info: AppendInfo, size: int,
                          monotonic_ms: int) -> None:
        """What every leader append is followed by, before anything can serve a fetch (the
        core asserts it): the producer state first (a retry must find the batch), then the
        core and its effects, the follower wake-up and the metrics."""
        self.producers.on_append(BatchHeader(
            batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.record_count,
            info.base_offset, info.log_append_time_ms))
        # Followers first, while the core still has the old LEO: a fetch session records then
        # that its caught-up followers of this idle partition fetched it again (broker.
        # replication.fetch_session), as Kafka's leader would have seen them do.
        self.context.on_new_data(self)
        effects = self.state.on_local_append(self.log.log_end_offset, now_ms=monotonic_ms)
        self.run_effects(effects)
        if self.metrics is not None:
            self.metrics.bytes_in.inc(size)
            self.metrics.messages_in.inc(batch.record_count)

    def _after_append(self, what: str, step: Callable[[], object],
                      base_offset: int) -> TidelogError | None:
        """Run one step that follows an append; its failure becomes the error to answer
        (with appended=true), never an exception that would say "not written"."""
        try:
            step()
        except Exception as e:
            return self._after_append_failed(what, e, base_offset)
        return None

    def _after_append_failed(self, what: str, error: Exception,
                             base_offset: int) -> TidelogError:
        if isinstance(error, TidelogError):
            # A storage failure (the flush): Kafka would take the log dir offline. The batch
            # stays in the log and may be committed; the producer retries it as it is.
            log.error("%s: the batch at offset %d is in the log, but %s failed: %s", self.name,
                      base_offset, what, error)
            return error
        log.exception("%s: the batch at offset %d is in the log, but %s failed", self.name,
                      base_offset, what)
        return UnknownServerError(f"{what} failed after the append at offset {base_offset}: "
                                  f"{type(error).__name__}: {error}")

    def _add_waiter(self, required_offset: int, leader_epoch: int) -> asyncio.Future[AcksDone]:
        future: asyncio.Future[AcksDone] = asyncio.get_running_loop().create_future()
        outcome = self.state.acks_all_outcome(
            required_offset=required_offset, leader_epoch=leader_epoch,
            min_insync_replicas=self.config.min_insync_replicas)
        if outcome is not None:
            future.set_result(outcome)
        else:
            # Sorted by required offset (a retried duplicate may need an earlier one).
            bisect.insort(self._waiters, _AcksWaiter(required_offset, leader_epoch, future))
        return future

    def forget_waiter(self, future: asyncio.Future[AcksDone]) -> None:
        """A produce stopped waiting (timed out): drop its waiter."""
        for i, waiter in enumerate(self._waiters):
            if waiter.future is future:
                del self._waiters[i]
                return

    def _check_waiters(self) -> None:
        """Complete waiting acks=all produces the core says are done, oldest first: the first
        still waiting means every later one waits too (same epoch, higher offset)."""
        waiters = self._waiters
        if not waiters:
            return
        state, min_isr = self.state, self.config.min_insync_replicas
        done = 0
        for waiter in waiters:
            outcome = state.acks_all_outcome(required_offset=waiter.required_offset,
                                             leader_epoch=waiter.leader_epoch,
                                             min_insync_replicas=min_isr)
            if outcome is None:
                break
            if not waiter.future.done():
                waiter.future.set_result(outcome)
            done += 1
        if done:
            del waiters[:done]

    # --- leader: serving fetches ---------------------------------------------------------------

    def serve_follower_fetch(self, replica_id: int, request: pb.FetchRequest.PartitionData, *,
                             max_bytes: int, monotonic_ms: int, broker_epoch: int = -1
                             ) -> tuple[FollowerFetchDecision, list[bytes]]:
        """A follower's fetch of this partition: the core's decision and the batches to send."""
        decision = self.state.on_follower_fetch(
            replica_id, fetch_offset=request.fetch_offset,
            last_fetched_epoch=request.last_fetched_epoch,
            current_leader_epoch=request.current_leader_epoch, log=self.log,
            now_ms=monotonic_ms, broker_epoch=broker_epoch)
        if decision.effects:
            self.run_effects(list(decision.effects))
        batches: list[bytes] = []
        if (decision.should_read and max_bytes > 0
                and decision.fetch_offset < decision.log_end_offset):
            batches = self.log.read(decision.fetch_offset, max_bytes).batches
            if self.metrics is not None and batches:
                self.metrics.replication_bytes_out.inc(sum(len(b) for b in batches))
        return decision, batches

    def read_for_consumer(self, fetch_offset: int, current_leader_epoch: int,
                          max_bytes: int) -> FetchDataInfo:
        """Whole batches below the HW from ``fetch_offset`` (leaders only); raises
        NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH /
        OFFSET_OUT_OF_RANGE."""
        error = self.state.check_leader_epoch(current_leader_epoch)
        if error is not None:
            raise error
        log = self.log
        return log.read(fetch_offset, max_bytes, max_offset=log.high_watermark)

    # --- follower ------------------------------------------------------------------------------

    def fetch_request(self) -> FollowerFetch | None:
        return self.state.fetch_request(self.log)

    def on_fetch_response(self, request: FollowerFetch,
                          response: pb.FetchResponse.PartitionData) -> int | None:
        """Apply the leader's answer; returns an error code when the fetcher must back off."""
        batches = list(response.batches) if response.error_code == ErrorCode.NONE else []
        headers = [parse_batch(b) for b in batches]
        next_offset = None
        if headers:
            last = headers[-1]
            next_offset = last.base_offset + last.record_count
            if next_offset <= request.fetch_offset:
                log.warning("%s: leader %d sent batches ending at %d, below fetch offset %d",
                            self.name, request.leader_id, next_offset, request.fetch_offset)
                return ErrorCode.CORRUPT_MESSAGE
        diverging = None
        if response.HasField("diverging_epoch"):
            diverging = DivergingEpoch(response.diverging_epoch.epoch,
                                       response.diverging_epoch.end_offset)
        answer = LeaderFetchResponse(
            error_code=response.error_code, high_watermark=response.high_watermark,
            log_start_offset=response.log_start_offset,
            log_end_offset=response.log_end_offset, diverging_epoch=diverging,
            batches_next_offset=next_offset)
        effects = self.state.on_fetch_response(request, answer, self.log)
        try:
            return self.run_effects(effects, fetched=list(zip(batches, headers, strict=True)))
        except TidelogError as error:
            # The log refused the leader's batches (corrupt on the wire, not at our LEO): the
            # core reads the LEO again on the next fetch, so backing off is always safe.
            log.warning("%s: applying the fetch from leader %d failed: %s", self.name,
                        request.leader_id, error)
            return int(error.code)

    def _append_fetched(self, fetched: list[tuple[bytes, RecordBatch]], next_offset: int) -> None:
        log_ = self.log
        total = appended = 0
        for data, header in fetched:
            if header.base_offset + header.record_count <= log_.log_end_offset:
                continue  # already here (cannot happen at a batch boundary; harmless if it does)
            log_.append_as_follower(data)
            if header.base_offset < self.producers.end_offset:
                # The log restarted inside this batch (the leader's log start moved into it).
                self.producers.truncate_fully_and_start_at(header.base_offset)
            self.producers.on_append(BatchHeader(
                header.producer_id, header.producer_epoch, header.base_sequence,
                header.record_count, header.base_offset, header.log_append_time_ms))
            total += len(data)
            appended += 1
        invariants.check(log_.log_end_offset == next_offset,
                         f"{self.name}: LEO {log_.log_end_offset} after the fetched batches, "
                         f"the core expected {next_offset}")
        if self.metrics is not None:
            self.metrics.replication_bytes_in.inc(total)
        if appended:
            # flush.messages holds on followers as on the leader (Kafka's log.append flushes
            # for both), before this follower's next fetch reports its new LEO to the leader.
            # The fetcher passes no clock; flush.ms is a duration, so the monotonic one.
            self._count_unflushed(int(time.monotonic() * 1000), appended)

    # --- effects -------------------------------------------------------------------------------

    def run_effects(self, effects: Sequence[Effect], *,
                    fetched: list[tuple[bytes, RecordBatch]] | None = None) -> int | None:
        """Carry out the core's effects in order; returns BackoffFetch's error code, if any."""
        if not effects:
            return None
        recheck = hw_moved = False
        backoff = None
        for effect in effects:
            if isinstance(effect, UpdateHighWatermark):
                before = self.log.high_watermark
                hw_moved |= self.log.update_high_watermark(effect.high_watermark) != before
                recheck = True
            elif isinstance(effect, ProposeIsr):
                self.context.propose_isr(self, effect)
            elif isinstance(effect, CheckProduceWaiters):
                recheck = True
            elif isinstance(effect, AppendFetchedBatches):
                invariants.check(bool(fetched), f"{self.name}: {effect} without batches")
                self._append_fetched(fetched or [], effect.next_offset)
            elif isinstance(effect, TruncateTo):
                self._truncate_to(effect.offset)
            elif isinstance(effect, TruncateFullyAndStartAt):
                # Producer state first (see _truncate_to), then the log.
                self.producers.truncate_fully_and_start_at(effect.offset)
                self.maybe_save_producer_state(force=True)
                self.log.truncate_fully_and_start_at(effect.offset)
                log.info("%s: emptied and restarted at %d", self.name, effect.offset)
            elif isinstance(effect, MaybeIncrementLogStartOffset):
                self.log.maybe_increment_log_start_offset(effect.offset)
            elif isinstance(effect, BackoffFetch):
                backoff = effect.error_code
            else:  # pragma: no cover - the Effect union is closed
                raise AssertionError(f"unknown effect {effect!r}")
        if recheck:
            self._check_waiters()
        if hw_moved and self.state.is_leader:
            self.context.on_high_watermark(self)
        return backoff

    def _truncate_to(self, offset: int) -> None:
        """The producer state is cut and saved *before* the log: a snapshot must never
        describe batches the log no longer has (after a crash it would outlive the data it
        describes, and later batches at the same offsets would be checked against it). Cut at
        ``offset`` it forgets exactly what the log's cut removes (the batch holding ``offset``
        goes whole in both)."""
        before_leo = self.log.log_end_offset
        if offset < before_leo:
            self.producers.truncate_to(offset)
            self.maybe_save_producer_state(force=True)
        self.log.truncate_to(offset)
        self.producers.truncate_to(self.log.log_end_offset)
        if self.log.log_end_offset < before_leo:
            log.info("%s: truncated from %d to %d (diverged from leader %d)", self.name,
                     before_leo, self.log.log_end_offset, self.state.leader_id)

    # --- timers --------------------------------------------------------------------------------

    def tick(self, monotonic_ms: int) -> None:
        if self.state.is_leader:
            self.run_effects(self.state.tick(monotonic_ms))

    def enforce_retention(self, now_ms: int) -> int:
        config = self.config
        if "delete" not in config.cleanup_policy:
            return 0
        start = self.log.log_start_offset
        removed = self.log.enforce_retention(now_ms, retention_ms=config.retention_ms,
                                             retention_bytes=config.retention_bytes)
        if self.log.log_start_offset != start and self.state.is_leader:
            self.context.on_new_data(self)  # followers follow the leader's log start
        return removed

    def maybe_save_producer_state(self, *, force: bool = False) -> bool:
        """Store the producer state if it changed since the last save (or ``force``)."""
        end = self.producers.end_offset
        if not force and end == self._producer_state_saved_at:
            return False
        self.log.put_producer_state(self.producers.encode())
        self._producer_state_saved_at = end
        return True

    def _count_unflushed(self, now_ms: int, batches: int) -> None:
        """Topic flush.messages: count ``batches`` just appended (as leader or follower) and
        fsync at the limit. A flush that fails leaves the count, so the next append -- or a
        retry of this batch (``_flush_if_owed``) -- tries again."""
        config = self.config
        if config.flush_messages >= _NEVER and config.flush_ms >= _NEVER:
            return  # Kafka's defaults: never force an fsync
        if self._flush_generation != self.context.flush_generation:
            self._flush_generation = self.context.flush_generation
            self._unflushed_batches = 0
        if self._unflushed_batches == 0:
            self._first_unflushed_ms = now_ms
        self._unflushed_batches += batches
        if config.flush_ms < _NEVER:
            self.context.on_unflushed(self)  # flush.ms: the timer checks this one
        self._flush_if_owed()

    def _flush_if_owed(self) -> None:
        """fsync when flush.messages batches are unflushed (no storage flush since them)."""
        if (self._unflushed_batches >= self.config.flush_messages
                and self._flush_generation == self.context.flush_generation):
            self.context.flush()

    def maybe_flush(self, now_ms: int) -> bool:
        """Topic flush.ms: fsync when the oldest unflushed append is that old. Returns whether
        the timer must keep checking this partition: False once nothing is left to flush (no
        append counted, a storage flush since them, or this one) or flush.ms never forces one;
        a failed flush raises and leaves the partition to check again."""
        if (not self._unflushed_batches
                or self._flush_generation != self.context.flush_generation
                or self.config.flush_ms >= _NEVER):
            return False
        if now_ms - self._first_unflushed_ms < self.config.flush_ms:
            return True
        self.context.flush()
        return False


def load_producer_state(log_: PartitionLog) -> ProducerStateTable:
    """The producer state at open: the stored snapshot cut to the LEO, then the headers of the
    batches after it replayed (a damaged snapshot: rebuilt from the whole log)."""
    table = None
    blob = log_.producer_state()
    if blob:
        try:
            table = ProducerStateTable.decode(blob)
        except ValueError as e:
            log.warning("%s: producer state unreadable (%s); rebuilding it from the log",
                        log_.topic_partition, e)
    if table is None:
        table = ProducerStateTable()
    table.truncate_to(log_.log_end_offset)
    offset = max(table.end_offset, log_.log_start_offset)
    leo = log_.log_end_offset
    for _ in range(REPLAY_BATCHES_MAX):
        if offset >= leo:
            break
        batches = log_.read(offset, REPLAY_READ_BYTES).batches
        if not batches:
            break
        for data in batches:
            header = parse_batch(data)
            end = header.base_offset + header.record_count
            if end > table.end_offset:
                table.on_append(BatchHeader(
                    header.producer_id, header.producer_epoch, header.base_sequence,
                    header.record_count, header.base_offset, header.log_append_time_ms))
            offset = end
    return table
