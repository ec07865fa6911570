"""The group coordinator on real brokers: found, loaded, written to, failed over.

What it checks, on 1 controller + 3 broker processes (tests/integration/cluster_harness.py) with
``offsets_topic_num_partitions`` 3, over raw gRPC (tidelog/v1 stubs):

- FindCoordinator creates ``__consumer_offsets`` on first use (compacted, RF 3,
  min.insync.replicas 2) and, once it has leaders, names the leader of
  ``abs(hash(group)) % 3``;
- a member joins with ConsumerGroupHeartbeat and, heartbeating, gets all 6 partitions of a
  topic; OffsetCommit with its epoch, then OffsetFetch returns the offset;
- bad input gets Kafka's error codes (INVALID_GROUP_ID, UNKNOWN_MEMBER_ID, UNSUPPORTED_ASSIGNOR,
  STALE_MEMBER_EPOCH, GROUP_ID_NOT_FOUND, NOT_COORDINATOR from a broker that is not the
  coordinator);
- kill -9 of the coordinator's broker: FindCoordinator moves to another broker, whose shard
  replayed the partition, so OffsetFetch there returns the committed offset and the member
  still heartbeats; every live broker still answers Metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_harness import ClusterHarness
from replica_checks import Client, broker_name, wait_for

from tidelog.broker.group.partitioner import partition_for
from tidelog.metadata.topic_names import OFFSETS_TOPIC
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode

pytestmark = pytest.mark.integration

OFFSETS_PARTITIONS = 3
OVERRIDES = {
    "controller": {"broker_session_timeout_ms": 3_000, "fence_check_interval_ms": 100},
    "broker": {"offsets_topic_num_partitions": OFFSETS_PARTITIONS, "heartbeat_interval_ms": 500},
}
WAIT_S = 60.0
RPC_S = 10.0
TOPIC = "orders"
GROUP = "group"  # Java hashCode 98629247: partition 2 of 3
RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
             ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterHarness]:
    with ClusterHarness.started(tmp_path / "cluster", controllers=1, brokers=3,
                                overrides=OVERRIDES) as cluster:
        cluster.start_brokers()
        yield cluster


def find_coordinator(client: Client, group: str) -> int:
    """Ask live brokers until one names a coordinator (it creates the topic on first use)."""
    def found() -> int | None:
        for broker in client.live():
            try:
                answer = client.stub(broker).FindCoordinator(
                    pb.FindCoordinatorRequest(group_ids=[group]), timeout=RPC_S)
            except grpc.RpcError:
                continue
            coordinator = answer.coordinators[0]
            if coordinator.error_code == ErrorCode.NONE:
                assert coordinator.endpoint.port == client.cluster.node(
                    broker_name(client.cluster, coordinator.node_id)).broker_port
                if coordinator.node_id in client.live():
                    return int(coordinator.node_id)
                continue  # a killed broker, until the controller fences it and moves leaders
            assert coordinator.error_code in RETRIABLE, coordinator
        return None
    return wait_for(found, f"a coordinator for {group!r}", WAIT_S)


def call_coordinator(client: Client, group: str, method: str, request: Any,
                     ok: Callable[[Any], bool] = lambda r: r.error_code not in RETRIABLE
                     ) -> tuple[int, Any]:
    """Call ``method`` on the group's coordinator, finding it again while the answer is a
    retriable coordinator error or the broker does not answer."""
    def attempt() -> tuple[int, Any] | None:
        coordinator = find_coordinator(client, group)
        try:
            answer = getattr(client.stub(coordinator), method)(request, timeout=RPC_S)
        except grpc.RpcError:
            return None
        return (coordinator, answer) if ok(answer) else None
    return wait_for(attempt, f"{method} of {group!r} answered", WAIT_S)


def create_topic(client: Client, name: str, partitions: int) -> None:
    answer = client.stub(client.live()[0]).CreateTopics(cpb.CreateTopicsRequest(
        topics=[cpb.CreateTopicsRequest.Topic(name=name, num_partitions=partitions,
                                              replication_factor=3)]), timeout=RPC_S)
    assert answer.topics[0].error_code == ErrorCode.NONE, answer


def join_until_assigned(client: Client, group: str, partitions: int
                        ) -> tuple[int, pb.ConsumerGroupHeartbeatResponse,
                                   list[pb.TopicPartitions]]:
    """Join, then heartbeat (owning what was assigned) until all partitions are ours."""
    coordinator, joined = call_coordinator(client, group, "ConsumerGroupHeartbeat",
                                           pb.ConsumerGroupHeartbeatRequest(
                                               group_id=group, member_epoch=0,
                                               rebalance_timeout_ms=30_000,
                                               subscribed_topic_names=[TOPIC],
                                               subscription_changed=True))
    assert joined.error_code == ErrorCode.NONE, joined
    assert joined.member_id and joined.member_epoch > 0
    state = {"response": joined, "owned": list(joined.assignment)}

    def assigned() -> bool:
        response = client.stub(coordinator).ConsumerGroupHeartbeat(
            pb.ConsumerGroupHeartbeatRequest(
                group_id=group, member_id=joined.member_id,
                member_epoch=state["response"].member_epoch,
                owned_partitions=state["owned"]), timeout=RPC_S)
        assert response.error_code == ErrorCode.NONE, response
        if response.assignment_changed or response.assignment:
            state["owned"] = list(response.assignment)
        state["response"] = response
        return sum(len(tp.partitions) for tp in state["owned"]) == partitions
    wait_for(assigned, "the member to own every partition", WAIT_S)
    owned = state["owned"]
    assert [sorted(tp.partitions) for tp in owned] == [list(range(partitions))]
    response = state["response"]
    assert isinstance(response, pb.ConsumerGroupHeartbeatResponse)
    return coordinator, response, owned


def commit_request(member_id: str, epoch: int, offset: int) -> pb.OffsetCommitRequest:
    return pb.OffsetCommitRequest(
        group_id=GROUP, member_id=member_id, member_epoch=epoch,
        topics=[pb.OffsetCommitRequest.Topic(name=TOPIC, partitions=[
            pb.OffsetCommitRequest.Partition(partition_id=3, committed_offset=offset,
                                             committed_leader_epoch=-1, metadata="m")])])


def fetched_offset(answer: pb.OffsetFetchResponse) -> int:
    assert answer.error_code == ErrorCode.NONE, answer
    return int(answer.topics[0].partitions[0].committed_offset)


def test_coordinator_serves_and_fails_over(cluster: ClusterHarness) -> None:
    client = Client(cluster)
    try:
        create_topic(client, TOPIC, 6)
        coordinator = find_coordinator(client, GROUP)
        offsets_topic = client.metadata(OFFSETS_TOPIC)
        assert offsets_topic is not None and offsets_topic.is_internal
        assert len(offsets_topic.partitions) == OFFSETS_PARTITIONS
        expected = partition_for(GROUP, OFFSETS_PARTITIONS)
        assert offsets_topic.partitions[expected].leader == coordinator
        assert len(offsets_topic.partitions[expected].replicas) == 3

        coordinator, member, owned = join_until_assigned(client, GROUP, 6)
        stub = client.stub(coordinator)
        _, committed = call_coordinator(client, GROUP, "OffsetCommit",
                                        commit_request(member.member_id, member.member_epoch,
                                                       42))
        assert [p.error_code for t in committed.topics for p in t.partitions] == [ErrorCode.NONE]
        fetch = pb.OffsetFetchRequest(group_id=GROUP, topics=[
            pb.OffsetFetchRequest.Topic(name=TOPIC, partitions=[3])])
        assert fetched_offset(stub.OffsetFetch(fetch, timeout=RPC_S)) == 42

        check_bad_input(client, coordinator, member)

        cluster.kill(broker_name(cluster, coordinator))
        wait_for(lambda: coordinator not in client.live(), "the broker to die", 10)
        new_coordinator, answer = call_coordinator(client, GROUP, "OffsetFetch", fetch)
        assert new_coordinator != coordinator
        assert fetched_offset(answer) == 42  # the new coordinator replayed the partition
        # The member carries on with the new coordinator (its session restarted at the load).
        beat = client.stub(new_coordinator).ConsumerGroupHeartbeat(
            pb.ConsumerGroupHeartbeatRequest(
                group_id=GROUP, member_id=member.member_id, member_epoch=member.member_epoch,
                owned_partitions=owned), timeout=RPC_S)
        assert beat.error_code == ErrorCode.NONE, beat
        assert beat.member_epoch == member.member_epoch
        for broker in client.live():
            assert client.stub(broker).Metadata(pb.MetadataRequest(), timeout=RPC_S).brokers
    finally:
        client.close()


def check_bad_input(client: Client, coordinator: int,
                    member: pb.ConsumerGroupHeartbeatResponse) -> None:
    stub = client.stub(coordinator)

    def beat(**fields: Any) -> pb.ConsumerGroupHeartbeatResponse:
        answer = stub.ConsumerGroupHeartbeat(pb.ConsumerGroupHeartbeatRequest(**fields),
                                             timeout=RPC_S)
        assert isinstance(answer, pb.ConsumerGroupHeartbeatResponse)
        return answer

    assert beat(group_id="", member_epoch=0).error_code == ErrorCode.INVALID_GROUP_ID
    assert beat(group_id=GROUP, member_id="nobody", member_epoch=5,
                owned_partitions=[]).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert beat(group_id=GROUP, member_epoch=0, rebalance_timeout_ms=30_000,
                subscribed_topic_names=[TOPIC], subscription_changed=True,
                server_assignor="nope").error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    stale = stub.OffsetCommit(commit_request(member.member_id, member.member_epoch - 1, 7),
                              timeout=RPC_S)
    assert stale.error_code == ErrorCode.STALE_MEMBER_EPOCH, stale
    fetch = pb.OffsetFetchRequest(group_id=GROUP, topics=[
        pb.OffsetFetchRequest.Topic(name=TOPIC, partitions=[3])])
    assert fetched_offset(stub.OffsetFetch(fetch, timeout=RPC_S)) == 42  # not overwritten
    # A group id that hashes elsewhere: another shard. Find one this broker does not lead.
    topic = client.metadata(OFFSETS_TOPIC)
    assert topic is not None
    other = next(f"g{i}" for i in range(1000) if topic.partitions[
        partition_for(f"g{i}", OFFSETS_PARTITIONS)].leader != coordinator)
    described = stub.DescribeGroups(pb.DescribeGroupsRequest(group_ids=["nope", other]),
                                    timeout=RPC_S)
    assert [g.error_code for g in described.groups] == [ErrorCode.GROUP_ID_NOT_FOUND,
                                                        ErrorCode.NOT_COORDINATOR]
    assert beat(group_id=other, member_epoch=0, rebalance_timeout_ms=30_000,
                subscribed_topic_names=[TOPIC],
                subscription_changed=True).error_code == ErrorCode.NOT_COORDINATOR
    found = stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=["", GROUP]), timeout=RPC_S)
    assert [c.error_code for c in found.coordinators] == [ErrorCode.INVALID_GROUP_ID,
                                                          ErrorCode.NONE]
    deleted = stub.DeleteGroups(pb.DeleteGroupsRequest(group_ids=[GROUP]), timeout=RPC_S)
    assert deleted.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
    listed = stub.ListGroups(pb.ListGroupsRequest(), timeout=RPC_S)
    assert [(g.group_id, g.state) for g in listed.groups if g.group_id == GROUP] == [
        (GROUP, "Stable")]
