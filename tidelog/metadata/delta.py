"""Replay of metadata records: image + records → delta → next image.

:class:`MetadataDelta` starts from an image, replays committed records in offset order, and
``apply()`` builds the next immutable :class:`~tidelog.metadata.image.MetadataImage`. It is pure and
deterministic: the same image and records give the same result on every controller and broker.

Replay re-checks every record's preconditions (DESIGN §6): a record that is no longer valid when
it commits becomes a no-op on every node alike, and ``replay`` returns the reason. The managers
check the same facts when they make records (TigerBeetle's "check it twice"). A batch is atomic
(``replay_batch``): if any record in it is invalid, none applies, because the managers build a
batch as one consistent change (a broker's fence together with the ISR changes it implies), and
half of one could break the image's invariants (a fenced leader).

Offsets: a record's offset is its metadata offset (records, not Raft entries, are counted). The
broker epoch of a registration is the offset of its RegisterBrokerRecord; replay checks that.
Snapshots are replayed with ``from_snapshot=True``: every record then carries the snapshot's
offset and full state (epochs) rather than a change.

``local_changes(broker_id)`` tells a broker which partitions it must now lead, follow or delete
(Kafka's ``TopicsDelta.localChanges``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from tidelog import configs, limits
from tidelog.acl import AclBinding, binding_from_proto
from tidelog.errors import TidelogError
from tidelog.invariants import InvariantViolation, check
from tidelog.metadata.image import (
    ACL_ID_BYTES,
    BROKER,
    CREDENTIAL_VERIFIER_BYTES,
    NO_LEADER,
    TOPIC,
    TOPIC_ID_BYTES,
    AclsImage,
    BrokerRegistration,
    ClusterImage,
    ConfigurationsImage,
    MetadataImage,
    PartitionRegistration,
    ProducerIdsImage,
    ScramImage,
    TopicImage,
    TopicsImage,
    frozen_mapping,
    partition_problem,
)
from tidelog.metadata.topic_names import validate_topic_name
from tidelog.scram import ScramCredential, mechanism_named, user_name_problem
from tidelog.v1 import metadata_pb2

__all__ = ["LocalPartition", "LocalReplicaChanges", "MetadataDelta", "apply_records"]

_MISSING: Any = object()
PORT_MAX = 65535
#: replay_batch calls its ``progress`` every this many records (~5-20 ms of replay).
PROGRESS_RECORDS = 256


class _Ignored(Exception):
    """A record's precondition does not hold: it becomes a no-op (message = why)."""


def _require(condition: bool, reason: str | Callable[[], str]) -> None:
    if not condition:
        raise _Ignored(reason if isinstance(reason, str) else reason())


@dataclass(frozen=True, slots=True)
class LocalPartition:
    """A partition a broker hosts, with the registration it must act on."""

    topic_name: str
    topic_id: bytes
    partition_id: int
    registration: PartitionRegistration  # for deletes: the last one before deletion


@dataclass(frozen=True, slots=True)
class LocalReplicaChanges:
    """What one broker must do after a delta (each in topic name, partition order)."""

    deletes: tuple[LocalPartition, ...]  # no longer a replica here (topic deleted, reassigned)
    leaders: tuple[LocalPartition, ...]  # lead it, as of this leader epoch
    followers: tuple[LocalPartition, ...]  # follow the registration's leader


