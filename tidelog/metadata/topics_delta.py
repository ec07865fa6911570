"""The topics' part of a metadata delta (TopicsImage's): Topic, RemoveTopic, Partition and
PartitionChange records, the leader elections they make, and what one broker must do after
them (:meth:`TopicsDelta.local_changes`, Kafka's ``TopicsDelta.localChanges``).

A partition's leader must be an active broker and a new ISR member too, so the topics delta
reads the cluster delta; a removed topic takes its configs with it, so it tells the configs
delta.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType

from tidelog import limits
from tidelog.errors import TidelogError
from tidelog.invariants import InvariantViolation
from tidelog.metadata.cluster_delta import ClusterDelta
from tidelog.metadata.configs_delta import ConfigsDelta
from tidelog.metadata.delta_journal import Ignored, UndoJournal, require
from tidelog.metadata.image import (
    NO_LEADER,
    TOPIC_ID_BYTES,
    PartitionRegistration,
    TopicImage,
    TopicsImage,
    frozen_mapping,
    partition_problem,
)
from tidelog.metadata.topic_names import validate_topic_name
from tidelog.v1 import metadata_pb2

__all__ = ["LocalPartition", "LocalReplicaChanges", "TopicsDelta"]


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


class TopicsDelta:
    """Topics and partitions changed by replayed records, flat so a batch can be undone."""

    def __init__(self, image: TopicsImage, journal: UndoJournal, *, cluster: ClusterDelta,
                 configs: ConfigsDelta, from_snapshot: bool) -> None:
        self._image = image
        self._journal = journal
        self._cluster = cluster
        self._configs = configs
        self._from_snapshot = from_snapshot
        self._topic_names: dict[bytes, str | None] = {}  # id -> name; None = removed
        self._topic_ids: dict[str, bytes | None] = {}  # name -> id; None = removed
        self._cleared: dict[bytes, bool] = {}  # ids whose image partitions are gone
        self._partition_counts: dict[bytes, int] = {}
        self._partitions: dict[tuple[bytes, int], PartitionRegistration] = {}
        # Leader elections replayed (clean, unclean): a leader other than the current one and
        # other than NO_LEADER, from the ISR or not (Kafka's election metrics).
        self.elections = (0, 0)

    def __bool__(self) -> bool:
        return bool(self._topic_names or self._partitions)

    # --- current state (image + changes) ---------------------------------------------------

    def topic_name(self, topic_id: bytes) -> str | None:
        if topic_id in self._topic_names:
            return self._topic_names[topic_id]
        topic = self._image.get_by_id(topic_id)
        return topic.name if topic is not None else None

    def topic_id(self, name: str) -> bytes | None:
        if name in self._topic_ids:
            return self._topic_ids[name]
        topic = self._image.get(name)
        return topic.topic_id if topic is not None else None

    def partition_count(self, topic_id: bytes) -> int:
        if topic_id in self._partition_counts:
            return self._partition_counts[topic_id]
        topic = self._image.get_by_id(topic_id)
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
        return self._image.partition(topic_id, partition_id)

    # --- replay ----------------------------------------------------------------------------

    def replay_topic(self, r: metadata_pb2.TopicRecord, _: int) -> None:
        try:
            validate_topic_name(r.name)
        except TidelogError as error:
            raise Ignored(error.message) from None
        require(
            len(r.topic_id) == TOPIC_ID_BYTES and any(r.topic_id), "topic id is not a valid UUID"
        )
        require(self.topic_id(r.name) is None, f"topic {r.name!r} already exists")
        require(self.topic_name(r.topic_id) is None, f"topic id {r.topic_id.hex()} is in use")
        journal = self._journal
        journal.set(self._topic_names, r.topic_id, r.name)
        journal.set(self._topic_ids, r.name, r.topic_id)
        journal.set(self._partition_counts, r.topic_id, 0)
        if self._image.get_by_id(r.topic_id) is not None:
            journal.set(self._cleared, r.topic_id, True)

    def replay_remove_topic(self, r: metadata_pb2.RemoveTopicRecord, _: int) -> None:
        name = self.topic_name(r.topic_id)
        require(name is not None, f"topic id {r.topic_id.hex()} does not exist")
        assert name is not None
        journal = self._journal
        for partition_id in range(self.partition_count(r.topic_id)):
            journal.delete(self._partitions, (r.topic_id, partition_id))
        self._configs.remove_topic(name)
        journal.set(self._topic_names, r.topic_id, None)
        journal.set(self._topic_ids, name, None)
        journal.set(self._partition_counts, r.topic_id, 0)
        if self._image.get_by_id(r.topic_id) is not None:
            journal.set(self._cleared, r.topic_id, True)

    def _check_leader_active(self, leader: int) -> None:
        if leader == NO_LEADER or self._from_snapshot:
            return
        require(self._cluster.is_active(leader), f"leader {leader} is not an active broker")

    def replay_partition(self, r: metadata_pb2.PartitionRecord, _: int) -> None:
        name = self.topic_name(r.topic_id)
        require(name is not None, f"topic id {r.topic_id.hex()} does not exist")
        count = self.partition_count(r.topic_id)
        require(
            r.partition_id == count,
            f"partition {r.partition_id} of {name!r} is not the next one ({count})",
        )
        require(count < limits.PARTITIONS_PER_TOPIC_MAX, "topic has the most partitions allowed")
        replicas, isr = tuple(r.replicas), tuple(r.isr)
        require(len(replicas) <= limits.REPLICATION_FACTOR_MAX, "too many replicas")
        problem = partition_problem(replicas, isr, r.leader)
        require(problem is None, lambda: f"partition {r.partition_id} of {name!r}: {problem}")
        require(r.leader_epoch >= 0 and r.partition_epoch >= 0, "negative epoch")
        self._check_leader_active(r.leader)
        registration = PartitionRegistration(
            replicas=replicas, isr=isr, leader=r.leader,
            leader_epoch=r.leader_epoch, partition_epoch=r.partition_epoch,
        )
        self._journal.set(self._partitions, (r.topic_id, r.partition_id), registration)
        self._journal.set(self._partition_counts, r.topic_id, count + 1)

    def replay_partition_change(self, r: metadata_pb2.PartitionChangeRecord, _: int) -> None:
        # The hot path of fencing, elections and ISR changes (thousands per batch at scale):
        # each field is read once, and messages are built only when a check fails.
        topic_id, partition_id = r.topic_id, r.partition_id
        current = self.partition(topic_id, partition_id)
        if current is None:
            raise Ignored(f"{_where(topic_id, partition_id)} does not exist")
        if current.partition_epoch != r.expected_partition_epoch:
            raise Ignored(f"{_where(topic_id, partition_id)}: partition epoch is "
                          f"{current.partition_epoch}, not the expected "
                          f"{r.expected_partition_epoch}")
        replicas = tuple(r.replicas.broker_ids) if r.HasField("replicas") else current.replicas
        isr = tuple(r.isr.broker_ids) if r.HasField("isr") else current.isr
        leader = r.leader if r.HasField("leader") else current.leader
        require(len(replicas) <= limits.REPLICATION_FACTOR_MAX, "too many replicas")
        problem = partition_problem(replicas, isr, leader)
        if problem is not None:
            raise Ignored(f"{_where(topic_id, partition_id)}: {problem}")
        if leader != current.leader:
            self._check_leader_active(leader)
        for member in isr:
            if member not in current.isr and not self._cluster.is_active(member):
                raise Ignored(f"{_where(topic_id, partition_id)}: new ISR member {member} "
                              "is not an active broker")
        bump = leader != current.leader or r.bump_leader_epoch
        if leader != current.leader and leader != NO_LEADER:
            clean, unclean = self.elections
            self.elections = ((clean + 1, unclean) if leader in current.isr
                              else (clean, unclean + 1))
        changed = PartitionRegistration(
            replicas=replicas, isr=isr, leader=leader,
            leader_epoch=current.leader_epoch + 1 if bump else current.leader_epoch,
            partition_epoch=current.partition_epoch + 1,
        )
        self._journal.set(self._partitions, (topic_id, partition_id), changed)

    # --- the next image --------------------------------------------------------------------

    def apply(self) -> TopicsImage:
        if not self:
            return self._image
        base = self._image
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

    # --- broker-side view ------------------------------------------------------------------

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """Partitions ``broker_id`` must now delete, lead or follow (Kafka's localChanges).

        A partition is listed when its registration changed in this delta (any change bumps the
        partition epoch), so a broker acts once per change and never on unchanged partitions.
        """
        deletes: list[LocalPartition] = []
        leaders: list[LocalPartition] = []
        followers: list[LocalPartition] = []
        base = self._image
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
