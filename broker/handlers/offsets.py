"""BrokerService.ListOffsets: per partition, the offset for a timestamp, from the leader.

-1 (latest) is the HW, -2 (earliest) the log start offset, -3 (KIP-734) the record with the
largest timestamp below the HW, a time in ms the first record at or after it below the HW (none:
offset -1). Any other negative timestamp is INVALID_REQUEST; a stale ``current_leader_epoch`` is
FENCED_LEADER_EPOCH (with a leader hint). Each answer carries the leader epoch of its offset.
"""

from __future__ import annotations

import time

from tidelog.broker.handlers.common import HandlerRegistry, set_error
from tidelog.broker.metrics import outcome_of
from tidelog.broker.partition import Partition
from tidelog.errors import InvalidRequestError, TidelogError
from tidelog.v1 import broker_pb2 as pb

__all__ = ["handle_list_offsets"]

_LATEST, _EARLIEST, _MAX_TIMESTAMP = -1, -2, -3


async def handle_list_offsets(registry: HandlerRegistry,
                              request: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
    started = time.perf_counter()
    response = pb.ListOffsetsResponse()
    for topic in request.topics:
        answer = response.topics.add(name=topic.name)
        for data in topic.partitions:
            result = answer.partitions.add(partition_id=data.partition_id, timestamp=-1,
                                           offset=-1, leader_epoch=-1)
            topic_id, partition, error = registry.lookup(None, topic.name, data.partition_id)
            if error is None and partition is not None:
                try:
                    _list_offset(partition, data, result)
                except TidelogError as e:
                    error = e
            if error is not None:
                set_error(registry, result, error, topic_id, data.partition_id, "list_offsets")
    if registry.metrics is not None:
        registry.metrics.latency["list_offsets", outcome_of(0, response.topics)].observe(
            time.perf_counter() - started)
    return response


def _list_offset(partition: Partition, data: pb.ListOffsetsRequest.PartitionData,
                 result: pb.ListOffsetsResponse.PartitionData) -> None:
    error = partition.state.check_leader_epoch(data.current_leader_epoch)
    if error is not None:
        raise error
    plog = partition.log
    hw = plog.high_watermark
    timestamp = data.timestamp
    if timestamp == _LATEST:
        result.offset, result.leader_epoch = hw, _epoch_at(plog.epoch_entries, hw - 1)
    elif timestamp == _EARLIEST:
        start = plog.log_start_offset
        result.offset, result.leader_epoch = start, _epoch_at(plog.epoch_entries, start)
    elif timestamp == _MAX_TIMESTAMP:
        # KIP-734: the record with the largest timestamp (below the HW).
        segments = plog.segments
        if segments:
            largest = max(s.max_timestamp_ms for s in segments)
            found = plog.offset_for_timestamp(largest, max_offset=hw)
            if found is not None:
                result.offset, result.timestamp = found.offset, found.timestamp_ms
                result.leader_epoch = found.leader_epoch
    elif timestamp >= 0:
        found = plog.offset_for_timestamp(timestamp, max_offset=hw)
        if found is not None:
            result.offset, result.timestamp = found.offset, found.timestamp_ms
            result.leader_epoch = found.leader_epoch
    else:
        raise InvalidRequestError(
            f"timestamp {timestamp}: use -1 (latest), -2 (earliest), -3 (max timestamp) "
            "or a time in ms")


def _epoch_at(entries: list[tuple[int, int]], offset: int) -> int:
    """The leader epoch whose range holds ``offset`` (-1 when none)."""
    epoch = -1
    for entry_epoch, start in entries:
        if start > offset:
            break
        epoch = entry_epoch
    return epoch
