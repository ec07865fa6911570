"""OffsetDelete, regex subscriptions, the new DescribeGroups fields and the group metrics on real
brokers.

What it checks, on 1 controller + 3 broker processes (tests/integration/cluster_harness.py) with
``offsets_topic_num_partitions`` 3, from raw gRPC requests (tidelog/v1 stubs), Admin and the CLI:

- OffsetDelete: GROUP_ID_NOT_FOUND for an unknown group, INVALID_GROUP_ID for "", INVALID_REQUEST
  past PARTITIONS_PER_REQUEST_MAX partitions, NOT_COORDINATOR from another broker; per partition
  GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to the topic, and deleted otherwise;
  ``Admin.delete_group_offsets`` and ``tidelog group delete-offsets`` report the same, and once
  the member left they delete the offsets; the brokers still serve afterwards;
- the coordinator's ``/metrics`` after a commit: the group's members, state, commits counter,
  committed offset and lag;
- a member subscribing with ``subscribed_topic_regex`` gets the matching topics' partitions, a
  topic created afterwards that matches is assigned to it too, an invalid regex is
  INVALID_REGULAR_EXPRESSION naming it; DescribeGroups (Admin and ``tidelog group describe``)
  shows the member's regex, client id (``client-id`` gRPC metadata), host and target assignment.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest
from cluster_harness import ClusterHarness
from prometheus_client.parser import text_string_to_metric_families
from replica_checks import Client, broker_name, wait_for
from test_group_admin import leave
from test_group_coordinator import (
    GROUP,
    OFFSETS_PARTITIONS,
    OVERRIDES,
    RPC_S,
    TOPIC,
    call_coordinator,
    commit_request,
    create_topic,
    join_until_assigned,
)

from tidelog import limits
from tidelog.broker.group.partitioner import partition_for
from tidelog.client import Admin, TopicPartition
from tidelog.errors import GroupIdNotFoundError, GroupSubscribedToTopicError
from tidelog.metadata.topic_names import OFFSETS_TOPIC
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode

pytestmark = pytest.mark.integration

OTHER_TOPIC = "audit"
COMMITTED = 20
CLI_TIMEOUT_S = 60
WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    with ClusterHarness.started(tmp_path_factory.mktemp("groups") / "cluster", controllers=1,
                                brokers=3, overrides=OVERRIDES) as cluster:
        cluster.start_brokers()
        yield cluster


@pytest.fixture
def client(cluster: ClusterHarness) -> Iterator[Client]:
    c = Client(cluster)
    try:
        yield c
    finally:
        c.close()


def tidelog(cluster: ClusterHarness, *args: str, ok: bool = True
            ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "group", *args, "--brokers", cluster.bootstrap,
         "--format", "json"], capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert (result.returncode == 0) == ok, (result.stdout, result.stderr)
    return result


def offset_delete(group: str, **topics: list[int]) -> pb.OffsetDeleteRequest:
    return pb.OffsetDeleteRequest(group_id=group, topics=[
        pb.OffsetDeleteRequest.Topic(name=name, partitions=parts)
        for name, parts in topics.items()])


def scrape(cluster: ClusterHarness, broker_id: int) -> dict[tuple[str, frozenset[tuple[str, str]]],
                                                             float]:
    port = cluster.node(broker_name(cluster, broker_id)).metrics_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=RPC_S) as answer:
        text = answer.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_offset_delete_from_raw_requests_admin_and_cli(cluster: ClusterHarness,
                                                       client: Client) -> None:
    create_topic(client, TOPIC, 6)
    create_topic(client, OTHER_TOPIC, 1)
    coordinator, member, _ = join_until_assigned(client, GROUP, 6)
    commit = commit_request(member.member_id, member.member_epoch, COMMITTED)
    commit.topics.add(name=OTHER_TOPIC).partitions.add(partition_id=0, committed_offset=7,
                                                       committed_leader_epoch=-1)
    _, committed = call_coordinator(client, GROUP, "OffsetCommit", commit)
    assert [p.error_code for t in committed.topics for p in t.partitions] == [ErrorCode.NONE] * 2
    stub = client.stub(coordinator)

    # Group-level errors.
    unknown = stub.OffsetDelete(offset_delete("nobody-here", orders=[0]), timeout=RPC_S)
    assert unknown.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "nobody-here" in \
        unknown.error_message, unknown
    assert stub.OffsetDelete(offset_delete("", orders=[0]), timeout=RPC_S).error_code == \
        ErrorCode.INVALID_GROUP_ID
    too_many = stub.OffsetDelete(offset_delete(
        GROUP, orders=list(range(limits.PARTITIONS_PER_REQUEST_MAX + 1))), timeout=RPC_S)
    assert too_many.error_code == ErrorCode.INVALID_REQUEST, too_many.error_message
    topic = client.metadata(OFFSETS_TOPIC)
    assert topic is not None
    elsewhere = next(b for b in client.live() if b != coordinator)
    wrong = client.stub(elsewhere).OffsetDelete(offset_delete(GROUP, orders=[3]), timeout=RPC_S)
    assert wrong.error_code == ErrorCode.NOT_COORDINATOR, wrong
    assert topic.partitions[partition_for(GROUP, OFFSETS_PARTITIONS)].leader == coordinator

    # Per partition: the member subscribes to orders, not to audit.
    answer = stub.OffsetDelete(offset_delete(GROUP, orders=[3], audit=[0, 5]), timeout=RPC_S)
    assert answer.error_code == ErrorCode.NONE, answer
    assert [(t.name, p.partition_id, p.error_code) for t in answer.topics
            for p in t.partitions] == [
        (TOPIC, 3, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC), (OTHER_TOPIC, 0, ErrorCode.NONE),
        (OTHER_TOPIC, 5, ErrorCode.NONE)]
    fetched = stub.OffsetFetch(pb.OffsetFetchRequest(group_id=GROUP), timeout=RPC_S)
    assert [(t.name, p.partition_id, p.committed_offset) for t in fetched.topics
            for p in t.partitions] == [(TOPIC, 3, COMMITTED)]

    check_metrics(cluster, coordinator)

    with Admin(cluster.bootstrap, default_api_timeout_ms=30_000) as admin:
        refused = admin.delete_group_offsets(GROUP, [TopicPartition(TOPIC, 3)])
        with pytest.raises(GroupSubscribedToTopicError, match=TOPIC):
            refused[TopicPartition(TOPIC, 3)]
        with pytest.raises(GroupIdNotFoundError, match="nobody-here"):
            admin.delete_group_offsets("nobody-here", [TOPIC])
        failed = tidelog(cluster, "delete-offsets", GROUP, "--topic", f"{TOPIC}:3", ok=False)
        assert f"{TOPIC}-3" in failed.stderr and "subscribed" in failed.stderr, failed.stderr

        leave(client, coordinator, member)
        deleted = tidelog(cluster, "delete-offsets", GROUP, "--topic", f"{TOPIC}:3",
                          "--topic", OTHER_TOPIC)
        assert json.loads(deleted.stdout) == [
            {"topic": TOPIC, "partition": 3, "status": "deleted"}]
        assert admin.list_group_offsets(GROUP) == {}
        # Empty and without offsets: the coordinator's next timer deletes the group.
        wait_for(lambda: GROUP not in admin.list_groups() or None, "the group to go", WAIT_S)
        gone = tidelog(cluster, "delete-offsets", GROUP, "--topic", TOPIC, ok=False)
        assert "does not exist" in gone.stderr, gone.stderr
    for broker in client.live():
        assert client.stub(broker).Metadata(pb.MetadataRequest(), timeout=RPC_S).brokers


def check_metrics(cluster: ClusterHarness, coordinator: int) -> None:
    group = frozenset({("group", GROUP)})
    partition = frozenset({("group", GROUP), ("topic", TOPIC), ("partition", "3")})
    found = scrape(cluster, coordinator)
    assert found[("tidelog_group_members", group)] == 1
    assert found[("tidelog_group_state", group | {("state", "Stable")})] == 1
    assert found[("tidelog_group_offset_commits_total", group)] >= 2
    assert found[("tidelog_group_rebalances_total", group)] >= 1
    assert found[("tidelog_group_committed_offset", partition)] == COMMITTED
    assert found[("tidelog_group_lag", partition)] == 0  # nothing produced: HW 0, floored
    assert found[("tidelog_group_metrics_snapshot_failed", frozenset())] == 0
    elsewhere = next(b for b in Client(cluster).live() if b != coordinator)
    assert ("tidelog_group_members", group) not in scrape(cluster, elsewhere)


def test_regex_subscription_and_describe(cluster: ClusterHarness, client: Client) -> None:
    group = "regex-group"
    create_topic(client, "rx.a", 2)
    create_topic(client, "rxb", 1)  # not matched: the regex needs the dot

    def beat(**fields: object) -> tuple[int, pb.ConsumerGroupHeartbeatResponse]:
        request = pb.ConsumerGroupHeartbeatRequest(group_id=group, **fields)  # type: ignore[arg-type]
        return call_coordinator(client, group, "ConsumerGroupHeartbeat", request)

    _, invalid = beat(member_epoch=0, rebalance_timeout_ms=30_000,
                      subscribed_topic_regex="rx(", subscription_changed=True)
    assert invalid.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION, invalid
    assert "rx(" in invalid.error_message

    coordinator, joined = beat(member_epoch=0, rebalance_timeout_ms=30_000,
                               subscribed_topic_regex=r"rx\..*", subscription_changed=True)
    assert joined.error_code == ErrorCode.NONE, joined
    stub = client.stub(coordinator)
    state = {"epoch": joined.member_epoch, "owned": list(joined.assignment)}

    def owns(count: int) -> bool:
        answer = stub.ConsumerGroupHeartbeat(pb.ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=joined.member_id, member_epoch=state["epoch"],
            owned_partitions=state["owned"]), timeout=RPC_S,
            metadata=(("client-id", "app-7"),))
        assert answer.error_code == ErrorCode.NONE, answer
        state["epoch"] = answer.member_epoch
        if answer.assignment_changed:
            state["owned"] = list(answer.assignment)
        return sorted((tp.topic, p) for tp in state["owned"] for p in tp.partitions) == [
            ("rx.a", 0), ("rx.a", 1), ("rx.c", 0)][:count]
    wait_for(lambda: owns(2), "the member to own rx.a", WAIT_S)
    create_topic(client, "rx.c", 1)  # a new topic the regex matches
    wait_for(lambda: owns(3), "the member to own rx.c too", WAIT_S)

    with Admin(cluster.bootstrap, default_api_timeout_ms=30_000) as admin:
        [member] = admin.describe_groups([group])[group].members
    assert (member.member_id, member.subscribed_topic_regex, member.subscribed_topics,
            member.client_id, member.client_host) == (
        joined.member_id, r"rx\..*", (), "app-7", "127.0.0.1")
    assert sorted(member.target_assignment) == [
        TopicPartition("rx.a", 0), TopicPartition("rx.a", 1), TopicPartition("rx.c", 0)]
    [described] = json.loads(tidelog(cluster, "describe", group).stdout)
    [shown] = described["members"]
    assert (shown["subscribed_topic_regex"], shown["client_id"], shown["client_host"]) == (
        r"rx\..*", "app-7", "127.0.0.1")
    assert sorted((t["topic"], t["partition"]) for t in shown["target_assignment"]) == [
        ("rx.a", 0), ("rx.a", 1), ("rx.c", 0)]
