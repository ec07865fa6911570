"""Random command sequences keep the metadata invariants (hypothesis stateful testing).

A ControllerLogic is driven through registrations, heartbeats (caught up or not, fence and
shutdown requests), session-expiry ticks, topic creation/deletion, partition additions,
AlterPartition proposals (valid and stale), config changes and producer id blocks, with
proposals committed in random amounts and leadership lost and regained the way Raft allows
(in-flight batches either commit before the next activation or never). After every step:

- every partition's ISR is a non-empty subset of its replicas and its leader is in the ISR or
  -1, and the leader is an active broker;
- leader epochs, partition epochs and broker epochs never go back; a changed partition has a
  higher partition epoch;
- no committed batch is ever a no-op and none diverges (the protocol was followed);
- at the end: replaying the committed log from scratch gives the same digest, and so does a
  snapshot round trip; with nothing pending, speculative and committed digests are equal
  (ControllerLogic(check_speculative=True) asserts that as it goes).
"""

from __future__ import annotations

from controller_testkit import TOPIC, TestCluster, alter_op, create_topic
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tidelog.metadata.image import NO_LEADER, MetadataImage, PartitionRegistration
from tidelog.metadata.records import image_from_snapshot
from tidelog.v1 import controller_pb2

BROKERS = st.integers(1, 5)
TOPICS = st.sampled_from(["a", "b", "c.d", "c_d"])


class ControllerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cluster = TestCluster(seed=11)
        self.cluster.activate()
        self.generations: dict[int, int] = {}
        self.partition_epochs: dict[tuple[bytes, int], PartitionRegistration] = {}
        self.broker_epochs: dict[int, int] = {}

    # --- helpers ------------------------------------------------------------------------------

    @property
    def logic(self):  # type: ignore[no-untyped-def]
        return self.cluster.logic

    def _commit(self, count: int | None = None) -> None:
        for outcome in self.cluster.commit(count):
            assert outcome.ignored is None, outcome
            assert not outcome.diverged, outcome

    # --- rules --------------------------------------------------------------------------------

    @initialize(brokers=st.integers(0, 5), topics=st.lists(TOPICS, max_size=2))
    def start(self, brokers: int, topics: list[str]) -> None:
        self.cluster.add_brokers(range(1, brokers + 1), racks=["x", "y"])
        for name in topics:
            self.cluster.create_topics(create_topic(name, 2, min(2, max(brokers, 1))))

    @rule(broker=BROKERS, new_process=st.booleans(), rack=st.sampled_from(["x", "y"]))
    def register(self, broker: int, new_process: bool, rack: str) -> None:
        if not self.logic.is_active:
            return
        generation = self.generations.get(broker, 1) + (1 if new_process else 0)
        existing = self.logic.image.cluster.broker(broker)
        if existing is not None and not new_process:
            rack = existing.rack
        response = self.cluster.register(broker, generation=generation, rack=rack)
        if response.error_code == 0:
            self.generations[broker] = generation

    @rule(broker=BROKERS, caught_up=st.booleans(), fence=st.booleans(), shutdown=st.booleans())
    def heartbeat(self, broker: int, caught_up: bool, fence: bool, shutdown: bool) -> None:
        if not self.logic.is_active or self.logic.image.cluster.broker(broker) is None:
            return
        offset = self.logic.committed_offset if caught_up else -1
        self.cluster.heartbeat(broker, offset=offset, want_fence=fence and not shutdown,
                               want_shutdown=shutdown)

    @rule(ms=st.sampled_from([0, 1000, 4000, 9001]))
    def tick(self, ms: int) -> None:
        self.cluster.tick(ms)

    @rule(name=TOPICS, partitions=st.integers(1, 4), rf=st.integers(1, 3), unclean=st.booleans())
    def create(self, name: str, partitions: int, rf: int, unclean: bool) -> None:
        configs = {"unclean.leader.election.enable": "true"} if unclean else {}
        if self.logic.is_active:
            self.cluster.create_topics(create_topic(name, partitions, rf, configs=configs))

    @rule(name=TOPICS)
    def delete(self, name: str) -> None:
        request = controller_pb2.DeleteTopicsRequest(names=[name])
        self.cluster.submit(self.logic.handle_delete_topics(request, self.cluster.now_ms))

    @rule(name=TOPICS, more=st.integers(1, 2))
    def add_partitions(self, name: str, more: int) -> None:
        topic = self.logic.image.topics.get(name)
        count = (topic.num_partitions if topic else 0) + more
        request = controller_pb2.CreatePartitionsRequest(
            topics=[controller_pb2.CreatePartitionsRequest.Topic(name=name, count=count)]
        )
        self.cluster.submit(self.logic.handle_create_partitions(request, self.cluster.now_ms))

    @rule(data=st.data(), stale=st.booleans())
    def alter_partition(self, data: st.DataObject, stale: bool) -> None:
        led = [(t, p_id, p) for t, p_id, p in self.logic.image.topics.iter_partitions()
               if p.leader != NO_LEADER]
        if not self.logic.is_active or not led:
            return
        topic, partition_id, partition = data.draw(st.sampled_from(led))
        others = [b for b in partition.replicas if b != partition.leader]
        members = data.draw(st.lists(st.sampled_from(others), unique=True)) if others else []
        self.cluster.alter_partition(
            partition.leader, topic.name, partition_id, [partition.leader, *members],
            partition_epoch=partition.partition_epoch - (1 if stale else 0),
        )

    @rule(name=TOPICS, unclean=st.booleans())
    def set_unclean(self, name: str, unclean: bool) -> None:
        self.cluster.alter_configs(
            TOPIC, name, alter_op("unclean.leader.election.enable", str(unclean).lower())
        )

    @rule(broker=BROKERS)
    def allocate(self, broker: int) -> None:
        registration = self.logic.image.cluster.broker(broker)
        if registration is not None and self.logic.is_active:
            request = controller_pb2.AllocateProducerIdsRequest(
                broker_id=broker, broker_epoch=registration.broker_epoch
            )
            self.cluster.submit(self.logic.handle_allocate_producer_ids(request, 0))

    @rule()
    def hold_proposals(self) -> None:
        """Proposals stay in flight (building on each other) until ``commit``."""
        self.cluster.autocommit = False

    @rule(count=st.integers(0, 3), resume=st.booleans())
    def commit(self, count: int, resume: bool) -> None:
        self._commit(min(count, len(self.cluster.in_flight)))
        if resume:
            self._commit()
            self.cluster.autocommit = True

    @rule(commit_in_flight=st.booleans())
    def lose_and_regain_leadership(self, commit_in_flight: bool) -> None:
        self.logic.on_resign()
        if commit_in_flight:
            self._commit()  # they were in the new leader's log: they commit before it acts
        else:
            self.cluster.in_flight.clear()  # they were not: Raft overwrites them
        self.cluster.activate()

    # --- invariants ---------------------------------------------------------------------------

    def _check_image(self, image: MetadataImage) -> None:
        for _, _, partition in image.topics.iter_partitions():
            assert partition.isr and set(partition.isr) <= set(partition.replicas)
            assert partition.leader == NO_LEADER or partition.leader in partition.isr
            assert partition.leader == NO_LEADER or image.cluster.is_active(partition.leader)

    @invariant()
    def images_are_consistent(self) -> None:
        self._check_image(self.logic.committed_image)
        self._check_image(self.logic.image)

    @invariant()
    def epochs_never_go_back(self) -> None:
        image = self.logic.committed_image
        for topic, partition_id, partition in image.topics.iter_partitions():
            key = (topic.topic_id, partition_id)
            before = self.partition_epochs.get(key)
            if before is not None:
                assert partition.leader_epoch >= before.leader_epoch
                assert partition.partition_epoch >= before.partition_epoch
                if partition != before:
                    assert partition.partition_epoch > before.partition_epoch
                if partition.leader != before.leader:
                    assert partition.leader_epoch > before.leader_epoch
            self.partition_epochs[key] = partition
        for broker_id, registration in image.cluster.brokers.items():
            assert registration.broker_epoch >= self.broker_epochs.get(broker_id, -1)
            self.broker_epochs[broker_id] = registration.broker_epoch

    def teardown(self) -> None:
        self._commit()
        committed = self.logic.committed_image
        assert self.cluster.replayed_from_scratch().digest() == committed.digest()
        assert image_from_snapshot(self.logic.committed_snapshot()).digest() == committed.digest()
        assert self.logic.image.digest() == committed.digest()


ControllerMachine.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestControllerInvariants = ControllerMachine.TestCase
