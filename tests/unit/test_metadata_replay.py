"""Replay (controller/delta.py): each record kind applies as Kafka's would, a record whose
precondition fails is a no-op with a reason (the same on every node), batches are atomic,
offsets always advance, and local_changes tells a broker what to lead, follow and delete."""

from __future__ import annotations

import pytest
from controller_testkit import (
    r_change,
    r_config,
    r_fence,
    r_partition,
    r_register,
    r_topic,
    r_unfence,
    replay_all,
    topic_id_of,
)

from tidelog.invariants import InvariantViolation
from tidelog.metadata.delta import MetadataDelta
from tidelog.metadata.image import BROKER, TOPIC, MetadataImage
from tidelog.v1 import metadata_pb2

T1 = topic_id_of(1)


def _cluster(brokers: int = 3) -> MetadataImage:
    """Brokers 1..n registered at offsets 0..n-1 and unfenced."""
    records = [r_register(b, b - 1) for b in range(1, brokers + 1)]
    records += [r_unfence(b, b - 1) for b in range(1, brokers + 1)]
    return replay_all(records)


def _with_topic(image: MetadataImage | None = None) -> MetadataImage:
    return replay_all(
        [r_topic("t", 1), r_partition(1, 0, [1, 2, 3]), r_partition(1, 1, [2, 3, 1])],
        image or _cluster(),
    )


def _replay(image: MetadataImage, record: metadata_pb2.MetadataRecord) -> tuple[str | None,
                                                                                MetadataImage]:
    delta = MetadataDelta(image)
    outcome = delta.replay(record, image.offset + 1)
    return outcome, delta.apply()


def _ignored(image: MetadataImage, record: metadata_pb2.MetadataRecord, reason: str) -> None:
    outcome, after = _replay(image, record)
    assert outcome is not None and reason in outcome, outcome
    assert after.offset == image.offset + 1
    assert after.digest() == image.with_offset(image.offset + 1).digest()


# --- brokers ----------------------------------------------------------------------------------

def test_register_broker_epoch_is_its_offset() -> None:
    image = _cluster()
    registration = image.cluster.broker(2)
    assert registration is not None
    assert registration.broker_epoch == 1 and not registration.fenced
    _ignored(image, r_register(4, 99), "epoch 99 is not the record's offset 6")


def test_reregistration_replaces_and_fences() -> None:
    image = _cluster()
    outcome, after = _replay(image, r_register(1, image.offset + 1, generation=2))
    assert outcome is None
    registration = after.cluster.broker(1)
    assert registration is not None
    assert registration.fenced and registration.broker_epoch == image.offset + 1


def test_fence_and_unfence_check_the_epoch() -> None:
    image = _cluster()
    _ignored(image, r_fence(1, 5), "broker 1 epoch 5 is stale (registered with 0)")
    _ignored(image, r_fence(9, 0), "broker 9 is not registered")
    _ignored(image, r_unfence(1, 0), "broker 1 is not fenced")
    outcome, fenced = _replay(image, r_fence(1, 0))
    assert outcome is None
    _ignored(fenced, r_fence(1, 0), "already fenced")


def test_controlled_shutdown_and_fencing_ends_it() -> None:
    image = _cluster()
    change = metadata_pb2.MetadataRecord(
        broker_registration_change=metadata_pb2.BrokerRegistrationChangeRecord(
            broker_id=1, broker_epoch=0, in_controlled_shutdown=True
        )
    )
    image = replay_all([change], image)
    registration = image.cluster.broker(1)
    assert registration is not None and registration.in_controlled_shutdown
    assert not image.cluster.is_active(1) and image.cluster.is_unfenced(1)
    image = replay_all([r_fence(1, 0)], image)
    registration = image.cluster.broker(1)
    assert registration is not None and registration.fenced
    assert not registration.in_controlled_shutdown
    _ignored(image, change, "fenced and cannot enter controlled shutdown")


def test_unregister_removes_the_broker() -> None:
    image = _cluster()
    unregister = metadata_pb2.MetadataRecord(
        unregister_broker=metadata_pb2.UnregisterBrokerRecord(broker_id=3, broker_epoch=2)
    )
    image = replay_all([unregister], image)
    assert image.cluster.broker(3) is None
    _ignored(image, unregister, "broker 3 is not registered")


