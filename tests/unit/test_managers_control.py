"""The ControllerLogic facade: standby refusals, the speculative image over the committed one,
reserved offsets and when responses may be sent, divergence detection, resignation, snapshots.
"""

from __future__ import annotations

import random

import pytest
from controller_testkit import CLUSTER_ID, TestCluster, create_topic, r_topic, register_request

from tidelog.controller.control import ControllerLogic
from tidelog.invariants import InvariantViolation
from tidelog.metadata.records import metadata_record
from tidelog.v1 import common_pb2, controller_pb2, metadata_pb2

E = common_pb2.ErrorCode


def _logic() -> ControllerLogic:
    return ControllerLogic(node_id=7, cluster_id=CLUSTER_ID, rng=random.Random(0),
                           check_speculative=True)


def test_standby_refuses_writes_but_describes() -> None:
    logic = _logic()
    requests = [
        (logic.handle_register_broker, controller_pb2.RegisterBrokerRequest()),
        (logic.handle_broker_heartbeat, controller_pb2.BrokerHeartbeatRequest()),
        (logic.handle_alter_partition, controller_pb2.AlterPartitionRequest()),
        (logic.handle_create_topics, controller_pb2.CreateTopicsRequest()),
        (logic.handle_delete_topics, controller_pb2.DeleteTopicsRequest()),
        (logic.handle_create_partitions, controller_pb2.CreatePartitionsRequest()),
        (logic.handle_alter_configs, controller_pb2.AlterConfigsRequest()),
        (logic.handle_allocate_producer_ids, controller_pb2.AllocateProducerIdsRequest()),
    ]
    for handler, request in requests:
        result = handler(request, 0)  # type: ignore[operator]
        assert not result.records and result.response.error_code == E.NOT_CONTROLLER
        assert "controller 7 is not the active controller" in result.response.error_message
    assert not logic.maybe_fence_stale_brokers(10**9).records
    describe = logic.handle_describe_configs(controller_pb2.DescribeConfigsRequest(), 0)
    assert describe.response.error_code == E.NONE


def test_become_active_proposes_a_no_op() -> None:
    logic = _logic()
    result = logic.on_become_active(0)
    assert [r.no_op.controller_id for r in result.records] == [7]
    assert (result.base_offset, result.response_offset) == (0, 0)
    assert logic.is_active and logic.pending_batches == 1
    with pytest.raises(InvariantViolation):
        logic.on_become_active(0)


def test_speculative_image_and_response_offsets() -> None:
    logic = _logic()
    noop = logic.on_become_active(0)
    first = logic.handle_register_broker(register_request(1), 0)
    assert first.base_offset == 1 and first.response.broker_epoch == 1
    second = logic.handle_register_broker(register_request(2), 0)
    assert second.base_offset == 2 and second.response_offset == 2
    # A write with no records waits for what was proposed before it.
    retry = logic.handle_register_broker(register_request(1), 0)
    assert not retry.records and retry.response_offset == 2 and retry.response.broker_epoch == 1
    assert logic.committed_offset == -1 and logic.image.offset == 2 and logic.next_offset == 3
    assert logic.committed_image.cluster.broker(1) is None
    for result in (noop, first, second):
        outcome = logic.replay_batch(result.records, result.base_offset)
        assert outcome.own and not outcome.diverged and outcome.ignored is None
    assert logic.pending_batches == 0 and logic.image is logic.committed_image


def test_foreign_batch_while_active_resets_speculative_state() -> None:
    logic = _logic()
    noop = logic.on_become_active(0)
    logic.replay_batch(noop.records, 0)
    proposal = logic.handle_register_broker(register_request(1), 0)
    outcome = logic.replay_batch([r_topic("x", 1)], 1)
    assert outcome.diverged and not outcome.own
    assert logic.pending_batches == 0 and logic.image is logic.committed_image
    late = logic.replay_batch(proposal.records, 2)
    assert late.ignored is not None and "not the record's offset 2" in late.ignored


def test_resign_drops_pending_and_sessions() -> None:
    logic = _logic()
    logic.on_become_active(0)
    logic.handle_register_broker(register_request(1), 0)
    logic.on_resign()
    assert not logic.is_active and logic.pending_batches == 0
    assert logic.image is logic.committed_image and not logic.heartbeats.is_tracked(1)


def test_committed_batches_must_be_contiguous() -> None:
    logic = _logic()
    record = metadata_record(metadata_pb2.NoOpRecord(controller_id=1))
    logic.replay_batch([record], 0)
    with pytest.raises(InvariantViolation):
        logic.replay_batch([record], 5)


def test_snapshot_restore() -> None:
    cluster = TestCluster()
    cluster.activate()
    cluster.add_brokers([1, 2])
    cluster.create_topics(create_topic("t", 2, 2))
    snapshot = cluster.logic.committed_snapshot()
    assert snapshot.cluster_id == CLUSTER_ID
    fresh = _logic()
    fresh.restore_snapshot(snapshot)
    assert fresh.committed_image.digest() == cluster.logic.committed_image.digest()
    assert fresh.image is fresh.committed_image
    assert fresh.next_offset == snapshot.metadata_offset + 1


def test_stats() -> None:
    cluster = TestCluster()
    cluster.activate()
    cluster.add_brokers([1, 2])
    cluster.register(3)
    cluster.create_topics(create_topic("t", 2, 1))
    stats = cluster.logic.stats()
    assert (stats.registered_brokers, stats.fenced_brokers) == (3, 1)
    assert (stats.topics, stats.partitions, stats.offline_partitions) == (1, 2, 0)
