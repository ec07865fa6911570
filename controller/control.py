"""ControllerLogic: the pure core of one controller, as the quorum loop drives it.

It holds the **committed image** (every committed record replayed, in order) and, while this
controller is active, a **speculative image**: the committed image plus the batches it has
proposed that are not committed yet. Managers read the speculative image, so a request sees the
effects of earlier proposals still in flight (what Kafka's timeline data structures give it).

How the quorum loop uses it (one thread or task; nothing here is thread-safe):

1. Every committed batch, on every controller, in log order:
   ``outcome = logic.replay_batch(records, base_offset)``. ``base_offset`` is the metadata offset
   of the batch's first record (offsets count records: the committed offset + 1).
2. On becoming the Raft leader, once the committed image holds every entry that was in the log
   at the election (Kafka waits the same way): ``result = logic.on_become_active(now_ms)`` and
   propose ``result.records`` (a NoOpRecord). On losing leadership: ``on_resign()``.
3. Per request: ``result = logic.handle_<rpc>(request, now_ms)``. If ``result.records`` is not
   empty, propose them as one batch (``records.encode_batch``). Send ``result.response`` once the
   committed offset reaches ``result.response_offset`` -- and, when there were records, only if
   the batch committed at ``result.base_offset`` (``outcome.own`` and ``outcome.base_offset``).
4. Periodically: ``logic.maybe_fence_stale_brokers(now_ms)``; propose its records if any.
   Every ``now_ms`` here is a monotonic clock's: it only measures broker sessions.
5. If a proposal fails, or ``outcome.diverged`` (a batch this controller did not propose, or not
   in the order it did, committed while it was active): call ``abandon_pending()`` if it did not
   already happen, and answer every outstanding request NOT_CONTROLLER (retriable). Their records
   may still commit; replay re-checks them, and they are atomic per batch, so the image stays
   valid either way.

Responses are computed when the records are proposed, from the speculative image: for example a
RegisterBroker's broker epoch is the offset its record will get. That is exact as long as the
batch commits at the offset reserved for it (then every record applies, since the speculative
image it was made from *is* the committed image at that point; ``replay_batch`` asserts so).

The same fact saves the active controller its replay: when its own batch commits at its offset,
the image it built when it proposed the batch *is* what replaying the batch would give
(replay is deterministic), so that image becomes the committed one. At 100,000 partitions a
fencing part of 2,000 changes is then replayed once on the active controller, not twice, on
the path every part waits for. ``check_speculative`` (tests) replays anyway and compares.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from tidelog import limits
from tidelog.controller.managers.acl_control import AclControlManager
from tidelog.controller.managers.broker_heartbeats import BrokerHeartbeatTracker
from tidelog.controller.managers.cluster_control import ClusterControlManager, ProbeTarget
from tidelog.controller.managers.common import (
    FENCE_CHANGES_PER_BATCH_MAX,
    ErrorFields,
    LogicConfig,
    error_response,
    set_error,
)
from tidelog.controller.managers.config_control import ConfigControlManager
from tidelog.controller.managers.partition_change import LeaderElections
from tidelog.controller.managers.producer_id_control import ProducerIdControlManager
from tidelog.controller.managers.replication_control import ReplicationControlManager
from tidelog.controller.managers.scram_control import ScramControlManager
from tidelog.errors import NotControllerError, PolicyViolationError
from tidelog.invariants import InvariantViolation, check
from tidelog.metadata.bootstrap import is_blank
from tidelog.metadata.delta import MetadataDelta
from tidelog.metadata.image import ClusterImage, MetadataImage, TopicsImage
from tidelog.metadata.records import (
    RECORDS_PER_BATCH_MAX,
    image_from_snapshot,
    image_to_snapshot,
    metadata_record,
)
from tidelog.v1 import common_pb2, controller_pb2, metadata_pb2

__all__ = [
    "ControllerLogic",
    "ControllerResult",
    "ControllerStats",
    "LogicConfig",
    "ReplayOutcome",
    "metadata_batch_bytes",
]

T = TypeVar("T")
R = TypeVar("R", bound=ErrorFields)
#: Proposed batches not yet committed. Raft bounds them too; this is the controller's own limit.
PENDING_BATCHES_MAX = 10_000


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    """What a handler decided: records to propose as one batch, and the response to send."""

    records: tuple[metadata_pb2.MetadataRecord, ...]
    response: T
    #: The metadata offset the first record gets if the batch commits where it was reserved
    #: (the next free offset when there are no records).
    base_offset: int
    #: Send the response once the committed offset reaches this: the batch's last offset, or,
    #: without records, the last offset proposed so far (so the answer reflects committed state).
    response_offset: int


@dataclass(frozen=True, slots=True)
class ReplayOutcome:
    """What replaying one committed batch did."""

    base_offset: int
    #: Why the whole batch was a no-op (a record's precondition failed), or None if it applied.
    ignored: str | None
    #: The batch was this controller's next proposal, committed at its reserved offset.
    own: bool
    #: Active, and the batch was not the next proposal: speculative state was reset to the
    #: committed image and pending proposals forgotten (see the module doc, step 5).
    diverged: bool
    #: The partition leader elections the batch committed, counted for this controller's own
    #: batches only (when it proposed them): the metric counts each election once, on the
    #: controller that made it.
    elections: LeaderElections = LeaderElections()


@dataclass(frozen=True, slots=True)
class ControllerStats:
    """Counts for metrics and logs (committed image, plus this controller's pending batches)."""

    registered_brokers: int
    fenced_brokers: int
    topics: int
    partitions: int
    offline_partitions: int
    pending_batches: int


#: encode_batch's fields besides the records, at their largest: schema_version (tag + 5-byte
#: varint) and append_time_ms (tag + 10-byte varint).
_BATCH_HEADER_BYTES_MAX = 6 + 11


def metadata_batch_bytes(records: Sequence[metadata_pb2.MetadataRecord]) -> int:
    """The size ``records.encode_batch`` gives ``records``, or at most 17 bytes more: each
    record's bytes with its field tag and length prefix, plus the header at its largest."""
    total = _BATCH_HEADER_BYTES_MAX
    for record in records:
        size = record.ByteSize()
        total += 1 + max(1, (size.bit_length() + 6) // 7) + size
    return total


@dataclass(frozen=True, slots=True)
class _Pending:
    """A proposed batch not committed yet."""

    base_offset: int
    records: tuple[metadata_pb2.MetadataRecord, ...]
    image: MetadataImage  # the speculative image with the batch applied
    elections: LeaderElections  # the elections the batch makes

    def matches(self, base_offset: int, records: Sequence[metadata_pb2.MetadataRecord]) -> bool:
        return self.base_offset == base_offset and self.records == tuple(records)


class ControllerLogic:
    """One controller's metadata state and request handling, without I/O or clocks."""

    def __init__(
        self,
        *,
        node_id: int,
        cluster_id: str,
        rng: random.Random,
        config: LogicConfig | None = None,
        image: MetadataImage | None = None,
        check_speculative: bool = False,
        bootstrap: Sequence[metadata_pb2.MetadataRecord] = (),
        credential_verifier: Callable[[int], bytes] = lambda broker_id: b"",
    ) -> None:
        """``check_speculative`` (tests) compares speculative and committed digests whenever
        every proposal has committed: they must be equal. ``bootstrap``: records for a brand-new
        cluster (tidelog.metadata.bootstrap), proposed with the NoOp while the image is blank.
        ``credential_verifier``: what a broker's registration carries for other brokers to check
        its credential with (tidelog.cluster_secret; b"" without a cluster secret)."""
        self._bootstrap = tuple(bootstrap)
        self._node_id = node_id
        self._cluster_id = cluster_id
        self._config = config or LogicConfig()
        self._check_speculative = check_speculative
        self._committed = image or MetadataImage.empty()
        self._image = self._committed
        #: stats(): the committed cluster and topics images and their counts (see there).
        self._stats_memo: tuple[ClusterImage, TopicsImage, ControllerStats] | None = None
        self._pending: deque[_Pending] = deque()
        self._active = False
        #: When the next automatic leader rebalance is due (active only; None = never).
        self._rebalance_due_ms: int | None = None
        self._heartbeats = BrokerHeartbeatTracker(self._config.broker_session_timeout_ms)
        self._replication = ReplicationControlManager(self._config, rng)
        self._cluster = ClusterControlManager(
            cluster_id=cluster_id, heartbeats=self._heartbeats, replication=self._replication,
            credential_verifier=credential_verifier,
        )
        self._configs = ConfigControlManager()
        self._producer_ids = ProducerIdControlManager(self._config)
        self._acls = AclControlManager(rng)
        self._scram = ScramControlManager()

    # --- state --------------------------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self._node_id

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def committed_image(self) -> MetadataImage:
        """Every committed record replayed; what DescribeConfigs and snapshots read."""
        return self._committed

    @property
    def image(self) -> MetadataImage:
        """The speculative image: committed plus pending proposals (= committed on standby)."""
        return self._image

    @property
    def committed_offset(self) -> int:
        return self._committed.offset

    @property
    def next_offset(self) -> int:
        """The offset the next proposed record will get."""
        return self._image.offset + 1

    @property
    def pending_batches(self) -> int:
        return len(self._pending)

    @property
    def heartbeats(self) -> BrokerHeartbeatTracker:
        """Broker sessions (soft state; empty on standby)."""
        return self._heartbeats

    def fencing_begun(self) -> dict[int, int]:
        """Brokers whose fencing in parts began and is not finished, with the broker epoch
        fenced (soft state, for logs)."""
        return self._cluster.fencing_begun()

    def stats(self) -> ControllerStats:
        """Gauges for metrics, from the committed image. The image's counts are memoised on the
        identity of its cluster and topics parts: images are immutable and a change makes new
        parts (unchanged ones are shared), so the runtime's metrics tick walks the partitions
        only after a topic or partition changed, not at every call."""
        cluster, topics = self._committed.cluster, self._committed.topics
        memo = self._stats_memo
        if memo is None or memo[0] is not cluster or memo[1] is not topics:
            memo = self._stats_memo = (cluster, topics, ControllerStats(
                registered_brokers=len(cluster.brokers),
                fenced_brokers=sum(1 for b in cluster.brokers.values() if b.fenced),
                topics=len(topics.by_id),
                partitions=sum(t.num_partitions for t in topics.by_id.values()),
                offline_partitions=sum(
                    1 for _, _, p in topics.iter_partitions() if not p.has_leader
                ),
                pending_batches=0,
            ))
        return replace(memo[2], pending_batches=len(self._pending))

    # --- leadership ---------------------------------------------------------------------------

    def on_become_active(self, now_ms: int) -> ControllerResult[None]:
        """Start acting as the active controller; propose the returned NoOpRecord first."""
        check(not self._active, "the controller is already active")
        self._active = True
        self.abandon_pending()
        self._cluster.on_become_active(self._committed, now_ms)
        interval = self._config.leader_imbalance_check_interval_ms
        self._rebalance_due_ms = now_ms + interval if interval > 0 else None
        records = [metadata_record(metadata_pb2.NoOpRecord(controller_id=self._node_id))]
        if self._bootstrap and is_blank(self._committed):
            records.extend(self._bootstrap)  # a new cluster: its first users (--add-scram)
        return self._propose(records, None)

    def on_resign(self) -> None:
        """Stop acting as active: drop speculative state and heartbeat sessions."""
        self._active = False
        self._rebalance_due_ms = None
        self.abandon_pending()
        self._heartbeats.clear()

    def abandon_pending(self) -> None:
        """Forget proposals not yet committed; the speculative image becomes the committed one."""
        self._pending.clear()
        self._image = self._committed

    # --- the committed log --------------------------------------------------------------------

    def replay_batch(
        self, records: Sequence[metadata_pb2.MetadataRecord], base_offset: int,
        progress: Callable[[], None] | None = None,
    ) -> ReplayOutcome:
        """Apply one committed batch (offsets base_offset..) to the committed image;
        ``progress`` as in MetadataDelta.replay_batch."""
        if base_offset != self._committed.offset + 1:
            raise InvariantViolation(
                f"committed batches must be contiguous: {base_offset} after "
                f"{self._committed.offset}")
        head = self._pending[0] if self._pending else None
        own = head is not None and head.matches(base_offset, records)
        ignored: str | None = None
        if own and not self._check_speculative:
            assert head is not None
            self._committed = head.image  # what replay would give: see the module doc
        else:
            delta = MetadataDelta(self._committed)
            ignored = delta.replay_batch(records, base_offset, progress)
            if progress is not None:
                progress()
            self._committed = delta.apply()
            if progress is not None:
                progress()
        elections = LeaderElections()
        diverged = False
        if own:
            assert head is not None
            # Made from the speculative image, which equals the committed image here.
            if ignored is not None:
                raise InvariantViolation(
                    f"own batch at its reserved offset did not apply: {ignored}")
            if self._check_speculative and head.image.digest() != self._committed.digest():
                raise InvariantViolation(
                    f"the image proposed with the batch at {base_offset} differs from its replay")
            elections = head.elections
            self._pending.popleft()
            if not self._pending:
                self._settle_speculative()
        elif self._active:
            diverged = True
            self.abandon_pending()
        else:
            self._image = self._committed
        return ReplayOutcome(base_offset, ignored, own, diverged, elections)

    def _settle_speculative(self) -> None:
        if self._image.offset != self._committed.offset:
            raise InvariantViolation(
                f"speculative image at offset {self._image.offset}, committed at "
                f"{self._committed.offset}")
        if self._check_speculative and self._image.digest() != self._committed.digest():
            raise InvariantViolation(
                "the speculative image differs from the committed one at offset "
                f"{self._committed.offset}")
        self._image = self._committed

    def restore_snapshot(self, snapshot: metadata_pb2.MetadataSnapshot) -> None:
        """Replace the committed image with a snapshot's (at start, or a follower catching up).

        Raises what ``records.image_from_snapshot`` raises for a bad snapshot. Pending proposals
        are forgotten (a controller installing a snapshot is not leading anyway).
        """
        image = image_from_snapshot(snapshot, cluster_id=self._cluster_id)
        if image.offset < self._committed.offset:
            raise InvariantViolation(
                f"a snapshot never goes back in the log: {image.offset} before "
                f"{self._committed.offset}")
        self._committed = image
        self.abandon_pending()

    def committed_snapshot(self, progress: Callable[[], None] | None = None,
                           ) -> metadata_pb2.MetadataSnapshot:
        """The committed image as a snapshot (``progress``: see image_to_snapshot)."""
        return image_to_snapshot(self._committed, cluster_id=self._cluster_id,
                                 progress=progress)

    # --- proposals ----------------------------------------------------------------------------

    def _propose(
        self, records: Sequence[metadata_pb2.MetadataRecord], response: T
    ) -> ControllerResult[T]:
        check(self._active, "only the active controller proposes")
        if len(records) > RECORDS_PER_BATCH_MAX:
            raise InvariantViolation(
                f"{len(records)} records, more than a batch holds ({RECORDS_PER_BATCH_MAX})")
        base_offset = self._image.offset + 1
        if records:
            if len(self._pending) >= PENDING_BATCHES_MAX:
                raise InvariantViolation(
                    f"{len(self._pending)} batches pending (max {PENDING_BATCHES_MAX})")
            delta = MetadataDelta(self._image)
            ignored = delta.replay_batch(records, base_offset)
            if ignored is not None:
                raise InvariantViolation(
                    f"a record made from the speculative image does not apply: {ignored}")
            self._image = delta.apply()
            elections = LeaderElections(*delta.leader_elections)
            self._pending.append(_Pending(base_offset, tuple(records), self._image, elections))
        return ControllerResult(tuple(records), response, base_offset, self._image.offset)

    def _propose_admin(
        self,
        rpc: str,
        records: Sequence[metadata_pb2.MetadataRecord],
        response: R,
        results: Iterable[ErrorFields],
    ) -> ControllerResult[R]:
        """Propose an admin request's records, or refuse the whole request when they would not
        fit in one metadata batch (one Raft proposal, limits.METADATA_BATCH_BYTES_MAX): then
        every result without an error of its own gets POLICY_VIOLATION naming the limit and the
        request's size, and nothing is proposed (Kafka refuses oversized operations the same
        way). Without this the Raft adapter refused the batch after it was already in the
        speculative image, and later writes waited for a commit that never came."""
        size = metadata_batch_bytes(records)
        if size <= limits.METADATA_BATCH_BYTES_MAX:
            return self._propose(records, response)
        error = PolicyViolationError(
            f"{rpc} would write {len(records):,} metadata records of {size:,} bytes; the "
            f"controller commits a request as one metadata batch of at most "
            f"{limits.METADATA_BATCH_BYTES_MAX:,} bytes: split it into smaller requests"
        )
        for result in results:
            if result.error_code == common_pb2.ErrorCode.NONE:
                set_error(result, error)
        return self._propose([], response)

    def _not_active(self, response: R) -> ControllerResult[R]:
        set_error(response, self._not_controller_error())
        return ControllerResult((), response, self.next_offset, self._committed.offset)

    def _not_controller_error(self) -> NotControllerError:
        return NotControllerError(f"controller {self._node_id} is not the active controller")

    # --- requests -----------------------------------------------------------------------------

    def handle_register_broker(
        self, request: controller_pb2.RegisterBrokerRequest, now_ms: int
    ) -> ControllerResult[controller_pb2.RegisterBrokerResponse]:
        if not self._active:
            return self._not_active(controller_pb2.RegisterBrokerResponse())
        return self._propose(*self._cluster.register_broker(self._image, request, now_ms))

    def handle_broker_heartbeat(
        self, request: controller_pb2.BrokerHeartbeatRequest, now_ms: int
    ) -> ControllerResult[controller_pb2.BrokerHeartbeatResponse]:
        if not self._active:
            return self._not_active(controller_pb2.BrokerHeartbeatResponse())
        return self._propose(*self._cluster.broker_heartbeat(self._image, request, now_ms))

    def handle_alter_partition(
        self, request: controller_pb2.AlterPartitionRequest, now_ms: int
    ) -> ControllerResult[controller_pb2.AlterPartitionResponse]:
        if not self._active:
            return self._not_active(controller_pb2.AlterPartitionResponse())
        return self._propose(*self._replication.alter_partition(self._image, request))

    def handle_create_topics(
        self, request: controller_pb2.CreateTopicsRequest, now_ms: int
    ) -> ControllerResult[controller_pb2.CreateTopicsResponse]:
        if not self._active:
            return self._not_active(controller_pb2.CreateTopicsResponse())
        records, response = self._replication.create_topics(self._image, request)
        return self._propose_admin("CreateTopics", records, response, response.topics)

    def handle_delete_topics(
        self, request: controller_pb2.DeleteTopicsRequest, now_ms: int
    ) -> ControllerResult[controller_pb2.DeleteTopicsResponse]:
        if not self._active:
            return self._not_active(controller_pb2.DeleteTopicsResponse())
        records, response = self._replication.delete_topics(self._image, request)
        return self._propose_admin("DeleteTopics", records, response, response.topics)

    def handle_create_partitions(
        self, request: controller_pb2.CreatePartitionsRequest, now_ms: int
    ) -> ControllerResult[controller_pb2.CreatePartitionsResponse]:
        if not self._active:
            return self._not_active(controller_pb2.CreatePartitionsResponse())
        records, response = self._replication.create_partitions(self._image, request)
        return self._propose_admin("CreatePartitions", records, response, response.topics)

    def handle_alter_configs(
        self, request: controller_pb2.AlterConfigsRequest, now_ms: int
    ) -> ControllerResult[controller_pb2.AlterConfigsResponse]:
        if not self._active:
            return self._not_active(controller_pb2.AlterConfigsResponse())
        records, response = self._configs.alter_configs(self._image, request)
        return self._propose_admin("AlterConfigs", records, response, response.resources)

    def handle_describe_configs(
        self, request: controller_pb2.DescribeConfigsRequest, now_ms: int
    ) -> ControllerResult[controller_pb2.DescribeConfigsResponse]:
        """Read-only, from the committed image, on any controller (it may be slightly stale on
        a standby); no records, and the response may be sent at once."""
        response = self._configs.describe_configs(self._committed, request)
        return ControllerResult((), response, self.next_offset, self._committed.offset)

    def handle_allocate_producer_ids(
        self, request: controller_pb2.AllocateProducerIdsRequest, now_ms: int
    ) -> ControllerResult[controller_pb2.AllocateProducerIdsResponse]:
        if not self._active:
            return self._not_active(controller_pb2.AllocateProducerIdsResponse())
        return self._propose(*self._producer_ids.allocate_producer_ids(self._image, request))

    def handle_create_acls(
        self, request: controller_pb2.CreateAclsRequest, now_ms: int
    ) -> ControllerResult[controller_pb2.CreateAclsResponse]:
        if not self._active:
            response = error_response(controller_pb2.CreateAclsResponse, request,
                                      self._not_controller_error())
            return ControllerResult((), response, self.next_offset, self._committed.offset)
        records, response = self._acls.create_acls(self._image, request)
        return self._propose_admin("CreateAcls", records, response, response.results)

    def handle_delete_acls(
        self, request: controller_pb2.DeleteAclsRequest, now_ms: int
    ) -> ControllerResult[controller_pb2.DeleteAclsResponse]:
        if not self._active:
            response = error_response(controller_pb2.DeleteAclsResponse, request,
                                      self._not_controller_error())
            return ControllerResult((), response, self.next_offset, self._committed.offset)
        records, response = self._acls.delete_acls(self._image, request)
        result = self._propose_admin("DeleteAcls", records, response, response.results)
        if records and not result.records:
            # Refused as too large for one batch: nothing was deleted after all.
            for filter_result in response.results:
                del filter_result.deleted[:]
        return result

    def handle_alter_user_scram_credentials(
        self, request: controller_pb2.AlterUserScramCredentialsRequest, now_ms: int
    ) -> ControllerResult[controller_pb2.AlterUserScramCredentialsResponse]:
        if not self._active:
            response = error_response(controller_pb2.AlterUserScramCredentialsResponse,
                                      request, self._not_controller_error())
            return ControllerResult((), response, self.next_offset, self._committed.offset)
        records, response = self._scram.alter(self._image, request)
        return self._propose_admin("AlterUserScramCredentials", records, response,
                                   response.results)

    def maybe_fence_stale_brokers(self, now_ms: int) -> ControllerResult[None]:
        """Periodic tick: fence brokers silent for longer than broker.session.timeout.ms, with
        their leader and ISR changes, in one batch (no records when there is nothing to do).
        A tick with nobody to fence continues the changes that did not fit in the batch of a
        registration or an unfencing (ClusterControlManager.continue_unsettled), and else, every
        leader_imbalance_check_interval_ms, moves leaderships back to preferred replicas
        (ReplicationControlManager.preferred_leader_elections), in parts."""
        if not self._active:
            return ControllerResult((), None, self.next_offset, self._committed.offset)
        records = self._cluster.fence_stale_brokers(self._image, now_ms)
        if not records:
            records = self._cluster.continue_unsettled(self._image)
        if not records:
            records = self._maybe_rebalance(now_ms)
        return self._propose(records, None)

    def _maybe_rebalance(self, now_ms: int) -> list[metadata_pb2.MetadataRecord]:
        """The next part of the automatic leader rebalance, when one is due."""
        if self._rebalance_due_ms is None or now_ms < self._rebalance_due_ms:
            return []
        records = self._replication.preferred_leader_elections(
            self._image, FENCE_CHANGES_PER_BATCH_MAX)
        # A full part: the next tick goes on; else the next check is an interval away.
        self._rebalance_due_ms = now_ms + (
            0 if len(records) >= FENCE_CHANGES_PER_BATCH_MAX
            else self._config.leader_imbalance_check_interval_ms)
        return records

    def start_broker_probes(
        self, now_ms: int, *, silent_ms: int, hinted: Iterable[int] = (), limit: int
    ) -> list[ProbeTarget]:
        """Brokers the runtime should probe now (TCP connects to their listeners): unfenced ones
        not heard from for more than ``silent_ms``, and those in ``hinted`` (their metadata
        stream to this controller ended, or another broker could not reach them), at most
        ``limit``. Their probes count as started at ``now_ms``
        (the runtime ends each with ``heartbeats.end_probe``). None on standby."""
        if not self._active:
            return []
        return self._cluster.start_probes(self._image, now_ms, silent_ms=silent_ms,
                                          hinted=tuple(hinted), limit=limit)

    def handle_broker_unreachable(
        self, broker_id: int, broker_epoch: int, probe_started_ms: int, now_ms: int
    ) -> ControllerResult[None]:
        """Every listener of the broker refused the probe started at ``probe_started_ms``: fence
        it with its leader and ISR changes, unless the evidence is stale (another broker epoch,
        already fenced, or a heartbeat came since the probe started); no records then."""
        if not self._active:
            return ControllerResult((), None, self.next_offset, self._committed.offset)
        return self._propose(self._cluster.fence_unreachable(
            self._image, broker_id, broker_epoch, probe_started_ms), None)
