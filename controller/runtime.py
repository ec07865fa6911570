"""The controller's I/O shell: Raft quorum + control logic + event loop, as one object.

Threads and who owns what:
- The Raft adapter's thread calls :meth:`ControllerRuntime.apply` / ``snapshot`` / ``restore``
  (its StateMachine protocol) with committed entries in log order; they replay records into the
  committed image and append them to the in-memory metadata tail.
- The asyncio event loop is the single writer: gRPC handlers and the periodic fence check run
  there, ask the control logic for ``(records, response)``, propose the records and answer after
  they commit.
- ``self._lock`` guards the control logic between the two threads. It is never held across an
  await or a blocking Raft call.

The runtime wires two rooms of its own: the active controller's probes of brokers that may be
dead (controller/broker_prober.py, fast fencing) and the FetchMetadata streams
(controller/metadata_stream.py); both see the logic and its lock, never the quorum.

Activation follows Raft's rule that a leader may trust its state only after an entry of its own
term commits: on becoming leader the runtime first commits a bare NoOp batch with the leader epoch
checked (after which every earlier entry is applied here), then lets the logic become active (which
proposes its own NoOp), and only then serves writes. Any failed proposal, or a committed batch that
was not the next one this controller proposed, makes it resign and activate again the same way, so
speculative state is always rebuilt from the committed image, never patched.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from tidelog.cluster_secret import broker_credential
from tidelog.config import NodeConfig, VoterConfig
from tidelog.controller.broker_prober import BrokerProber, ProberHost
from tidelog.controller.clock import monotonic_ms, wall_clock_ms
from tidelog.controller.control import ControllerLogic, ControllerResult
from tidelog.controller.managers.common import (
    LogicConfig,
    error_response,
    response_error_code,
    set_controller_hint,
)
from tidelog.controller.metadata_stream import MetadataStreamer
from tidelog.controller.metrics import ControllerMetrics
from tidelog.controller.raft import FailReason, ProposeError, RaftQuorum, RaftSettings
from tidelog.data_dir import read_bootstrap
from tidelog.errors import error_for_code
from tidelog.metadata import records as metadata_records
from tidelog.v1 import common_pb2, controller_pb2, metadata_pb2
from tidelog.v1.common_pb2 import ErrorCode

log = logging.getLogger("tidelog.controller")

#: How long a write waits for its commit before answering REQUEST_TIMED_OUT. Below the 10 s
#: deadline clients use, so they hear the outcome rather than a transport timeout.
COMMIT_TIMEOUT_MS = 5_000
#: Raft index -> metadata base offset of recently applied batches (to check own proposals).
APPLIED_BATCHES_KEPT = 10_000
#: How often the Raft thread, waiting for the logic's lock to apply a batch, keeps the quorum
#: alive meanwhile (RaftQuorum.keep_alive rate-limits to its append_entries period anyway).
LOCK_WAIT_KEEP_ALIVE_S = 0.02
#: Pause between activation attempts while leader but unable to commit.
ACTIVATION_RETRY_S = 0.1
#: After an activation, every unfenced broker is probed this much later (see _activate).
ACTIVATION_PROBE_DELAY_S = 0.01
Resp = TypeVar("Resp")


def _credential_verifiers(secret: str | None) -> Callable[[int], bytes]:
    """A broker id's credential verifier, for its registration record (b"" without a secret)."""
    if secret is None:
        return lambda broker_id: b""
    return lambda broker_id: broker_credential(secret, broker_id).verifier()


