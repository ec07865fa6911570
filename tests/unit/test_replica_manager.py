"""The broker data plane in-process: several ReplicaManagers replicating through each other.

What it checks, end to end through the real shell (broker/replica_manager.py, handlers/,
alter_partition.py, partition.py, fetcher.py, delayed.py, producer_ids.py) on real RocksDB storage:
produce with acks=0/1/all (min.insync.replicas at append, REQUEST_TIMED_OUT), followers fetching
with their LEO and last epoch, the HW and acks=all completing when followers catch up,
byte-identical logs on every replica, leader failover without losing acknowledged records, a
diverged follower truncating to the new leader, ISR shrink and expand through AlterPartition,
consumer long-polls woken by the HW, idempotent producers (InitProducerId, duplicates, gaps,
fencing, state after a restart), topic deletion and stray logs, retention, and metrics.

How: ``Cluster`` below is the whole world in one event loop. The controller is the real pure
``ControllerLogic`` driven by tests/unit/controller_testkit.TestCluster (commits at once); every
committed batch is handed to each running broker as a MetadataUpdate (what the MetadataListener
would publish), and AlterPartition / AllocateProducerIds calls go to the same logic. Brokers
reach each other through an in-memory ``Network`` that calls the leader's
``handle_replica_fetch`` (requests and answers go through protobuf bytes, as on the wire) and
can cut a broker off. Each test runs under ``asyncio.run`` with real (short) timeouts.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from controller_testkit import TestCluster, create_topic
from prometheus_client import CollectorRegistry

from tidelog.broker import replica_manager
from tidelog.broker.handlers import (
    handle_fetch,
    handle_list_offsets,
    handle_produce,
    handle_replica_fetch,
)
from tidelog.broker.metadata_listener import MetadataUpdate
from tidelog.broker.metrics import BrokerMetrics
from tidelog.broker.replica_manager import ReplicaManager, ReplicaManagerConfig
from tidelog.data_dir import format_data_dir
from tidelog.errors import NetworkError
from tidelog.metadata.delta import MetadataDelta
from tidelog.metadata.image import MetadataImage
from tidelog.record_batch import NewRecord, build_batch, decode_records, parse_batch
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode

T = TypeVar("T")
CLUSTER_ID = "test-cluster"
WAIT_S = 10.0


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


async def until(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def batch(*values: bytes, producer_id: int = -1, producer_epoch: int = -1,
          base_sequence: int = -1, timestamp_ms: int | None = None,
          max_bytes: int = 64 << 20) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([NewRecord(b"k", v, timestamp_ms=timestamp_ms) for v in values],
                       now_ms=now, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence, max_bytes=max_bytes)


class Network:
    """Brokers' ReplicaService calls, in memory; ``cut`` brokers neither send nor answer."""

    def __init__(self) -> None:
        self.managers: dict[int, ReplicaManager] = {}
        self.cut: set[int] = set()
        # Fetches a leader is handling (parked or not): after a cut, a test waits for 0 so that
        # no fetch sent before the cut can still move a follower's position at its leader.
        self.in_flight = 0
        self.refused: collections.Counter[int] = collections.Counter()  # fetches, by follower

    def transport(self, source: int) -> _Transport:
        return _Transport(self, source)


class _Transport:
    def __init__(self, network: Network, source: int) -> None:
        self.network = network
        self.source = source

    async def fetch(self, leader_id: int, request: pb.FetchRequest, *,
                    timeout_s: float) -> pb.FetchResponse:
        network = self.network
        leader = network.managers.get(leader_id)
        if leader is None or {self.source, leader_id} & network.cut:
            network.refused[self.source] += 1
            await asyncio.sleep(0.01)
            raise NetworkError(f"broker {leader_id} unreachable from {self.source}")
        wire = pb.FetchRequest.FromString(request.SerializeToString())
        network.in_flight += 1
        try:
            answer = await asyncio.wait_for(handle_replica_fetch(leader, wire), timeout_s)
        finally:
            network.in_flight -= 1
        if {self.source, leader_id} & network.cut:
            raise NetworkError("cut while the fetch was in flight")
        return pb.FetchResponse.FromString(answer.SerializeToString())

    async def close(self) -> None:
        pass


