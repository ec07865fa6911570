"""BrokerLifecycleManager: registration, heartbeats and controlled shutdown (Kafka's class).

A broker process picks an incarnation id (a UUID per process start) and registers with the
controller quorum; the answer is its broker epoch, and it starts fenced. It then heartbeats every
``heartbeat_interval_ms`` with the metadata offset its listener has applied and published; the
controller unfences it once that offset reaches its own registration record (DESIGN §6). Between
heartbeats the manager watches the offset locally, so the heartbeat that gets it unfenced (or that
completes a controlled shutdown) goes out as soon as the offset is there, not up to an interval
later, without calling the controllers more often.

During a controller failover heartbeats fail for about a second: the loop just keeps its pace.
The new active controller gives every registered broker a fresh session, so no re-registration
is needed; the manager registers again only when told its registration is gone or stale
(BROKER_ID_NOT_REGISTERED, STALE_BROKER_EPOCH), with the same incarnation id, which the controller
answers idempotently when nothing changed.

INCONSISTENT_CLUSTER_ID is fatal: :meth:`start` raises it, and later the manager stops and calls
``on_fatal``. Controlled shutdown (SIGTERM): :meth:`controlled_shutdown` sends want_shutdown
heartbeats until the controller answers should_shut_down (it moved every leadership away and the
broker applied that) or the timeout passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.broker.controller_client import BACKOFF_INITIAL_MS, BACKOFF_MAX_MS, ControllerClient
from tidelog.errors import (
    InconsistentClusterIdError,
    RequestTimedOutError,
    TidelogError,
    error_for_code,
)
from tidelog.invariants import InvariantViolation, check
from tidelog.metadata.image import TOPIC_ID_BYTES
from tidelog.v1 import common_pb2, controller_pb2
from tidelog.v1.common_pb2 import ErrorCode

__all__ = [
    "HEARTBEAT_INTERVAL_MS_DEFAULT",
    "REGISTRATION_TIMEOUT_MS_DEFAULT",
    "BrokerLifecycleManager",
    "BrokerState",
    "LifecycleStats",
]

log = logging.getLogger("tidelog.broker.lifecycle")

#: Kafka's broker.heartbeat.interval.ms default.
HEARTBEAT_INTERVAL_MS_DEFAULT = 2_000
#: How long :meth:`BrokerLifecycleManager.start` keeps trying to register. Longer than the
#: controllers' session timeout (9 s), so a broker restarted right after a kill -9 outlasts the
#: DUPLICATE_BROKER_REGISTRATION answers its previous incarnation's live session causes.
REGISTRATION_TIMEOUT_MS_DEFAULT = 60_000
#: A heartbeat call (all attempts) takes at most this or the interval, whichever is more; one
#: attempt at most HEARTBEAT_ATTEMPT_TIMEOUT_MS, so that a hung controller (which holds a call
#: until its deadline) leaves time to ask another one within the same heartbeat. The active
#: controller answers a heartbeat in milliseconds (at most one small commit).
HEARTBEAT_TIMEOUT_MS_MIN = 1_500
HEARTBEAT_ATTEMPT_TIMEOUT_MS = 1_000
#: How often the loop looks at the metadata offset between heartbeats (local, no RPC).
OFFSET_POLL_MS = 50
#: Peers one heartbeat reports unreachable, at most (the controller reads 16).
UNREACHABLE_REPORTED_MAX = 16
#: A registration attempt (all retries inside the client) is bounded by this.
REGISTRATION_ATTEMPT_TIMEOUT_MS = 10_000

check(
    OFFSET_POLL_MS < HEARTBEAT_ATTEMPT_TIMEOUT_MS < HEARTBEAT_TIMEOUT_MS_MIN,
    "the offset poll, a heartbeat attempt and the heartbeat timeout must nest",
)
check(
    REGISTRATION_ATTEMPT_TIMEOUT_MS < REGISTRATION_TIMEOUT_MS_DEFAULT,
    "a registration attempt must fit the registration timeout",
)


class BrokerState(enum.Enum):
    """Kafka's BrokerState, as far as the control plane is concerned."""

    NOT_RUNNING = "not_running"  # not started, or stopped
    STARTING = "starting"  # registering
    RECOVERY = "recovery"  # registered and fenced: catching up with the metadata log
    RUNNING = "running"  # unfenced
    PENDING_CONTROLLED_SHUTDOWN = "pending_controlled_shutdown"  # moving leadership away
    SHUTTING_DOWN = "shutting_down"  # the controller said it may stop


