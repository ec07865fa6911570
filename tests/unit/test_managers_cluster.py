"""Broker lifecycle (ClusterControlManager through ControllerLogic): registration and its
refusals, heartbeat sessions, unfencing when caught up, fencing after the session timeout with
the ISR and leader changes in the same batch, want_fence, and controlled shutdown."""

from __future__ import annotations

import random
from typing import Any

import pytest
from controller_testkit import (
    CLUSTER_ID,
    SESSION_TIMEOUT_MS,
    TestCluster,
    create_topic,
    register_request,
)

from tidelog.controller.control import ControllerLogic, ControllerResult
from tidelog.controller.managers import cluster_control
from tidelog.controller.managers.broker_heartbeats import BrokerHeartbeatTracker
from tidelog.v1 import common_pb2

E = common_pb2.ErrorCode


def _cluster(brokers: int = 3) -> TestCluster:
    cluster = TestCluster()
    cluster.activate()
    cluster.add_brokers(range(1, brokers + 1))
    return cluster


def test_registration_epoch_is_the_record_offset_and_brokers_start_fenced() -> None:
    cluster = TestCluster()
    cluster.activate()
    response = cluster.register(1)
    assert response.error_code == E.NONE and response.broker_epoch == 1
    registration = cluster.logic.image.cluster.broker(1)
    assert registration is not None and registration.fenced and registration.broker_epoch == 1


def test_registration_refusals() -> None:
    cluster = _cluster(1)
    assert cluster.register(2, cluster_id="other").error_code == E.INCONSISTENT_CLUSTER_ID
    assert cluster.register(1, generation=2).error_code == E.DUPLICATE_BROKER_REGISTRATION
    assert cluster.register(1, rack="elsewhere").error_code == E.INVALID_REQUEST
    for request in (
        register_request(-1),
        register_request(2, host=""),
        register_request(2, port=70000),
        register_request(2, rack="r" * 300),
    ):
        result = cluster.logic.handle_register_broker(request, cluster.now_ms)
        assert result.response.error_code == E.INVALID_REQUEST and not result.records
    bad_incarnation = register_request(2)
    bad_incarnation.incarnation_id = b"\0" * 16
    result = cluster.logic.handle_register_broker(bad_incarnation, cluster.now_ms)
    assert result.response.error_code == E.INVALID_REQUEST
    assert "incarnation id" in result.response.error_message


def test_same_incarnation_is_idempotent() -> None:
    cluster = _cluster(1)
    offset = cluster.logic.committed_offset
    response = cluster.register(1)
    assert response.error_code == E.NONE and response.broker_epoch == cluster.broker_epoch(1)
    assert cluster.logic.committed_offset == offset


def test_new_incarnation_after_session_expiry_replaces_and_moves_leadership() -> None:
    cluster = _cluster(2)
    cluster.create_topics(create_topic("t", assignments=[[1, 2]]))
    cluster.now_ms += SESSION_TIMEOUT_MS + 1
    cluster.heartbeat(2)
    response = cluster.register(1, generation=2)
    assert response.error_code == E.NONE
    image = cluster.logic.image
    partition = image.topics.partition(cluster.topic_id("t"), 0)
    assert partition is not None and partition.leader == 2 and partition.isr == (2,)
    registration = image.cluster.broker(1)
    assert registration is not None and registration.fenced
    assert registration.broker_epoch == response.broker_epoch


def test_heartbeat_refusals() -> None:
    cluster = _cluster(1)
    response = cluster.heartbeat(1, epoch=99)
    assert response.error_code == E.STALE_BROKER_EPOCH and "epoch 99" in response.error_message
    cluster.register(2)
    response = cluster.heartbeat(2, offset=-5)
    assert response.error_code == E.INVALID_REQUEST


def test_unfenced_only_once_caught_up_to_its_registration() -> None:
    cluster = TestCluster()
    cluster.activate()
    epoch = cluster.register(1).broker_epoch
    response = cluster.heartbeat(1, offset=epoch - 1)
    assert response.is_fenced and not response.is_caught_up
    response = cluster.heartbeat(1, offset=epoch)
    assert not response.is_fenced and response.is_caught_up