# --- topics and partitions --------------------------------------------------------------------

def test_topic_and_partitions() -> None:
    image = _with_topic()
    topic = image.topics.get("t")
    assert topic is not None and topic.num_partitions == 2 and topic.replication_factor == 3
    p = image.topics.partition(T1, 1)
    assert p is not None and p.leader == 2 and p.isr == (2, 3, 1)
    assert (p.leader_epoch, p.partition_epoch) == (0, 0)


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (r_topic("t", 2), "topic 't' already exists"),
        (r_topic("u", 1), "is in use"),
        (r_topic("bad name", 2), "illegal"),
        (metadata_pb2.MetadataRecord(topic=metadata_pb2.TopicRecord(name="z", topic_id=b"\0" * 16)),
         "not a valid UUID"),
        (r_partition(1, 5, [1]), "partition 5 of 't' is not the next one (2)"),
        (r_partition(2, 0, [1]), "does not exist"),
        (r_partition(1, 2, [1, 2], isr=[3]), "is not a subset of replicas"),
        (r_partition(1, 2, [1, 1]), "repeat a broker"),
        (r_partition(1, 2, [1, 2], isr=[1, 2], leader=3), "leader 3 is not in ISR"),
        (r_partition(1, 2, [1], isr=[], leader=-1), "ISR is empty"),
        (metadata_pb2.MetadataRecord(), "empty record"),
    ],
)
def test_invalid_topic_records_are_no_ops(record: metadata_pb2.MetadataRecord, reason: str) -> None:
    _ignored(_with_topic(), record, reason)


def test_new_partition_leader_must_be_active() -> None:
    image = replay_all([r_fence(3, 2)], _with_topic())
    _ignored(image, r_partition(1, 2, [3, 1], isr=[3, 1]), "leader 3 is not an active broker")


def test_partition_change_epochs() -> None:
    image = _with_topic()
    # ISR shrink without leader change: partition epoch +1, leader epoch unchanged.
    image = replay_all([r_change(1, 0, 0, isr=[1, 2])], image)
    p = image.topics.partition(T1, 0)
    assert p is not None and (p.isr, p.leader_epoch, p.partition_epoch) == ((1, 2), 0, 1)
    # Leader change: both bump.
    image = replay_all([r_change(1, 0, 1, leader=2)], image)
    p = image.topics.partition(T1, 0)
    assert p is not None and (p.leader, p.leader_epoch, p.partition_epoch) == (2, 1, 2)
    # Explicit bump without leader change.
    image = replay_all([r_change(1, 0, 2, bump=True)], image)
    p = image.topics.partition(T1, 0)
    assert p is not None and (p.leader_epoch, p.partition_epoch) == (2, 3)
    # Offline: leader -1 bumps the leader epoch too.
    image = replay_all([r_change(1, 0, 3, leader=-1)], image)
    p = image.topics.partition(T1, 0)
    assert p is not None and (p.leader, p.leader_epoch) == (-1, 3)


def test_replay_counts_leader_elections_and_forgets_a_refused_batch() -> None:
    image = _with_topic()  # t-0: replicas/ISR [1, 2, 3], leader 1; t-1: [2, 3, 1], leader 2
    delta = MetadataDelta(image)
    # Leader 1 -> 2 (in the ISR: clean); an ISR shrink keeping the leader is no election.
    assert delta.replay_batch([r_change(1, 0, 0, leader=2, isr=[2, 3]),
                               r_change(1, 1, 0, isr=[2, 3])], image.offset + 1) is None
    assert delta.leader_elections == (1, 0)
    # Offline is no election; then 1 leads although the ISR just before was [3]: unclean.
    assert delta.replay_batch([r_change(1, 0, 1, leader=-1, isr=[3])], delta.offset + 1) is None
    assert delta.replay_batch([r_change(1, 0, 2, leader=1, isr=[1])], delta.offset + 1) is None
    assert delta.leader_elections == (1, 1)
    # A batch refused by its last record counts nothing, not even its valid first record.
    outcome = delta.replay_batch([r_change(1, 1, 1, leader=3), r_change(1, 1, 9, leader=2)],
                                 delta.offset + 1)
    assert outcome is not None and "not the expected 9" in outcome
    assert delta.leader_elections == (1, 1)


