"""Followers pulling from leaders: one fetcher task per leader broker (ReplicaFetcherThread).

:class:`ReplicaFetcherManager` keeps one :class:`ReplicaFetcher` per leader broker this broker
follows partitions of. Each fetcher batches its partitions into one ReplicaService.Fetch
(replica id, broker epoch, per partition: fetch offset = LEO, current leader epoch, last fetched
epoch, log start), long-polls (``max_wait_ms``, ``min_bytes = 1``: the leader answers as soon as
it has data or after the wait), and hands each partition's answer to its
:class:`~broker.partition.Partition` (``PartitionState.on_fetch_response`` and its effects:
truncate, append, follow the HW). One fetch is in flight per leader, so a partition has at most
one too, as the core requires.

Fetch sessions (broker.replication.fetch_session; the wire contract is in broker.proto): the
first request to a leader is full and lists every partition; as long as the leader answers with
a ``next_session_epoch``, later requests are incremental: they list only the partitions whose
fetch (offset, epochs) changed since the leader last saw them -- the ones just answered, added,
or back from a back-off (``_changed``) -- and forget the ones removed or backing off; answers
hold only partitions with something new. A round costs what changed, not the partitions
followed. Whatever ends the exchange without an answer (failure, time-out, cancellation: the
stream closes) or an answer with a request-level error, including the leader's
INVALID_FETCH_SESSION_EPOCH, starts over with a full request; a leader that keeps no session
(the unary Fetch, an older build) gets full requests.

Leader changes re-target partitions: the replica manager calls :meth:`ReplicaFetcherManager.
add_partition` with the new leader (removing it from the old fetcher) and
:meth:`~ReplicaFetcherManager.remove_partition` when it leads or no longer hosts it. Adding to a
fetcher whose long-poll is in flight asks the leader to answer that poll now (a FetchRequest
with ``answer_now`` on the same stream), so the new partition starts at once instead of after
``max_wait_ms``, in the same session: the next request lists it incrementally. (Cancelling the
poll would close the stream and so the session, and the next request would list every
partition: at 100,000 partitions each topic creation cost every follower full rounds.) Over the
unary fallback there is no stream to nudge, and the poll is cancelled. An answer that arrives
for a partition that moved meanwhile is dropped by the core (it checks leader, epoch and fetch
offset against the request).

Back-off: a partition whose answer asks for it (BackoffFetch: a retriable error such as
NOT_LEADER_OR_FOLLOWER while the leader's metadata catches up) sits out ``fetch_backoff_ms``;
a failed RPC (leader down or hung) backs the whole fetcher off, doubling from
``fetch_backoff_ms`` to ``FETCH_BACKOFF_MAX_MS``, and its retries list no partition until
the leader answers again (a dead leader's followers do not re-plan every partition they
followed from it at each retry). A fetcher with nothing to fetch waits for a
wake-up (bounded), never spins.

The wire is behind :class:`ReplicaTransport`: gRPC in a broker (:class:`GrpcReplicaTransport`),
in-memory calls between replica managers in unit tests. Over gRPC a follower reaches the
leader's *inter-broker* listener (the ``inter_broker_endpoint`` of its registration; clients are
never told it) and sends its broker credential (tidelog.peer_auth) with every call and stream;
the fetch carries its exact broker epoch, which the leader compares with its image. Over gRPC,
fetches go through one long-lived bidirectional stream per leader
(:data:`REPLICA_FETCH_STREAM_METHOD`: the same FetchRequest/FetchResponse, one answer per
request, in order), not one unary call each: in
grpc.aio a message on an open stream costs the leader about half the CPU of a unary RPC, and a
follower fetches once or twice per produced batch, so this is most of the leader's cost of an
acks=all produce. One exchange is in flight per stream (the fetcher sends one request at a
time); a timed-out, failed or cancelled exchange closes the stream (an answer may still be on its
way) and the next fetch opens a new one. A leader without the method (UNIMPLEMENTED: an older
build) is asked through the unary ReplicaService.Fetch from then on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

import grpc

from tidelog import limits
from tidelog.broker.controller_client import CHANNEL_OPTIONS
from tidelog.broker.partition import Partition, PartitionKey
from tidelog.broker.replication import FollowerFetch
from tidelog.broker.replication.fetch_session import (
    REQUEST_PARTITIONS_MAX,
    FollowerPlan,
    FollowerSession,
)
from tidelog.errors import NetworkError, TidelogError
from tidelog.invariants import InvariantViolation, check
from tidelog.tls import PLAINTEXT, ChannelFactory
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import broker_pb2_grpc
from tidelog.v1.common_pb2 import ErrorCode

__all__ = [
    "FETCH_BACKOFF_MAX_MS",
    "FETCH_BACKOFF_MS_DEFAULT",
    "REPLICA_FETCH_PARTITION_BYTES_MAX",
    "REPLICA_FETCH_RESPONSE_BYTES_MAX",
    "REPLICA_FETCH_STREAM_METHOD",
    "GrpcReplicaTransport",
    "ReplicaFetcher",
    "ReplicaFetcherManager",
    "ReplicaTransport",
]

log = logging.getLogger("tidelog.broker.fetcher")

#: Kafka's replica.fetch.max.bytes is 1 MiB; larger answers mean fewer round trips per MiB
#: for a Python follower (each RPC costs ~0.2 ms of CPU here), and the first batch always comes.
REPLICA_FETCH_PARTITION_BYTES_MAX = 4 << 20
#: Kafka's replica.fetch.response.max.bytes (10 MiB), a little more for the same reason.
REPLICA_FETCH_RESPONSE_BYTES_MAX = 16 << 20
#: Partition-level back-off (Kafka's replica.fetch.backoff.ms is 1 s; errors here are mostly a
#: leader whose metadata is a few ms behind ours, so retry sooner).
FETCH_BACKOFF_MS_DEFAULT = 100
#: Cap of the doubling back-off after failed RPCs (leader down, hung, restarting).
FETCH_BACKOFF_MAX_MS = 1_000
#: An RPC may take max_wait_ms plus this before it counts as failed (a hung leader).
FETCH_TIMEOUT_MARGIN_MS = 5_000
#: A fetcher with nothing to fetch re-checks at least this often (backed-off partitions).
IDLE_WAIT_MAX_MS = 1_000
#: Partitions per fetcher, at most (its session holds each one; a request lists at most
#: limits.PARTITIONS_PER_REQUEST_MAX, and the next one the rest at once: see _request).
FETCHER_PARTITIONS_MAX = limits.PARTITIONS_PER_FETCH_SESSION_MAX
#: ReplicaService.FetchStream (broker.proto; see the module doc). A leader built before it answers
#: UNIMPLEMENTED, and the follower goes back to the unary Fetch.
REPLICA_FETCH_STREAM_METHOD = "/tidelog.v1.ReplicaService/FetchStream"
#: The nudge a follower writes on its stream (broker.proto FetchRequest.answer_now).
ANSWER_NOW = pb.FetchRequest(answer_now=True)

check(
    REPLICA_FETCH_PARTITION_BYTES_MAX <= REPLICA_FETCH_RESPONSE_BYTES_MAX,
    "a partition's fetch bytes must fit a fetch response",
)
check(
    REPLICA_FETCH_RESPONSE_BYTES_MAX < limits.GRPC_MESSAGE_BYTES_MAX,
    "a replica fetch response must fit a gRPC message",
)
check(
    FETCH_BACKOFF_MS_DEFAULT < FETCH_BACKOFF_MAX_MS <= IDLE_WAIT_MAX_MS,
    "the fetch backoff must have room to grow, up to the idle wait",
)


class ReplicaTransport(Protocol):
    """How a follower reaches a leader's ReplicaService.Fetch. A transport with sessions may
    also have ``answer_now(leader_id) -> bool``: ask the leader to answer the fetch in flight
    now (FetchRequest.answer_now); False when it cannot (no stream open), and the fetcher
    cancels the fetch instead."""

    async def fetch(self, leader_id: int, request: pb.FetchRequest, *,
                    timeout_s: float) -> pb.FetchResponse:
        """The leader's answer; NetworkError (or another TidelogError) when there is none."""

    async def close(self) -> None: ...


