"""The controller quorum as real processes: three `tidelog server` controllers on 127.0.0.1.

Each test lays out a cluster with tidelog.local_cluster, talks gRPC to it as brokers and admin
tools do, and checks the quorum's promises: every controller replays the same metadata (same image
digest at the same offset, read back through FetchMetadata); kill -9 of the active controller
elects another and writes resume; a killed controller restarts from its journal and catches up;
a full kill -9 restart keeps everything committed; a minority commits nothing; a broker that stops
heartbeating is fenced and loses leadership to the ISR; bad input gets its error code while the
quorum keeps serving. Brokers are simulated by this test registering and heartbeating over gRPC.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tidelog.cluster_secret import CONTROLLERS, broker_credential, read_secret_file
from tidelog.local_cluster import LocalCluster
from tidelog.metadata.delta import MetadataDelta
from tidelog.metadata.image import MetadataImage
from tidelog.metadata.records import image_from_snapshot
from tidelog.peer_auth import peer_metadata
from tidelog.v1 import common_pb2, controller_pb2, controller_pb2_grpc
from tidelog.v1.common_pb2 import ErrorCode

pytestmark = pytest.mark.integration

FAST = {"controller": {"broker_session_timeout_ms": 2000, "fence_check_interval_ms": 100}}
DEADLINE_S = 20.0


class Admin:
    """A synchronous controller client that follows NOT_CONTROLLER hints (test-side)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        secret = read_secret_file(cluster.secret_path)
        self.stubs = {
            c.name: _AsBroker(controller_pb2_grpc.ControllerServiceStub(
                grpc.insecure_channel(f"127.0.0.1:{c.controller_port}")), secret)
            for c in cluster.controllers()
        }

    def stub(self, name: str) -> Any:
        return self.stubs[name]


    def leader(self, *, among: list[str] | None = None, deadline_s: float = DEADLINE_S) -> str:
        """Name of the controller the (running) quorum members agree leads."""
        deadline = time.monotonic() + deadline_s
        names = among or [n for n in self.stubs if self.cluster.is_running(n)]
        while time.monotonic() < deadline:
            for name in names:
                try:
                    q = self.stubs[name].DescribeQuorum(controller_pb2.DescribeQuorumRequest(),
                                                        timeout=1)
                except grpc.RpcError:
                    continue
                if q.leader_id >= 0 and f"controller-{q.leader_id}" in names:
                    return f"controller-{q.leader_id}"
            time.sleep(0.05)
        raise AssertionError(f"no leader among {names} within {deadline_s}s")

    def call(self, method: str, request: Any, *, deadline_s: float = DEADLINE_S) -> Any:
        """Call the active controller, retrying NOT_CONTROLLER and unreachable ones."""
        deadline = time.monotonic() + deadline_s
        while True:
            for name in self.stubs:
                if not self.cluster.is_running(name):
                    continue
                try:
                    r = getattr(self.stubs[name], method)(request, timeout=2)
                except grpc.RpcError:
                    continue
                if r.error_code != ErrorCode.NOT_CONTROLLER:
                    return r
            if time.monotonic() > deadline:
                raise AssertionError(f"{method}: no active controller within {deadline_s}s")
            time.sleep(0.05)


class _AsBroker:
    """A ControllerService stub whose calls carry the credential of the broker the request
    names (broker 0 when it names none): controllers refuse broker RPCs without one."""

    def __init__(self, stub: Any, secret: str) -> None:
        self._stub = stub
        self._secret = secret

    def __getattr__(self, method: str) -> Any:
        def call(request: Any, **kwargs: Any) -> Any:
            broker_id = max(getattr(request, "broker_id", 0), 0)
            return getattr(self._stub, method)(
                request, metadata=peer_metadata(
                    broker_id, broker_credential(self._secret, broker_id), audience=CONTROLLERS),
                **kwargs)
        return call


def create_topic(name: str, partitions: int = 3, rf: int = 3,
                 configs: dict[str, str] | None = None) -> controller_pb2.CreateTopicsRequest:
    return controller_pb2.CreateTopicsRequest(topics=[controller_pb2.CreateTopicsRequest.Topic(
        name=name, num_partitions=partitions, replication_factor=rf,
        configs=[controller_pb2.ConfigEntry(name=k, value=v) for k, v in (configs or {}).items()],
    )])


