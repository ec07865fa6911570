"""AllocateProducerIds (ProducerIdControlManager through ControllerLogic): consecutive,
non-overlapping blocks, fenced by broker epoch."""

from __future__ import annotations

from dataclasses import replace

from controller_testkit import TestCluster

from tidelog.controller.managers.common import LogicConfig
from tidelog.controller.managers.producer_id_control import (
    PRODUCER_ID_MAX,
    ProducerIdControlManager,
)
from tidelog.metadata.image import ProducerIdsImage
from tidelog.v1 import common_pb2, controller_pb2

E = common_pb2.ErrorCode


def _allocate(cluster: TestCluster, broker_id: int, epoch: int | None = None
              ) -> controller_pb2.AllocateProducerIdsResponse:
    request = controller_pb2.AllocateProducerIdsRequest(
        broker_id=broker_id,
        broker_epoch=cluster.broker_epoch(broker_id) if epoch is None else epoch,
    )
    return cluster.submit(cluster.logic.handle_allocate_producer_ids(request, 0)).response


def test_blocks_are_consecutive() -> None:
    cluster = TestCluster()
    cluster.activate()
    cluster.register(1)
    cluster.register(2)
    blocks = [_allocate(cluster, b) for b in (1, 2, 1)]
    assert [(r.producer_id_start, r.producer_id_len) for r in blocks] == [
        (0, 1000), (1000, 1000), (2000, 1000)
    ]
    assert cluster.logic.image.producer_ids.next_producer_id == 3000


def test_refusals() -> None:
    cluster = TestCluster()
    cluster.activate()
    cluster.register(1)
    assert _allocate(cluster, 1, epoch=0).error_code == E.STALE_BROKER_EPOCH
    assert _allocate(cluster, 1, epoch=5).error_message.startswith("broker 1 epoch 5")
    request = controller_pb2.AllocateProducerIdsRequest(broker_id=4, broker_epoch=1)
    response = cluster.logic.handle_allocate_producer_ids(request, 0).response
    assert response.error_code == E.BROKER_ID_NOT_REGISTERED


def test_exhaustion() -> None:
    cluster = TestCluster()
    cluster.activate()
    cluster.register(1)
    manager = ProducerIdControlManager(LogicConfig())
    image = cluster.logic.image
    nearly_full = replace(image, producer_ids=ProducerIdsImage(PRODUCER_ID_MAX - 10))
    request = controller_pb2.AllocateProducerIdsRequest(broker_id=1, broker_epoch=1)
    records, response = manager.allocate_producer_ids(nearly_full, request)
    assert not records and response.error_code == E.UNKNOWN_SERVER_ERROR
