"""BrokerService.Fetch (consumers) and ReplicaService.Fetch (followers), with the long-poll.

A consumer fetch reads whole batches below the HW, from leaders only, and waits on the
registry's consumer waiters (woken when the HW moves). A follower fetch is refused as a whole
(:func:`replica_fetch_error`) until this broker has registered and its metadata is confirmed
caught up, and unless the follower's broker epoch is exactly its registration's in this
broker's image (KIP-903); otherwise each partition records the follower's LEO (HW, ISR),
answers a diverging epoch, and the fetch waits on the follower waiters (woken by appends).

Both long-poll: up to ``max_wait_ms`` (capped at FETCH_WAIT_MS_MAX) for ``min_bytes``,
re-reading after each wake-up (at most FETCH_PASSES_MAX passes); an error, the deadline, or no
partition to wait for answers at once. The first batch of a response comes whole (progress);
later partitions only what fits in ``max_bytes`` (KIP-74). Nothing a client sends makes a
handler raise: errors are per-partition codes (with a leader hint where a retry elsewhere helps).
"""

from __future__ import annotations

import logging
import time

from broker.handlers.common import HandlerRegistry, error_code, set_error
from broker.metrics import outcome_of
from broker.partition import Partition
from tidelog import limits
from tidelog.errors import (
    InvalidFetchSizeError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    StaleBrokerEpochError,
    TidelogError,
    UnknownServerError,
)
from tidelog.record_batch import parse_batch
from tidelog.v1 import broker_pb2 as pb

__all__ = ["FETCH_PASSES_MAX", "handle_fetch", "handle_replica_fetch", "replica_fetch_error"]

log = logging.getLogger("tidelog.broker.replica_manager")

#: Re-evaluations of one long-poll fetch, at most (each follows a wake-up).
FETCH_PASSES_MAX = 10_000

#: One partition of a fetch: (topic name, topic id, the request's data, the hosted partition,
#: or the error to answer with).
_Target = tuple[str, bytes | None, pb.FetchRequest.PartitionData, Partition | None,
                TidelogError | None]


async def handle_fetch(registry: HandlerRegistry, request: pb.FetchRequest) -> pb.FetchResponse:
    """A consumer's long-poll: whole batches below the HW, leaders only."""
    started = time.perf_counter()
    response = await _long_poll(registry, request, follower=False)
    if registry.metrics is not None:
        result = outcome_of(response.error_code, response.topics)
        registry.metrics.latency["fetch", result].observe(time.perf_counter() - started)
    return response


async def handle_replica_fetch(registry: HandlerRegistry,
                               request: pb.FetchRequest) -> pb.FetchResponse:
    """A follower's fetch (ReplicaService): records its LEO (HW, ISR), answers divergence, and
    long-polls for new data."""
    started = time.perf_counter()
    error = replica_fetch_error(registry, request)
    if error is not None:
        response = pb.FetchResponse(error_code=error_code(error.code),
                                    error_message=error.message)
    else:
        response = await _long_poll(registry, request, follower=True)
    if registry.metrics is not None:
        result = outcome_of(response.error_code, response.topics)
        registry.metrics.latency["replica_fetch", result].observe(time.perf_counter() - started)
    return response


def replica_fetch_error(registry: HandlerRegistry,
                        request: pb.FetchRequest) -> TidelogError | None:
    """Why this broker refuses a follower fetch as a whole, or None.

    Until this broker has registered and the active controller says its metadata caught up, it
    may still believe in a leadership it lost while it was down: it answers no follower
    (NOT_LEADER_OR_FOLLOWER, retriable). A follower is known by its id and the *exact* broker
    epoch of its registration in this broker's image (KIP-903): an older epoch is a previous
    incarnation whose log may have lost data; a newer one is a registration this image has not
    seen yet (the follower retries once it has); both STALE_BROKER_EPOCH."""
    if request.replica_id < 0:
        return InvalidRequestError("ReplicaService.Fetch needs the follower's replica_id")
    broker_id = registry.broker_id
    if registry.broker_epoch() < 0 or not registry.metadata_caught_up():
        return NotLeaderOrFollowerError(
            f"broker {broker_id} has not registered and caught up with the metadata "
            "yet; it leads nothing until then")
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
            limit = data.partition_max_bytes or limits.PARTITION_FETCH_BYTES_MAX_DEFAULT
            if data.partition_max_bytes < 0:
                error = InvalidFetchSizeError(
                    f"partition_max_bytes must be > 0, got {data.partition_max_bytes}")
            else:
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
        topic_metrics = partition.metrics
        if topic_metrics is not None:
            topic_metrics.bytes_out.inc(size)
            topic_metrics.messages_out.inc(sum(parse_batch(b).record_count for b in batches))
    return size


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
