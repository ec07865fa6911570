"""Metadata records on the wire: batches, snapshots, and a readable one-line form.

A committed batch is a ``MetadataRecordBatch`` (schema version + records), the single argument of
the Raft adapter's one replicated method. A snapshot is the image as the records that rebuild it
from empty (Kafka's snapshot format), so a node loads it with the same replay code it uses for the
log (``MetadataDelta(from_snapshot=True)``). Decoders refuse schema versions they do not know
(UNSUPPORTED_VERSION) and malformed input (INVALID_RECORD) rather than crash.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence

from google.protobuf import message as protobuf_message
from google.protobuf.descriptor import FieldDescriptor

from tidelog import limits
from tidelog.acl import binding_to_proto
from tidelog.errors import InconsistentClusterIdError, InvalidRecordError, UnsupportedVersionError
from tidelog.invariants import InvariantViolation, check
from tidelog.metadata.delta import MetadataDelta
from tidelog.metadata.image import BROKER, EMPTY_OFFSET, TOPIC, MetadataImage
from tidelog.v1 import common_pb2, metadata_pb2

__all__ = [
    "RECORDS_PER_BATCH_MAX",
    "SCHEMA_VERSION",
    "decode_batch",
    "decode_snapshot",
    "describe_message",
    "encode_batch",
    "encode_snapshot",
    "image_from_snapshot",
    "image_to_snapshot",
    "metadata_record",
    "record_kind",
]

#: The schema version this code writes and the only one it reads.
SCHEMA_VERSION = 1
#: Records in one committed batch. The largest batch the managers make is a CreateTopics of
#: PARTITIONS_PER_REQUEST_MAX partitions plus its topic and config records.
RECORDS_PER_BATCH_MAX = 200_000
check(
    RECORDS_PER_BATCH_MAX >= 2 * limits.PARTITIONS_PER_REQUEST_MAX,
    "a metadata batch must hold two records per partition of a request",
)

_FIELD_BY_TYPE: dict[str, str] = {
    field.message_type.full_name: field.name
    for field in metadata_pb2.MetadataRecord.DESCRIPTOR.oneofs_by_name["record"].fields
}


def metadata_record(inner: protobuf_message.Message) -> metadata_pb2.MetadataRecord:
    """Wrap a ``<Noun>Record`` into the ``MetadataRecord`` oneof."""
    field = _FIELD_BY_TYPE[inner.DESCRIPTOR.full_name]
    record = metadata_pb2.MetadataRecord()
    getattr(record, field).CopyFrom(inner)
    return record


def record_kind(record: metadata_pb2.MetadataRecord) -> str:
    """The name of the record's set oneof field (``register_broker``...), "" when empty."""
    return record.WhichOneof("record") or ""


# --- batches ----------------------------------------------------------------------------------


def encode_batch(
    records: Sequence[metadata_pb2.MetadataRecord], *, append_time_ms: int
) -> bytes:
    """The bytes the Raft adapter appends for one batch."""
    if not 0 < len(records) <= RECORDS_PER_BATCH_MAX:
        raise InvariantViolation(
            f"a metadata batch of {len(records)} records (1..{RECORDS_PER_BATCH_MAX})")
    check(all(record_kind(r) for r in records), "a metadata record without a kind")
    batch = metadata_pb2.MetadataRecordBatch(
        schema_version=SCHEMA_VERSION, records=records, append_time_ms=append_time_ms
    )
    data: bytes = batch.SerializeToString()
    return data


def decode_batch(data: bytes) -> metadata_pb2.MetadataRecordBatch:
    """A committed batch from its bytes; UnsupportedVersionError / InvalidRecordError if bad."""
    batch = metadata_pb2.MetadataRecordBatch()
    try:
        batch.ParseFromString(data)
    except protobuf_message.DecodeError as error:
        raise InvalidRecordError(f"metadata batch does not parse: {error}") from None
    if batch.schema_version != SCHEMA_VERSION:
        raise UnsupportedVersionError(
            f"metadata batch schema version {batch.schema_version} is not {SCHEMA_VERSION}"
        )
    if not 0 < len(batch.records) <= RECORDS_PER_BATCH_MAX:
        raise InvalidRecordError(
            f"metadata batch has {len(batch.records)} records (1..{RECORDS_PER_BATCH_MAX})"
        )
    for index, record in enumerate(batch.records):
        if not record_kind(record):
            raise InvalidRecordError(f"metadata batch record {index} has no field set")
    return batch


