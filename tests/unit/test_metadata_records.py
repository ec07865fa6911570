"""Metadata records on the wire (controller/records.py): batch and snapshot codecs refuse
unknown schema versions and malformed input with specific errors, and a snapshot rebuilds an
image with the same digest."""

from __future__ import annotations

import pytest
from controller_testkit import TestCluster, alter_op, create_topic, r_topic, topic_id_of

from tidelog.errors import InconsistentClusterIdError, InvalidRecordError, UnsupportedVersionError
from tidelog.metadata import records
from tidelog.metadata.image import MetadataImage
from tidelog.v1 import controller_pb2, metadata_pb2


def test_batch_round_trip() -> None:
    batch = [r_topic("a", 1), records.metadata_record(metadata_pb2.NoOpRecord(controller_id=3))]
    decoded = records.decode_batch(records.encode_batch(batch, append_time_ms=42))
    assert list(decoded.records) == batch
    assert decoded.append_time_ms == 42 and decoded.schema_version == records.SCHEMA_VERSION


def test_batch_refuses_unknown_versions_and_garbage() -> None:
    future = metadata_pb2.MetadataRecordBatch(schema_version=2, records=[r_topic("a", 1)])
    with pytest.raises(UnsupportedVersionError, match="schema version 2"):
        records.decode_batch(future.SerializeToString())
    with pytest.raises(InvalidRecordError, match="does not parse"):
        records.decode_batch(b"\xff\xff\xff")
    empty = metadata_pb2.MetadataRecordBatch(schema_version=1)
    with pytest.raises(InvalidRecordError, match="0 records"):
        records.decode_batch(empty.SerializeToString())
    blank = metadata_pb2.MetadataRecordBatch(
        schema_version=1, records=[metadata_pb2.MetadataRecord()]
    )
    with pytest.raises(InvalidRecordError, match="record 0 has no field set"):
        records.decode_batch(blank.SerializeToString())


def test_metadata_record_wraps_each_kind() -> None:
    inner = metadata_pb2.FenceBrokerRecord(broker_id=1, broker_epoch=2)
    record = records.metadata_record(inner)
    assert records.record_kind(record) == "fence_broker" and record.fence_broker == inner


def _busy_cluster() -> TestCluster:
    cluster = TestCluster(seed=5)
    cluster.activate()
    cluster.add_brokers([1, 2, 3], racks=["a", "b"])
    cluster.create_topics(create_topic("x", 3, 2, configs={"retention.ms": "10"}),
                          create_topic("y", 1, 3))
    cluster.heartbeat(2, want_shutdown=True)
    cluster.alter_configs(4, "", alter_op("log.retention.bytes", "100"))
    request = controller_pb2.AllocateProducerIdsRequest(
        broker_id=1, broker_epoch=cluster.broker_epoch(1)
    )
    cluster.submit(cluster.logic.handle_allocate_producer_ids(request, cluster.now_ms))
    return cluster


def test_snapshot_round_trip_keeps_the_digest() -> None:
    image = _busy_cluster().logic.committed_image
    snapshot = records.image_to_snapshot(image, cluster_id="c")
    data = records.encode_snapshot(snapshot)
    restored = records.image_from_snapshot(records.decode_snapshot(data), cluster_id="c")
    assert restored.digest() == image.digest()
    assert restored.canonical_lines() == image.canonical_lines()
    assert any(r.HasField("broker_registration_change") for r in snapshot.records)
    assert any(r.HasField("producer_ids") for r in snapshot.records)


def test_a_snapshot_being_built_reports_progress() -> None:
    """A controller's Raft thread keeps its quorum alive from ``progress`` while a large image
    becomes a snapshot; the snapshot is the same with or without it."""
    cluster = TestCluster(seed=5)
    cluster.activate()
    cluster.add_brokers([1, 2, 3])
    cluster.create_topics(create_topic("big", 5_000, 3))
    image = cluster.logic.committed_image
    calls: list[int] = []
    snapshot = records.image_to_snapshot(image, cluster_id="c",
                                         progress=lambda: calls.append(1))
    assert len(calls) == len(snapshot.records) // records.SNAPSHOT_PROGRESS_RECORDS >= 2
    assert snapshot == records.image_to_snapshot(image, cluster_id="c")


def test_empty_snapshot() -> None:
    snapshot = records.image_to_snapshot(MetadataImage.empty(), cluster_id="c")
    assert records.image_from_snapshot(snapshot).digest() == MetadataImage.empty().digest()


def test_snapshot_refusals() -> None:
    snapshot = records.image_to_snapshot(_busy_cluster().logic.committed_image, cluster_id="c")
    with pytest.raises(InconsistentClusterIdError):
        records.image_from_snapshot(snapshot, cluster_id="other")
    old = metadata_pb2.MetadataSnapshot(schema_version=9)
    with pytest.raises(UnsupportedVersionError):
        records.image_from_snapshot(old)
    with pytest.raises(UnsupportedVersionError):
        records.decode_snapshot(old.SerializeToString())
    broken = metadata_pb2.MetadataSnapshot(schema_version=1, metadata_offset=3,
                                           records=[r_topic("a", 1), r_topic("a", 2)])
    with pytest.raises(InvalidRecordError, match="topic 'a' already exists"):
        records.image_from_snapshot(broken)
    negative = metadata_pb2.MetadataSnapshot(schema_version=1, metadata_offset=-1,
                                             records=[r_topic("a", 1)])
    with pytest.raises(InvalidRecordError):
        records.image_from_snapshot(negative)


def test_describe_message_is_one_readable_line() -> None:
    line = records.describe_message(r_topic("a", 1), bytes_hex_max=8)
    assert line == f'topic name="a" topic_id={topic_id_of(1).hex()[:8]}'
    assert records.describe_message(metadata_pb2.MetadataRecord()) == "<empty record>"
