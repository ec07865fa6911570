"""Topics, placement, leaders and ISRs (ReplicationControlManager through ControllerLogic):
each validation error has its specific code and a message naming the problem; successful
requests produce the records Kafka would."""

from __future__ import annotations

from collections import Counter

import pytest
from controller_testkit import TestCluster, create_topic

from tidelog import limits
from tidelog.controller.managers.common import TOPICS_PER_REQUEST_MAX
from tidelog.v1 import common_pb2, controller_pb2

E = common_pb2.ErrorCode


def _cluster(brokers: int = 3, racks: tuple[str, ...] = ("",)) -> TestCluster:
    cluster = TestCluster()
    cluster.activate()
    cluster.add_brokers(range(1, brokers + 1), racks=racks)
    return cluster


def _error(response: controller_pb2.CreateTopicsResponse) -> tuple[int, str]:
    assert len(response.topics) == 1
    return response.topics[0].error_code, response.topics[0].error_message


# --- CreateTopics -----------------------------------------------------------------------------

def test_create_topic_records_and_response() -> None:
    cluster = _cluster(3, racks=("a", "b", "c"))
    result = cluster.submit(cluster.logic.handle_create_topics(
        controller_pb2.CreateTopicsRequest(topics=[
            create_topic("t", 6, 3, configs={"retention.ms": "1000"})
        ]),
        cluster.now_ms,
    ))
    kinds = Counter(r.WhichOneof("record") for r in result.records)
    assert kinds == {"topic": 1, "partition": 6, "config": 1}
    topic = result.response.topics[0]
    assert topic.error_code == E.NONE and len(topic.topic_id) == 16
    assert (topic.num_partitions, topic.replication_factor) == (6, 3)
    assert [(c.name, c.value) for c in topic.configs] == [("retention.ms", "1000")]
    image = cluster.logic.image.topics.get("t")
    assert image is not None and image.topic_id == topic.topic_id
    leaders = Counter(p.leader for p in image.partitions.values())
    assert leaders == {1: 2, 2: 2, 3: 2}
    for p in image.partitions.values():
        assert p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)


def test_validate_only_creates_nothing() -> None:
    cluster = _cluster()
    response = cluster.create_topics(create_topic("t", 2, 2), validate_only=True)
    assert response.topics[0].error_code == E.NONE and not response.topics[0].topic_id
    assert cluster.logic.image.topics.get("t") is None


def test_placement_skips_fenced_and_shutting_down_brokers() -> None:
    cluster = _cluster(4)
    cluster.heartbeat(3, want_fence=True)
    cluster.heartbeat(4, want_shutdown=True)
    cluster.create_topics(create_topic("t", 10, 2))
    topic = cluster.logic.image.topics.get("t")
    assert topic is not None
    assert {b for p in topic.partitions.values() for b in p.replicas} == {1, 2}


@pytest.mark.parametrize(
    ("topic", "code", "message"),
    [
        (create_topic("bad name"), E.INVALID_TOPIC_EXCEPTION, "illegal"),
        (create_topic(""), E.INVALID_TOPIC_EXCEPTION, "can't be empty"),
        (create_topic("x" * 250), E.INVALID_TOPIC_EXCEPTION, "longer than 249"),
        (create_topic("existing"), E.TOPIC_ALREADY_EXISTS, "topic 'existing' already exists"),
        (create_topic("my_dots"), E.INVALID_TOPIC_EXCEPTION, "collides with existing topic"),
        (create_topic("p", 0), E.INVALID_PARTITIONS, "at least 1"),
        (create_topic("p", -5), E.INVALID_PARTITIONS, "at least 1"),
        (create_topic("p", limits.PARTITIONS_PER_TOPIC_MAX + 1), E.INVALID_PARTITIONS,
         "above the limit"),
        (create_topic("r", 1, 0), E.INVALID_REPLICATION_FACTOR, "at least 1"),
        (create_topic("r", 1, 4), E.INVALID_REPLICATION_FACTOR, "larger than the 3 broker(s)"),
        (create_topic("r", 1, limits.REPLICATION_FACTOR_MAX + 1), E.INVALID_REPLICATION_FACTOR,
         "above the limit"),
        (create_topic("a", assignments=[[1, 2], [3]]), E.INVALID_REPLICA_ASSIGNMENT,
         "partition 1 has 1 replica(s), but the other partitions have 2"),
        (create_topic("a", assignments=[[1, 1]]), E.INVALID_REPLICA_ASSIGNMENT,
         "appear more than once"),
        (create_topic("a", assignments=[[1, 9]]), E.INVALID_REPLICA_ASSIGNMENT,
         "[9] are not registered"),
        (create_topic("a", assignments=[[]]), E.INVALID_REPLICA_ASSIGNMENT, "empty"),
        (create_topic("a", assignments=[list(range(17))]), E.INVALID_REPLICA_ASSIGNMENT,
         "above the limit"),
        (create_topic("a", 2, -1, assignments=[[1]]), E.INVALID_REQUEST, "must be -1"),
        (create_topic("c", configs={"retention.ms": "x"}), E.INVALID_CONFIG, "retention.ms"),
        (create_topic("c", configs={"nope": "1"}), E.INVALID_CONFIG, "unknown topic config"),
        (create_topic("c", configs=[("retention.ms", "1"), ("retention.ms", "2")]),
         E.INVALID_CONFIG, "given 2 times"),
    ],
)
def test_create_topic_errors(topic: controller_pb2.CreateTopicsRequest.Topic, code: int,
                             message: str) -> None:
    cluster = _cluster()
    cluster.create_topics(create_topic("existing"), create_topic("my.dots"))
    offset = cluster.logic.next_offset
    code_found, message_found = _error(cluster.create_topics(topic))
    assert (E.Name(code_found), message in message_found) == (E.Name(code), True), message_found
    assert cluster.logic.next_offset == offset


