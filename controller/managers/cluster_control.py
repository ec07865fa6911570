"""ClusterControlManager: broker registration, heartbeats, fencing and controlled shutdown.

A broker's life, as in Kafka's KRaft:

1. **Register** with its incarnation id (a UUID per process start). It gets a broker epoch, the
   metadata offset of its RegisterBrokerRecord, and starts *fenced*. A re-send from the same
   incarnation is idempotent (same epoch, no records). A different incarnation is refused with
   DUPLICATE_BROKER_REGISTRATION while the old one is unfenced, not shutting down and its session
   is live; otherwise it replaces the
   old registration, and the old incarnation's leaderships and ISR memberships go in the same
   batch (it may have crashed with unflushed data); when there are more of them than a batch
   holds, the rest follow on the periodic tick, and the broker stays fenced until they are done
   (``continue_unsettled``).
2. **Heartbeat** every couple of seconds with the metadata offset it has applied. Once that
   offset reaches its own registration record (Kafka's "caught up" rule), it is *unfenced*, and
   offline partitions it can lead get it as leader in the same batch (the first
   FENCE_CHANGES_PER_BATCH_MAX of them; after a whole-cluster restart there can be 100,000,
   and the rest follow on the periodic tick).
3. Without a heartbeat for ``broker.session.timeout.ms`` it is **fenced** by the periodic tick:
   it leaves every ISR (except as a last member) and loses every leadership, in one batch, or
   in parts (leaderships first, the FenceBrokerRecord with the last) when there are more than a
   batch holds. A fencing once begun is finished, even if the broker is heard from again: it is
   then unfenced by its next heartbeat, which gives it the offline partitions it can lead.
4. **Controlled shutdown** (want_shutdown): it is marked in_controlled_shutdown and its
   leaderships and ISR memberships move away. Once it has applied that batch and leads nothing,
   it is fenced and told ``should_shut_down``.

A broker may also ask to be fenced (want_fence, e.g. after a storage failure). Sessions are soft
state (BrokerHeartbeatTracker); only decisions become records.

5. **Fast fencing of a dead broker** (not in Kafka; docs/decisions.md "Failure handling without
   waiting out a session"): the runtime probes a silent broker (``start_probes``: no heartbeat
   for a while, or its metadata stream to this controller ended) by TCP-connecting to its
   registered listeners. If every one refused the connection, nothing listens there any more:
   the process is gone (kill -9, a crash), while a stopped or slow process still has its
   listening sockets and the kernel accepts the connects. ``fence_unreachable`` then fences it
   with the records a session expiry writes, unless a heartbeat of that broker epoch arrived
   since the probe started.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from tidelog.controller.managers.broker_heartbeats import BrokerHeartbeatTracker
from tidelog.controller.managers.common import (
    ENDPOINT_TEXT_LENGTH_MAX,
    FENCE_BATCH_RECORDS_SOFT_MAX,
    FENCE_CHANGES_PER_BATCH_MAX,
    check_broker_epoch,
    set_error,
)
from tidelog.controller.managers.replication_control import PartitionKey, ReplicationControlManager
from tidelog.errors import (
    DuplicateBrokerRegistrationError,
    InconsistentClusterIdError,
    InvalidRequestError,
    TidelogError,
)
from tidelog.invariants import InvariantViolation
from tidelog.metadata.delta import apply_records
from tidelog.metadata.image import TOPIC_ID_BYTES, BrokerRegistration, MetadataImage
from tidelog.metadata.records import metadata_record
from tidelog.v1 import common_pb2, controller_pb2, metadata_pb2

__all__ = ["ClusterControlManager", "ProbeTarget"]

Records = list[metadata_pb2.MetadataRecord]
PORT_MAX = 65535


@dataclass(slots=True)
class _Fencing:
    """A fencing in parts: the registration being fenced, the partitions that had the broker
    in their ISR when it began (the ones it led first), and where the next part goes on."""

    broker_epoch: int
    partitions: list[PartitionKey]
    next: int


@dataclass(frozen=True, slots=True)
class ProbeTarget:
    """A broker to probe: where it listens (as registered), and which probe this is."""

    broker_id: int
    broker_epoch: int
    #: (host, port) of each registered listener: the client one, then the inter-broker one.
    endpoints: tuple[tuple[str, int], ...]
    started_ms: int
    #: Started on a hint (the broker's metadata stream ended, or another broker reported it),
    #: not on silence: such a probe looks again once if a listener still accepted.
    hinted: bool = False


class ClusterControlManager:
    """Registration, heartbeats, fencing and controlled shutdown of brokers."""

    def __init__(
        self,
        *,
        cluster_id: str,
        heartbeats: BrokerHeartbeatTracker,
        replication: ReplicationControlManager,
        credential_verifier: Callable[[int], bytes] = lambda broker_id: b"",
    ) -> None:
        self._cluster_id = cluster_id
        # A broker's credential verifier for its registration record (the runtime derives it
        # from the cluster secret, which this pure module never sees).
        self._credential_verifier = credential_verifier
        self._heartbeats = heartbeats
        self._replication = replication
        # Brokers whose leadership changes did not fit in one batch: a re-registered (fenced)
        # broker still in ISRs, or an unfenced one with offline partitions left to lead. Soft
        # state: a new active controller starts with every broker in it (on_become_active), so
        # a fenced broker is never unfenced with leaderships of its old incarnation left.
        self._unsettled: set[int] = set()
        # Brokers whose fencing began (a part of their changes was written without the
        # FenceBrokerRecord, which comes with the last part), by the broker epoch being fenced.
        # The rest follows whatever the broker does meanwhile: an abandoned fencing would leave
        # it unfenced with partitions taken offline for its sake, which no unfencing then
        # revives (seen at 30,000 partitions: three brokers' sessions expired at once while
        # their publishers were busy, each fencing stopped at its next heartbeat, and 401
        # partitions were left offline with an active broker as their last ISR member).
        self._fencing: dict[int, _Fencing] = {}

    @property
    def heartbeats(self) -> BrokerHeartbeatTracker:
        return self._heartbeats

    def fencing_begun(self) -> dict[int, int]:
        """Brokers whose fencing began and is not finished, with the broker epoch fenced."""
        return {b: fencing.broker_epoch for b, fencing in self._fencing.items()}

    def on_become_active(self, image: MetadataImage, now_ms: int) -> None:
        """Give every registered broker a fresh session from ``now_ms`` (Kafka's rule)."""
        self._heartbeats.reset(image.cluster.brokers, now_ms)
        self._unsettled = set(image.cluster.brokers)
        # A fencing the previous active began is not continued (its evidence was its own);
        # the unsettled pass gives the partitions it took offline their leaders back.
        self._fencing = {}
        for broker_id, registration in image.cluster.brokers.items():
            if registration.in_controlled_shutdown:
                # Which batch moved its leaderships is lost with the old controller's soft
                # state; the committed image's offset is a safe (later) stand-in.
                self._heartbeats.set_controlled_shutdown_offset(broker_id, image.offset)

    # --- RegisterBroker -----------------------------------------------------------------------

    def register_broker(
        self, image: MetadataImage, request: controller_pb2.RegisterBrokerRequest, now_ms: int
    ) -> tuple[Records, controller_pb2.RegisterBrokerResponse]:
        response = controller_pb2.RegisterBrokerResponse()
        try:
            self._validate_registration(request)
            existing = image.cluster.broker(request.broker_id)
            if existing is not None and existing.incarnation_id == request.incarnation_id:
                _check_same_registration(existing, request)
                self._heartbeats.touch(request.broker_id, now_ms)
                response.broker_epoch = existing.broker_epoch
                return [], response
            # A fenced registration, or one whose broker completed (or began) a controlled
            # shutdown, may be replaced at once: that incarnation is not serving. Otherwise a
            # clean restart would wait out a session the new active controller just granted.
            if (
                existing is not None
                and not existing.fenced
                and not existing.in_controlled_shutdown
                and self._heartbeats.has_valid_session(request.broker_id, now_ms)
            ):
                raise DuplicateBrokerRegistrationError(
                    f"broker {request.broker_id} is registered by another incarnation "
                    f"({existing.incarnation_id.hex()}) whose session is still live"
                )
        except TidelogError as error:
            set_error(response, error)
            return [], response
        broker_epoch = image.offset + 1  # the offset the RegisterBrokerRecord (first) will get
        records = [metadata_record(metadata_pb2.RegisterBrokerRecord(
            broker_id=request.broker_id, incarnation_id=request.incarnation_id,
            broker_epoch=broker_epoch, endpoint=request.endpoint, rack=request.rack, fenced=True,
            credential_verifier=self._credential_verifier(request.broker_id),
        ))]
        if request.HasField("inter_broker_endpoint"):
            records[0].register_broker.inter_broker_endpoint.CopyFrom(
                request.inter_broker_endpoint)
        if existing is not None:
            moves = self._replication.move_leadership_away(
                image, request.broker_id, limit=FENCE_CHANGES_PER_BATCH_MAX)
            records.extend(moves)
            if len(moves) >= FENCE_CHANGES_PER_BATCH_MAX:
                self._unsettled.add(request.broker_id)  # continue_unsettled moves the rest
        self._heartbeats.remove(request.broker_id)
        self._heartbeats.touch(request.broker_id, now_ms)
        response.broker_epoch = broker_epoch
        return records, response

    def _validate_registration(self, request: controller_pb2.RegisterBrokerRequest) -> None:
        if request.cluster_id != self._cluster_id:
            raise InconsistentClusterIdError(
                f"cluster id {request.cluster_id!r} is not this cluster's {self._cluster_id!r}"
            )
        if request.broker_id < 0:
            raise InvalidRequestError(f"broker id must be >= 0, got {request.broker_id}")
        if len(request.incarnation_id) != TOPIC_ID_BYTES or not any(request.incarnation_id):
            raise InvalidRequestError("incarnation id must be a non-zero 16-byte UUID")
        host, port = request.endpoint.host, request.endpoint.port
        if not host or len(host) > ENDPOINT_TEXT_LENGTH_MAX or not 0 < port <= PORT_MAX:
            raise InvalidRequestError(f"endpoint {host!r}:{port} is not a valid host and port")
        if request.HasField("inter_broker_endpoint"):
            host, port = request.inter_broker_endpoint.host, request.inter_broker_endpoint.port
            if not host or len(host) > ENDPOINT_TEXT_LENGTH_MAX or not 0 < port <= PORT_MAX:
                raise InvalidRequestError(
                    f"inter-broker endpoint {host!r}:{port} is not a valid host and port")
        if len(request.rack) > ENDPOINT_TEXT_LENGTH_MAX:
            raise InvalidRequestError(f"rack is longer than {ENDPOINT_TEXT_LENGTH_MAX} characters")

    # --- BrokerHeartbeat ----------------------------------------------------------------------

    def broker_heartbeat(
        self, image: MetadataImage, request: controller_pb2.BrokerHeartbeatRequest, now_ms: int
    ) -> tuple[Records, controller_pb2.BrokerHeartbeatResponse]:
        response = controller_pb2.BrokerHeartbeatResponse()
        try:
            registration = check_broker_epoch(image, request.broker_id, request.broker_epoch)
            if request.current_metadata_offset < -1:
                raise InvalidRequestError(
                    f"current metadata offset {request.current_metadata_offset} is below -1"
                )
        except TidelogError as error:
            set_error(response, error)
            return [], response
        broker_id = request.broker_id
        response.is_caught_up = request.current_metadata_offset >= registration.broker_epoch
        if registration.fenced and request.want_shutdown:
            # Fenced brokers lead nothing: they may stop now, and a successor may register.
            self._heartbeats.remove(broker_id)
            response.is_fenced = response.should_shut_down = True
            return [], response
        self._heartbeats.touch(broker_id, now_ms)
        if registration.fenced:
            records = []
            if (response.is_caught_up and not request.want_fence
                    and broker_id not in self._unsettled):
                records = self._unfence_records(image, registration)
            response.is_fenced = not records
            return records, response
        if request.want_fence:
            response.is_fenced = True
            return self.fence_records(image, broker_id), response
        if registration.in_controlled_shutdown:
            return self._continue_controlled_shutdown(image, request, response)
        if request.want_shutdown:
            return self._begin_controlled_shutdown(image, registration), response
        return [], response

    def _unfence_records(self, image: MetadataImage, registration: BrokerRegistration) -> Records:
        records = [metadata_record(metadata_pb2.UnfenceBrokerRecord(
            broker_id=registration.broker_id, broker_epoch=registration.broker_epoch
        ))]
        elections = self._replication.elect_leaders_on_unfence(
            image, registration.broker_id, limit=FENCE_CHANGES_PER_BATCH_MAX)
        records.extend(elections)
        if len(elections) >= FENCE_CHANGES_PER_BATCH_MAX:
            self._unsettled.add(registration.broker_id)  # continue_unsettled elects the rest
        return records

    def continue_unsettled(self, image: MetadataImage) -> Records:
        """The next part of one unsettled broker's changes (at most FENCE_CHANGES_PER_BATCH_MAX
        partition changes): a fenced broker's leaderships and ISR memberships move away, an
        unfenced one leads the offline partitions it can. A broker with nothing left is settled
        (a fenced one may then be unfenced by its next heartbeat). One broker per call: each
        look is a pass over every partition (~50 ms at 100,000), made under the lock the Raft
        thread's replay takes too. Called by the periodic tick; brokers that are gone are
        dropped."""
        for broker_id in sorted(self._unsettled):
            registration = image.cluster.broker(broker_id)
            if registration is None:
                self._unsettled.discard(broker_id)
                continue
            limit = FENCE_CHANGES_PER_BATCH_MAX
            if registration.fenced:
                part = self._replication.move_leadership_away(image, broker_id, limit=limit)
            elif image.cluster.is_active(broker_id):
                part = self._replication.elect_leaders_on_unfence(image, broker_id, limit=limit)
            else:
                part = []  # in controlled shutdown: it is to lead nothing (the shutdown moves)
            if len(part) < limit:
                self._unsettled.discard(broker_id)  # else the next tick continues with it
            return part
        return []

    def _begin_controlled_shutdown(
        self, image: MetadataImage, registration: BrokerRegistration
    ) -> Records:
        records = [metadata_record(metadata_pb2.BrokerRegistrationChangeRecord(
            broker_id=registration.broker_id, broker_epoch=registration.broker_epoch,
            in_controlled_shutdown=True,
        ))]
        # A broker in many ISRs moves in parts, one per heartbeat (_continue_controlled_shutdown).
        records.extend(self._replication.move_leadership_away(
            image, registration.broker_id, limit=FENCE_CHANGES_PER_BATCH_MAX))
        self._heartbeats.set_controlled_shutdown_offset(
            registration.broker_id, image.offset + len(records)
        )
        return records

    def _continue_controlled_shutdown(
        self,
        image: MetadataImage,
        request: controller_pb2.BrokerHeartbeatRequest,
        response: controller_pb2.BrokerHeartbeatResponse,
    ) -> tuple[Records, controller_pb2.BrokerHeartbeatResponse]:
        broker_id = request.broker_id
        moves = self._replication.move_leadership_away(image, broker_id,
                                                       limit=FENCE_CHANGES_PER_BATCH_MAX)
        if moves:
            # Leadership came back somehow (it cannot today: the broker is not eligible);
            # move it again and wait for the broker to apply that.
            self._heartbeats.set_controlled_shutdown_offset(broker_id, image.offset + len(moves))
            return moves, response
        applied_offset = self._heartbeats.controlled_shutdown_offset(broker_id)
        if applied_offset is None or request.current_metadata_offset < applied_offset:
            return [], response
        response.is_fenced = response.should_shut_down = True
        self._heartbeats.remove(broker_id)
        return self.fence_records(image, broker_id), response

    # --- fencing ------------------------------------------------------------------------------

    def fence_records(self, image: MetadataImage, broker_id: int) -> Records:
        """Fence an unfenced broker: its FenceBrokerRecord, then its ISR and leader changes.

        A broker in more ISRs than FENCE_CHANGES_PER_BATCH_MAX gets the first part of its
        changes only (leaderships first), without the fence: the next call, on the image
        with those applied, continues, and the last part carries the FenceBrokerRecord. As in
        Kafka, fencing is not atomic; until the last part commits the broker is just a broker
        that leads less, as during a controlled shutdown.

        The parts between the first and the last go on from where the previous one ended, in
        the list of partitions the first one found; the first and the last look at every
        partition, so the fence is written only once no ISR anywhere (a partition created
        meanwhile included) has a change left for it."""
        registration = image.cluster.broker(broker_id)
        assert registration is not None
        if registration.fenced:
            raise InvariantViolation(f"broker {broker_id} is already fenced")
        limit = FENCE_CHANGES_PER_BATCH_MAX
        fencing = self._fencing.get(broker_id)
        if (fencing is not None and fencing.broker_epoch == registration.broker_epoch
                and len(fencing.partitions) - fencing.next > limit):
            changes, fencing.next = self._replication.move_leadership_away_among(
                image, broker_id, fencing.partitions, fencing.next, limit)
            if changes:
                return changes
        partitions = self._replication.isr_partitions_of(image, broker_id)
        changes, next_index = self._replication.move_leadership_away_among(
            image, broker_id, partitions, 0, limit)
        if next_index < len(partitions):
            # More than one batch holds: this part without the fence, and the rest follows
            # whatever the broker does meanwhile (see _fencing).
            self._fencing[broker_id] = _Fencing(registration.broker_epoch, partitions, next_index)
            return changes
        self._fencing.pop(broker_id, None)
        records = [metadata_record(metadata_pb2.FenceBrokerRecord(
            broker_id=broker_id, broker_epoch=registration.broker_epoch
        ))]
        records.extend(changes)
        return records

    def _fencing_to_finish(self, image: MetadataImage) -> list[int]:
        """Brokers whose fencing began and must go on: the same registration, still unfenced.
        Forgets the others (re-registered, unregistered or fenced since)."""
        for broker_id, fencing in list(self._fencing.items()):
            registration = image.cluster.broker(broker_id)
            if (registration is None or registration.broker_epoch != fencing.broker_epoch
                    or registration.fenced):
                del self._fencing[broker_id]
        return sorted(self._fencing)

    def start_probes(
        self, image: MetadataImage, now_ms: int, *, silent_ms: int,
        hinted: Collection[int] = (), limit: int,
    ) -> list[ProbeTarget]:
        """Start probes of unfenced brokers silent for more than ``silent_ms``, and of those in
        ``hinted`` (their metadata stream to this controller ended, or another broker reported
        them unreachable: hints, not evidence), at most ``limit``; each is one in flight per
        broker, spaced (BrokerHeartbeatTracker)."""
        unfenced = {b: r for b, r in image.cluster.brokers.items() if not r.fenced}
        candidates = [b for b in hinted if b in unfenced]
        candidates += [b for b in self._heartbeats.silent_brokers(unfenced, now_ms, silent_ms)
                       if b not in candidates]
        targets: list[ProbeTarget] = []
        for broker_id in candidates:
            if len(targets) >= limit:
                break
            if not self._heartbeats.start_probe(broker_id, now_ms):
                continue
            r = unfenced[broker_id]
            endpoints = [(r.host, r.port)]
            if r.inter_broker_port and (r.inter_broker_host, r.inter_broker_port) != endpoints[0]:
                endpoints.append((r.inter_broker_host or r.host, r.inter_broker_port))
            targets.append(ProbeTarget(broker_id, r.broker_epoch, tuple(endpoints), now_ms,
                                       hinted=broker_id in hinted))
        return targets

    def fence_unreachable(
        self, image: MetadataImage, broker_id: int, broker_epoch: int, probe_started_ms: int
    ) -> Records:
        """Every listener of ``broker_id`` refused a connection in a probe started at
        ``probe_started_ms``: fence it (what a session expiry writes), if that registration
        (``broker_epoch``) is still current and unfenced and no heartbeat or registration of it
        came since the probe started. Otherwise nothing: the evidence is stale."""
        registration = image.cluster.broker(broker_id)
        if registration is None or registration.broker_epoch != broker_epoch or registration.fenced:
            return []
        if broker_id in self._fencing_to_finish(image):
            return self.fence_records(image, broker_id)  # begun: finished, heartbeat or not
        last_contact = self._heartbeats.last_contact_ms(broker_id)
        if last_contact is None or last_contact >= probe_started_ms:
            return []
        return self.fence_records(image, broker_id)

    def fence_stale_brokers(self, image: MetadataImage, now_ms: int) -> Records:
        """One batch fencing every unfenced broker whose session expired, oldest first, after
        finishing the fencings begun (``_fencing``: a broker heard from again since its first
        part is fenced all the same, and unfenced by its next heartbeat).

        Each broker's records are built on the image that already has the previous brokers'
        changes, so a partition losing two brokers gets two consistent changes.
        """
        unfenced = [b for b, r in sorted(image.cluster.brokers.items()) if not r.fenced]
        for broker_id in unfenced:
            if not self._heartbeats.is_tracked(broker_id):
                self._heartbeats.touch(broker_id, now_ms)  # first seen: its session starts now
        records: Records = []
        working = image
        begun = self._fencing_to_finish(image)
        stale = self._heartbeats.stale_brokers(unfenced, now_ms)
        for broker_id in begun + [b for b in stale if b not in begun]:
            if len(records) >= FENCE_BATCH_RECORDS_SOFT_MAX:
                break  # the rest are fenced on the next tick
            fence = self.fence_records(working, broker_id)
            records.extend(fence)
            if len(records) >= FENCE_CHANGES_PER_BATCH_MAX:
                break  # a part of one broker's changes: the next tick continues
            working = apply_records(working, fence)
        return records


def _check_same_registration(
    existing: BrokerRegistration, request: controller_pb2.RegisterBrokerRequest
) -> None:
    endpoint = common_pb2.Endpoint(host=existing.host, port=existing.port)
    inter_broker = common_pb2.Endpoint(host=existing.inter_broker_host,
                                       port=existing.inter_broker_port)
    if (request.endpoint != endpoint or request.rack != existing.rack
            or request.inter_broker_endpoint != inter_broker):
        raise InvalidRequestError(
            f"incarnation {existing.incarnation_id.hex()} of broker {existing.broker_id} is "
            "already registered with another endpoint or rack"
        )
