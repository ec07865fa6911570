"""The broker's control plane against three real controller processes.

What it checks: brokers register and are unfenced once their metadata listener has caught up;
their listeners follow topic creation and deletion with the right local changes (leader or
follower at the right leader epoch, with replicas and ISR; deletes); heartbeats and the metadata
stream survive kill -9 of the active controller without re-registration (a broker heartbeats at
once when it loses the active controller, and so finds the new one), and survive a SIGSTOPped
(hung) active controller too; a broker that stops heartbeating is fenced by the controllers and
its leaderships move (seen in another broker's image and local changes), at session expiry while
something still listens at its endpoint, at once when nothing does (fast fencing); controlled
shutdown moves leadership away before the broker is told it may stop (the broker has applied the
move by then); a broker of another cluster is refused with INCONSISTENT_CLUSTER_ID.

How: tests/integration/cluster_harness.py runs the controllers as ``tidelog server`` processes
(one cluster for the module, short session timeout); each test runs brokers in-process -- a
ControllerClient, a MetadataListener with a recording publisher and a BrokerLifecycleManager each,
exactly what a broker process wires together -- under ``asyncio.run``, with broker ids of its own
so tests do not disturb each other, and explicit replica assignments so placement is known.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_harness import ClusterHarness

from tidelog.broker.controller_client import ControllerClient
from tidelog.broker.lifecycle import BrokerLifecycleManager, BrokerState
from tidelog.broker.metadata_listener import MetadataListener, MetadataUpdate
from tidelog.cluster_secret import CONTROLLERS, broker_credential, read_secret_file
from tidelog.errors import InconsistentClusterIdError
from tidelog.metadata.delta import LocalPartition
from tidelog.metadata.image import MetadataImage, PartitionRegistration
from tidelog.peer_auth import peer_metadata
from tidelog.v1 import controller_pb2
from tidelog.v1.common_pb2 import ErrorCode

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 3_000
#: Small snapshot threshold: a restarted controller then holds only a snapshot plus a short
#: tail, and streams the snapshot to a broker starting from offset 0.
SNAPSHOT_MIN_ENTRIES = 20
FAST = {"controller": {"broker_session_timeout_ms": SESSION_TIMEOUT_MS,
                       "fence_check_interval_ms": 100,
                       "snapshot_min_entries": SNAPSHOT_MIN_ENTRIES}}
HEARTBEAT_INTERVAL_MS = 300
WAIT_MS = 15_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("control-plane") / "cluster"
    with ClusterHarness.started(base, controllers=3, overrides=FAST) as harness:
        yield harness


@pytest.fixture
def healthy(cluster: ClusterHarness) -> ClusterHarness:
    """The module's cluster with every controller up (a test may have killed one)."""
    down = [n for n in cluster.controller_names if not cluster.is_running(n)]
    for name in cluster.controller_names:
        if cluster.is_paused(name):
            cluster.resume(name)
    cluster.start(*down)
    cluster.wait_for_leader()
    return cluster



def _credential(cluster: ClusterHarness, broker_id: int) -> tuple[tuple[str, str], ...]:
    """What broker ``broker_id`` sends to the controllers: they refuse broker RPCs without it."""
    credential = broker_credential(read_secret_file(cluster.local.secret_path), broker_id)
    return peer_metadata(broker_id, credential, audience=CONTROLLERS)

class Recorder:
    """A publisher that keeps every update (what the replica manager would act on)."""

    def __init__(self) -> None:
        self.updates: list[MetadataUpdate] = []

    def on_metadata_update(self, update: MetadataUpdate, image: MetadataImage) -> None:
        if self.updates:
            assert update.previous_image is self.updates[-1].image, "updates arrive in order"
        self.updates.append(update)

    def changes(self, topic: str, partition_id: int) -> list[tuple[str, LocalPartition]]:
        """Every local change of one partition, oldest first, as (kind, change)."""
        found = []
        for update in self.updates:
            for kind in ("deletes", "leaders", "followers"):
                for change in getattr(update.local_changes, kind):
                    if (change.topic_name, change.partition_id) == (topic, partition_id):
                        found.append((kind, change))
        return found


