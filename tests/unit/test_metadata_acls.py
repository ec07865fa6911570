"""ACL bindings in the metadata image (tidelog/metadata): AclRecord and RemoveAclRecord replay,
invalid records as no-ops, the image's bindings() (ordered, the same tuple while unchanged), the
canonical lines and digest, and a snapshot round trip that keeps them."""

from __future__ import annotations

import dataclasses

import pytest
from controller_testkit import r_topic, replay_all

from tidelog.acl import AclBinding, binding_to_proto
from tidelog.invariants import InvariantViolation
from tidelog.metadata import records
from tidelog.metadata.delta import MetadataDelta
from tidelog.metadata.image import AclsImage, MetadataImage
from tidelog.v1 import metadata_pb2

READ_ORDERS = AclBinding("User:alice", "*", "topic", "orders", "literal", "Read", "allow")
WRITE_LOGS = AclBinding("User:bob", "10.0.0.1", "topic", "logs-", "prefixed", "Write", "allow")
DENY_GROUP = AclBinding("User:*", "*", "group", "g", "literal", "All", "deny")


def acl_id(n: int) -> bytes:
    return n.to_bytes(16, "big")


def r_acl(n: int, binding: AclBinding) -> metadata_pb2.MetadataRecord:
    return records.metadata_record(
        metadata_pb2.AclRecord(acl_id=acl_id(n), binding=binding_to_proto(binding)))


def r_remove_acl(n: int) -> metadata_pb2.MetadataRecord:
    return records.metadata_record(metadata_pb2.RemoveAclRecord(acl_id=acl_id(n)))


def replay(image: MetadataImage, *batch: metadata_pb2.MetadataRecord
           ) -> tuple[MetadataImage, str | None]:
    delta = MetadataDelta(image)
    outcome = delta.replay_batch(batch, image.offset + 1)
    return delta.apply(), outcome


def _image() -> MetadataImage:
    return replay_all([r_acl(3, DENY_GROUP), r_acl(1, READ_ORDERS), r_acl(2, WRITE_LOGS)])


def test_replay_adds_bindings_in_id_order() -> None:
    image = _image()
    assert image.acls.bindings() == (READ_ORDERS, WRITE_LOGS, DENY_GROUP)
    assert image.acls.get(acl_id(2)) == WRITE_LOGS
    assert image.acls.id_of(DENY_GROUP) == acl_id(3)
    assert MetadataImage.empty().acls.bindings() == ()


def test_bindings_is_the_same_tuple_while_acls_do_not_change() -> None:
    image = _image()
    later, outcome = replay(image, r_topic("t", 1))
    assert outcome is None
    assert later.acls is image.acls and later.acls.bindings() is image.acls.bindings()
    changed, _ = replay(later, r_remove_acl(2))
    assert changed.acls.bindings() == (READ_ORDERS, DENY_GROUP)


def test_remove() -> None:
    image, outcome = replay(_image(), r_remove_acl(1))
    assert outcome is None
    assert image.acls.bindings() == (WRITE_LOGS, DENY_GROUP)
    assert image.acls.get(acl_id(1)) is None and image.acls.id_of(READ_ORDERS) is None


def test_remove_of_an_unknown_id_is_a_no_op() -> None:
    image = _image()
    after, outcome = replay(image, r_remove_acl(9))
    assert outcome is not None and "does not exist" in outcome
    assert after.digest() == image.with_offset(after.offset).digest()


