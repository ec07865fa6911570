"""ReplicationControlManager: topics, partitions, placement, leaders and ISRs.

Each ``handle``-style method reads an image and returns ``(records, response)``; nothing here keeps
state between calls except the seeded random source used for placement and topic ids. Errors
are per topic or per partition, so one request can partly succeed (DESIGN §3); each carries a
Kafka error code and a message naming the problem.

Kafka's rules kept here: a topic name colliding with an existing one on '.' vs '_' is refused;
explicit assignments must number partitions densely and give every partition the same replica
count; leaders are elected from ISR ∩ active brokers in replica order (see partition_change);
AlterPartition is a compare-and-set on the partition epoch, with the leader epoch fenced too.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from tidelog import configs, limits
from tidelog.controller.managers.common import (
    TOPICS_PER_REQUEST_MAX,
    LogicConfig,
    check_broker_epoch,
    set_error,
)
from tidelog.controller.managers.partition_change import build_partition_change, without_broker
from tidelog.controller.placement import place_replicas
from tidelog.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    InvalidUpdateVersionError,
    NotLeaderOrFollowerError,
    PolicyViolationError,
    TidelogError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from tidelog.invariants import check
from tidelog.metadata.image import (
    NO_LEADER,
    TOPIC_ID_BYTES,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from tidelog.metadata.records import metadata_record
from tidelog.metadata.topic_names import (
    has_collision_chars,
    is_internal,
    unify_collision_chars,
    validate_topic_name,
)
from tidelog.v1 import common_pb2, controller_pb2, metadata_pb2

#: (topic id, partition id): a partition, as the metadata image keys it.
PartitionKey = tuple[bytes, int]

__all__ = ["ReplicationControlManager"]

Records = list[metadata_pb2.MetadataRecord]
_TOPIC_ID_ATTEMPTS_MAX = 16


@dataclass(frozen=True, slots=True)
class _TopicPlan:
    """A validated new topic: replica lists per partition and canonical config entries."""

    assignments: list[tuple[int, ...]]
    configs: list[tuple[str, str]]


class ReplicationControlManager:
    """Topics, partitions, placement, leader election and ISR changes."""

    def __init__(self, config: LogicConfig, rng: random.Random) -> None:
        self._config = config
        self._rng = rng

    # --- CreateTopics -------------------------------------------------------------------------

    def create_topics(
        self, image: MetadataImage, request: controller_pb2.CreateTopicsRequest
    ) -> tuple[Records, controller_pb2.CreateTopicsResponse]:
        response = controller_pb2.CreateTopicsResponse()
        if len(request.topics) > TOPICS_PER_REQUEST_MAX:
            set_error(response, InvalidRequestError(
                f"{len(request.topics)} topics in one request, above {TOPICS_PER_REQUEST_MAX}"
            ))
            return [], response
        requested = _requested_partitions(request, self._config.num_partitions)
        if requested > limits.PARTITIONS_PER_CREATE_REQUEST_MAX:
            error = _too_many_partitions("CreateTopics", requested)
            for topic in request.topics:
                set_error(response.topics.add(name=topic.name), error)
            return [], response
        counts = Counter(topic.name for topic in request.topics)
        collisions = {
            unify_collision_chars(name): name
            for name in image.topics.by_name
            if has_collision_chars(name)
        }
        records: Records = []
        taken_ids: set[bytes] = set()
        partitions_total = 0
        for topic in request.topics:
            result = response.topics.add(name=topic.name)
            try:
                if counts[topic.name] > 1:
                    raise InvalidRequestError(
                        f"topic {topic.name!r} appears {counts[topic.name]} times in the request"
                    )
                plan = self._plan_topic(image, topic, collisions)
                partitions_total += len(plan.assignments)
                if partitions_total > limits.PARTITIONS_PER_REQUEST_MAX:
                    raise InvalidPartitionsError(
                        f"the request would create more than {limits.PARTITIONS_PER_REQUEST_MAX} "
                        "partitions"
                    )
            except TidelogError as error:
                set_error(result, error)
                continue
            if has_collision_chars(topic.name):
                collisions[unify_collision_chars(topic.name)] = topic.name
            result.num_partitions = len(plan.assignments)
            result.replication_factor = len(plan.assignments[0])
            result.configs.extend(
                controller_pb2.ConfigEntry(name=k, value=v) for k, v in plan.configs
            )
            if not request.validate_only:
                topic_id = self._new_topic_id(image, taken_ids)
                result.topic_id = topic_id
                records.extend(self._new_topic_records(image, topic.name, topic_id, plan))
        return records, response

    def _plan_topic(
        self,
        image: MetadataImage,
        topic: controller_pb2.CreateTopicsRequest.Topic,
        collisions: dict[str, str],
    ) -> _TopicPlan:
        validate_topic_name(topic.name)
        if image.topics.get(topic.name) is not None:
            raise TopicAlreadyExistsError(f"topic {topic.name!r} already exists")
        other = collisions.get(unify_collision_chars(topic.name))
        if other is not None and other != topic.name:
            raise InvalidTopicError(
                f"topic {topic.name!r} collides with existing topic {other!r} "
                "('.' and '_' are the same in metric names)"
            )
        entries = _validate_topic_configs(topic.configs)
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise InvalidRequestError(
                    "num_partitions and replication_factor must be -1 when assignments are given"
                )
            return _TopicPlan(_manual_assignment(image, topic.assignments, first=0), entries)
        num_partitions = topic.num_partitions
        if num_partitions == -1:
            num_partitions = self._config.num_partitions
        _check_partition_count(num_partitions)
        replication_factor = topic.replication_factor
        if replication_factor == -1:
            replication_factor = self._config.default_replication_factor
        placement = self._place(image, num_partitions, replication_factor, first=0)
        return _TopicPlan(placement, entries)

    def _place(
        self, image: MetadataImage, num_partitions: int, replication_factor: int, *, first: int
    ) -> list[tuple[int, ...]]:
        active = image.cluster.active_brokers()
        if replication_factor < 1:
            raise InvalidReplicationFactorError(
                f"replication factor must be at least 1 (or -1 for the default), "
                f"got {replication_factor}"
            )
        if replication_factor > limits.REPLICATION_FACTOR_MAX:
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} is above the limit "
                f"{limits.REPLICATION_FACTOR_MAX}"
            )
        if replication_factor > len(active):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} is larger than the {len(active)} "
                "broker(s) available (unfenced and not shutting down)"
            )
        return place_replicas(
            {b.broker_id: b.rack for b in active},
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            rng=self._rng,
            first_partition_id=first,
        )

    def _new_topic_id(self, image: MetadataImage, taken: set[bytes]) -> bytes:
        for _ in range(_TOPIC_ID_ATTEMPTS_MAX):
            topic_id = self._rng.getrandbits(8 * TOPIC_ID_BYTES).to_bytes(TOPIC_ID_BYTES, "big")
            if any(topic_id) and topic_id not in taken and image.topics.get_by_id(topic_id) is None:
                taken.add(topic_id)
                return topic_id
        raise AssertionError("no free topic id after repeated random draws")

    def _new_topic_records(
        self, image: MetadataImage, name: str, topic_id: bytes, plan: _TopicPlan
    ) -> Records:
        records = [metadata_record(metadata_pb2.TopicRecord(name=name, topic_id=topic_id))]
        records.extend(_partition_records(image, topic_id, plan.assignments, first=0))
        for key, value in plan.configs:
            records.append(metadata_record(metadata_pb2.ConfigRecord(
                resource_type=metadata_pb2.CONFIG_RESOURCE_TOPIC,
                resource_name=name, name=key, value=value,
            )))
        return records

    # --- DeleteTopics -------------------------------------------------------------------------

    def delete_topics(
        self, image: MetadataImage, request: controller_pb2.DeleteTopicsRequest
    ) -> tuple[Records, controller_pb2.DeleteTopicsResponse]:
        response = controller_pb2.DeleteTopicsResponse()
        if len(request.names) + len(request.topic_ids) > TOPICS_PER_REQUEST_MAX:
            set_error(response, InvalidRequestError(
                f"more than {TOPICS_PER_REQUEST_MAX} topics in one request"
            ))
            return [], response
        records: Records = []
        deleted: set[bytes] = set()
        targets: list[tuple[controller_pb2.DeleteTopicsResponse.TopicResult, TopicImage | None]]
        targets = [(response.topics.add(name=n), image.topics.get(n)) for n in request.names]
        targets += [
            (response.topics.add(topic_id=i), image.topics.get_by_id(i)) for i in request.topic_ids
        ]
        for result, topic in targets:
            try:
                if topic is None:
                    if result.name:
                        raise UnknownTopicOrPartitionError(f"topic {result.name!r} does not exist")
                    raise UnknownTopicIdError(f"topic id {result.topic_id.hex()} does not exist")
                result.name, result.topic_id = topic.name, topic.topic_id
                if topic.topic_id in deleted:
                    raise InvalidRequestError(
                        f"topic {topic.name!r} is named more than once in the request"
                    )
                if is_internal(topic.name):
                    raise InvalidTopicError(
                        f"topic {topic.name!r} is internal and cannot be deleted"
                    )
            except TidelogError as error:
                set_error(result, error)
                continue
            deleted.add(topic.topic_id)
            records.append(metadata_record(metadata_pb2.RemoveTopicRecord(topic_id=topic.topic_id)))
        return records, response

    # --- CreatePartitions ---------------------------------------------------------------------

    def create_partitions(
        self, image: MetadataImage, request: controller_pb2.CreatePartitionsRequest
    ) -> tuple[Records, controller_pb2.CreatePartitionsResponse]:
        response = controller_pb2.CreatePartitionsResponse()
        if len(request.topics) > TOPICS_PER_REQUEST_MAX:
            set_error(response, InvalidRequestError(
                f"{len(request.topics)} topics in one request, above {TOPICS_PER_REQUEST_MAX}"
            ))
            return [], response
        requested = _added_partitions(image, request)
        if requested > limits.PARTITIONS_PER_CREATE_REQUEST_MAX:
            error = _too_many_partitions("CreatePartitions", requested)
            for entry in request.topics:
                set_error(response.topics.add(name=entry.name), error)
            return [], response
        counts = Counter(topic.name for topic in request.topics)
        records: Records = []
        partitions_total = 0
        for entry in request.topics:
            result = response.topics.add(name=entry.name)
            try:
                if counts[entry.name] > 1:
                    raise InvalidRequestError(
                        f"topic {entry.name!r} appears {counts[entry.name]} times in the request"
                    )
                topic_id, first, assignments = self._plan_partitions(image, entry)
                partitions_total += len(assignments)
                if partitions_total > limits.PARTITIONS_PER_REQUEST_MAX:
                    raise InvalidPartitionsError(
                        f"the request would create more than {limits.PARTITIONS_PER_REQUEST_MAX} "
                        "partitions"
                    )
            except TidelogError as error:
                set_error(result, error)
                continue
            if not request.validate_only:
                records.extend(_partition_records(image, topic_id, assignments, first=first))
        return records, response

    def _plan_partitions(
        self, image: MetadataImage, entry: controller_pb2.CreatePartitionsRequest.Topic
    ) -> tuple[bytes, int, list[tuple[int, ...]]]:
        topic = image.topics.get(entry.name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {entry.name!r} does not exist")
        current = topic.num_partitions
        if entry.count > limits.PARTITIONS_PER_TOPIC_MAX:
            raise InvalidPartitionsError(
                f"topic {entry.name!r} would have {entry.count} partitions, above the limit "
                f"{limits.PARTITIONS_PER_TOPIC_MAX}"
            )
        if entry.count == current:
            raise InvalidPartitionsError(f"topic {entry.name!r} already has {current} partitions")
        if entry.count < current:
            raise InvalidPartitionsError(
                f"topic {entry.name!r} has {current} partitions, more than the requested "
                f"{entry.count} (partitions cannot be removed)"
            )
        rf = topic.replication_factor
        if entry.assignments:
            assignments = _manual_assignment(
                image, entry.assignments, first=current, replication_factor=rf
            )
            if len(assignments) != entry.count - current:
                raise InvalidReplicaAssignmentError(
                    f"the assignment places {len(assignments)} partitions, but "
                    f"{entry.count - current} are being added"
                )
        else:
            assignments = self._place(image, entry.count - current, rf, first=current)
        return topic.topic_id, current, assignments

    # --- AlterPartition -----------------------------------------------------------------------

    def alter_partition(
        self, image: MetadataImage, request: controller_pb2.AlterPartitionRequest
    ) -> tuple[Records, controller_pb2.AlterPartitionResponse]:
        response = controller_pb2.AlterPartitionResponse()
        try:
            check_broker_epoch(image, request.broker_id, request.broker_epoch)
            total = sum(len(topic.partitions) for topic in request.topics)
            if total > limits.PARTITIONS_PER_REQUEST_MAX:
                raise InvalidRequestError(
                    f"{total} partitions in one request, above {limits.PARTITIONS_PER_REQUEST_MAX}"
                )
        except TidelogError as error:
            set_error(response, error)
            return [], response
        records: Records = []
        seen: set[tuple[bytes, int]] = set()
        for topic_data in request.topics:
            topic_result = response.topics.add(topic_id=topic_data.topic_id)
            for data in topic_data.partitions:
                result = topic_result.partitions.add(partition_id=data.partition_id)
                key = (topic_data.topic_id, data.partition_id)
                try:
                    if key in seen:
                        raise InvalidRequestError(
                            f"partition {data.partition_id} appears twice in the request"
                        )
                    seen.add(key)
                    record = self._alter_one(image, request.broker_id, topic_data.topic_id, data)
                except TidelogError as error:
                    set_error(result, error)
                    _describe_partition(result, image.topics.partition(*key))
                    continue
                _describe_partition(result, _after(image.topics.partition(*key), record))
                if record is not None:
                    records.append(metadata_record(record))
        return records, response

    def _alter_one(
        self,
        image: MetadataImage,
        broker_id: int,
        topic_id: bytes,
        data: controller_pb2.AlterPartitionRequest.PartitionData,
    ) -> metadata_pb2.PartitionChangeRecord | None:
        if image.topics.get_by_id(topic_id) is None:
            raise UnknownTopicIdError(f"topic id {topic_id.hex()} does not exist")
        current = image.topics.partition(topic_id, data.partition_id)
        if current is None:
            raise UnknownTopicOrPartitionError(f"partition {data.partition_id} does not exist")
        where = f"partition {data.partition_id}"
        if current.leader != broker_id:
            raise NotLeaderOrFollowerError(
                f"{where}: broker {broker_id} is not the leader (leader is {current.leader})"
            )
        if data.leader_epoch != current.leader_epoch:
            raise FencedLeaderEpochError(
                f"{where}: leader epoch {data.leader_epoch} is not the current "
                f"{current.leader_epoch}"
            )
        if data.partition_epoch != current.partition_epoch:
            raise InvalidUpdateVersionError(
                f"{where}: partition epoch {data.partition_epoch} is not the current "
                f"{current.partition_epoch}"
            )
        new_isr = tuple(data.new_isr)
        if len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(current.replicas):
            raise InvalidRequestError(
                f"{where}: ISR {list(new_isr)} is not a duplicate-free subset of replicas "
                f"{list(current.replicas)}"
            )
        if broker_id not in new_isr:
            raise InvalidRequestError(f"{where}: ISR {list(new_isr)} leaves out the leader")
        ineligible = [b for b in new_isr if not image.cluster.is_active(b)]
        if ineligible:
            raise IneligibleReplicaError(
                f"{where}: ISR members {ineligible} are fenced, shutting down or not registered"
            )
        _check_added_epochs(image, where, current.isr, data)
        if new_isr == current.isr:
            return None
        return metadata_pb2.PartitionChangeRecord(
            topic_id=topic_id,
            partition_id=data.partition_id,
            isr=common_pb2.ReplicaList(broker_ids=new_isr),
            expected_partition_epoch=current.partition_epoch,
        )

    # --- broker lifecycle consequences --------------------------------------------------------

    def move_leadership_away(self, image: MetadataImage, broker_id: int,
                             limit: int | None = None) -> Records:
        """Records taking ``broker_id`` out of every ISR (but a last member) and leadership.

        Used when the broker is fenced, enters controlled shutdown, or re-registers with a new
        incarnation: each of its partitions gets a new leader from ISR ∩ active brokers, or
        goes offline keeping the broker as its last ISR member. The partitions it leads come
        first (they are unavailable until moved); with ``limit``, at most that many records, so
        a caller can spread the work over batches (the next call continues where the image
        now stands).
        """
        records, _ = self.move_leadership_away_among(
            image, broker_id, self.isr_partitions_of(image, broker_id), 0, limit)
        return records

    @staticmethod
    def isr_partitions_of(image: MetadataImage, broker_id: int) -> list[PartitionKey]:
        """Every partition with ``broker_id`` in its ISR, the ones it leads first, each group
        in the image's order (one pass over every partition)."""
        leading: list[PartitionKey] = []
        following: list[PartitionKey] = []
        for topic, partition_id, partition in image.topics.iter_partitions():
            if broker_id in partition.isr:
                (leading if partition.leader == broker_id else following).append(
                    (topic.topic_id, partition_id))
        return leading + following

    def move_leadership_away_among(
        self, image: MetadataImage, broker_id: int, keys: Sequence[PartitionKey], start: int,
        limit: int | None,
    ) -> tuple[Records, int]:
        """:meth:`move_leadership_away` for ``keys[start:]`` only (from
        :meth:`isr_partitions_of`, on this image or an earlier one: each is looked up again,
        and skipped when it is gone or has nothing to change), at most ``limit`` records. Also
        returns where the next call goes on: the index after the last key looked at. A fencing
        in parts goes on this way instead of scanning every partition for each part (at
        30,000 partitions that scan was half of each part's cost)."""
        def eligible(b: int) -> bool:
            return b != broker_id and image.cluster.is_active(b)

        records: Records = []
        unclean = _UncleanLookup(image)
        by_id = image.topics.by_id
        index = start
        while index < len(keys) and (limit is None or len(records) < limit):
            topic_id, partition_id = keys[index]
            index += 1
            topic = by_id.get(topic_id)
            if topic is None:
                continue
            partition = topic.partitions.get(partition_id)
            if partition is None or broker_id not in partition.isr:
                continue
            change = build_partition_change(
                topic_id, partition_id, partition,
                is_eligible=eligible,
                unclean_allowed=unclean(topic.name),
                target_isr=without_broker(partition.isr, broker_id),
            )
            if change is not None:
                records.append(metadata_record(change))
        return records, index

    def preferred_leader_elections(self, image: MetadataImage, limit: int) -> Records:
        """Kafka's automatic leader rebalance (auto.leader.rebalance.enable; KRaft's
        maybeBalancePartitionLeaders): each partition whose preferred replica (the first) does
        not lead it, but is in its ISR and active, gets it back as leader; at most ``limit``
        records (the next call continues where the image stands). A clean election: the ISR
        stays as it is."""
        records: Records = []
        for topic, partition_id, partition in image.topics.iter_partitions():
            preferred = partition.replicas[0]
            if (partition.leader == preferred or preferred not in partition.isr
                    or not image.cluster.is_active(preferred)):
                continue
            records.append(metadata_record(metadata_pb2.PartitionChangeRecord(
                topic_id=topic.topic_id, partition_id=partition_id, leader=preferred,
                expected_partition_epoch=partition.partition_epoch)))
            if len(records) >= limit:
                break
        return records

    def elect_leaders_on_unfence(self, image: MetadataImage, broker_id: int,
                                 limit: int | None = None) -> Records:
        """Leaders for offline partitions ``broker_id`` can lead once it is unfenced.

        ``image`` may still have the broker fenced (these records follow its
        UnfenceBrokerRecord in the same batch), so it is counted eligible explicitly. With
        ``limit``, at most that many records (the next call continues where the image stands).
        """
        def eligible(b: int) -> bool:
            return b == broker_id or image.cluster.is_active(b)

        records: Records = []
        unclean = _UncleanLookup(image)
        for topic, partition_id, partition in image.topics.iter_partitions():
            if partition.leader != NO_LEADER or broker_id not in partition.replicas:
                continue
            change = build_partition_change(
                topic.topic_id, partition_id, partition,
                is_eligible=eligible, unclean_allowed=unclean(topic.name),
            )
            if change is not None:
                records.append(metadata_record(change))
                if limit is not None and len(records) >= limit:
                    return records
        return records