class Broker:
    """The control plane of one broker, in this process."""

    def __init__(self, cluster: ClusterHarness, broker_id: int, *,
                 cluster_id: str | None = None,
                 on_fatal: Callable[[Exception], None] | None = None,
                 heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS) -> None:
        self.broker_id = broker_id
        # Something listens at its registered endpoint, as at a live (if stalled) broker
        # process's: the controller's probe connects (a controller probes every broker when it
        # becomes active, too) are accepted, so they are no evidence of death.
        self._accepting = socket.socket()
        self._accepting.bind(("127.0.0.1", 0))
        self._accepting.listen()
        self.port = self._accepting.getsockname()[1]
        cluster_id = cluster_id or cluster.cluster_id
        self.client = ControllerClient(cluster.voters, name=f"broker {broker_id}",
                                       peer_metadata=_credential(cluster, broker_id))
        self.recorder = Recorder()
        self.listener = MetadataListener(broker_id=broker_id, cluster_id=cluster_id,
                                         client=self.client, publishers=[self.recorder],
                                         on_fatal=on_fatal)
        self.lifecycle = BrokerLifecycleManager(
            broker_id=broker_id, cluster_id=cluster_id, host="127.0.0.1",
            port=self.port, client=self.client,
            metadata_offset=lambda: self.listener.offset,
            heartbeat_interval_ms=heartbeat_interval_ms)

    async def start(self) -> None:
        await self.listener.start()
        await self.lifecycle.start(registration_timeout_ms=WAIT_MS)

    def stop_accepting(self) -> None:
        """Nothing listens at its endpoint any more, as after its process died: the
        controller's probe connects are refused."""
        self._accepting.close()

    async def close(self) -> None:
        await self.lifecycle.stop()
        await self.listener.stop()
        await self.client.close()
        self.stop_accepting()

    async def wait_image(self, predicate: Callable[[MetadataImage], bool],
                         what: str) -> MetadataImage:
        image = await self.listener.wait_for_image(predicate, WAIT_MS)
        assert image is not None, f"broker {self.broker_id}: {what} not seen in {WAIT_MS} ms"
        return image


async def with_brokers(cluster: ClusterHarness, broker_ids: list[int],
                       body: Callable[[dict[int, Broker]], Awaitable[None]],
                       **options: Any) -> None:
    """Start brokers, wait until all are unfenced, run ``body``, always close them."""
    brokers = {b: Broker(cluster, b, **options) for b in broker_ids}
    try:
        await asyncio.gather(*(b.start() for b in brokers.values()))
        for broker in brokers.values():
            assert await broker.lifecycle.wait_unfenced(WAIT_MS), f"{broker.broker_id} fenced"
        await body(brokers)
    finally:
        await asyncio.gather(*(b.close() for b in brokers.values()))


async def create_topic(broker: Broker, name: str, assignments: list[list[int]]) -> bytes:
    """CreateTopics forwarded through a broker's controller client; returns the topic id."""
    request = controller_pb2.CreateTopicsRequest(topics=[controller_pb2.CreateTopicsRequest.Topic(
        name=name, num_partitions=-1, replication_factor=-1,
        assignments=[controller_pb2.CreateTopicsRequest.Assignment(partition_id=i, broker_ids=r)
                     for i, r in enumerate(assignments)])])
    response = await broker.client.forward("CreateTopics", request)
    assert response.error_code == ErrorCode.NONE, response.error_message
    result = response.topics[0]
    assert result.error_code == ErrorCode.NONE, result.error_message
    return bytes(result.topic_id)


def partition_of(image: MetadataImage, topic: str, partition_id: int
                 ) -> PartitionRegistration | None:
    found = image.topics.get(topic)
    return found.partitions.get(partition_id) if found is not None else None


def fenced_and_moved(broker_id: int, topic: str, *, to: int
                     ) -> Callable[[MetadataImage], bool]:
    """An image predicate: ``broker_id`` fenced and ``topic``-0 led by ``to``."""
    def check(image: MetadataImage) -> bool:
        registration = image.cluster.broker(broker_id)
        p = partition_of(image, topic, 0)
        return bool(registration and registration.fenced and p and p.leader == to)
    return check


def run(scenario: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(scenario, 60))  # type: ignore[arg-type]


# --- tests ------------------------------------------------------------------------------------


