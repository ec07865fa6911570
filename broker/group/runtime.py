"""The group coordinator's runtime on one broker (Kafka's CoordinatorRuntime, thin): loads a
:class:`~broker.group.coordinator.GroupCoordinatorShard` for every ``__consumer_offsets``
partition this broker leads, serialises each shard's requests, writes their records and
answers once they are committed.

* **Loading.** The runtime is a metadata publisher (subscribed after the replica manager, so the
  partition is hosted when it hears of it). When this broker becomes the leader of an offsets
  partition it starts a load: a new shard replays the partition with ``read()`` from its log
  start until the high watermark reaches the log end offset seen when the load began (a new
  leader's HW catches up once its followers fetch); meanwhile requests get
  COORDINATOR_LOAD_IN_PROGRESS. A record that does not decode fails the load (logged), which is
  retried after :data:`LOAD_RETRY_MS`. When the broker stops leading the partition the shard is
  dropped: its groups' requests get NOT_COORDINATOR.
* **Writes.** A request runs the shard's pure handler (under the shard's ``asyncio.Lock``),
  which returns (records, response) with the records already applied in memory; the records
  join the shard's open batch (:class:`~broker.group.append_accumulator.AppendAccumulator`)
  with no await in between, so log order is apply order. The open batch is appended to the
  leader's log as one Kafka-style batch (key and value per record) when its linger ends
  (:data:`APPEND_LINGER_MS`, adaptive by default: at once if no earlier batch of the shard
  waits for its acks, else as soon as none does) or when the next write would not fit; each
  response is answered only once the batch holding its records is committed (acks=all).
  Concurrent commits thus share one append and one acks=all wait (Kafka's CoordinatorRuntime
  accumulates a batch per shard and answers a write once the HW passes it, likewise). Reads
  (OffsetFetch, describe, list) and writes without records answer once the newest batch they
  may have seen is committed, so no answer shows what a failed write left in memory. A write
  that fits one batch (just under ``MESSAGE_BYTES_MAX``) never straddles two, so all of it is
  in the log or none is; only a larger one is split (see docs/decisions.md). If an append
  fails, the shard's memory is ahead of the log, so the shard is reloaded from the log and
  every request whose records the batch carried gets COORDINATOR_NOT_AVAILABLE or
  NOT_COORDINATOR (both retriable), as Kafka maps append errors; records never appended
  (the open batch at a reload or unload) fail their requests likewise.
* **Timers.** Members' session and rebalance deadlines are in a heap per shard
  (:mod:`broker.group.deadlines`): the timer task wakes at the earliest deadline of any shard
  (woken sooner when a write sets an earlier one; at most every :data:`TIMER_MIN_INTERVAL_MS`)
  and runs the shard's ``on_deadlines``, which visits only the members due; every
  :data:`TIMER_INTERVAL_MS` it runs the full ``on_timer`` (monotonic ms: session and rebalance
  timeouts must not jump with the wall clock) and offset expiry beside it on the wall clock
  (commit timestamps are wall-clock times). Their records join the open batch; the timer does
  not wait for them.
* **The topic.** :meth:`ensure_offsets_topic` asks the controller (through the caller's
  ``create_topic``) to create ``__consumer_offsets`` on first use; one attempt at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tidelog import limits
from tidelog.broker.group.append_accumulator import AppendAccumulator, PendingBatch, sized
from tidelog.broker.group.assignment import TopicMetadata
from tidelog.broker.group.coordinator import (
    TIMER_RECORDS_SOFT_MAX,
    GroupCoordinatorConfig,
    GroupCoordinatorShard,
)
from tidelog.broker.group.offsets import expire_offsets
from tidelog.broker.group.partitioner import partition_for
from tidelog.broker.group.records import GroupRecord, decode
from tidelog.broker.group.topic_regex import RegexTopics
from tidelog.broker.metadata_listener import MetadataUpdate
from tidelog.broker.partition_writer import PartitionWriter, PendingAppend, TopicIdPartition
from tidelog.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    TidelogError,
    UnknownServerError,
)
from tidelog.invariants import check
from tidelog.metadata.image import MetadataImage, TopicImage
from tidelog.metadata.topic_names import OFFSETS_TOPIC
from tidelog.record_batch import build_batch, decode_records, parse_batch
from tidelog.v1.common_pb2 import ErrorCode

if TYPE_CHECKING:
    from tidelog.broker.partition import Partition

log = logging.getLogger("tidelog.broker.group")

__all__ = ["TIMER_INTERVAL_MS", "GroupCoordinatorRuntime", "ShardOp"]

#: How often each loaded shard's on_timer runs (offset expiry, empty groups; members' deadlines
#: are also checked when they come, see next_wake_ms).
TIMER_INTERVAL_MS = 500
#: The timer never wakes more often than this.
TIMER_MIN_INTERVAL_MS = 50
#: A failed load is retried after this (while still leader).
LOAD_RETRY_MS = 1_000
#: How long a load waits between reads when the HW is still below its target.
LOAD_POLL_MS = 20
#: Bytes one load read asks for.
LOAD_READ_BYTES = 1 << 20
#: A write's records go out in batches of at most this many bytes (keys, values and each
#: record's framing), leaving room for the batch header under the batch size limit. A write that
#: fits is one batch, appended and replicated as a unit: all of it is in the log or none is.
WRITE_BATCH_BYTES = limits.MESSAGE_BYTES_MAX - 1024
#: acks=all wait of one coordinator write.
WRITE_TIMEOUT_MS = 5_000
#: ACL decisions one image's view remembers for members' subscriptions (a view lives until the
#: next metadata change; past this many it forgets them and asks the gate again).
DESCRIBE_DECISIONS_MAX = 100_000
#: How long a write's answer may wait beyond WRITE_TIMEOUT_MS for its batch's outcome (which
#: its append's own bounded wait, a reload or an unload always gives: this only bounds it).
COMMIT_WAIT_SLACK_MS = 1_000
#: How long the open batch gathers records before it is appended (Kafka's
#: group.coordinator.append.linger.ms). ADAPTIVE_LINGER (the default): once the event loop has
#: run what is ready now if no earlier batch of the shard waits for its acks, else as soon as
#: none does, so an idle shard adds no delay and a busy one gathers what arrives during one
#: replication round; 0: once the event loop has run what is ready now; > 0: that many ms.
#: See docs/decisions.md (measured).
ADAPTIVE_LINGER = -1
APPEND_LINGER_MS = ADAPTIVE_LINGER
APPEND_LINGER_MS_MAX = 100

#: Answered when a batch of the shard's writes is committed: the append's error, or None.
BatchDone = asyncio.Future[TidelogError | None]

#: Append errors that mean this broker is no longer the partition's leader (Kafka's mapping).
_NOT_COORDINATOR_CODES = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.KAFKA_STORAGE_ERROR})
_SERVER_ERROR_CODES = frozenset({
    ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_RECORD,
    ErrorCode.CORRUPT_MESSAGE})

R = TypeVar("R")
#: A write: the shard's pure handler, called under the shard's lock.
ShardOp = Callable[[GroupCoordinatorShard], tuple[list[GroupRecord], R]]


class CoordinatorPartitions(PartitionWriter, Protocol):
    """What the runtime needs of the replica manager: the typed append/read, the log start
    of a hosted partition (where a load begins), and a hosted partition (its HW, for lag)."""

    def log_start_offset(self, tp: TopicIdPartition) -> int:
        ...

    def partition(self, topic_id: bytes, partition_id: int) -> Partition | None:
        ...


class _State(Enum):
    LOADING = "loading"
    ACTIVE = "active"


@dataclass
class _ShardContext:
    """One offsets partition this broker leads."""

    tp: TopicIdPartition
    leader_epoch: int
    shard: GroupCoordinatorShard
    state: _State = _State.LOADING
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    load_task: asyncio.Task[None] | None = None
    #: Bumped on every (re)load, so a finished load of an older generation is ignored.
    generation: int = 0
    #: The records of writes not yet appended (the open batch), kept across reloads so that
    #: batch sequence numbers only grow.
    accumulator: AppendAccumulator = field(
        default_factory=lambda: AppendAccumulator(WRITE_BATCH_BYTES))
    #: Batch sequence -> the future its writes are answered on (the append's error or None),
    #: for batches open or appended and not yet committed.
    batches: dict[int, BatchDone] = field(default_factory=dict)
    #: The newest batch's future (None after a load): an answer is sent only once the batch
    #: that was newest when it was made is committed.
    tail: BatchDone | None = None
    #: The pending end of the open batch's linger.
    linger: asyncio.Handle | None = None
    #: Batches appended whose acks=all wait has not ended (the adaptive linger waits for 0).
    in_flight: int = 0


class ImageTopics(RegexTopics):
    """The image's topics as the shard's ``topics`` argument (a view: nothing copied). An
    image never changes, so the names each subscription regex matched are remembered for as
    long as the view lives (the runtime's :meth:`GroupCoordinatorRuntime.topics` keeps one per
    image)."""

    def __init__(self, image: MetadataImage,
                 may_describe: Callable[[str, str, str], bool] | None = None) -> None:
        super().__init__()
        self.image = image
        self._by_name = image.topics.by_name
        self._may_describe = may_describe
        #: (principal, host, topic) -> decision: the image's ACLs never change either.
        self._decisions: dict[tuple[str, str, str], bool] = {}

    def describable(self, principal: str, host: str, names: set[str]) -> set[str]:
        if self._may_describe is None:
            return names
        if len(self._decisions) >= DESCRIBE_DECISIONS_MAX:
            self._decisions.clear()
        kept = set()
        for name in names:
            key = (principal, host, name)
            allowed = self._decisions.get(key)
            if allowed is None:
                allowed = self._decisions[key] = self._may_describe(principal, host, name)
            if allowed:
                kept.add(name)
        return kept

    def __getitem__(self, name: str) -> TopicMetadata:
        topic = self._by_name[name]
        return TopicMetadata(topic.topic_id, name, topic.num_partitions)

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupCoordinatorRuntime:
    """The coordinator shards of one broker (see the module doc)."""

    def __init__(self, *, broker_id: int, partitions: CoordinatorPartitions,
                 image: Callable[[], MetadataImage],
                 create_topic: Callable[[], Coroutine[Any, Any, None]],
                 config: GroupCoordinatorConfig | None = None,
                 seed: int | None = None, append_linger_ms: int = APPEND_LINGER_MS,
                 write_timeout_ms: int = WRITE_TIMEOUT_MS,
                 may_describe: Callable[[str, str, str], bool] | None = None) -> None:
        self.broker_id = broker_id
        #: (principal, host, topic) -> may it Describe it; None with authorization off.
        self._may_describe = may_describe
        self.config = config or GroupCoordinatorConfig()
        self._partitions = partitions
        self._image = image
        self._create_topic = create_topic
        self._rng = random.Random(seed)
        check(append_linger_ms == ADAPTIVE_LINGER or 0 <= append_linger_ms <= APPEND_LINGER_MS_MAX,
              f"append_linger_ms must be {ADAPTIVE_LINGER} or 0..{APPEND_LINGER_MS_MAX}")
        check(write_timeout_ms > 0, "write_timeout_ms must be positive")
        self._append_linger_ms = append_linger_ms
        self._write_timeout_ms = write_timeout_ms
        self._ack_tasks: set[asyncio.Task[None]] = set()
        #: When the timer task next wakes (monotonic ms), and the event that wakes it sooner.
        self._timer_due_ms = 0
        self._timer_wake = asyncio.Event()
        self._shards: dict[int, _ShardContext] = {}
        self._topic_id: bytes | None = None
        self._creating: asyncio.Task[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._topics: ImageTopics | None = None
        #: The event loop the runtime runs on (set by start): the metrics collector, on the
        #: HTTP thread, takes its snapshots there.
        self.loop: asyncio.AbstractEventLoop | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._timer = asyncio.get_running_loop().create_task(
            self._run_timers(), name=f"group-coordinator-{self.broker_id}-timers")

    async def stop(self) -> None:
        tasks = [t for t in (self._timer, self._creating) if t is not None]
        tasks += [c.load_task for c in self._shards.values() if c.load_task is not None]
        tasks += list(self._ack_tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for context in list(self._shards.values()):
            self._unload(context)  # fails the writes never appended
            for sequence in list(context.batches):  # and those whose wait was cancelled
                self._batch_done(context, sequence, CoordinatorNotAvailableError(
                    f"broker {self.broker_id} is shutting down"))

    # --- where groups live ---------------------------------------------------------------------

    def offsets_topic(self) -> TopicImage | None:
        return self._image().topics.by_name.get(OFFSETS_TOPIC)

    def topics(self) -> ImageTopics:
        """The newest image's topics, the same view while the image does not change (so each
        subscription regex is matched against the topic names once per metadata change, not
        once per heartbeat; a created or deleted topic gives a new view and new matches)."""
        image = self._image()
        if self._topics is None or self._topics.image is not image:
            self._topics = ImageTopics(image, self._may_describe)
        return self._topics

    def partition_of(self, group_id: str, topic: TopicImage) -> int:
        return partition_for(group_id, topic.num_partitions)

    def high_watermark(self, topic: str, partition_id: int) -> int | None:
        """The HW of ``topic-partition_id`` if this broker hosts it (leader or follower), else
        None: the image alone says nothing of a partition's HW."""
        found = self._image().topics.get(topic)
        hosted = None if found is None else self._partitions.partition(found.topic_id,
                                                                       partition_id)
        return None if hosted is None else hosted.log.high_watermark

    def ensure_offsets_topic(self) -> None:
        """Start creating ``__consumer_offsets`` unless it exists or a creation is under way."""
        if self.offsets_topic() is not None:
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.get_running_loop().create_task(
                self._create_topic(), name=f"group-coordinator-{self.broker_id}-create-topic")

    def _context_for(self, group_id: str) -> _ShardContext:
        """The active shard of ``group_id``'s partition, or the coordinator error to answer."""
        topic = self.offsets_topic()
        if topic is None:
            self.ensure_offsets_topic()
            raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} is being created; retry")
        pid = self.partition_of(group_id, topic)
        context = self._shards.get(pid)
        if context is None or context.tp.topic_id != topic.topic_id:
            raise NotCoordinatorError(
                f"broker {self.broker_id} is not the coordinator of group {group_id!r} "
                f"({OFFSETS_TOPIC}-{pid}); find it again")
        if context.state is not _State.ACTIVE:
            raise CoordinatorLoadInProgressError(
                f"broker {self.broker_id} is loading {OFFSETS_TOPIC}-{pid}; retry")
        return context

    def active_shards(self) -> list[GroupCoordinatorShard]:
        return [c.shard for _, c in sorted(self._shards.items()) if c.state is _State.ACTIVE]

    # --- requests ------------------------------------------------------------------------------

    async def read(self, group_id: str, op: Callable[[GroupCoordinatorShard], R]) -> R:
        """Run a read-only ``op`` on ``group_id``'s shard; the answer once every write it may
        have seen is committed (never a value a failed write leaves behind)."""
        context = self._context_for(group_id)
        async with context.lock:
            self._check_still_active(context, group_id)
            result = op(context.shard)
            seen = _seen(context)
        await self._committed(seen)
        return result

    async def write(self, group_id: str, op: ShardOp[R]) -> R:
        """Run ``op`` on ``group_id``'s shard and add its records to the shard's open batch;
        the response once they are committed. Raises the coordinator error to answer instead.

        The handler runs and its records join the open batch with no await in between, so log
        order is the order the records were applied in. The batch is appended when the linger
        ends (or at once when full), so the commits of concurrent members become one append
        and one acks=all wait; each waits outside the shard, so writes pipeline (Kafka's
        CoordinatorRuntime accumulates and answers once the HW passes, likewise). A write
        with no records answers once what it may have seen is committed, as a read does."""
        context = self._context_for(group_id)
        async with context.lock:
            self._check_still_active(context, group_id)
            try:
                records, response = op(context.shard)
            except Exception as error:
                # The handler may have applied some records before it failed: start over.
                self._reload(context, f"a handler failed: {error!r}")
                raise
            waits = self._accumulate(context, records) or _seen(context)
            self._maybe_wake_timer(context.shard)
        await self._committed(waits)
        return response

    def _check_still_active(self, context: _ShardContext, group_id: str) -> None:
        # The lock may have been waited for across an unload or a reload.
        if self._shards.get(context.tp.partition_id) is not context:
            raise NotCoordinatorError(
                f"broker {self.broker_id} stopped coordinating group {group_id!r}")
        if context.state is not _State.ACTIVE:
            raise CoordinatorLoadInProgressError(
                f"broker {self.broker_id} is reloading {OFFSETS_TOPIC}-"
                f"{context.tp.partition_id}; retry")

    def _accumulate(self, context: _ShardContext, records: list[GroupRecord]
                    ) -> list[BatchDone]:
        """Add one write's records to the shard's batches (synchronously: nothing else runs on
        the shard in between); the futures of the batches they went into. Full batches are
        appended now, the open one when the linger ends."""
        if not records:
            return []
        sequences, closed = context.accumulator.add(sized(records))
        loop = asyncio.get_running_loop()
        waits = [context.batches.setdefault(s, loop.create_future()) for s in sequences]
        context.tail = waits[-1]
        for batch in closed:
            self._append_batch(context, batch)
        self._maybe_start_linger(context)
        return waits

    def _maybe_start_linger(self, context: _ShardContext) -> None:
        """Plan the open batch's append (see APPEND_LINGER_MS); the adaptive linger with a
        batch in flight plans nothing: the end of that batch's wait calls this again."""
        if context.accumulator.open_batch is None or context.linger is not None:
            return
        adaptive = self._append_linger_ms == ADAPTIVE_LINGER
        if adaptive and context.in_flight > 0:
            return
        loop = asyncio.get_running_loop()
        context.linger = (
            loop.call_soon(self._linger_ended, context, context.generation)
            if self._append_linger_ms <= 0 else
            loop.call_later(self._append_linger_ms / 1000, self._linger_ended, context,
                            context.generation))

    def _linger_ended(self, context: _ShardContext, generation: int) -> None:
        context.linger = None
        if self._shards.get(context.tp.partition_id) is not context \
                or context.generation != generation:
            return  # reloaded or unloaded meanwhile: its writes were failed then
        batch = context.accumulator.drain()
        if batch is not None:
            self._append_batch(context, batch)

    def _append_batch(self, context: _ShardContext, batch: PendingBatch) -> None:
        """Append ``batch`` to the leader's log now, and answer its writes once it is
        committed; a failure reloads the shard and fails every write it carried."""
        try:
            data = build_batch(batch.records, now_ms=_wall_ms(),
                               max_bytes=limits.MESSAGE_BYTES_MAX)
        except TidelogError as error:  # a record over the batch size limit
            self._reload(context, f"its records do not fit a batch: {error.message}")
            self._batch_done(context, batch.sequence, error)
            return
        pending = self._partitions.start_append(
            context.tp, data, acks=-1, now_ms=_wall_ms(), monotonic_ms=_monotonic_ms())
        if pending.outcome.error is not None:
            self._reload(context, f"a write failed: {pending.outcome.error.message}")
            self._batch_done(context, batch.sequence, pending.outcome.error)
            return
        context.in_flight += 1
        task = asyncio.get_running_loop().create_task(
            self._await_batch(context, context.generation, batch.sequence, pending),
            name=f"group-coordinator-{self.broker_id}-acks-{context.tp.partition_id}")
        self._ack_tasks.add(task)
        task.add_done_callback(self._ack_tasks.discard)

    async def _await_batch(self, context: _ShardContext, generation: int, sequence: int,
                           pending: PendingAppend) -> None:
        try:
            error = (await self._partitions.await_acks([pending],
                                                       self._write_timeout_ms))[0].error
        finally:
            context.in_flight -= 1
        if error is not None and context.generation == generation:
            # The shard's memory may be ahead of what is committed: start over from the log.
            self._reload(context, f"a write failed: {error.message}")
        self._batch_done(context, sequence, error)
        if self._shards.get(context.tp.partition_id) is context:
            self._maybe_start_linger(context)

    @staticmethod
    def _batch_done(context: _ShardContext, sequence: int, error: TidelogError | None) -> None:
        done = context.batches.pop(sequence, None)
        if done is not None and not done.done():
            done.set_result(error)

    async def _committed(self, waits: list[BatchDone]) -> None:
        """Wait until every batch in ``waits`` is committed (the HW passing the newest one a
        read saw commits everything before it too); the coordinator error of one that failed.
        Every batch future is resolved by its append's own bounded wait, a reload or an
        unload; the slack only bounds this wait should that ever not happen."""
        pending = [w for w in waits if not w.done()]
        if len(pending) == 1:
            # The common case, without a timer and asyncio.wait's tasks (measured: ~5% of the
            # coordinator's CPU at 1,000 commits/s). Bounded all the same: a batch's future is
            # resolved by its append's acks wait (WRITE_TIMEOUT_MS), a reload, an unload or
            # stop(). Shielded: other answers share the future.
            await asyncio.shield(pending[0])
        elif pending:
            await asyncio.wait(pending,
                               timeout=(self._write_timeout_ms + COMMIT_WAIT_SLACK_MS) / 1000)
        for done in waits:
            if not done.done():
                raise CoordinatorNotAvailableError(
                    "the coordinator's writes were not committed in time; retry")
            error = done.result()
            if error is not None:
                raise _coordinator_error(error)

    # --- timers --------------------------------------------------------------------------------

    async def _run_timers(self) -> None:
        """Each shard's on_timer every TIMER_INTERVAL_MS; between, its on_deadlines when a
        member's deadline comes (woken early when a write sets an earlier one)."""
        full_due_ms = _monotonic_ms() + TIMER_INTERVAL_MS
        while True:
            now = _monotonic_ms()
            self._timer_due_ms = next_wake_ms(
                now, full_due_ms=full_due_ms,
                deadlines_ms=[c.shard.next_deadline_ms() for c in self._shards.values()
                              if c.state is _State.ACTIVE])
            self._timer_wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._timer_wake.wait(),
                                       (self._timer_due_ms - now) / 1000)
            now = _monotonic_ms()
            full = now >= full_due_ms
            if full:
                full_due_ms = now + TIMER_INTERVAL_MS
            for context in list(self._shards.values()):
                if context.state is not _State.ACTIVE:
                    continue
                deadline = context.shard.next_deadline_ms()
                if full or (deadline is not None and deadline <= now):
                    self._run_tick(context, full=full)

    def _run_tick(self, context: _ShardContext, *, full: bool) -> None:
        try:
            self._tick(context, full=full)
        except TidelogError as error:
            log.info("broker %d: %s timer: %s", self.broker_id, context.tp, error)
        except Exception:
            log.exception("broker %d: %s timer failed", self.broker_id, context.tp)

    def _maybe_wake_timer(self, shard: GroupCoordinatorShard) -> None:
        """A write may have set a deadline earlier than the timer's planned wake."""
        deadline = shard.next_deadline_ms()
        if deadline is not None and deadline < self._timer_due_ms:
            self._timer_wake.set()

    def _tick(self, context: _ShardContext, *, full: bool) -> None:
        """The shard's due deadlines (and on a full tick its on_timer and the wall-clock
        offset expiry); their records join the open batch. Nothing waits for them here: a
        failed append reloads the shard as a request's would, and one shard's slow write must
        not hold the others' timers."""
        if self._shards.get(context.tp.partition_id) is not context \
                or context.state is not _State.ACTIVE:
            return
        shard = context.shard
        try:
            now = _monotonic_ms()
            records = shard.on_timer(now) if full else shard.on_deadlines(now)
            expired = expire_offsets(shard.state, now_ms=_wall_ms(),
                                     retention_ms=shard.config.offsets_retention_ms,
                                     records_max=TIMER_RECORDS_SOFT_MAX) if full else []
            for record in expired:
                shard.replay_written(record)
        except Exception as error:
            self._reload(context, f"its timer failed: {error!r}")
            raise
        self._accumulate(context, records + expired)

    # --- loading and unloading (a metadata publisher) ------------------------------------------

    def on_metadata_update(self, update: MetadataUpdate, image: MetadataImage) -> None:
        """Load the offsets partitions this broker now leads, unload those it stopped leading."""
        topic = image.topics.by_name.get(OFFSETS_TOPIC)
        leading: dict[int, int] = {}
        if topic is not None:
            leading = {pid: p.leader_epoch for pid, p in topic.partitions.items()
                       if p.leader == self.broker_id}
        for pid, context in list(self._shards.items()):
            if pid not in leading or topic is None or context.tp.topic_id != topic.topic_id:
                self._unload(context)
        if topic is None:
            return
        for pid, epoch in sorted(leading.items()):
            loaded = self._shards.get(pid)
            if loaded is None:
                self._start_load(TopicIdPartition(topic.topic_id, pid), epoch)
            elif loaded.leader_epoch != epoch:
                # Leadership went elsewhere and came back within one update: the log may have
                # been truncated as a follower meanwhile, so the memory is not to be trusted.
                loaded.leader_epoch = epoch
                self._reload(loaded, f"new leader epoch {epoch}")

    def _new_shard(self) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(self.config, rng=random.Random(self._rng.getrandbits(64)))

    def _start_load(self, tp: TopicIdPartition, leader_epoch: int) -> None:
        context = _ShardContext(tp, leader_epoch, self._new_shard())
        self._shards[tp.partition_id] = context
        self._launch_load(context)

    def _launch_load(self, context: _ShardContext) -> None:
        context.generation += 1
        context.state = _State.LOADING
        self._fail_open_batch(context, CoordinatorLoadInProgressError(
            f"broker {self.broker_id} is reloading {OFFSETS_TOPIC}-{context.tp.partition_id}"))
        context.tail = None  # the load replays only what is committed
        context.shard = self._new_shard()
        context.load_task = asyncio.get_running_loop().create_task(
            self._load(context, context.generation),
            name=f"group-coordinator-{self.broker_id}-load-{context.tp.partition_id}")

    def _reload(self, context: _ShardContext, why: str) -> None:
        if self._shards.get(context.tp.partition_id) is not context:
            return
        log.warning("broker %d: reloading %s-%d: %s", self.broker_id, OFFSETS_TOPIC,
                    context.tp.partition_id, why)
        if context.load_task is not None:
            context.load_task.cancel()
        self._launch_load(context)

    def _unload(self, context: _ShardContext) -> None:
        log.info("broker %d: unloading %s-%d", self.broker_id, OFFSETS_TOPIC,
                 context.tp.partition_id)
        self._shards.pop(context.tp.partition_id, None)
        if context.load_task is not None:
            context.load_task.cancel()
        self._fail_open_batch(context, NotLeaderOrFollowerError(
            f"broker {self.broker_id} stopped leading {OFFSETS_TOPIC}-{context.tp.partition_id}"))

    def _fail_open_batch(self, context: _ShardContext, error: TidelogError) -> None:
        """Fail the writes whose records were never appended (their memory is dropped with
        the shard); appended batches keep waiting: if committed, their answer is a success."""
        if context.linger is not None:
            context.linger.cancel()
            context.linger = None
        batch = context.accumulator.clear()
        if batch is not None:
            self._batch_done(context, batch.sequence, error)

    async def _load(self, context: _ShardContext, generation: int) -> None:
        tp = context.tp
        while self._shards.get(tp.partition_id) is context and context.generation == generation:
            started = time.monotonic()
            try:
                count = await self._replay(context, generation)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.error("broker %d: loading %s-%d failed (retrying in %d ms): %s",
                          self.broker_id, OFFSETS_TOPIC, tp.partition_id, LOAD_RETRY_MS, error)
                context.shard = self._new_shard()
                await asyncio.sleep(LOAD_RETRY_MS / 1000)
                continue
            if count < 0:
                return  # superseded
            context.state = _State.ACTIVE
            log.info("broker %d: loaded %s-%d (%d records in %.0f ms)", self.broker_id,
                     OFFSETS_TOPIC, tp.partition_id, count, (time.monotonic() - started) * 1000)
            return

    async def _replay(self, context: _ShardContext, generation: int) -> int:
        """Replay the partition into ``context.shard``; the record count, or -1 if the context
        was unloaded or reloaded meanwhile."""
        tp = context.tp
        offset = self._partitions.log_start_offset(tp)
        target = -1
        count = 0
        while True:
            if self._shards.get(tp.partition_id) is not context \
                    or context.generation != generation:
                return -1
            info = self._partitions.read(tp, offset, LOAD_READ_BYTES)
            if target < 0:
                target = info.log_end_offset
            for data in info.batches:
                batch = parse_batch(data)
                for record in decode_records(batch):
                    if record.key is None:
                        raise UnknownServerError(f"a keyless record at offset {record.offset}")
                    context.shard.replay(decode(record.key, record.value))
                    count += 1
                offset = batch.base_offset + batch.record_count
            if offset >= target:
                return count
            if not info.batches:
                await asyncio.sleep(LOAD_POLL_MS / 1000)  # the HW has not reached the target