def test_fenced_after_session_timeout_with_isr_and_leader_changes() -> None:
    cluster = _cluster(3)
    cluster.create_topics(create_topic("t", assignments=[[1, 2, 3], [2, 1, 3]]))
    cluster.now_ms += SESSION_TIMEOUT_MS
    cluster.heartbeat(2)
    cluster.heartbeat(3)
    assert not cluster.tick().records  # exactly the timeout: still valid
    result = cluster.tick(1)
    kinds = [r.WhichOneof("record") for r in result.records]
    assert kinds == ["fence_broker", "partition_change", "partition_change"]
    image = cluster.logic.image
    p0 = image.topics.partition(cluster.topic_id("t"), 0)
    p1 = image.topics.partition(cluster.topic_id("t"), 1)
    assert p0 is not None and p0.leader == 2 and p0.isr == (2, 3) and p0.leader_epoch == 1
    assert p1 is not None and p1.leader == 2 and p1.isr == (2, 3) and p1.leader_epoch == 0


def _five_partitions_and_broker_1_silent() -> TestCluster:
    """Three brokers, five partitions on [1, 2, 3]; broker 1's session expired, not yet fenced."""
    cluster = _cluster(3)
    cluster.create_topics(create_topic("t", assignments=[[1, 2, 3]] * 5))
    cluster.now_ms += SESSION_TIMEOUT_MS + 1
    cluster.heartbeat(2)
    cluster.heartbeat(3)
    return cluster


def test_a_broker_in_more_isrs_than_a_batch_holds_is_fenced_in_parts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The bound is 2,000 changes; 2 here so that a small topic needs three parts.
    monkeypatch.setattr(cluster_control, "FENCE_CHANGES_PER_BATCH_MAX", 2)
    cluster = _five_partitions_and_broker_1_silent()
    parts = [[r.WhichOneof("record") for r in cluster.tick(1).records] for _ in range(3)]
    assert parts == [["partition_change"] * 2, ["partition_change"] * 2,
                     ["fence_broker", "partition_change"]]
    image = cluster.logic.image
    broker = image.cluster.broker(1)
    assert broker is not None and broker.fenced
    for pid in range(5):
        p = image.topics.partition(cluster.topic_id("t"), pid)
        assert p is not None and p.leader == 2 and 1 not in p.isr
    assert not cluster.tick(1).records  # nothing left to do


