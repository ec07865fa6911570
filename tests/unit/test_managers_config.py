"""AlterConfigs and DescribeConfigs (ConfigControlManager through ControllerLogic): Kafka's
incremental ops, canonical values, sources, and each refusal with its code."""

from __future__ import annotations

import pytest
from controller_testkit import BROKER, TOPIC, TestCluster, alter_op, create_topic

from tidelog import configs
from tidelog.controller.managers.common import (
    CONFIG_OPS_PER_RESOURCE_MAX,
    CONFIG_RESOURCES_PER_REQUEST_MAX,
)
from tidelog.v1 import common_pb2, controller_pb2

E = common_pb2.ErrorCode


def _cluster() -> TestCluster:
    cluster = TestCluster()
    cluster.activate()
    cluster.add_brokers([1])
    cluster.create_topics(create_topic("t"))
    return cluster


def _describe(cluster: TestCluster, resource_type: int, name: str, *keys: str
              ) -> dict[str, tuple[str, str]]:
    request = controller_pb2.DescribeConfigsRequest()
    request.resources.add(resource_type=resource_type, resource_name=name,  # type: ignore[arg-type]
                          names=keys)
    result = cluster.logic.handle_describe_configs(request, cluster.now_ms)
    assert not result.records and result.response_offset == cluster.logic.committed_offset
    resource = result.response.resources[0]
    assert resource.error_code == E.NONE, resource
    return {c.name: (c.value, controller_pb2.ConfigSource.Name(c.source))
            for c in resource.configs}


def test_set_delete_and_sources() -> None:
    cluster = _cluster()
    response = cluster.alter_configs(TOPIC, "t", alter_op("retention.ms", " 60000 "))
    assert response.resources[0].error_code == E.NONE
    cluster.alter_configs(BROKER, "", alter_op("log.retention.bytes", "10"))
    cluster.alter_configs(BROKER, "1", alter_op("log.retention.bytes", "20"))
    described = _describe(cluster, TOPIC, "t", "retention.ms", "retention.bytes", "segment.ms")
    assert described == {
        "retention.ms": ("60000", "CONFIG_SOURCE_TOPIC"),
        "retention.bytes": ("10", "CONFIG_SOURCE_CLUSTER"),
        "segment.ms": ("604800000", "CONFIG_SOURCE_DEFAULT"),
    }
    assert _describe(cluster, BROKER, "1", "log.retention.bytes") == {
        "log.retention.bytes": ("20", "CONFIG_SOURCE_BROKER")
    }
    cluster.alter_configs(TOPIC, "t", alter_op("retention.ms", op="delete"))
    assert cluster.logic.image.configs.get(TOPIC, "t") == {}


def test_describe_all_has_docs() -> None:
    described = _describe(_cluster(), TOPIC, "t")
    assert len(described) == len(configs.TOPIC_CONFIGS)
    request = controller_pb2.DescribeConfigsRequest()
    request.resources.add(resource_type=TOPIC, resource_name="t")
    response = _cluster().logic.handle_describe_configs(request, 0).response
    assert all(c.documentation for c in response.resources[0].configs)


def test_no_op_changes_write_nothing() -> None:
    cluster = _cluster()
    cluster.alter_configs(TOPIC, "t", alter_op("retention.ms", "5"))
    offset = cluster.logic.committed_offset
    cluster.alter_configs(TOPIC, "t", alter_op("retention.ms", "+5"))
    cluster.alter_configs(TOPIC, "t", alter_op("segment.ms", op="delete"))
    assert cluster.logic.committed_offset == offset


def test_list_append_and_subtract() -> None:
    cluster = _cluster()
    cluster.alter_configs(TOPIC, "t", alter_op("cleanup.policy", "compact", "append"))
    assert cluster.logic.image.configs.get(TOPIC, "t")["cleanup.policy"] == "delete,compact"
    cluster.alter_configs(TOPIC, "t", alter_op("cleanup.policy", "delete", "subtract"))
    assert cluster.logic.image.configs.topic_config("t").cleanup_policy == {"compact"}


