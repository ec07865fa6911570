"""A seeded simulation of one partition's replicas, driving the real replication core.

What it checks: the replication core (broker/replication) keeps Kafka's safety properties under
leader changes, crashes, isolation, lost and reordered messages, merged metadata deltas,
retention and follower truncation. After every step:

* a leader's HW never goes back within its leader epoch (and its log has that HW);
* every offset below the current leader's HW is on every member of its maximal ISR, in
  identical batches;
* every record acknowledged to an acks=all producer is on whichever broker the controller makes
  leader (elections are clean: from the ISR only);
* (every 50 steps) each replica's producer state agrees with a rebuild from its log.

At the end the cluster is healed and run until every replica is back in the ISR, then all logs
must be identical, every acknowledged record present, and the idempotent producer's records
never duplicated although it retried across failovers.

How: everything but the core is modelled here, small:

* ``ModelLog`` -- an in-memory partition log with broker/storage's semantics (whole-batch
  truncation, the storage's own LeaderEpochCache, HW clamping, a HW persisted lazily that a crash
  rolls back, log start moves, follower appends that must start at the LEO). It is the core's
  ``LogView``.
* ``Controller`` -- the partition's registration as the controller commits it: elections from
  the ISR (no unclean election), fencing removes a broker from the ISR (the last member stays,
  leader -1), AlterPartition as a compare-and-set on the partition epoch (INELIGIBLE_REPLICA for
  fenced members), leader moves. Every commit is a metadata version.
* ``Broker`` -- a shell: a PartitionState, a ProducerStateTable, a ModelLog, waiting acks=all
  produces; it carries out effects in order (asserting "persist, then send"), and applies
  metadata versions in order -- one at a time or several merged into one.
* A network of messages delivered in random order, lost at random (the sender then sees a
  timeout), never delivered across an isolation or to/from a restarted incarnation.
* Clients: an idempotent acks=all producer that retries its batch until acknowledged, and an
  acks=1 producer without retries (its records may be lost, and make divergence).

``World.step`` picks one enabled action with ``random.Random(seed)``; a failure names its seed
and prints the last events (re-run one with ``-k "test_seed[17]"``;
``TIDELOG_SIM_SEEDS=2000`` runs more). ``Broken`` switches on deliberately wrong rules -- a
follower truncating to its own HW (pre-KIP-101), a HW over the proposed rather than the maximal
ISR -- and tests show the invariants catch them.
"""


from __future__ import annotations