class Cluster:
    """Controller logic + brokers + network, in one event loop (see the module doc)."""

    def __init__(self, base: Path, broker_ids: tuple[int, ...] = (1, 2, 3),
                 config: ReplicaManagerConfig | None = None) -> None:
        self.base = base
        self.controller = TestCluster()
        self.controller.activate()
        self.controller.add_brokers(broker_ids)
        self.network = Network()
        self.config = config or ReplicaManagerConfig(replica_fetch_wait_max_ms=100,
                                                     replica_fetch_backoff_ms=20)
        self.managers: dict[int, ReplicaManager] = {}
        self.registries: dict[int, CollectorRegistry] = {}
        self._applied: dict[int, tuple[MetadataImage, int]] = {}  # broker → (image, log index)
        self.generation: dict[int, int] = dict.fromkeys(broker_ids, 1)
        # What the active controller last said of each broker's metadata (heartbeat is_caught_up).
        self.caught_up: dict[int, bool] = dict.fromkeys(broker_ids, True)
        #: Leaders each broker reported it could not reach (what its heartbeat would carry).
        self.unreachable: dict[int, list[int]] = {}
        for broker_id in broker_ids:
            format_data_dir(self.data_dir(broker_id), CLUSTER_ID, broker_id)

    def data_dir(self, broker_id: int) -> Path:
        return self.base / f"broker-{broker_id}"

    # --- ControllerChannel -------------------------------------------------------------------

    async def call(self, method: str, request: Any) -> Any:
        logic = self.controller.logic
        handlers: dict[str, Any] = {"AlterPartition": logic.handle_alter_partition,
                    "AllocateProducerIds": logic.handle_allocate_producer_ids}
        result = self.controller.submit(handlers[method](request, self.controller.now_ms))
        self.publish()
        return result.response

    # --- brokers -----------------------------------------------------------------------------

    async def start(self, broker_id: int) -> ReplicaManager:
        registry = CollectorRegistry()
        manager = ReplicaManager(
            broker_id=broker_id, data_dir=self.data_dir(broker_id), cluster_id=CLUSTER_ID,
            controller=self, broker_epoch=lambda: self.controller.broker_epoch(broker_id),
            config=self.config, transport=self.network.transport(broker_id),
            metrics=BrokerMetrics(registry),
            metadata_caught_up=lambda: self.caught_up[broker_id],
            on_leader_unreachable=self.unreachable.setdefault(broker_id, []).append)
        await manager.start()
        self.managers[broker_id] = manager
        self.registries[broker_id] = registry
        self.network.managers[broker_id] = manager
        self._applied[broker_id] = (MetadataImage.empty(), 0)
        self.publish()
        return manager

    async def start_all(self) -> None:
        for broker_id in sorted(self.generation):
            await self.start(broker_id)

    async def stop(self, broker_id: int) -> None:
        manager = self.managers.pop(broker_id)
        self.network.managers.pop(broker_id, None)
        self._applied.pop(broker_id, None)
        await manager.stop()

    async def stop_all(self) -> None:
        for broker_id in list(self.managers):
            await self.stop(broker_id)

    async def crash_and_fence(self, broker_id: int) -> None:
        """The broker goes away and the controller fences it (its leaderships move)."""
        await self.stop(broker_id)
        self.controller.heartbeat(broker_id, want_fence=True)
        self.publish()

    async def restart(self, broker_id: int) -> ReplicaManager:
        """A new incarnation: register again (new broker epoch), start, unfence when caught up."""
        self.generation[broker_id] += 1
        self.controller.register(broker_id, generation=self.generation[broker_id])
        manager = await self.start(broker_id)
        self.controller.heartbeat(broker_id)
        self.publish()
        return manager

    def publish(self) -> None:
        """Hand every committed batch a running broker has not seen to it, one update each
        (small ones: acted on at once, as ReplicaManager does below PUBLISH_SLICE_PARTITIONS)."""
        for _, manager, update in self._updates():
            assert manager.on_metadata_update(update, update.image) is None, \
                "a large update: use publish_sliced"

    async def publish_sliced(self) -> None:
        """As publish, awaiting what a large update returns, as the MetadataListener does."""
        for _, manager, update in self._updates():
            acted = manager.on_metadata_update(update, update.image)
            if acted is not None:
                await acted

    def _updates(self) -> Iterator[tuple[int, ReplicaManager, MetadataUpdate]]:
        log = self.controller.log
        for broker_id, manager in list(self.managers.items()):
            image, index = self._applied[broker_id]
            while index < len(log):
                base, records = log[index]
                delta = MetadataDelta(image)
                delta.replay_batch(records, base)
                new_image = delta.apply()
                update = MetadataUpdate(image, new_image, delta, delta.local_changes(broker_id))
                image, index = new_image, index + 1
                self._applied[broker_id] = (image, index)
                yield broker_id, manager, update

    # --- topics and clients ------------------------------------------------------------------

    def create_topic(self, name: str, assignments: list[list[int]],
                     configs: dict[str, str] | None = None) -> bytes:
        response = self.controller.create_topics(
            create_topic(name, assignments=assignments, configs=configs))
        assert response.topics[0].error_code == ErrorCode.NONE, response
        self.publish()
        return self.controller.topic_id(name)

    def leader_of(self, topic: str, partition: int = 0) -> int:
        registration = self.controller.logic.image.topics.partition(
            self.controller.topic_id(topic), partition)
        assert registration is not None
        return registration.leader

    async def produce(self, topic: str, data: bytes, *, acks: int = -1, partition: int = 0,
                      broker: int | None = None, timeout_ms: int = 5_000
                      ) -> pb.ProduceResponse.PartitionResponse:
        request = pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms)
        request.topics.add(name=topic).partitions.add(partition_id=partition, batch=data)
        target = self.managers[broker if broker is not None else self.leader_of(topic, partition)]
        response = await handle_produce(target, request)
        return response.topics[0].partitions[0]

    async def fetch(self, topic: str, offset: int, *, partition: int = 0,
                    broker: int | None = None, max_wait_ms: int = 0, min_bytes: int = 0,
                    max_bytes: int = 0, partition_max_bytes: int = 0,
                    leader_epoch: int = -1) -> pb.FetchResponse.PartitionData:
        request = pb.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                                  max_bytes=max_bytes)
        request.topics.add(name=topic).partitions.add(
            partition_id=partition, fetch_offset=offset, current_leader_epoch=leader_epoch,
            partition_max_bytes=partition_max_bytes)
        target = self.managers[broker if broker is not None else self.leader_of(topic, partition)]
        response = await handle_fetch(target, request)
        return response.topics[0].partitions[0]

    def log_batches(self, broker_id: int, topic: str, partition: int = 0) -> list[bytes]:
        found = self.managers[broker_id].partition(self.controller.topic_id(topic), partition)
        assert found is not None
        return found.log.read(found.log.log_start_offset, 1 << 30).batches

    def leo(self, broker_id: int, topic: str, partition: int = 0) -> int:
        found = self.managers[broker_id].partition(self.controller.topic_id(topic), partition)
        return -1 if found is None else found.log.log_end_offset

    def isr(self, topic: str, partition: int = 0) -> tuple[int, ...]:
        registration = self.controller.logic.image.topics.partition(
            self.controller.topic_id(topic), partition)
        assert registration is not None
        return registration.isr

    async def converged(self, topic: str, brokers: tuple[int, ...], partition: int = 0) -> None:
        """Every broker's log of the partition is identical (bytes per batch)."""
        def same() -> bool:
            logs = [self.log_batches(b, topic, partition) for b in brokers]
            return all(log == logs[0] for log in logs)
        await until(same, f"{topic}-{partition} identical on {brokers}")