class _UncleanLookup:
    """unclean.leader.election.enable per topic name, resolved once per call."""

    def __init__(self, image: MetadataImage) -> None:
        self._image = image
        self._cache: dict[str, bool] = {}

    def __call__(self, topic_name: str) -> bool:
        if topic_name not in self._cache:
            config = self._image.configs.topic_config(topic_name)
            self._cache[topic_name] = config.unclean_leader_election_enable
        return self._cache[topic_name]


# --- helpers ----------------------------------------------------------------------------------


def _check_added_epochs(
    image: MetadataImage,
    where: str,
    current_isr: tuple[int, ...],
    data: controller_pb2.AlterPartitionRequest.PartitionData,
) -> None:
    """KIP-903: every member ``data`` adds to the ISR comes with the broker epoch the leader
    saw it fetch with, and that epoch is its current registration's. A broker that re-registered
    since (a restart, perhaps with an empty disk) must catch up again before it rejoins."""
    epochs = {s.broker_id: s.broker_epoch for s in data.new_isr_with_epochs}
    for broker_id in data.new_isr:
        if broker_id in current_isr:
            continue
        registration = image.cluster.broker(broker_id)
        epoch = epochs.get(broker_id, -1)
        if registration is None or epoch != registration.broker_epoch:
            registered = -1 if registration is None else registration.broker_epoch
            raise IneligibleReplicaError(
                f"{where}: broker {broker_id} is added with broker epoch {epoch}, not its "
                f"registration's {registered} (it re-registered or was never seen fetching)"
            )


