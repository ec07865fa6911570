"""BrokerService.Produce: validate the request, append each partition through the registry's
``start_produce`` (every partition takes its place in line first, in request order; then the
appends, and one acks=all wait for them all), and answer per partition.

Request-level refusals answer every partition: INVALID_REQUIRED_ACKS (acks not -1/0/1),
RECORD_LIST_TOO_LARGE (above ``produce.request.bytes.max``), NOT_LEADER_OR_FOLLOWER while this
broker's metadata is not confirmed caught up; an unknown partition's own error comes first.
A produce to an internal topic (``__consumer_offsets``) is INVALID_TOPIC_EXCEPTION, before all
else, as in Kafka. Every batch's records are checked before it is appended (CORRUPT_MESSAGE when
they do not decode or disagree with the header; INVALID_RECORD for a keyless record in a
compacted topic), on the event loop or off it, within the request's bounds (RECORD_LIST_TOO_LARGE
past them): broker/produce_checks.py.
A failure after the batch is in the log (the flush, the acks=all wait: KAFKA_STORAGE_ERROR,
NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT) is answered with ``appended=true``: the
batch may yet be committed. Nothing a client sends makes it raise.
"""

from __future__ import annotations

import asyncio
import time

from tidelog.broker.handlers.common import HandlerRegistry, set_error
from tidelog.broker.metrics import outcome_of
from tidelog.broker.partition_writer import PendingAppend, TopicIdPartition
from tidelog.broker.replica_manager import acks_error
from tidelog.errors import InvalidTopicError, RecordListTooLargeError, TidelogError
from tidelog.metadata.topic_names import is_internal
from tidelog.v1 import broker_pb2 as pb

__all__ = ["handle_produce"]


def _request_error(registry: HandlerRegistry, request: pb.ProduceRequest
                   ) -> TidelogError | None:
    """Why every partition of the request is refused, or None."""
    error = acks_error(request.acks)
    if error is None and request.ByteSize() > registry.produce_request_bytes_max:
        error = RecordListTooLargeError(
            f"produce request of {request.ByteSize()} bytes is above the limit of "
            f"{registry.produce_request_bytes_max}")
    return error or registry.metadata_refusal()


def _internal_topic_error(name: str) -> TidelogError | None:
    """Kafka's ReplicaManager.appendToLocalLog: clients may not write the internal topics (the
    group coordinator appends to ``__consumer_offsets`` through the typed
    ``ReplicaManager.append``, never through this handler)."""
    if is_internal(name):
        return InvalidTopicError(f"cannot append to internal topic {name}")
    return None


async def handle_produce(registry: HandlerRegistry,
                         request: pb.ProduceRequest) -> pb.ProduceResponse:
    started = time.perf_counter()
    common = _request_error(registry, request)
    response = pb.ProduceResponse()
    batches: list[tuple[TopicIdPartition, bytes]] = []
    results: list[pb.ProduceResponse.PartitionResponse] = []
    now_ms, monotonic_ms = int(time.time() * 1000), int(time.monotonic() * 1000)
    for topic in request.topics:
        answer = response.topics.add(name=topic.name)
        for data in topic.partitions:
            result = answer.partitions.add(partition_id=data.partition_id, base_offset=-1,
                                           log_append_time_ms=-1, log_start_offset=-1)
            topic_id, _, error = registry.lookup(None, topic.name, data.partition_id)
            error = _internal_topic_error(topic.name) or error or common
            if error is None and topic_id is not None:
                batches.append((TopicIdPartition(topic_id, data.partition_id), data.batch))
                results.append(result)
            elif error is not None:
                set_error(registry, result, error, topic_id, data.partition_id, "produce")
    # Every batch takes its place in its partition's line now, before any await: appends keep
    # the order requests arrive in (broker/produce_checks.py). Most are appended already.
    appending = registry.start_produce(batches, acks=request.acks, now_ms=now_ms,
                                       monotonic_ms=monotonic_ms)
    waiting = [future for future in appending if not future.done()]
    if waiting:
        await asyncio.wait(waiting)  # never cancels them: a later append may wait for one
    pending: list[tuple[pb.ProduceResponse.PartitionResponse, PendingAppend]] = []
    for result, future in zip(results, appending, strict=True):
        appended = future.result()
        if _answer_append(registry, result, appended):
            pending.append((result, appended))
    if pending:
        await _await_acks(registry, pending, request.timeout_ms)
    if registry.metrics is not None:
        registry.metrics.latency["produce", outcome_of(0, response.topics)].observe(
            time.perf_counter() - started)
    return response


def _answer_append(registry: HandlerRegistry, result: pb.ProduceResponse.PartitionResponse,
                   appending: PendingAppend) -> bool:
    """Fill one partition's answer from its append; True when it waits for acks=all."""
    outcome, tp = appending.outcome, appending.tp
    if not outcome.appended:
        if outcome.error is not None:
            set_error(registry, result, outcome.error, tp.topic_id, tp.partition_id, "produce")
        return False
    result.base_offset = outcome.base_offset
    result.log_append_time_ms = outcome.log_append_time_ms
    result.log_start_offset = outcome.log_start_offset
    if outcome.error is not None:
        # It failed after the append (the flush): the batch is in the log and may be
        # committed, so say so; the offsets stay, as they are known.
        result.appended = True
        set_error(registry, result, outcome.error, tp.topic_id, tp.partition_id, "produce")
        return False
    return appending.waiter is not None


async def _await_acks(registry: HandlerRegistry,
                      pending: list[tuple[pb.ProduceResponse.PartitionResponse, PendingAppend]],
                      timeout_ms: int) -> None:
    outcomes = await registry.await_acks([appending for _, appending in pending], timeout_ms)
    for (result, appending), outcome in zip(pending, outcomes, strict=True):
        if outcome.error is not None:
            # In the log; it may yet be committed. The offsets are known, so they are given
            # (the producer fails the batch either way and never re-sequences it).
            result.base_offset = outcome.base_offset
            result.appended = True
            set_error(registry, result, outcome.error, appending.tp.topic_id,
                      appending.tp.partition_id, "produce")