class _Leader:
    """A leader's channel, its unary stub and its fetch stream (when open)."""

    __slots__ = ("address", "call", "channel", "generation", "nudge", "nudge_wanted",
                 "open_stream", "reading", "stream_supported", "stub")

    def __init__(self, address: str, channels: ChannelFactory) -> None:
        self.address = address
        self.generation = 0  # the channel factory's, when this channel opened
        self.channel = channels.aio(address, CHANNEL_OPTIONS)
        # The leader's inter-broker listener refuses (UNAUTHENTICATED) a fetch without our
        # credential: GrpcReplicaTransport sends it with every call and stream.
        self.stub = broker_pb2_grpc.ReplicaServiceStub(self.channel)
        self.open_stream = self.channel.stream_stream(
            REPLICA_FETCH_STREAM_METHOD, request_serializer=pb.FetchRequest.SerializeToString,
            response_deserializer=pb.FetchResponse.FromString)
        self.call: Any = None  # the open stream call, if any
        self.stream_supported = True
        # answer_now: whether the exchange in flight has written its request (a nudge may be
        # written then), whether one is wanted before that, and the nudge's write.
        self.reading = False
        self.nudge_wanted = False
        self.nudge: asyncio.Task[None] | None = None

    def close_stream(self) -> None:
        self.nudge_wanted = False
        call, self.call = self.call, None
        if call is not None:
            call.cancel()