@dataclass(slots=True)
class LifecycleStats:
    """Counters for logs, metrics and tests."""

    registrations: int = 0  # successful RegisterBroker calls (1 unless re-registered)
    heartbeats_sent: int = 0
    heartbeats_ok: int = 0  # answered without an error
    heartbeat_failures: int = 0  # no controller answered, or an error code
    consecutive_failures: int = 0
    unreachable_reported: int = 0  # peers reported unreachable (report_unreachable)


class BrokerLifecycleManager:
    """One broker's registration and heartbeats (see the module doc)."""

    def __init__(
        self,
        *,
        broker_id: int,
        cluster_id: str,
        host: str,
        port: int,
        client: ControllerClient,
        metadata_offset: Callable[[], int],
        rack: str = "",
        heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS_DEFAULT,
        incarnation_id: bytes | None = None,
        on_fatal: Callable[[TidelogError], None] | None = None,
        rng: random.Random | None = None,
        inter_broker_host: str = "",
        inter_broker_port: int = 0,
    ) -> None:
        if not (broker_id >= 0 and heartbeat_interval_ms > 0):
            raise InvariantViolation(
                f"broker id {broker_id}, heartbeat interval {heartbeat_interval_ms} ms")
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.incarnation_id = incarnation_id if incarnation_id is not None else uuid.uuid4().bytes
        if len(self.incarnation_id) != TOPIC_ID_BYTES:
            raise InvariantViolation(
                f"an incarnation id of {len(self.incarnation_id)} bytes, not {TOPIC_ID_BYTES}")
        self._endpoint = common_pb2.Endpoint(host=host, port=port)
        # Where followers fetch from us (ReplicaService); None: no inter-broker listener (tests).
        self._inter_broker_endpoint = (
            common_pb2.Endpoint(host=inter_broker_host or host, port=inter_broker_port)
            if inter_broker_port else None)
        self._rack = rack
        self._client = client
        self._metadata_offset = metadata_offset
        self._interval_s = heartbeat_interval_ms / 1000
        self._heartbeat_timeout_ms = max(HEARTBEAT_TIMEOUT_MS_MIN, heartbeat_interval_ms)
        self._on_fatal = on_fatal
        self._rng = rng if rng is not None else random.Random()
        self._broker_epoch = -1
        self._state = BrokerState.NOT_RUNNING
        self._is_fenced = True
        self._is_caught_up = False
        self._want_shutdown = False
        self._reported_offset = -1  # metadata offset sent in the last heartbeat
        self._unreachable: set[int] = set()  # peers to report in the next heartbeat
        self._failure: TidelogError | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        # The active controller gone (its stream or a call to it failed): heartbeat now, and
        # the heartbeat's call finds the new one through the survivors' hints, rather than at
        # the end of the interval (issue 26).
        client.on_active_lost(self.wake)
        self._unfenced = asyncio.Event()
        self._shutdown_done = asyncio.Event()
        self.stats = LifecycleStats()

    # --- views ---------------------------------------------------------------------------------

    @property
    def broker_epoch(self) -> int:
        """The current registration's epoch (-1 before the first registration)."""
        return self._broker_epoch

    @property
    def state(self) -> BrokerState:
        return self._state

    @property
    def is_fenced(self) -> bool:
        """As of the last heartbeat answer (True until the controller says otherwise)."""
        return self._is_fenced

    @property
    def is_caught_up(self) -> bool:
        """As of the last heartbeat answer: the reported offset reached the registration."""
        return self._is_caught_up

    @property
    def failure(self) -> TidelogError | None:
        """The fatal error that stopped the manager, if any."""
        return self._failure

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(
        self, *, registration_timeout_ms: int = REGISTRATION_TIMEOUT_MS_DEFAULT
    ) -> None:
        """Register (retrying for up to ``registration_timeout_ms``), then heartbeat in the
        background. Raises InconsistentClusterIdError (wrong cluster: the broker must stop),
        RequestTimedOutError (no controller registered it in time) or another non-retriable
        TidelogError from the controller."""
        check(self._task is None, "the lifecycle manager starts once")
        self._state = BrokerState.STARTING
        try:
            await self._register_until(registration_timeout_ms)
        except TidelogError as error:
            self._state = BrokerState.NOT_RUNNING
            self._failure = error
            raise
        self._task = asyncio.create_task(self._heartbeat_loop(),
                                         name=f"broker-heartbeat-{self.broker_id}")

    async def stop(self) -> None:
        """Stop heartbeating now, without a controlled shutdown (idempotent). The controllers
        fence the broker once its session times out."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._state = BrokerState.NOT_RUNNING

    def wake(self) -> None:
        """Send the next heartbeat now rather than at the end of the interval."""
        self._wake.set()

    def report_unreachable(self, broker_id: int) -> None:
        """This broker just failed to reach ``broker_id`` (a follower's fetch connection to its
        leader failed): say so in a heartbeat sent now. The active controller probes it (a
        hint, not evidence: see controller/broker_prober.py), so a dead leader is fenced in about a
        second even when its own metadata stream went to a standby controller, whose end
        the active one never sees."""
        if broker_id == self.broker_id or broker_id in self._unreachable \
                or len(self._unreachable) >= UNREACHABLE_REPORTED_MAX:
            return
        self._unreachable.add(broker_id)
        self.stats.unreachable_reported += 1
        self.wake()

    async def wait_unfenced(self, timeout_ms: int) -> bool:
        """Wait until a heartbeat answer says the broker is unfenced; False on timeout."""
        try:
            await asyncio.wait_for(self._unfenced.wait(), timeout_ms / 1000)
        except TimeoutError:
            return False
        return True

    async def controlled_shutdown(self, timeout_ms: int) -> bool:
        """Ask the controller to move leadership away, and wait until it says the broker may
        stop (True) or ``timeout_ms`` passes (False: the broker stops anyway, and the
        controllers fence it after its session times out). The metadata listener must keep
        running meanwhile: the controller waits until the broker has applied the change."""
        if self._task is None or self._task.done() or self._broker_epoch < 0:
            return self._shutdown_done.is_set()  # not heartbeating: nothing to hand over
        log.info("broker %d: controlled shutdown requested", self.broker_id)
        self._want_shutdown = True
        if self._state is not BrokerState.SHUTTING_DOWN:
            self._state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
        self.wake()
        try:
            await asyncio.wait_for(self._shutdown_done.wait(), timeout_ms / 1000)
        except TimeoutError:
            log.warning("broker %d: controlled shutdown did not complete within %d ms; stopping "
                        "anyway (the controllers fence this broker after its session timeout)",
                        self.broker_id, timeout_ms)
            return False
        log.info("broker %d: controlled shutdown complete: no partition leads here",
                 self.broker_id)
        return True

    # --- registration --------------------------------------------------------------------------

    async def _register_until(self, timeout_ms: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        pauses = 0
        last = "no attempt"
        while True:
            remaining_ms = int((deadline - loop.time()) * 1000)
            if remaining_ms <= 0:
                raise RequestTimedOutError(
                    f"broker {self.broker_id} could not register with the controller quorum "
                    f"within {timeout_ms} ms; last: {last}")
            try:
                await self._register_once(min(remaining_ms, REGISTRATION_ATTEMPT_TIMEOUT_MS))
                return
            except TidelogError as error:
                if not error.retriable:
                    raise
                last = str(error)
                log.info("broker %d: registration not done yet: %s", self.broker_id, error)
            pauses += 1
            cap_ms = min(BACKOFF_MAX_MS, BACKOFF_INITIAL_MS * 2 ** min(pauses, 16))
            pause_s = (cap_ms / 2 + self._rng.random() * cap_ms / 2) / 1000
            await asyncio.sleep(min(pause_s, max(0.0, deadline - loop.time())))

    async def _register_once(self, timeout_ms: int) -> None:
        request = controller_pb2.RegisterBrokerRequest(
            cluster_id=self.cluster_id, broker_id=self.broker_id,
            incarnation_id=self.incarnation_id, endpoint=self._endpoint, rack=self._rack)
        if self._inter_broker_endpoint is not None:
            request.inter_broker_endpoint.CopyFrom(self._inter_broker_endpoint)
        response = await self._client.call("RegisterBroker", request, timeout_ms=timeout_ms)
        if response.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID:
            raise InconsistentClusterIdError(
                f"broker {self.broker_id} (cluster {self.cluster_id!r}) refuses to join: the "
                f"controller quorum belongs to another cluster ({response.error_message}). Check "
                "[[controller.voters]] and the data dir's meta.properties")
        if response.error_code != ErrorCode.NONE:
            raise error_for_code(response.error_code, response.error_message)
        previous, self._broker_epoch = self._broker_epoch, int(response.broker_epoch)
        self.stats.registrations += 1
        if previous != self._broker_epoch:
            # A new registration starts fenced; the next answer says otherwise if it is not.
            self._set_fenced(True)
            self._is_caught_up = False
            log.info("broker %d registered: incarnation %s, broker epoch %d%s", self.broker_id,
                     self.incarnation_id.hex(), self._broker_epoch,
                     f" (was {previous})" if previous >= 0 else "")
        if self._state is BrokerState.STARTING:
            self._state = BrokerState.RECOVERY

    # --- heartbeats ----------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        try:
            while not self._shutdown_done.is_set():
                await self._heartbeat_once()
                if self._shutdown_done.is_set():
                    return  # the controller ended the session; no more heartbeats
                await self._wait_next()
        except TidelogError as error:
            self._failure = error
            self._state = BrokerState.NOT_RUNNING
            log.error("broker %d: lifecycle manager stopped: %s", self.broker_id, error)
            if self._on_fatal is not None:
                self._on_fatal(error)

    async def _wait_next(self) -> None:
        """Until the interval is over, or earlier when a heartbeat now would change something."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._interval_s
        self._wake.clear()
        while (remaining := deadline - loop.time()) > 0:
            if self._wake.is_set() or self._heartbeat_would_help():
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(remaining, OFFSET_POLL_MS / 1000))

    def _heartbeat_would_help(self) -> bool:
        offset = self._metadata_offset()
        if self._want_shutdown:
            # The controller answers should_shut_down once we applied its last change.
            return offset > self._reported_offset
        return self._is_fenced and self._reported_offset < self._broker_epoch <= offset

    async def _heartbeat_once(self) -> None:
        offset = self._metadata_offset()
        unreachable, self._unreachable = sorted(self._unreachable), set()
        request = controller_pb2.BrokerHeartbeatRequest(
            broker_id=self.broker_id, broker_epoch=self._broker_epoch,
            current_metadata_offset=offset, want_shutdown=self._want_shutdown,
            unreachable_brokers=unreachable)
        self.stats.heartbeats_sent += 1
        try:
            response = await self._client.call(
                "BrokerHeartbeat", request, timeout_ms=self._heartbeat_timeout_ms,
                attempt_timeout_ms=HEARTBEAT_ATTEMPT_TIMEOUT_MS)
        except TidelogError as error:
            self._on_heartbeat_failure(str(error))
            return
        self._reported_offset = offset
        code = response.error_code
        if code == ErrorCode.NONE:
            self._on_heartbeat_answer(response)
        elif code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
            self._on_heartbeat_failure(f"{ErrorCode.Name(code)}: {response.error_message}")
            await self._reregister()
        else:
            self._on_heartbeat_failure(f"{ErrorCode.Name(code)}: {response.error_message}")

    def _on_heartbeat_answer(self, response: controller_pb2.BrokerHeartbeatResponse) -> None:
        if self.stats.consecutive_failures:
            log.info("broker %d: heartbeats answered again after %d failures", self.broker_id,
                     self.stats.consecutive_failures)
        self.stats.heartbeats_ok += 1
        self.stats.consecutive_failures = 0
        self._is_caught_up = response.is_caught_up
        self._set_fenced(response.is_fenced)
        if response.should_shut_down and self._want_shutdown:
            self._state = BrokerState.SHUTTING_DOWN
            self._shutdown_done.set()
        elif self._state in (BrokerState.RECOVERY, BrokerState.RUNNING):
            self._state = BrokerState.RECOVERY if response.is_fenced else BrokerState.RUNNING

    def _on_heartbeat_failure(self, why: str) -> None:
        self.stats.heartbeat_failures += 1
        self.stats.consecutive_failures += 1
        # The first failure is routine during a controller failover; a run of them is not.
        level = logging.INFO if self.stats.consecutive_failures < 3 else logging.WARNING
        log.log(level, "broker %d: heartbeat failed (%d in a row): %s", self.broker_id,
                self.stats.consecutive_failures, why)

    async def _reregister(self) -> None:
        """Register again (same incarnation); fatal errors end the loop, others wait a beat."""
        try:
            await self._register_once(self._heartbeat_timeout_ms)
        except InconsistentClusterIdError:
            raise
        except TidelogError as error:
            if not error.retriable:
                raise
            log.info("broker %d: re-registration not done yet: %s", self.broker_id, error)
            return
        self.wake()  # tell the controller our offset under the new epoch right away

    def _set_fenced(self, fenced: bool) -> None:
        if fenced != self._is_fenced:
            log.info("broker %d is %s (broker epoch %d)", self.broker_id,
                     "fenced" if fenced else "unfenced", self._broker_epoch)
        self._is_fenced = fenced
        if fenced:
            self._unfenced.clear()
        else:
            self._unfenced.set()