def _check_partition_count(num_partitions: int) -> None:
    if num_partitions < 1:
        raise InvalidPartitionsError(
            f"number of partitions must be at least 1 (or -1 for the default), got {num_partitions}"
        )
    if num_partitions > limits.PARTITIONS_PER_TOPIC_MAX:
        raise InvalidPartitionsError(
            f"number of partitions {num_partitions} is above the limit "
            f"{limits.PARTITIONS_PER_TOPIC_MAX}"
        )


def _requested_partitions(request: controller_pb2.CreateTopicsRequest, default: int) -> int:
    """Partitions a CreateTopics asks for, as Kafka's validateTotalNumberOfPartitions counts
    them; a topic's own count is capped at the per-topic limit, whose check names it better."""
    total = 0
    for topic in request.topics:
        count = len(topic.assignments) or (
            default if topic.num_partitions == -1 else max(0, topic.num_partitions))
        total += min(count, limits.PARTITIONS_PER_TOPIC_MAX)
    return total


def _added_partitions(image: MetadataImage, request: controller_pb2.CreatePartitionsRequest) -> int:
    """Partitions a CreatePartitions would add to the topics that exist (capped per topic)."""
    total = 0
    for entry in request.topics:
        topic = image.topics.get(entry.name)
        if topic is not None:
            count = min(entry.count, limits.PARTITIONS_PER_TOPIC_MAX)
            total += max(0, count - topic.num_partitions)
    return total