def values(batches: list[bytes]) -> list[bytes]:
    return [r.value or b"" for b in batches for r in decode_records(parse_batch(b))]


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


def scenario(base: Path, body: Callable[[Cluster], Awaitable[None]], **kw: Any) -> None:
    async def main() -> None:
        cluster = Cluster(base, **kw)
        try:
            await body(cluster)
        finally:
            await cluster.stop_all()
    run(main())


# --- produce, replicate, fetch -------------------------------------------------------------------


def test_acks_all_waits_for_the_isr_and_every_replica_ends_identical(base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]], {"min.insync.replicas": "2"})
        offsets = []
        for i in range(20):
            answer = await c.produce("t", batch(b"a%d" % i, b"b%d" % i))
            assert answer.error_code == ErrorCode.NONE, answer
            offsets.append(answer.base_offset)
        assert offsets == list(range(0, 40, 2))
        leader = c.managers[1].partition(c.controller.topic_id("t"), 0)
        assert leader is not None and leader.state.is_leader
        assert leader.log.high_watermark == 40, "acks=all answered only once the HW passed it"
        await c.converged("t", (1, 2, 3))
        got = await c.fetch("t", 0)
        assert got.error_code == ErrorCode.NONE and got.high_watermark == 40
        assert values(list(got.batches))[:4] == [b"a0", b"b0", b"a1", b"b1"]
        assert len(values(list(got.batches))) == 40
    scenario(base, body)