# --- snapshots --------------------------------------------------------------------------------


def _snapshot_records(image: MetadataImage) -> Iterable[metadata_pb2.MetadataRecord]:
    for broker_id, b in sorted(image.cluster.brokers.items()):
        record = metadata_pb2.RegisterBrokerRecord(
            broker_id=broker_id, incarnation_id=b.incarnation_id, broker_epoch=b.broker_epoch,
            endpoint=common_pb2.Endpoint(host=b.host, port=b.port), rack=b.rack, fenced=b.fenced,
            credential_verifier=b.credential_verifier,
        )
        if b.inter_broker_port:
            record.inter_broker_endpoint.host = b.inter_broker_host
            record.inter_broker_endpoint.port = b.inter_broker_port
        yield metadata_record(record)
        if b.in_controlled_shutdown:
            yield metadata_record(metadata_pb2.BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=b.broker_epoch, in_controlled_shutdown=True
            ))
    for name in sorted(image.topics.by_name):
        topic = image.topics.by_name[name]
        yield metadata_record(metadata_pb2.TopicRecord(name=name, topic_id=topic.topic_id))
        for partition_id in range(topic.num_partitions):
            p = topic.partitions[partition_id]
            yield metadata_record(metadata_pb2.PartitionRecord(
                topic_id=topic.topic_id, partition_id=partition_id, replicas=p.replicas,
                isr=p.isr, leader=p.leader, leader_epoch=p.leader_epoch,
                partition_epoch=p.partition_epoch,
            ))
    for (resource_type, resource_name), entries in sorted(image.configs.resources.items()):
        if resource_type not in (TOPIC, BROKER):
            raise InvariantViolation(
                f"config resource type {resource_type} is neither a topic nor a broker")
        for key, value in sorted(entries.items()):
            yield metadata_record(metadata_pb2.ConfigRecord(
                resource_type=resource_type,  # type: ignore[arg-type]
                resource_name=resource_name, name=key, value=value,
            ))
    for acl_id, binding in sorted(image.acls.by_id.items()):
        yield metadata_record(metadata_pb2.AclRecord(
            acl_id=acl_id, binding=binding_to_proto(binding)))
    for (name, mechanism), c in sorted(image.scram.credentials.items()):
        yield metadata_record(metadata_pb2.UserScramCredentialRecord(
            name=name, mechanism=mechanism,  # type: ignore[arg-type]
            salt=c.salt, stored_key=c.stored_key, server_key=c.server_key,
            iterations=c.iterations))
    if image.producer_ids.next_producer_id > 0:
        # broker_id -1: the snapshot form, not handed to any broker (as Kafka writes it).
        yield metadata_record(metadata_pb2.ProducerIdsRecord(
            broker_id=-1, broker_epoch=-1, next_producer_id=image.producer_ids.next_producer_id
        ))


#: A snapshot being built calls its ``progress`` once per this many records.
SNAPSHOT_PROGRESS_RECORDS = 2_000


def image_to_snapshot(image: MetadataImage, *, cluster_id: str,
                      progress: Callable[[], None] | None = None,
                      ) -> metadata_pb2.MetadataSnapshot:
    """The snapshot of ``image``: the records that rebuild it from empty, and its offset.
    ``progress`` is called every SNAPSHOT_PROGRESS_RECORDS records (a controller's Raft thread
    keeps its quorum alive there: 100,000 partitions take ~0.4 s)."""
    records = _snapshot_records(image)
    return metadata_pb2.MetadataSnapshot(
        schema_version=SCHEMA_VERSION,
        metadata_offset=image.offset,
        records=records if progress is None else _with_progress(records, progress),
        cluster_id=cluster_id,
    )


def _with_progress(records: Iterable[metadata_pb2.MetadataRecord],
                   progress: Callable[[], None]) -> Iterator[metadata_pb2.MetadataRecord]:
    for count, record in enumerate(records, 1):
        if count % SNAPSHOT_PROGRESS_RECORDS == 0:
            progress()
        yield record


