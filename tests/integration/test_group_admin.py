"""Admin's group calls and ``tidelog group`` against real brokers.

What it checks, on 1 controller + 3 broker processes (tests/integration/cluster_harness.py) with
``offsets_topic_num_partitions`` 3: a member joined with a raw ConsumerGroupHeartbeat and an
offset committed with raw OffsetCommit (the helpers of test_group_coordinator.py), N records
produced to the committed partition, then

- ``Admin.list_groups`` (ListGroups to every broker, merged) lists the group, Stable, with its
  coordinator; ``describe_groups`` gives the member and its 6 partitions, and an unknown group's
  GroupIdNotFoundError naming the group; ``list_group_offsets`` the committed offset, its
  metadata and lag = high watermark - committed;
- ``tidelog group list|describe --format json`` print the same (describe also the log end
  offset);
- delete (Admin and CLI) is refused with NON_EMPTY_GROUP while the member is in, and accepted
  once it left (heartbeat with epoch -1); the group is then gone from the list.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cluster_harness import ClusterHarness
from replica_checks import Client, wait_for
from test_group_coordinator import (
    GROUP,
    OVERRIDES,
    RPC_S,
    TOPIC,
    call_coordinator,
    commit_request,
    create_topic,
    join_until_assigned,
)

from tidelog.client import Admin, Producer, TopicPartition
from tidelog.errors import GroupIdNotFoundError, NonEmptyGroupError
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode

pytestmark = pytest.mark.integration

RECORDS = 50
COMMITTED = 20
CLI_TIMEOUT_S = 60


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterHarness]:
    with ClusterHarness.started(tmp_path / "cluster", controllers=1, brokers=3,
                                overrides=OVERRIDES) as cluster:
        cluster.start_brokers()
        yield cluster


def group_with_a_commit(cluster: ClusterHarness, client: Client
                        ) -> tuple[int, pb.ConsumerGroupHeartbeatResponse]:
    """A 6-partition topic, one member holding all of it that committed COMMITTED on each,
    and RECORDS records produced to partition 3: (coordinator id, the member)."""
    create_topic(client, TOPIC, 6)
    coordinator, member, _ = join_until_assigned(client, GROUP, 6)
    _, committed = call_coordinator(client, GROUP, "OffsetCommit", commit_request(
        member.member_id, member.member_epoch, COMMITTED))
    assert [p.error_code for t in committed.topics for p in t.partitions] == [ErrorCode.NONE]
    with Producer(cluster.bootstrap) as producer:
        for i in range(RECORDS):
            producer.send(TOPIC, b"v%d" % i, partition=3)
        producer.flush(30_000)
    return coordinator, member


def tidelog(cluster: ClusterHarness, *args: str, ok: bool = True
            ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "group", *args, "--brokers", cluster.bootstrap,
         "--format", "json"], capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert (result.returncode == 0) == ok, (result.stdout, result.stderr)
    return result


def test_admin_and_cli_list_describe_offsets_and_delete(cluster: ClusterHarness) -> None:
    client = Client(cluster)
    try:
        coordinator, member = group_with_a_commit(cluster, client)

        with Admin(cluster.bootstrap, default_api_timeout_ms=30_000) as admin:
            check_admin(admin, coordinator, member)
            check_cli(cluster, coordinator, member)

            # Delete: refused while the member is in, accepted once it left.
            refused = admin.delete_groups([GROUP])
            with pytest.raises(NonEmptyGroupError, match=GROUP):
                refused[GROUP]
            stderr = tidelog(cluster, "delete", GROUP, ok=False).stderr
            assert f"cannot delete group {GROUP!r}" in stderr, stderr
            assert "1 member: they must leave first" in stderr, stderr
            leave(client, coordinator, member)
            assert json.loads(tidelog(cluster, "delete", GROUP).stdout) == [
                {"group": GROUP, "status": "deleted"}]
            assert json.loads(tidelog(cluster, "list").stdout) == []
            assert admin.list_groups() == {}
            with pytest.raises(GroupIdNotFoundError, match=GROUP):
                admin.delete_groups([GROUP])[GROUP]
    finally:
        client.close()


def check_admin(admin: Admin, coordinator: int, member: pb.ConsumerGroupHeartbeatResponse
                ) -> None:
    listed = admin.list_groups()
    assert [(g.group_id, g.state, g.coordinator) for g in listed.values()] == [
        (GROUP, "Stable", coordinator)]
    described = admin.describe_groups([GROUP, "nobody-here"])
    group = described[GROUP]
    assert (group.state, group.coordinator) == ("Stable", coordinator)
    assert group.group_epoch >= 1 and group.assignment_epoch == group.group_epoch
    assert [(m.member_id, m.member_epoch, m.subscribed_topics) for m in group.members] == [
        (member.member_id, member.member_epoch, (TOPIC,))]
    assert sorted(group.members[0].assignment) == [TopicPartition(TOPIC, p) for p in range(6)]
    with pytest.raises(GroupIdNotFoundError, match="nobody-here"):
        described["nobody-here"]

    def offsets_caught_up() -> bool:
        # The coordinator's broker's HW of orders-3 (leader or follower) reaches RECORDS.
        found = admin.list_group_offsets(GROUP)
        return found[TopicPartition(TOPIC, 3)].lag == RECORDS - COMMITTED
    wait_for(offsets_caught_up, "lag = HW - committed", 30)
    offsets = admin.list_group_offsets(GROUP, [TopicPartition(TOPIC, 3)])
    assert [(tp, o.offset, o.metadata, o.lag) for tp, o in offsets.items()] == [
        (TopicPartition(TOPIC, 3), COMMITTED, "m", RECORDS - COMMITTED)]


def check_cli(cluster: ClusterHarness, coordinator: int,
              member: pb.ConsumerGroupHeartbeatResponse) -> None:
    assert json.loads(tidelog(cluster, "list").stdout) == [
        {"group": GROUP, "state": "Stable", "coordinator": coordinator}]
    [described] = json.loads(tidelog(cluster, "describe", GROUP).stdout)
    assert (described["group"], described["state"], described["coordinator"]) == (
        GROUP, "Stable", coordinator)
    [m] = described["members"]
    assert (m["member_id"], m["member_epoch"]) == (member.member_id, member.member_epoch)
    assert sorted(a["partition"] for a in m["assignment"]) == list(range(6))
    assert described["offsets"] == [{
        "topic": TOPIC, "partition": 3, "committed_offset": COMMITTED,
        "log_end_offset": RECORDS, "lag": RECORDS - COMMITTED, "metadata": "m"}]
    failed = tidelog(cluster, "describe", "nobody-here", ok=False)
    assert "nobody-here" in failed.stderr


def leave(client: Client, coordinator: int, member: pb.ConsumerGroupHeartbeatResponse) -> None:
    def left() -> bool:
        try:
            answer = client.stub(coordinator).ConsumerGroupHeartbeat(
                pb.ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id=member.member_id,
                                                 member_epoch=-1), timeout=RPC_S)
        except grpc.RpcError:
            return False
        return bool(answer.error_code == ErrorCode.NONE)
    wait_for(left, "the member to leave", 30)


def test_cli_error_lines_name_the_group_once_and_an_empty_delete_says_none(
        cluster: ClusterHarness) -> None:
    """As a user reads them: each ``tidelog group`` error line names the group once (the
    Admin's errors start with ``group 'G': ``, which the CLI's "cannot ... group 'G'" already
    says: before, ``error: cannot describe group 'x': group 'x': group x does not exist``), and
    ``delete-offsets`` of a topic the group has no commit on prints ``(none)`` and exits 0
    (before: nothing at all)."""
    client = Client(cluster)
    try:
        create_topic(client, TOPIC, 6)
    finally:
        client.close()
    with Admin(cluster.bootstrap, default_api_timeout_ms=30_000) as admin:
        admin.alter_group_offsets(GROUP, {TopicPartition(TOPIC, 0): 0})  # an Empty group

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tidelog.cli", "group", *args, "--brokers",
             cluster.bootstrap], capture_output=True, text=True, timeout=CLI_TIMEOUT_S)

    unknown = "nobody-here"
    for args, what in ((("describe", unknown), f"cannot describe group {unknown!r}"),
                       (("delete", unknown), f"cannot delete group {unknown!r}"),
                       (("delete-offsets", unknown, "--topic", TOPIC),
                        f"cannot delete offsets of group {unknown!r}")):
        result = cli(*args)
        assert result.returncode == 2 and result.stdout == "", result
        [line] = result.stderr.splitlines()
        assert line.startswith(f"error: {what}: "), line
        rest = line.removeprefix(f"error: {what}: ")
        assert f"{unknown!r}" not in rest and rest.endswith("(GROUP_ID_NOT_FOUND)"), line

    nothing = cli("delete-offsets", GROUP, "--topic", "no-commits-here")
    assert (nothing.returncode, nothing.stdout.strip(), nothing.stderr) == (0, "(none)", ""), \
        nothing