def test_a_large_metadata_change_is_acted_on_in_slices(
        base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 2 here (500 in production): seven new partitions take four slices, and the event loop
    # runs other work between them (at 10,000 partitions, a broker's heartbeats).
    monkeypatch.setattr(replica_manager, "PUBLISH_SLICE_PARTITIONS", 2)

    async def body(c: Cluster) -> None:
        await c.start(1)
        response = c.controller.create_topics(create_topic("big", assignments=[[1]] * 7))
        assert response.topics[0].error_code == ErrorCode.NONE, response
        topic_id = c.controller.topic_id("big")
        manager = c.managers[1]
        seen: list[int] = []
        done = False

        async def watch() -> None:  # what other tasks see, turn by turn
            while not done:
                seen.append(sum(manager.partition(topic_id, p) is not None for p in range(7)))
                await asyncio.sleep(0)
        watcher = asyncio.ensure_future(watch())
        await asyncio.sleep(0)
        await c.publish_sliced()
        done = True
        await watcher
        assert any(0 < n < 7 for n in seen), f"no turn between the slices: {seen}"
        assert seen == sorted(seen), "slices are acted on in order"
        for p in range(7):
            partition = manager.partition(topic_id, p)
            assert partition is not None and partition.state.is_leader
        assert (await c.produce("big", batch(b"x"), partition=6)).error_code == ErrorCode.NONE
    scenario(base, body, broker_ids=(1,))


def test_acks_1_and_0_answer_after_the_local_append(base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]])
        c.network.cut = {2, 3}  # followers cannot fetch: nothing can become committed
        for acks in (1, 0):
            answer = await c.produce("t", batch(b"x"), acks=acks)
            assert answer.error_code == ErrorCode.NONE and answer.base_offset >= 0
        assert c.leo(1, "t") == 2 and c.leo(2, "t") == 0
        consumer = await c.fetch("t", 0)
        assert list(consumer.batches) == [] and consumer.high_watermark == 0, \
            "consumers never see above the HW"
        c.network.cut = set()
        await c.converged("t", (1, 2, 3))
        leader = c.managers[1].partition(c.controller.topic_id("t"), 0)
        assert leader is not None
        await until(lambda: leader.log.high_watermark == 2, "HW after the followers caught up")
    scenario(base, body)


def test_acks_all_times_out_when_an_isr_member_does_not_fetch(base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]])
        c.network.cut = {3}
        answer = await c.produce("t", batch(b"x"), timeout_ms=300)
        assert answer.error_code == ErrorCode.REQUEST_TIMED_OUT, answer
        assert answer.appended, "in the leader's log: a producer must not resend it as new"
        assert answer.base_offset == 0, "the offset it was appended at is known and given"
        leader = c.managers[1].partition(c.controller.topic_id("t"), 0)
        assert leader is not None and leader.acks_waiting == 0, "the waiter was dropped"
    scenario(base, body)