def test_a_partition_joining_the_broker_during_its_fencing_is_moved_before_the_fence(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The parts between the first and the last go on through the partitions the first one
    # listed (no pass over every partition each time); the last looks at every partition, so
    # one created meanwhile with the broker in its ISR is not left behind the fence.
    monkeypatch.setattr(cluster_control, "FENCE_CHANGES_PER_BATCH_MAX", 2)
    cluster = _cluster(3)
    cluster.create_topics(create_topic("t", assignments=[[1, 2, 3]] * 7))
    cluster.now_ms += SESSION_TIMEOUT_MS + 1
    cluster.heartbeat(2)
    cluster.heartbeat(3)
    assert _kinds(cluster.tick()) == ["partition_change"] * 2  # the first part
    cluster.create_topics(create_topic("late", assignments=[[1, 2, 3]] * 2))
    kinds = []
    for _ in range(10):  # bounded
        part = _kinds(cluster.tick())
        if not part:
            break
        kinds.append(part)
    assert kinds == [["partition_change"] * 2, ["partition_change"] * 2,
                     ["partition_change"] * 2, ["fence_broker", "partition_change"]], kinds
    image = cluster.logic.image
    assert image.cluster.broker(1).fenced  # type: ignore[union-attr]
    for name, count in (("t", 7), ("late", 2)):
        for pid in range(count):
            p = image.topics.partition(cluster.topic_id(name), pid)
            assert p is not None and p.leader == 2 and 1 not in p.isr, (name, pid, p)
    assert cluster.replayed_from_scratch().digest() == image.digest()


def _kinds(result: ControllerResult[Any]) -> list[str]:
    return [r.WhichOneof("record") for r in result.records]


def test_a_new_incarnation_in_more_isrs_than_a_batch_holds_stays_fenced_until_all_moved(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # At 100,000 partitions the old incarnation's changes made one 1.9 MB batch, refused by the
    # quorum, so the restarted broker could never register. 2 here: three parts for five.
    monkeypatch.setattr(cluster_control, "FENCE_CHANGES_PER_BATCH_MAX", 2)
    cluster = _five_partitions_and_broker_1_silent()
    result = cluster.submit(cluster.logic.handle_register_broker(
        register_request(1, generation=2), cluster.now_ms))
    assert _kinds(result) == ["register_broker", "partition_change", "partition_change"]
    # Caught up, but leaderships of the old incarnation are left: still fenced.
    assert cluster.heartbeat(1).is_fenced
    assert _kinds(cluster.tick()) == ["partition_change"] * 2
    assert cluster.heartbeat(1).is_fenced
    assert _kinds(cluster.tick()) == ["partition_change"]
    assert not cluster.tick().records
    assert not cluster.heartbeat(1).is_fenced
    image = cluster.logic.image
    for pid in range(5):
        p = image.topics.partition(cluster.topic_id("t"), pid)
        assert p is not None and p.leader == 2 and 1 not in p.isr, (pid, p)


def test_offline_partitions_get_leaders_in_parts_after_an_unfencing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_control, "FENCE_CHANGES_PER_BATCH_MAX", 2)
    cluster = _cluster(1)
    cluster.create_topics(create_topic("t", assignments=[[1]] * 5))
    # The only broker is fenced: every partition goes offline (it stays their last ISR member).
    for _ in range(3):
        cluster.tick(SESSION_TIMEOUT_MS + 1)
    image = cluster.logic.image
    assert all(p.leader == -1 for _, _, p in image.topics.iter_partitions())
    response = cluster.heartbeat(1)
    assert not response.is_fenced
    assert _kinds(cluster.submit(cluster.logic.maybe_fence_stale_brokers(cluster.now_ms))) \
        == ["partition_change"] * 2
    assert _kinds(cluster.tick()) == ["partition_change"]
    assert not cluster.tick().records
    assert all(p.leader == 1 for _, _, p in cluster.logic.image.topics.iter_partitions())


def test_a_new_active_controller_settles_every_broker_before_unfencing_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Which brokers had changes left is soft state: a new active controller looks at each
    # once, on its first ticks, and unfences nobody before it did.
    monkeypatch.setattr(cluster_control, "FENCE_CHANGES_PER_BATCH_MAX", 2)
    cluster = _five_partitions_and_broker_1_silent()
    cluster.register(1, generation=2)  # two of five moved
    # Another controller becomes active: it has replayed the log, but none of this one's soft
    # state (which brokers had changes left).
    cluster.logic.on_resign()
    other = ControllerLogic(node_id=1, cluster_id=CLUSTER_ID, rng=random.Random(1),
                            config=cluster.config)
    for base, batch in cluster.log:
        other.replay_batch(list(batch), base)
    cluster.logic = other
    cluster.activate()
    assert cluster.heartbeat(1).is_fenced
    parts = [_kinds(cluster.tick()) for _ in range(3)]
    assert parts == [["partition_change"] * 2, ["partition_change"], []]
    assert not cluster.heartbeat(1).is_fenced


def test_a_fencing_once_begun_is_finished_though_the_broker_is_heard_from_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Seen at 30,000 partitions: every broker's session expired at once (their event loops
    # busy with a large metadata batch), each fencing stopped at the broker's next heartbeat,
    # and partitions were left offline with an active broker as their last ISR member, which
    # nothing revived. Each fencing now goes to its end; each broker is then unfenced by its
    # next heartbeat, which gives it the offline partitions it can lead.
    monkeypatch.setattr(cluster_control, "FENCE_CHANGES_PER_BATCH_MAX", 2)
    cluster = _cluster(3)
    cluster.create_topics(create_topic("t", assignments=[[1, 2, 3], [2, 3, 1], [3, 1, 2]] * 2))
    cluster.now_ms += SESSION_TIMEOUT_MS + 1
    assert _kinds(cluster.tick()) == ["partition_change"] * 2  # no FenceBrokerRecord yet
    cluster.heartbeat(1)
    # Before the fix, each of these ticks began fencing the next stale broker, which was heard
    # from just after, and the third left partitions offline with broker 3 as last member.
    for broker_id in (2, 3):
        cluster.tick()
        cluster.heartbeat(broker_id)
    for _ in range(20):  # bounded: every fencing begun finishes, then heartbeats unfence
        cluster.heartbeat_all()
        if not cluster.tick().records and not cluster.logic.pending_batches:
            break
    cluster.heartbeat_all()
    image = cluster.logic.image
    assert all(not b.fenced for b in image.cluster.brokers.values())
    for _, partition_id, p in image.topics.iter_partitions():
        assert p.leader != -1, f"partition {partition_id} left offline: {p}"
    fenced = [r.fence_broker.broker_id for _, batch in cluster.log for r in batch
              if r.WhichOneof("record") == "fence_broker"]
    assert 1 in fenced, "broker 1's fencing was abandoned half-way"


def test_a_probe_finishes_a_fencing_it_began_after_a_heartbeat(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_control, "FENCE_CHANGES_PER_BATCH_MAX", 2)
    cluster = _five_partitions_and_broker_1_silent()
    epoch = cluster.broker_epoch(1)
    [target] = [t for t in cluster.logic.start_broker_probes(
        cluster.now_ms, silent_ms=1, limit=4) if t.broker_id == 1]
    assert _kinds(cluster.submit(cluster.logic.handle_broker_unreachable(
        1, epoch, target.started_ms, cluster.now_ms))) == ["partition_change"] * 2
    cluster.heartbeat(1)  # stale evidence for a new probe, not for the fencing begun
    parts = [_kinds(cluster.submit(cluster.logic.handle_broker_unreachable(
        1, epoch, target.started_ms, cluster.now_ms))) for _ in range(3)]
    assert parts == [["partition_change"] * 2, ["fence_broker", "partition_change"], []]
    assert not cluster.heartbeat(1).is_fenced  # caught up: unfenced again at once


def test_tick_fences_several_brokers_consistently() -> None:
    cluster = _cluster(3)
    cluster.create_topics(create_topic("t", assignments=[[1, 2, 3]]))
    cluster.now_ms += SESSION_TIMEOUT_MS + 1
    cluster.heartbeat(3)
    cluster.tick()
    partition = cluster.logic.image.topics.partition(cluster.topic_id("t"), 0)
    assert partition is not None and partition.leader == 3 and partition.isr == (3,)
    assert partition.partition_epoch == 2


def test_want_fence_and_recovery() -> None:
    cluster = _cluster(1)
    assert cluster.heartbeat(1, want_fence=True).is_fenced
    assert cluster.heartbeat(1, want_fence=True).is_fenced
    assert not cluster.heartbeat(1).is_fenced


def test_controlled_shutdown_flow() -> None:
    cluster = _cluster(2)
    cluster.create_topics(create_topic("t", assignments=[[1, 2]]))
    response = cluster.heartbeat(1, want_shutdown=True)
    assert not response.should_shut_down and not response.is_fenced
    registration = cluster.logic.image.cluster.broker(1)
    assert registration is not None and registration.in_controlled_shutdown
    partition = cluster.logic.image.topics.partition(cluster.topic_id("t"), 0)
    assert partition is not None and partition.leader == 2 and partition.isr == (2,)
    # Not yet applied the shutdown batch: keep going; then: done, fenced.
    moved_at = cluster.logic.committed_offset
    assert not cluster.heartbeat(1, want_shutdown=True, offset=moved_at - 1).should_shut_down
    response = cluster.heartbeat(1, want_shutdown=True, offset=moved_at)
    assert response.should_shut_down and response.is_fenced
    # A restarted process may register at once.
    assert cluster.register(1, generation=2).error_code == E.NONE


def test_fenced_broker_asking_to_shut_down_may_stop_at_once() -> None:
    cluster = TestCluster()
    cluster.activate()
    cluster.register(1)
    response = cluster.heartbeat(1, offset=0, want_shutdown=True)
    assert response.should_shut_down and response.is_fenced


def test_on_become_active_gives_every_broker_a_fresh_session() -> None:
    cluster = _cluster(2)
    cluster.logic.on_resign()
    cluster.now_ms += 10 * SESSION_TIMEOUT_MS
    cluster.activate()
    assert not cluster.tick().records
    cluster.now_ms += SESSION_TIMEOUT_MS + 1
    assert len(cluster.tick().records) == 2


def test_heartbeat_tracker() -> None:
    tracker = BrokerHeartbeatTracker(100)
    tracker.touch(1, 1000)
    tracker.touch(2, 1050)
    tracker.touch(1, 900)  # an older, reordered heartbeat does not move time back
    assert tracker.has_valid_session(1, 1100) and not tracker.has_valid_session(1, 1101)
    assert tracker.stale_brokers([1, 2, 3], 1200) == [1, 2]
    tracker.remove(1)
    assert not tracker.is_tracked(1) and tracker.stale_brokers([1], 5000) == []
    tracker.reset([5], 0)
    assert tracker.is_tracked(5) and not tracker.is_tracked(2)


def _expand_isr(cluster: TestCluster, topic: str, partition_id: int, isr: list[int]) -> None:
    """The leader's AlterPartition putting ``isr`` back (KIP-903 epochs: as seen fetching)."""
    from tidelog.v1 import controller_pb2

    current = cluster.logic.image.topics.partition(cluster.topic_id(topic), partition_id)
    assert current is not None
    brokers = cluster.logic.image.cluster.brokers
    request = controller_pb2.AlterPartitionRequest(
        broker_id=current.leader, broker_epoch=cluster.broker_epoch(current.leader))
    request.topics.add(topic_id=cluster.topic_id(topic)).partitions.add(
        partition_id=partition_id, leader_epoch=current.leader_epoch,
        partition_epoch=current.partition_epoch, new_isr=isr,
        new_isr_with_epochs=[controller_pb2.AlterPartitionRequest.BrokerState(
            broker_id=b, broker_epoch=brokers[b].broker_epoch) for b in isr])
    response = cluster.submit(cluster.logic.handle_alter_partition(request, cluster.now_ms))
    assert response.response.topics[0].partitions[0].error_code == E.NONE, response.response


def test_leaderships_go_back_to_preferred_replicas_every_check_interval(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Kafka's auto.leader.rebalance.enable: after broker 1 came back, its partitions are led by
    # 2 until the next leader imbalance check gives them back, in parts (2 here).
    from tidelog.controller import control

    monkeypatch.setattr(control, "FENCE_CHANGES_PER_BATCH_MAX", 2)
    cluster = _cluster(3)
    interval = cluster.config.leader_imbalance_check_interval_ms
    cluster.create_topics(create_topic("t", assignments=[[1, 2, 3]] * 3 + [[2, 1, 3]]))
    cluster.now_ms += SESSION_TIMEOUT_MS + 1
    cluster.heartbeat(2)
    cluster.heartbeat(3)
    cluster.tick(1)  # broker 1 fenced: 2 leads everything
    assert cluster.heartbeat(1).is_fenced is False  # back, caught up, unfenced
    image = cluster.logic.image
    assert {p.leader for _, _, p in image.topics.iter_partitions()} == {2}
    # Back in the ISRs (the leader's AlterPartition), then wait for the check.
    for pid in range(3):
        _expand_isr(cluster, "t", pid, [2, 3, 1])
    assert not cluster.tick().records, "not due yet"
    cluster.now_ms += interval
    cluster.heartbeat_all()
    parts = [_kinds(cluster.tick()), _kinds(cluster.tick()), _kinds(cluster.tick())]
    assert parts == [["partition_change"] * 2, ["partition_change"], []]
    leaders = {pid: p.leader for _, pid, p in cluster.logic.image.topics.iter_partitions()}
    assert leaders == {0: 1, 1: 1, 2: 1, 3: 2}
    assert not cluster.tick().records, "balanced: nothing until the next interval"


def test_no_leader_rebalance_when_the_check_is_off() -> None:
    from tidelog.controller.managers.common import LogicConfig

    cluster = TestCluster(config=LogicConfig(leader_imbalance_check_interval_ms=0))
    cluster.activate()
    cluster.add_brokers([1, 2])
    cluster.create_topics(create_topic("t", assignments=[[1, 2]]))
    cluster.heartbeat(1, want_fence=True)
    cluster.heartbeat(1)  # unfenced again; 2 still leads
    _expand_isr(cluster, "t", 0, [2, 1])
    for _ in range(3):
        cluster.now_ms += 10 * 300_000
        cluster.heartbeat_all()
        assert not cluster.tick().records
    partition = cluster.logic.image.topics.partition(cluster.topic_id("t"), 0)
    assert partition is not None and partition.leader == 2