def test_brokers_register_unfence_and_follow_topics(healthy: ClusterHarness) -> None:
    ids = [101, 102, 103]
    assignments = [[101, 102, 103], [102, 103, 101], [103, 101, 102]]

    async def body(brokers: dict[int, Broker]) -> None:
        for broker in brokers.values():
            image = await broker.wait_image(
                lambda i: all(i.cluster.is_unfenced(b) for b in ids), "three unfenced brokers")
            assert image.cluster.broker(broker.broker_id).broker_epoch == (  # type: ignore[union-attr]
                broker.lifecycle.broker_epoch)
            assert broker.lifecycle.state is BrokerState.RUNNING
            assert broker.lifecycle.stats.registrations == 1
        topic_id = await create_topic(brokers[101], "orders", assignments)
        for broker in brokers.values():
            await broker.wait_image(lambda i: i.topics.get("orders") is not None, "orders")
            for partition_id, replicas in enumerate(assignments):
                kinds = broker.recorder.changes("orders", partition_id)
                assert len(kinds) == 1, kinds
                kind, change = kinds[0]
                assert kind == ("leaders" if replicas[0] == broker.broker_id else "followers")
                assert change.topic_id == topic_id
                assert change.registration == PartitionRegistration(
                    replicas=tuple(replicas), isr=tuple(replicas), leader=replicas[0],
                    leader_epoch=0, partition_epoch=0)
        response = await brokers[102].client.forward(
            "DeleteTopics", controller_pb2.DeleteTopicsRequest(names=["orders"]))
        assert response.topics[0].error_code == ErrorCode.NONE, response.topics[0].error_message
        for broker in brokers.values():
            await broker.wait_image(lambda i: i.topics.get("orders") is None, "orders deleted")
            for partition_id in range(3):
                kind, change = broker.recorder.changes("orders", partition_id)[-1]
                assert kind == "deletes" and change.topic_id == topic_id

    run(with_brokers(healthy, ids, body))


def test_heartbeats_survive_kill_of_the_active_controller(healthy: ClusterHarness) -> None:
    ids = [111, 112]

    async def body(brokers: dict[int, Broker]) -> None:
        epochs = {b: broker.lifecycle.broker_epoch for b, broker in brokers.items()}
        leader = await asyncio.to_thread(healthy.wait_for_leader)
        killed_at = time.monotonic()
        await asyncio.to_thread(healthy.kill, healthy.controller_name(leader))
        # From here on only another controller can answer a heartbeat.
        ok_at_kill = {b: broker.lifecycle.stats.heartbeats_ok for b, broker in brokers.items()}
        recovered_s: dict[int, float] = {}
        deadline = killed_at + WAIT_MS / 1000
        while time.monotonic() < deadline and not all(
                broker.lifecycle.stats.heartbeats_ok > ok_at_kill[b] + 2
                for b, broker in brokers.items()):
            for b, broker in brokers.items():
                if b not in recovered_s and broker.lifecycle.stats.heartbeats_ok > ok_at_kill[b]:
                    recovered_s[b] = round(time.monotonic() - killed_at, 2)
            await asyncio.sleep(0.01)
        assert len(recovered_s) == len(brokers), "heartbeats did not recover"
        print(f"first heartbeat answered {recovered_s} s after kill -9 of controller {leader}")
        assert all(broker.client.active_id not in (None, leader) for broker in brokers.values())
        for b, broker in brokers.items():
            assert broker.lifecycle.broker_epoch == epochs[b]
            assert broker.lifecycle.stats.registrations == 1, "no re-registration"
            assert not broker.lifecycle.is_fenced
        # The metadata stream followed too: a topic created now reaches both brokers.
        await create_topic(brokers[111], "after-failover", [[111, 112]])
        for broker in brokers.values():
            image = await broker.wait_image(
                lambda i: i.topics.get("after-failover") is not None, "after-failover")
            assert image.cluster.is_unfenced(111) and image.cluster.is_unfenced(112)

    run(with_brokers(healthy, ids, body))


