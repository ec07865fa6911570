"""The peer listeners' message limits hold what brokers legitimately send them.

What it checks: tidelog.limits sizes the controller listener (CONTROLLER_REQUEST_BYTES_MAX) and
the inter-broker listener (INTER_BROKER_REQUEST_BYTES_MAX) from per-item bounds; here each
bound is measured on the largest item the protobuf can encode (every integer at its longest
varint, a topic entry of its own per partition), and the largest whole requests built from
them fit the limits. The relations themselves are asserted in tidelog/limits.py at import.
"""

from __future__ import annotations

import asyncio

from tidelog import limits
from tidelog.broker.controller_client import ControllerClient, ControllerEndpoint
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode

#: -1 is the longest varint of an int32 or int64 field (10 bytes).
LONGEST = -1
TOPIC_ID = b"\xff" * 16


def longest_alter_partition_item() -> cpb.AlterPartitionRequest:
    request = cpb.AlterPartitionRequest()
    partition = request.topics.add(topic_id=TOPIC_ID).partitions.add(
        partition_id=LONGEST, leader_epoch=LONGEST, partition_epoch=LONGEST,
        new_isr=[LONGEST] * limits.REPLICATION_FACTOR_MAX)
    for _ in range(limits.REPLICATION_FACTOR_MAX):
        partition.new_isr_with_epochs.add(broker_id=LONGEST, broker_epoch=LONGEST)
    return request


def test_an_alter_partition_item_fits_its_bound() -> None:
    assert longest_alter_partition_item().ByteSize() <= limits.ALTER_PARTITION_ITEM_BYTES_MAX


def test_the_largest_alter_partition_fits_the_controller_listener() -> None:
    request = cpb.AlterPartitionRequest(broker_id=LONGEST, broker_epoch=LONGEST)
    item = longest_alter_partition_item().topics[0]
    for _ in range(limits.ALTER_PARTITION_ITEMS_MAX):
        request.topics.add().CopyFrom(item)
    assert request.ByteSize() <= limits.CONTROLLER_REQUEST_BYTES_MAX


def test_a_fetched_partition_fits_its_bounds() -> None:
    listed = pb.FetchRequest()
    listed.topics.add(topic_id=TOPIC_ID).partitions.add(
        partition_id=LONGEST, fetch_offset=LONGEST, current_leader_epoch=LONGEST,
        last_fetched_epoch=LONGEST, log_start_offset=LONGEST, partition_max_bytes=LONGEST)
    assert listed.ByteSize() <= limits.REPLICA_FETCH_LISTED_PARTITION_BYTES_MAX
    forgotten = pb.FetchRequest()
    forgotten.forgotten.add(topic_id=TOPIC_ID, partitions=[LONGEST])
    assert forgotten.ByteSize() <= limits.REPLICA_FETCH_FORGOTTEN_PARTITION_BYTES_MAX


def test_a_full_request_with_every_partition_in_its_own_topic_fits() -> None:
    """PARTITIONS_PER_REQUEST_MAX listed, each its own topic: the most a follower lists."""
    request = pb.FetchRequest(replica_id=LONGEST, replica_broker_epoch=LONGEST,
                              max_wait_ms=LONGEST, min_bytes=LONGEST, max_bytes=LONGEST,
                              session_epoch=LONGEST)
    for _ in range(limits.PARTITIONS_PER_REQUEST_MAX):
        request.topics.add(topic_id=TOPIC_ID).partitions.add(
            partition_id=LONGEST, fetch_offset=LONGEST, current_leader_epoch=LONGEST,
            last_fetched_epoch=LONGEST, log_start_offset=LONGEST, partition_max_bytes=LONGEST)
    listed = request.ByteSize()
    assert listed <= (limits.PARTITIONS_PER_REQUEST_MAX
                      * limits.REPLICA_FETCH_LISTED_PARTITION_BYTES_MAX + 1024)
    assert listed < limits.INTER_BROKER_REQUEST_BYTES_MAX


def test_a_broker_refuses_to_forward_more_than_the_controllers_take() -> None:
    """Refused by the broker with POLICY_VIOLATION naming both sizes, never sent: the
    controller listener would answer RESOURCE_EXHAUSTED, which reaches the client as an
    unknown server error."""
    client = ControllerClient([ControllerEndpoint(1, "127.0.0.1", 1)])  # nothing listens there
    request = cpb.CreateTopicsRequest()
    request.topics.add(name="big", num_partitions=1, replication_factor=1).configs.add(
        name="cleanup.policy", value="x" * limits.CONTROLLER_REQUEST_BYTES_MAX)
    response = asyncio.run(client.forward("CreateTopics", request))
    assert response.error_code == ErrorCode.POLICY_VIOLATION
    assert f"the controllers take at most {limits.CONTROLLER_REQUEST_BYTES_MAX}" in \
        response.error_message