def test_min_insync_replicas_refuses_acks_all_but_not_acks_1(base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]], {"min.insync.replicas": "2"})
        await c.crash_and_fence(2)
        await c.crash_and_fence(3)
        assert c.isr("t") == (1,)
        refused = await c.produce("t", batch(b"x"), acks=-1)
        assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS, refused
        assert c.leo(1, "t") == 0 and not refused.appended, "refused before the append"
        accepted = await c.produce("t", batch(b"y"), acks=1)
        assert accepted.error_code == ErrorCode.NONE and accepted.base_offset == 0
    scenario(base, body)


def test_produce_errors_carry_a_leader_hint(base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[2, 1, 3]])
        answer = await c.produce("t", batch(b"x"), broker=1)
        assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and not answer.appended
        hint = answer.current_leader
        assert (hint.leader_id, hint.leader_epoch) == (2, 0)
        assert hint.endpoint.port == 9100 + 2, "the endpoint the leader registered"
        unknown = await c.produce("nope", batch(b"x"), broker=1)
        assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        no_partition = await c.produce("t", batch(b"x"), broker=2, partition=7)
        assert no_partition.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    scenario(base, body)


def test_many_partitions_in_one_request_answer_each(base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2], [2, 1], [1, 3]])
        request = pb.ProduceRequest(acks=-1, timeout_ms=5_000)
        topic = request.topics.add(name="t")
        for partition in (0, 1, 2):
            topic.partitions.add(partition_id=partition, batch=batch(b"p%d" % partition))
        response = await handle_produce(c.managers[1], request)
        codes = [p.error_code for p in response.topics[0].partitions]
        assert codes == [ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NONE]
        assert response.topics[0].partitions[1].current_leader.leader_id == 2
    scenario(base, body)


# --- failover, divergence, ISR -------------------------------------------------------------------


def test_leader_failover_keeps_acknowledged_records_and_the_old_leader_rejoins(base: Path
                                                                              ) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]], {"min.insync.replicas": "2"})
        acked = []
        for i in range(10):
            answer = await c.produce("t", batch(b"before-%d" % i))
            assert answer.error_code == ErrorCode.NONE
            acked.append(b"before-%d" % i)
        await c.crash_and_fence(1)
        new_leader = c.leader_of("t")
        assert new_leader in (2, 3)
        for i in range(10):
            answer = await c.produce("t", batch(b"after-%d" % i))
            assert answer.error_code == ErrorCode.NONE, answer
            acked.append(b"after-%d" % i)
        await c.restart(1)
        await c.converged("t", (1, 2, 3))
        await until(lambda: 1 in c.isr("t"), "the old leader back in the ISR")
        got = await c.fetch("t", 0)
        assert values(list(got.batches)) == acked
    scenario(base, body)


def test_a_diverged_follower_truncates_to_the_new_leader(base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]])
        assert (await c.produce("t", batch(b"committed"))).error_code == ErrorCode.NONE
        await c.converged("t", (1, 2, 3))
        c.network.cut = {1}  # the leader is cut off, still believes it leads
        for i in range(3):
            answer = await c.produce("t", batch(b"lost-%d" % i), acks=1)
            assert answer.error_code == ErrorCode.NONE
        assert c.leo(1, "t") == 4 and c.leo(2, "t") == 1
        await c.crash_and_fence(1)
        assert c.leader_of("t") == 2
        assert (await c.produce("t", batch(b"new-1", b"new-2"))).error_code == ErrorCode.NONE
        c.network.cut = set()
        await c.restart(1)
        await c.converged("t", (1, 2, 3))
        assert values(c.log_batches(1, "t")) == [b"committed", b"new-1", b"new-2"]
    scenario(base, body)


def test_followers_report_a_leader_they_cannot_reach_once_per_run_of_failures(
        base: Path) -> None:
    # What the broker's heartbeat then carries (unreachable_brokers), so the active controller
    # probes a dead leader at once (controller/broker_prober.py, on_unreachable_reported).
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]])
        assert (await c.produce("t", batch(b"x"))).error_code == ErrorCode.NONE
        await c.converged("t", (1, 2, 3))
        assert c.unreachable.get(2, []) == [] and c.unreachable.get(3, []) == []
        c.network.cut = {1}  # the leader's link: each follower's fetches from it fail
        await until(lambda: c.unreachable.get(2) == [1] and c.unreachable.get(3) == [1],
                    "both followers report leader 1")
        failed = c.network.refused[2]
        await until(lambda: c.network.refused[2] >= failed + 2, "more failed fetches")
        assert c.unreachable[2] == [1], "a run of failures is reported once"
        c.network.cut = set()
        await c.converged("t", (1, 2, 3))
    scenario(base, body)


