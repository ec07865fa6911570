"""The Admin client against fake brokers (tests/unit/fake_broker.py): every call, per-item
errors, request-level retries, and bad input.

The fake validates like the controllers (tidelog.configs for topic configs, Kafka's topic name
rules) and answers per item, so these tests check the client's side of the contract: requests
carry what the user asked, each item's outcome lands in ``AdminResult.values`` or, as a typed
error with its code, in ``AdminResult.errors``; NOT_CONTROLLER is retried until it clears; an
unreachable bootstrap list ends in NetworkError within the call's timeout.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_broker import FakeCluster

from tidelog.client import (
    Admin,
    AlterConfigOp,
    ConfigResource,
    NewTopic,
    Producer,
)
from tidelog.errors import (
    DuplicateResourceError,
    ErrorCode,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    NetworkError,
    PolicyViolationError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

FAST = dict(request_timeout_ms=2_000, default_api_timeout_ms=5_000, retry_backoff_ms=10,
            retry_backoff_max_ms=50)


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster(3) as fc:
        yield fc


@pytest.fixture(scope="module")
def admin(cluster: FakeCluster) -> Iterator[Admin]:
    with Admin(cluster.bootstrap, **FAST) as client:
        yield client


def test_create_topics_reports_per_topic(admin: Admin, cluster: FakeCluster) -> None:
    cluster.create_topic("exists", 1)
    result = admin.create_topics([
        NewTopic("orders", num_partitions=3, replication_factor=2,
                 configs={"retention.ms": "60000", "cleanup.policy": "compact"}),
        NewTopic("defaults"),
        NewTopic("exists"),
        NewTopic("bad name!"),
        NewTopic("zero", num_partitions=0),
        NewTopic("too-many-replicas", replication_factor=4),
        NewTopic("bad-config", configs={"retention.ms": "soon"}),
        NewTopic("unknown-config", configs={"no.such.config": "1"}),
    ])
    assert list(result.values) == ["orders", "defaults"]
    orders = result["orders"]
    assert (orders.num_partitions, orders.replication_factor) == (3, 2)
    assert orders.configs["cleanup.policy"] == "compact" and len(orders.topic_id) == 36
    assert result["defaults"].num_partitions == 1
    expected = {
        "exists": TopicAlreadyExistsError,
        "bad name!": InvalidTopicError,
        "zero": InvalidPartitionsError,
        "too-many-replicas": InvalidReplicationFactorError,
        "bad-config": InvalidConfigError,
        "unknown-config": InvalidConfigError,
    }
    assert {k: type(v) for k, v in result.errors.items()} == expected
    assert result.errors["bad-config"].code == ErrorCode.INVALID_CONFIG
    with pytest.raises(TopicAlreadyExistsError):
        result.all()
    with pytest.raises(DuplicateResourceError):
        admin.create_topics([NewTopic("a"), NewTopic("a")])


def test_validate_only_creates_nothing(admin: Admin) -> None:
    result = admin.create_topics([NewTopic("dry-run", num_partitions=2)], validate_only=True)
    assert result.ok and result["dry-run"].num_partitions == 2
    assert "dry-run" not in admin.list_topics()


def test_list_and_delete_topics(admin: Admin, cluster: FakeCluster) -> None:
    cluster.create_topic("to-delete", 2)
    listing = admin.list_topics()
    assert listing["to-delete"].num_partitions == 2 and not listing["to-delete"].is_internal
    result = admin.delete_topics(["to-delete", "never-was"])
    assert result.values == {"to-delete": None}
    assert isinstance(result.errors["never-was"], UnknownTopicOrPartitionError)
    assert "to-delete" not in admin.list_topics()


def test_internal_topics_are_listed_on_request(admin: Admin, cluster: FakeCluster) -> None:
    cluster.create_topic("__consumer_offsets", 1)
    cluster._on_loop(lambda: setattr(cluster.topics["__consumer_offsets"], "is_internal", True))
    assert "__consumer_offsets" not in admin.list_topics()
    assert admin.list_topics(include_internal=True)["__consumer_offsets"].is_internal


def test_describe_topics_with_offsets(admin: Admin, cluster: FakeCluster) -> None:
    cluster.create_topic("described", 2, replication_factor=3)
    with Producer(cluster.bootstrap, linger_ms=0) as producer:
        for i in range(5):
            producer.send("described", b"%d" % i, partition=1).result(10)
    result = admin.describe_topics(["described", "missing"])
    described = result["described"]
    p0, p1 = described.partitions
    assert (p0.partition, p0.leader, p0.replicas, p0.isr) == (0, 1, (1, 2, 3), (1, 2, 3))
    assert (p1.log_start_offset, p1.high_watermark, p1.log_end_offset) == (0, 5, 5)
    assert p1.size_bytes > 0 and p0.high_watermark == 0
    assert isinstance(result.errors["missing"], UnknownTopicOrPartitionError)
    bare = admin.describe_topics(["described"], include_offsets=False)["described"]
    assert bare.partitions[1].high_watermark == -1


def test_describe_topics_falls_back_to_list_offsets(admin: Admin, cluster: FakeCluster) -> None:
    cluster.create_topic("fallback", 1)
    cluster.inject("DescribeLogs", ErrorCode.UNKNOWN_SERVER_ERROR)  # e.g. an older broker
    [p] = admin.describe_topics(["fallback"])["fallback"].partitions
    assert (p.log_start_offset, p.high_watermark, p.log_end_offset) == (0, 0, -1)


def test_create_partitions(admin: Admin, cluster: FakeCluster) -> None:
    cluster.create_topic("growing", 1)
    result = admin.create_partitions({"growing": 4, "nope": 2})
    assert result.values == {"growing": None}
    assert isinstance(result.errors["nope"], UnknownTopicOrPartitionError)
    assert admin.list_topics()["growing"].num_partitions == 4
    shrink = admin.create_partitions({"growing": 2})
    assert isinstance(shrink.errors["growing"], InvalidPartitionsError)


def test_describe_and_alter_configs(admin: Admin, cluster: FakeCluster) -> None:
    cluster.create_topic("configured", 1, configs={"retention.ms": "1000"})
    topic = ConfigResource("topic", "configured")
    missing = ConfigResource("topic", "missing")
    described = admin.describe_configs([topic, missing])
    entries = described[topic]
    assert entries["retention.ms"].value == "1000" and entries["retention.ms"].source == "topic"
    assert entries["cleanup.policy"].source == "default" and entries["cleanup.policy"].documentation
    assert isinstance(described.errors[missing], UnknownTopicOrPartitionError)

    changed = admin.alter_configs({topic: {"retention.ms": None, "cleanup.policy": "compact"}})
    assert changed.ok
    entries = admin.describe_configs([topic])[topic]
    assert entries["retention.ms"].source == "default"
    assert entries["cleanup.policy"].value == "compact"

    bad = admin.alter_configs({topic: [AlterConfigOp("min.insync.replicas", "zero")],
                               missing: [AlterConfigOp("retention.ms", "1")]})
    assert isinstance(bad.errors[topic], InvalidConfigError)
    assert isinstance(bad.errors[missing], UnknownTopicOrPartitionError)
    dry = admin.alter_configs({topic: {"retention.ms": "5"}}, validate_only=True)
    assert dry.ok and admin.describe_configs([topic])[topic]["retention.ms"].source == "default"


def test_describe_cluster_and_quorum(admin: Admin, cluster: FakeCluster) -> None:
    description = admin.describe_cluster()
    assert description.cluster_id == "fake-cluster" and description.controller_id == 1
    assert [b.broker_id for b in description.brokers] == [1, 2, 3]
    assert description.brokers[0].port == cluster.ports[1]
    quorum = admin.describe_quorum()
    assert (quorum.leader_id, quorum.leader_epoch, quorum.high_watermark) == (1, 3, 42)
    assert [v.node_id for v in quorum.voters] == [1, 2, 3]
    assert [v.is_leader for v in quorum.voters] == [True, False, False]


def test_not_controller_is_retried_and_other_request_errors_raised(admin: Admin,
                                                                   cluster: FakeCluster) -> None:
    cluster.inject("CreateTopics", ErrorCode.NOT_CONTROLLER, times=3)
    assert admin.create_topics([NewTopic("after-election")]).ok
    cluster.inject("DescribeCluster", ErrorCode.NOT_CONTROLLER, times=2)
    assert admin.describe_cluster().cluster_id == "fake-cluster"
    cluster.inject("DeleteTopics", ErrorCode.POLICY_VIOLATION)
    with pytest.raises(PolicyViolationError) as info:
        admin.delete_topics(["after-election"])
    assert info.value.code == ErrorCode.POLICY_VIOLATION and not info.value.retriable


def test_a_timed_out_write_is_not_sent_again(admin: Admin, cluster: FakeCluster) -> None:
    cluster.inject("CreateTopics", ErrorCode.REQUEST_TIMED_OUT)
    before = cluster.count("CreateTopics")
    with pytest.raises(RequestTimedOutError):
        admin.create_topics([NewTopic("maybe-created")])
    assert cluster.count("CreateTopics") == before + 1  # it may have been applied
    cluster.inject("DescribeConfigs", ErrorCode.REQUEST_TIMED_OUT)  # a read is retried
    assert admin.describe_configs([ConfigResource("broker", "")]).ok


def test_bad_names_never_reach_the_cluster(admin: Admin, cluster: FakeCluster) -> None:
    before = cluster.count("DeleteTopics")
    result = admin.delete_topics(["bad name!"])
    assert isinstance(result.errors["bad name!"], InvalidTopicError)
    assert cluster.count("DeleteTopics") == before


def test_unreachable_bootstrap_is_a_network_error() -> None:
    with Admin("127.0.0.1:1", **FAST) as client, pytest.raises(NetworkError) as info:
        client.list_topics(timeout_ms=300)
    assert "127.0.0.1:1" in str(info.value) and info.value.retriable


def test_a_stopped_broker_is_skipped() -> None:
    with FakeCluster(2) as fc, Admin(fc.bootstrap, **FAST) as client:
        fc.stop_broker(1)
        assert client.describe_cluster().cluster_id == "fake-cluster"
        with pytest.raises(RuntimeError):
            client.close()
            client.list_topics()