def test_assignment_partition_ids_must_be_dense() -> None:
    cluster = _cluster()
    topic = controller_pb2.CreateTopicsRequest.Topic(name="a", num_partitions=-1,
                                                     replication_factor=-1)
    topic.assignments.add(partition_id=1, broker_ids=[1])
    code, message = _error(cluster.create_topics(topic))
    assert code == E.INVALID_REPLICA_ASSIGNMENT and "must be 0..0" in message


def test_assignment_with_only_fenced_brokers() -> None:
    cluster = _cluster()
    cluster.heartbeat(2, want_fence=True)
    code, message = _error(cluster.create_topics(create_topic("a", assignments=[[2]])))
    assert code == E.INVALID_REPLICA_ASSIGNMENT and "fenced" in message
    cluster.create_topics(create_topic("b", assignments=[[2, 1]]))
    partition = cluster.logic.image.topics.partition(cluster.topic_id("b"), 0)
    assert partition is not None and partition.isr == (1,) and partition.leader == 1


def test_duplicate_names_and_collisions_within_one_request() -> None:
    cluster = _cluster()
    response = cluster.create_topics(create_topic("a"), create_topic("a"), create_topic("x.y"),
                                      create_topic("x_y"))
    codes = [t.error_code for t in response.topics]
    assert codes == [E.INVALID_REQUEST, E.INVALID_REQUEST, E.NONE, E.INVALID_TOPIC_EXCEPTION]


def test_request_limits() -> None:
    cluster = _cluster()
    many = [create_topic(f"t{i}") for i in range(TOPICS_PER_REQUEST_MAX + 1)]
    response = cluster.create_topics(*many)
    assert response.error_code == E.INVALID_REQUEST and not response.topics
    per_topic = limits.PARTITIONS_PER_TOPIC_MAX
    count = limits.PARTITIONS_PER_REQUEST_MAX // per_topic + 1
    response = cluster.create_topics(
        *[create_topic(f"big{i}", per_topic) for i in range(count)], validate_only=True
    )
    # Above PARTITIONS_PER_CREATE_REQUEST_MAX the whole request is refused (Kafka's policy).
    assert [t.error_code for t in response.topics] == [E.POLICY_VIOLATION] * count
    assert f"would create {count * per_topic:,} partitions; one request may create at most " \
        f"{limits.PARTITIONS_PER_CREATE_REQUEST_MAX:,}" in response.topics[-1].error_message


# --- DeleteTopics -----------------------------------------------------------------------------

def test_delete_topics() -> None:
    cluster = _cluster()
    cluster.create_topics(create_topic("a"), create_topic("b"), create_topic("__consumer_offsets"))
    a_id = cluster.topic_id("a")
    request = controller_pb2.DeleteTopicsRequest(
        names=["a", "nope", "__consumer_offsets"], topic_ids=[a_id, b"\x07" * 16]
    )
    result = cluster.submit(cluster.logic.handle_delete_topics(request, cluster.now_ms))
    codes = [(t.name, t.error_code) for t in result.response.topics]
    assert codes == [
        ("a", E.NONE), ("nope", E.UNKNOWN_TOPIC_OR_PARTITION),
        ("__consumer_offsets", E.INVALID_TOPIC_EXCEPTION), ("a", E.INVALID_REQUEST),
        ("", E.UNKNOWN_TOPIC_ID),
    ]
    assert len(result.records) == 1
    assert cluster.logic.image.topics.get("a") is None