def _too_many_partitions(rpc: str, requested: int) -> PolicyViolationError:
    return PolicyViolationError(
        f"{rpc} would create {requested:,} partitions; one request may create at most "
        f"{limits.PARTITIONS_PER_CREATE_REQUEST_MAX:,} (the controller commits a request's "
        "records as one metadata batch): split it into smaller requests"
    )


def _validate_topic_configs(
    entries: Sequence[controller_pb2.ConfigEntry],
) -> list[tuple[str, str]]:
    counts = Counter(entry.name for entry in entries)
    validated: dict[str, str] = {}
    for entry in entries:
        if counts[entry.name] > 1:
            raise InvalidConfigError(f"config {entry.name!r} is given {counts[entry.name]} times")
        validated[entry.name] = configs.validate_topic_config(entry.name, entry.value)
    return sorted(validated.items())


def _manual_assignment(
    image: MetadataImage,
    assignments: Sequence[controller_pb2.CreateTopicsRequest.Assignment],
    *,
    first: int,
    replication_factor: int | None = None,
) -> list[tuple[int, ...]]:
    """Explicit replica lists, checked; partition ids must be first.. densely, each once."""
    if first + len(assignments) > limits.PARTITIONS_PER_TOPIC_MAX:
        raise InvalidPartitionsError(
            f"the assignment would give the topic {first + len(assignments)} partitions, above "
            f"the limit {limits.PARTITIONS_PER_TOPIC_MAX}"
        )
    ids = sorted(a.partition_id for a in assignments)
    if ids != list(range(first, first + len(assignments))):
        raise InvalidReplicaAssignmentError(
            f"assignment partition ids must be {first}..{first + len(assignments) - 1}, each "
            f"once (got {ids[:10]}{'...' if len(ids) > 10 else ''})"
        )
    placements: list[tuple[int, ...]] = []
    for assignment in sorted(assignments, key=lambda a: a.partition_id):
        replicas = tuple(assignment.broker_ids)
        _check_replica_list(image, assignment.partition_id, replicas)
        if replication_factor is None:
            replication_factor = len(replicas)
        if len(replicas) != replication_factor:
            raise InvalidReplicaAssignmentError(
                f"partition {assignment.partition_id} has {len(replicas)} replica(s), but the "
                f"other partitions have {replication_factor}"
            )
        placements.append(replicas)
    return placements


