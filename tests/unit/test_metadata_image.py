"""The metadata image (controller/image.py): immutable, invariants asserted on construction,
and a digest that is equal for equal images and changes with any part of them."""

from __future__ import annotations

import dataclasses

import pytest
from controller_testkit import r_config, r_partition, r_register, r_topic, r_unfence, replay_all

from tidelog.invariants import InvariantViolation
from tidelog.metadata.image import (
    TOPIC,
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    partition_problem,
)


def _image() -> MetadataImage:
    return replay_all([
        r_register(1, 0, rack="r1"), r_register(2, 1), r_unfence(1, 0), r_unfence(2, 1),
        r_topic("t", 1), r_partition(1, 0, [1, 2]), r_config(TOPIC, "t", "retention.ms", "5"),
    ])


def test_empty_image() -> None:
    empty = MetadataImage.empty()
    assert empty.offset == -1 and not empty.cluster.brokers and not empty.topics.by_id
    assert empty.canonical_lines() == ["offset -1", "producer_ids next=0"]


def test_digest_is_deterministic_and_sensitive() -> None:
    image = _image()
    assert image.digest() == _image().digest()
    assert image.with_offset(image.offset + 1).digest() != image.digest()
    changed = replay_all([r_config(TOPIC, "t", "retention.ms", "6")], image)
    assert changed.digest() != image.with_offset(changed.offset).digest()


def test_canonical_lines_quote_free_text() -> None:
    lines = _image().canonical_lines()
    assert lines[0] == "offset 6"
    assert any('rack="r1"' in line for line in lines)
    assert 'config CONFIG_RESOURCE_TOPIC "t" retention.ms="5"' in lines


def test_images_are_immutable() -> None:
    image = _image()
    with pytest.raises(dataclasses.FrozenInstanceError):
        image.offset = 9  # type: ignore[misc]
    with pytest.raises(TypeError):
        image.topics.by_name["x"] = image.topics.by_name["t"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("replicas", "isr", "leader", "problem"),
    [
        ((1, 2), (1,), 1, None),
        ((1, 2), (2,), -1, None),
        ((), (1,), 1, "replicas are empty"),
        ((1, 1), (1,), 1, "repeat a broker"),
        ((1, -2), (1,), 1, "negative broker id"),
        ((1, 2), (), -1, "ISR is empty"),
        ((1, 2), (1, 1), 1, "ISR [1, 1] repeats a broker"),
        ((1, 2), (1, 3), 1, "is not a subset"),
        ((1, 2), (2,), 1, "leader 1 is not in ISR"),
    ],
)
def test_partition_invariants(replicas: tuple[int, ...], isr: tuple[int, ...], leader: int,
                              problem: str | None) -> None:
    found = partition_problem(replicas, isr, leader)
    if problem is None:
        assert found is None
        PartitionRegistration(replicas, isr, leader, 0, 0)
    else:
        assert found is not None and problem in found
        with pytest.raises(InvariantViolation):
            PartitionRegistration(replicas, isr, leader, 0, 0)


def test_broker_registration_invariants() -> None:
    with pytest.raises(InvariantViolation):
        BrokerRegistration(1, b"x" * 16, 0, "h", 1, "", fenced=True, in_controlled_shutdown=True)
    with pytest.raises(InvariantViolation):
        BrokerRegistration(1, b"short", 0, "h", 1, "", fenced=True)
    registration = BrokerRegistration(1, b"x" * 16, 0, "h", 1, "", fenced=False)
    assert registration.is_active