@pytest.mark.parametrize(
    ("resource_type", "name", "op", "code", "message"),
    [
        (TOPIC, "nope", alter_op("retention.ms", "1"), E.UNKNOWN_TOPIC_OR_PARTITION, "'nope'"),
        (TOPIC, "t", alter_op("retention.ms", "x"), E.INVALID_CONFIG, "retention.ms"),
        (TOPIC, "t", alter_op("bogus", "1"), E.INVALID_CONFIG, "unknown topic config 'bogus'"),
        (TOPIC, "t", alter_op("retention.ms", "1", "append"), E.INVALID_CONFIG, "not a list"),
        (TOPIC, "t", alter_op("cleanup.policy", "delete", "subtract"), E.INVALID_CONFIG,
         "at least one item"),
        (TOPIC, "t", alter_op("cleanup.policy", "shred", "append"), E.INVALID_CONFIG, "shred"),
        (BROKER, "", alter_op("retention.ms", "1"), E.INVALID_CONFIG, "unknown broker config"),
        (BROKER, "x1", alter_op("log.retention.ms", "1"), E.INVALID_REQUEST, "'x1'"),
        (0, "t", alter_op("retention.ms", "1"), E.INVALID_REQUEST, "unknown config resource"),
        (TOPIC, "t", controller_pb2.AlterConfigsRequest.Op(name="retention.ms", op=9),  # type: ignore[arg-type]
         E.INVALID_REQUEST, "unknown operation"),
    ],
)
def test_alter_config_errors(resource_type: int, name: str,
                             op: controller_pb2.AlterConfigsRequest.Op, code: int, message: str
                             ) -> None:
    cluster = _cluster()
    offset = cluster.logic.next_offset
    result = cluster.alter_configs(resource_type, name, op).resources[0]
    assert result.error_code == code and message in result.error_message, result
    assert cluster.logic.next_offset == offset


def test_duplicates_and_limits() -> None:
    cluster = _cluster()
    response = cluster.alter_configs(TOPIC, "t", alter_op("retention.ms", "1"),
                                     alter_op("retention.ms", op="delete"))
    assert response.resources[0].error_code == E.INVALID_REQUEST
    request = controller_pb2.AlterConfigsRequest()
    for _ in range(2):
        request.resources.add(resource_type=TOPIC, resource_name="t",
                              ops=[alter_op("retention.ms", "1")])
    result = cluster.logic.handle_alter_configs(request, cluster.now_ms)
    assert [r.error_code for r in result.response.resources] == [E.DUPLICATE_RESOURCE] * 2
    ops = [alter_op("retention.ms", "1")] * (CONFIG_OPS_PER_RESOURCE_MAX + 1)
    assert cluster.alter_configs(TOPIC, "t", *ops).resources[0].error_code == E.INVALID_REQUEST
    request = controller_pb2.AlterConfigsRequest()
    for i in range(CONFIG_RESOURCES_PER_REQUEST_MAX + 1):
        request.resources.add(resource_type=TOPIC, resource_name=f"t{i}")
    assert cluster.logic.handle_alter_configs(request, 0).response.error_code == E.INVALID_REQUEST


def test_validate_only_and_describe_errors() -> None:
    cluster = _cluster()
    offset = cluster.logic.next_offset
    cluster.alter_configs(TOPIC, "t", alter_op("retention.ms", "1"), validate_only=True)
    assert cluster.logic.next_offset == offset
    request = controller_pb2.DescribeConfigsRequest()
    request.resources.add(resource_type=TOPIC, resource_name="nope")
    request.resources.add(resource_type=BROKER, resource_name="x")
    codes = [r.error_code for r in cluster.logic.handle_describe_configs(request, 0)
             .response.resources]
    assert codes == [E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_REQUEST]
