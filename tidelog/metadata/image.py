"""The metadata image: the cluster metadata as of one metadata offset, immutable.

As in Kafka's ``org.apache.kafka.image``, the image is never changed in place: records are
replayed into a :class:`tidelog.metadata.delta.MetadataDelta`, whose ``apply()`` builds the
next image, sharing every unchanged part with the previous one. Readers (control managers,
DescribeConfigs, the brokers' metadata publishers) may keep an image as long as they like.

Parts, one per aggregate: :class:`ClusterImage` (broker registrations), :class:`TopicsImage`
(topics and their :class:`PartitionRegistration`\\ s), :class:`ConfigurationsImage` (config
overrides per resource), :class:`ProducerIdsImage` (the next producer id to hand out),
:class:`AclsImage` (ACL bindings by id, from which every broker builds its Authorizer),
:class:`ScramImage` (users' SCRAM credentials, against which brokers check SASL_SSL clients).

:meth:`MetadataImage.digest` is a SHA-256 over a canonical text encoding
(:meth:`MetadataImage.canonical_lines`): every controller that replayed the same records has the
same digest, which tests and the quorum's divergence checks compare.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar

from tidelog import configs
from tidelog.acl import AclBinding
from tidelog.invariants import InvariantViolation
from tidelog.scram import ScramCredential
from tidelog.v1 import metadata_pb2
from tidelog.v1.common_pb2 import ScramMechanism

__all__ = [
    "ACL_ID_BYTES",
    "EMPTY_OFFSET",
    "NO_LEADER",
    "TOPIC_ID_BYTES",
    "AclsImage",
    "BrokerRegistration",
    "ClusterImage",
    "ConfigurationsImage",
    "MetadataImage",
    "PartitionRegistration",
    "ProducerIdsImage",
    "ScramImage",
    "TopicImage",
    "TopicsImage",
    "frozen_mapping",
    "partition_problem",
]

#: The offset of an image that has replayed nothing.
EMPTY_OFFSET = -1
#: Leader id of a partition without a leader (offline).
NO_LEADER = -1
#: Topic ids and incarnation ids are UUIDs.
TOPIC_ID_BYTES = 16
#: ACL ids are UUIDs too (Kafka's AccessControlEntryRecord.id).
ACL_ID_BYTES = 16
#: A broker registration's credential verifier is a SHA-256 (tidelog.cluster_secret).
CREDENTIAL_VERIFIER_BYTES = 32

TOPIC = metadata_pb2.CONFIG_RESOURCE_TOPIC
BROKER = metadata_pb2.CONFIG_RESOURCE_BROKER


K = TypeVar("K")
V = TypeVar("V")


def frozen_mapping(items: Mapping[K, V]) -> Mapping[K, V]:
    """A read-only copy of ``items`` (images hold only these)."""
    return MappingProxyType(dict(items))


# --- cluster ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """One registered broker (Kafka's BrokerRegistration)."""

    broker_id: int
    incarnation_id: bytes  # 16-byte UUID of the broker process
    broker_epoch: int  # metadata offset of its RegisterBrokerRecord
    host: str
    port: int
    rack: str  # "" when not set
    fenced: bool
    in_controlled_shutdown: bool = False
    # The inter-broker listener (ReplicaService), where followers fetch from it; never told to
    # clients. "" and 0 when the broker registered without one.
    inter_broker_host: str = ""
    inter_broker_port: int = 0
    # SHA-256 of the key it presents to other brokers (tidelog.cluster_secret), b"" without a
    # cluster secret: what a broker checks a follower's credential against.
    credential_verifier: bytes = b""

    def __post_init__(self) -> None:
        if self.broker_id < 0:
            raise InvariantViolation(f"broker id {self.broker_id} is negative")
        if len(self.incarnation_id) != TOPIC_ID_BYTES:
            raise InvariantViolation(
                f"broker {self.broker_id}: an incarnation id of {len(self.incarnation_id)} bytes")
        if self.broker_epoch < 0:
            raise InvariantViolation(
                f"broker {self.broker_id}: epoch {self.broker_epoch} is negative")
        if len(self.credential_verifier) not in (0, CREDENTIAL_VERIFIER_BYTES):
            raise InvariantViolation(
                f"broker {self.broker_id}: a credential verifier of "
                f"{len(self.credential_verifier)} bytes")
        # A fenced broker has left controlled shutdown (fencing ends it).
        if self.fenced and self.in_controlled_shutdown:
            raise InvariantViolation(
                f"broker {self.broker_id} is fenced and in controlled shutdown")

    @property
    def is_active(self) -> bool:
        """Eligible for leadership, new ISR membership and new replicas."""
        return not self.fenced and not self.in_controlled_shutdown


@dataclass(frozen=True, slots=True)
class ClusterImage:
    """Registered brokers by id."""

    brokers: Mapping[int, BrokerRegistration]

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def is_active(self, broker_id: int) -> bool:
        registration = self.brokers.get(broker_id)
        return registration is not None and registration.is_active

    def is_unfenced(self, broker_id: int) -> bool:
        registration = self.brokers.get(broker_id)
        return registration is not None and not registration.fenced

    def active_brokers(self) -> list[BrokerRegistration]:
        """Brokers eligible for placement and leadership, by id."""
        return [b for _, b in sorted(self.brokers.items()) if b.is_active]


# --- topics -----------------------------------------------------------------------------------


def partition_problem(replicas: tuple[int, ...], isr: tuple[int, ...], leader: int) -> str | None:
    """What is wrong with this replicas/ISR/leader triple, or None if it is consistent.

    The invariants: replicas non-empty, distinct and >= 0; ISR a non-empty, duplicate-free subset
    of the replicas; leader a member of the ISR or NO_LEADER.
    """
    try:
        return _partition_problem(replicas, isr, leader)
    except TypeError:  # unhashable (a list from a test or a caller's slip): not remembered
        return _partition_problem.__wrapped__(replicas, isr, leader)


# Every partition change is checked twice (by replay, then by PartitionRegistration), on every
# controller and broker, and a cluster has few distinct triples (RF=3 over 3 brokers: a few
# hundred), so the answers are remembered: a hit costs a hash of two short tuples, not four sets.
@functools.lru_cache(maxsize=8192)
def _partition_problem(replicas: tuple[int, ...], isr: tuple[int, ...], leader: int) -> str | None:
    if not replicas:
        return "replicas are empty"
    replica_set = set(replicas)
    if len(replica_set) != len(replicas):
        return f"replicas {list(replicas)} repeat a broker"
    if min(replicas) < 0:
        return f"replicas {list(replicas)} contain a negative broker id"
    if not isr:
        return "ISR is empty"
    isr_set = set(isr)
    if len(isr_set) != len(isr):
        return f"ISR {list(isr)} repeats a broker"
    if not isr_set <= replica_set:
        return f"ISR {list(isr)} is not a subset of replicas {list(replicas)}"
    if leader != NO_LEADER and leader not in isr_set:
        return f"leader {leader} is not in ISR {list(isr)}"
    return None


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition's assignment and leadership (Kafka's PartitionRegistration)."""

    replicas: tuple[int, ...]  # preferred leader first
    isr: tuple[int, ...]
    leader: int  # NO_LEADER when offline
    leader_epoch: int
    partition_epoch: int

    def __post_init__(self) -> None:
        problem = partition_problem(self.replicas, self.isr, self.leader)
        if problem is not None:
            raise InvariantViolation(f"partition {self}: {problem}")
        if not (self.leader_epoch >= 0 and self.partition_epoch >= 0):
            raise InvariantViolation(
                f"leader epoch {self.leader_epoch}, partition epoch {self.partition_epoch}: "
                "negative")

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER


@dataclass(frozen=True, slots=True)
class TopicImage:
    """A topic: its name, id and partitions 0..n-1."""

    name: str
    topic_id: bytes
    partitions: Mapping[int, PartitionRegistration]

    def __post_init__(self) -> None:
        if len(self.topic_id) != TOPIC_ID_BYTES:
            raise InvariantViolation(f"topic {self.name}: an id of {len(self.topic_id)} bytes")
        # Partitions are numbered densely from 0; replay keeps it so.
        if set(self.partitions) != set(range(len(self.partitions))):
            raise InvariantViolation(
                f"topic {self.name}: partitions {sorted(self.partitions)} are not numbered 0..n-1")

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)

    @property
    def replication_factor(self) -> int:
        """Replicas of partition 0 (all partitions are created alike); 0 when no partitions."""
        first = self.partitions.get(0)
        return len(first.replicas) if first is not None else 0


@dataclass(frozen=True, slots=True)
class TopicMismatch:
    """A topic id and a name that are not one topic (see :meth:`TopicsImage.resolve`)."""

    topic_id: bytes
    name: str

    @property
    def message(self) -> str:
        return (f"topic id {self.topic_id.hex()} is not the id of topic {self.name!r}: a "
                f"request naming both must name one topic")


@dataclass(frozen=True, slots=True)
class TopicsImage:
    """Topics by id and by name."""

    by_id: Mapping[bytes, TopicImage]
    by_name: Mapping[str, TopicImage]

    def __post_init__(self) -> None:
        if len(self.by_id) != len(self.by_name):
            raise InvariantViolation(
                f"{len(self.by_id)} topic ids but {len(self.by_name)} topic names")

    def get(self, name: str) -> TopicImage | None:
        return self.by_name.get(name)

    def get_by_id(self, topic_id: bytes) -> TopicImage | None:
        return self.by_id.get(topic_id)

    def resolve(self, topic_id: bytes | None, name: str) -> TopicImage | TopicMismatch | None:
        """The topic a request naming ``topic_id`` and/or ``name`` acts on: by id when it gives
        one, else by name; None when that finds nothing. A request giving both whose name is
        not the id's gets a :class:`TopicMismatch` (Kafka's INCONSISTENT_TOPIC_ID), never
        either topic: the name is what an authorizer reads, the id what a lookup acts on, so
        the two must be one topic. Handlers and the ACL checks both resolve through here."""
        if not topic_id:
            return self.by_name.get(name)
        topic = self.by_id.get(topic_id)
        if topic is not None and name and topic.name != name:
            return TopicMismatch(topic_id, name)
        return topic

    def partition(self, topic_id: bytes, partition_id: int) -> PartitionRegistration | None:
        topic = self.by_id.get(topic_id)
        return topic.partitions.get(partition_id) if topic is not None else None

    def iter_partitions(self) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
        """Every partition, by topic name then partition id (a deterministic order)."""
        for name in sorted(self.by_name):
            topic = self.by_name[name]
            for partition_id in range(topic.num_partitions):
                yield topic, partition_id, topic.partitions[partition_id]


# --- configs and producer ids -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigurationsImage:
    """Config overrides by (resource type, resource name); only set keys are present."""

    resources: Mapping[tuple[int, str], Mapping[str, str]]

    def get(self, resource_type: int, resource_name: str) -> Mapping[str, str]:
        return self.resources.get((resource_type, resource_name), _EMPTY_CONFIG)

    def topic_config(self, topic_name: str) -> configs.TopicConfig:
        """The effective config of a topic: its overrides over the cluster defaults."""
        return configs.TopicConfig.resolve(self.get(TOPIC, topic_name), self.get(BROKER, ""))


_EMPTY_CONFIG: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    """The next producer id the controller will hand out (ids below it are taken)."""

    next_producer_id: int

    def __post_init__(self) -> None:
        if self.next_producer_id < 0:
            raise InvariantViolation(f"next producer id {self.next_producer_id} is negative")


# --- ACLs -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AclsImage:
    """ACL bindings by id, and the id of each binding (Kafka's AclsImage). A binding is held
    once: CreateAcls of an existing binding writes no second record, and replay refuses one."""

    by_id: Mapping[bytes, AclBinding]
    by_binding: Mapping[AclBinding, bytes]
    # bindings() in id order, built once: brokers call it per request and compare by identity,
    # so an image whose ACLs did not change must give the very same tuple.
    _ordered: tuple[AclBinding, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.by_id) != len(self.by_binding):
            raise InvariantViolation(
                f"{len(self.by_id)} ACL ids but {len(self.by_binding)} distinct bindings")
        for acl_id, binding in self.by_id.items():
            if len(acl_id) != ACL_ID_BYTES:
                raise InvariantViolation(f"an ACL id of {len(acl_id)} bytes")
            if self.by_binding.get(binding) != acl_id:
                raise InvariantViolation(f"ACL {acl_id.hex()} is not indexed by its binding")
        ordered = tuple(binding for _, binding in sorted(self.by_id.items()))
        object.__setattr__(self, "_ordered", ordered)

    @staticmethod
    def of(by_id: Mapping[bytes, AclBinding]) -> AclsImage:
        """The image of these bindings (indexed both ways)."""
        return AclsImage(frozen_mapping(by_id),
                         frozen_mapping({binding: acl_id for acl_id, binding in by_id.items()}))

    def bindings(self) -> tuple[AclBinding, ...]:
        """Every binding, in acl id order; the same tuple on every call."""
        return self._ordered

    def get(self, acl_id: bytes) -> AclBinding | None:
        return self.by_id.get(acl_id)

    def id_of(self, binding: AclBinding) -> bytes | None:
        """The id of a binding equal to ``binding``, or None."""
        return self.by_binding.get(binding)


# --- SCRAM credentials ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScramImage:
    """SCRAM credentials by (user name, mechanism) (Kafka's ScramImage): salts and derived keys,
    never passwords (tidelog/scram.py)."""

    credentials: Mapping[tuple[str, int], ScramCredential]

    def __post_init__(self) -> None:
        for (name, mechanism), credential in self.credentials.items():
            if (credential.name, credential.mechanism) != (name, mechanism):
                raise InvariantViolation(
                    f"the SCRAM credential of {name!r} is indexed under another name or mechanism")

    def get(self, name: str, mechanism: int) -> ScramCredential | None:
        return self.credentials.get((name, mechanism))

    def users(self) -> dict[str, list[ScramCredential]]:
        """Each user's credentials, users by name and mechanisms in order."""
        out: dict[str, list[ScramCredential]] = {}
        for key in sorted(self.credentials):
            out.setdefault(key[0], []).append(self.credentials[key])
        return out


# --- the image --------------------------------------------------------------------------------


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The whole metadata image as of ``offset`` (the last record replayed; -1 when none)."""

    offset: int
    cluster: ClusterImage
    topics: TopicsImage
    configs: ConfigurationsImage
    producer_ids: ProducerIdsImage
    acls: AclsImage
    scram: ScramImage = field(default_factory=lambda: ScramImage(MappingProxyType({})))

    def __post_init__(self) -> None:
        if self.offset < EMPTY_OFFSET:
            raise InvariantViolation(
                f"image offset {self.offset} is before the empty image's {EMPTY_OFFSET}")

    @staticmethod
    def empty() -> MetadataImage:
        return _EMPTY_IMAGE

    def with_offset(self, offset: int) -> MetadataImage:
        """This image at a later offset (the records in between were no-ops)."""
        if offset < self.offset:
            raise InvariantViolation(
                f"the image cannot go back from offset {self.offset} to {offset}")
        return MetadataImage(offset, self.cluster, self.topics, self.configs, self.producer_ids,
                             self.acls, self.scram)

    def canonical_lines(self) -> list[str]:
        """A canonical, human-readable encoding: one line per broker, topic, partition, config,
        ACL.

        Everything is in a fixed order (brokers by id, topics by name, partitions by id, configs
        by resource and key, ACLs by id) and free text is JSON-quoted, so equal images give
        equal lines.
        """
        lines = [f"offset {self.offset}"]
        for broker_id, b in sorted(self.cluster.brokers.items()):
            lines.append(
                f"broker {broker_id} epoch={b.broker_epoch} incarnation={b.incarnation_id.hex()} "
                f"endpoint={_quote(b.host)}:{b.port} rack={_quote(b.rack)} "
                f"fenced={str(b.fenced).lower()} "
                f"controlled_shutdown={str(b.in_controlled_shutdown).lower()}"
                + (f" inter_broker={_quote(b.inter_broker_host)}:{b.inter_broker_port}"
                   if b.inter_broker_port else "")
                + (f" verifier={b.credential_verifier.hex()}" if b.credential_verifier else "")
            )
        for name in sorted(self.topics.by_name):
            topic = self.topics.by_name[name]
            lines.append(f"topic {name} id={topic.topic_id.hex()}")
            for partition_id in range(topic.num_partitions):
                p = topic.partitions[partition_id]
                lines.append(
                    f"  partition {partition_id} replicas={_ids(p.replicas)} isr={_ids(p.isr)} "
                    f"leader={p.leader} leader_epoch={p.leader_epoch} "
                    f"partition_epoch={p.partition_epoch}"
                )
        for (resource_type, resource_name), entries in sorted(self.configs.resources.items()):
            kind = metadata_pb2.ConfigResourceType.Name(resource_type)
            for key, value in sorted(entries.items()):
                lines.append(f"config {kind} {_quote(resource_name)} {key}={_quote(value)}")
        for acl_id, acl in sorted(self.acls.by_id.items()):
            lines.append(
                f"acl {acl_id.hex()} {acl.permission} {_quote(acl.principal)} "
                f"host={_quote(acl.host)} {acl.operation} {acl.resource_type} "
                f"{acl.pattern_type} {_quote(acl.resource_name)}"
            )
        for (name, mechanism), c in sorted(self.scram.credentials.items()):
            lines.append(
                # A digest of the secret parts: equal images still give equal lines, and the
                # lines (printed by tools and tests) do not carry the keys themselves.
                f"scram {_quote(name)} {ScramMechanism.Name(mechanism)} "
                f"iterations={c.iterations} keys={_credential_digest(c)}")
        lines.append(f"producer_ids next={self.producer_ids.next_producer_id}")
        return lines

    def digest(self) -> str:
        """SHA-256 (hex) of :meth:`canonical_lines`; equal for equal images, offset included."""
        return hashlib.sha256("\n".join(self.canonical_lines()).encode()).hexdigest()


def _credential_digest(c: ScramCredential) -> str:
    return hashlib.sha256(c.salt + c.stored_key + c.server_key).hexdigest()[:16]


def _ids(broker_ids: tuple[int, ...]) -> str:
    return ",".join(str(b) for b in broker_ids)


_EMPTY_SCRAM = ScramImage(MappingProxyType({}))
_EMPTY_IMAGE = MetadataImage(
    offset=EMPTY_OFFSET,
    cluster=ClusterImage(MappingProxyType({})),
    topics=TopicsImage(MappingProxyType({}), MappingProxyType({})),
    configs=ConfigurationsImage(MappingProxyType({})),
    producer_ids=ProducerIdsImage(0),
    acls=AclsImage.of({}),
    scram=_EMPTY_SCRAM,
)