class MetadataDelta:
    """Changes to one image from replayed records; ``apply()`` gives the next image."""

    def __init__(self, image: MetadataImage, *, from_snapshot: bool = False) -> None:
        self._image = image
        self._from_snapshot = from_snapshot
        self._offset = image.offset
        # Changes, flat so that a batch can be undone key by key (see _set/_rollback).
        self._brokers: dict[int, BrokerRegistration | None] = {}  # None = unregistered
        self._topic_names: dict[bytes, str | None] = {}  # id → name; None = removed
        self._topic_ids: dict[str, bytes | None] = {}  # name → id; None = removed
        self._cleared: dict[bytes, bool] = {}  # ids whose image partitions are gone
        self._partition_counts: dict[bytes, int] = {}
        self._partitions: dict[tuple[bytes, int], PartitionRegistration] = {}
        self._configs: dict[tuple[int, str, str], str | None] = {}  # None = removed
        self._scalars: dict[str, int] = {}  # next_producer_id
        self._acls: dict[bytes, AclBinding | None] = {}  # id → binding; None = removed
        self._acl_ids: dict[AclBinding, bytes | None] = {}  # binding → id; None = removed
        # (name, mechanism) → credential; None = removed
        self._scram: dict[tuple[str, int], ScramCredential | None] = {}
        self._journal: list[tuple[dict[Any, Any], Any, Any]] = []
        # Leader elections replayed (clean, unclean): a leader other than the current one and
        # other than NO_LEADER, from the ISR or not (Kafka's election metrics).
        self._elections = (0, 0)

    @property
    def image(self) -> MetadataImage:
        """The image this delta started from."""
        return self._image

    @property
    def offset(self) -> int:
        """The offset of the last record replayed (the image's when none)."""
        return self._offset

    @property
    def leader_elections(self) -> tuple[int, int]:
        """(clean, unclean) leader elections in the batches that applied: a partition given a
        leader other than its current one and other than NO_LEADER, which was in its ISR just
        before (clean) or not (unclean). Going offline is not one, nor a new partition's first
        leader."""
        return self._elections

    # --- replay -------------------------------------------------------------------------------

    def replay(self, record: metadata_pb2.MetadataRecord, offset: int) -> str | None:
        """Replay one committed record; None if it applied, else why it was a no-op."""
        return self.replay_batch([record], offset)

    def replay_batch(
        self, records: Sequence[metadata_pb2.MetadataRecord], base_offset: int,
        progress: Callable[[], None] | None = None,
    ) -> str | None:
        """Replay a committed batch (offsets base_offset..) all or nothing.

        Returns None if every record applied, else the first invalid record's offset and reason;
        then none of the batch applied. The offset advances past the batch either way.
        ``progress`` is called every PROGRESS_RECORDS records (the controller's Raft keep-alive
        during a long replay: controller.raft.quorum.RaftQuorum.keep_alive).
        """
        check(len(records) > 0, "a committed batch holds at least one record")
        if self._from_snapshot:
            if base_offset < self._offset:
                raise InvariantViolation(
                    f"snapshot records at offset {base_offset}, before {self._offset}")
        else:
            if base_offset <= self._offset:
                raise InvariantViolation(f"batch at offset {base_offset}, not after {self._offset}")
        check(not self._journal, "the undo journal of the previous batch is not empty")
        elections_before = self._elections
        outcome: str | None = None
        for index, record in enumerate(records):
            offset = base_offset if self._from_snapshot else base_offset + index
            if progress is not None and index % PROGRESS_RECORDS == PROGRESS_RECORDS - 1:
                progress()
            try:
                self._replay_one(record, offset)
            except _Ignored as ignored:
                outcome = f"offset {offset}: {ignored}"
                self._rollback()
                self._elections = elections_before
                break
        self._journal.clear()
        self._offset = base_offset if self._from_snapshot else base_offset + len(records) - 1
        return outcome

    def _replay_one(self, record: metadata_pb2.MetadataRecord, offset: int) -> None:
        kind = record.WhichOneof("record")
        _require(kind is not None, "empty record (no field set)")
        assert kind is not None
        handler = _HANDLERS[kind]
        handler(self, getattr(record, kind), offset)

    # --- undo journal -------------------------------------------------------------------------

    def _set(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        self._journal.append((table, key, table.get(key, _MISSING)))
        table[key] = value

    def _delete(self, table: dict[Any, Any], key: Any) -> None:
        if key in table:
            self._journal.append((table, key, table[key]))
            del table[key]

    def _rollback(self) -> None:
        for table, key, old in reversed(self._journal):
            if old is _MISSING:
                table.pop(key, None)
            else:
                table[key] = old
        self._journal.clear()

    # --- current state (image + changes) ------------------------------------------------------

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self._image.cluster.broker(broker_id)

    def topic_name(self, topic_id: bytes) -> str | None:
        if topic_id in self._topic_names:
            return self._topic_names[topic_id]
        topic = self._image.topics.get_by_id(topic_id)
        return topic.name if topic is not None else None

    def topic_id(self, name: str) -> bytes | None:
        if name in self._topic_ids:
            return self._topic_ids[name]
        topic = self._image.topics.get(name)
        return topic.topic_id if topic is not None else None

    def partition_count(self, topic_id: bytes) -> int:
        if topic_id in self._partition_counts:
            return self._partition_counts[topic_id]
        topic = self._image.topics.get_by_id(topic_id)
        return topic.num_partitions if topic is not None and topic_id not in self._cleared else 0

    def partition(self, topic_id: bytes, partition_id: int) -> PartitionRegistration | None:
        # A changed partition's entry exists only while its topic does (RemoveTopicRecord
        # deletes them), so it answers without the topic checks: replay asks this once per
        # partition change, on every controller and broker.
        changed = self._partitions.get((topic_id, partition_id))
        if changed is not None:
            return changed
        if topic_id in self._topic_names and (
                self._topic_names[topic_id] is None or topic_id in self._cleared):
            return None
        return self._image.topics.partition(topic_id, partition_id)

    def config(self, resource_type: int, resource_name: str, key: str) -> str | None:
        change = self._configs.get((resource_type, resource_name, key), _MISSING)
        if change is not _MISSING:
            assert change is None or isinstance(change, str)
            return change
        return self._image.configs.get(resource_type, resource_name).get(key)

    def next_producer_id(self) -> int:
        return self._scalars.get("next_producer_id", self._image.producer_ids.next_producer_id)

    def acl(self, acl_id: bytes) -> AclBinding | None:
        if acl_id in self._acls:
            return self._acls[acl_id]
        return self._image.acls.get(acl_id)

    def acl_id(self, binding: AclBinding) -> bytes | None:
        if binding in self._acl_ids:
            return self._acl_ids[binding]
        return self._image.acls.id_of(binding)

    # --- brokers ------------------------------------------------------------------------------

    def _registered(self, broker_id: int, broker_epoch: int) -> BrokerRegistration:
        registration = self.broker(broker_id)
        _require(registration is not None, f"broker {broker_id} is not registered")
        assert registration is not None
        _require(
            registration.broker_epoch == broker_epoch,
            lambda: f"broker {broker_id} epoch {broker_epoch} is stale "
            f"(registered with {registration.broker_epoch})",
        )
        return registration

    def _replay_register_broker(self, r: metadata_pb2.RegisterBrokerRecord, offset: int) -> None:
        _require(r.broker_id >= 0, f"broker id {r.broker_id} is negative")
        _require(len(r.incarnation_id) == TOPIC_ID_BYTES, "incarnation id is not 16 bytes")
        _require(0 < r.endpoint.port <= PORT_MAX and bool(r.endpoint.host), "invalid endpoint")
        inter = r.inter_broker_endpoint
        _require(not r.HasField("inter_broker_endpoint")
                 or (0 < inter.port <= PORT_MAX and bool(inter.host)),
                 "invalid inter-broker endpoint")
        _require(len(r.credential_verifier) in (0, CREDENTIAL_VERIFIER_BYTES),
                 f"broker {r.broker_id}: a credential verifier of {len(r.credential_verifier)} "
                 f"bytes")
        if self._from_snapshot:
            _require(0 <= r.broker_epoch <= offset, f"broker epoch {r.broker_epoch} > {offset}")
        else:
            _require(
                r.broker_epoch == offset,
                f"broker {r.broker_id} epoch {r.broker_epoch} is not the record's offset {offset}",
            )
        existing = self.broker(r.broker_id)
        _require(
            existing is None or existing.broker_epoch < r.broker_epoch,
            f"broker {r.broker_id} is registered with a newer epoch",
        )
        self._set(self._brokers, r.broker_id, BrokerRegistration(
            broker_id=r.broker_id, incarnation_id=r.incarnation_id, broker_epoch=r.broker_epoch,
            host=r.endpoint.host, port=r.endpoint.port, rack=r.rack, fenced=r.fenced,
            inter_broker_host=inter.host, inter_broker_port=inter.port,
            credential_verifier=r.credential_verifier,
        ))

    def _replay_unregister_broker(self, r: metadata_pb2.UnregisterBrokerRecord, _: int) -> None:
        self._registered(r.broker_id, r.broker_epoch)
        self._set(self._brokers, r.broker_id, None)

    def _replay_fence_broker(self, r: metadata_pb2.FenceBrokerRecord, _: int) -> None:
        registration = self._registered(r.broker_id, r.broker_epoch)
        _require(not registration.fenced, f"broker {r.broker_id} is already fenced")
        changed = replace(registration, fenced=True, in_controlled_shutdown=False)
        self._set(self._brokers, r.broker_id, changed)

    def _replay_unfence_broker(self, r: metadata_pb2.UnfenceBrokerRecord, _: int) -> None:
        registration = self._registered(r.broker_id, r.broker_epoch)
        _require(registration.fenced, f"broker {r.broker_id} is not fenced")
        self._set(self._brokers, r.broker_id, replace(registration, fenced=False))

    def _replay_broker_registration_change(
        self, r: metadata_pb2.BrokerRegistrationChangeRecord, _: int
    ) -> None:
        registration = self._registered(r.broker_id, r.broker_epoch)
        _require(
            not (r.in_controlled_shutdown and registration.fenced),
            f"broker {r.broker_id} is fenced and cannot enter controlled shutdown",
        )
        changed = replace(registration, in_controlled_shutdown=r.in_controlled_shutdown)
        self._set(self._brokers, r.broker_id, changed)

    # --- topics and partitions ----------------------------------------------------------------

    def _replay_topic(self, r: metadata_pb2.TopicRecord, _: int) -> None:
        try:
            validate_topic_name(r.name)
        except TidelogError as error:
            raise _Ignored(error.message) from None
        _require(
            len(r.topic_id) == TOPIC_ID_BYTES and any(r.topic_id), "topic id is not a valid UUID"
        )
        _require(self.topic_id(r.name) is None, f"topic {r.name!r} already exists")
        _require(self.topic_name(r.topic_id) is None, f"topic id {r.topic_id.hex()} is in use")
        self._set(self._topic_names, r.topic_id, r.name)
        self._set(self._topic_ids, r.name, r.topic_id)
        self._set(self._partition_counts, r.topic_id, 0)
        if self._image.topics.get_by_id(r.topic_id) is not None:
            self._set(self._cleared, r.topic_id, True)

    def _replay_remove_topic(self, r: metadata_pb2.RemoveTopicRecord, _: int) -> None:
        name = self.topic_name(r.topic_id)
        _require(name is not None, f"topic id {r.topic_id.hex()} does not exist")
        assert name is not None
        for partition_id in range(self.partition_count(r.topic_id)):
            self._delete(self._partitions, (r.topic_id, partition_id))
        for key in self._config_keys(TOPIC, name):
            self._set(self._configs, (TOPIC, name, key), None)
        self._set(self._topic_names, r.topic_id, None)
        self._set(self._topic_ids, name, None)
        self._set(self._partition_counts, r.topic_id, 0)
        if self._image.topics.get_by_id(r.topic_id) is not None:
            self._set(self._cleared, r.topic_id, True)

    def _check_leader_active(self, leader: int) -> None:
        if leader == NO_LEADER or self._from_snapshot:
            return
        registration = self.broker(leader)
        _require(
            registration is not None and registration.is_active,
            f"leader {leader} is not an active broker",
        )

    def _replay_partition(self, r: metadata_pb2.PartitionRecord, _: int) -> None:
        name = self.topic_name(r.topic_id)
        _require(name is not None, f"topic id {r.topic_id.hex()} does not exist")
        count = self.partition_count(r.topic_id)
        _require(
            r.partition_id == count,
            f"partition {r.partition_id} of {name!r} is not the next one ({count})",
        )
        _require(count < limits.PARTITIONS_PER_TOPIC_MAX, "topic has the most partitions allowed")
        replicas, isr = tuple(r.replicas), tuple(r.isr)
        _require(len(replicas) <= limits.REPLICATION_FACTOR_MAX, "too many replicas")
        problem = partition_problem(replicas, isr, r.leader)
        _require(problem is None, lambda: f"partition {r.partition_id} of {name!r}: {problem}")
        _require(r.leader_epoch >= 0 and r.partition_epoch >= 0, "negative epoch")
        self._check_leader_active(r.leader)
        registration = PartitionRegistration(
            replicas=replicas, isr=isr, leader=r.leader,
            leader_epoch=r.leader_epoch, partition_epoch=r.partition_epoch,
        )
        self._set(self._partitions, (r.topic_id, r.partition_id), registration)
        self._set(self._partition_counts, r.topic_id, count + 1)

    def _replay_partition_change(self, r: metadata_pb2.PartitionChangeRecord, _: int) -> None:
        # The hot path of fencing, elections and ISR changes (thousands per batch at scale):
        # each field is read once, and messages are built only when a check fails.
        topic_id, partition_id = r.topic_id, r.partition_id
        current = self.partition(topic_id, partition_id)
        if current is None:
            raise _Ignored(f"{_where(topic_id, partition_id)} does not exist")
        if current.partition_epoch != r.expected_partition_epoch:
            raise _Ignored(f"{_where(topic_id, partition_id)}: partition epoch is "
                           f"{current.partition_epoch}, not the expected "
                           f"{r.expected_partition_epoch}")
        replicas = tuple(r.replicas.broker_ids) if r.HasField("replicas") else current.replicas
        isr = tuple(r.isr.broker_ids) if r.HasField("isr") else current.isr
        leader = r.leader if r.HasField("leader") else current.leader
        _require(len(replicas) <= limits.REPLICATION_FACTOR_MAX, "too many replicas")
        problem = partition_problem(replicas, isr, leader)
        if problem is not None:
            raise _Ignored(f"{_where(topic_id, partition_id)}: {problem}")
        if leader != current.leader:
            self._check_leader_active(leader)
        for member in isr:
            if member not in current.isr:
                registration = self.broker(member)
                if registration is None or not registration.is_active:
                    raise _Ignored(f"{_where(topic_id, partition_id)}: new ISR member {member} "
                                   "is not an active broker")
        bump = leader != current.leader or r.bump_leader_epoch
        if leader != current.leader and leader != NO_LEADER:
            clean, unclean = self._elections
            self._elections = ((clean + 1, unclean) if leader in current.isr
                               else (clean, unclean + 1))
        changed = PartitionRegistration(
            replicas=replicas, isr=isr, leader=leader,
            leader_epoch=current.leader_epoch + 1 if bump else current.leader_epoch,
            partition_epoch=current.partition_epoch + 1,
        )
        self._set(self._partitions, (topic_id, partition_id), changed)

    # --- configs and producer ids -------------------------------------------------------------

    def _config_keys(self, resource_type: int, resource_name: str) -> list[str]:
        keys = set(self._image.configs.get(resource_type, resource_name))
        for kind, name, key in self._configs:
            if kind == resource_type and name == resource_name:
                keys.add(key)
        return sorted(k for k in keys if self.config(resource_type, resource_name, k) is not None)

    def _replay_config(self, r: metadata_pb2.ConfigRecord, _: int) -> None:
        if r.resource_type == TOPIC:
            _require(self.topic_id(r.resource_name) is not None, "topic does not exist")
            validate: Callable[[str, str], str] = configs.validate_topic_config
        else:
            _require(r.resource_type == BROKER, f"unknown resource type {r.resource_type}")
            _require(
                r.resource_name == "" or r.resource_name.isdecimal(),
                f"broker resource name {r.resource_name!r} is not '' or a broker id",
            )
            validate = configs.validate_broker_default_config
        if r.HasField("value"):
            try:
                canonical = validate(r.name, r.value)
            except TidelogError as error:
                raise _Ignored(error.message) from None
            _require(canonical == r.value, f"{r.name}: value {r.value!r} is not canonical")
            self._set(self._configs, (r.resource_type, r.resource_name, r.name), r.value)
        else:
            self._set(self._configs, (r.resource_type, r.resource_name, r.name), None)

    def _replay_producer_ids(self, r: metadata_pb2.ProducerIdsRecord, _: int) -> None:
        if r.broker_id != -1 and not self._from_snapshot:
            self._registered(r.broker_id, r.broker_epoch)
        current = self.next_producer_id()
        _require(
            r.next_producer_id > current,
            f"next producer id {r.next_producer_id} does not advance past {current}",
        )
        self._set(self._scalars, "next_producer_id", r.next_producer_id)

    def _replay_no_op(self, r: metadata_pb2.NoOpRecord, _: int) -> None:
        pass

    # --- ACLs ---------------------------------------------------------------------------------

    def _replay_acl(self, r: metadata_pb2.AclRecord, _: int) -> None:
        _require(len(r.acl_id) == ACL_ID_BYTES and any(r.acl_id), "ACL id is not a valid UUID")
        binding = binding_from_proto(r.binding)
        problem = binding.problem()
        _require(problem is None, lambda: f"ACL {r.acl_id.hex()}: {problem}")
        _require(self.acl(r.acl_id) is None, f"ACL id {r.acl_id.hex()} is in use")
        # One copy of each binding (the image indexes ids by binding): the manager writes no
        # record for a duplicate, so a duplicate here was made from a stale image.
        existing = self.acl_id(binding)
        _require(existing is None, lambda: f"ACL {r.acl_id.hex()}: the same binding exists "
                 f"as ACL {(existing or b'').hex()}")
        self._set(self._acls, r.acl_id, binding)
        self._set(self._acl_ids, binding, r.acl_id)

    def _replay_remove_acl(self, r: metadata_pb2.RemoveAclRecord, _: int) -> None:
        binding = self.acl(r.acl_id)
        _require(binding is not None, f"ACL id {r.acl_id.hex()} does not exist")
        self._set(self._acls, r.acl_id, None)
        self._set(self._acl_ids, binding, None)

    # --- SCRAM credentials ----------------------------------------------------------------------

    def scram_credential(self, name: str, mechanism: int) -> ScramCredential | None:
        if (name, mechanism) in self._scram:
            return self._scram[(name, mechanism)]
        return self._image.scram.get(name, mechanism)

    def _replay_user_scram_credential(self, r: metadata_pb2.UserScramCredentialRecord,
                                      _: int) -> None:
        mechanism = mechanism_named(r.mechanism)
        _require(mechanism is not None, lambda: f"SCRAM credential of {r.name!r}: unknown "
                 f"mechanism {r.mechanism}")
        problem = user_name_problem(r.name)
        _require(problem is None, lambda: f"SCRAM credential: {problem}")
        key_bytes = mechanism.key_bytes if mechanism is not None else 0
        _require(len(r.stored_key) == key_bytes and len(r.server_key) == key_bytes
                 and len(r.salt) > 0 and r.iterations > 0,
                 lambda: f"SCRAM credential of {r.name!r}: malformed keys, salt or iterations")
        # An upsertion replaces the user's credential of that mechanism (a password change).
        self._set(self._scram, (r.name, r.mechanism), ScramCredential(
            name=r.name, mechanism=r.mechanism, salt=r.salt, stored_key=r.stored_key,
            server_key=r.server_key, iterations=r.iterations))

    def _replay_remove_user_scram_credential(
            self, r: metadata_pb2.RemoveUserScramCredentialRecord, _: int) -> None:
        _require(self.scram_credential(r.name, r.mechanism) is not None,
                 lambda: f"no SCRAM credential of {r.name!r} for mechanism {r.mechanism}")
        self._set(self._scram, (r.name, r.mechanism), None)

    # --- building the next image --------------------------------------------------------------

    def apply(self) -> MetadataImage:
        """The image with every replayed change; shares unchanged parts with the old one."""
        base = self._image
        return MetadataImage(
            offset=self._offset,
            cluster=self._apply_cluster() if self._brokers else base.cluster,
            topics=self._apply_topics() if self._topic_names or self._partitions else base.topics,
            configs=self._apply_configs() if self._configs else base.configs,
            producer_ids=(
                ProducerIdsImage(self._scalars["next_producer_id"])
                if self._scalars else base.producer_ids
            ),
            acls=self._apply_acls() if self._acls else base.acls,
            scram=self._apply_scram() if self._scram else base.scram,
        )

    def _apply_cluster(self) -> ClusterImage:
        brokers = dict(self._image.cluster.brokers)
        for broker_id, registration in self._brokers.items():
            if registration is None:
                brokers.pop(broker_id, None)
            else:
                brokers[broker_id] = registration
        return ClusterImage(frozen_mapping(brokers))

    def _apply_topics(self) -> TopicsImage:
        base = self._image.topics
        by_id, by_name = dict(base.by_id), dict(base.by_name)
        # Changed partitions by topic: a topic's new mapping is the old one (a C-speed copy)
        # with these laid over it, so a part of 2,000 changes costs its changes and a copy of
        # each touched topic, not a Python-level rebuild of every partition of those topics.
        changes: dict[bytes, dict[int, PartitionRegistration]] = {}
        for (topic_id, partition_id), registration in self._partitions.items():
            changes.setdefault(topic_id, {})[partition_id] = registration
        touched = sorted(set(self._topic_names) | set(changes))
        for topic_id in touched:
            old = base.by_id.get(topic_id)
            if old is not None:
                by_id.pop(topic_id)
                by_name.pop(old.name)
        for topic_id in touched:
            name = self.topic_name(topic_id)
            if name is None:
                continue
            old = base.by_id.get(topic_id)
            kept = old is not None and topic_id not in self._cleared
            partitions = dict(old.partitions) if kept and old is not None else {}
            partitions.update(changes.get(topic_id, {}))
            count = self.partition_count(topic_id)
            if len(partitions) != count:  # (and TopicImage checks they are 0..count-1)
                raise InvariantViolation(
                    f"topic {name}: partitions "
                    f"{sorted(set(range(count)) - set(partitions))} are missing")
            topic = TopicImage(name, topic_id, MappingProxyType(partitions))
            by_id[topic_id] = topic
            by_name[name] = topic
        return TopicsImage(frozen_mapping(by_id), frozen_mapping(by_name))

    def _apply_configs(self) -> ConfigurationsImage:
        resources: dict[tuple[int, str], dict[str, str]] = {}
        for (kind, name, key), value in self._configs.items():
            entries = resources.setdefault(
                (kind, name), dict(self._image.configs.get(kind, name))
            )
            if value is None:
                entries.pop(key, None)
            else:
                entries[key] = value
        merged = dict(self._image.configs.resources)
        for resource, entries in resources.items():
            if entries:
                merged[resource] = frozen_mapping(entries)
            else:
                merged.pop(resource, None)
        return ConfigurationsImage(frozen_mapping(merged))

    def _apply_acls(self) -> AclsImage:
        by_id = dict(self._image.acls.by_id)
        for acl_id, binding in self._acls.items():
            if binding is None:
                by_id.pop(acl_id, None)
            else:
                by_id[acl_id] = binding
        return AclsImage.of(by_id)

    def _apply_scram(self) -> ScramImage:
        credentials = dict(self._image.scram.credentials)
        for key, credential in self._scram.items():
            if credential is None:
                credentials.pop(key, None)
            else:
                credentials[key] = credential
        return ScramImage(frozen_mapping(credentials))

    # --- broker-side view ---------------------------------------------------------------------

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """Partitions ``broker_id`` must now delete, lead or follow (Kafka's localChanges).

        A partition is listed when its registration changed in this delta (any change bumps the
        partition epoch), so a broker acts once per change and never on unchanged partitions.
        """
        deletes: list[LocalPartition] = []
        leaders: list[LocalPartition] = []
        followers: list[LocalPartition] = []
        base = self._image.topics
        for topic_id in sorted(self._topic_names):
            old = base.get_by_id(topic_id)
            if old is None or topic_id not in self._cleared:
                continue  # created here, or still there
            for partition_id, registration in sorted(old.partitions.items()):
                if broker_id in registration.replicas:
                    deletes.append(LocalPartition(old.name, topic_id, partition_id, registration))
        for (topic_id, partition_id), registration in sorted(self._partitions.items()):
            name = self.topic_name(topic_id)
            assert name is not None
            entry = LocalPartition(name, topic_id, partition_id, registration)
            previous = None if topic_id in self._cleared else base.partition(topic_id, partition_id)
            if broker_id not in registration.replicas:
                if previous is not None and broker_id in previous.replicas:
                    deletes.append(replace(entry, registration=previous))
            elif registration.leader == broker_id:
                leaders.append(entry)
            else:
                followers.append(entry)
        return LocalReplicaChanges(
            deletes=tuple(sorted(deletes, key=_local_order)),
            leaders=tuple(sorted(leaders, key=_local_order)),
            followers=tuple(sorted(followers, key=_local_order)),
        )


def _where(topic_id: bytes, partition_id: int) -> str:
    return f"partition {partition_id} of topic id {topic_id.hex()}"


def _local_order(partition: LocalPartition) -> tuple[str, int]:
    return partition.topic_name, partition.partition_id


_HANDLERS: dict[str, Callable[[MetadataDelta, Any, int], None]] = {
    "register_broker": MetadataDelta._replay_register_broker,
    "unregister_broker": MetadataDelta._replay_unregister_broker,
    "fence_broker": MetadataDelta._replay_fence_broker,
    "unfence_broker": MetadataDelta._replay_unfence_broker,
    "broker_registration_change": MetadataDelta._replay_broker_registration_change,
    "topic": MetadataDelta._replay_topic,
    "remove_topic": MetadataDelta._replay_remove_topic,
    "partition": MetadataDelta._replay_partition,
    "partition_change": MetadataDelta._replay_partition_change,
    "config": MetadataDelta._replay_config,
    "producer_ids": MetadataDelta._replay_producer_ids,
    "no_op": MetadataDelta._replay_no_op,
    "acl": MetadataDelta._replay_acl,
    "remove_acl": MetadataDelta._replay_remove_acl,
    "user_scram_credential": MetadataDelta._replay_user_scram_credential,
    "remove_user_scram_credential": MetadataDelta._replay_remove_user_scram_credential,
}
check(
    set(_HANDLERS) == {
        field.name
        for field in metadata_pb2.MetadataRecord.DESCRIPTOR.oneofs_by_name["record"].fields
    },
    "every kind of metadata record has a replay handler",
)


def apply_records(
    image: MetadataImage, records: Sequence[metadata_pb2.MetadataRecord]
) -> MetadataImage:
    """``image`` with ``records`` replayed at the next offsets; every record must apply.

    The active controller uses it to extend its speculative image with the records it proposes
    (they were made from that image, so an invalid one is a bug), and managers use it to build
    one change on top of another within a batch.
    """
    if not records:
        return image
    delta = MetadataDelta(image)
    outcome = delta.replay_batch(records, image.offset + 1)
    if outcome is not None:
        raise InvariantViolation(f"a record made from this image does not apply: {outcome}")
    return delta.apply()
