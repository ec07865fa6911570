"""Admin requests larger than one metadata batch are refused up front.

What it checks: the byte bound the controller puts on a request's records
(``metadata_batch_bytes`` against limits.METADATA_BATCH_BYTES_MAX, which the Raft adapter's
batch limit must hold), a CreateTopics within the partition-count limit whose records would
still not fit (replication factor 16, large broker ids) refused with POLICY_VIOLATION naming
both sizes while the controller keeps working, and CreatePartitions counted across topics. The
count limit's golden scenario is testdata/controller/request_limits.txt.

How: the pure ControllerLogic through tests/unit/controller_testkit.py; no I/O.
"""

from __future__ import annotations

from controller_testkit import TestCluster, create_topic

from tidelog import limits
from tidelog.controller.control import metadata_batch_bytes
from tidelog.controller.raft import RaftSettings
from tidelog.metadata.records import encode_batch, metadata_record
from tidelog.v1 import common_pb2, controller_pb2, metadata_pb2

E = common_pb2.ErrorCode
#: Large ids make every replica a 3-byte varint: 10,000 partitions at RF 16 take ~1.3 MB.
BIG_BROKER_IDS = range(1_000_001, 1_000_017)


def _partition_records(count: int, replicas: list[int]) -> list[metadata_pb2.MetadataRecord]:
    topic_id = bytes(range(1, 17))
    return [metadata_record(metadata_pb2.TopicRecord(name="t", topic_id=topic_id))] + [
        metadata_record(metadata_pb2.PartitionRecord(
            topic_id=topic_id, partition_id=p, replicas=replicas, isr=replicas,
            leader=replicas[0]))
        for p in range(count)
    ]


def test_batch_bytes_bound_encode_batch_from_above_by_at_most_the_header() -> None:
    for count, replicas in ((1, [1]), (100, [1, 2, 3]), (10_000, list(BIG_BROKER_IDS))):
        records = _partition_records(count, replicas)
        actual = len(encode_batch(records, append_time_ms=2**62))
        assert actual <= metadata_batch_bytes(records) <= actual + 17


def test_the_raft_adapter_takes_every_batch_the_controller_allows() -> None:
    assert RaftSettings().batch_bytes_max >= limits.METADATA_BATCH_BYTES_MAX


def test_create_topics_whose_records_exceed_one_batch_is_refused() -> None:
    cluster = TestCluster()
    cluster.activate()
    for broker_id in BIG_BROKER_IDS:
        cluster.register(broker_id, port=9092)
        assert not cluster.heartbeat(broker_id).is_fenced
    offset = cluster.logic.committed_offset
    request = controller_pb2.CreateTopicsRequest(topics=[
        create_topic("wide", limits.PARTITIONS_PER_CREATE_REQUEST_MAX - 1, 16),
        create_topic("small", 1, 1),  # fine alone, refused with the request it is part of
    ])
    result = cluster.submit(cluster.logic.handle_create_topics(request, cluster.now_ms))
    assert not result.records and cluster.logic.committed_offset == offset
    for topic in result.response.topics:
        assert topic.error_code == E.POLICY_VIOLATION, topic
        assert f"at most {limits.METADATA_BATCH_BYTES_MAX:,} bytes" in topic.error_message
        assert "CreateTopics would write 10,002 metadata records of 1," in topic.error_message
    # Nothing is left in flight: the next request is proposed and committed as usual.
    assert cluster.logic.pending_batches == 0
    response = cluster.create_topics(create_topic("after", 1, 1))
    assert response.topics[0].error_code == E.NONE
    assert cluster.logic.committed_image.topics.get("after") is not None


def test_create_partitions_counts_across_topics() -> None:
    cluster = TestCluster()
    cluster.activate()
    cluster.add_brokers([1])
    cluster.create_topics(create_topic("a", 1, 1), create_topic("b", 1, 1))
    offset = cluster.logic.committed_offset
    request = controller_pb2.CreatePartitionsRequest(topics=[
        controller_pb2.CreatePartitionsRequest.Topic(name="a", count=5_001),
        controller_pb2.CreatePartitionsRequest.Topic(name="b", count=5_002),
    ])
    result = cluster.submit(cluster.logic.handle_create_partitions(request, cluster.now_ms))
    assert not result.records and cluster.logic.committed_offset == offset
    assert [t.error_code for t in result.response.topics] == [E.POLICY_VIOLATION] * 2
    assert "would create 10,001 partitions; one request may create at most 10,000" \
        in result.response.topics[0].error_message