def _check_replica_list(image: MetadataImage, partition_id: int, replicas: tuple[int, ...]) -> None:
    where = f"partition {partition_id}"
    if not replicas:
        raise InvalidReplicaAssignmentError(f"{where}: the replica list is empty")
    if len(replicas) > limits.REPLICATION_FACTOR_MAX:
        raise InvalidReplicaAssignmentError(
            f"{where}: {len(replicas)} replicas, above the limit {limits.REPLICATION_FACTOR_MAX}"
        )
    duplicates = sorted(b for b, n in Counter(replicas).items() if n > 1)
    if duplicates:
        raise InvalidReplicaAssignmentError(
            f"{where}: broker(s) {duplicates} appear more than once"
        )
    unknown = [b for b in replicas if image.cluster.broker(b) is None]
    if unknown:
        raise InvalidReplicaAssignmentError(f"{where}: broker(s) {unknown} are not registered")
    if not any(image.cluster.is_active(b) for b in replicas):
        raise InvalidReplicaAssignmentError(
            f"{where}: all its brokers are fenced or in controlled shutdown"
        )


def _partition_records(
    image: MetadataImage, topic_id: bytes, assignments: list[tuple[int, ...]], *, first: int
) -> Records:
    """PartitionRecords for new partitions: ISR = the active replicas, leader = the first."""
    records: Records = []
    for offset, replicas in enumerate(assignments):
        isr = tuple(b for b in replicas if image.cluster.is_active(b))
        check(
            len(isr) > 0,
            "placement and assignment checks give every partition an active replica",
        )
        records.append(metadata_record(metadata_pb2.PartitionRecord(
            topic_id=topic_id, partition_id=first + offset, replicas=replicas, isr=isr,
            leader=isr[0], leader_epoch=0, partition_epoch=0,
        )))
    return records


def _after(
    current: PartitionRegistration | None, record: metadata_pb2.PartitionChangeRecord | None
) -> PartitionRegistration | None:
    """The registration an AlterPartition change leads to (it never moves the leader)."""
    if current is None or record is None:
        return current
    check(
        not record.HasField("leader") and not record.bump_leader_epoch,
        "a new partition's record sets no leader and bumps no epoch",
    )
    return PartitionRegistration(
        replicas=current.replicas, isr=tuple(record.isr.broker_ids), leader=current.leader,
        leader_epoch=current.leader_epoch, partition_epoch=current.partition_epoch + 1,
    )


def _describe_partition(
    result: controller_pb2.AlterPartitionResponse.PartitionResult,
    registration: PartitionRegistration | None,
) -> None:
    if registration is None:
        result.leader, result.leader_epoch, result.partition_epoch = NO_LEADER, -1, -1
        return
    result.leader = registration.leader
    result.leader_epoch = registration.leader_epoch
    result.isr[:] = registration.isr
    result.partition_epoch = registration.partition_epoch