def test_add_and_remove_within_one_batch() -> None:
    image, outcome = replay(_image(), r_remove_acl(1), r_acl(4, READ_ORDERS), r_remove_acl(3))
    assert outcome is None
    assert image.acls.bindings() == (WRITE_LOGS, READ_ORDERS)
    assert image.acls.id_of(READ_ORDERS) == acl_id(4)


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (r_acl(1, dataclasses.replace(READ_ORDERS, principal="alice")), "principal 'alice'"),
        (r_acl(1, dataclasses.replace(READ_ORDERS, host="a.example")), "host 'a.example'"),
        (r_acl(1, dataclasses.replace(READ_ORDERS, operation="read")), "operation 'read'"),
        (r_acl(1, dataclasses.replace(READ_ORDERS, resource_type="cluster")),
         "the cluster resource is named"),
        (r_acl(5, READ_ORDERS), "the same binding exists as ACL " + acl_id(1).hex()),
        (r_acl(1, AclBinding("User:c", "*", "topic", "x", "literal", "Read", "allow")),
         "is in use"),
        (records.metadata_record(metadata_pb2.AclRecord(
            acl_id=b"\x01", binding=binding_to_proto(READ_ORDERS))), "not a valid UUID"),
        (records.metadata_record(metadata_pb2.AclRecord(
            acl_id=bytes(16), binding=binding_to_proto(READ_ORDERS))), "not a valid UUID"),
    ],
)
def test_invalid_acl_records_are_no_ops(record: metadata_pb2.MetadataRecord,
                                        reason: str) -> None:
    image = _image()
    base = image if "in use" in reason or "same binding" in reason else MetadataImage.empty()
    # With a valid record before it in the batch: the batch is atomic, so neither applies.
    after, outcome = replay(base, r_acl(7, dataclasses.replace(DENY_GROUP, host="10.1.1.1")),
                            record)
    assert outcome is not None and reason in outcome, outcome
    assert after.digest() == base.with_offset(after.offset).digest()


def test_canonical_lines_and_digest() -> None:
    image = _image()
    lines = image.canonical_lines()
    acl_lines = [line for line in lines if line.startswith("acl ")]
    assert acl_lines == [
        f'acl {acl_id(1).hex()} allow "User:alice" host="*" Read topic literal "orders"',
        f'acl {acl_id(2).hex()} allow "User:bob" host="10.0.0.1" Write topic prefixed "logs-"',
        f'acl {acl_id(3).hex()} deny "User:*" host="*" All group literal "g"',
    ]
    assert lines[-1] == "producer_ids next=0"
    removed, _ = replay(image, r_remove_acl(3))
    readded, _ = replay(removed, r_acl(3, DENY_GROUP))
    assert removed.digest() != image.with_offset(removed.offset).digest()
    assert readded.digest() == image.with_offset(readded.offset).digest()
    other_id, _ = replay(removed, r_acl(4, DENY_GROUP))
    assert other_id.digest() != readded.digest()


def test_snapshot_round_trip_keeps_acls() -> None:
    image = replay_all([r_topic("t", 1)], _image())
    snapshot = records.image_to_snapshot(image, cluster_id="c")
    assert [r.acl.acl_id for r in snapshot.records if r.HasField("acl")] == [
        acl_id(1), acl_id(2), acl_id(3)]
    restored = records.image_from_snapshot(
        records.decode_snapshot(records.encode_snapshot(snapshot)), cluster_id="c")
    assert restored.digest() == image.digest()
    assert restored.acls.bindings() == image.acls.bindings()
    assert dict(restored.acls.by_id) == dict(image.acls.by_id)


def test_describe_message_shows_acl_records() -> None:
    text = records.describe_message(r_acl(1, READ_ORDERS), bytes_hex_max=8)
    assert text == ('acl acl_id=00000000 binding={principal="User:alice" host="*" '
                    'resource_type="topic" resource_name="orders" pattern_type="literal" '
                    'operation="Read" permission="allow"}')
    assert records.describe_message(r_remove_acl(2)) == f"remove_acl acl_id={acl_id(2).hex()}"


def test_acls_image_invariants() -> None:
    with pytest.raises(InvariantViolation, match="distinct bindings"):
        AclsImage({acl_id(1): READ_ORDERS, acl_id(2): READ_ORDERS}, {READ_ORDERS: acl_id(1)})
    with pytest.raises(InvariantViolation, match="4 bytes"):
        AclsImage.of({b"abcd": READ_ORDERS})
    with pytest.raises(InvariantViolation, match="not indexed"):
        AclsImage({acl_id(1): READ_ORDERS}, {WRITE_LOGS: acl_id(1)})
    image = _image()
    with pytest.raises(TypeError):
        image.acls.by_id[acl_id(9)] = READ_ORDERS  # type: ignore[index]