def read_image(stub: Any, cluster_id: str,
               *, until_offset: int) -> MetadataImage:
    """Replay a controller's FetchMetadata stream from 0 up to ``until_offset``."""
    image = MetadataImage.empty()
    stream = stub.FetchMetadata(controller_pb2.FetchMetadataRequest(
        cluster_id=cluster_id, broker_id=-1, from_offset=0), timeout=DEADLINE_S)
    try:
        for msg in stream:
            assert msg.error_code == ErrorCode.NONE, msg.error_message
            if msg.HasField("snapshot"):
                image = image_from_snapshot(msg.snapshot, cluster_id=cluster_id)
            if msg.records:
                assert msg.base_offset == image.offset + 1
                delta = MetadataDelta(image)
                start = 0
                for count in msg.batch_record_counts:  # each committed batch all or nothing
                    delta.replay_batch(list(msg.records[start:start + count]),
                                       msg.base_offset + start)
                    start += count
                assert start == len(msg.records)
                image = delta.apply()
            if image.offset >= until_offset:
                return image
    finally:
        stream.cancel()
    raise AssertionError(f"stream ended at offset {image.offset} before {until_offset}")


class Brokers:
    """Three simulated brokers: registered, and heartbeating from a thread until told to stop.
    Each listens at its registered endpoint, as a live broker does: a controller's probe (a new
    active controller probes every broker) is accepted, so it is no evidence of death."""

    def __init__(self, admin: Admin, cluster_id: str, ids: tuple[int, ...] = (101, 102, 103)):
        self.admin = admin
        self.epochs: dict[int, int] = {}
        self._listeners: list[socket.socket] = []
        for broker_id in ids:
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            self._listeners.append(listener)
            port = listener.getsockname()[1]
            r = admin.call("RegisterBroker", controller_pb2.RegisterBrokerRequest(
                cluster_id=cluster_id, broker_id=broker_id, incarnation_id=uuid.uuid4().bytes,
                endpoint=common_pb2.Endpoint(host="127.0.0.1", port=port)))
            assert r.error_code == ErrorCode.NONE, r.error_message
            self.epochs[broker_id] = r.broker_epoch
        self.silent: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(0.3):
            for broker_id, epoch in self.epochs.items():
                if broker_id in self.silent:
                    continue
                with contextlib.suppress(AssertionError):  # an election: the next round retries
                    self.admin.call("BrokerHeartbeat", controller_pb2.BrokerHeartbeatRequest(
                        broker_id=broker_id, broker_epoch=epoch,
                        current_metadata_offset=2**62), deadline_s=1)

    def wait_unfenced(self) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            fenced = [b for b, e in self.epochs.items() if self.admin.call(
                "BrokerHeartbeat", controller_pb2.BrokerHeartbeatRequest(
                    broker_id=b, broker_epoch=e, current_metadata_offset=2**62)).is_fenced]
            if not fenced:
                return
            time.sleep(0.1)
        raise AssertionError("brokers stayed fenced")

    def stop_heartbeats(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def close(self) -> None:
        self.stop_heartbeats()
        for listener in self._listeners:
            listener.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster.create(tmp_path / "cluster", controllers=3, brokers=0, overrides=FAST)
    with c.running():
        yield c


@pytest.fixture
def admin(cluster: LocalCluster) -> Admin:
    return Admin(cluster)


@pytest.fixture
def brokers(cluster: LocalCluster, admin: Admin) -> Iterator[Brokers]:
    b = Brokers(admin, cluster.cluster_id)
    b.wait_unfenced()
    yield b
    b.close()


def committed_offset(admin: Admin, name: str) -> int:
    q = admin.stub(name).DescribeQuorum(controller_pb2.DescribeQuorumRequest(), timeout=2)
    return int(q.metadata_offset)


def wait_offset(admin: Admin, name: str, offset: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            if committed_offset(admin, name) >= offset:
                return
        except grpc.RpcError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{name} did not reach metadata offset {offset}")


def assert_identical_images(admin: Admin, cluster: LocalCluster) -> MetadataImage:
    leader = admin.leader()
    offset = committed_offset(admin, leader)
    images = {}
    for c in cluster.controllers():
        wait_offset(admin, c.name, offset)
        images[c.name] = read_image(admin.stub(c.name), cluster.cluster_id, until_offset=offset)
    digests = {name: img.digest() for name, img in images.items()}
    assert len(set(digests.values())) == 1, digests
    return images[leader]


def test_topics_created_through_one_are_seen_by_all(cluster: LocalCluster, admin: Admin,
                                                    brokers: Brokers) -> None:
    for i in range(5):
        r = admin.call("CreateTopics", create_topic(f"orders-{i}", configs={
            "min.insync.replicas": "2", "retention.ms": "60000"}))
        assert r.topics[0].error_code == ErrorCode.NONE, r.topics[0].error_message
    image = assert_identical_images(admin, cluster)
    assert {f"orders-{i}" for i in range(5)} <= set(image.topics.by_name)
    topic = image.topics.by_name["orders-3"]
    assert topic.num_partitions == 3
    for partition in topic.partitions.values():
        assert sorted(partition.replicas) == [101, 102, 103]
        assert partition.leader in partition.isr
    # The same config is visible through DescribeConfigs on a non-active controller.
    follower = next(c.name for c in cluster.controllers() if c.name != admin.leader())
    described = admin.stub(follower).DescribeConfigs(controller_pb2.DescribeConfigsRequest(
        resources=[controller_pb2.DescribeConfigsRequest.Resource(
            resource_type=2, resource_name="orders-3", names=["min.insync.replicas"])]))
    assert described.resources[0].configs[0].value == "2"


def test_kill_leader_elects_another_and_writes_resume(cluster: LocalCluster, admin: Admin,
                                                     brokers: Brokers) -> None:
    assert admin.call("CreateTopics", create_topic("before")).topics[0].error_code == 0
    old = admin.leader()
    cluster.kill(old)
    killed = time.monotonic()
    survivors = [c.name for c in cluster.controllers() if c.name != old]
    new = admin.leader(among=survivors)
    elected_s = time.monotonic() - killed
    r = admin.call("CreateTopics", create_topic("after"))
    written_s = time.monotonic() - killed
    assert r.topics[0].error_code == ErrorCode.NONE, r.topics[0].error_message
    assert new != old
    print(f"kill -9 of {old}: {new} leads after {elected_s:.2f}s, first write after "
          f"{written_s:.2f}s")
    # The killed controller restarts from its journal and catches up with both topics.
    cluster.start(old)
    cluster.wait_ready([old])
    image = assert_identical_images(admin, cluster)
    assert {"before", "after"} <= set(image.topics.by_name)


def test_full_cluster_kill_and_restart_keeps_committed_state(cluster: LocalCluster,
                                                              admin: Admin,
                                                              brokers: Brokers) -> None:
    for i in range(3):
        assert admin.call("CreateTopics", create_topic(f"keep-{i}")).topics[0].error_code == 0
    before = assert_identical_images(admin, cluster)
    # Silent from here, but still listening: the new active controller's probes find them
    # alive, and their sessions (restarted with the new leadership) outlast the comparison.
    brokers.stop_heartbeats()
    for c in cluster.controllers():
        cluster.kill(c.name)
    cluster.start_all()
    cluster.wait_ready()
    after = assert_identical_images(admin, cluster)
    # The restart adds NoOp records of the new leadership; everything before is unchanged.
    assert after.offset > before.offset
    assert set(after.topics.by_name) == set(before.topics.by_name)
    for name, topic in before.topics.by_name.items():
        assert after.topics.by_name[name].topic_id == topic.topic_id
        assert after.topics.by_name[name].partitions == topic.partitions


def test_a_minority_commits_nothing(cluster: LocalCluster, admin: Admin,
                                    brokers: Brokers) -> None:
    leader = admin.leader()
    offset_before = committed_offset(admin, leader)
    others = [c.name for c in cluster.controllers() if c.name != leader]
    for name in others:
        cluster.kill(name)
    # The lone controller cannot commit: every attempt is refused or times out, and its
    # committed metadata offset does not move.
    outcomes = []
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:
        try:
            r = admin.stub(leader).CreateTopics(create_topic("minority", rf=1), timeout=8)
            outcomes.append(r.error_code or r.topics[0].error_code)
        except grpc.RpcError as e:
            outcomes.append(e.code())
        time.sleep(0.2)
    assert ErrorCode.NONE not in outcomes, outcomes
    assert set(outcomes) <= {ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT}, outcomes
    assert committed_offset(admin, leader) == offset_before
    # Once a majority is back the quorum serves again. A write answered REQUEST_TIMED_OUT may
    # still commit then (it was in the old leader's log): that is what the code promises;
    # NOT_CONTROLLER promises it was never appended.
    for name in others:
        cluster.start(name)
    cluster.wait_ready()
    # The new active controller may have fenced the (simulated) brokers while there was no
    # quorum; an RF=3 topic needs them unfenced again (their next heartbeats), not only a leader.
    brokers.wait_unfenced()
    assert admin.call("CreateTopics", create_topic("majority")).topics[0].error_code == 0
    image = assert_identical_images(admin, cluster)
    assert "majority" in image.topics.by_name
    if ErrorCode.REQUEST_TIMED_OUT not in outcomes:
        assert "minority" not in image.topics.by_name


def test_silent_broker_is_fenced_and_loses_leadership(cluster: LocalCluster, admin: Admin,
                                                      brokers: Brokers) -> None:
    r = admin.call("CreateTopics", create_topic("fenced", partitions=6))
    assert r.topics[0].error_code == 0
    brokers.silent.add(102)
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        image = read_image(admin.stub(admin.leader()), cluster.cluster_id,
                           until_offset=committed_offset(admin, admin.leader()))
        if image.cluster.brokers[102].fenced:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("broker 102 was not fenced")
    for partition in image.topics.by_name["fenced"].partitions.values():
        assert partition.leader != 102 and partition.leader in (101, 103)
        assert 102 not in partition.isr
    # Its heartbeat now says it is fenced; it is unfenced again once it heartbeats.
    brokers.silent.discard(102)
    brokers.wait_unfenced()


def test_bad_input_gets_error_codes_and_the_quorum_keeps_working(
        cluster: LocalCluster, admin: Admin, brokers: Brokers) -> None:
    cases = [
        (create_topic("bad name!"), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (create_topic("zero", partitions=0), ErrorCode.INVALID_PARTITIONS),
        (create_topic("too-wide", rf=4), ErrorCode.INVALID_REPLICATION_FACTOR),
        (create_topic("conf", configs={"retention.ms": "soon"}), ErrorCode.INVALID_CONFIG),
        (create_topic("conf2", configs={"no.such.config": "1"}), ErrorCode.INVALID_CONFIG),
    ]
    for request, code in cases:
        r = admin.call("CreateTopics", request)
        assert r.topics[0].error_code == code, (request, r)
        assert r.topics[0].error_message
    assert admin.call("CreateTopics", create_topic("dup")).topics[0].error_code == 0
    dup = admin.call("CreateTopics", create_topic("dup")).topics[0]
    assert dup.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    gone = admin.call("DeleteTopics", controller_pb2.DeleteTopicsRequest(names=["never"]))
    assert gone.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    stale = admin.call("BrokerHeartbeat", controller_pb2.BrokerHeartbeatRequest(
        broker_id=101, broker_epoch=brokers.epochs[101] - 1))
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
    wrong_cluster = admin.call("RegisterBroker", controller_pb2.RegisterBrokerRequest(
        cluster_id="another-cluster", broker_id=104, incarnation_id=uuid.uuid4().bytes))
    assert wrong_cluster.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    # Bytes that are not a request message: a transport error, and the server lives on.
    channel = grpc.insecure_channel(f"127.0.0.1:{cluster.controllers()[0].controller_port}")
    raw = channel.unary_unary("/tidelog.v1.ControllerService/CreateTopics")
    with pytest.raises(grpc.RpcError):
        raw(b"\xff\xff\xff\xff garbage", timeout=2)
    assert admin.call("CreateTopics", create_topic("still-works")).topics[0].error_code == 0
    # Metrics say who is active and count the brokers (gauges refresh every 100 ms here).
    deadline = time.monotonic() + DEADLINE_S
    while True:
        leader = cluster.nodes[admin.leader()]
        url = f"http://127.0.0.1:{leader.metrics_port}/metrics"
        with urllib.request.urlopen(url) as resp:
            lines = [x for x in resp.read().decode().splitlines()
                     if x.startswith("tidelog_controller_")]
        wanted = {"tidelog_controller_active 1.0", "tidelog_controller_registered_brokers 3.0"}
        if wanted <= set(lines):
            break
        assert time.monotonic() < deadline, lines
        time.sleep(0.2)
