"""Helpers for the controller unit tests: request builders and an in-memory quorum.

``TestCluster`` drives a ``ControllerLogic`` the way the quorum loop will: handler results are
"proposed" to an in-memory log, committed (by default at once, or when the test says), and
replayed with ``replay_batch``. It keeps the committed log so tests can replay it from scratch
and compare digests.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tidelog import config as node_config
from tidelog.controller.control import ControllerLogic, ControllerResult, ReplayOutcome
from tidelog.controller.managers.common import LogicConfig
from tidelog.local_cluster import free_ports
from tidelog.metadata.delta import MetadataDelta
from tidelog.metadata.image import MetadataImage
from tidelog.v1 import common_pb2, controller_pb2, metadata_pb2

CLUSTER_ID = "test-cluster"
SESSION_TIMEOUT_MS = 9000
T = TypeVar("T")


def incarnation(broker_id: int, generation: int = 1) -> bytes:
    """A deterministic 16-byte incarnation id per (broker, process generation)."""
    return bytes([generation]) * 8 + broker_id.to_bytes(8, "big", signed=True)


def register_request(
    broker_id: int,
    *,
    generation: int = 1,
    rack: str = "",
    cluster_id: str = CLUSTER_ID,
    host: str = "localhost",
    port: int | None = None,
) -> controller_pb2.RegisterBrokerRequest:
    return controller_pb2.RegisterBrokerRequest(
        cluster_id=cluster_id,
        broker_id=broker_id,
        incarnation_id=incarnation(broker_id, generation),
        endpoint=common_pb2.Endpoint(host=host, port=port or 9100 + broker_id),
        rack=rack,
    )


def create_topic(
    name: str,
    partitions: int | None = None,
    replication_factor: int | None = None,
    *,
    configs: dict[str, str] | Sequence[tuple[str, str]] | None = None,
    assignments: Sequence[Sequence[int]] | None = None,
) -> controller_pb2.CreateTopicsRequest.Topic:
    """A CreateTopics entry; counts default to 1, or to -1 with explicit assignments."""
    default = -1 if assignments is not None else 1
    topic = controller_pb2.CreateTopicsRequest.Topic(
        name=name,
        num_partitions=default if partitions is None else partitions,
        replication_factor=default if replication_factor is None else replication_factor,
    )
    entries = configs.items() if isinstance(configs, dict) else configs or []
    for key, value in entries:
        topic.configs.add(name=key, value=value)
    for partition_id, brokers in enumerate(assignments or []):
        topic.assignments.add(partition_id=partition_id, broker_ids=brokers)
    return topic


def alter_op(name: str, value: str = "", op: str = "set") -> controller_pb2.AlterConfigsRequest.Op:
    ops = {
        "set": controller_pb2.ALTER_CONFIG_SET,
        "delete": controller_pb2.ALTER_CONFIG_DELETE,
        "append": controller_pb2.ALTER_CONFIG_APPEND,
        "subtract": controller_pb2.ALTER_CONFIG_SUBTRACT,
    }
    return controller_pb2.AlterConfigsRequest.Op(name=name, value=value, op=ops[op])


@dataclass
class TestCluster:
    """A ControllerLogic with an in-memory log, a clock, and convenience methods."""

    __test__ = False  # not a pytest test class

    seed: int = 0
    autocommit: bool = True
    config: LogicConfig = field(
        default_factory=lambda: LogicConfig(broker_session_timeout_ms=SESSION_TIMEOUT_MS)
    )
    now_ms: int = 1_000_000
    logic: ControllerLogic = field(init=False)
    log: list[tuple[int, tuple[metadata_pb2.MetadataRecord, ...]]] = field(default_factory=list)
    in_flight: list[ControllerResult[Any]] = field(default_factory=list)
    last_commit: tuple[MetadataImage, MetadataDelta] | None = None

    def __post_init__(self) -> None:
        self.logic = ControllerLogic(
            node_id=0, cluster_id=CLUSTER_ID, rng=random.Random(self.seed), config=self.config,
            check_speculative=True,
        )

    # --- the quorum ---------------------------------------------------------------------------

    def submit(self, result: ControllerResult[T]) -> ControllerResult[T]:
        if result.records:
            self.in_flight.append(result)
            if self.autocommit:
                self.commit()
        return result

    def commit(self, count: int | None = None) -> list[ReplayOutcome]:
        """Commit the oldest ``count`` in-flight batches (all by default), in order."""
        outcomes = []
        take = len(self.in_flight) if count is None else count
        for result in self.in_flight[:take]:
            outcomes.append(self.commit_records(result.records))
        del self.in_flight[:take]
        return outcomes

    def commit_records(self, records: Iterable[metadata_pb2.MetadataRecord]) -> ReplayOutcome:
        """Commit a batch at the next offset of the log (ours or any other)."""
        batch = tuple(records)
        base = self.logic.committed_offset + 1
        before = self.logic.committed_image
        delta = MetadataDelta(before)
        delta.replay_batch(batch, base)
        self.last_commit = (before, delta)
        self.log.append((base, batch))
        return self.logic.replay_batch(batch, base)

    def replayed_from_scratch(self) -> MetadataImage:
        """The committed log replayed on an empty image, batch by batch."""
        image = MetadataImage.empty()
        for base, batch in self.log:
            delta = MetadataDelta(image)
            delta.replay_batch(batch, base)
            image = delta.apply()
        return image

    # --- brokers ------------------------------------------------------------------------------

    def activate(self) -> ControllerResult[None]:
        return self.submit(self.logic.on_become_active(self.now_ms))

    def register(self, broker_id: int, **kwargs: Any) -> controller_pb2.RegisterBrokerResponse:
        request = register_request(broker_id, **kwargs)
        return self.submit(self.logic.handle_register_broker(request, self.now_ms)).response

    def broker_epoch(self, broker_id: int) -> int:
        registration = self.logic.image.cluster.broker(broker_id)
        assert registration is not None
        return registration.broker_epoch

    def heartbeat(
        self,
        broker_id: int,
        *,
        offset: int | None = None,
        epoch: int | None = None,
        want_fence: bool = False,
        want_shutdown: bool = False,
    ) -> controller_pb2.BrokerHeartbeatResponse:
        request = controller_pb2.BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=self.broker_epoch(broker_id) if epoch is None else epoch,
            current_metadata_offset=self.logic.committed_offset if offset is None else offset,
            want_fence=want_fence,
            want_shutdown=want_shutdown,
        )
        return self.submit(self.logic.handle_broker_heartbeat(request, self.now_ms)).response

    def add_brokers(self, broker_ids: Iterable[int], racks: Sequence[str] = ("",)) -> None:
        """Register and unfence brokers (rack i % len(racks))."""
        for index, broker_id in enumerate(broker_ids):
            self.register(broker_id, rack=racks[index % len(racks)])
            response = self.heartbeat(broker_id)
            assert not response.is_fenced, response

    def tick(self, advance_ms: int = 0) -> ControllerResult[None]:
        self.now_ms += advance_ms
        return self.submit(self.logic.maybe_fence_stale_brokers(self.now_ms))

    def heartbeat_all(self) -> None:
        for broker_id in sorted(self.logic.image.cluster.brokers):
            self.heartbeat(broker_id)

    # --- topics -------------------------------------------------------------------------------

    def create_topics(
        self, *topics: controller_pb2.CreateTopicsRequest.Topic, validate_only: bool = False
    ) -> controller_pb2.CreateTopicsResponse:
        request = controller_pb2.CreateTopicsRequest(topics=topics, validate_only=validate_only)
        return self.submit(self.logic.handle_create_topics(request, self.now_ms)).response

    def topic_id(self, name: str) -> bytes:
        topic = self.logic.image.topics.get(name)
        assert topic is not None, name
        return topic.topic_id

    def alter_partition(
        self,
        broker_id: int,
        topic: str,
        partition_id: int,
        new_isr: Sequence[int],
        *,
        leader_epoch: int | None = None,
        partition_epoch: int | None = None,
        broker_epoch: int | None = None,
    ) -> controller_pb2.AlterPartitionResponse:
        current = self.logic.image.topics.partition(self.topic_id(topic), partition_id)
        assert current is not None
        request = controller_pb2.AlterPartitionRequest(
            broker_id=broker_id,
            broker_epoch=self.broker_epoch(broker_id) if broker_epoch is None else broker_epoch,
        )
        request.topics.add(topic_id=self.topic_id(topic)).partitions.add(
            partition_id=partition_id,
            leader_epoch=current.leader_epoch if leader_epoch is None else leader_epoch,
            partition_epoch=current.partition_epoch if partition_epoch is None else partition_epoch,
            new_isr=new_isr,
        )
        return self.submit(self.logic.handle_alter_partition(request, self.now_ms)).response

    def alter_configs(
        self,
        resource_type: int,
        resource_name: str,
        *ops: controller_pb2.AlterConfigsRequest.Op,
        validate_only: bool = False,
    ) -> controller_pb2.AlterConfigsResponse:
        request = controller_pb2.AlterConfigsRequest(validate_only=validate_only)
        request.resources.add(
            resource_type=resource_type,  # type: ignore[arg-type]
            resource_name=resource_name,
            ops=ops,
        )
        return self.submit(self.logic.handle_alter_configs(request, self.now_ms)).response


TOPIC = metadata_pb2.CONFIG_RESOURCE_TOPIC
BROKER = metadata_pb2.CONFIG_RESOURCE_BROKER


# --- record builders (for replay tests) -------------------------------------------------------

def topic_id_of(n: int) -> bytes:
    return n.to_bytes(16, "big")


def r_register(broker_id: int, epoch: int, *, generation: int = 1, rack: str = "",
               fenced: bool = True) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(register_broker=metadata_pb2.RegisterBrokerRecord(
        broker_id=broker_id, incarnation_id=incarnation(broker_id, generation),
        broker_epoch=epoch, endpoint=common_pb2.Endpoint(host="h", port=9100 + broker_id),
        rack=rack, fenced=fenced,
    ))


def r_unfence(broker_id: int, epoch: int) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        unfence_broker=metadata_pb2.UnfenceBrokerRecord(broker_id=broker_id, broker_epoch=epoch)
    )


def r_fence(broker_id: int, epoch: int) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        fence_broker=metadata_pb2.FenceBrokerRecord(broker_id=broker_id, broker_epoch=epoch)
    )


def r_topic(name: str, n: int) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        topic=metadata_pb2.TopicRecord(name=name, topic_id=topic_id_of(n))
    )


def r_partition(n: int, partition_id: int, replicas: Sequence[int],
                isr: Sequence[int] | None = None, leader: int | None = None
                ) -> metadata_pb2.MetadataRecord:
    isr = list(replicas) if isr is None else isr
    return metadata_pb2.MetadataRecord(partition=metadata_pb2.PartitionRecord(
        topic_id=topic_id_of(n), partition_id=partition_id, replicas=replicas, isr=isr,
        leader=isr[0] if leader is None else leader,
    ))


def r_change(n: int, partition_id: int, expected_epoch: int, *, leader: int | None = None,
             isr: Sequence[int] | None = None, replicas: Sequence[int] | None = None,
             bump: bool = False) -> metadata_pb2.MetadataRecord:
    change = metadata_pb2.PartitionChangeRecord(
        topic_id=topic_id_of(n), partition_id=partition_id,
        expected_partition_epoch=expected_epoch, bump_leader_epoch=bump,
    )
    if leader is not None:
        change.leader = leader
    if isr is not None:
        change.isr.CopyFrom(common_pb2.ReplicaList(broker_ids=isr))
    if replicas is not None:
        change.replicas.CopyFrom(common_pb2.ReplicaList(broker_ids=replicas))
    return metadata_pb2.MetadataRecord(partition_change=change)


def r_config(resource_type: int, resource_name: str, name: str, value: str | None
             ) -> metadata_pb2.MetadataRecord:
    record = metadata_pb2.ConfigRecord(
        resource_type=resource_type,  # type: ignore[arg-type]
        resource_name=resource_name, name=name,
    )
    if value is not None:
        record.value = value
    return metadata_pb2.MetadataRecord(config=record)


def replay_all(records: Sequence[metadata_pb2.MetadataRecord],
               image: MetadataImage | None = None) -> MetadataImage:
    """Each record as its own batch at the next offsets; every one must apply."""
    image = image or MetadataImage.empty()
    for record in records:
        delta = MetadataDelta(image)
        outcome = delta.replay(record, image.offset + 1)
        assert outcome is None, outcome
        image = delta.apply()
    return image


# --- a real ControllerRuntime on a one-voter quorum ------------------------------------------

_RUNTIME_RESPONSES: dict[str, Any] = {
    "register_broker": controller_pb2.RegisterBrokerResponse,
    "broker_heartbeat": controller_pb2.BrokerHeartbeatResponse,
    "create_topics": controller_pb2.CreateTopicsResponse,
}


def one_voter_config(data_dir: Any, **controller: Any) -> node_config.NodeConfig:
    """A controller node's config for a one-voter quorum of its own on 127.0.0.1 (ports picked
    here) with fast elections; ``controller`` overrides fields of its [controller] section."""
    port, raft_port = free_ports(2)
    voter = node_config.VoterConfig(id=1, host="127.0.0.1", port=port, raft_port=raft_port)
    settings: dict[str, Any] = {"voters": (voter,), "election_timeout_min_ms": 70,
                                "election_timeout_max_ms": 100, "append_entries_period_ms": 20}
    return node_config.NodeConfig(
        node_id=1, data_dir=str(data_dir), roles=("controller",),
        controller=node_config.ControllerConfig(**(settings | controller)))


def one_voter_runtime(data_dir: Any, *, registry: Any = None, **controller: Any) -> Any:
    """A ControllerRuntime (not started) on :func:`one_voter_config`, cluster id "c"."""
    from prometheus_client import CollectorRegistry

    from tidelog.controller.metrics import ControllerMetrics
    from tidelog.controller.runtime import ControllerRuntime
    return ControllerRuntime(one_voter_config(data_dir, **controller), cluster_id="c",
                             metrics=ControllerMetrics(registry or CollectorRegistry()))


@dataclass
class RuntimeDriver:
    """Writes to a ControllerRuntime as its gRPC service does (each must succeed)."""

    runtime: Any  # controller.runtime.ControllerRuntime (not imported here: no asyncio deps)

    async def wait_active(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.runtime.active:
            assert time.monotonic() < deadline, "the one voter did not become active"
            await asyncio.sleep(0.01)

    async def write(self, rpc: str, request: Any) -> Any:
        handler = getattr(self.runtime.logic, "handle_" + rpc)
        response = await self.runtime.write(rpc, handler, request, _RUNTIME_RESPONSES[rpc])
        assert response.error_code == common_pb2.ErrorCode.NONE, response
        return response

    async def heartbeat(self, broker_id: int, **flags: bool) -> None:
        logic = self.runtime.logic
        registration = logic.committed_image.cluster.broker(broker_id)
        assert registration is not None
        await self.write("broker_heartbeat", controller_pb2.BrokerHeartbeatRequest(
            broker_id=broker_id, broker_epoch=registration.broker_epoch,
            current_metadata_offset=logic.committed_offset, **flags))