def test_isr_shrinks_for_a_lagging_follower_and_expands_when_it_catches_up(base: Path) -> None:
    config = ReplicaManagerConfig(replica_lag_time_max_ms=300, replica_fetch_wait_max_ms=50,
                                  replica_fetch_backoff_ms=20)

    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]], {"min.insync.replicas": "2"})
        c.network.cut = {3}
        assert (await c.produce("t", batch(b"x"), timeout_ms=5_000)).error_code \
            == ErrorCode.NONE, "completes once the ISR shrank to {1, 2}"
        assert c.isr("t") == (1, 2)
        registry = c.registries[1]
        assert registry.get_sample_value("tidelog_broker_isr_shrinks_total") == 1
        c.network.cut = set()
        await until(lambda: c.isr("t") == (1, 2, 3), "the follower back in the ISR")
        assert registry.get_sample_value("tidelog_broker_isr_expands_total") == 1
        await c.converged("t", (1, 2, 3))
    scenario(base, body, config=config)


# --- consumers -----------------------------------------------------------------------------------


def test_consumer_long_poll_is_woken_by_the_high_watermark(base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2]])
        started = time.monotonic()
        empty = await c.fetch("t", 0, max_wait_ms=200, min_bytes=1)
        assert list(empty.batches) == [] and time.monotonic() - started >= 0.19
        poll = asyncio.ensure_future(c.fetch("t", 0, max_wait_ms=5_000, min_bytes=1))
        await asyncio.sleep(0.05)
        assert not poll.done()
        started = time.monotonic()
        assert (await c.produce("t", batch(b"hello"), acks=1)).error_code == ErrorCode.NONE
        got = await poll
        assert values(list(got.batches)) == [b"hello"] and time.monotonic() - started < 1
    scenario(base, body)


def test_fetch_sizes_per_partition_and_per_request(base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1], [1]])
        for _ in range(5):
            for partition in (0, 1):
                await c.produce("t", batch(b"v" * 1000), partition=partition)
        one = await c.fetch("t", 0, partition_max_bytes=10)
        assert len(one.batches) == 1, "the first batch comes whole even above the limit"
        some = await c.fetch("t", 0, partition_max_bytes=2500)
        assert len(some.batches) == 2
        request = pb.FetchRequest(replica_id=-1, max_bytes=2500)
        topic = request.topics.add(name="t")
        for partition in (0, 1):
            topic.partitions.add(partition_id=partition, fetch_offset=0,
                                 partition_max_bytes=1 << 20)
        response = await handle_fetch(c.managers[1], request)
        counts = [len(p.batches) for p in response.topics[0].partitions]
        assert counts == [2, 0], "the second partition gets only what is left of max_bytes"
    scenario(base, body)


def test_list_offsets(base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2]])
        for i, ts in enumerate((1_000, 5_000, 3_000)):
            await c.produce("t", batch(b"v%d" % i, timestamp_ms=ts))

        async def list_offset(timestamp: int, epoch: int = -1
                              ) -> pb.ListOffsetsResponse.PartitionData:
            request = pb.ListOffsetsRequest()
            request.topics.add(name="t").partitions.add(partition_id=0, timestamp=timestamp,
                                                        current_leader_epoch=epoch)
            return (await handle_list_offsets(c.managers[1], request)).topics[0].partitions[0]

        assert (await list_offset(-2)).offset == 0
        assert (await list_offset(-1)).offset == 3
        found = await list_offset(2_000)
        assert (found.offset, found.timestamp) == (1, 5_000)
        assert (await list_offset(9_000)).offset == -1
        largest = await list_offset(-3)
        assert (largest.offset, largest.timestamp) == (1, 5_000)
        assert (await list_offset(-1, epoch=5)).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert (await list_offset(-7)).error_code == ErrorCode.INVALID_REQUEST
    scenario(base, body)