def test_a_broker_heartbeats_as_soon_as_the_active_controller_is_lost(
    healthy: ClusterHarness,
) -> None:
    """The active controller's process dies: its metadata stream to the broker ends, and the
    broker heartbeats at once (its heartbeat finds the new active controller), not at the end
    of its interval. The interval here is far longer than the test: without that heartbeat the
    broker would not learn the new active controller before the deadline."""
    ids = [118]

    async def body(brokers: dict[int, Broker]) -> None:
        broker = brokers[118]
        leader = await asyncio.to_thread(healthy.wait_for_leader)
        sent = broker.lifecycle.stats.heartbeats_sent
        await asyncio.to_thread(healthy.kill, healthy.controller_name(leader))
        deadline = time.monotonic() + WAIT_MS / 1000
        while time.monotonic() < deadline and broker.client.active_id in (None, leader):
            await asyncio.sleep(0.01)
        assert broker.client.active_id not in (None, leader), "the new active controller"
        assert broker.lifecycle.stats.heartbeats_sent > sent

    run(with_brokers(healthy, ids, body, heartbeat_interval_ms=10 * WAIT_MS))


def test_a_hung_active_controller_does_not_stop_the_broker(healthy: ClusterHarness) -> None:
    ids = [141]

    async def body(brokers: dict[int, Broker]) -> None:
        broker = brokers[141]
        leader = await asyncio.to_thread(healthy.wait_for_leader)
        paused_at = time.monotonic()
        healthy.pause(healthy.controller_name(leader))
        try:
            ok_before = broker.lifecycle.stats.heartbeats_ok
            failures_before = broker.lifecycle.stats.heartbeat_failures
            new_leader = await asyncio.to_thread(healthy.wait_for_leader)
            await create_topic(broker, "while-hung", [[141]])
            await broker.wait_image(lambda i: i.topics.get("while-hung") is not None,
                                    "a topic created while the old leader hangs")
            deadline = time.monotonic() + WAIT_MS / 1000
            while broker.lifecycle.stats.heartbeats_ok < ok_before + 3:
                assert time.monotonic() < deadline, "heartbeats did not resume"
                await asyncio.sleep(0.05)
            failed = broker.lifecycle.stats.heartbeat_failures - failures_before
            print(f"hung controller {leader}: topic seen and 3 heartbeats answered after "
                  f"{time.monotonic() - paused_at:.2f} s, {failed} heartbeat(s) failed")
            assert broker.client.active_id == new_leader
            assert not broker.lifecycle.is_fenced and broker.lifecycle.stats.registrations == 1
        finally:
            healthy.resume(healthy.controller_name(leader))

    run(with_brokers(healthy, ids, body))


def test_a_silent_broker_is_fenced_and_loses_leadership(healthy: ClusterHarness) -> None:
    ids = [121, 122, 123]

    async def body(brokers: dict[int, Broker]) -> None:
        await create_topic(brokers[121], "fence-me", [[121, 122, 123]])
        for broker in brokers.values():
            await broker.wait_image(lambda i: i.topics.get("fence-me") is not None, "fence-me")
        await brokers[121].lifecycle.stop()  # no more heartbeats, no controlled shutdown
        stopped_at = time.monotonic()

        def moved(image: MetadataImage) -> bool:
            registration = image.cluster.broker(121)
            p = partition_of(image, "fence-me", 0)
            return bool(registration and registration.fenced and p and p.leader in (122, 123))

        image = await brokers[122].wait_image(moved, "broker 121 fenced, new leader")
        elapsed_s = time.monotonic() - stopped_at
        assert elapsed_s >= SESSION_TIMEOUT_MS / 1000 * 0.9, "fenced before the session ended"
        p = partition_of(image, "fence-me", 0)
        assert p is not None and 121 not in p.isr and p.leader_epoch == 1
        # The new leader was told to lead at epoch 1, the other survivor to follow it; the
        # silent broker's listener (still running) learned it is a follower now. Each listener
        # applies the change on its own stream: wait for each before reading its changes (the
        # silent broker's came after 122's in a CI run, and was read before it arrived).
        for b in (123, 121):
            await brokers[b].wait_image(moved, "broker 121 fenced, new leader")
        for b in ids:
            kind, change = brokers[b].recorder.changes("fence-me", 0)[-1]
            expected = "leaders" if b == p.leader else "followers"
            assert (kind, change.registration.leader, change.registration.leader_epoch) == (
                expected, p.leader, 1), b

    run(with_brokers(healthy, ids, body))


