"""BrokerService.Fetch (consumers) and ReplicaService.Fetch (followers), with the long-poll.

A consumer fetch reads whole batches below the HW, from leaders only, and waits on the
registry's consumer waiters (woken when the HW moves). A follower fetch is refused as a whole
(:func:`replica_fetch_error`) until this broker has registered and its metadata is confirmed
caught up, and unless the follower's broker epoch is exactly its registration's in this
broker's image (KIP-903); otherwise each partition records the follower's LEO (HW, ISR),
answers a diverging epoch, and the fetch waits on the follower waiters (woken by appends).

A follower's FetchStream is a fetch session (:class:`ReplicaFetchSession`, the shell around
broker.replication.fetch_session.LeaderSession; the wire contract is in broker.proto): after the
full first request, a round evaluates only the partitions the request lists and those marked
dirty since (the replica manager's wake-ups: appends, HW, role, ISR, eligibility, deletion),
parks on the session's own event, and answers only the partitions with something new. The unary
ReplicaService.Fetch keeps no session and answers an incremental request
INVALID_FETCH_SESSION_EPOCH.

Both long-poll: up to ``max_wait_ms`` (capped at FETCH_WAIT_MS_MAX) for ``min_bytes``,
re-reading after each wake-up (at most FETCH_PASSES_MAX passes); an error, the deadline, or no
partition to wait for answers at once. The first batch of a response comes whole (progress);
later partitions only what fits in ``max_bytes`` (KIP-74). Nothing a client sends makes a
handler raise: errors are per-partition codes (with a leader hint where a retry elsewhere helps).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from tidelog import limits
from tidelog.broker.handlers.common import HandlerRegistry, error_code, set_error
from tidelog.broker.metrics import outcome_of
from tidelog.broker.partition import Partition, PartitionKey
from tidelog.broker.replication.fetch_session import FULL_SESSION_EPOCH, LeaderSession, Refusal
from tidelog.errors import (
    InvalidFetchSessionEpochError,
    InvalidFetchSizeError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    StaleBrokerEpochError,
    TidelogError,
    UnknownServerError,
)
from tidelog.record_batch import parse_batch
from tidelog.v1 import broker_pb2 as pb

if TYPE_CHECKING:
    from tidelog.broker.handlers.consumer_session import ConsumerFetchSession

__all__ = [
    "FETCH_PASSES_MAX",
    "FetchSessionStats",
    "ParkedRounds",
    "ReplicaFetchSession",
    "handle_fetch",
    "handle_replica_fetch",
    "replica_fetch_error",
]

log = logging.getLogger("tidelog.broker.replica_manager")

#: Re-evaluations of one long-poll fetch, at most (each follows a wake-up).
FETCH_PASSES_MAX = 10_000

#: One partition of a fetch: (topic name, topic id, the request's data, the hosted partition,
#: or the error to answer with).
_Target = tuple[str, bytes | None, pb.FetchRequest.PartitionData, Partition | None,
                TidelogError | None]


async def handle_fetch(registry: HandlerRegistry, request: pb.FetchRequest) -> pb.FetchResponse:
    """A consumer's long-poll: whole batches below the HW, leaders only. Without a session:
    the unary call keeps none (a session epoch is refused)."""
    started = time.perf_counter()
    if request.session_epoch != FULL_SESSION_EPOCH:
        error = InvalidFetchSessionEpochError(
            f"session epoch {request.session_epoch}: only BrokerService.FetchStream keeps "
            "consumer fetch sessions")
        response = pb.FetchResponse(error_code=error_code(error.code), error_message=error.message)
    else:
        response = await _long_poll(registry, request, follower=False)
    return _observed(registry, "fetch", started, response)


async def handle_session_fetch(registry: HandlerRegistry, request: pb.FetchRequest,
                               session: ConsumerFetchSession) -> pb.FetchResponse:
    """A consumer's fetch within its FetchStream's session (broker.handlers.consumer_session)."""
    started = time.perf_counter()
    return _observed(registry, "fetch", started, await session.serve(request))


async def handle_replica_fetch(registry: HandlerRegistry, request: pb.FetchRequest,
                               session: ReplicaFetchSession | None = None) -> pb.FetchResponse:
    """A follower's fetch (ReplicaService): records its LEO (HW, ISR), answers divergence, and
    long-polls for new data; within ``session`` (a FetchStream's) incrementally."""
    started = time.perf_counter()
    if session is not None:
        session.round_begins()
    error = replica_fetch_error(registry, request)
    if error is None and session is None and request.session_epoch != FULL_SESSION_EPOCH:
        error = InvalidFetchSessionEpochError(
            f"session epoch {request.session_epoch}: only ReplicaService.FetchStream keeps "
            "fetch sessions")
    if error is not None:
        if session is not None:
            session.reset()
        response = pb.FetchResponse(error_code=error_code(error.code),
                                    error_message=error.message)
    elif session is not None:
        response = await session.serve(request)
    else:
        response = await _long_poll(registry, request, follower=True)
    return _observed(registry, "replica_fetch", started, response)


def _observed(registry: HandlerRegistry, api: str, started: float,
              response: pb.FetchResponse) -> pb.FetchResponse:
    """``response``, its latency since ``started`` (perf_counter) counted under ``api``."""
    if registry.metrics is not None:
        result = outcome_of(response.error_code, response.topics)
        registry.metrics.latency[api, result].observe(time.perf_counter() - started)
    return response


def partition_limit(data: pb.FetchRequest.PartitionData) -> tuple[int, TidelogError | None]:
    """A partition's byte limit in a fetch (0 = the default), or why it is refused."""
    if data.partition_max_bytes < 0:
        return 0, InvalidFetchSizeError(
            f"partition_max_bytes must be > 0, got {data.partition_max_bytes}")
    return data.partition_max_bytes or limits.PARTITION_FETCH_BYTES_MAX_DEFAULT, None


def replica_fetch_error(registry: HandlerRegistry,
                        request: pb.FetchRequest) -> TidelogError | None:
    """Why this broker refuses a follower fetch as a whole, or None.

    Until this broker has registered, the active controller says its metadata caught up, and it
    is unfenced, it may still believe in a leadership it lost while it was down (or that its
    old incarnation held, being moved away in parts): it answers no follower
    (NOT_LEADER_OR_FOLLOWER, retriable). A follower is known by its id and the *exact* broker
    epoch of its registration in this broker's image (KIP-903): an older epoch is a previous
    incarnation whose log may have lost data; a newer one is a registration this image has not
    seen yet (the follower retries once it has); both STALE_BROKER_EPOCH."""
    if request.replica_id < 0:
        return InvalidRequestError("ReplicaService.Fetch needs the follower's replica_id")
    broker_id = registry.broker_id
    if registry.broker_epoch() < 0 or not registry.metadata_caught_up():
        return NotLeaderOrFollowerError(
            f"broker {broker_id} has not registered, caught up with the metadata and been "
            "unfenced yet; it leads nothing until then")
    registration = registry.image.cluster.broker(request.replica_id)
    if registration is None:
        return StaleBrokerEpochError(
            f"broker {request.replica_id} is not registered in broker {broker_id}'s "
            "metadata")
    if request.replica_broker_epoch != registration.broker_epoch:
        return StaleBrokerEpochError(
            f"broker {request.replica_id} fetches with broker epoch "
            f"{request.replica_broker_epoch}, not its registration's "
            f"{registration.broker_epoch}")
    return None


async def _long_poll(registry: HandlerRegistry, request: pb.FetchRequest, *,
                     follower: bool) -> pb.FetchResponse:
    max_bytes = request.max_bytes or limits.FETCH_BYTES_MAX_DEFAULT
    if max_bytes < 0:
        error = InvalidFetchSizeError(f"max_bytes must be > 0, got {request.max_bytes}")
        return pb.FetchResponse(error_code=error_code(error.code), error_message=error.message)
    max_wait_ms = min(max(request.max_wait_ms, 0), limits.FETCH_WAIT_MS_MAX)
    deadline = time.monotonic() + max_wait_ms / 1000
    targets = _fetch_targets(registry, request)
    keys = [t[3].key for t in targets if t[3] is not None]
    waiters = registry.follower_waiters if follower else registry.consumer_waiters
    response = pb.FetchResponse()
    for _ in range(FETCH_PASSES_MAX):
        response = pb.FetchResponse()
        total, errors = _fetch_pass(registry, request, targets, response, max_bytes,
                                    follower=follower)
        remaining_s = deadline - time.monotonic()
        if total >= request.min_bytes or errors or remaining_s <= 0 or not keys:
            break
        if not await waiters.wait(keys, remaining_s) and time.monotonic() < deadline:
            break  # too many waiting fetches: answer what there is
    return response


def _fetch_targets(registry: HandlerRegistry, request: pb.FetchRequest) -> list[_Target]:
    targets: list[_Target] = []
    for topic in request.topics:
        for data in topic.partitions:
            topic_id, partition, error = registry.lookup(topic.topic_id or None, topic.name,
                                                         data.partition_id)
            name = topic.name
            if partition is not None:
                name = partition.topic_name
            targets.append((name, topic_id, data, partition, error))
    return targets


def _fetch_pass(registry: HandlerRegistry, request: pb.FetchRequest, targets: list[_Target],
                response: pb.FetchResponse, max_bytes: int, *,
                follower: bool) -> tuple[int, bool]:
    """Read every partition once into ``response``; (bytes read, whether any errored)."""
    total = 0
    errors = False
    monotonic_ms = int(time.monotonic() * 1000)
    topic_answers: dict[tuple[str, bytes | None], pb.FetchResponse.TopicData] = {}
    api = "replica_fetch" if follower else "fetch"
    for name, topic_id, data, partition, error in targets:
        topic_answer = topic_answers.get((name, topic_id))
        if topic_answer is None:
            topic_answer = topic_answers[(name, topic_id)] = response.topics.add(
                name=name, topic_id=topic_id or b"")
        answer = topic_answer.partitions.add(partition_id=data.partition_id,
                                             high_watermark=-1, last_stable_offset=-1,
                                             log_start_offset=-1, log_end_offset=-1)
        if error is None and partition is not None:
            limit, error = partition_limit(data)
            if error is None:
                # The first batch of the response comes whole (progress); later partitions
                # only what fits in what is left.
                budget = min(limit, max_bytes - total)
                try:
                    read = (_read_for_follower(request, partition, data, answer, budget,
                                               monotonic_ms)
                            if follower else
                            _read_for_consumer(partition, data, answer, budget,
                                               first=total == 0))
                    total += read
                except TidelogError as e:
                    error = e
                except Exception as e:  # a bug: answer it, keep serving the rest
                    log.exception("broker %d: fetch of %s failed", registry.broker_id,
                                  partition.name)
                    error = UnknownServerError(f"{type(e).__name__}: {e}")
        if error is not None:
            errors = True
            set_error(registry, answer, error, topic_id, data.partition_id, api)
    return total, errors


def _read_for_consumer(partition: Partition, data: pb.FetchRequest.PartitionData,
                       answer: pb.FetchResponse.PartitionData, budget: int, *,
                       first: bool) -> int:
    read = partition.read_for_consumer(data.fetch_offset, data.current_leader_epoch,
                                       max(budget, 1))
    batches = read.batches
    size = sum(len(b) for b in batches)
    if batches and not first and size > budget:
        batches, size = [], 0  # does not fit behind earlier partitions (Kafka: KIP-74)
    answer.high_watermark = answer.last_stable_offset = read.high_watermark
    answer.log_start_offset = read.log_start_offset
    answer.log_end_offset = read.log_end_offset
    if batches:
        answer.batches.extend(batches)
        count_consumer_out(partition, batches, size)
    return size


def count_consumer_out(partition: Partition, batches: Sequence[bytes], size: int) -> None:
    """Count batches answered to a consumer in the topic's bytes_out and messages_out."""
    topic_metrics = partition.metrics
    if topic_metrics is not None:
        topic_metrics.bytes_out.inc(size)
        topic_metrics.messages_out.inc(sum(parse_batch(b).record_count for b in batches))


def _read_for_follower(request: pb.FetchRequest, partition: Partition,
                       data: pb.FetchRequest.PartitionData,
                       answer: pb.FetchResponse.PartitionData, budget: int,
                       monotonic_ms: int) -> int:
    decision, batches = partition.serve_follower_fetch(
        request.replica_id, data, max_bytes=max(budget, 0), monotonic_ms=monotonic_ms,
        broker_epoch=request.replica_broker_epoch)
    answer.high_watermark = answer.last_stable_offset = decision.high_watermark
    answer.log_start_offset = decision.log_start_offset
    answer.log_end_offset = decision.log_end_offset
    if decision.diverging_epoch is not None:
        answer.diverging_epoch.epoch = decision.diverging_epoch.epoch
        answer.diverging_epoch.end_offset = decision.diverging_epoch.end_offset
    if decision.error is not None:
        raise decision.error
    answer.batches.extend(batches)
    return sum(len(b) for b in batches)


# --- fetch sessions (ReplicaService.FetchStream) ---------------------------------------------


@dataclass(slots=True)
class FetchSessionStats:
    """What a session did (tests, benchmarks): requests, and partitions listed in them,
    forgotten, evaluated and answered."""

    rounds: int = 0
    full_rounds: int = 0
    refused: int = 0
    listed: int = 0
    forgotten: int = 0
    evaluated: int = 0
    answered: int = 0
    #: The last round's (listed, evaluated, answered).
    last: tuple[int, int, int] = (0, 0, 0)

    def end_round(self, registry: HandlerRegistry, kind: str, listed: int, evaluated: int,
                  answered: int) -> None:
        """Count a round's partitions here and in the broker's
        tidelog_broker_fetch_session_partitions_total{kind,step}."""
        self.evaluated += evaluated
        self.answered += answered
        self.last = (listed, evaluated, answered)
        metrics = registry.metrics
        if metrics is not None:
            counter = metrics.fetch_session_partitions
            for step, count in zip(("listed", "evaluated", "answered"), self.last, strict=True):
                if count:
                    counter.labels(kind, step).inc(count)


class ParkedRounds:
    """What a fetch session's round parks on (both kinds of session): the event its waiters
    set, and whether a round is parked now."""

    __slots__ = ("event", "parked")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.parked = False

    async def gather(self, take_dirty: Callable[[], Sequence[PartitionKey]],
                     evaluate: Callable[[Sequence[PartitionKey], int], tuple[int, bool]],
                     total: int, urgent: bool, min_bytes: int, deadline: float,
                     stop: Callable[[], bool]) -> tuple[int, int]:
        """Until ``min_bytes`` are gathered, something is urgent, ``stop()`` or ``deadline``
        (time.monotonic()): park, then evaluate what was marked dirty meanwhile. Returns the
        bytes gathered and how many partitions these passes evaluated."""
        evaluated = 0
        for _ in range(FETCH_PASSES_MAX):
            if total >= min_bytes or urgent or stop():
                break
            self.parked = True
            try:
                if not await self._woken(deadline):
                    break
            finally:
                self.parked = False
            keys = take_dirty()
            evaluated += len(keys)
            total, urgent = evaluate(keys, total)
        return total, evaluated

    async def _woken(self, deadline: float) -> bool:
        remaining_s = deadline - time.monotonic()
        if remaining_s <= 0:
            return False
        try:
            async with asyncio.timeout(remaining_s):
                await self.event.wait()
        except TimeoutError:
            return False
        self.event.clear()
        return True


class ReplicaFetchSession:
    """The leader's end of one follower's FetchStream (see the module doc): the pure
    :class:`~broker.replication.fetch_session.LeaderSession` plus the event a parked round
    waits on. Registered with the registry's follower waiters while the stream is open; the
    stream's end must call :meth:`close`."""

    def __init__(self, registry: HandlerRegistry) -> None:
        self._registry = registry
        self._core: LeaderSession[PartitionKey, pb.FetchRequest.PartitionData] = LeaderSession()
        self._rounds = ParkedRounds()
        self._closed = False
        # answer_now: requests read from the stream, rounds begun, and the request a nudge was
        # about (the last one read when it came): a nudge read before its request's round
        # began (the stream is read ahead) still counts for that round, a stale one does not.
        self._requests_read = 0
        self._rounds_begun = 0
        self._nudged_request = 0
        #: The hosted partition each key was last evaluated on (repeated fetches go to its core).
        self._hosted: dict[PartitionKey, Partition] = {}
        #: The partition being evaluated: its own effects (a HW it moved) are in its answer.
        self._evaluating: PartitionKey | None = None
        self.stats = FetchSessionStats()
        registry.follower_waiters.add_session(self)

    # --- FetchSessionWaiter (broker.delayed) ---------------------------------------------------

    @property
    def replica_id(self) -> int:
        return self._core.replica_id

    @property
    def parked(self) -> bool:
        return self._rounds.parked

    def mark_dirty(self, key: Hashable) -> None:
        if key == self._evaluating:
            return  # its answer, being made, has it
        pkey = cast(PartitionKey, key)  # the waiters' keys are PartitionKeys
        mark = self._core.mark_dirty(pkey)
        if mark is None:
            return
        if mark.repeated_at_ms is not None:
            self._fetched_again(pkey, mark.repeated_at_ms)
        self._rounds.event.set()

    def mark_all_dirty(self) -> None:
        marks = self._core.mark_all_dirty()
        for key, mark in marks:
            if mark.repeated_at_ms is not None:
                self._fetched_again(key, mark.repeated_at_ms)
        if marks:
            self._rounds.event.set()

    def wake(self) -> None:
        self._rounds.event.set()

    def request_read(self) -> None:
        """The stream read a (real) request: its round is the next one to begin."""
        self._requests_read += 1

    def round_begins(self) -> None:
        """handle_replica_fetch took the next request (served or refused)."""
        self._rounds_begun += 1
        # (A caller that does not read ahead need not call request_read.)
        self._requests_read = max(self._requests_read, self._rounds_begun)

    def answer_now(self) -> None:
        """The follower's nudge (FetchRequest.answer_now) about the request it has in flight,
        the last one read: its round, parked or not begun yet, answers with what it has
        instead of waiting, and the follower's next request lists what it added. A nudge that
        crossed that request's answer is stale and changes nothing."""
        self._nudged_request = self._requests_read
        self._rounds.event.set()

    @property
    def _answer_now(self) -> bool:
        return self._nudged_request >= self._rounds_begun > 0

    # --- the stream ----------------------------------------------------------------------------

    def reset(self) -> None:
        """The request was refused as a whole: the follower starts over with a full one."""
        self._record_repeated_fetches()
        self._core.reset()
        self._hosted.clear()

    def close(self) -> None:
        """The stream ended: record the repeated fetches and stop being woken."""
        if self._closed:
            return
        self._closed = True
        self._registry.follower_waiters.remove_session(self)
        self._record_repeated_fetches()
        self._core.reset()
        self._hosted.clear()
        self._rounds.event.set()

    def _record_repeated_fetches(self) -> None:
        for key, at_ms in self._core.closing():
            self._fetched_again(key, at_ms)

    def _fetched_again(self, key: PartitionKey, at_ms: int) -> None:
        partition = self._hosted.get(key)
        if partition is not None and not partition.closed:
            partition.state.on_follower_fetch_repeated(self._core.replica_id, at_ms=at_ms)

    async def serve(self, request: pb.FetchRequest) -> pb.FetchResponse:
        """One request of the stream (already checked by handle_replica_fetch)."""
        max_bytes = request.max_bytes or limits.FETCH_BYTES_MAX_DEFAULT
        if max_bytes < 0:
            self.reset()
            error: TidelogError = InvalidFetchSizeError(
                f"max_bytes must be > 0, got {request.max_bytes}")
            return pb.FetchResponse(error_code=error_code(error.code),
                                    error_message=error.message)
        now = time.monotonic()
        max_wait_ms = min(max(request.max_wait_ms, 0), limits.FETCH_WAIT_MS_MAX)
        deadline = now + max_wait_ms / 1000
        listed: list[tuple[PartitionKey, pb.FetchRequest.PartitionData]] = []
        answers: dict[PartitionKey, tuple[pb.FetchResponse.PartitionData, int]] = {}
        names: dict[bytes, str] = {}
        for topic in request.topics:
            for data in topic.partitions:
                if topic.topic_id:
                    listed.append(((topic.topic_id, data.partition_id), data))
                else:  # a session keys partitions by topic id
                    answer = _blank_answer(data.partition_id)
                    set_error(self._registry, answer, InvalidRequestError(
                        "a fetch session names topics by topic_id"), None, data.partition_id,
                        "replica_fetch")
                    answers[(b"", data.partition_id)] = (answer, 0)
                    names[b""] = topic.name
        invalid = bool(answers)
        forgotten = [(topic.topic_id, p) for topic in request.forgotten for p in topic.partitions]
        decision = self._core.begin_round(
            session_epoch=request.session_epoch, replica_id=request.replica_id,
            broker_epoch=request.replica_broker_epoch, listed=listed, forgotten=forgotten,
            now_ms=int(now * 1000))
        stats = self.stats
        stats.rounds += 1
        if isinstance(decision, Refusal):
            stats.refused += 1
            self.reset()
            return pb.FetchResponse(error_code=error_code(decision.error.code),
                                    error_message=decision.error.message)
        if decision.full:
            stats.full_rounds += 1
            self._hosted.clear()
        for key in forgotten:
            self._hosted.pop(key, None)
        stats.listed += len(listed)
        stats.forgotten += len(forgotten)
        self._rounds.event.clear()
        total, urgent = self._evaluate(request, decision.evaluate, answers, names, 0, max_bytes)
        total, more = await self._rounds.gather(
            self._core.take_dirty,
            lambda keys, so_far: self._evaluate(request, keys, answers, names, so_far, max_bytes),
            total, urgent or invalid, request.min_bytes, deadline,
            lambda: self._closed or self._answer_now)
        evaluated = len(decision.evaluate) + more
        response = pb.FetchResponse(next_session_epoch=decision.next_session_epoch)
        by_topic: dict[bytes, list[pb.FetchResponse.PartitionData]] = {}
        for (topic_id, _), (answer, _) in answers.items():
            by_topic.setdefault(topic_id, []).append(answer)
        for topic_id, partitions in by_topic.items():
            response.topics.add(name=names.get(topic_id, ""), topic_id=topic_id,
                                partitions=partitions)
        stats.end_round(self._registry, "follower", len(listed), evaluated, len(answers))
        return response

    def _evaluate(self, request: pb.FetchRequest, keys: Iterable[PartitionKey],
                  answers: dict[PartitionKey, tuple[pb.FetchResponse.PartitionData, int]],
                  names: dict[bytes, str], total: int, max_bytes: int) -> tuple[int, bool]:
        """Evaluate ``keys`` at their cached fetch into ``answers`` (those the answer
        includes); returns (bytes answered, whether an answer must go now: an error or a
        diverging epoch)."""
        registry, core = self._registry, self._core
        replica_id, broker_epoch = request.replica_id, request.replica_broker_epoch
        monotonic_ms = int(time.monotonic() * 1000)
        urgent = False
        for key in keys:
            data = core.fetch_of(key)
            if data is None:
                continue  # forgotten meanwhile
            topic_id, partition, error = registry.lookup(key[0], "", key[1])
            answer = _blank_answer(key[1])
            size = 0
            more = diverging = False
            if partition is None:
                self._hosted.pop(key, None)
            else:
                self._hosted[key] = partition
                names[key[0]] = partition.topic_name
            if error is None and partition is not None:
                limit, error = partition_limit(data)
                if error is None:
                    budget = max(min(limit, max_bytes - total), 0)
                    self._evaluating = key
                    try:
                        decision, batches = partition.serve_follower_fetch(
                            replica_id, data, max_bytes=budget, monotonic_ms=monotonic_ms,
                            broker_epoch=broker_epoch)
                        answer.high_watermark = decision.high_watermark
                        answer.last_stable_offset = decision.high_watermark
                        answer.log_start_offset = decision.log_start_offset
                        answer.log_end_offset = decision.log_end_offset
                        if decision.diverging_epoch is not None:
                            diverging = True
                            answer.diverging_epoch.epoch = decision.diverging_epoch.epoch
                            answer.diverging_epoch.end_offset = \
                                decision.diverging_epoch.end_offset
                        error = decision.error
                        if batches:
                            answer.batches.extend(batches)
                            size = sum(len(b) for b in batches)
                        elif decision.should_read:
                            more = decision.fetch_offset < decision.log_end_offset
                    except TidelogError as e:
                        error = e
                    except Exception as e:  # a bug: answer it, keep serving the rest
                        log.exception("broker %d: fetch of %s failed", registry.broker_id,
                                      partition.name)
                        error = UnknownServerError(f"{type(e).__name__}: {e}")
                    finally:
                        self._evaluating = None
            if error is not None:
                set_error(registry, answer, error, topic_id, key[1], "replica_fetch")
            if core.on_evaluated(key, high_watermark=answer.high_watermark,
                                 log_start_offset=answer.log_start_offset, records=size > 0,
                                 error=error is not None, diverging=diverging, more=more):
                previous = answers.get(key)
                if previous is not None:
                    total -= previous[1]
                answers[key] = (answer, size)
                total += size
                urgent = urgent or error is not None or diverging
        return total, urgent


def _blank_answer(partition_id: int) -> pb.FetchResponse.PartitionData:
    return pb.FetchResponse.PartitionData(partition_id=partition_id, high_watermark=-1,
                                          last_stable_offset=-1, log_start_offset=-1,
                                          log_end_offset=-1)