def test_apply_shares_the_topics_a_delta_did_not_touch() -> None:
    image = replay_all([r_topic("u", 2), r_partition(2, 0, [1, 2, 3])], _with_topic())
    after = replay_all([r_change(1, 1, 0, isr=[2, 3])], image)
    assert after.topics.get("u") is image.topics.get("u")
    old_t, new_t = image.topics.get("t"), after.topics.get("t")
    assert old_t is not None and new_t is not None
    assert new_t.partitions[0] is old_t.partitions[0]
    assert new_t.partitions[1].isr == (2, 3) and old_t.partitions[1].isr == (2, 3, 1)


def test_partition_change_replicas() -> None:
    image = replay_all([r_change(1, 0, 0, replicas=[1, 2], isr=[1, 2])], _with_topic())
    p = image.topics.partition(T1, 0)
    assert p is not None and p.replicas == (1, 2)


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (r_change(1, 0, 7, isr=[1]), "partition epoch is 0, not the expected 7"),
        (r_change(1, 9, 0, isr=[1]), "does not exist"),
        (r_change(2, 0, 0, isr=[1]), "does not exist"),
        (r_change(1, 0, 0, isr=[1, 4]), "is not a subset of replicas"),
        (r_change(1, 0, 0, isr=[2, 3]), "leader 1 is not in ISR"),
        (r_change(1, 0, 0, leader=4), "leader 4 is not in ISR"),
        (r_change(1, 0, 0, isr=[]), "ISR is empty"),
        (r_change(1, 0, 0, replicas=[1, 2]), "is not a subset of replicas"),
    ],
)
def test_invalid_partition_changes_are_no_ops(record: metadata_pb2.MetadataRecord, reason: str
                                              ) -> None:
    _ignored(_with_topic(), record, reason)


def test_partition_change_rechecks_broker_liveness() -> None:
    image = replay_all([r_change(1, 0, 0, isr=[1, 2])], _with_topic())
    image = replay_all([r_fence(3, 2)], image)
    _ignored(image, r_change(1, 0, 1, isr=[1, 2, 3]), "new ISR member 3 is not an active broker")
    _ignored(image, r_change(1, 1, 0, leader=3), "leader 3 is not an active broker")


def test_remove_topic_removes_partitions_and_configs() -> None:
    image = replay_all([r_config(TOPIC, "t", "retention.ms", "5")], _with_topic())
    remove = metadata_pb2.MetadataRecord(remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=T1))
    image = replay_all([remove], image)
    assert image.topics.get("t") is None and image.topics.get_by_id(T1) is None
    assert image.configs.get(TOPIC, "t") == {}
    _ignored(image, remove, "does not exist")
    # The name is free again, with no old partitions or configs.
    image = replay_all([r_topic("t", 2), r_partition(2, 0, [1])], image)
    topic = image.topics.get("t")
    assert topic is not None and topic.num_partitions == 1


def test_delete_and_recreate_in_one_delta() -> None:
    image = _with_topic()
    delta = MetadataDelta(image)
    remove = metadata_pb2.MetadataRecord(remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=T1))
    assert delta.replay_batch([remove, r_topic("t", 2), r_partition(2, 0, [1])],
                              image.offset + 1) is None
    after = delta.apply()
    topic = after.topics.get("t")
    assert topic is not None and topic.topic_id == topic_id_of(2) and topic.num_partitions == 1


# --- configs and producer ids -----------------------------------------------------------------

def test_config_records() -> None:
    image = replay_all(
        [r_config(TOPIC, "t", "retention.ms", "5"), r_config(BROKER, "", "log.retention.ms", "7")],
        _with_topic(),
    )
    assert image.configs.get(TOPIC, "t") == {"retention.ms": "5"}
    assert image.configs.topic_config("t").retention_ms == 5
    image = replay_all([r_config(TOPIC, "t", "retention.ms", None)], image)
    assert image.configs.topic_config("t").retention_ms == 7


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (r_config(TOPIC, "nope", "retention.ms", "5"), "topic does not exist"),
        (r_config(TOPIC, "t", "retention.ms", "soon"), "not an integer"),
        (r_config(TOPIC, "t", "retention.ms", "+5"), "is not canonical"),
        (r_config(TOPIC, "t", "bogus", "5"), "unknown topic config"),
        (r_config(BROKER, "x", "log.retention.ms", "5"), "is not '' or a broker id"),
        (r_config(0, "t", "retention.ms", "5"), "unknown resource type"),
    ],
)
def test_invalid_config_records_are_no_ops(record: metadata_pb2.MetadataRecord, reason: str
                                           ) -> None:
    _ignored(_with_topic(), record, reason)