def test_a_dead_broker_is_fenced_before_its_session_expires(healthy: ClusterHarness) -> None:
    """Nothing listens at broker 141's endpoint (its process is gone, as after kill -9): when
    its heartbeats and metadata stream stop, the controller's probe is refused and it is fenced
    at once, not after the session timeout (broker_probe_after_ms, docs/decisions.md)."""
    ids = [141, 142]

    async def body(brokers: dict[int, Broker]) -> None:
        await create_topic(brokers[141], "dead", [[141, 142]])
        for broker in brokers.values():
            await broker.wait_image(lambda i: i.topics.get("dead") is not None, "dead")
        died_at = time.monotonic()
        await brokers[141].lifecycle.stop()
        brokers[141].stop_accepting()
        await brokers[141].listener.stop()  # its metadata stream ends, as a dead process's does

        await brokers[142].wait_image(fenced_and_moved(141, "dead", to=142),
                                      "broker 141 fenced, leadership moved")
        elapsed_s = time.monotonic() - died_at
        print(f"dead broker fenced after {elapsed_s:.2f} s (session {SESSION_TIMEOUT_MS} ms)")
        assert elapsed_s < SESSION_TIMEOUT_MS / 1000 * 0.9, "fenced only at session expiry"

    run(with_brokers(healthy, ids, body))


def test_a_broker_reported_unreachable_by_another_is_fenced_at_once(
        healthy: ClusterHarness) -> None:
    """Broker 151 stops heartbeating and nothing listens at its endpoint, but its metadata
    stream stays open (as when it streamed from a standby controller: the active one sees no
    stream end). Broker 152, whose fetches from it would fail, reports it in a heartbeat sent
    at once; the active controller probes it, is refused, and fences it, long before the
    silence probe (broker_probe_after_ms after its last heartbeat) could have."""
    ids = [151, 152]
    probe_after_s = 2.5  # the default broker_probe_after_ms: the silence probe's earliest

    async def body(brokers: dict[int, Broker]) -> None:
        await create_topic(brokers[151], "reported", [[151, 152]])
        for broker in brokers.values():
            await broker.wait_image(lambda i: i.topics.get("reported") is not None, "topic")
        await brokers[151].lifecycle.stop()  # silent from here; its stream stays open
        brokers[151].stop_accepting()
        died_at = time.monotonic()
        # The probe's evidence must be newer than 151's last heartbeat (a heartbeat in flight
        # at the stop arriving in the same millisecond as the report would make it stale).
        await asyncio.sleep(0.05)
        brokers[152].lifecycle.report_unreachable(151)

        await brokers[152].wait_image(fenced_and_moved(151, "reported", to=152),
                                      "broker 151 fenced, leadership moved")
        elapsed_s = time.monotonic() - died_at
        print(f"reported broker fenced after {elapsed_s:.2f} s")
        # Its last heartbeat was at most one interval before it stopped: the silence probe
        # could not start before probe_after_s - interval; the report's path takes ~0.1 s.
        assert elapsed_s < probe_after_s - HEARTBEAT_INTERVAL_MS / 1000 - 0.2, \
            "fenced by the silence probe, not on the report"
        assert brokers[152].lifecycle.stats.unreachable_reported == 1

    run(with_brokers(healthy, ids, body))


def test_controlled_shutdown_moves_leadership_first(healthy: ClusterHarness) -> None:
    ids = [131, 132, 133]

    async def body(brokers: dict[int, Broker]) -> None:
        await create_topic(brokers[131], "shutdown", [[131, 132, 133], [132, 131, 133]])
        for broker in brokers.values():
            await broker.wait_image(lambda i: i.topics.get("shutdown") is not None, "shutdown")
        started = time.monotonic()
        assert await brokers[131].lifecycle.controlled_shutdown(timeout_ms=WAIT_MS)
        print(f"controlled shutdown took {time.monotonic() - started:.2f} s")
        assert brokers[131].lifecycle.state is BrokerState.SHUTTING_DOWN
        # Told to stop only once its own image (what its replica manager acted on) shows
        # that it leads nothing.
        own = brokers[131].listener.image
        for partition_id in (0, 1):
            p = partition_of(own, "shutdown", partition_id)
            assert p is not None and p.leader != 131 and 131 not in p.isr
        kind, change = brokers[131].recorder.changes("shutdown", 0)[-1]
        assert kind == "followers" and change.registration.leader in (132, 133)
        image = await brokers[132].wait_image(
            lambda i: bool(i.cluster.broker(131) and i.cluster.broker(131).fenced),  # type: ignore[union-attr]
            "broker 131 fenced after its controlled shutdown")
        p0 = partition_of(image, "shutdown", 0)
        assert p0 is not None and p0.leader in (132, 133) and p0.leader_epoch == 1

    run(with_brokers(healthy, ids, body))


