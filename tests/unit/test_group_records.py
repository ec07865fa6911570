"""The records of __consumer_offsets (broker/group/records.py): every record type survives an
encode/decode round trip with its key type in the first two bytes, a tombstone has no value, and
bytes that are not a group record are refused with CORRUPT_MESSAGE rather than misread."""

from __future__ import annotations

import pytest

from tidelog.broker.group import records as r
from tidelog.errors import CorruptMessageError
from tidelog.v1 import groups_pb2 as gpb

TOPIC = bytes(range(16))

ALL = [
    r.group_metadata_record("g", epoch=3, metadata_hash=-7),
    r.member_metadata_record("g", "m1", gpb.ConsumerGroupMemberMetadataValue(
        instance_id="i", subscribed_topic_names=["a", "b"], rebalance_timeout_ms=1000)),
    r.target_assignment_metadata_record("g", 3),
    r.target_assignment_member_record("g", "m1", {TOPIC: frozenset({2, 0})}),
    r.current_assignment_record(
        "g", "m1", member_epoch=3, previous_member_epoch=2,
        state=gpb.MEMBER_STATE_UNREVOKED_PARTITIONS, assigned={TOPIC: frozenset({0})},
        pending_revocation={TOPIC: frozenset({2})}),
    r.offset_commit_record("g", "t", 4, gpb.OffsetCommitValue(offset=10, leader_epoch=1)),
]
TOMBSTONES = [
    r.group_metadata_tombstone("g"), r.member_metadata_tombstone("g", "m1"),
    r.target_assignment_metadata_tombstone("g"), r.target_assignment_member_tombstone("g", "m"),
    r.current_assignment_tombstone("g", "m1"), r.offset_commit_tombstone("g", "t", 4),
]


@pytest.mark.parametrize("record", ALL + TOMBSTONES, ids=lambda x: x.record_type.name)
def test_round_trip(record: r.GroupRecord) -> None:
    key, value = record.encode()
    assert int.from_bytes(key[:2], "big") == record.record_type
    assert (value is None) == (record.value is None)
    assert r.decode(key, value) == record


def test_assignment_encoding_is_sorted_and_drops_empty_topics() -> None:
    entries = r.to_topic_partitions({b"b": frozenset({3, 1}), b"a": frozenset(), b"c": {0}})  # type: ignore[dict-item]
    assert [(e.topic_id, list(e.partitions)) for e in entries] == [(b"b", [1, 3]), (b"c", [0])]
    assert r.from_topic_partitions(entries) == {b"b": frozenset({1, 3}), b"c": frozenset({0})}


@pytest.mark.parametrize("key,value", [
    (b"", None), (b"\x00", None), (b"\x00\x02abc", None), (b"\x00\x03\xff\xff", None),
    (b"\x00\x03\n\x01g", b"\xff\xff\xff"),
])
def test_bad_bytes_are_refused(key: bytes, value: bytes | None) -> None:
    with pytest.raises(CorruptMessageError):
        r.decode(key, value)


def test_a_value_of_another_type_is_refused() -> None:
    with pytest.raises(TypeError):
        r.GroupRecord(gpb.ConsumerGroupMetadataKey(group_id="g"), gpb.OffsetCommitValue())
