"""BrokerService.DescribeLogs: the replicas this broker hosts (all, or the asked topics and
partitions), each with its role, leader epoch, log start/end offsets, HW and size; an asked
topic or partition that does not exist is answered UNKNOWN_TOPIC_OR_PARTITION (partition -1 for
a whole unknown topic)."""

from __future__ import annotations

import time

from tidelog.broker.handlers.common import HandlerRegistry
from tidelog.broker.metrics import outcome_of
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode

__all__ = ["handle_describe_logs"]


async def handle_describe_logs(registry: HandlerRegistry,
                               request: pb.DescribeLogsRequest) -> pb.DescribeLogsResponse:
    started = time.perf_counter()
    response = pb.DescribeLogsResponse(broker_id=registry.broker_id)
    wanted: dict[str, set[int]] | None = None
    if request.topics:
        wanted = {t.name: set(t.partitions) for t in request.topics}
    for partition in sorted(registry.partitions(),
                            key=lambda p: (p.topic_name, p.partition_id)):
        if wanted is not None:
            ids = wanted.get(partition.topic_name)
            if ids is None or (ids and partition.partition_id not in ids):
                continue
        state, plog = partition.state, partition.log
        response.partitions.add(
            topic=partition.topic_name, partition_id=partition.partition_id,
            is_leader=state.is_leader, leader_epoch=state.leader_epoch,
            log_start_offset=plog.log_start_offset, log_end_offset=plog.log_end_offset,
            high_watermark=plog.high_watermark, size_bytes=plog.size_bytes)
    for name, ids in (wanted or {}).items():
        topic = registry.image.topics.get(name)
        missing = [i for i in ids if topic is None or i not in topic.partitions]
        if topic is None and not ids:
            missing = [-1]
        for partition_id in sorted(missing):
            response.partitions.add(topic=name, partition_id=partition_id,
                                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if registry.metrics is not None:
        # The response's flat partition list is its one "topic" of partition answers.
        registry.metrics.latency["describe_logs", outcome_of(0, [response])].observe(
            time.perf_counter() - started)
    return response