import bisect
import dataclasses
import os
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tidelog.broker.replication import (
    AcksDone,
    AppendFetchedBatches,
    BackoffFetch,
    BatchHeader,
    CheckProduceWaiters,
    Duplicate,
    Effect,
    FollowerFetch,
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
from tidelog.broker.storage.epoch_cache import LeaderEpochCache
from tidelog.invariants import InvariantViolation
from tidelog.v1.common_pb2 import ErrorCode

LAG_MS = 300
PRODUCE_TIMEOUT_MS = 1_500
CONTROLLER = -10
CLIENT = -20
NOISE = -21
PRODUCER_ID = 1000
#: Brokers down or isolated at once, at most.
FAULTS_MAX = 2
TRACE_LINES = 60
FINAL_STEPS_MAX = 6_000

_PRODUCER_ERRORS = (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.INVALID_PRODUCER_EPOCH,
                    ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
_LOG_EFFECTS = (UpdateHighWatermark, TruncateTo, TruncateFullyAndStartAt,
                AppendFetchedBatches, MaybeIncrementLogStartOffset)


@dataclass(frozen=True)
class Broken:
    """Deliberately wrong rules, each of which the invariants must catch."""

    #: Pre-KIP-101 Kafka: a replica that becomes follower truncates its log to its own HW.
    follower_truncates_to_hw: bool = False
    #: HW over the proposed ISR while a change is pending (not the maximal ISR).
    hw_over_proposed_isr: bool = False


# --- the log -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    base_offset: int
    count: int
    epoch: int
    record_ids: tuple[int, ...]
    producer_id: int
    producer_epoch: int
    base_sequence: int
    append_time_ms: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.count

    def header(self) -> BatchHeader:
        return BatchHeader(self.producer_id, self.producer_epoch, self.base_sequence, self.count,
                           self.base_offset, self.append_time_ms)


class ModelLog:
    """broker/storage's PartitionLog semantics, in memory (a LogView for the core)."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self._bases: list[int] = []
        self._start = 0
        self._leo = 0
        self._hw = 0
        self.persisted_hw = 0
        self.epochs = LeaderEpochCache()

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    def latest_epoch(self) -> int:
        return self.epochs.latest_epoch()

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for_epoch(leader_epoch, self._leo)

    def append(self, batch: Batch) -> None:
        if batch.base_offset != self._leo:
            # Storage's one exception: an empty log whose start falls inside the batch.
            assert self._start == self._leo and batch.base_offset < self._leo < batch.next_offset, (
                batch, self)
            self.truncate_fully_and_start_at(batch.base_offset)
        if batch.epoch != self.epochs.latest_epoch():
            assert self.epochs.can_assign(batch.epoch, batch.base_offset), (batch, self.epochs)
            self.epochs.assign(batch.epoch, batch.base_offset)
        self.batches.append(batch)
        self._bases.append(batch.base_offset)
        self._leo = batch.next_offset
        self.persisted_hw = self._hw  # the HW rides in the append's write batch

    def read(self, fetch_offset: int, max_batches: int) -> list[Batch]:
        assert self._start <= fetch_offset <= self._leo, (fetch_offset, self)
        if fetch_offset == self._leo:
            return []
        i = max(bisect.bisect_right(self._bases, fetch_offset) - 1, 0)
        return self.batches[i:i + max_batches]

    def batch_at(self, offset: int) -> Batch | None:
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0 or offset >= self.batches[i].next_offset or offset < self._start:
            return None
        return self.batches[i]

    def truncate_to(self, offset: int) -> int:
        """Storage's truncate_to: to the boundary of the batch holding ``offset``."""
        if offset >= self._leo:
            return self._leo
        if offset <= self._start:
            self.truncate_fully_and_start_at(offset)
            return offset
        i = bisect.bisect_right(self._bases, offset) - 1
        assert i >= 0, (offset, self)
        cut = self.batches[i].base_offset
        if cut < self._start:
            self.truncate_fully_and_start_at(self._start)
            return self._start
        del self.batches[i:], self._bases[i:]
        self.epochs.truncate_from_end(cut)
        self._leo = cut
        self._hw = self.persisted_hw = min(self._hw, cut)
        return cut

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.batches, self._bases = [], []
        self.epochs.clear()
        self._start = self._leo = self._hw = self.persisted_hw = offset

    def update_high_watermark(self, hw: int) -> None:
        self._hw = min(max(hw, self._start), self._leo)

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        if offset <= self._start:
            return False
        assert offset <= self._hw, (offset, self)
        keep = bisect.bisect_right(self._bases, offset) - 1
        if keep > 0:
            del self.batches[:keep], self._bases[:keep]
        if self.batches and self.batches[0].next_offset <= offset:
            self.batches, self._bases = [], []
        self._start = offset
        self.epochs.truncate_from_start(offset)
        self.persisted_hw = self._hw
        return True

    def crash(self) -> None:
        self._hw = min(max(self.persisted_hw, self._start), self._leo)

    def range(self, lower: int, upper: int) -> list[Batch]:
        """Batches wholly inside [lower, upper)."""
        i = bisect.bisect_left(self._bases, lower)
        j = bisect.bisect_left(self._bases, upper)
        out = self.batches[i:j]
        if out and out[-1].next_offset > upper:
            out = out[:-1]
        return out

    def __repr__(self) -> str:
        return (f"ModelLog(start={self._start}, hw={self._hw}, leo={self._leo}, "
                f"epochs={self.epochs.entries})")


# --- the controller ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Registration:
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    fenced: frozenset[int]


class Controller:
    def __init__(self, replicas: tuple[int, ...]) -> None:
        self.replicas = replicas
        self.reg = Registration(0, 0, 0, replicas, frozenset())
        self.history = [self.reg]
        self.elections = 0

    def _commit(self, **changes: Any) -> None:
        self.reg = dataclasses.replace(self.reg, partition_epoch=self.reg.partition_epoch + 1,
                                       **changes)
        self.history.append(self.reg)

    def fence(self, broker: int) -> None:
        reg = self.reg
        isr = reg.isr
        if broker in isr and len(isr) > 1:
            isr = tuple(r for r in isr if r != broker)
        leader, epoch = reg.leader, reg.leader_epoch
        if leader == broker:
            candidates = [r for r in isr if r != broker]
            leader = candidates[0] if candidates else -1
            epoch += 1
            self.elections += 1
        self._commit(leader=leader, leader_epoch=epoch, isr=isr, fenced=reg.fenced | {broker})

    def unfence(self, broker: int) -> None:
        reg = self.reg
        if reg.leader == -1 and broker in reg.isr:
            self.elections += 1
            self._commit(leader=broker, leader_epoch=reg.leader_epoch + 1,
                         fenced=reg.fenced - {broker})
        else:
            self._commit(fenced=reg.fenced - {broker})

    def move_leader(self, rng: random.Random) -> bool:
        reg = self.reg
        candidates = [r for r in reg.isr if r != reg.leader and r not in reg.fenced]
        if reg.leader == -1 or not candidates:
            return False
        self.elections += 1
        self._commit(leader=rng.choice(candidates), leader_epoch=reg.leader_epoch + 1)
        return True

    def alter_partition(self, broker: int, proposal: ProposeIsr) -> int:
        reg = self.reg
        if broker != reg.leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if proposal.leader_epoch != reg.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if proposal.partition_epoch != reg.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        assert broker in proposal.new_isr and set(proposal.new_isr) <= set(self.replicas)
        if any(r in reg.fenced for r in proposal.new_isr):
            return ErrorCode.INELIGIBLE_REPLICA
        if proposal.new_isr != reg.isr:
            self._commit(isr=proposal.new_isr)
        return ErrorCode.NONE


# --- brokers, clients, messages ----------------------------------------------------------------


@dataclass
class Produce:
    client: int
    acks: int
    record_ids: tuple[int, ...]
    attempt: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1


@dataclass
class Waiter:
    request: Produce
    base_offset: int
    required_offset: int
    leader_epoch: int
    deadline_ms: int


@dataclass
class Message:
    kind: str
    src: int
    dst: int
    payload: Any
    src_incarnation: int = -1
    dst_incarnation: int = -1

    @property
    def is_local(self) -> bool:
        """A timeout: an event inside one process, never lost on the network."""
        return self.kind.endswith("_timeout")


class BrokenPartitionState(PartitionState):
    """The core with a rule switched off or changed, for the "does it bite" tests."""

    broken = Broken()

    @property
    def maximal_isr(self) -> frozenset[int]:
        pending = self.pending_isr_change
        if self.broken.hw_over_proposed_isr and pending is not None:
            return frozenset(pending.new_isr)
        return super().maximal_isr


@dataclass
class Broker:
    id: int
    log: ModelLog = field(default_factory=ModelLog)
    state: PartitionState | None = None
    producers: ProducerStateTable = field(default_factory=ProducerStateTable)
    alive: bool = True
    isolated: bool = False
    incarnation: int = 0
    applied: int = -1
    fetching: bool = False
    waiters: list[Waiter] = field(default_factory=list)


@dataclass
class IdempotentClient:
    producer_epoch: int = 0
    next_sequence: int = 0
    pending: tuple[int, ...] | None = None
    in_flight: bool = False
    attempt: int = 0


class World:
    def __init__(self, seed: int, *, steps: int, replication_factor: int = 3,
                 min_insync_replicas: int = 2, broken: Broken = Broken()) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.steps = steps
        self.broken = broken
        self.now_ms = 1_000
        self.replicas = tuple(range(replication_factor))
        self.min_insync_replicas = min_insync_replicas
        self.controller = Controller(self.replicas)
        self.brokers = [Broker(i) for i in self.replicas]
        self.network: list[Message] = []
        self.client = IdempotentClient()
        self.next_record_id = 0
        self.drop_probability = 0.05
        self.faults_allowed = True
        self.acked: dict[int, int] = {}  # offset -> record id, acks=all successes
        self.trace: deque[str] = deque(maxlen=TRACE_LINES)
        self.stats: dict[str, int] = {}
        self.leader_hw: dict[tuple[int, int, int], int] = {}
        for b in self.brokers:
            self._start_state(b)

    # --- driver ------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            for i in range(self.steps):
                self.step()
                self.check()
                if i % 50 == 49:
                    self.check_producer_state()
            self.converge()
        except (AssertionError, InvariantViolation) as e:  # the model's checks, or the code's
            raise AssertionError(self.failure_report(e)) from e

    def failure_report(self, error: Exception) -> str:
        lines = "\n  ".join(self.trace)
        return (f"seed {self.seed} failed ({self.broken}): {error}\n  last events:\n  {lines}\n"
                f"  controller: {self.controller.reg}\n  "
                + "\n  ".join(f"broker {b.id}: alive={b.alive} isolated={b.isolated} "
                              f"{b.log} {b.state}" for b in self.brokers))

    def step(self) -> None:
        actions = self._enabled_actions()
        weights = [w for w, _ in actions]
        _, action = self.rng.choices(actions, weights=weights)[0]
        action()

    def _enabled_actions(self) -> list[tuple[float, Callable[[], None]]]:
        actions: list[tuple[float, Callable[[], None]]] = [
            (10, self.advance_time), (6, self.tick), (20, self.start_fetch),
            (10, self.deliver_metadata), (12, self.client_send),
        ]
        if self.network:
            actions.append((35, self.deliver))
        if self.faults_allowed:
            faulty = sum(1 for b in self.brokers if not b.alive or b.isolated)
            if faulty < FAULTS_MAX:
                actions += [(0.4, self.crash), (0.4, self.isolate)]
            if faulty:
                actions += [(3, self.restart), (3, self.heal)]
            actions += [(1, self.move_leader), (0.5, self.retain), (1, self.checkpoint),
                        (4, self.noise_send)]
        return actions

    def note(self, text: str) -> None:
        self.trace.append(f"t={self.now_ms} {text}")

    def count(self, name: str) -> None:
        self.stats[name] = self.stats.get(name, 0) + 1

    # --- actions -----------------------------------------------------------------------------

    def advance_time(self) -> None:
        self.now_ms += self.rng.randint(1, 60)

    def tick(self) -> None:
        b = self.rng.choice(self.brokers)
        if not b.alive or b.state is None:
            return
        self.run_effects(b, b.state.tick(self.now_ms))
        for w in [w for w in b.waiters if w.deadline_ms <= self.now_ms]:
            b.waiters.remove(w)
            self.respond_produce(b, w.request, ErrorCode.REQUEST_TIMED_OUT)

    def start_fetch(self) -> None:
        b = self.rng.choice(self.brokers)
        if not b.alive or b.fetching or b.state is None:
            return
        request = b.state.fetch_request(b.log)
        if request is None:
            return
        b.fetching = True
        self.send(b.id, request.leader_id, "fetch", (request, self.rng.randint(1, 4)))

    def deliver_metadata(self) -> None:
        b = self.rng.choice(self.brokers)
        latest = len(self.controller.history) - 1
        if not b.alive or b.isolated or b.applied >= latest:
            return
        # A broker that fell behind may apply several versions as one merged delta.
        index = latest if self.rng.random() < 0.3 else b.applied + 1
        if index > b.applied + 1:
            self.count("merged_metadata")
        self.apply_metadata(b, index)

    def client_send(self) -> None:
        c = self.client
        if c.in_flight or (c.pending is None and not self.faults_allowed):
            return  # while converging, only the batch in progress is retried
        if c.pending is None:
            count = self.rng.randint(1, 3)
            c.pending = tuple(range(self.next_record_id, self.next_record_id + count))
            self.next_record_id += count
        c.attempt += 1
        request = Produce(CLIENT, -1, c.pending, c.attempt, PRODUCER_ID, c.producer_epoch,
                          c.next_sequence)
        c.in_flight = True
        self.send(CLIENT, self._produce_target(), "produce", request)

    def noise_send(self) -> None:
        count = self.rng.randint(1, 2)
        ids = tuple(range(self.next_record_id, self.next_record_id + count))
        self.next_record_id += count
        self.send(NOISE, self._produce_target(), "produce", Produce(NOISE, 1, ids))

    def _produce_target(self) -> int:
        leader = self.controller.reg.leader
        if leader >= 0 and self.rng.random() < 0.75:
            return leader
        return self.rng.choice(self.replicas)

    def crash(self) -> None:
        b = self.rng.choice([b for b in self.brokers if b.alive and not b.isolated])
        self.note(f"crash {b.id}")
        self.count("crashes")
        b.alive, b.state, b.fetching, b.applied = False, None, False, -1
        b.incarnation += 1
        for w in b.waiters:
            self._client_attempt_over(w.request)
        b.waiters.clear()
        b.log.crash()
        self.controller.fence(b.id)

    def restart(self) -> None:
        down = [b for b in self.brokers if not b.alive]
        if not down:
            return
        b = self.rng.choice(down)
        self.note(f"restart {b.id}")
        b.alive = True
        self._start_state(b)
        self.controller.unfence(b.id)

    def _start_state(self, b: Broker) -> None:
        state = BrokenPartitionState(b.id, replica_lag_time_max_ms=LAG_MS)
        state.broken = self.broken
        b.state = state
        b.producers = ProducerStateTable.rebuild((x.header() for x in b.log.batches),
                                                 start_offset=b.log.log_start_offset)
        if self.broken.follower_truncates_to_hw:
            self._truncate(b, b.log.high_watermark)  # pre-KIP-101 recovery
        self.apply_metadata(b, len(self.controller.history) - 1)

    def isolate(self) -> None:
        b = self.rng.choice([b for b in self.brokers if b.alive and not b.isolated])
        self.note(f"isolate {b.id}")
        self.count("isolations")
        b.isolated = True
        self.controller.fence(b.id)

    def heal(self) -> None:
        cut = [b for b in self.brokers if b.isolated]
        if not cut:
            return
        b = self.rng.choice(cut)
        self.note(f"heal {b.id}")
        b.isolated = False
        self.controller.unfence(b.id)

    def move_leader(self) -> None:
        if self.controller.move_leader(self.rng):
            self.note(f"move leader to {self.controller.reg.leader}")

    def retain(self) -> None:
        b = self.brokers[max(self.controller.reg.leader, 0)]
        if not b.alive or b.state is None or not b.state.is_leader:
            return
        candidates = [x.base_offset for x in b.log.batches
                      if b.log.log_start_offset < x.base_offset <= b.log.high_watermark]
        if candidates:
            offset = self.rng.choice(candidates)
            self.note(f"retention on {b.id} to {offset}")
            self.count("retention")
            b.log.maybe_increment_log_start_offset(offset)

    def checkpoint(self) -> None:
        b = self.rng.choice(self.brokers)
        b.log.persisted_hw = b.log.high_watermark

    # --- metadata ----------------------------------------------------------------------------

    def apply_metadata(self, b: Broker, index: int) -> None:
        assert b.state is not None
        reg = self.controller.history[index]
        b.applied = index
        state = b.state
        old_epoch, was_follower = state.leader_epoch, state.role.value == "follower"
        self.run_effects(b, state.set_ineligible_replicas(reg.fenced, now_ms=self.now_ms))
        if reg.leader == b.id:
            effects = state.become_leader(
                leader_epoch=reg.leader_epoch, partition_epoch=reg.partition_epoch,
                replicas=self.replicas, isr=reg.isr, log_end_offset=b.log.log_end_offset,
                high_watermark=b.log.high_watermark, now_ms=self.now_ms)
        else:
            effects = state.become_follower(
                leader_id=reg.leader, leader_epoch=reg.leader_epoch,
                partition_epoch=reg.partition_epoch, replicas=self.replicas, isr=reg.isr)
            new_follower = not was_follower or state.leader_epoch != old_epoch
            if self.broken.follower_truncates_to_hw and new_follower:
                self._truncate(b, b.log.high_watermark)
        if effects:
            self.note(f"broker {b.id} applies v{index}: {reg} -> {effects}")
        self.run_effects(b, effects)

    # --- network -----------------------------------------------------------------------------

    def send(self, src: int, dst: int, kind: str, payload: Any) -> None:
        self.network.append(
            Message(kind, src, dst, payload, self._incarnation(src), self._incarnation(dst)))

    def _incarnation(self, end: int) -> int:
        return self.brokers[end].incarnation if end >= 0 else -1

    def _local(self, kind: str, dst: int, payload: Any) -> None:
        self.network.append(Message(kind, -1, dst, payload, -1, self._incarnation(dst)))

    def deliver(self) -> None:
        message = self.network.pop(self.rng.randrange(len(self.network)))
        if self._lost(message):
            self._on_lost(message)
            return
        handler = getattr(self, f"on_{message.kind}")
        handler(message)

    def _lost(self, m: Message) -> bool:
        # A process that restarted has new connections: nothing of the old one arrives
        # (Kafka also fences a stale incarnation's fetches with the broker epoch, KIP-903).
        for end, incarnation in ((m.src, m.src_incarnation), (m.dst, m.dst_incarnation)):
            if end >= 0:
                b = self.brokers[end]
                if not b.alive or b.incarnation != incarnation:
                    return True
                if b.isolated and not m.is_local:
                    return True
        return not m.is_local and self.rng.random() < self.drop_probability

    def _on_lost(self, m: Message) -> None:
        """The sender's RPC times out (if the sender is still that incarnation)."""
        if m.kind == "fetch":
            self._local("fetch_timeout", m.src, None)
        elif m.kind == "fetch_response":
            self._local("fetch_timeout", m.dst, None)
        elif m.kind == "alter":
            self._local("alter_timeout", m.src, m.payload)
        elif m.kind == "alter_response":
            self._local("alter_timeout", m.dst, m.payload[0])
        elif m.kind in ("produce", "produce_response", "produce_timeout"):
            request = m.payload if m.kind != "produce_response" else m.payload[0]
            self._client_attempt_over(request)

    def on_fetch_timeout(self, m: Message) -> None:
        self.brokers[m.dst].fetching = False

    def on_fetch(self, m: Message) -> None:
        leader = self.brokers[m.dst]
        request, max_batches = m.payload
        assert isinstance(request, FollowerFetch) and leader.state is not None
        decision = leader.state.on_follower_fetch(
            m.src, fetch_offset=request.fetch_offset,
            last_fetched_epoch=request.last_fetched_epoch,
            current_leader_epoch=request.leader_epoch, log=leader.log, now_ms=self.now_ms)
        self.run_effects(leader, list(decision.effects))
        batches = []
        if decision.should_read:
            batches = leader.log.read(decision.fetch_offset, max_batches)
        response = LeaderFetchResponse(
            error_code=decision.error.code if decision.error else ErrorCode.NONE,
            high_watermark=decision.high_watermark,
            log_start_offset=decision.log_start_offset,
            log_end_offset=decision.log_end_offset,
            diverging_epoch=decision.diverging_epoch,
            batches_next_offset=batches[-1].next_offset if batches else None)
        if decision.diverging_epoch is not None:
            self.count("diverging_answers")
        self.send(leader.id, m.src, "fetch_response", (request, response, batches))

    def on_fetch_response(self, m: Message) -> None:
        b = self.brokers[m.dst]
        request, response, batches = m.payload
        b.fetching = False
        assert b.state is not None
        effects = b.state.on_fetch_response(request, response, b.log)
        self.run_effects(b, effects, fetched=batches)

    def on_alter(self, m: Message) -> None:
        proposal = m.payload
        error = self.controller.alter_partition(m.src, proposal)
        self.note(f"alter from {m.src} {proposal} -> {ErrorCode.Name(error)}")
        if error == ErrorCode.NONE and proposal.new_isr != self.brokers[m.src].state.isr:
            self.count("isr_changes")
        self.send(CONTROLLER, m.src, "alter_response", (proposal, error, self.controller.reg))

    def on_alter_response(self, m: Message) -> None:
        b = self.brokers[m.dst]
        proposal, error, reg = m.payload
        assert b.state is not None
        self.run_effects(b, b.state.on_alter_partition_response(
            proposal, error_code=error, leader_id=reg.leader, leader_epoch=reg.leader_epoch,
            isr=reg.isr, partition_epoch=reg.partition_epoch, now_ms=self.now_ms))

    def on_alter_timeout(self, m: Message) -> None:
        b = self.brokers[m.dst]
        assert b.state is not None
        self.run_effects(b, b.state.on_alter_partition_response(
            m.payload, error_code=ErrorCode.REQUEST_TIMED_OUT, now_ms=self.now_ms))

    # --- produce -----------------------------------------------------------------------------

    def on_produce(self, m: Message) -> None:
        b = self.brokers[m.dst]
        request: Produce = m.payload
        assert b.state is not None
        error = b.state.check_produce(request.acks, self.min_insync_replicas)
        if error is not None:
            self.respond_produce(b, request, error.code)
            return
        check = b.producers.check(producer_id=request.producer_id,
                                  producer_epoch=request.producer_epoch,
                                  base_sequence=request.base_sequence,
                                  record_count=len(request.record_ids))
        if isinstance(check, Reject):
            # Only OUT_OF_ORDER_SEQUENCE_NUMBER may happen: a leader that does not know the
            # producer (retention removed its batches), or a stale leader whose state is behind
            # the batches a newer leader acknowledged. The client answers with an epoch bump, and
            # the final check shows that never duplicates a record. Anything else is a bug.
            assert check.error.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, (
                f"producer state rejected a retry: {check.error}")
            self.respond_produce(b, request, check.error.code)
            return
        if isinstance(check, Duplicate):
            self.count("duplicates")
            base, last = check.base_offset, check.last_offset
            found = [b.log.batch_at(o) for o in (base, last) if o >= b.log.log_start_offset]
            assert all(x is not None and x.record_ids == request.record_ids for x in found), (
                "a duplicate's offsets hold other records", found, request)
        else:
            batch = Batch(b.log.log_end_offset, len(request.record_ids), b.state.leader_epoch,
                          request.record_ids, request.producer_id, request.producer_epoch,
                          request.base_sequence, self.now_ms)
            b.log.append(batch)
            b.producers.on_append(batch.header())
            base, last = batch.base_offset, batch.next_offset - 1
            self.run_effects(b, b.state.on_local_append(b.log.log_end_offset,
                                                        now_ms=self.now_ms))
        if request.acks == 1:
            self.respond_produce(b, request, ErrorCode.NONE)
            return
        b.waiters.append(Waiter(request, base, last + 1, b.state.leader_epoch,
                                self.now_ms + PRODUCE_TIMEOUT_MS))
        self.check_waiters(b)

    def check_waiters(self, b: Broker) -> None:
        assert b.state is not None
        for w in list(b.waiters):
            done = b.state.acks_all_outcome(required_offset=w.required_offset,
                                            leader_epoch=w.leader_epoch,
                                            min_insync_replicas=self.min_insync_replicas)
            if done is None:
                continue
            b.waiters.remove(w)
            self.on_acks_done(b, w, done)

    def on_acks_done(self, b: Broker, w: Waiter, done: AcksDone) -> None:
        if done.error is not None:
            self.count(f"acks_{done.error.code_name}")
            self.respond_produce(b, w.request, done.error.code)
            return
        for i, record_id in enumerate(w.request.record_ids):
            offset = w.base_offset + i
            assert self.acked.get(offset, record_id) == record_id, (
                f"offset {offset} acknowledged twice with different records")
            self.acked[offset] = record_id
        self.count("acked")
        self.note(f"broker {b.id} acks {w.request.record_ids} at {w.base_offset}")
        self.respond_produce(b, w.request, ErrorCode.NONE)

    def respond_produce(self, b: Broker, request: Produce, error: int) -> None:
        self.send(b.id, request.client, "produce_response", (request, error))

    def on_produce_response(self, m: Message) -> None:
        request, error = m.payload
        if request.client != CLIENT:
            return
        c = self.client
        if (error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and request.attempt == c.attempt
                and request.producer_epoch == c.producer_epoch):
            # The leader does not know the producer (retention removed its batches) or is a
            # stale one: one batch in flight, so it is the first unacknowledged one, and the
            # client bumps its epoch and restarts at sequence 0 (KIP-360), as the real one does.
            self.count("epoch_bumps")
            self.note(f"client bumps its epoch to {c.producer_epoch + 1}")
            c.producer_epoch += 1
            c.next_sequence = 0
            self._client_attempt_over(request)
            return
        assert error not in _PRODUCER_ERRORS, ErrorCode.Name(error)
        if error == ErrorCode.NONE and c.pending == request.record_ids:
            c.pending = None
            c.next_sequence += len(request.record_ids)
        self._client_attempt_over(request)

    def on_produce_timeout(self, m: Message) -> None:
        self._client_attempt_over(m.payload)

    def _client_attempt_over(self, request: Produce) -> None:
        if request.client == CLIENT and request.attempt == self.client.attempt:
            self.client.in_flight = False

    # --- the shell: effects ------------------------------------------------------------------

    def run_effects(self, b: Broker, effects: list[Effect], *, fetched: list[Batch] | None = None
                    ) -> None:
        recheck = False
        sent = False
        for effect in effects:
            # Persist, then send, then acknowledge: no log change after a message.
            assert not (sent and isinstance(effect, _LOG_EFFECTS)), effects
            if isinstance(effect, ProposeIsr):
                sent = True
                self.send(b.id, CONTROLLER, "alter", effect)
            elif isinstance(effect, CheckProduceWaiters | UpdateHighWatermark):
                recheck = True
                if isinstance(effect, UpdateHighWatermark):
                    b.log.update_high_watermark(effect.high_watermark)
            elif isinstance(effect, BackoffFetch):
                self.count(f"backoff_{ErrorCode.Name(effect.error_code)}")
            else:
                self._run_log_effect(b, effect, fetched)
        if recheck:
            self.check_waiters(b)

    def _run_log_effect(self, b: Broker, effect: Effect, fetched: list[Batch] | None) -> None:
        if isinstance(effect, TruncateTo):
            self.count("truncations")
            self._truncate(b, effect.offset)
        elif isinstance(effect, TruncateFullyAndStartAt):
            self.count("truncate_fully")
            self.note(f"broker {b.id} truncates fully, starts at {effect.offset}")
            b.log.truncate_fully_and_start_at(effect.offset)
            b.producers.truncate_fully_and_start_at(effect.offset)
        elif isinstance(effect, AppendFetchedBatches):
            assert fetched, effect
            for batch in fetched:
                b.log.append(batch)
                b.producers.on_append(batch.header())
            assert b.log.log_end_offset == effect.next_offset, (effect, b.log)
        elif isinstance(effect, MaybeIncrementLogStartOffset):
            b.log.maybe_increment_log_start_offset(effect.offset)
        else:
            raise AssertionError(f"unknown effect {effect}")

    def _truncate(self, b: Broker, offset: int) -> None:
        before = b.log.log_end_offset
        b.log.truncate_to(offset)
        if b.log.log_end_offset < before:
            self.note(f"broker {b.id} truncates {before} -> {b.log.log_end_offset}")
            self.count("truncated_data")
        b.producers.truncate_to(b.log.log_end_offset)

    # --- invariants --------------------------------------------------------------------------

    def check(self) -> None:
        reg = self.controller.reg
        for b in self.brokers:
            if b.alive and b.state is not None and b.state.is_leader:
                self._check_leader(b)
        leader = self.brokers[reg.leader] if reg.leader >= 0 else None
        if leader is not None:
            self._check_acked_on(leader)
            state = leader.state
            if leader.alive and state is not None and state.is_leader \
                    and state.leader_epoch == reg.leader_epoch:
                self._check_isr_members(leader)

    def _check_leader(self, b: Broker) -> None:
        state = b.state
        assert state is not None
        key = (b.id, b.incarnation, state.leader_epoch)
        hw = state.high_watermark
        assert hw >= self.leader_hw.get(key, 0), f"HW of {key} went back to {hw}"
        self.leader_hw[key] = hw
        assert b.log.high_watermark == max(hw, b.log.log_start_offset), (hw, b.log)
        assert state.log_end_offset == b.log.log_end_offset, (state, b.log)

    def _check_isr_members(self, leader: Broker) -> None:
        """Every offset below the leader's HW is on every (maximal) ISR member, identically."""
        assert leader.state is not None
        hw = leader.state.high_watermark
        pending = leader.state.pending_isr_change
        maximal = set(leader.state.isr) | set(pending.new_isr if pending else ())
        for r in sorted(maximal):
            if r == leader.id:
                continue
            log = self.brokers[r].log
            assert log.log_end_offset >= hw, (
                f"ISR member {r} ends at {log.log_end_offset} below leader {leader.id}'s HW {hw}")
            lower = max(log.log_start_offset, leader.log.log_start_offset)
            assert log.range(lower, hw) == leader.log.range(lower, hw), (
                f"ISR member {r} differs from leader {leader.id} below the HW {hw}")

    def _check_acked_on(self, leader: Broker) -> None:
        """Acknowledged acks=all records are on whoever the controller makes leader."""
        log = leader.log
        for offset, record_id in self.acked.items():
            if offset < log.log_start_offset:
                continue
            batch = log.batch_at(offset)
            found = None if batch is None else batch.record_ids[offset - batch.base_offset]
            assert found == record_id, (
                f"acknowledged record {record_id} at offset {offset} is not on leader "
                f"{leader.id} (found {batch})")

    def check_producer_state(self) -> None:
        """Each replica's producer table agrees with a rebuild from its log (entries it keeps)."""
        for b in self.brokers:
            rebuilt = ProducerStateTable.rebuild((x.header() for x in b.log.batches),
                                                 start_offset=b.log.log_start_offset)
            entry = b.producers.entry(PRODUCER_ID)
            if entry is None:
                continue
            # Batches removed by retention stay in the table (as in Kafka), so compare the rest.
            kept = [x for x in entry.batches if x.base_offset >= b.log.log_start_offset]
            expected = rebuilt.entry(PRODUCER_ID)
            if expected is None:
                assert not kept, (b.id, entry)
            else:
                assert (entry.producer_epoch, kept) == (
                    expected.producer_epoch, list(expected.batches)[-len(kept):] if kept else []
                ), (b.id, entry, expected)

    # --- the end: heal, converge, compare ----------------------------------------------------

    def converge(self) -> None:
        self.faults_allowed = False
        self.drop_probability = 0.0
        self.note("healing")
        for b in self.brokers:
            if b.isolated:
                b.isolated = False
                self.controller.unfence(b.id)
            if not b.alive:
                b.alive = True
                self._start_state(b)
                self.controller.unfence(b.id)
        for _ in range(FINAL_STEPS_MAX):
            if self.converged():
                break
            self.step()
            self.check()
        else:
            raise AssertionError("the healed cluster did not converge")
        self.check_final()

    def converged(self) -> bool:
        reg = self.controller.reg
        latest = len(self.controller.history) - 1
        if reg.leader < 0 or reg.isr != self.replicas or self.client.pending is not None:
            return False
        if any(b.applied != latest or b.waiters for b in self.brokers):
            return False
        leader = self.brokers[reg.leader]
        state = leader.state
        assert state is not None
        leo = leader.log.log_end_offset
        return (state.is_leader and state.pending_isr_change is None
                and state.high_watermark == leo
                and all(b.log.log_end_offset == leo for b in self.brokers))

    def check_final(self) -> None:
        leader = self.brokers[self.controller.reg.leader]
        start = max(b.log.log_start_offset for b in self.brokers)
        leo = leader.log.log_end_offset
        expected = leader.log.range(start, leo)
        for b in self.brokers:
            assert b.log.range(start, leo) == expected, f"broker {b.id} did not converge"
        self._check_acked_on(leader)
        seen: set[int] = set()
        for batch in leader.log.batches:
            if batch.producer_id == PRODUCER_ID:
                duplicated = seen.intersection(batch.record_ids)
                assert not duplicated, f"idempotent records {duplicated} appear twice"
                seen.update(batch.record_ids)
        self.check_producer_state()


# --- the tests ---------------------------------------------------------------------------------

SEED_COUNT = int(os.environ.get("TIDELOG_SIM_SEEDS", "120"))
STEPS = 500


@pytest.mark.parametrize("seed", range(SEED_COUNT))
def test_seed(seed: int) -> None:
    World(seed, steps=STEPS).run()


@pytest.mark.parametrize("seed", range(SEED_COUNT // 4))
def test_seed_four_replicas_min_isr_one(seed: int) -> None:
    """A replica outside the ISR more often, and acks=all with an ISR of the leader alone."""
    World(seed, steps=STEPS, replication_factor=4, min_insync_replicas=1).run()


def test_same_seed_same_run() -> None:
    first, second = World(7, steps=STEPS), World(7, steps=STEPS)
    first.run()
    second.run()
    assert (first.stats, list(first.trace)) == (second.stats, list(second.trace))


def test_scheduler_reaches_the_interesting_cases() -> None:
    """The invariants are only as good as the situations the scheduler creates."""
    totals: dict[str, int] = {}
    for seed in range(40):
        world = World(seed, steps=STEPS)
        world.run()
        for name, count in world.stats.items():
            totals[name] = totals.get(name, 0) + count
    wanted = ["acked", "duplicates", "crashes", "isolations", "merged_metadata", "isr_changes",
              "diverging_answers", "truncated_data", "truncate_fully", "retention",
              "acks_NOT_ENOUGH_REPLICAS_AFTER_APPEND", "acks_NOT_LEADER_OR_FOLLOWER"]
    assert {name: totals.get(name, 0) for name in wanted if not totals.get(name)} == {}, totals


@pytest.mark.parametrize("rule", ["follower_truncates_to_hw", "hw_over_proposed_isr"])
def test_a_broken_rule_is_caught(rule: str) -> None:
    broken = Broken(**{rule: True})
    for seed in range(200):
        try:
            World(seed, steps=STEPS, broken=broken).run()
        except AssertionError as e:
            assert f"seed {seed} failed" in str(e)
            return
    pytest.fail(f"200 seeds did not catch {rule}")