def image_from_snapshot(
    snapshot: metadata_pb2.MetadataSnapshot, *, cluster_id: str | None = None
) -> MetadataImage:
    """The image a snapshot describes (same digest as the image it was taken from).

    Raises UnsupportedVersionError for an unknown schema version, InconsistentClusterIdError when
    ``cluster_id`` is given and differs, InvalidRecordError when a record does not apply.
    """
    if snapshot.schema_version != SCHEMA_VERSION:
        raise UnsupportedVersionError(
            f"metadata snapshot schema version {snapshot.schema_version} is not {SCHEMA_VERSION}"
        )
    if cluster_id is not None and snapshot.cluster_id != cluster_id:
        raise InconsistentClusterIdError(
            f"snapshot of cluster {snapshot.cluster_id!r}, expected {cluster_id!r}"
        )
    offset = snapshot.metadata_offset
    if offset < EMPTY_OFFSET or (offset == EMPTY_OFFSET and len(snapshot.records) > 0):
        raise InvalidRecordError(f"snapshot offset {offset} is invalid for its records")
    if not snapshot.records:
        return MetadataImage.empty().with_offset(offset)
    delta = MetadataDelta(MetadataImage.empty(), from_snapshot=True)
    outcome = delta.replay_batch(snapshot.records, offset)
    if outcome is not None:
        raise InvalidRecordError(f"snapshot record does not apply: {outcome}")
    return delta.apply()


def encode_snapshot(snapshot: metadata_pb2.MetadataSnapshot) -> bytes:
    if snapshot.schema_version != SCHEMA_VERSION:
        raise InvariantViolation(
            f"snapshot schema version {snapshot.schema_version}, not {SCHEMA_VERSION}")
    data: bytes = snapshot.SerializeToString()
    return data


def decode_snapshot(data: bytes) -> metadata_pb2.MetadataSnapshot:
    """A snapshot from its bytes; version and replay are checked by image_from_snapshot."""
    snapshot = metadata_pb2.MetadataSnapshot()
    try:
        snapshot.ParseFromString(data)
    except protobuf_message.DecodeError as error:
        raise InvalidRecordError(f"metadata snapshot does not parse: {error}") from None
    if snapshot.schema_version != SCHEMA_VERSION:
        raise UnsupportedVersionError(
            f"metadata snapshot schema version {snapshot.schema_version} is not {SCHEMA_VERSION}"
        )
    return snapshot


# --- readable form ----------------------------------------------------------------------------


def describe_message(message: protobuf_message.Message, *, bytes_hex_max: int = 32) -> str:
    """A compact one-line rendering for logs and golden files.

    A MetadataRecord shows as its kind then its fields: ``topic name="a" topic_id=0f3e...``.
    Scalars are always shown, except empty strings and bytes; optional fields only when set;
    bytes as hex (cut to ``bytes_hex_max`` characters); enums by name; a ReplicaList as ``[1,2]``.
    """
    if isinstance(message, metadata_pb2.MetadataRecord):
        kind = record_kind(message)
        if not kind:
            return "<empty record>"
        inner = describe_message(getattr(message, kind), bytes_hex_max=bytes_hex_max)
        return f"{kind} {inner}".rstrip()
    parts = []
    for field in message.DESCRIPTOR.fields:
        shown = _describe_field(message, field, bytes_hex_max)
        if shown is not None:
            parts.append(f"{field.name}={shown}")
    return " ".join(parts)


def _describe_field(
    message: protobuf_message.Message, field: FieldDescriptor, bytes_hex_max: int
) -> str | None:
    value = getattr(message, field.name)
    if field.is_repeated:
        if not value:
            return None
        return "[" + ",".join(_describe_value(field, v, bytes_hex_max) for v in value) + "]"
    if field.has_presence and not message.HasField(field.name):
        return None
    if field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES) and not value:
        return None
    return _describe_value(field, value, bytes_hex_max)


def _describe_value(field: FieldDescriptor, value: object, bytes_hex_max: int) -> str:
    if isinstance(value, common_pb2.ReplicaList):
        return "[" + ",".join(str(b) for b in value.broker_ids) + "]"
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        assert isinstance(value, protobuf_message.Message)
        return "{" + describe_message(value, bytes_hex_max=bytes_hex_max) + "}"
    if field.type == FieldDescriptor.TYPE_ENUM:
        assert isinstance(value, int) and field.enum_type is not None
        enum_value = field.enum_type.values_by_number.get(value)
        return enum_value.name if enum_value is not None else str(value)
    if field.type == FieldDescriptor.TYPE_BYTES:
        assert isinstance(value, bytes)
        return value.hex()[:bytes_hex_max]
    if field.type == FieldDescriptor.TYPE_STRING:
        assert isinstance(value, str)
        return json.dumps(value)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return "true" if value else "false"
    return str(value)
