"""The Admin client against a real cluster: 3 controller and 3 broker processes on 127.0.0.1.

What it checks: every Admin call end to end (brokers answer reads from their metadata image and
forward writes to the active controller): create topics with configs, partitions and replication
factor; list, describe (placement; offsets once the data plane serves them), grow, describe and
incrementally alter configs, delete; describe the cluster and the controller quorum. Bad input
gets the documented typed errors per item (unknown topics, invalid names, invalid configs,
replication factor above the broker count, shrinking partitions) and an unreachable bootstrap
list a NetworkError; a kill -9 of the active controller is invisible to the caller beyond delay.

How: tests/integration/cluster_harness.py starts the processes (one cluster for the module);
topic names are unique per test. Waits are bounded polls on what the cluster reports, because a
broker's image may trail the controllers' by a few milliseconds after a write.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from cluster_harness import ClusterHarness

from tidelog.client import (
    Admin,
    AlterConfigOp,
    ClusterDescription,
    ConfigResource,
    NewTopic,
    TopicListing,
)
from tidelog.errors import (
    ErrorCode,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    NetworkError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

pytestmark = pytest.mark.integration

T = TypeVar("T")
FAST = {"controller": {"broker_session_timeout_ms": 3_000, "fence_check_interval_ms": 100}}
WAIT_S = 15.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("client-admin") / "cluster"
    with ClusterHarness.started(base, controllers=3, brokers=3, overrides=FAST) as harness:
        harness.start_brokers()
        yield harness


@pytest.fixture(scope="module")
def admin(cluster: ClusterHarness) -> Iterator[Admin]:
    with Admin(cluster.bootstrap, default_api_timeout_ms=20_000, retry_backoff_ms=50) as client:
        yield client


def eventually(check: Callable[[], T], *, what: str) -> T:
    """Poll ``check`` until it returns without AssertionError (bounded by WAIT_S)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}") from None
            time.sleep(0.05)


def test_describe_cluster_and_quorum(admin: Admin, cluster: ClusterHarness) -> None:
    description = eventually(lambda: _three_unfenced(admin), what="three unfenced brokers")
    assert description.cluster_id == cluster.cluster_id
    assert description.controller_id in (1, 2, 3)
    quorum = admin.describe_quorum()
    assert quorum.cluster_id == cluster.cluster_id
    assert quorum.leader_id in (1, 2, 3) and quorum.leader_epoch >= 1
    assert [v.node_id for v in quorum.voters] == [1, 2, 3]
    assert sum(v.is_leader for v in quorum.voters) == 1


def _three_unfenced(admin: Admin) -> ClusterDescription:
    description = admin.describe_cluster()
    assert [b.broker_id for b in description.brokers if not b.fenced] == [101, 102, 103]
    return description


def test_topic_lifecycle(admin: Admin) -> None:
    created = admin.create_topics([
        NewTopic("adm-orders", num_partitions=3, replication_factor=3,
                 configs={"retention.ms": "60000", "min.insync.replicas": "2"}),
        NewTopic("adm-defaults"),
    ]).all()
    assert created["adm-orders"].num_partitions == 3
    assert created["adm-orders"].replication_factor == 3
    assert len(created["adm-orders"].topic_id) == 36

    listing = eventually(lambda: _listed(admin, "adm-orders", "adm-defaults"), what="listing")
    assert listing["adm-orders"].num_partitions == 3

    described = admin.describe_topics(["adm-orders"])["adm-orders"]
    assert [p.partition for p in described.partitions] == [0, 1, 2]
    for p in described.partitions:
        assert sorted(p.replicas) == [101, 102, 103] and p.leader in p.replicas
        assert set(p.isr) <= set(p.replicas) and p.leader_epoch >= 0

    assert admin.create_partitions({"adm-orders": 5}).ok
    eventually(lambda: _partition_count(admin, "adm-orders", 5), what="5 partitions")

    assert admin.delete_topics(["adm-orders", "adm-defaults"]).ok
    eventually(lambda: _not_listed(admin, "adm-orders", "adm-defaults"), what="deletion")


def _listed(admin: Admin, *names: str) -> dict[str, TopicListing]:
    listing = admin.list_topics()
    assert set(names) <= set(listing)
    return listing