def next_wake_ms(now_ms: int, *, full_due_ms: int, deadlines_ms: Iterable[int | None]) -> int:
    """When the timer next wakes: the next full tick or the earliest member deadline of any
    shard, whichever is first, but not before TIMER_MIN_INTERVAL_MS from now (a deadline
    already due waits that long: a bound on how often the timer runs, not a delay of note
    against session timeouts of seconds)."""
    wake = min([full_due_ms, *(d for d in deadlines_ms if d is not None)])
    return max(wake, now_ms + TIMER_MIN_INTERVAL_MS)


def _seen(context: _ShardContext) -> list[BatchDone]:
    """What an answer made now waits for: the newest batch (open or appended) if it is not
    yet committed."""
    return [context.tail] if context.tail is not None and not context.tail.done() else []


def _coordinator_error(error: TidelogError) -> TidelogError:
    """What a client is told when the coordinator's write failed (Kafka's mapping)."""
    if error.code in _NOT_COORDINATOR_CODES:
        return NotCoordinatorError(f"the coordinator lost its partition: {error.message}")
    if error.code in _SERVER_ERROR_CODES:
        return UnknownServerError(f"the coordinator's write was refused: {error.message}")
    return CoordinatorNotAvailableError(f"the coordinator's write failed: {error.message}")