def test_a_stale_broker_epoch_makes_the_broker_register_again(healthy: ClusterHarness) -> None:
    ids = [161]

    async def body(brokers: dict[int, Broker]) -> None:
        lifecycle = brokers[161].lifecycle
        epoch = lifecycle.broker_epoch
        # As if this process had missed a registration change: the controller answers
        # STALE_BROKER_EPOCH, and the broker registers again with its incarnation id, which
        # the controller answers with the registration it has (the same epoch).
        lifecycle._broker_epoch = epoch + 1_000
        deadline = time.monotonic() + WAIT_MS / 1000
        while lifecycle.stats.registrations < 2 or lifecycle.broker_epoch != epoch:
            assert time.monotonic() < deadline, "the broker did not register again"
            await asyncio.sleep(0.05)
        ok = lifecycle.stats.heartbeats_ok
        while lifecycle.stats.heartbeats_ok < ok + 2:
            assert time.monotonic() < deadline, "heartbeats did not resume"
            await asyncio.sleep(0.05)
        assert not lifecycle.is_fenced and lifecycle.state is BrokerState.RUNNING

    run(with_brokers(healthy, ids, body))


def test_a_broker_far_behind_starts_from_a_snapshot(healthy: ClusterHarness) -> None:
    ids = [171]

    async def body(brokers: dict[int, Broker]) -> None:
        for index in range(SNAPSHOT_MIN_ENTRIES + 5):  # one committed batch each
            await create_topic(brokers[171], f"snap-{index}", [[171]])
        leader = await asyncio.to_thread(healthy.wait_for_leader)
        follower = next(n for n in healthy.controller_names
                        if n != healthy.controller_name(leader))
        # Restarted, it loads its snapshot and keeps only the entries after it in memory.
        await asyncio.to_thread(healthy.restart, follower)
        target = brokers[171].listener.offset
        client = ControllerClient([v for v in healthy.voters
                                   if healthy.controller_name(v.id) == follower],
                                  peer_metadata=_credential(healthy, 171))
        recorder = Recorder()
        listener = MetadataListener(broker_id=171, cluster_id=healthy.cluster_id, client=client,
                                    publishers=[recorder])
        await listener.start()
        try:
            assert await listener.wait_for_offset(target, WAIT_MS)
            assert listener.stats.snapshots >= 1, "expected a snapshot from the restarted one"
            first = recorder.updates[0]
            assert first.is_snapshot and first.previous_image.offset == -1
            # The snapshot covers a prefix of the log (where compaction happened to run); every
            # topic must be led once the listener has caught up, from the snapshot or after it.
            led = {p.topic_name for u in recorder.updates for p in u.local_changes.leaders}
            assert {p.topic_name for p in first.local_changes.leaders} >= {"snap-0"}
            assert {f"snap-{i}" for i in range(SNAPSHOT_MIN_ENTRIES)} <= led
            # Same log, same image: compare once both listeners stand at the same offset.
            deadline = time.monotonic() + WAIT_MS / 1000
            while brokers[171].listener.offset != listener.offset:
                assert time.monotonic() < deadline, "the two listeners did not meet"
                await asyncio.sleep(0.02)
            assert brokers[171].listener.image.digest() == listener.image.digest()
        finally:
            await listener.stop()
            await client.close()

    run(with_brokers(healthy, ids, body))


def test_a_broker_of_another_cluster_is_refused(healthy: ClusterHarness) -> None:
    async def scenario() -> None:
        fatal: list[Exception] = []
        broker = Broker(healthy, 151, cluster_id="not-this-cluster", on_fatal=fatal.append)
        try:
            with pytest.raises(InconsistentClusterIdError) as refused:
                await broker.lifecycle.start(registration_timeout_ms=WAIT_MS)
            assert "refuses to join" in refused.value.message
            assert "not-this-cluster" in refused.value.message
            await broker.listener.start()
            with pytest.raises(InconsistentClusterIdError):
                await broker.listener.wait_for_offset(0, WAIT_MS)
            assert len(fatal) == 1
        finally:
            await broker.close()

    run(scenario())