class GrpcReplicaTransport:
    """One gRPC channel per leader broker, at the endpoint the metadata image gives it; fetches
    over one stream per leader (see the module doc). One fetch at a time per leader (the
    fetcher's rule)."""

    def __init__(self, endpoint_of: Callable[[int], tuple[str, int] | None], *,
                 metadata: tuple[tuple[str, str], ...] = (),
                 channels: ChannelFactory = PLAINTEXT) -> None:
        #: Plaintext or mutual TLS to the leaders' inter-broker listeners.
        self._channels = channels
        #: A leader's inter-broker listener (its registration's inter_broker_endpoint).
        self._endpoint_of = endpoint_of
        #: Our peer credential (tidelog.peer_auth.peer_metadata), sent on every call.
        self._metadata = metadata
        self._leaders: dict[int, _Leader] = {}

    def _leader(self, leader_id: int) -> _Leader:
        endpoint = self._endpoint_of(leader_id)
        if endpoint is None:
            raise NetworkError(f"broker {leader_id} has no known inter-broker endpoint")
        address = f"{endpoint[0]}:{endpoint[1]}"
        generation = self._channels.refresh()
        known = self._leaders.get(leader_id)
        if known is not None and known.address == address and known.generation == generation:
            return known
        if known is not None:  # it re-registered elsewhere, or our TLS files were renewed
            known.close_stream()
            asyncio.get_running_loop().create_task(known.channel.close())
        leader = self._leaders[leader_id] = _Leader(address, self._channels)
        leader.generation = generation
        return leader

    async def fetch(self, leader_id: int, request: pb.FetchRequest, *,
                    timeout_s: float) -> pb.FetchResponse:
        leader = self._leader(leader_id)
        try:
            if leader.stream_supported:
                response = await self._fetch_on_stream(leader, request, timeout_s)
                if response is not None:
                    return response
                log.info("broker %d at %s has no fetch stream; fetching by unary calls",
                         leader_id, leader.address)
                leader.stream_supported = False
            unary: pb.FetchResponse = await leader.stub.Fetch(request, timeout=timeout_s,
                                                              metadata=self._metadata)
            return unary
        except grpc.aio.AioRpcError as error:
            raise NetworkError(f"fetch from broker {leader_id}: gRPC {error.code().name}: "
                               f"{error.details()}") from None
        except TimeoutError:
            raise NetworkError(f"fetch from broker {leader_id}: no answer within "
                               f"{timeout_s:.1f} s") from None
        except asyncio.InvalidStateError as error:  # the stream ended under us
            raise NetworkError(f"fetch from broker {leader_id}: {error}") from None

    async def _fetch_on_stream(self, leader: _Leader, request: pb.FetchRequest,
                               timeout_s: float) -> pb.FetchResponse | None:
        """One exchange on the leader's stream (opened if needed); None when the leader does
        not have the method. Any failure, timeout or cancellation closes the stream."""
        call = leader.call
        if call is None:
            call = leader.call = leader.open_stream(metadata=self._metadata)
        ok = False
        try:
            async with asyncio.timeout(timeout_s):
                if leader.nudge is not None:  # one write at a time on a stream
                    await asyncio.wait((leader.nudge,))
                    leader.nudge = None
                await call.write(request)
                leader.reading = True
                if leader.nudge_wanted:
                    leader.nudge_wanted = False
                    await call.write(ANSWER_NOW)
                response = await call.read()
            if response is grpc.aio.EOF:  # ended with OK: the leader is stopping
                raise NetworkError(f"broker at {leader.address} ended the fetch stream")
            ok = True
            return cast(pb.FetchResponse, response)
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                return None
            raise
        finally:
            leader.reading = False
            if not ok and leader.call is call:
                # An answer may still be on its way: a later exchange must not read it.
                leader.close_stream()

    def answer_now(self, leader_id: int) -> bool:
        leader = self._leaders.get(leader_id)
        if leader is None or leader.call is None or not leader.stream_supported:
            return False
        if leader.nudge is not None and not leader.nudge.done():
            return True  # asked already
        if not leader.reading:
            leader.nudge_wanted = True  # written right after the request
            return True
        call = leader.call

        async def write() -> None:
            with contextlib.suppress(Exception):  # a broken stream fails the fetch anyway
                await call.write(ANSWER_NOW)

        leader.nudge = asyncio.get_running_loop().create_task(write())
        return True

    async def close(self) -> None:
        leaders, self._leaders = self._leaders, {}
        for leader in leaders.values():
            leader.close_stream()
            await leader.channel.close()


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader (see the module doc)."""

    def __init__(self, manager: ReplicaFetcherManager, leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.partitions: dict[PartitionKey, Partition] = {}
        self.session: FollowerSession[PartitionKey, FollowerFetch] = FollowerSession()
        self._backoff_until_ms: dict[PartitionKey, float] = {}
        self._pause_until_ms = 0.0  # the leader refused a whole request: wait before the next
        self._wake = asyncio.Event()
        self._in_flight: asyncio.Task[pb.FetchResponse] | None = None
        self._rpc_backoff_ms = 0
        self._rotation = 0
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replica-fetcher-{manager.broker_id}-from-{leader_id}")
        self.fetches = 0  # answered RPCs (tests and logs)
        self.failures = 0  # RPCs that failed (network, time-out, unexpected)
        self.full_requests = 0  # of them, full ones
        self.partitions_listed = 0  # partitions listed in the requests sent (tests)
        self.last_listed = 0  # in the last request sent

    def add(self, partition: Partition) -> None:
        check(len(self.partitions) < FETCHER_PARTITIONS_MAX, "too many partitions per leader")
        self.partitions[partition.key] = partition
        self._backoff_until_ms.pop(partition.key, None)
        self.session.mark_changed(partition.key, relist=True)
        self._wake.set()
        if self._in_flight is not None:
            # Have the long-poll answered now rather than wait it out; the next request lists
            # the new partition in the same session. Without a stream to ask on, cancel it
            # (the stream and session close: the next request is full).
            answer_now = getattr(self.manager.transport, "answer_now", None)
            if answer_now is None or not answer_now(self.leader_id):
                self._in_flight.cancel()

    def remove(self, key: PartitionKey) -> None:
        self.partitions.pop(key, None)
        self._backoff_until_ms.pop(key, None)
        self.session.forget(key)

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    # --- the loop ------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            now_ms = time.monotonic() * 1000
            if now_ms < self._pause_until_ms:
                await self._idle()
                continue
            plan = self._plan(now_ms)
            if not (plan.listed or plan.forgotten or len(self.session) or self.session.pending):
                await self._idle()
                continue
            self._wake.clear()
            response = await self._send(plan)
            if response is None:
                self.session.reset()  # no answer: the stream (the session) is gone
            else:
                self._on_response(response)

    def _plan(self, now_ms: float) -> FollowerPlan[PartitionKey, FollowerFetch]:
        """The next request's partitions (broker.replication.fetch_session.FollowerSession):
        every fetchable one when full, else the changed ones and those back from a back-off.

        After a failed exchange the next full request lists nothing: it only finds out whether
        the leader answers again, and the partitions join the new session incrementally once
        it does (one round trip more). A follower of a dead leader used to plan and encode a
        request of every partition it followed from it at each retry -- 16,700 partitions at
        100,000, while the fencing was moving them away -- and that took 13% of its py-spy
        samples in a kill -9 (the listener applying the fencing had 11%)."""
        session = self.session
        if self._backoff_until_ms:
            for key, until in list(self._backoff_until_ms.items()):
                if until <= now_ms:
                    del self._backoff_until_ms[key]
                    session.mark_changed(key, relist=True)
        listed_max = 0 if self._rpc_backoff_ms and session.full else REQUEST_PARTITIONS_MAX
        return session.plan(self._fetch_of, self._rotated, listed_max)

    def _rotated(self) -> list[PartitionKey]:
        keys = list(self.partitions)
        if len(keys) > 1:
            # Rotate who comes first so one busy partition cannot always fill the response.
            self._rotation = (self._rotation + 1) % len(keys)
            keys = keys[self._rotation:] + keys[:self._rotation]
        return keys

    def _fetch_of(self, key: PartitionKey) -> FollowerFetch | None:
        partition = self.partitions.get(key)
        if partition is None or key in self._backoff_until_ms:
            return None
        request = partition.fetch_request()
        if request is None or request.leader_id != self.leader_id:
            return None
        return request

    async def _idle(self) -> None:
        now_ms = time.monotonic() * 1000
        wait_ms: float = IDLE_WAIT_MAX_MS
        if self._backoff_until_ms:
            wait_ms = min(wait_ms, max(1.0, min(self._backoff_until_ms.values()) - now_ms))
        if self._pause_until_ms > now_ms:
            wait_ms = min(wait_ms, max(1.0, self._pause_until_ms - now_ms))
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), wait_ms / 1000)

    def _request(self, plan: FollowerPlan[PartitionKey, FollowerFetch]) -> pb.FetchRequest:
        manager = self.manager
        request = pb.FetchRequest(
            replica_id=manager.broker_id, replica_broker_epoch=manager.broker_epoch(),
            # Partitions left out of this request (more than one request holds) go in the next
            # one at once: the leader answers without waiting.
            max_wait_ms=0 if self.session.pending else manager.fetch_wait_max_ms, min_bytes=1,
            max_bytes=REPLICA_FETCH_RESPONSE_BYTES_MAX, session_epoch=plan.session_epoch)
        by_topic: dict[bytes, pb.FetchRequest.TopicData] = {}
        for (topic_id, partition_id), fetch in plan.listed:
            topic = by_topic.get(topic_id)
            if topic is None:
                topic = by_topic[topic_id] = request.topics.add(topic_id=topic_id)
            topic.partitions.add(
                partition_id=partition_id, fetch_offset=fetch.fetch_offset,
                current_leader_epoch=fetch.leader_epoch,
                last_fetched_epoch=fetch.last_fetched_epoch,
                log_start_offset=fetch.log_start_offset,
                partition_max_bytes=REPLICA_FETCH_PARTITION_BYTES_MAX)
        forgotten: dict[bytes, list[int]] = {}
        for topic_id, partition_id in plan.forgotten:
            forgotten.setdefault(topic_id, []).append(partition_id)
        for topic_id, partition_ids in forgotten.items():
            request.forgotten.add(topic_id=topic_id, partitions=partition_ids)
        return request

    async def _send(self, plan: FollowerPlan[PartitionKey, FollowerFetch]
                    ) -> pb.FetchResponse | None:
        manager = self.manager
        request = self._request(plan)
        self.full_requests += plan.full
        self.partitions_listed += len(plan.listed)
        self.last_listed = len(plan.listed)
        timeout_s = (manager.fetch_wait_max_ms + FETCH_TIMEOUT_MARGIN_MS) / 1000
        inner = asyncio.get_running_loop().create_task(
            manager.transport.fetch(self.leader_id, request, timeout_s=timeout_s))
        # Stopped just as the fetch failed, nobody reads its failure: not "never retrieved".
        inner.add_done_callback(lambda task: task.cancelled() or task.exception())
        self._in_flight = inner
        try:
            await asyncio.wait((inner,))
        finally:
            self._in_flight = None
            if not inner.done():
                inner.cancel()  # we are being stopped
        if inner.cancelled():
            return None  # re-targeted: build the next request at once
        error = inner.exception()
        if error is not None:
            await self._on_rpc_failure(error)
            return None
        self._rpc_backoff_ms = 0
        self.fetches += 1
        return inner.result()

    async def _on_rpc_failure(self, error: BaseException) -> None:
        manager = self.manager
        self.failures += 1
        if not isinstance(error, TidelogError):
            log.error("broker %d: fetch from %d failed unexpectedly", manager.broker_id,
                      self.leader_id, exc_info=error)
        elif self._rpc_backoff_ms == 0:  # log the first failure of a run, not every retry
            log.info("broker %d: fetch from %d failed: %s", manager.broker_id, self.leader_id,
                     error)
            if isinstance(error, NetworkError):
                manager.on_leader_unreachable(self.leader_id)
        backoff = min(FETCH_BACKOFF_MAX_MS, max(manager.fetch_backoff_ms,
                                                self._rpc_backoff_ms * 2))
        self._rpc_backoff_ms = backoff
        # Equal jitter: fetchers of several followers do not retry in lockstep.
        delay_ms = backoff / 2 + random.random() * backoff / 2
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), delay_ms / 1000)

    def _on_response(self, response: pb.FetchResponse) -> None:
        manager = self.manager
        session = self.session
        now_ms = time.monotonic() * 1000
        if response.error_code != ErrorCode.NONE:
            session.reset()
            if response.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH:
                log.info("broker %d: leader %d has no fetch session for us (%s): fetching "
                         "everything again", manager.broker_id, self.leader_id,
                         response.error_message)
                return
            log.info("broker %d: leader %d refused the fetch: %s %s", manager.broker_id,
                     self.leader_id, ErrorCode.Name(response.error_code), response.error_message)
            self._pause_until_ms = now_ms + manager.fetch_backoff_ms
            return
        for topic in response.topics:
            for answer in topic.partitions:
                key = (topic.topic_id, answer.partition_id)
                fetch = session.sent(key)
                partition = self.partitions.get(key)
                if fetch is None or partition is None or partition.closed:
                    continue  # moved, deleted, forgotten
                try:
                    backoff = partition.on_fetch_response(fetch, answer)
                except Exception:
                    # A bug must not stop replication of every other partition of this leader.
                    log.exception("broker %d: %s: applying a fetch answer failed",
                                  manager.broker_id, partition.name)
                    backoff = ErrorCode.UNKNOWN_SERVER_ERROR
                if backoff is not None:
                    self._backoff_until_ms[key] = now_ms + manager.fetch_backoff_ms
                    session.forget(key)
                else:
                    # Its fetch may have moved (records, truncation, log start, fenced): the
                    # next plan compares; records or a divergence are always answered back.
                    session.mark_changed(key, relist=len(answer.batches) > 0
                                         or answer.HasField("diverging_epoch"))
        session.on_answer(response.next_session_epoch)


class ReplicaFetcherManager:
    """The fetchers of one broker, by leader (see the module doc)."""

    def __init__(self, *, broker_id: int, broker_epoch: Callable[[], int],
                 transport: ReplicaTransport, fetch_wait_max_ms: int,
                 fetch_backoff_ms: int = FETCH_BACKOFF_MS_DEFAULT,
                 on_leader_unreachable: Callable[[int], None] = lambda leader_id: None) -> None:
        if not 0 < fetch_wait_max_ms <= limits.FETCH_WAIT_MS_MAX:
            raise InvariantViolation(
                f"replica.fetch.wait.max.ms {fetch_wait_max_ms} outside "
                f"1..{limits.FETCH_WAIT_MS_MAX}")
        if not 0 < fetch_backoff_ms <= FETCH_BACKOFF_MAX_MS:
            raise InvariantViolation(
                f"fetch backoff {fetch_backoff_ms} ms outside 1..{FETCH_BACKOFF_MAX_MS}")
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.transport = transport
        self.fetch_wait_max_ms = fetch_wait_max_ms
        self.fetch_backoff_ms = fetch_backoff_ms
        #: Told when a fetch from a leader fails on the network (the first of a run of
        #: failures): the broker reports it to the active controller (BrokerLifecycleManager).
        self.on_leader_unreachable = on_leader_unreachable
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._leader_of: dict[PartitionKey, int] = {}
        self._stopping: set[asyncio.Task[None]] = set()  # idle fetchers being stopped
        self._stopped = False

    @property
    def fetchers(self) -> dict[int, ReplicaFetcher]:
        return dict(self._fetchers)

    def leader_of(self, key: PartitionKey) -> int | None:
        return self._leader_of.get(key)

    def add_partition(self, partition: Partition, leader_id: int) -> None:
        """Fetch ``partition`` from ``leader_id`` (moving it from another fetcher if needed)."""
        if self._stopped:
            return
        if not (leader_id >= 0 and leader_id != self.broker_id):
            raise InvariantViolation(
                f"broker {self.broker_id} cannot fetch from leader {leader_id}")
        previous = self._leader_of.get(partition.key)
        if previous is not None and previous != leader_id:
            self._remove_from(previous, partition.key)
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self._fetchers[leader_id] = ReplicaFetcher(self, leader_id)
        self._leader_of[partition.key] = leader_id
        fetcher.add(partition)

    def remove_partition(self, key: PartitionKey) -> None:
        leader_id = self._leader_of.pop(key, None)
        if leader_id is not None:
            self._remove_from(leader_id, key)

    def _remove_from(self, leader_id: int, key: PartitionKey) -> None:
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None:
            return
        fetcher.remove(key)
        if not fetcher.partitions:
            # An idle fetcher would hold a channel and a task for nothing.
            del self._fetchers[leader_id]
            task = asyncio.get_running_loop().create_task(fetcher.stop())
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def stop(self) -> None:
        self._stopped = True
        fetchers, self._fetchers = self._fetchers, {}
        self._leader_of.clear()
        for fetcher in fetchers.values():
            await fetcher.stop()
        for task in list(self._stopping):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.transport.close()