def _not_listed(admin: Admin, *names: str) -> None:
    assert not set(names) & set(admin.list_topics())


def _partition_count(admin: Admin, name: str, count: int) -> None:
    assert admin.list_topics()[name].num_partitions == count


def test_configs_describe_and_incremental_alter(admin: Admin) -> None:
    admin.create_topics([NewTopic("adm-configs", configs={"retention.ms": "1000"})]).all()
    topic = ConfigResource("topic", "adm-configs")
    entries = admin.describe_configs([topic])[topic]
    assert entries["retention.ms"].value == "1000" and entries["retention.ms"].source == "topic"
    assert entries["cleanup.policy"].source == "default" and entries["cleanup.policy"].documentation

    assert admin.alter_configs({topic: [AlterConfigOp("retention.ms", op="delete"),
                                        AlterConfigOp("cleanup.policy", "compact")]}).ok
    entries = admin.describe_configs([topic])[topic]
    assert entries["retention.ms"].source == "default"
    assert entries["cleanup.policy"].value == "compact"

    dry = admin.alter_configs({topic: {"retention.ms": "5"}}, validate_only=True)
    assert dry.ok
    assert admin.describe_configs([topic])[topic]["retention.ms"].source == "default"


def test_bad_input_gets_typed_errors_per_item(admin: Admin) -> None:
    admin.create_topics([NewTopic("adm-exists")]).all()
    result = admin.create_topics([
        NewTopic("adm-exists"),
        NewTopic("bad name!"),
        NewTopic("adm-rf", replication_factor=4),
        NewTopic("adm-zero", num_partitions=0),
        NewTopic("adm-config", configs={"retention.ms": "soon"}),
        NewTopic("adm-unknown-config", configs={"no.such.config": "1"}),
        NewTopic("adm-fine"),
    ])
    assert list(result.values) == ["adm-fine"]
    expected = {
        "adm-exists": TopicAlreadyExistsError,
        "bad name!": InvalidTopicError,
        "adm-rf": InvalidReplicationFactorError,
        "adm-zero": InvalidPartitionsError,
        "adm-config": InvalidConfigError,
        "adm-unknown-config": InvalidConfigError,
    }
    assert {name: type(e) for name, e in result.errors.items()} == expected
    assert result.errors["adm-config"].code == ErrorCode.INVALID_CONFIG

    missing = admin.delete_topics(["adm-never"])
    assert isinstance(missing.errors["adm-never"], UnknownTopicOrPartitionError)
    described = admin.describe_topics(["adm-never"])
    assert isinstance(described.errors["adm-never"], UnknownTopicOrPartitionError)
    grown = admin.create_partitions({"adm-never": 3, "adm-exists": 1})
    assert isinstance(grown.errors["adm-never"], UnknownTopicOrPartitionError)
    assert isinstance(grown.errors["adm-exists"], InvalidPartitionsError)
    topic = ConfigResource("topic", "adm-exists")
    bad = admin.alter_configs({topic: {"min.insync.replicas": "zero"}})
    assert isinstance(bad.errors[topic], InvalidConfigError)
    unknown = admin.describe_configs([ConfigResource("topic", "adm-never")])
    assert not unknown.ok and unknown.errors[ConfigResource("topic", "adm-never")].code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.RESOURCE_NOT_FOUND)


def test_unreachable_bootstrap() -> None:
    with Admin("127.0.0.1:1", default_api_timeout_ms=500) as client, \
            pytest.raises(NetworkError) as info:
        client.list_topics()
    assert info.value.retriable and "127.0.0.1:1" in str(info.value)


def test_active_controller_failover_is_transparent(admin: Admin,
                                                   cluster: ClusterHarness) -> None:
    leader = cluster.wait_for_leader()
    cluster.kill(f"controller-{leader}")
    try:
        assert admin.create_topics([NewTopic("adm-after-failover")]).ok
        eventually(lambda: _new_leader(admin, leader), what="a new quorum leader")
    finally:
        cluster.start(f"controller-{leader}")
        cluster.wait_for_leader()


def _new_leader(admin: Admin, old: int) -> None:
    assert admin.describe_quorum().leader_id not in (old, -1)