class ControllerRuntime:
    """One controller node: quorum membership, control logic, and the write path."""

    def __init__(self, config: NodeConfig, *, cluster_id: str, metrics: ControllerMetrics) -> None:
        c = config.controller
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = cluster_id
        self.voters: dict[int, VoterConfig] = {v.id: v for v in c.voters}
        self._by_raft_address = {v.raft_address: v for v in c.voters}
        self._lock = threading.RLock()
        #: The cluster secret (None: loopback-only dev configs): it keys the Raft transport and
        #: every broker's credential, whose verifier each registration carries.
        self.secret = config.cluster_secret()
        self.logic = ControllerLogic(
            node_id=config.node_id,
            cluster_id=cluster_id,
            # Seeded from the OS (Random()'s default), not the node id: the rng draws topic ids,
            # and a fixed seed made a restarted controller draw the same ids again, so a deleted
            # topic's id could come back for a new topic and meet the old topic's logs on a broker
            # that missed the deletion. Simulations and unit tests pass their own seeded Random.
            rng=random.Random(),
            bootstrap=read_bootstrap(config.data_dir),
            credential_verifier=_credential_verifiers(self.secret),
            config=LogicConfig(
                broker_session_timeout_ms=c.broker_session_timeout_ms,
                leader_imbalance_check_interval_ms=c.leader_imbalance_check_interval_ms,
                num_partitions=c.default_num_partitions,
                default_replication_factor=c.default_replication_factor,
            ),
        )
        self._applied: collections.OrderedDict[int, int] = collections.OrderedDict()
        self.metrics = metrics
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: set[asyncio.Event] = set()
        self.active = False
        self._leader_epoch = -1
        self._activation: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        #: The active controller's probes of brokers that may be dead (fast fencing).
        self.prober = BrokerProber(ProberHost(
            node_id=self.node_id, logic=self.logic, lock=self._lock,
            active_epoch=lambda: self._leader_epoch if self.active else None,
            start_commit=self._start_commit, resign_after_failure=self._resign_after_failure,
            probe_after_ms=c.broker_probe_after_ms))
        #: FetchMetadata: the committed log streamed to brokers, from the tail kept here.
        self.streamer = MetadataStreamer(
            cluster_id=cluster_id, logic=self.logic, lock=self._lock, waiters=self._waiters,
            on_stream_end=self._on_metadata_stream_end)
        #: Set when the controller must stop: its Raft node failed (a journal it cannot write,
        #: a state machine that cannot apply); ``failure`` says why. The node process then
        #: stops with a non-zero status (tidelog/node.py).
        self.stopping = asyncio.Event()
        self.failure: BaseException | None = None
        me = config.voter()
        self.quorum = RaftQuorum(
            config.node_id,
            me.raft_address,
            [v.raft_address for v in c.voters if v.id != config.node_id],
            f"{config.data_dir}/raft",
            self,
            # Exactly where the config says (never a wildcard of pysyncobj's choosing), and the
            # cluster secret keys the transport's handshake (None: loopback-only dev configs).
            bind_address=f"{config.raft_bind_host}:{me.raft_port}",
            cluster_secret=self.secret,
            # [tls]: the Raft transport runs inside mutual TLS against the cluster CA too, under
            # the secret's handshake (controller/raft/tls_wire.py).
            tls_files=config.tls.files() if config.tls.enabled else None,
            on_failure=self._on_quorum_failure,
            settings=RaftSettings(
                election_timeout_min_s=c.election_timeout_min_ms / 1000,
                election_timeout_max_s=c.election_timeout_max_ms / 1000,
                append_entries_period_s=c.append_entries_period_ms / 1000,
                fast_election_stagger_s=c.fast_election_stagger_ms / 1000,
                snapshot_min_entries=c.snapshot_min_entries,
                snapshot_interval_s=c.snapshot_interval_ms / 1000,
            ),
        )

    # ----------------------------------------------------------- state machine (Raft thread)
    def apply(self, batch: bytes, index: int) -> None:
        decoded = metadata_records.decode_batch(batch)
        records = list(decoded.records)
        # The quorum exists once its constructor returned; its start-up replay runs before.
        quorum = getattr(self, "quorum", None)
        keep_alive = None if quorum is None else quorum.keep_alive
        # The event loop may hold the lock for a while (a large request's records, a fencing
        # part): the Raft thread keeps the quorum alive while it waits, as during the replay.
        while not self._lock.acquire(timeout=LOCK_WAIT_KEEP_ALIVE_S):
            if keep_alive is not None:
                keep_alive()
        try:
            base = self.logic.committed_offset + 1
            outcome = self.logic.replay_batch(records, base, progress=keep_alive)
            self.streamer.tail.append(base, records)
            self._applied[index] = base
            if len(self._applied) > APPLIED_BATCHES_KEPT:
                self._applied.popitem(last=False)
        finally:
            self._lock.release()
        if outcome.ignored:
            log.warning("controller %d: metadata batch at offset %d was a no-op: %s",
                        self.node_id, base, outcome.ignored)
        if outcome.own:
            # Counted by the controller that proposed the batch only (the active one), so a
            # sum over controllers counts each election once.
            self.metrics.count_elections(outcome.elections.clean, outcome.elections.unclean)
        self._call_in_loop(self._wake_waiters)
        if outcome.diverged:
            self._call_in_loop(self._on_diverged)

    def snapshot(self) -> bytes:
        # The committed image is immutable and replaced only on this (the Raft) thread, so it
        # is taken under the lock and turned into records outside it: the event loop is not
        # held for the ~0.4 s of 100,000 partitions, and the quorum is kept alive meanwhile
        # (a snapshot runs on the Raft thread, and is on by default).
        with self._lock:
            image = self.logic.committed_image
        quorum = getattr(self, "quorum", None)  # None while its constructor runs
        snap = metadata_records.image_to_snapshot(
            image, cluster_id=self.cluster_id,
            progress=None if quorum is None else quorum.keep_alive)
        return metadata_records.encode_snapshot(snap)

    def restore(self, data: bytes) -> None:
        snap = metadata_records.decode_snapshot(data)
        with self._lock:
            self.logic.restore_snapshot(snap)
            self.streamer.tail.reset(self.logic.committed_offset + 1)
        self._call_in_loop(self._wake_waiters)

    def _call_in_loop(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(fn, *args)

    def _wake_waiters(self) -> None:
        for ev in self._waiters:
            ev.set()

    # ----------------------------------------------------------- leadership (event loop)
    def _on_leadership_change(self, is_leader: bool, leader_epoch: int) -> None:
        log.info("controller %d: raft leader=%s leader_epoch=%d", self.node_id, is_leader,
                 leader_epoch)
        self.metrics.leader_epoch.set(leader_epoch)
        self._resign("quorum leadership changed")
        self._leader_epoch = leader_epoch if is_leader else -1
        if is_leader:
            self._start_activation(leader_epoch)

    def _on_diverged(self) -> None:
        self._resign("a metadata batch committed that this controller did not propose")
        self._maybe_reactivate()

    def _resign(self, why: str) -> None:
        if self.active:
            log.info("controller %d resigns as active controller: %s", self.node_id, why)
        self.active = False
        if self._activation is not None and not self._activation.done():
            self._activation.cancel()
        # A cancelled activation is not done until it next runs: forgotten now, so that
        # _maybe_reactivate starts another instead of waiting on one that will never finish.
        self._activation = None
        with self._lock:
            self.logic.on_resign()
        self.metrics.active.set(0)

    def _resign_after_failure(self, leader_epoch: int, why: str) -> None:
        """A proposal made as the active controller of ``leader_epoch`` failed: resign (the
        speculative image has it) and activate again on the committed image. Not when the
        epoch has moved on meanwhile: that change resigned already, and the activation it
        started must go on. (A write of the old epoch failing late used to cancel it, and the
        controller stayed Raft leader but inactive until the next election: 2.5 minutes with
        no active controller in a 30,000-partition run.)"""
        if leader_epoch != self._leader_epoch:
            log.info("controller %d: a proposal of leader epoch %d failed after the epoch "
                     "moved on (%s)", self.node_id, leader_epoch, why)
            return
        self._resign(why)
        self._maybe_reactivate()

    def _maybe_reactivate(self) -> None:
        epoch = self._leader_epoch
        idle = self._activation is None or self._activation.done()
        if epoch >= 0 and idle and self.quorum.is_leader():
            self._start_activation(epoch)

    def _start_activation(self, leader_epoch: int) -> None:
        task = asyncio.ensure_future(self._activate(leader_epoch))
        task.add_done_callback(self._activation_ended)
        self._activation = task

    def _activation_ended(self, task: asyncio.Future[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            # A bug: said loudly; the periodic tick starts another activation.
            log.error("controller %d: activation failed", self.node_id,
                      exc_info=task.exception())

    async def _activate(self, leader_epoch: int) -> None:
        """Commit a NoOp of our epoch, then become active on the committed image."""
        noop = metadata_records.metadata_record(
            metadata_pb2.NoOpRecord(controller_id=self.node_id))
        while self._leader_epoch == leader_epoch:
            try:
                await self._commit([noop], leader_epoch)
                with self._lock:
                    result = self.logic.on_become_active(monotonic_ms())
                await self._commit(list(result.records), leader_epoch)
            except (TimeoutError, ProposeError) as e:
                log.info("controller %d could not activate yet: %s", self.node_id, e)
                with self._lock:
                    self.logic.on_resign()
                await asyncio.sleep(ACTIVATION_RETRY_S)
                continue
            self.active = True
            self.metrics.active.set(1)
            log.info("controller %d is active (leader epoch %d, metadata offset %d)",
                     self.node_id, leader_epoch, self.logic.committed_offset)
            # A broker that died with the previous active controller (a shared host), or
            # whose fencing that controller began, left this one no hint: its metadata stream
            # and its followers' reports went to the old one, and this one would probe it
            # only after broker_probe_after_ms of silence counted from now (seen at 100,000
            # partitions: an election mid-fencing, and the fencing went on 2.9 s later). So
            # every unfenced broker is probed once, now: a connect costs a live broker nothing.
            # A little later than the sessions' start, which a probe's evidence must follow.
            with self._lock:
                unfenced = tuple(b for b, r in self.logic.image.cluster.brokers.items()
                                 if not r.fenced)
            if unfenced:
                asyncio.get_running_loop().call_later(
                    ACTIVATION_PROBE_DELAY_S, self._probe_at_activation, leader_epoch, unfenced)
            return

    def _probe_at_activation(self, leader_epoch: int, broker_ids: tuple[int, ...]) -> None:
        if self.active and self._leader_epoch == leader_epoch:
            self.prober.start(hinted=broker_ids)

    # ----------------------------------------------------------- write path (event loop)
    async def _commit(self, records: list[metadata_pb2.MetadataRecord], leader_epoch: int) -> int:
        """Propose records as one batch; returns the metadata base offset it committed at."""
        return await self._start_commit(records, leader_epoch)

    def _start_commit(self, records: list[metadata_pb2.MetadataRecord],
                      leader_epoch: int) -> asyncio.Future[int]:
        """Propose records as one batch now (proposals keep their call order); the future
        gives the metadata base offset once the batch is committed and applied here."""
        batch = metadata_records.encode_batch(records, append_time_ms=wall_clock_ms())
        future = self.quorum.propose(batch, leader_epoch=leader_epoch,
                                     timeout_ms=COMMIT_TIMEOUT_MS)
        return asyncio.ensure_future(self._committed_base(future))

    async def _committed_base(self, future: concurrent.futures.Future[int]) -> int:
        index = await asyncio.wrap_future(future)
        with self._lock:
            base = self._applied.get(index)
        assert base is not None, f"raft index {index} resolved but was not applied here"
        return base

    async def write(self, rpc: str, handler: Callable[[Any, int], ControllerResult[Resp]],
                    request: Any, response_type: type[Any]) -> Any:
        """Run a control-manager handler on the active controller and answer after commit."""
        started = time.perf_counter()
        try:
            response = await self._write(handler, request, response_type)
        finally:
            self.metrics.event_queue_time.observe(time.perf_counter() - started)
        outcome = ErrorCode.Name(response_error_code(response))
        self.metrics.writes.labels(rpc, outcome).inc()
        return response

    async def _write(self, handler: Callable[[Any, int], ControllerResult[Resp]],
                     request: Any, response_type: type[Any]) -> Any:
        if not self.active:
            return self._not_controller(response_type, request)
        epoch = self._leader_epoch
        with self._lock:
            result = handler(request, monotonic_ms())
        try:
            if result.records:
                base = await self._commit(list(result.records), epoch)
                if base != result.base_offset:
                    raise ProposeError(FailReason.LEADER_CHANGED, leader_address=None,
                                       detail=f"committed at {base}, not {result.base_offset}")
            else:
                await self._wait_committed(result.response_offset)
        except ProposeError as e:
            self._resign_after_failure(epoch, str(e))
            if not e.outcome_known:
                # The batch is in some Raft log and may still commit (as Kafka's controller
                # timeouts): say so, rather than NOT_CONTROLLER, which promises nothing applied.
                return _error(response_type, request, ErrorCode.REQUEST_TIMED_OUT,
                              f"the metadata change did not commit in time ({e.reason.name}); "
                              "it may still apply: check before retrying")
            return self._not_controller(response_type, request)
        except TimeoutError:
            return _error(response_type, request, ErrorCode.REQUEST_TIMED_OUT,
                          "earlier metadata changes did not commit in time")
        return result.response

    async def _wait_committed(self, offset: int) -> None:
        """Wait until the committed offset reaches ``offset`` (bounded by COMMIT_TIMEOUT_MS)."""
        wake = asyncio.Event()
        self._waiters.add(wake)
        deadline = time.monotonic() + COMMIT_TIMEOUT_MS / 1000
        try:
            while True:
                with self._lock:
                    if self.logic.committed_offset >= offset:
                        return
                wake.clear()
                await asyncio.wait_for(wake.wait(), max(0.0, deadline - time.monotonic()))
        finally:
            self._waiters.discard(wake)

    def read(self, handler: Callable[[Any, int], ControllerResult[Resp]], request: Any) -> Resp:
        """A read-only handler, answered from this controller's own image."""
        with self._lock:
            return handler(request, monotonic_ms()).response

    def controller_hint(self) -> common_pb2.ControllerHint:
        leader = self.quorum.leader_address()
        voter = self._by_raft_address.get(leader) if leader else None
        if voter is None:
            return common_pb2.ControllerHint(controller_id=-1)
        return common_pb2.ControllerHint(
            controller_id=voter.id, endpoint=common_pb2.Endpoint(host=voter.host, port=voter.port))

    def _not_controller(self, response_type: type[Any], request: Any) -> Any:
        hint = self.controller_hint()
        if hint.controller_id >= 0 and hint.controller_id != self.node_id:
            where = (f"controller {hint.controller_id} at {hint.endpoint.host}:"
                     f"{hint.endpoint.port} is")
        else:
            where = "no controller is active yet (election in progress); retry shortly"
        response = _error(response_type, request, ErrorCode.NOT_CONTROLLER,
                          f"controller {self.node_id} is not the active controller; {where}")
        set_controller_hint(response, hint)
        return response

    # ----------------------------------------------------------- periodic work
    async def run_periodic(self) -> None:
        interval_s = self.config.controller.fence_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            self._update_metrics()
            if not self.active:
                # Raft leader but neither active nor activating (an activation that failed
                # or was cancelled with nothing to start another): activate.
                self._maybe_reactivate()
                continue
            epoch = self._leader_epoch
            with self._lock:
                begun_before = self.logic.fencing_begun()
                result = self.logic.maybe_fence_stale_brokers(monotonic_ms())
                begun = self.logic.fencing_begun()
            self.prober.start()
            if not result.records:
                continue
            for broker_id in sorted(begun.keys() - begun_before.keys()):
                log.warning("controller %d begins fencing broker %d (epoch %d) in parts: no "
                            "heartbeat within its session (broker_session_timeout_ms %d)",
                            self.node_id, broker_id, begun[broker_id],
                            self.config.controller.broker_session_timeout_ms)
            for record in result.records:
                if record.WhichOneof("record") != "fence_broker":
                    continue
                fenced = record.fence_broker
                if fenced.broker_id in begun_before:
                    # Its last part: the fencing may have begun on a probe's evidence.
                    log.warning("controller %d fences broker %d (epoch %d): the last part of "
                                "its fencing", self.node_id, fenced.broker_id,
                                fenced.broker_epoch)
                else:
                    log.warning("controller %d fences broker %d (epoch %d): no heartbeat within "
                                "its session (broker_session_timeout_ms %d)", self.node_id,
                                fenced.broker_id, fenced.broker_epoch,
                                self.config.controller.broker_session_timeout_ms)
            try:
                await self._commit(list(result.records), epoch)
            except (TimeoutError, ProposeError, ValueError) as e:  # ValueError: see _probe
                self._resign_after_failure(epoch, f"fencing proposal failed: {e}")

    def _on_metadata_stream_end(self, broker_id: int) -> None:
        """A broker's metadata stream to this controller ended: it may have died (a hint only:
        brokers also move to another controller), so probe it now rather than at the next
        tick after it fell silent."""
        if broker_id >= 0:
            self.prober.start(hinted=(broker_id,))

    def _update_metrics(self) -> None:
        m = self.metrics
        with self._lock:
            stats = self.logic.stats()
            offset = self.logic.committed_offset
        m.metadata_offset.set(offset)
        m.commit_index.set(self.quorum.commit_index)
        m.registered_brokers.set(stats.registered_brokers)
        m.fenced_brokers.set(stats.fenced_brokers)
        m.topics.set(stats.topics)
        m.partitions.set(stats.partitions)
        m.offline_partitions.set(stats.offline_partitions)
        m.pending_batches.set(stats.pending_batches)
        m.count_raft_patches(self.quorum.patch_counts())

    # ----------------------------------------------------------- quorum status
    def describe_quorum(self) -> controller_pb2.DescribeQuorumResponse:
        status = self.quorum.status()
        leader = self._by_raft_address.get(status["leader_address"] or "")
        with self._lock:
            offset = self.logic.committed_offset
        response = controller_pb2.DescribeQuorumResponse(
            leader_id=leader.id if leader else -1,
            leader_epoch=status["leader_epoch"],
            high_watermark=status["commit_index"],
            responder_id=self.node_id,
            cluster_id=self.cluster_id,
            metadata_offset=offset,
        )
        match_index: dict[str, int] = status.get("peer_match_index", {})
        for voter in sorted(self.voters.values(), key=lambda v: v.id):
            v = response.voters.add(
                node_id=voter.id, raft_address=voter.raft_address,
                endpoint=common_pb2.Endpoint(host=voter.host, port=voter.port),
                is_leader=leader is not None and leader.id == voter.id)
            if voter.id == self.node_id:
                v.commit_index = status["commit_index"]
                v.applied_index = status["last_applied"]
                v.metadata_offset = offset
                v.connected = True
                v.lag = 0 if v.is_leader else -1
            else:
                v.connected = bool(status["peers"].get(voter.raft_address, False))
                v.commit_index = v.applied_index = v.metadata_offset = -1
                matched = match_index.get(voter.raft_address)
                v.lag = -1 if matched is None else max(0, status["commit_index"] - matched)
                if matched is not None:
                    v.applied_index = matched
        return response

    # ----------------------------------------------------------- metadata stream
    # ----------------------------------------------------------- lifecycle
    def _on_quorum_failure(self, error: BaseException) -> None:
        """On the Raft thread, once the quorum has stopped after a failure."""
        self.failure = error
        self._call_in_loop(self.stopping.set)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.quorum.failure is not None:  # failed before the loop could be told
            self.failure = self.quorum.failure
            self.stopping.set()
        with self._lock:
            self.streamer.tail.reset(self.logic.committed_offset + 1)
        self.quorum.on_leadership_change(
            lambda is_leader, epoch: self._call_in_loop(self._on_leadership_change, is_leader,
                                                        epoch))
        self._tasks.append(asyncio.ensure_future(self.run_periodic()))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        self.prober.cancel()
        self._leader_epoch = -1
        self._resign("stopping")
        await asyncio.get_running_loop().run_in_executor(None, self.quorum.close)

    def readiness(self) -> str | None:
        if self.quorum.failure is not None:
            return f"raft failed: {self.quorum.failure!r}"
        if self.quorum.leader_address() is None:
            return "the controller quorum has no leader"
        return None


def _error(response_type: type[Any], request: Any, code: int, message: str) -> Any:
    return error_response(response_type, request, error_for_code(code, message))