def test_delete_by_id() -> None:
    cluster = _cluster()
    cluster.create_topics(create_topic("a"))
    request = controller_pb2.DeleteTopicsRequest(topic_ids=[cluster.topic_id("a")])
    result = cluster.submit(cluster.logic.handle_delete_topics(request, cluster.now_ms))
    assert result.response.topics[0].name == "a" and result.response.topics[0].error_code == 0
    too_many = controller_pb2.DeleteTopicsRequest(names=["x"] * (TOPICS_PER_REQUEST_MAX + 1))
    result = cluster.logic.handle_delete_topics(too_many, cluster.now_ms)
    assert result.response.error_code == E.INVALID_REQUEST


# --- CreatePartitions -------------------------------------------------------------------------

def _create_partitions(cluster: TestCluster, name: str, count: int,
                       assignments: list[list[int]] | None = None, first: int = 0
                       ) -> controller_pb2.CreatePartitionsResponse.TopicResult:
    topic = controller_pb2.CreatePartitionsRequest.Topic(name=name, count=count)
    for index, brokers in enumerate(assignments or []):
        topic.assignments.add(partition_id=first + index, broker_ids=brokers)
    request = controller_pb2.CreatePartitionsRequest(topics=[topic])
    result = cluster.submit(cluster.logic.handle_create_partitions(request, cluster.now_ms))
    return result.response.topics[0]


def test_create_partitions() -> None:
    cluster = _cluster()
    cluster.create_topics(create_topic("t", 2, 2))
    assert _create_partitions(cluster, "t", 5).error_code == E.NONE
    topic = cluster.logic.image.topics.get("t")
    assert topic is not None and topic.num_partitions == 5
    assert all(len(p.replicas) == 2 for p in topic.partitions.values())
    assert _create_partitions(cluster, "t", 6, [[3, 1]], first=5).error_code == E.NONE


@pytest.mark.parametrize(
    ("name", "count", "assignments", "first", "code", "message"),
    [
        ("nope", 3, None, 0, E.UNKNOWN_TOPIC_OR_PARTITION, "does not exist"),
        ("t", 2, None, 0, E.INVALID_PARTITIONS, "already has 2"),
        ("t", 1, None, 0, E.INVALID_PARTITIONS, "cannot be removed"),
        ("t", 10001, None, 0, E.INVALID_PARTITIONS, "above the limit"),
        ("t", 3, [[1]], 2, E.INVALID_REPLICA_ASSIGNMENT, "other partitions have 2"),
        ("t", 3, [[1, 2]], 0, E.INVALID_REPLICA_ASSIGNMENT, "must be 2..2"),
        ("t", 4, [[1, 2]], 2, E.INVALID_REPLICA_ASSIGNMENT, "2 are being added"),
        ("t", 3, [[1, 9]], 2, E.INVALID_REPLICA_ASSIGNMENT, "not registered"),
    ],
)
def test_create_partitions_errors(name: str, count: int, assignments: list[list[int]] | None,
                                  first: int, code: int, message: str) -> None:
    cluster = _cluster()
    cluster.create_topics(create_topic("t", 2, 2))
    result = _create_partitions(cluster, name, count, assignments, first)
    assert result.error_code == code and message in result.error_message, result


def test_create_partitions_needs_enough_active_brokers() -> None:
    cluster = _cluster()
    cluster.create_topics(create_topic("t", 1, 3))
    cluster.heartbeat(3, want_fence=True)
    result = _create_partitions(cluster, "t", 2)
    assert result.error_code == E.INVALID_REPLICATION_FACTOR


def test_create_partitions_duplicate_topic() -> None:
    cluster = _cluster()
    cluster.create_topics(create_topic("t"))
    request = controller_pb2.CreatePartitionsRequest(topics=[
        controller_pb2.CreatePartitionsRequest.Topic(name="t", count=2),
        controller_pb2.CreatePartitionsRequest.Topic(name="t", count=3),
    ])
    result = cluster.logic.handle_create_partitions(request, cluster.now_ms)
    assert [t.error_code for t in result.response.topics] == [E.INVALID_REQUEST] * 2


# --- AlterPartition ---------------------------------------------------------------------------

def _partition_result(response: controller_pb2.AlterPartitionResponse
                      ) -> controller_pb2.AlterPartitionResponse.PartitionResult:
    assert response.error_code == E.NONE, response
    return response.topics[0].partitions[0]


def test_alter_partition_is_a_compare_and_set() -> None:
    cluster = _cluster()
    cluster.create_topics(create_topic("t", assignments=[[1, 2, 3]]))
    result = _partition_result(cluster.alter_partition(1, "t", 0, [1, 3]))
    assert (result.error_code, list(result.isr), result.partition_epoch) == (E.NONE, [1, 3], 1)
    assert result.leader == 1 and result.leader_epoch == 0
    stale = _partition_result(cluster.alter_partition(1, "t", 0, [1], partition_epoch=0))
    assert stale.error_code == E.INVALID_UPDATE_VERSION and list(stale.isr) == [1, 3]


