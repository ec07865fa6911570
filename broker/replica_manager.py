"""The broker's partition registry: hosted partitions, the typed append, replication (Kafka's
ReplicaManager).

:class:`ReplicaManager` is what ``BrokerRuntime.replica_manager`` holds. It

* owns the broker's :class:`~broker.storage.Storage` and one :class:`~broker.partition.Partition`
  per hosted replica, keyed by (topic id, partition);
* is a metadata publisher (``on_metadata_update``): for each local change it creates the log if
  needed and makes the partition leader or follower (the core ignores stale registrations),
  re-targets the follower fetchers, deletes the partitions this broker no longer hosts (topic
  deleted, reassigned), follows fenced / shutting-down brokers (KIP-841) and topic configs. It
  runs synchronously, so the listener's reported offset means "acted on". On-disk partitions the
  metadata never mentions once caught up (a topic deleted while this broker was down) are deleted;
* serves the request handlers (:mod:`broker.handlers`, one module per API) through the narrow
  ``HandlerRegistry`` interface: lookups with leader hints, the fetch waiters, and the typed
  append (``append`` / ``start_append`` + ``await_acks``), ``read`` and high-watermark listeners
  of :mod:`broker.partition_writer`, which the group coordinator will use too;
* hands the core's ISR proposals to :mod:`broker.alter_partition` (batched AlterPartition
  requests to the active controller);
* runs the timers (one task, one pace): ISR expiry, HW checkpoints, flush, retention, producer
  state saves and expiry, stray partitions, metrics gauges, and starts log-cleaner passes (one
  at a time, their decoding on the cleaner thread).

Long-polls (Fetch ``max_wait_ms`` / ``min_bytes``, in :mod:`broker.handlers.fetch`) wait on
this registry's :mod:`broker.delayed` waiters; acks=all appends wait on their partition's
waiters with ``timeout_ms`` (REQUEST_TIMED_OUT after it).
Everything runs on the event loop; storage calls are fast enough to make there (tens of µs).
Decoding is not: a produced batch's records are checked on the record-check threads when large
(broker/produce_checks.py), and the cleaner decodes on its own thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from tidelog import limits
from tidelog.broker.alter_partition import AlterPartitionManager
from tidelog.broker.delayed import ConsumerFetchWaiters, FollowerFetchWaiters
from tidelog.broker.fetcher import (
    FETCH_BACKOFF_MS_DEFAULT,
    GrpcReplicaTransport,
    ReplicaFetcherManager,
    ReplicaTransport,
)
from tidelog.broker.metadata_listener import MetadataUpdate
from tidelog.broker.metrics import BrokerMetrics, PartitionGauges, TopicMetrics, partition_gauges
from tidelog.broker.partition import AppendResult, Partition, PartitionKey, log_config_of
from tidelog.broker.partition_writer import (
    AppendOutcome,
    HighWatermarkListener,
    PartitionWriter,
    PendingAppend,
    TopicIdPartition,
)
from tidelog.broker.produce_checks import (
    CheckResult,
    Produced,
    RecordChecker,
    start_checked_appends,
)
from tidelog.broker.producer_ids import ControllerChannel, ProducerIdManager
from tidelog.broker.replication import ProposeIsr
from tidelog.broker.replication.partition_state import REPLICA_LAG_TIME_MAX_MS_DEFAULT
from tidelog.broker.spread_pass import SpreadPass
from tidelog.broker.storage import FetchDataInfo, FlushPolicy, Storage, StorageConfig
from tidelog.broker.storage.cleaner import (
    CleanerConfig,
    CleanerStats,
    choose_partitions_to_clean,
    clean_log,
    cleaning_candidate,
)
from tidelog.config import BrokerConfig
from tidelog.configs import TopicConfig
from tidelog.errors import (
    CorruptMessageError,
    InconsistentTopicIdError,
    InvalidRequiredAcksError,
    KafkaStorageErrorError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    TidelogError,
    UnknownServerError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from tidelog.invariants import InvariantViolation, check
from tidelog.metadata.delta import LocalPartition
from tidelog.metadata.image import MetadataImage, PartitionRegistration, TopicMismatch
from tidelog.tls import PLAINTEXT, ChannelFactory
from tidelog.v1 import common_pb2

__all__ = [
    "PRODUCE_REQUEST_BYTES_MAX",
    "PRODUCE_TIMEOUT_MS_DEFAULT",
    "ReplicaManager",
    "ReplicaManagerConfig",
]

log = logging.getLogger("tidelog.broker.replica_manager")
T = TypeVar("T")

#: A produce request above this is RECORD_LIST_TOO_LARGE for every partition (Kafka's
#: socket.request.max.bytes, 100 MiB; gRPC itself refuses above GRPC_MESSAGE_BYTES_MAX).
PRODUCE_REQUEST_BYTES_MAX = limits.PRODUCE_REQUEST_BYTES_MAX
#: acks=all wait when the request says 0 (proto3's "unset"): Kafka's request.timeout.ms.
PRODUCE_TIMEOUT_MS_DEFAULT = 30_000
#: Longest acks=all wait a producer may ask for.
PRODUCE_TIMEOUT_MS_MAX = 300_000
#: A metadata change of more partitions than this is acted on in slices of this many, the event
#: loop free between them (heartbeats, fetches): ~0.1-0.2 s of work each at creation.
PUBLISH_SLICE_PARTITIONS = 500
#: Kafka's replica.high.watermark.checkpoint.interval.ms.
HW_CHECKPOINT_INTERVAL_MS = 5_000
#: Producer states are stored this often when they changed (and at a clean stop). Recovery
#: replays the batch headers after the stored one, so this bounds that replay.
PRODUCER_STATE_SAVE_INTERVAL_MS = 10_000
#: Kafka's log.cleaner.backoff.ms: how often the cleaner looks for a dirty compacted partition
#: (more often when log.retention.check.interval.ms is shorter, as tests set it).
LOG_CLEANER_BACKOFF_MS = 15_000
#: Kafka's producer.id.expiration.check.interval.ms.
PRODUCER_EXPIRATION_CHECK_INTERVAL_MS = 600_000
#: Topic flush.ms checks (of the partitions holding unflushed appends) and stray-log checks run
#: this often (the "gauges" job; the gauges themselves are computed per /metrics scrape).
GAUGES_INTERVAL_MS = 1_000
#: The timer task's pace: every periodic job runs on one of these ticks.
TICK_INTERVAL_MS = 100
#: At stop, how long produce appends still in line may take to be refused (a record check
#: already running ends first: ~0.5 s at most, limits.PRODUCE_REQUEST_RECORDS_MAX).
QUEUED_APPENDS_STOP_WAIT_S = 2.0

check(
    TICK_INTERVAL_MS <= GAUGES_INTERVAL_MS <= HW_CHECKPOINT_INTERVAL_MS,
    "the tick must come at least as often as the gauges and the HW checkpoint",
)

_ACKS_VALID = (-1, 0, 1)


def acks_error(acks: int) -> TidelogError | None:
    """INVALID_REQUIRED_ACKS unless ``acks`` is -1 (all), 0 or 1."""
    if acks in _ACKS_VALID:
        return None
    return InvalidRequiredAcksError(f"acks must be -1, 0 or 1, got {acks}")



def _wall_ms() -> int:
    return int(time.time() * 1000)


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass(frozen=True, slots=True)
class ReplicaManagerConfig:
    """The data plane's settings (from the node's ``[broker]`` table, or tests)."""

    replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS_DEFAULT
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_backoff_ms: int = FETCH_BACKOFF_MS_DEFAULT
    retention_check_interval_ms: int = 300_000
    hw_checkpoint_interval_ms: int = HW_CHECKPOINT_INTERVAL_MS
    producer_state_save_interval_ms: int = PRODUCER_STATE_SAVE_INTERVAL_MS
    storage: StorageConfig = field(default_factory=StorageConfig)
    produce_request_bytes_max: int = PRODUCE_REQUEST_BYTES_MAX

    def __post_init__(self) -> None:
        if self.replica_lag_time_max_ms <= 0:
            raise InvariantViolation(
                f"replica.lag.time.max.ms {self.replica_lag_time_max_ms} is not positive")
        if not 0 < self.replica_fetch_wait_max_ms <= limits.FETCH_WAIT_MS_MAX:
            raise InvariantViolation(
                f"replica.fetch.wait.max.ms {self.replica_fetch_wait_max_ms} outside "
                f"1..{limits.FETCH_WAIT_MS_MAX}")
        if not (self.retention_check_interval_ms > 0 and self.hw_checkpoint_interval_ms > 0):
            raise InvariantViolation(
                f"retention check interval {self.retention_check_interval_ms} ms, HW checkpoint "
                f"interval {self.hw_checkpoint_interval_ms} ms: both must be positive")
        if not 0 < self.produce_request_bytes_max <= PRODUCE_REQUEST_BYTES_MAX:
            raise InvariantViolation(
                f"produce request bytes max {self.produce_request_bytes_max} outside "
                f"1..{PRODUCE_REQUEST_BYTES_MAX}")

    @classmethod
    def from_broker_config(cls, b: BrokerConfig) -> ReplicaManagerConfig:
        return cls(
            replica_lag_time_max_ms=b.replica_lag_time_max_ms,
            replica_fetch_wait_max_ms=b.replica_fetch_wait_max_ms,
            retention_check_interval_ms=b.log_retention_check_interval_ms,
            storage=StorageConfig(flush_policy=FlushPolicy(b.log_flush_policy),
                                  flush_interval_ms=b.log_flush_interval_ms))


class ReplicaManager:
    """The data plane of one broker (see the module doc)."""

    def __init__(
        self,
        *,
        broker_id: int,
        data_dir: Path | str,
        cluster_id: str,
        controller: ControllerChannel,
        broker_epoch: Callable[[], int],
        config: ReplicaManagerConfig | None = None,
        transport: ReplicaTransport | None = None,
        metrics: BrokerMetrics | None = None,
        metadata_caught_up: Callable[[], bool] = lambda: True,
        peer_metadata: tuple[tuple[str, str], ...] = (),
        channels: ChannelFactory = PLAINTEXT,
        on_leader_unreachable: Callable[[int], None] = lambda leader_id: None,
    ) -> None:
        self.broker_id = broker_id
        self.data_dir = Path(data_dir)
        self.cluster_id = cluster_id
        self.config = config or ReplicaManagerConfig()
        self.metrics = metrics
        self._controller = controller
        self._broker_epoch = broker_epoch
        self._transport = transport
        self._metadata_caught_up = metadata_caught_up
        self._peer_metadata = peer_metadata  # our credential, sent with every follower fetch
        self._channels = channels  # plaintext or mutual TLS to the leaders
        self._on_leader_unreachable = on_leader_unreachable  # a fetch from it failed
        self._storage: Storage | None = None
        self._fetchers: ReplicaFetcherManager | None = None
        self._partitions: dict[PartitionKey, Partition] = {}
        self._image = MetadataImage.empty()
        self._ineligible: frozenset[int] = frozenset()
        # ReplicaService fetches wait for data; FetchStream fetch sessions are marked dirty.
        self._follower_waiters = FollowerFetchWaiters()
        # BrokerService fetches wait for the HW; consumers' fetch sessions are marked dirty.
        self._consumer_waiters = ConsumerFetchWaiters()
        self.producer_ids = ProducerIdManager(broker_id=broker_id, broker_epoch=broker_epoch,
                                              controller=controller)
        self._alter_partition = AlterPartitionManager(
            broker_id=broker_id, broker_epoch=broker_epoch, controller=controller,
            is_hosted=lambda p: self._partitions.get(p.key) is p)
        self._flush_generation = 0
        #: Partitions with appends a topic flush.ms may have to fsync (Partition.on_unflushed):
        #: the only ones the flush timer looks at.
        self._unflushed: set[Partition] = set()
        self._strays: set[PartitionKey] = set()
        self._topic_metrics: dict[str, TopicMetrics] = {}
        self._hw_listeners: list[HighWatermarkListener] = []
        self._tasks: list[asyncio.Task[None]] = []
        #: Produce appends waiting for their records' check or their partition's turn.
        self._queued_appends: set[asyncio.Future[PendingAppend]] = set()
        self._record_checker = RecordChecker(name=f"-{broker_id}")
        #: Log compaction: one pass at a time, its decoding on this one thread (Kafka's
        #: log.cleaner.threads, 1); the partitions it skips (a batch that does not decode).
        self._cleaner_thread = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"log-cleaner-{broker_id}")
        self._cleaner_task: asyncio.Task[CleanerStats | None] | None = None
        self._uncleanable: set[PartitionKey] = set()
        self._started = False

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Open storage (recovering every partition on disk) and start the background tasks."""
        self._storage = Storage.open(self.data_dir, cluster_id=self.cluster_id,
                                     node_id=self.broker_id, config=self.config.storage)
        self._strays = {(tp.topic_id, tp.partition) for tp in self._storage.partitions()}
        transport = self._transport or GrpcReplicaTransport(
            self._inter_broker_endpoint_of, metadata=self._peer_metadata,
            channels=self._channels)
        self._fetchers = ReplicaFetcherManager(
            broker_id=self.broker_id, broker_epoch=self._broker_epoch, transport=transport,
            fetch_wait_max_ms=self.config.replica_fetch_wait_max_ms,
            fetch_backoff_ms=self.config.replica_fetch_backoff_ms,
            on_leader_unreachable=self._on_leader_unreachable)
        self._record_checker = RecordChecker(name=f"-{self.broker_id}")
        self._cleaner_thread = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"log-cleaner-{self.broker_id}")
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._run_timers(), name=f"replica-manager-{self.broker_id}-timers"),
            loop.create_task(self._alter_partition.run(),
                             name=f"replica-manager-{self.broker_id}-alter-partition"),
        ]
        self._started = True
        log.info("broker %d: data plane started with %d partitions on disk", self.broker_id,
                 len(self._strays))

    async def stop(self) -> None:
        """Stop fetching and timers, fail waiting produces, save producer states, close."""
        if not self._started:
            return
        self._started = False
        if self._fetchers is not None:
            await self._fetchers.stop()
        tasks = [*self._tasks, *([self._cleaner_task] if self._cleaner_task else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._cleaner_thread.shutdown(wait=False, cancel_futures=True)
        await self.producer_ids.close()
        # Appends still in line: their checks are cancelled and the partitions closed below,
        # so each is refused (NOT_LEADER_OR_FOLLOWER, retriable) rather than appended.
        self._record_checker.close()
        # Requests still arriving (the gRPC server stops after us) find no partition here and
        # answer NOT_LEADER_OR_FOLLOWER with a hint, which clients retry elsewhere.
        partitions, self._partitions = self._partitions, {}
        for partition in partitions.values():
            partition.close()
            with contextlib.suppress(TidelogError):
                partition.maybe_save_producer_state()
        if self._queued_appends:  # each now refused; a check still running ends first
            await asyncio.wait(set(self._queued_appends), timeout=QUEUED_APPENDS_STOP_WAIT_S)
        self._follower_waiters.wake_all()
        self._consumer_waiters.wake_all()
        if self._storage is not None:
            self._storage.close()
        log.info("broker %d: data plane stopped", self.broker_id)

    @property
    def storage(self) -> Storage:
        assert self._storage is not None, "ReplicaManager.start() first"
        return self._storage

    @property
    def image(self) -> MetadataImage:
        """The last metadata image this manager acted on."""
        return self._image

    def partition(self, topic_id: bytes, partition_id: int) -> Partition | None:
        return self._partitions.get((topic_id, partition_id))

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    # --- what the request handlers ask (broker.handlers.common.HandlerRegistry) ----------------

    @property
    def produce_request_bytes_max(self) -> int:
        return self.config.produce_request_bytes_max

    @property
    def follower_waiters(self) -> FollowerFetchWaiters:
        """Follower fetches wait here for data, and fetch sessions are told what changed:
        appends, HW and log start moves, role, ISR and eligibility changes, deletion."""
        return self._follower_waiters

    @property
    def consumer_waiters(self) -> ConsumerFetchWaiters:
        """Consumer fetches wait here for the HW (woken by its moves, role changes, deletion)."""
        return self._consumer_waiters

    def broker_epoch(self) -> int:
        """This broker's registration epoch (-1 before it registered)."""
        return self._broker_epoch()

    def metadata_caught_up(self) -> bool:
        """Whether the active controller says this broker's metadata reached its registration."""
        return self._metadata_caught_up()

    # --- metadata ------------------------------------------------------------------------------

    def on_metadata_update(self, update: MetadataUpdate,
                           image: MetadataImage) -> Awaitable[None] | None:
        """Act on one metadata change (the MetadataListener calls this, in offset order, and
        awaits what it returns). A change of more than PUBLISH_SLICE_PARTITIONS partitions is
        acted on in slices, the event loop free between them: a 10,000-partition CreateTopics
        took ~4 s of one turn here, and three in a row starved the heartbeats until the
        broker's session expired. Each partition's own changes stay in order; one still to be
        acted on answers as before its change (NOT_LEADER_OR_FOLLOWER, retriable)."""
        if not self._started:
            self._image = image
            return None
        changes = update.local_changes
        if len(changes.deletes) + len(changes.leaders) + len(changes.followers) \
                <= PUBLISH_SLICE_PARTITIONS:
            previous = self._begin_update(image)
            self._delete_all(changes.deletes)
            self._apply_all((*changes.leaders, *changes.followers), image)
            self._end_update(previous, image)
            return None
        return self._update_in_slices(update, image)

    async def _update_in_slices(self, update: MetadataUpdate, image: MetadataImage) -> None:
        changes = update.local_changes
        previous = self._begin_update(image)
        for start in range(0, len(changes.deletes), PUBLISH_SLICE_PARTITIONS):
            self._delete_all(changes.deletes[start:start + PUBLISH_SLICE_PARTITIONS])
            await asyncio.sleep(0)
        acted = (*changes.leaders, *changes.followers)
        for start in range(0, len(acted), PUBLISH_SLICE_PARTITIONS):
            self._apply_all(acted[start:start + PUBLISH_SLICE_PARTITIONS], image)
            await asyncio.sleep(0)
        self._end_update(previous, image)

    def _begin_update(self, image: MetadataImage) -> MetadataImage:
        previous, self._image = self._image, image
        if image.cluster is not previous.cluster:
            ineligible = frozenset(
                b.broker_id for b in image.cluster.brokers.values() if not b.is_active)
            changed, self._ineligible = ineligible ^ self._ineligible, ineligible
            now_ms = _monotonic_ms()
            for partition in self._partitions.values():
                partition.set_ineligible_replicas(self._ineligible, now_ms=now_ms)
            # A caught-up follower that became eligible may join ISRs: its fetch sessions
            # evaluate every partition again (they evaluate only what changed otherwise).
            self._follower_waiters.wake_replicas(changed)
        return previous

    def _delete_all(self, gone: Sequence[LocalPartition]) -> None:
        for partition in gone:
            self._delete_partition((partition.topic_id, partition.partition_id), why="metadata")

    def _apply_all(self, acted: Sequence[LocalPartition], image: MetadataImage) -> None:
        now_ms = _monotonic_ms()
        for local in acted:
            try:
                self._apply_partition(local.topic_name, local.topic_id, local.partition_id,
                                      local.registration, image, now_ms)
            except TidelogError as error:
                # One damaged partition (KAFKA_STORAGE_ERROR) must not stop the others.
                log.error("broker %d: cannot host %s-%d: %s", self.broker_id, local.topic_name,
                          local.partition_id, error)
            except Exception:
                log.exception("broker %d: acting on %s-%d failed", self.broker_id,
                              local.topic_name, local.partition_id)

    def _end_update(self, previous: MetadataImage, image: MetadataImage) -> None:
        if image.configs is not previous.configs:
            configs: dict[str, TopicConfig] = {}
            for partition in self._partitions.values():
                name = partition.topic_name
                if name not in configs:
                    configs[name] = image.configs.topic_config(name)
                partition.update_config(configs[name])

    def _apply_partition(self, topic_name: str, topic_id: bytes, partition_id: int,
                         registration: PartitionRegistration, image: MetadataImage,
                         now_ms: int) -> None:
        key = (topic_id, partition_id)
        partition = self._partitions.get(key)
        if partition is None:
            config = image.configs.topic_config(topic_name)
            plog = self.storage.get_or_create_log(topic_id, partition_id,
                                                  config=log_config_of(config))
            partition = Partition(
                broker_id=self.broker_id, topic_name=topic_name, topic_id=topic_id,
                partition_id=partition_id, log=plog, config=config, context=self,
                replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
                metrics=self._metrics_of(topic_name))
            partition.set_ineligible_replicas(self._ineligible, now_ms=now_ms)
            self._partitions[key] = partition
            self._strays.discard(key)
        state = partition.state
        before = (state.role, state.leader_id, state.leader_epoch)
        partition.apply_registration(registration, now_ms=now_ms)
        fetchers = self._fetchers
        assert fetchers is not None
        if state.is_leader or state.leader_id < 0:
            fetchers.remove_partition(key)
        elif (state.role, state.leader_id, state.leader_epoch) != before \
                or fetchers.leader_of(key) != state.leader_id:
            fetchers.add_partition(partition, state.leader_id)
        if (state.role, state.leader_id, state.leader_epoch) != before:
            # Waiting fetches of this partition answer now (NOT_LEADER_OR_FOLLOWER, new data).
            self._follower_waiters.wake(key)
            self._consumer_waiters.wake(key)
        elif state.is_leader:
            # ISR or replicas changed: follower fetch sessions decide again (ISR expansion).
            self._follower_waiters.wake(key)

    def _delete_partition(self, key: PartitionKey, *, why: str) -> None:
        partition = self._partitions.pop(key, None)
        if key in self._uncleanable:
            self._uncleanable.discard(key)
            if self.metrics is not None:
                self.metrics.cleaner_uncleanable_partitions.set(len(self._uncleanable))
        if self._fetchers is not None:
            self._fetchers.remove_partition(key)
        self._alter_partition.forget(key)
        if partition is not None:
            partition.close()
        self.storage.delete_partition(*key)
        self._follower_waiters.wake(key)
        self._consumer_waiters.wake(key)
        log.info("broker %d: deleted partition %s-%d (%s)", self.broker_id,
                 partition.topic_name if partition else key[0].hex(), key[1], why)

    def _maybe_delete_strays(self) -> None:
        """Logs on disk the caught-up metadata never gave this broker (deleted meanwhile)."""
        if not self._strays or not self._metadata_caught_up():
            return
        strays, self._strays = self._strays, set()
        for key in strays:
            registration = self._image.topics.partition(*key)
            if key in self._partitions or (registration is not None
                                           and self.broker_id in registration.replicas):
                continue
            self._delete_partition(key, why="not assigned here in the metadata")

    def _inter_broker_endpoint_of(self, broker_id: int) -> tuple[str, int] | None:
        """Where a leader serves follower fetches (never its client endpoint)."""
        registration = self._image.cluster.broker(broker_id)
        if registration is None or not registration.inter_broker_port:
            return None
        return registration.inter_broker_host, registration.inter_broker_port

    def _endpoint_of(self, broker_id: int) -> tuple[str, int] | None:
        registration = self._image.cluster.broker(broker_id)
        return None if registration is None else (registration.host, registration.port)

    def leader_hint(self, topic_id: bytes, partition_id: int) -> common_pb2.LeaderHint:
        registration = self._image.topics.partition(topic_id, partition_id)
        if registration is None:
            return common_pb2.LeaderHint(leader_id=-1, leader_epoch=-1)
        hint = common_pb2.LeaderHint(leader_id=registration.leader,
                                     leader_epoch=registration.leader_epoch)
        endpoint = self._endpoint_of(registration.leader)
        if endpoint is not None:
            hint.endpoint.host, hint.endpoint.port = endpoint
        return hint

    def _metrics_of(self, topic: str) -> TopicMetrics | None:
        if self.metrics is None:
            return None
        found = self._topic_metrics.get(topic)
        if found is None:
            found = self._topic_metrics[topic] = self.metrics.topic(topic)
        return found

    def lookup(self, topic_id: bytes | None, name: str, partition_id: int
                ) -> tuple[bytes | None, Partition | None, TidelogError | None]:
        """(topic id, the hosted partition, or the error to answer with)."""
        topic = self._image.topics.resolve(topic_id, name)
        if isinstance(topic, TopicMismatch):
            return None, None, InconsistentTopicIdError(topic.message)
        if topic is None and topic_id:
            return None, None, UnknownTopicIdError(f"no topic with id {topic_id.hex()}")
        if topic is None or partition_id not in topic.partitions:
            return None, None, UnknownTopicOrPartitionError(
                f"{name or (topic_id or b'').hex()}-{partition_id} does not exist")
        partition = self._partitions.get((topic.topic_id, partition_id))
        if partition is None:
            return topic.topic_id, None, NotLeaderOrFollowerError(
                f"broker {self.broker_id} does not host {topic.name}-{partition_id}")
        return topic.topic_id, partition, None

    # --- PartitionContext ----------------------------------------------------------------------

    def propose_isr(self, partition: Partition, proposal: ProposeIsr) -> None:
        self._alter_partition.submit(partition, proposal)

    def on_new_data(self, partition: Partition) -> None:
        self._follower_waiters.wake(partition.key)

    def on_high_watermark(self, partition: Partition) -> None:
        self._consumer_waiters.wake(partition.key)
        # Followers learn the HW from fetch answers: their sessions answer it (bounded by the
        # long-poll's wait, as before; an idle session has no other reason to answer).
        self._follower_waiters.wake(partition.key)
        if self._hw_listeners:
            tp, hw = TopicIdPartition(*partition.key), partition.log.high_watermark
            for listener in tuple(self._hw_listeners):
                try:
                    listener(tp, hw)
                except Exception:  # the partition's bookkeeping must go on
                    log.exception("broker %d: a high-watermark listener of %s failed",
                                  self.broker_id, partition.name)

    def flush(self) -> None:
        """fsync for a topic's flush.messages / flush.ms (leader and follower appends). A
        failure is a storage error: logged at ERROR, counted, and raised as
        KAFKA_STORAGE_ERROR to the partition (which answers a produce with appended=true)."""
        try:
            self.storage.flush()
        except Exception as e:
            if self.metrics is not None:
                self.metrics.log_flush_failures.inc()
            log.error("broker %d: flushing the log failed: %s", self.broker_id, e)
            if isinstance(e, TidelogError):
                raise
            raise KafkaStorageErrorError(f"flushing the log failed: {e}") from e
        self._flush_generation += 1
        if self.metrics is not None:
            self.metrics.log_flushes.inc()

    @property
    def flush_generation(self) -> int:
        return self._flush_generation

    def on_unflushed(self, partition: Partition) -> None:
        """``partition`` holds appends its topic's flush.ms may force an fsync for: the gauges
        tick checks it (``_update_gauges``) until it says there is nothing left to flush."""
        self._unflushed.add(partition)

    # --- the typed append (PartitionWriter) ----------------------------------------------------

    def metadata_refusal(self) -> TidelogError | None:
        """Why no append is taken now, or None: until the active controller says this broker's
        metadata reached its registration, the image may be a prefix that still names this
        broker leader at an old epoch (a restart that streamed from a controller still
        replaying its journal); while it is fenced, the image may still name it leader of its
        old incarnation's partitions (moved away in parts). Writes taken then could be
        acknowledged (acks=0/1) and later truncated away."""
        if self._metadata_caught_up():
            return None
        return NotLeaderOrFollowerError(
            f"broker {self.broker_id} is catching up with the metadata log or fenced; retry")

    async def append(self, tp: TopicIdPartition, batch: bytes, *, acks: int,
                     timeout_ms: int) -> AppendOutcome:
        """Append one record batch to ``tp`` as its leader; returns when ``acks`` are met
        (acks=all: the HW passed the batch, or REQUEST_TIMED_OUT after ``timeout_ms``; 0 means
        the default) or with the error. Never raises for a refused or failed append."""
        [appending] = self.start_produce([(tp, batch)], acks=acks, now_ms=_wall_ms(),
                                         monotonic_ms=_monotonic_ms())
        await asyncio.wait((appending,))
        pending = appending.result()
        if pending.waiter is None:
            return pending.outcome
        return (await self.await_acks([pending], timeout_ms))[0]

    def start_produce(self, batches: Sequence[tuple[TopicIdPartition, bytes]], *, acks: int,
                      now_ms: int, monotonic_ms: int) -> list[asyncio.Future[PendingAppend]]:
        """Append the batches of one produce request as their leader (broker/produce_checks.py:
        the request's bounds; records checked on the loop or on the record-check threads; each
        partition's appends in the order their requests arrived). Returns each batch's
        outcome in order, the acks=all wait in it as in :meth:`start_append`; a future is done
        on return when its batch was appended (or refused) at once. Wait for them with
        ``asyncio.wait`` (never cancel one: a later append of its partition waits for it)."""
        loop = asyncio.get_running_loop()
        out: list[asyncio.Future[PendingAppend] | None] = []
        produced: list[Produced] = []
        for tp, data in batches:
            leader = self._produce_leader(tp, acks)
            if isinstance(leader, Partition):
                try:
                    produced.append(Produced(tp, leader, leader.validate_produced(data, acks=acks),
                                             len(data), leader.keys_required))
                    out.append(None)
                    continue
                except Exception as e:  # a TidelogError, or a bug: answered, the rest go on
                    leader = self._produce_failed(tp, leader, e)
            done: asyncio.Future[PendingAppend] = loop.create_future()
            done.set_result(leader)
            out.append(done)

        def append_now(p: Produced, checked: CheckResult, late: bool) -> PendingAppend:
            if late:  # after the request's turn of the loop: the append's own clocks
                return self._append_checked(p, checked, acks, _wall_ms(), _monotonic_ms())
            return self._append_checked(p, checked, acks, now_ms, monotonic_ms)

        started = start_checked_appends(produced, self._record_checker, append_now)
        for future in started.values():
            if not future.done():
                self._queued_appends.add(future)
                future.add_done_callback(self._queued_appends.discard)
        remaining = iter(started[i] for i in range(len(produced)))
        return [future if future is not None else next(remaining) for future in out]

    def start_append(self, tp: TopicIdPartition, batch: bytes, *, acks: int, now_ms: int,
                     monotonic_ms: int) -> PendingAppend:
        """Append now, without awaiting anything (so a caller's appends keep its order), its
        records checked on the event loop: the broker's own writers (the group coordinator's
        small batches to ``__consumer_offsets``, which clients may not produce to). The acks=all
        wait is in the result, for :meth:`await_acks`. ``now_ms`` is the wall clock (append
        time), ``monotonic_ms`` the replication core's clock."""
        leader = self._produce_leader(tp, acks)
        if not isinstance(leader, Partition):
            return leader
        try:
            check(not leader.appends_queued,
                  f"{leader.name}: start_append behind produces still in line")
            return self._pending(tp, leader, leader.append_as_leader(
                batch, acks=acks, now_ms=now_ms, monotonic_ms=monotonic_ms))
        except Exception as e:
            return self._produce_failed(tp, leader, e)

    def _produce_leader(self, tp: TopicIdPartition, acks: int) -> Partition | PendingAppend:
        """The partition to append to, or the refusal (bad acks, metadata not caught up, not
        hosted here)."""
        error = acks_error(acks) or self.metadata_refusal()
        if error is not None:
            return PendingAppend(tp, AppendOutcome(error))
        partition = self._partitions.get(tp)
        if partition is None:
            return PendingAppend(tp, AppendOutcome(NotLeaderOrFollowerError(
                f"broker {self.broker_id} does not host partition {tp}")))
        return partition

    def _append_checked(self, p: Produced, checked: CheckResult, acks: int, now_ms: int,
                        monotonic_ms: int) -> PendingAppend:
        """Append one batch whose records were checked (broker/produce_checks.py)."""
        if isinstance(checked, TidelogError):
            return PendingAppend(p.tp, AppendOutcome(checked), p.partition)
        try:
            return self._pending(p.tp, p.partition, p.partition.append_checked(
                p.batch, p.size, checked, acks=acks, now_ms=now_ms, monotonic_ms=monotonic_ms))
        except Exception as e:
            return self._produce_failed(p.tp, p.partition, e)

    def _produce_failed(self, tp: TopicIdPartition, partition: Partition,
                        error: Exception) -> PendingAppend:
        """A refused append (a TidelogError: nothing appended), or a bug, answered so and
        logged; the rest of the request goes on."""
        if not isinstance(error, TidelogError):
            log.error("broker %d: produce to %s failed", self.broker_id, partition.name,
                      exc_info=error)
            error = UnknownServerError(f"{type(error).__name__}: {error}")
        return PendingAppend(tp, AppendOutcome(error), partition)

    @staticmethod
    def _pending(tp: TopicIdPartition, partition: Partition,
                 appended: AppendResult) -> PendingAppend:
        outcome = AppendOutcome(appended.error, appended=True,
                                base_offset=appended.base_offset,
                                last_offset=appended.last_offset,
                                log_append_time_ms=appended.log_append_time_ms,
                                log_start_offset=appended.log_start_offset)
        return PendingAppend(tp, outcome, partition, appended.waiter)

    async def await_acks(self, pending: Sequence[PendingAppend],
                         timeout_ms: int) -> list[AppendOutcome]:
        """Wait, together and at most ``timeout_ms`` (0: PRODUCE_TIMEOUT_MS_DEFAULT; capped at
        PRODUCE_TIMEOUT_MS_MAX), for the acks=all appends in ``pending``; their outcomes, in
        order (an error after the append keeps ``appended`` and the offsets)."""
        if timeout_ms <= 0:
            timeout_ms = PRODUCE_TIMEOUT_MS_DEFAULT
        timeout_ms = min(timeout_ms, PRODUCE_TIMEOUT_MS_MAX)
        waiting = [p.waiter for p in pending if p.waiter is not None and not p.waiter.done()]
        if waiting:
            await asyncio.wait(waiting, timeout=timeout_ms / 1000)
        outcomes: list[AppendOutcome] = []
        for p in pending:
            error: TidelogError | None = None
            if p.waiter is not None and p.waiter.done():
                error = p.waiter.result().error
            elif p.waiter is not None:
                if p.partition is not None:
                    p.partition.forget_waiter(p.waiter)
                p.waiter.cancel()
                name = p.partition.name if p.partition is not None else str(p.tp)
                error = RequestTimedOutError(
                    f"{name}: the high watermark did not reach offset "
                    f"{p.outcome.base_offset} within {timeout_ms} ms (acks=all)")
            outcomes.append(p.outcome if error is None else replace(p.outcome, error=error))
        return outcomes

    def read(self, tp: TopicIdPartition, offset: int, max_bytes: int, *,
             current_leader_epoch: int = -1) -> FetchDataInfo:
        """Whole batches of ``tp`` from ``offset`` below the HW (read_uncommitted is not
        offered: nothing inside the data plane wants records that may be truncated away);
        raises NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, OFFSET_OUT_OF_RANGE..."""
        partition = self._partitions.get(tp)
        if partition is None:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} does not host partition {tp}")
        return partition.read_for_consumer(offset, current_leader_epoch, max_bytes)

    def log_start_offset(self, tp: TopicIdPartition) -> int:
        """Where ``tp``'s log begins (the group coordinator loads from here); raises
        NOT_LEADER_OR_FOLLOWER when this broker does not host it."""
        partition = self._partitions.get(tp)
        if partition is None:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} does not host partition {tp}")
        return partition.log.log_start_offset

    def add_high_watermark_listener(self, listener: HighWatermarkListener
                                    ) -> Callable[[], None]:
        """Call ``listener(tp, hw)`` whenever the HW of a partition this broker leads moves
        (Kafka's PartitionListener.onHighWatermarkUpdated); returns its remover."""
        self._hw_listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._hw_listeners.remove(listener)
        return remove

    # --- timers --------------------------------------------------------------------------------

    async def _run_timers(self) -> None:
        config = self.config
        now = _monotonic_ms()
        due = {
            "hw": now + config.hw_checkpoint_interval_ms,
            "cleaner": now + min(config.retention_check_interval_ms, LOG_CLEANER_BACKOFF_MS),
            "gauges": now,
        }
        periods = {
            "hw": config.hw_checkpoint_interval_ms,
            "cleaner": min(config.retention_check_interval_ms, LOG_CLEANER_BACKOFF_MS),
            "gauges": GAUGES_INTERVAL_MS,
        }
        # The jobs that visit every partition go a share per tick (broker/spread_pass.py): in
        # one turn the ISR check alone held the event loop 35 ms at 30,000 partitions.
        spread = [SpreadPass(period_ms=period, tick_ms=TICK_INTERVAL_MS, items=self.partitions,
                             visit=visit, first_at_ms=now + period)
                  for period, visit in self._partition_jobs().values()]
        while True:
            await asyncio.sleep(TICK_INTERVAL_MS / 1000)
            now = _monotonic_ms()
            for job, at in due.items():
                if now >= at:
                    due[job] = now + periods[job]
                    self.run_job(job)
            for spread_pass in spread:
                self._guarded("periodic pass", functools.partial(spread_pass.tick, now))
            self._guarded("flush", self._maybe_flush_storage)

    def _partition_jobs(self) -> dict[str, tuple[int, Callable[[Partition, int], object]]]:
        """The periodic jobs that visit every hosted partition: each one's period (ms) and its
        visit of one partition (given the monotonic clock). The timer spreads each over its
        period; :meth:`run_job` makes a whole pass at once."""
        config = self.config
        return {
            "isr": (max(1, config.replica_lag_time_max_ms // 2), Partition.tick),
            "retention": (max(1, config.retention_check_interval_ms), self._retain),
            "producers": (max(1, config.producer_state_save_interval_ms),
                          lambda p, _: p.maybe_save_producer_state()),
            "expire": (PRODUCER_EXPIRATION_CHECK_INTERVAL_MS,
                       lambda p, _: p.producers.maybe_expire(_wall_ms())),
        }

    def run_job(self, job: str) -> None:
        """Run one periodic job now, a whole pass (the timer calls this for the jobs that do
        not visit every partition; tests for any)."""
        partition_job = self._partition_jobs().get(job)
        if partition_job is not None:
            visit = partition_job[1]
            now_ms = _monotonic_ms()
            self._guarded(job, lambda: [visit(p, now_ms) for p in self.partitions()])
            return
        jobs: dict[str, Callable[[], object]] = {
            "hw": lambda: self.storage.checkpoint_high_watermarks(),
            "cleaner": self._maybe_start_cleaning,
            "gauges": self._update_gauges,
        }
        self._guarded(job, jobs[job])

    def _guarded(self, what: str, job: Callable[[], object]) -> None:
        try:
            job()
        except KafkaStorageErrorError as error:
            log.error("broker %d: %s: %s", self.broker_id, what, error)
        except Exception:
            # The timer must survive a bug in one job: the others keep the broker healthy.
            log.exception("broker %d: periodic %s failed", self.broker_id, what)

    def _maybe_flush_storage(self) -> None:
        """The node's interval fsync (storage flush policy ``interval``). A failure is counted in
        ``log_flush_failures`` as the produce path's is (then logged by ``_guarded``)."""
        try:
            self.storage.maybe_flush(_monotonic_ms())
        except Exception:
            if self.metrics is not None:
                self.metrics.log_flush_failures.inc()
            raise

    def _retain(self, partition: Partition, _monotonic_ms: int) -> None:
        """retention.ms / retention.bytes of one partition (wall clock: record timestamps)."""
        try:
            removed = partition.enforce_retention(_wall_ms())
        except TidelogError as error:
            log.warning("broker %d: retention of %s failed: %s", self.broker_id,
                        partition.name, error)
            return
        if removed and self.metrics is not None:
            self.metrics.retention_bytes_deleted.inc(removed)

    def _maybe_start_cleaning(self) -> None:
        """The cleaner job: start a pass (:meth:`clean_logs`) unless one is still running."""
        if self._cleaner_task is None or self._cleaner_task.done():
            self._cleaner_task = asyncio.get_running_loop().create_task(
                self.clean_logs(), name=f"replica-manager-{self.broker_id}-cleaner")

    async def clean_logs(self) -> CleanerStats | None:
        """Log compaction (broker/storage/cleaner.py): one bounded pass over the dirtiest
        compacted partition, on every replica (each cleans its own copy, below its HW), its
        decoding on the cleaner thread. A partition whose pass meets a batch that does not
        decode is skipped from then on (until the broker restarts), with one ERROR line and
        ``log_cleaner_uncleanable_partitions``: the others are still cleaned."""
        now_ms = _wall_ms()
        candidates = []
        for p in self.partitions():
            c = p.config
            if "compact" in c.cleanup_policy and p.key not in self._uncleanable:
                candidates.append(cleaning_candidate(p.log, CleanerConfig(
                    c.min_cleanable_dirty_ratio, c.min_compaction_lag_ms, c.max_compaction_lag_ms,
                    c.delete_retention_ms), now_ms=now_ms))
                if self.metrics is not None:
                    self.metrics.cleaner_dirty_ratio.labels(p.topic_name, str(p.partition_id)).set(
                        candidates[-1].cleanable.dirty_ratio)
        for chosen in choose_partitions_to_clean(candidates, now_ms=now_ms):
            key = (chosen.topic_partition.topic_id, chosen.topic_partition.partition)
            try:
                stats = await clean_log(self.storage.log(*key), chosen.config, now_ms=now_ms,
                                        offload=self._offload_cleaning)
            except CorruptMessageError as error:
                self._mark_uncleanable(key, error)
                return None
            except TidelogError as error:  # storage failed, or the partition went meanwhile
                log.error("broker %d: cleaning %s failed: %s", self.broker_id,
                          chosen.topic_partition, error)
                return None
            if stats is not None and self.metrics is not None:
                self.metrics.cleaner_bytes_cleaned.inc(stats.bytes_read)
            return stats
        return None

    def _offload_cleaning(self, work: Callable[[], T]) -> Awaitable[T]:
        return asyncio.get_running_loop().run_in_executor(self._cleaner_thread, work)

    def _mark_uncleanable(self, key: PartitionKey, error: TidelogError) -> None:
        """Kafka's LogCleanerManager.markPartitionUncleanable: a batch the cleaner cannot decode
        (stored before the leader checked records at produce) would fail every pass, and the
        dirtiest partition is chosen first, so without this one partition would stop the
        cleaner for the whole broker."""
        partition = self._partitions.get(key)
        name = partition.name if partition is not None else f"{key[0].hex()}-{key[1]}"
        self._uncleanable.add(key)
        log.error("broker %d: %s is skipped by the log cleaner until the broker restarts: it "
                  "holds a batch that does not decode (%s); its other records are served as "
                  "stored, and deleting the topic (or the records) removes it", self.broker_id,
                  name, error.message)
        if self.metrics is not None:
            self.metrics.cleaner_uncleanable_partitions.set(len(self._uncleanable))

    def _update_gauges(self) -> None:
        """The 1 s job: stray logs, topic flush.ms, and binding the partition gauges. Its work
        is bounded by what changed, not by the partitions hosted: flush.ms is checked for the
        partitions holding unflushed appends only (``on_unflushed``), and the gauges are
        computed when /metrics is scraped (broker.metrics.PartitionGaugeCollector), so an idle
        broker walks no partition here."""
        now_ms = _monotonic_ms()  # flush.ms is a duration (see Partition._count_unflushed)
        self._maybe_delete_strays()
        if self._unflushed:
            for partition in list(self._unflushed):
                # A partition deleted meanwhile is no longer flushed, as it is no longer hosted.
                if (partition.closed or self._partitions.get(partition.key) is not partition
                        or not partition.maybe_flush(now_ms)):
                    self._unflushed.discard(partition)
        if self.metrics is not None:
            self.metrics.watch_partitions(self._gauge_snapshot)

    def _gauge_snapshot(self) -> PartitionGauges:
        """What a /metrics scrape reports of the hosted partitions (run on the event loop)."""
        return partition_gauges(self._partitions.values(),
                                follower_fetches=len(self._follower_waiters),
                                consumer_fetches=len(self._consumer_waiters))



def _as_partition_writer(manager: ReplicaManager) -> PartitionWriter:
    """Never called: mypy checks here that the replica manager is a PartitionWriter."""
    return manager
