"""The broker's request outcome label and log size gauge (broker/metrics.py), on real partitions
and real RocksDB, in-process.

What it checks:

* ``request_latency_seconds{api, outcome}``: a produce to an unknown topic, a fetch and a
  ListOffsets of an unknown partition and a DescribeLogs naming one are counted
  ``outcome="error"``; answers without an error code ``outcome="ok"``; which answers are errors
  (:func:`broker.metrics.outcome_of`: request-level or any partition's code);
* ``log_size_bytes{topic, partition}``: set by the timer's gauge job on the leader and the
  follower to the log's size, and gone once the topic is deleted.

How: the in-process cluster of tests/unit/test_replica_manager.py (the real handlers, as the
gRPC servicers call them).
"""

from __future__ import annotations

from pathlib import Path

from test_replica_manager import Cluster, batch, scenario

from tidelog.broker.handlers import handle_describe_logs, handle_list_offsets
from tidelog.broker.metrics import ERROR, OK, outcome_of
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode


def requests(c: Cluster, api: str, outcome: str, broker: int = 1) -> float:
    value = c.registries[broker].get_sample_value(
        "tidelog_broker_request_latency_seconds_count", {"api": api, "outcome": outcome})
    assert value is not None, "every (api, outcome) series exists from the start"
    return value


def log_size(c: Cluster, broker: int, topic: str, partition: int = 0) -> float | None:
    return c.registries[broker].get_sample_value(
        "tidelog_broker_log_size_bytes", {"topic": topic, "partition": str(partition)})


def test_answers_with_an_error_code_are_counted_as_errors(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1]])
        assert requests(c, "produce", ERROR) == 0
        assert (await c.produce("t", batch(b"a"))).error_code == ErrorCode.NONE
        unknown = await c.produce("nope", batch(b"a"), broker=1)
        assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, unknown
        assert (requests(c, "produce", OK), requests(c, "produce", ERROR)) == (1, 1)

        assert (await c.fetch("t", 0)).error_code == ErrorCode.NONE
        assert (await c.fetch("t", 0, partition=7, broker=1)).error_code != ErrorCode.NONE
        assert (requests(c, "fetch", OK), requests(c, "fetch", ERROR)) == (1, 1)

        offsets = pb.ListOffsetsRequest()
        offsets.topics.add(name="t").partitions.add(partition_id=9, timestamp=-1)
        await handle_list_offsets(c.managers[1], offsets)
        assert requests(c, "list_offsets", ERROR) == 1

        logs = pb.DescribeLogsRequest()
        logs.topics.add(name="t", partitions=[0, 9])
        await handle_describe_logs(c.managers[1], logs)
        await handle_describe_logs(c.managers[1], pb.DescribeLogsRequest())
        assert (requests(c, "describe_logs", OK), requests(c, "describe_logs", ERROR)) == (1, 1)
    scenario(tmp_path, body, broker_ids=(1,))


def test_outcome_is_error_for_a_request_or_any_partition_error_code() -> None:
    response = pb.ProduceResponse()
    topic = response.topics.add(name="t")
    topic.partitions.add(partition_id=0)
    assert outcome_of(0, response.topics) == OK
    assert outcome_of(ErrorCode.NOT_CONTROLLER, response.topics) == ERROR
    topic.partitions.add(partition_id=1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert outcome_of(0, response.topics) == ERROR
    assert outcome_of(0) == OK


def test_log_size_is_reported_for_each_hosted_replica_until_the_partition_goes(tmp_path: Path
                                                                             ) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2]])
        c.create_topic("other", [[1]])
        for i in range(5):
            await c.produce("t", batch(b"value-%d" % i))
        await c.converged("t", (1, 2))
        for broker in (1, 2):
            c.managers[broker].run_job("gauges")
            hosted = c.managers[broker].partition(c.controller.topic_id("t"), 0)
            assert hosted is not None and hosted.log.size_bytes > 0
            assert log_size(c, broker, "t") == hosted.log.size_bytes
        assert log_size(c, 1, "other") == 0

        deleted = c.controller.submit(c.controller.logic.handle_delete_topics(
            cpb.DeleteTopicsRequest(names=["t"]), c.controller.now_ms)).response
        assert deleted.error_code == ErrorCode.NONE, deleted
        c.publish()
        for broker in (1, 2):
            c.managers[broker].run_job("gauges")
            assert log_size(c, broker, "t") is None, "a deleted partition's series goes"
        assert log_size(c, 1, "other") == 0
    scenario(tmp_path, body, broker_ids=(1, 2))