@pytest.mark.parametrize(
    ("broker", "isr", "kwargs", "code", "message"),
    [
        (1, [1], {"leader_epoch": 3}, E.FENCED_LEADER_EPOCH, "leader epoch 3"),
        (1, [1], {"partition_epoch": 5}, E.INVALID_UPDATE_VERSION, "partition epoch 5"),
        (2, [2], {}, E.NOT_LEADER_OR_FOLLOWER, "not the leader"),
        (1, [1, 4], {}, E.INVALID_REQUEST, "not a duplicate-free subset"),
        (1, [1, 1], {}, E.INVALID_REQUEST, "not a duplicate-free subset"),
        (1, [2, 3], {}, E.INVALID_REQUEST, "leaves out the leader"),
        (1, [1, 3], {}, E.INELIGIBLE_REPLICA, "[3] are fenced"),
    ],
)
def test_alter_partition_errors(broker: int, isr: list[int], kwargs: dict[str, int], code: int,
                                message: str) -> None:
    cluster = _cluster()
    cluster.create_topics(create_topic("t", assignments=[[1, 2, 3]]))
    cluster.alter_partition(1, "t", 0, [1, 2])
    cluster.heartbeat(3, want_fence=True)
    result = _partition_result(cluster.alter_partition(broker, "t", 0, isr, **kwargs))
    assert result.error_code == code and message in result.error_message, result


def test_alter_partition_request_level_errors() -> None:
    cluster = _cluster()
    cluster.create_topics(create_topic("t", assignments=[[1, 2]]))
    response = cluster.alter_partition(1, "t", 0, [1], broker_epoch=77)
    assert response.error_code == E.STALE_BROKER_EPOCH and not response.topics


def test_alter_partition_unknown_and_duplicate_partitions() -> None:
    cluster = _cluster()
    cluster.create_topics(create_topic("t", assignments=[[1, 2]]))
    request = controller_pb2.AlterPartitionRequest(
        broker_id=1, broker_epoch=cluster.broker_epoch(1)
    )
    known = request.topics.add(topic_id=cluster.topic_id("t"))
    known.partitions.add(partition_id=0, new_isr=[1])
    known.partitions.add(partition_id=0, new_isr=[1])
    known.partitions.add(partition_id=7, new_isr=[1])
    request.topics.add(topic_id=b"\x09" * 16).partitions.add(partition_id=0, new_isr=[1])
    result = cluster.submit(cluster.logic.handle_alter_partition(request, cluster.now_ms))
    codes = [p.error_code for t in result.response.topics for p in t.partitions]
    assert codes == [E.NONE, E.INVALID_REQUEST, E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_ID]
    assert len(result.records) == 1
    too_many = controller_pb2.AlterPartitionRequest(broker_id=1,
                                                    broker_epoch=cluster.broker_epoch(1))
    many = too_many.topics.add(topic_id=cluster.topic_id("t"))
    for _ in range(limits.PARTITIONS_PER_REQUEST_MAX + 1):
        many.partitions.add(partition_id=0)
    result = cluster.logic.handle_alter_partition(too_many, cluster.now_ms)
    assert result.response.error_code == E.INVALID_REQUEST


# --- leader election --------------------------------------------------------------------------

def test_leader_elected_from_isr_in_replica_order() -> None:
    cluster = _cluster(4)
    cluster.create_topics(create_topic("t", assignments=[[1, 2, 3, 4]]))
    cluster.alter_partition(1, "t", 0, [1, 4, 3])
    cluster.heartbeat(1, want_fence=True)
    partition = cluster.logic.image.topics.partition(cluster.topic_id("t"), 0)
    assert partition is not None and partition.leader == 3 and partition.isr == (4, 3)


def test_unclean_election_only_when_allowed() -> None:
    cluster = _cluster(2)
    cluster.create_topics(create_topic("clean", assignments=[[1, 2]]),
                          create_topic("dirty", assignments=[[1, 2]],
                                       configs={"unclean.leader.election.enable": "true"}))
    cluster.alter_partition(1, "clean", 0, [1])
    cluster.alter_partition(1, "dirty", 0, [1])
    cluster.heartbeat(1, want_fence=True)
    clean = cluster.logic.image.topics.partition(cluster.topic_id("clean"), 0)
    dirty = cluster.logic.image.topics.partition(cluster.topic_id("dirty"), 0)
    assert clean is not None and clean.leader == -1 and clean.isr == (1,)
    assert dirty is not None and dirty.leader == 2 and dirty.isr == (2,)
