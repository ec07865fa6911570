"""ControllerClient: how a broker talks to the controller quorum (Kafka's NodeToControllerChannel).

One asyncio gRPC channel per voter, opened lazily. :meth:`ControllerClient.call` sends a unary
ControllerService request to the last known active controller and keeps going until some
controller answers with anything but NOT_CONTROLLER:

- NOT_CONTROLLER with a hint naming another voter: follow the hint at once (each voter once per
  call, so two stale views cannot ping-pong without a pause).
- NOT_CONTROLLER with controller_id -1 (an election is running) or naming the very controller that
  answered (it leads Raft but is not active yet): back off, then ask again.
- A transport failure (UNAVAILABLE, DEADLINE_EXCEEDED, a reset stream): forget that controller as
  active, try a voter that has not failed yet in this call, and back off once all have failed.
- Another call got an answer to a write from another controller while this attempt waits (the
  heartbeats find a new active controller within a second or two): cancel the attempt and go
  there, rather than wait out the deadline on a hung controller.

Every attempt has its own deadline (a SIGSTOPped controller must not hold a caller for longer),
the whole call has a total deadline and an attempt cap; when they run out the call raises
RequestTimedOutError naming the last problem. Controllers answer writes only after commit and give
up themselves after 5 s (controller.runtime.COMMIT_TIMEOUT_MS), so the default attempt deadline is
a little longer: the caller then hears the controller's own REQUEST_TIMED_OUT.

Retries happen only when no controller gave an answer, so a retried write may have been applied
by a controller that died before answering; the writes brokers send are idempotent or
compare-and-set (RegisterBroker with one incarnation, heartbeats, AlterPartition), and forwarded
admin writes behave as in Kafka (a retried CreateTopics may answer TOPIC_ALREADY_EXISTS).

Every call carries the broker's peer credential (tidelog.peer_auth: an interceptor on each
channel, so the metadata stream has it too); controllers refuse broker RPCs without it.

The metadata stream (FetchMetadata) is not retried here: the listener drives it through
:meth:`ControllerClient.stub` and :meth:`ControllerClient.next_voter`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message as protobuf_message

from tidelog import limits
from tidelog.config import VoterConfig
from tidelog.errors import (
    BrokerNotAvailableError,
    PolicyViolationError,
    RequestTimedOutError,
    TidelogError,
    UnknownServerError,
)
from tidelog.invariants import InvariantViolation, check
from tidelog.peer_auth import peer_interceptors
from tidelog.scram import request_users
from tidelog.tls import PLAINTEXT, ChannelFactory
from tidelog.v1 import controller_pb2, controller_pb2_grpc
from tidelog.v1.common_pb2 import ErrorCode

__all__ = [
    "ATTEMPTS_MAX",
    "ATTEMPT_TIMEOUT_MS_DEFAULT",
    "CALL_TIMEOUT_MS_DEFAULT",
    "CHANNEL_OPTIONS",
    "UNARY_METHODS",
    "ControllerClient",
    "ControllerEndpoint",
]

log = logging.getLogger("tidelog.broker.controller_client")

#: Per-attempt deadline by default: above the controller's 5 s commit timeout (see module doc).
ATTEMPT_TIMEOUT_MS_DEFAULT = 6_000
#: Total time one call may take by default, all attempts and pauses included.
CALL_TIMEOUT_MS_DEFAULT = 15_000
#: Attempts per call, whatever the deadline: a bound on work even if every attempt fails fast.
ATTEMPTS_MAX = 40
#: While an attempt waits, how often to check whether another controller answered meanwhile.
SUPERSEDE_CHECK_MS = 100
#: Backoff between attempts: doubling from the initial value, capped, with jitter.
BACKOFF_INITIAL_MS = 50
BACKOFF_MAX_MS = 1_000
#: A channel opened with a certificate since renewed: how long its calls in flight may go on.
RETIRE_GRACE_S = 30.0
#: gRPC status codes that mean "this controller did not answer": try another one.
RETRIABLE_STATUS = frozenset({
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.UNKNOWN,  # a server dying mid-call
    grpc.StatusCode.INTERNAL,  # a reset HTTP/2 stream (kill -9 of the server)
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.CANCELLED,  # the server cancelled (stopping)
})
#: Channel options: message size limits as everywhere, and a short reconnect backoff. gRPC's
#: default grows to 120 s, so a restarted controller would be ignored for minutes; with 1 s a
#: broker finds it again within a heartbeat or two.
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_send_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
    ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
)

check(
    BACKOFF_INITIAL_MS < BACKOFF_MAX_MS < ATTEMPT_TIMEOUT_MS_DEFAULT < CALL_TIMEOUT_MS_DEFAULT,
    "the backoffs, an attempt and a call must nest",
)
check(
    ATTEMPTS_MAX * BACKOFF_INITIAL_MS < CALL_TIMEOUT_MS_DEFAULT,
    "the backoffs of every attempt must fit the call timeout",
)

_SERVICE = controller_pb2.DESCRIPTOR.services_by_name["ControllerService"]
#: The unary ControllerService methods :meth:`ControllerClient.call` accepts, by name.
UNARY_METHODS: frozenset[str] = frozenset(
    m.name for m in _SERVICE.methods if not m.client_streaming and not m.server_streaming
)
#: Response message class of each unary method (to build a response for :meth:`forward`).
_RESPONSE_TYPES: dict[str, type[protobuf_message.Message]] = {
    m.name: getattr(controller_pb2, m.output_type.name) for m in _SERVICE.methods
}


def _error_code(response: Any) -> int:
    """A response's error code: its top-level one, or, for the per-item ACL responses (no
    top-level error), NOT_CONTROLLER when every item carries it (the controller puts errors of
    the whole request in every item)."""
    if "error_code" in response.DESCRIPTOR.fields_by_name:
        return int(response.error_code)
    results = getattr(response, "results", None)
    if results and all(r.error_code == ErrorCode.NOT_CONTROLLER for r in results):
        return ErrorCode.NOT_CONTROLLER
    return ErrorCode.NONE


def _error_message(response: Any) -> str:
    if "error_message" in response.DESCRIPTOR.fields_by_name:
        return str(response.error_message)
    results = getattr(response, "results", None)
    return str(results[0].error_message) if results else ""


def _failed_response(method_name: str, request: Any, error: TidelogError) -> Any:
    """The method's response carrying ``error``: at the top, or in every item of the per-item
    ACL responses."""
    response = _RESPONSE_TYPES[method_name]()
    if "error_code" in response.DESCRIPTOR.fields_by_name:
        response.error_code = error.code
        response.error_message = error.message
        return response
    if method_name == "AlterUserScramCredentials":
        for user in request_users(request):
            response.results.add(user=user, error_code=error.code, error_message=error.message)
        return response
    items = request.creations if method_name == "CreateAcls" else request.filters
    for _ in items:
        response.results.add(error_code=error.code, error_message=error.message)
    return response


#: Methods any controller answers from its own view: a success does not mean it is active.
_READ_METHODS = frozenset({"DescribeQuorum", "DescribeConfigs"})
check(
    _READ_METHODS <= UNARY_METHODS and "RegisterBroker" in UNARY_METHODS,
    "the read methods and RegisterBroker must be unary methods",
)


@dataclass(frozen=True, slots=True)
class ControllerEndpoint:
    """One voter as the broker reaches it."""

    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @staticmethod
    def from_voter(voter: VoterConfig) -> ControllerEndpoint:
        return ControllerEndpoint(voter.id, voter.host, voter.port)


class ControllerClient:
    """Requests to the active controller, with failover (see the module doc)."""

    def __init__(
        self,
        voters: Sequence[ControllerEndpoint | VoterConfig],
        *,
        attempt_timeout_ms: int = ATTEMPT_TIMEOUT_MS_DEFAULT,
        call_timeout_ms: int = CALL_TIMEOUT_MS_DEFAULT,
        rng: random.Random | None = None,
        name: str = "broker",
        peer_metadata: tuple[tuple[str, str], ...] = (),
        channels: ChannelFactory = PLAINTEXT,
    ) -> None:
        self._channel_factory = channels
        #: The factory's generation each voter's channel was opened with.
        self._generations: dict[int, int] = {}
        endpoints = [
            v if isinstance(v, ControllerEndpoint) else ControllerEndpoint.from_voter(v)
            for v in voters
        ]
        check(len(endpoints) > 0, "a controller client needs at least one voter")
        check(len({e.node_id for e in endpoints}) == len(endpoints), "duplicate voter ids")
        if not (attempt_timeout_ms > 0 and call_timeout_ms > 0):
            raise InvariantViolation(
                f"attempt timeout {attempt_timeout_ms} ms, call timeout {call_timeout_ms} ms: both "
                "must be positive")
        self._endpoints = {e.node_id: e for e in sorted(endpoints, key=lambda e: e.node_id)}
        self._order = list(self._endpoints)
        self._attempt_timeout_ms = attempt_timeout_ms
        self._call_timeout_ms = call_timeout_ms
        self._rng = rng if rng is not None else random.Random()
        self._name = name
        # The broker's credential (tidelog.peer_auth.peer_metadata): controllers refuse every
        # broker RPC without it (UNAUTHENTICATED), so every call of every channel carries it.
        self._interceptors = peer_interceptors(peer_metadata) if peer_metadata else []
        # Start with a random voter, so that many brokers do not all ask the same one first.
        self._cursor = self._rng.randrange(len(self._order))
        self._active_id: int | None = None
        self._active_confirmed = False
        self._on_active_lost: Callable[[], None] | None = None
        self._channels: dict[int, Any] = {}
        self._stubs: dict[int, Any] = {}
        self._closed = False

    # --- views ---------------------------------------------------------------------------------

    @property
    def voter_ids(self) -> list[int]:
        return list(self._order)

    @property
    def active_id(self) -> int | None:
        """The controller last seen acting as the active one (None when unknown)."""
        return self._active_id

    def endpoint(self, voter_id: int) -> ControllerEndpoint:
        return self._endpoints[voter_id]

    def preferred_voter(self) -> int:
        """Whom to ask first: the known active controller, else the next voter in rotation."""
        if self._active_id is not None:
            return self._active_id
        return self._order[self._cursor]

    def next_voter(self, after: int, *, avoid: frozenset[int] | set[int] = frozenset()) -> int:
        """The voter after ``after`` in rotation, skipping ``avoid`` unless every voter is in it."""
        index = self._order.index(after) if after in self._endpoints else self._cursor
        for step in range(1, len(self._order) + 1):
            candidate = self._order[(index + step) % len(self._order)]
            if candidate not in avoid:
                self._cursor = self._order.index(candidate)
                return candidate
        candidate = self._order[(index + 1) % len(self._order)]
        self._cursor = self._order.index(candidate)
        return candidate

    def stub(self, voter_id: int) -> Any:
        """The ControllerService stub of one voter (its channel opens on first use, and again
        after the node's TLS files were renewed: see tidelog.tls.ChannelFactory)."""
        check(not self._closed, "the controller client is closed")
        generation = self._channel_factory.refresh()
        stub = self._stubs.get(voter_id)
        if stub is not None and self._generations.get(voter_id) != generation:
            self._retire(voter_id)
            stub = None
        if stub is None:
            self._generations[voter_id] = generation
            endpoint = self._endpoints[voter_id]
            channel = self._channel_factory.aio(endpoint.address, CHANNEL_OPTIONS,
                                                interceptors=self._interceptors)
            self._channels[voter_id] = channel
            stub = controller_pb2_grpc.ControllerServiceStub(channel)
            self._stubs[voter_id] = stub
        return stub

    def _retire(self, voter_id: int) -> None:
        """Close a voter's channel opened with an old certificate: calls in flight (the
        metadata stream) get RETIRE_GRACE_S to finish, then the callers retry on a new one."""
        self._stubs.pop(voter_id, None)
        channel = self._channels.pop(voter_id, None)
        if channel is not None:
            asyncio.get_running_loop().create_task(channel.close(RETIRE_GRACE_S))

    # --- what we learn about the active controller ---------------------------------------------

    def note_active(self, voter_id: int | None, *, why: str, confirmed: bool = False) -> None:
        """Remember ``voter_id`` as active (None: unknown). ``confirmed``: it answered a write
        just now (a hint or a quorum view may be stale; an answer is not)."""
        if voter_id is not None and voter_id not in self._endpoints:
            voter_id = None  # a hint naming a node outside our voter list is of no use
        if voter_id != self._active_id:
            log.info("%s: active controller %s -> %s (%s)", self._name,
                     _show(self._active_id), _show(voter_id), why)
            lost = self._active_id is not None and voter_id is None
            self._active_id = voter_id
            self._active_confirmed = confirmed
            if lost and self._on_active_lost is not None:
                self._on_active_lost()
        else:
            self._active_confirmed = self._active_confirmed or confirmed

    def on_active_lost(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` (on the loop, at once) whenever the active controller stops being
        known: a call to it or its metadata stream failed. The broker sends a heartbeat then,
        whose call finds the new active controller through the survivors' hints (issue 26: a
        new controller is active ~10 ms after a kill -9; waiting for the next heartbeat, up to
        heartbeat_interval_ms later, was most of a broker's failover)."""
        self._on_active_lost = callback

    def forget_active(self, voter_id: int, *, why: str) -> None:
        """``voter_id`` did not answer: stop assuming it is the active controller."""
        if self._active_id == voter_id:
            self.note_active(None, why=why)

    # --- calls ---------------------------------------------------------------------------------

    async def call(
        self,
        method_name: str,
        request: protobuf_message.Message,
        *,
        timeout_ms: int | None = None,
        attempt_timeout_ms: int | None = None,
    ) -> Any:
        """Send a unary ControllerService request to the active controller; return its response.

        The response is whatever the active controller (or, for DescribeQuorum and
        DescribeConfigs, any controller) answered, errors included, never NOT_CONTROLLER.
        Raises RequestTimedOutError when no controller answered within ``timeout_ms`` (default
        15 s) or ATTEMPTS_MAX attempts, UnknownServerError for a non-retriable gRPC status,
        BrokerNotAvailableError once the client is closed.
        """
        if method_name not in UNARY_METHODS:
            raise ValueError(f"{method_name!r} is not a unary ControllerService method")
        total_ms = timeout_ms if timeout_ms is not None else self._call_timeout_ms
        per_attempt_ms = attempt_timeout_ms or self._attempt_timeout_ms
        if not (total_ms > 0 and per_attempt_ms > 0):
            raise InvariantViolation(
                f"call timeout {total_ms} ms, attempt timeout {per_attempt_ms} ms: both must be "
                "positive")
        attempt = _Attempts(self, method_name, total_ms)
        target = self.preferred_voter()
        while attempt.next():
            if self._closed:
                raise BrokerNotAvailableError(
                    f"{method_name}: the controller client is closed (the broker is stopping)")
            timeout_s = min(per_attempt_ms / 1000, attempt.remaining_s())
            try:
                rpc = getattr(self.stub(target), method_name)(request, timeout=timeout_s)
                response = await self._answer_unless_superseded(rpc, target)
            except _Superseded as superseded:
                target = superseded.voter_id
                continue
            except grpc.aio.AioRpcError as error:
                if error.code() not in RETRIABLE_STATUS:
                    raise UnknownServerError(
                        f"{method_name} to controller {target}: gRPC {error.code().name}: "
                        f"{error.details()}"
                    ) from None
                target = await attempt.on_transport_error(target, error)
                continue
            if _error_code(response) != ErrorCode.NOT_CONTROLLER:
                self._on_answer(method_name, target, response)
                return response
            target = await attempt.on_not_controller(target, response)
        raise attempt.timed_out()

    async def forward(
        self, method_name: str, request: protobuf_message.Message, *, timeout_ms: int | None = None
    ) -> Any:
        """:meth:`call` for a broker forwarding a client's admin request.

        Never raises a TidelogError: a failure comes back as a response of the method's type
        with the error's code and message (REQUEST_TIMED_OUT when no controller answered), and
        the ``controller`` hint is cleared (clients talk to brokers only). A request larger than
        the controller listener takes is POLICY_VIOLATION here, not sent: its records could not
        fit a metadata batch anyway (tidelog.limits.CONTROLLER_REQUEST_BYTES_MAX).
        """
        size = request.ByteSize()
        if size > limits.CONTROLLER_REQUEST_BYTES_MAX:
            return _failed_response(method_name, request, PolicyViolationError(
                f"{method_name} request of {size} bytes: the controllers take at most "
                f"{limits.CONTROLLER_REQUEST_BYTES_MAX} (a request's records are committed as "
                f"one metadata batch of at most {limits.METADATA_BATCH_BYTES_MAX}): split it"))
        try:
            response = await self.call(method_name, request, timeout_ms=timeout_ms)
        except TidelogError as error:
            return _failed_response(method_name, request, error)
        for hint in ("controller", "controller_hint"):
            if response.DESCRIPTOR.fields_by_name.get(hint) is not None:
                response.ClearField(hint)
        return response

    async def _answer_unless_superseded(self, rpc: Any, target: int) -> Any:
        """The attempt's answer; but if meanwhile another call got an answer from another
        controller (so ``target`` is not active: it is hung, or lost its leadership), cancel
        this attempt rather than wait out its deadline. A hint alone is not enough: hints are
        often stale during an election, and a slow write on the real active must not be
        cancelled and retried because of one."""
        answer = asyncio.ensure_future(rpc)
        try:
            while True:
                done, _ = await asyncio.wait({answer}, timeout=SUPERSEDE_CHECK_MS / 1000)
                if done:
                    return answer.result()
                active = self._active_id
                if self._active_confirmed and active is not None and active != target:
                    raise _Superseded(active)
        finally:
            if not answer.done():
                rpc.cancel()
                answer.cancel()

    def _on_answer(self, method_name: str, target: int, response: Any) -> None:
        if method_name == "DescribeQuorum":
            if response.leader_id >= 0:
                self.note_active(int(response.leader_id), why="DescribeQuorum leader")
        elif method_name not in _READ_METHODS:
            self.note_active(target, why=f"answered {method_name}", confirmed=True)

    async def close(self) -> None:
        """Close every channel (in-flight calls fail with CANCELLED)."""
        self._closed = True
        channels, self._channels, self._stubs = self._channels, {}, {}
        for channel in channels.values():
            await channel.close()


class _Superseded(Exception):
    """Another controller answered a write meanwhile: retry there (see _answer_unless_...)."""

    def __init__(self, voter_id: int) -> None:
        super().__init__(f"controller {voter_id} is active")
        self.voter_id = voter_id


class _Attempts:
    """The retry state of one call: attempt count, deadline, backoff, voters that failed."""

    def __init__(self, client: ControllerClient, method_name: str, total_ms: int) -> None:
        self._client = client
        self._method = method_name
        self._total_ms = total_ms
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + total_ms / 1000
        self._count = 0
        self._pauses = 0
        self._failed: set[int] = set()  # voters with a transport error in this call
        self._followed: set[int] = set()  # voters a hint already sent us to in this call
        self._last_problem = "no controller was asked"

    def remaining_s(self) -> float:
        return max(0.0, self._deadline - self._loop.time())

    def next(self) -> bool:
        """Whether another attempt may start (within the attempt cap and the deadline)."""
        if self._count >= ATTEMPTS_MAX or self.remaining_s() <= 0:
            return False
        self._count += 1
        return True

    async def on_transport_error(self, target: int, error: grpc.aio.AioRpcError) -> int:
        self._last_problem = (
            f"controller {target} did not answer ({error.code().name}: {error.details()})"
        )
        log.debug("%s to controller %d: %s", self._method, target, self._last_problem)
        self._client.forget_active(target, why=self._last_problem)
        self._failed.add(target)
        if len(self._failed) >= len(self._client.voter_ids):
            # Every voter failed once: pause, then go round again.
            self._failed.clear()
            await self._pause()
        return self._client.next_voter(target, avoid=self._failed)

    async def on_not_controller(self, target: int, response: Any) -> int:
        hint = response.controller if hasattr(response, "controller") else \
            response.controller_hint
        hinted = int(hint.controller_id) if hint.controller_id >= 0 else None
        self._last_problem = f"controller {target}: {_error_message(response)}"
        if hinted is not None and hinted != target and hinted in self._client.voter_ids:
            if hinted in self._failed:
                # The hint is older than what we saw: that controller did not answer us.
                await self._pause()
                return self._client.next_voter(target, avoid=self._failed)
            self._client.note_active(hinted, why=f"hint from controller {target}")
            if hinted not in self._followed:
                self._followed.add(hinted)
                return hinted  # a fresh hint: follow it without pausing
            await self._pause()  # two controllers naming each other: views are settling
            return hinted
        # No leader yet, or the leader itself is not active yet: wait for the election or the
        # activation. Ask the same controller again only if it said it leads.
        self._client.forget_active(target, why=self._last_problem)
        await self._pause()
        if hinted == target:
            return target
        return self._client.next_voter(target, avoid=self._failed)

    async def _pause(self) -> None:
        self._pauses += 1
        cap_ms = min(BACKOFF_MAX_MS, BACKOFF_INITIAL_MS * 2 ** min(self._pauses - 1, 16))
        # Equal jitter: at least half the step, so pauses still grow; never past the deadline.
        delay_s = (cap_ms / 2 + self._client._rng.random() * cap_ms / 2) / 1000
        await asyncio.sleep(min(delay_s, self.remaining_s()))

    def timed_out(self) -> RequestTimedOutError:
        return RequestTimedOutError(
            f"{self._method}: no active controller answered within {self._total_ms} ms "
            f"({self._count} attempts); last: {self._last_problem}"
        )


def _show(voter_id: int | None) -> str:
    return "unknown" if voter_id is None else str(voter_id)
