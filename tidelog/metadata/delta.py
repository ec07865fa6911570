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

As the image is made of one image per aggregate, the delta is made of one delta per aggregate,
sharing the batch's undo journal (tidelog/metadata/delta_journal.py): the cluster's and the
producer ids' (cluster_delta.py), the topics' (topics_delta.py), the configs'
(configs_delta.py), the ACLs' and SCRAM credentials' (security_delta.py). This module routes
each record kind to its delta, keeps batches atomic, and builds the next image from the parts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tidelog.acl import AclBinding
from tidelog.invariants import InvariantViolation, check
from tidelog.metadata.cluster_delta import ClusterDelta, ProducerIdsDelta
from tidelog.metadata.configs_delta import ConfigsDelta
from tidelog.metadata.delta_journal import Ignored, UndoJournal, require
from tidelog.metadata.image import BrokerRegistration, MetadataImage, PartitionRegistration
from tidelog.metadata.security_delta import AclsDelta, ScramDelta
from tidelog.metadata.topics_delta import LocalPartition, LocalReplicaChanges, TopicsDelta
from tidelog.scram import ScramCredential
from tidelog.v1 import metadata_pb2

__all__ = ["LocalPartition", "LocalReplicaChanges", "MetadataDelta", "apply_records"]

#: replay_batch calls its ``progress`` every this many records (~5-20 ms of replay).
PROGRESS_RECORDS = 256


class MetadataDelta:
    """Changes to one image from replayed records; ``apply()`` gives the next image."""

    def __init__(self, image: MetadataImage, *, from_snapshot: bool = False) -> None:
        self._image = image
        self._from_snapshot = from_snapshot
        self._offset = image.offset
        self._journal = journal = UndoJournal()
        self.cluster = ClusterDelta(image.cluster, journal, from_snapshot=from_snapshot)
        self.producer_ids = ProducerIdsDelta(image.producer_ids, journal, self.cluster,
                                             from_snapshot=from_snapshot)
        self.configs = ConfigsDelta(image.configs, journal,
                                    topic_exists=lambda name: self.topic_id(name) is not None)
        self.topics = TopicsDelta(image.topics, journal, cluster=self.cluster,
                                  configs=self.configs, from_snapshot=from_snapshot)
        self.acls = AclsDelta(image.acls, journal)
        self.scram = ScramDelta(image.scram, journal)
        # Bound once per delta: replay looks a record's handler up once (the hot path of a
        # 2,000-change fencing part or a 10,000-partition CreateTopics).
        self._handlers: dict[str, Callable[[Any, int], None]] = {
            kind: getattr(getattr(self, part), method) if part else _no_op
            for kind, (part, method) in _HANDLERS.items()}

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
        return self.topics.elections

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
        elections_before = self.topics.elections
        outcome: str | None = None
        for index, record in enumerate(records):
            offset = base_offset if self._from_snapshot else base_offset + index
            if progress is not None and index % PROGRESS_RECORDS == PROGRESS_RECORDS - 1:
                progress()
            try:
                self._replay_one(record, offset)
            except Ignored as ignored:
                outcome = f"offset {offset}: {ignored}"
                self._journal.rollback()
                self.topics.elections = elections_before
                break
        self._journal.clear()
        self._offset = base_offset if self._from_snapshot else base_offset + len(records) - 1
        return outcome

    def _replay_one(self, record: metadata_pb2.MetadataRecord, offset: int) -> None:
        kind = record.WhichOneof("record")
        require(kind is not None, "empty record (no field set)")
        assert kind is not None
        self._handlers[kind](getattr(record, kind), offset)

    # --- current state (image + changes) ------------------------------------------------------

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.cluster.broker(broker_id)

    def topic_name(self, topic_id: bytes) -> str | None:
        return self.topics.topic_name(topic_id)

    def topic_id(self, name: str) -> bytes | None:
        return self.topics.topic_id(name)

    def partition_count(self, topic_id: bytes) -> int:
        return self.topics.partition_count(topic_id)

    def partition(self, topic_id: bytes, partition_id: int) -> PartitionRegistration | None:
        return self.topics.partition(topic_id, partition_id)

    def config(self, resource_type: int, resource_name: str, key: str) -> str | None:
        return self.configs.config(resource_type, resource_name, key)

    def next_producer_id(self) -> int:
        return self.producer_ids.next_producer_id()

    def acl(self, acl_id: bytes) -> AclBinding | None:
        return self.acls.acl(acl_id)

    def acl_id(self, binding: AclBinding) -> bytes | None:
        return self.acls.acl_id(binding)

    def scram_credential(self, name: str, mechanism: int) -> ScramCredential | None:
        return self.scram.scram_credential(name, mechanism)

    # --- the next image, and a broker's view of it ---------------------------------------------

    def apply(self) -> MetadataImage:
        """The image with every replayed change; shares unchanged parts with the old one."""
        return MetadataImage(
            offset=self._offset, cluster=self.cluster.apply(), topics=self.topics.apply(),
            configs=self.configs.apply(), producer_ids=self.producer_ids.apply(),
            acls=self.acls.apply(), scram=self.scram.apply())

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """Partitions ``broker_id`` must now delete, lead or follow (see TopicsDelta)."""
        return self.topics.local_changes(broker_id)


def _no_op(record: metadata_pb2.NoOpRecord, offset: int) -> None:
    """A NoOp changes nothing (the active controller commits one to learn what committed)."""


#: Record kind -> (the part of the delta that replays it, its method); "" for a NoOp.
_HANDLERS: dict[str, tuple[str, str]] = {
    "register_broker": ("cluster", "replay_register_broker"),
    "unregister_broker": ("cluster", "replay_unregister_broker"),
    "fence_broker": ("cluster", "replay_fence_broker"),
    "unfence_broker": ("cluster", "replay_unfence_broker"),
    "broker_registration_change": ("cluster", "replay_broker_registration_change"),
    "topic": ("topics", "replay_topic"),
    "remove_topic": ("topics", "replay_remove_topic"),
    "partition": ("topics", "replay_partition"),
    "partition_change": ("topics", "replay_partition_change"),
    "config": ("configs", "replay_config"),
    "producer_ids": ("producer_ids", "replay_producer_ids"),
    "no_op": ("", ""),
    "acl": ("acls", "replay_acl"),
    "remove_acl": ("acls", "replay_remove_acl"),
    "user_scram_credential": ("scram", "replay_user_scram_credential"),
    "remove_user_scram_credential": ("scram", "replay_remove_user_scram_credential"),
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