def test_producer_ids_must_advance_and_name_a_current_broker() -> None:
    def block(broker_id: int, epoch: int, next_id: int) -> metadata_pb2.MetadataRecord:
        return metadata_pb2.MetadataRecord(producer_ids=metadata_pb2.ProducerIdsRecord(
            broker_id=broker_id, broker_epoch=epoch, next_producer_id=next_id
        ))

    image = replay_all([block(1, 0, 1000)], _cluster())
    assert image.producer_ids.next_producer_id == 1000
    _ignored(image, block(1, 0, 1000), "does not advance past 1000")
    _ignored(image, block(1, 3, 2000), "stale")


# --- batches and offsets ----------------------------------------------------------------------

def test_a_batch_applies_all_or_nothing() -> None:
    image = _cluster()
    delta = MetadataDelta(image)
    outcome = delta.replay_batch(
        [r_topic("a", 1), r_partition(1, 0, [1]), r_partition(1, 1, [1], isr=[2])],
        image.offset + 1,
    )
    assert outcome == "offset 8: partition 1 of 'a': ISR [2] is not a subset of replicas [1]"
    after = delta.apply()
    assert after.offset == image.offset + 3
    assert after.topics.get("a") is None


def test_later_batches_in_one_delta_build_on_earlier_ones() -> None:
    image = _cluster()
    delta = MetadataDelta(image)
    assert delta.replay_batch([r_topic("a", 1)], 6) is None
    assert delta.replay_batch([r_topic("a", 2)], 7) == "offset 7: topic 'a' already exists"
    assert delta.replay_batch([r_partition(1, 0, [1])], 8) is None
    after = delta.apply()
    topic = after.topics.get("a")
    assert topic is not None and topic.num_partitions == 1 and after.offset == 8


def test_offsets_must_increase() -> None:
    image = _cluster()
    delta = MetadataDelta(image)
    with pytest.raises(InvariantViolation, match="not after"):
        delta.replay(r_topic("a", 1), image.offset)


def test_apply_leaves_the_old_image_alone_and_shares_unchanged_parts() -> None:
    image = _with_topic()
    digest = image.digest()
    after = replay_all([r_config(TOPIC, "t", "retention.ms", "5")], image)
    assert image.digest() == digest
    assert after.cluster is image.cluster and after.topics is image.topics
    with pytest.raises(TypeError):
        after.cluster.brokers[9] = after.cluster.brokers[1]  # type: ignore[index]


# --- local changes ----------------------------------------------------------------------------

def test_local_changes() -> None:
    image = _with_topic()
    delta = MetadataDelta(image)
    remove = metadata_pb2.MetadataRecord(remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=T1))
    batch = [r_topic("u", 2), r_partition(2, 0, [3, 1]), r_partition(2, 1, [1, 3])]
    assert delta.replay_batch(batch, image.offset + 1) is None
    changes = delta.local_changes(1)
    assert [(p.topic_name, p.partition_id) for p in changes.leaders] == [("u", 1)]
    assert [(p.topic_name, p.partition_id) for p in changes.followers] == [("u", 0)]
    assert changes.deletes == ()
    assert delta.replay(remove, delta.offset + 1) is None
    changes = delta.local_changes(2)
    assert [(p.topic_name, p.partition_id) for p in changes.deletes] == [("t", 0), ("t", 1)]
    assert delta.local_changes(9) == type(changes)((), (), ())


def test_local_changes_on_reassignment_and_leader_move() -> None:
    image = _with_topic()
    delta = MetadataDelta(image)
    assert delta.replay_batch(
        [r_change(1, 0, 0, replicas=[1, 2], isr=[1, 2]), r_change(1, 1, 0, leader=3)],
        image.offset + 1,
    ) is None
    assert [p.partition_id for p in delta.local_changes(3).deletes] == [0]
    assert [p.partition_id for p in delta.local_changes(3).leaders] == [1]
    followers = delta.local_changes(2).followers
    assert [p.partition_id for p in followers] == [0, 1]
    assert followers[1].registration.leader_epoch == 1
