"""The replication decisions for one partition replica: roles, ISR, HW, epochs, acks (DESIGN §7).

A :class:`PartitionState` is pure: no I/O, no clock (``now_ms`` is an argument), no threads. It
reads the local log only through :class:`~broker.replication.fetch.LogView` and answers with
effects (:mod:`broker.replication.effects`) that the shell carries out in list order -- persist,
then send, then acknowledge. One shell task owns a partition's state and its log, and calls in
this order (sketch)::

    # metadata (the broker's image changed this partition: MetadataDelta.local_changes)
    effects = state.become_leader(leader_epoch=, partition_epoch=, replicas=, isr=,
                                  log_end_offset=log.log_end_offset,
                                  high_watermark=log.high_watermark, now_ms=)
    effects = state.become_follower(leader_id=, leader_epoch=, partition_epoch=, replicas=, isr=)

    # leader: produce
    if (error := state.check_produce(acks, min_insync_replicas)): answer error
    append (after ProducerStateTable.check); then run(state.on_local_append(log.log_end_offset,
                                                                          now_ms=now))
    acks=all: waiter(required_offset=last_offset + 1, leader_epoch=state.leader_epoch); after
    every effect list with UpdateHighWatermark/CheckProduceWaiters, and on timeout:
        done = state.acks_all_outcome(required_offset=, leader_epoch=, min_insync_replicas=)
        if done: answer done.error (None = success)        # else keep waiting

    # leader: a follower fetch (ReplicaService.Fetch)
    d = state.on_follower_fetch(replica_id, fetch_offset=, last_fetched_epoch=,
                                current_leader_epoch=, log=log, now_ms=now)
    run(d.effects); batches = log.read(d.fetch_offset, max_bytes) if d.should_read else []
    answer (d.error, d.diverging_epoch, d.high_watermark, d.log_start_offset, d.log_end_offset)

    # leader: a timer every replica.lag.time.max.ms / 2
    run(state.tick(now_ms))                        # may propose an ISR shrink
    # ProposeIsr → AlterPartition; its answer or transport failure:
    run(state.on_alter_partition_response(proposal, error_code=, leader_id=, leader_epoch=,
                                          isr=, partition_epoch=, now_ms=))

    # follower: the fetch loop (one fetch in flight per partition)
    while (request := state.fetch_request(log)) is not None:
        response = await fetch(request)   # → LeaderFetchResponse (transport error: back off)
        run(state.on_fetch_response(request, response, log))

Rules, with Kafka's names (docs/decisions.md "Replication core" has the reasoning):

* Metadata is applied only forwards: an older leader epoch, or the same leader epoch with a
  partition epoch not newer than ours, is ignored.
* HW = min LEO over the **maximal ISR** (committed ISR + the pending proposal's ISR, KIP-497)
  plus followers outside it that are caught up and eligible (Kafka's
  shouldWaitForReplicaToJoinIsr); it only moves forward. Followers' LEOs are unknown at the start
  of every leader epoch, so the HW waits for every ISR member's first fetch in the epoch.
* ISR expansion: a follower whose fetch offset is ≥ the HW and ≥ the leader epoch's start
  offset, not in the ISR, not ineligible (KIP-841: fenced or shutting down). ISR shrink on
  ``tick``: members not caught up within ``replica.lag.time.max.ms``. Either is a proposal; at
  most one is in flight; the ISR changes when the controller has committed it.
* acks=all: NOT_ENOUGH_REPLICAS when the committed ISR is below min.insync.replicas at append;
  complete once HW ≥ last offset + 1, with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR is
  then below min.insync.replicas, NOT_LEADER_OR_FOLLOWER if the leader epoch changed.
* Followers truncate only to a diverging epoch's end (KIP-101/279/320), never to their HW.
* The leader does not record its epoch in the log at election (do NOT call
  ``log.maybe_assign_epoch_start_offset``): the log learns it from the epoch's first append, and
  divergence answers before that are computed as if it were there (``_end_offset_for_epoch``).
* ``set_ineligible_replicas`` takes the fenced / shutting-down brokers from the metadata image
  whenever they change (KIP-841).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from dataclasses import dataclass

from tidelog import limits
from tidelog.broker.replication import follower
from tidelog.broker.replication.effects import (
    BackoffFetch,
    CheckProduceWaiters,
    Effect,
    ProposeIsr,
    UpdateHighWatermark,
)
from tidelog.broker.replication.fetch import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    DivergingEpoch,
    FollowerFetch,
    FollowerFetchDecision,
    LeaderFetchResponse,
    LogView,
)
from tidelog.broker.replication.replica_state import UNKNOWN_OFFSET, ReplicaState
from tidelog.errors import (
    FencedLeaderEpochError,
    InvalidRequiredAcksError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    TidelogError,
    UnknownLeaderEpochError,
)
from tidelog.invariants import InvariantViolation
from tidelog.v1.common_pb2 import ErrorCode

__all__ = [
    "NO_LEADER",
    "REPLICA_LAG_TIME_MAX_MS_DEFAULT",
    "AcksDone",
    "PartitionState",
    "Role",
]

NO_LEADER = -1
#: Kafka's replica.lag.time.max.ms default (2.5+).
REPLICA_LAG_TIME_MAX_MS_DEFAULT = 30_000
ACKS_ALL = -1
_ACKS_VALID = (ACKS_ALL, 0, 1)

#: AlterPartition answers that say "the controller did not apply it and never will": the
#: committed state is what we hold, so drop the proposal and let a later one retry.
_ALTER_PARTITION_REJECTED = frozenset({ErrorCode.INELIGIBLE_REPLICA})
#: Answers after which our view is stale: keep the proposal pending (it may even have been
#: applied) until the metadata log brings the partition's real state.
_ALTER_PARTITION_AWAIT_METADATA = frozenset({
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.INVALID_UPDATE_VERSION,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.NEW_LEADER_ELECTED,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.INVALID_REQUEST,
})


class Role(enum.Enum):
    NONE = "none"  # not yet told, or no longer a replica
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(frozen=True, slots=True)
class AcksDone:
    """An acks=all produce is finished: ``error`` None means success."""

    error: TidelogError | None


class PartitionState:
    """One replica of one partition on this broker: leader or follower (see module doc)."""

    def __init__(
        self,
        broker_id: int,
        *,
        replica_lag_time_max_ms: int = REPLICA_LAG_TIME_MAX_MS_DEFAULT,
    ) -> None:
        if broker_id < 0:
            raise InvariantViolation(f"broker id {broker_id} is negative")
        if replica_lag_time_max_ms <= 0:
            raise InvariantViolation(
                f"replica.lag.time.max.ms {replica_lag_time_max_ms} is not positive")
        self.broker_id = broker_id
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._role = Role.NONE
        self._leader_id = NO_LEADER
        self._leader_epoch = -1
        self._partition_epoch = -1
        self._replicas: tuple[int, ...] = ()
        self._isr: tuple[int, ...] = ()  # committed by the controller
        # Leader only.
        self._pending: ProposeIsr | None = None
        self._log_end_offset = 0
        self._high_watermark = 0
        self._leader_epoch_start_offset = 0
        self._followers: dict[int, ReplicaState] = {}
        self._ineligible: frozenset[int] = frozenset()
        # Follower only.
        self._awaiting_metadata = False

    # --- read-only view ----------------------------------------------------------------------

    @property
    def role(self) -> Role:
        return self._role

    @property
    def is_leader(self) -> bool:
        return self._role is Role.LEADER

    @property
    def leader_id(self) -> int:
        return self._leader_id

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def partition_epoch(self) -> int:
        return self._partition_epoch

    @property
    def replicas(self) -> tuple[int, ...]:
        return self._replicas

    @property
    def isr(self) -> tuple[int, ...]:
        """The ISR as last committed by the controller (what acks=all admission uses)."""
        return self._isr

    @property
    def pending_isr_change(self) -> ProposeIsr | None:
        return self._pending

    @property
    def maximal_isr(self) -> frozenset[int]:
        """Committed ISR | proposed ISR: every replica the controller may consider in sync."""
        if self._pending is None:
            return frozenset(self._isr)
        return frozenset(self._isr) | frozenset(self._pending.new_isr)

    @property
    def high_watermark(self) -> int:
        """The leader's HW (followers: read the log's)."""
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        """The leader's LEO as last reported by the shell."""
        return self._log_end_offset

    @property
    def leader_epoch_start_offset(self) -> int:
        return self._leader_epoch_start_offset

    def follower_state(self, replica_id: int) -> ReplicaState | None:
        """Leader: what it knows of a follower (a copy), or None."""
        state = self._followers.get(replica_id)
        return None if state is None else dataclasses.replace(state)

    def follower_log_end_offset(self, replica_id: int) -> int | None:
        """Leader: a follower's last fetch offset (-1 before its first fetch in this leader
        epoch), or None; :meth:`follower_state` without the copy (a scrape reads it for every
        follower of every partition led here)."""
        state = self._followers.get(replica_id)
        return None if state is None else state.log_end_offset

    def is_under_min_isr(self, min_insync_replicas: int) -> bool:
        return self.is_leader and len(self._isr) < min_insync_replicas

    # --- metadata ----------------------------------------------------------------------------

    def become_leader(
        self,
        *,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
        log_end_offset: int,
        high_watermark: int,
        now_ms: int,
    ) -> list[Effect]:
        """The metadata makes this broker the leader (Kafka's makeLeader). The same leader epoch
        with a newer partition epoch is an ISR/replica update; a new epoch restarts tracking."""
        _check_assignment(replicas, isr, self.broker_id)
        if self.broker_id not in isr:
            raise InvariantViolation(
                f"become_leader: broker {self.broker_id} is not in the ISR {list(isr)}")
        if not 0 <= high_watermark <= log_end_offset:
            raise InvariantViolation(
                f"become_leader: HW {high_watermark} outside 0..LEO {log_end_offset}")
        if self._is_stale(leader_epoch, partition_epoch):
            return []
        if self._role is Role.LEADER and leader_epoch == self._leader_epoch:
            return self._update_leader_assignment(partition_epoch, replicas, isr, now_ms)
        # A leader change always bumps the leader epoch, so a follower of this very epoch
        # cannot become its leader.
        if leader_epoch <= self._leader_epoch:
            raise InvariantViolation(
                f"become_leader: leader epoch {leader_epoch} is not above {self._leader_epoch}")
        self._set_assignment(Role.LEADER, self.broker_id, leader_epoch, partition_epoch,
                             replicas, isr)
        self._log_end_offset = log_end_offset
        self._high_watermark = high_watermark
        self._leader_epoch_start_offset = log_end_offset
        self._awaiting_metadata = False
        # Every follower's LEO is unknown again, even when this broker led the previous epoch
        # too: a follower may have truncated to another leader's log in between (Kafka keeps
        # them when the leader is re-elected; we prefer a HW pause of one fetch round).
        self._followers = {
            r: ReplicaState.fresh(in_isr=r in self._isr, now_ms=now_ms)
            for r in self._replicas if r != self.broker_id
        }
        return [*self._maybe_increment_high_watermark(now_ms), CheckProduceWaiters()]

    def become_follower(
        self,
        *,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
    ) -> list[Effect]:
        """The metadata makes this broker a follower of ``leader_id`` (NO_LEADER: offline).
        No truncation here: divergence is found by fetching (KIP-320), never by truncating to
        the HW."""
        _check_assignment(replicas, isr, leader_id)
        if leader_id == self.broker_id:
            raise InvariantViolation(f"become_follower: broker {leader_id} cannot follow itself")
        if self._is_stale(leader_epoch, partition_epoch):
            return []
        was_leader = self._role is Role.LEADER
        if self._role is Role.FOLLOWER and leader_epoch == self._leader_epoch:
            if leader_id != self._leader_id:
                raise InvariantViolation(
                    f"leader epoch {leader_epoch}: leader {leader_id}, but {self._leader_id} leads "
                    "it")
        else:
            if not (was_leader is False or leader_epoch > self._leader_epoch):
                raise InvariantViolation(
                    f"the leader of epoch {self._leader_epoch} cannot follow in epoch "
                    f"{leader_epoch}")
            self._awaiting_metadata = False
        self._set_assignment(Role.FOLLOWER, leader_id, leader_epoch, partition_epoch,
                             replicas, isr)
        self._followers = {}
        return [CheckProduceWaiters()] if was_leader else []

    def set_ineligible_replicas(self, broker_ids: frozenset[int], *, now_ms: int) -> list[Effect]:
        """KIP-841: brokers fenced or in controlled shutdown, from the broker's metadata image.
        They are never proposed for the ISR and never hold back the HW from outside it."""
        self._ineligible = broker_ids
        return self._maybe_increment_high_watermark(now_ms) if self.is_leader else []

    def _is_stale(self, leader_epoch: int, partition_epoch: int) -> bool:
        if leader_epoch != self._leader_epoch:
            if leader_epoch > self._leader_epoch and partition_epoch <= self._partition_epoch:
                raise InvariantViolation(
                    f"leader epoch {leader_epoch} with partition epoch {partition_epoch}, not "
                    f"above {self._partition_epoch}: {self}")
            return leader_epoch < self._leader_epoch
        # The same partition epoch again (a replay, or an AlterPartition answer got there
        # first): nothing new, and a pending proposal must stay pending -- it may still commit.
        return partition_epoch <= self._partition_epoch

    def _set_assignment(
        self,
        role: Role,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
    ) -> None:
        self._role = role
        self._leader_id = leader_id
        self._leader_epoch = leader_epoch
        self._partition_epoch = partition_epoch
        self._replicas = tuple(replicas)
        self._isr = _in_replica_order(isr, self._replicas)
        # A newer partition epoch either is our proposal or makes it fail its CAS.
        self._pending = None

    def _update_leader_assignment(
        self, partition_epoch: int, replicas: Sequence[int], isr: Sequence[int], now_ms: int
    ) -> list[Effect]:
        self._set_assignment(Role.LEADER, self.broker_id, self._leader_epoch, partition_epoch,
                             replicas, isr)
        kept = {r: s for r, s in self._followers.items() if r in self._replicas}
        for r in self._replicas:
            if r != self.broker_id and r not in kept:
                kept[r] = ReplicaState.fresh(in_isr=r in self._isr, now_ms=now_ms)
        self._followers = kept
        return [*self._maybe_increment_high_watermark(now_ms), CheckProduceWaiters()]

    # --- leader: produce ---------------------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int) -> TidelogError | None:
        """Kafka's leader-epoch check of a fetch/ListOffsets (-1 skips it)."""
        if not self.is_leader:
            return NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader (leader {self._leader_id}, "
                f"epoch {self._leader_epoch})")
        if current_leader_epoch == -1 or current_leader_epoch == self._leader_epoch:
            return None
        if current_leader_epoch < self._leader_epoch:
            return FencedLeaderEpochError(
                f"request leader epoch {current_leader_epoch} < {self._leader_epoch}")
        return UnknownLeaderEpochError(
            f"request leader epoch {current_leader_epoch} > {self._leader_epoch}")

    def check_produce(self, acks: int, min_insync_replicas: int) -> TidelogError | None:
        """Admission of a produce, before the append. acks=all needs the *committed* ISR to
        hold min.insync.replicas members (a pending expansion does not count yet)."""
        if min_insync_replicas < 1:
            raise InvariantViolation(f"min.insync.replicas {min_insync_replicas} is below 1")
        if acks not in _ACKS_VALID:
            return InvalidRequiredAcksError(f"acks must be -1, 0 or 1, got {acks}")
        if not self.is_leader:
            return NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader (leader {self._leader_id})")
        if acks == ACKS_ALL and len(self._isr) < min_insync_replicas:
            return NotEnoughReplicasError(
                f"ISR {list(self._isr)} has {len(self._isr)} members, min.insync.replicas is "
                f"{min_insync_replicas}")
        return None

    def on_local_append(self, log_end_offset: int, *, now_ms: int) -> list[Effect]:
        """The leader's log grew to ``log_end_offset`` (call right after every append)."""
        if not self.is_leader:
            raise InvariantViolation(f"on_local_append on a {self._role.value}")
        if log_end_offset < self._log_end_offset:
            raise InvariantViolation(
                f"the LEO went back from {self._log_end_offset} to {log_end_offset}")
        self._log_end_offset = log_end_offset
        return self._maybe_increment_high_watermark(now_ms)

    def acks_all_outcome(
        self, *, required_offset: int, leader_epoch: int, min_insync_replicas: int
    ) -> AcksDone | None:
        """A waiting acks=all produce: None while waiting. ``required_offset`` is the batch's
        last offset + 1, ``leader_epoch`` the one it was appended in: after any epoch change its
        offsets may hold other records, so it fails NOT_LEADER_OR_FOLLOWER (retriable)."""
        if not self.is_leader or leader_epoch != self._leader_epoch:
            return AcksDone(NotLeaderOrFollowerError(
                f"leadership changed while waiting (appended in epoch {leader_epoch}, now "
                f"{self._role.value} in epoch {self._leader_epoch})"))
        if self._high_watermark < required_offset:
            return None
        isr_size = len(self.maximal_isr)
        if isr_size < min_insync_replicas:
            # Kafka's rule: appended and committed, but by fewer replicas than asked.
            return AcksDone(NotEnoughReplicasAfterAppendError(
                f"the ISR shrank to {isr_size} < min.insync.replicas {min_insync_replicas}"))
        return AcksDone(None)

    # --- leader: follower fetches ------------------------------------------------------------

    def on_follower_fetch(
        self,
        replica_id: int,
        *,
        fetch_offset: int,
        last_fetched_epoch: int,
        current_leader_epoch: int,
        log: LogView,
        now_ms: int,
        broker_epoch: int = -1,
    ) -> FollowerFetchDecision:
        """A follower's fetch reached the leader (Kafka's Partition.fetchRecords for a
        follower): check epochs and divergence, then record its LEO, advance the HW, maybe
        propose an ISR expansion."""
        error = self.check_leader_epoch(current_leader_epoch)
        if error is None and replica_id not in self._followers:
            error = NotLeaderOrFollowerError(
                f"broker {replica_id} is not a follower of this partition ({self._replicas})")
        if error is not None:
            return self._fetch_answer(fetch_offset, log, error=error)
        if log.log_end_offset != self._log_end_offset:
            raise InvariantViolation(
                "the shell must report appends before serving fetches: log LEO "
                f"{log.log_end_offset}, state LEO {self._log_end_offset}")
        if last_fetched_epoch != UNDEFINED_EPOCH:
            epoch, end = self._end_offset_for_epoch(last_fetched_epoch, log)
            if epoch == UNDEFINED_EPOCH or end < 0:
                return self._fetch_answer(fetch_offset, log, error=OffsetOutOfRangeError(
                    f"no end offset for the follower's last fetched epoch {last_fetched_epoch}"))
            if fetch_offset >= log.log_start_offset and (
                    epoch < last_fetched_epoch or end < fetch_offset):
                # The follower's log diverged: it truncates first; its LEO is not trusted.
                return self._fetch_answer(fetch_offset, log,
                                          diverging=DivergingEpoch(epoch, end))
        if not log.log_start_offset <= fetch_offset <= self._log_end_offset:
            return self._fetch_answer(fetch_offset, log, error=OffsetOutOfRangeError(
                f"fetch offset {fetch_offset} outside [{log.log_start_offset}, "
                f"{self._log_end_offset}]"))
        self._followers[replica_id].on_fetch(
            fetch_offset=fetch_offset, leader_log_end_offset=self._log_end_offset, now_ms=now_ms,
            broker_epoch=broker_epoch)
        effects = self._maybe_increment_high_watermark(now_ms)
        effects += self._maybe_expand_isr(replica_id)
        return self._fetch_answer(fetch_offset, log, effects=effects)

    def on_follower_fetch_repeated(self, replica_id: int, *, at_ms: int) -> None:
        """Leader: ``replica_id``'s fetch session (broker.replication.fetch_session) fetched this
        partition again at ``at_ms`` from the position of its last accepted fetch, and nothing
        changed here since (the shell calls this before the LEO moves, or with a time before it
        moved). Kafka's leader sees that fetch in every request of a session; a session here
        leaves the partition out, and this keeps the follower's caught-up time what Kafka's
        would be (``ReplicaState.on_repeated_fetch``), so an append to an idle partition does not
        find a live, caught-up follower lagging since its last real fetch."""
        if self.is_leader:
            state = self._followers.get(replica_id)
            if state is not None:
                state.on_repeated_fetch(at_ms)

    def _end_offset_for_epoch(self, epoch: int, log: LogView) -> tuple[int, int]:
        """KIP-279's answer, as if the log held this leader epoch from its start offset.

        Kafka writes that entry at election (maybeAssignEpochStartOffset); we do not, because
        an entry without data would stay at the log's end if this broker is demoted before it
        appends, and broker/storage's truncate_to keeps such entries -- the next leader's
        batches of an older epoch could then never be appended. Until the first append of the
        epoch (which records it), the answer is computed here instead.
        """
        if epoch >= self._leader_epoch:
            if epoch == self._leader_epoch:
                return epoch, self._log_end_offset
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        latest = log.latest_epoch()
        if latest > self._leader_epoch:
            raise InvariantViolation(
                f"the log's latest epoch {latest} is above the leader epoch {self._leader_epoch}")
        found = log.end_offset_for_epoch(epoch)
        if latest == self._leader_epoch or found[0] != UNDEFINED_EPOCH:
            # The log knows this epoch; when it is the log's latest, its end is the LEO, which
            # is this epoch's start offset (nothing was appended in this epoch yet).
            return found
        if latest == UNDEFINED_EPOCH:
            return epoch, self._leader_epoch_start_offset
        return latest, self._leader_epoch_start_offset

    def _fetch_answer(
        self,
        fetch_offset: int,
        log: LogView,
        *,
        error: TidelogError | None = None,
        diverging: DivergingEpoch | None = None,
        effects: Sequence[Effect] = (),
    ) -> FollowerFetchDecision:
        leader = self.is_leader
        return FollowerFetchDecision(
            error=error,
            diverging_epoch=diverging,
            fetch_offset=fetch_offset,
            high_watermark=self._high_watermark if leader else -1,
            log_start_offset=log.log_start_offset,
            log_end_offset=self._log_end_offset if leader else log.log_end_offset,
            effects=tuple(effects),
        )

    # --- leader: HW and ISR ------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[Effect]:
        """Leader timer (Kafka's isr-expiration task): shrink the ISR of lagging followers, and
        let the HW pass followers whose caught-up grace ran out."""
        if not self.is_leader:
            return []
        effects = self._maybe_increment_high_watermark(now_ms)
        effects += self._maybe_shrink_isr(now_ms)
        return effects

    def on_alter_partition_response(
        self,
        proposal: ProposeIsr,
        *,
        error_code: int,
        leader_id: int = NO_LEADER,
        leader_epoch: int = -1,
        isr: Sequence[int] = (),
        partition_epoch: int = -1,
        now_ms: int,
    ) -> list[Effect]:
        """The controller's answer to ``proposal`` (or a transport failure as its error code:
        REQUEST_TIMED_OUT, NETWORK_EXCEPTION, NOT_CONTROLLER... which re-send it)."""
        if not self.is_leader or proposal != self._pending:
            return []  # an answer to something we no longer wait for
        if error_code == ErrorCode.NONE:
            return self._on_isr_committed(leader_id, leader_epoch, isr, partition_epoch, now_ms)
        if error_code in _ALTER_PARTITION_REJECTED:
            self._pending = None
            return [*self._maybe_increment_high_watermark(now_ms), CheckProduceWaiters()]
        if error_code in _ALTER_PARTITION_AWAIT_METADATA:
            return []
        return [proposal]

    def _on_isr_committed(
        self,
        leader_id: int,
        leader_epoch: int,
        isr: Sequence[int],
        partition_epoch: int,
        now_ms: int,
    ) -> list[Effect]:
        if (leader_id != self.broker_id or leader_epoch != self._leader_epoch
                or partition_epoch < self._partition_epoch):
            return []  # Kafka ignores it too; the metadata log will tell
        _check_assignment(self._replicas, isr, self.broker_id)
        self._isr = _in_replica_order(isr, self._replicas)
        self._partition_epoch = partition_epoch
        self._pending = None
        return [*self._maybe_increment_high_watermark(now_ms), CheckProduceWaiters()]

    def _high_watermark_voters(self, now_ms: int) -> list[int]:
        """Followers whose LEO bounds the HW: the maximal ISR, plus caught-up eligible replicas
        about to join it (Kafka's shouldWaitForReplicaToJoinIsr: the HW waits for them so that
        a follower can join the ISR of a busy partition). Unlike Kafka, one that has not
        fetched in this leader epoch is not about to join (its grace period as a former ISR
        member would otherwise hold the HW at its unknown LEO)."""
        maximal = self.maximal_isr
        voters = []
        for r, state in self._followers.items():
            if r in maximal or (
                    r not in self._ineligible and state.log_end_offset != UNKNOWN_OFFSET
                    and state.is_caught_up(leader_log_end_offset=self._log_end_offset,
                                           now_ms=now_ms,
                                           replica_lag_time_max_ms=self.replica_lag_time_max_ms)):
                voters.append(r)
        return voters

    def _maybe_increment_high_watermark(self, now_ms: int) -> list[Effect]:
        new_hw = self._log_end_offset
        for r in self._high_watermark_voters(now_ms):
            new_hw = min(new_hw, self._followers[r].log_end_offset)
        if new_hw <= self._high_watermark:
            return []
        self._high_watermark = new_hw
        return [UpdateHighWatermark(new_hw)]

    def _maybe_expand_isr(self, replica_id: int) -> list[Effect]:
        """Kafka's maybeExpandIsr: propose adding a follower that holds every offset below the
        HW and everything the previous leaders wrote (LEO ≥ this epoch's start offset)."""
        state = self._followers[replica_id]
        if (self._pending is not None or replica_id in self._isr
                or replica_id in self._ineligible
                or state.log_end_offset < self._high_watermark
                or state.log_end_offset < self.leader_epoch_start_offset):
            return []
        return self._propose((*self._isr, replica_id))

    def _maybe_shrink_isr(self, now_ms: int) -> list[Effect]:
        if self._pending is not None:
            return []
        out = {
            r for r in self._isr if r != self.broker_id and not self._followers[r].is_caught_up(
                leader_log_end_offset=self._log_end_offset, now_ms=now_ms,
                replica_lag_time_max_ms=self.replica_lag_time_max_ms)
        }
        if not out:
            return []
        return self._propose(tuple(r for r in self._isr if r not in out))

    def _propose(self, new_isr: Sequence[int]) -> list[Effect]:
        if self._pending is not None:
            raise InvariantViolation(f"an ISR change is already pending: {self._pending}")
        if self.broker_id not in new_isr:
            raise InvariantViolation(
                f"proposed ISR {list(new_isr)} lacks the leader {self.broker_id}")
        ordered = _in_replica_order(new_isr, self._replicas)
        epochs = tuple(state.broker_epoch if (state := self._followers.get(b)) is not None else -1
                       for b in ordered)
        proposal = ProposeIsr(self._leader_epoch, self._partition_epoch, ordered, epochs)
        self._pending = proposal
        return [proposal]

    # --- follower ----------------------------------------------------------------------------

    def fetch_request(self, log: LogView) -> FollowerFetch | None:
        """The next fetch to send to the leader, or None: not a follower, no leader, or waiting
        for metadata after FENCED_LEADER_EPOCH."""
        if (self._role is not Role.FOLLOWER or self._leader_id == NO_LEADER
                or self._awaiting_metadata):
            return None
        return FollowerFetch(self._leader_id, self._leader_epoch, log.log_end_offset,
                             log.latest_epoch(), log.log_start_offset)

    def on_fetch_response(
        self, request: FollowerFetch, response: LeaderFetchResponse, log: LogView
    ) -> list[Effect]:
        """Kafka's AbstractFetcherThread.processFetchRequest for one partition."""
        if not self._is_current(request, log):
            return []  # the state moved on since the request: drop the answer
        code = response.error_code
        if code == ErrorCode.NONE:
            if response.diverging_epoch is not None:
                return follower.on_diverging_epoch(response.diverging_epoch, log)
            return follower.on_records(request, response, log)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            return follower.on_offset_out_of_range(response, log)
        if code == ErrorCode.FENCED_LEADER_EPOCH:
            # The leader is in a newer epoch than ours: only new metadata helps.
            self._awaiting_metadata = True
            return []
        return [BackoffFetch(code)]

    def _is_current(self, request: FollowerFetch, log: LogView) -> bool:
        return (self._role is Role.FOLLOWER and not self._awaiting_metadata
                and request.leader_id == self._leader_id
                and request.leader_epoch == self._leader_epoch
                and request.fetch_offset == log.log_end_offset)

    def __repr__(self) -> str:
        return (f"PartitionState(broker={self.broker_id}, {self._role.value}, "
                f"leader={self._leader_id}, leader_epoch={self._leader_epoch}, "
                f"partition_epoch={self._partition_epoch}, isr={list(self._isr)}, "
                f"pending={self._pending}, hw={self._high_watermark}, "
                f"leo={self._log_end_offset})")


def _check_assignment(replicas: Sequence[int], isr: Sequence[int], leader_id: int) -> None:
    """The controller guarantees these (ISR ⊆ replicas, no duplicates, leader in the ISR)."""
    if not 0 < len(replicas) <= limits.REPLICATION_FACTOR_MAX:
        raise InvariantViolation(
            f"replicas {list(replicas)}: not 1..{limits.REPLICATION_FACTOR_MAX} of them")
    if len(set(replicas)) != len(replicas):
        raise InvariantViolation(f"duplicate replicas {list(replicas)}")
    if not (len(set(isr)) == len(isr) and set(isr) <= set(replicas)):
        raise InvariantViolation(
            f"ISR {list(isr)} has duplicates or is not within the replicas {list(replicas)}")
    if not (leader_id == NO_LEADER or leader_id in isr):
        raise InvariantViolation(f"leader {leader_id} is not in the ISR {list(isr)}")


def _in_replica_order(isr: Sequence[int], replicas: Sequence[int]) -> tuple[int, ...]:
    members = set(isr)
    return tuple(r for r in replicas if r in members)

