"""The nemeses (chaos/nemesis/) on a real routed cluster: each fault happens, each heal heals.

One cluster for the module: 3 controller + 3 broker processes, created with routed_overrides()
and wired by ProxiedNetwork, so every inter-node link (broker>controller, broker>broker, and the
controllers' Raft links) crosses its own proxy of the Toxiproxy-compatible server. Checks:

* the wiring: every broker's and the Raft connections went through the router, none
  anywhere unrouted;
* Pause: a paused broker and a paused controller take no request (a gRPC call times out);
  healed, they answer;
* Kill of the active controller (picked when the fault starts): the process is gone and the
  others elect a leader; healed, it runs and is ready;
* GracefulRestart of a broker: it exits; healed, it serves;
* KillCluster: no node runs; healed, a leader and every node ready;
* Partition, the active controller isolated (links cut): a cut link refuses connections, and
  the other controllers elect a new leader (so the Raft links really were cut);
* Partition, a broker cut from the controllers (links stalled): a stalled link passes no byte
  (an HTTP/2 preface to the controller gets no answer) and the broker is fenced; healed, bytes
  pass and it is unfenced;
* LinkToxic: latency makes an answer over the node's links come later than the toxic's floor,
  bandwidth, reset_peer and slicer are set on every link of the node; heal removes them all.

After every heal the cluster commits an acks=all write (min.insync.replicas=2 of 3). Waits are
bounded polls; the harness kills every process at the end (by pid), and ``proxies.faults()``
heals every link after each test whatever happened.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cluster_harness import ClusterHarness
from replica_checks import Client, all_running, records, wait_for

from tidelog.chaos import proxies
from tidelog.chaos.nemesis import (
    BrokerFromControllers,
    GracefulRestart,
    IsolateActiveController,
    Kill,
    KillCluster,
    LinkToxic,
    Partition,
    Pause,
    ProxiedNetwork,
    routed_overrides,
)
from tidelog.chaos.nemesis.topology import active_controller
from tidelog.v1 import broker_pb2 as pb

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
TOPIC = "nemesis"
OVERRIDES = {
    "controller": {"broker_session_timeout_ms": 3_000, "fence_check_interval_ms": 100},
    "broker": {"heartbeat_interval_ms": 500, "replica_lag_time_max_ms": 2_000,
               "replica_fetch_wait_max_ms": 200},
}
#: A request a paused process must not answer within this.
PAUSED_RPC_TIMEOUT_S = 1.0
#: How long a stalled link is watched for a byte.
STALL_WATCH_S = 1.0
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
LATENCY_MS, JITTER_MS = 200, 50


@dataclass
class Cluster:
    harness: ClusterHarness
    net: ProxiedNetwork
    client: Client


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base: Path = tmp_path_factory.mktemp("nemeses") / "cluster"
    harness = ClusterHarness.create(base, controllers=3, brokers=3,
                                    overrides=routed_overrides(OVERRIDES))
    with proxies.toxiproxy(), harness, ProxiedNetwork.wired(harness.local) as net:
        harness.start_controllers()
        harness.wait_for_leader()
        harness.start_brokers()
        client = Client(harness, produce_timeout_ms=3_000, produce_slack_s=2)
        wait_for(lambda: client.unfenced(via=client.ids) == client.ids, "three unfenced brokers")
        client.create_topic(TOPIC, client.ids, min_insync_replicas="2")
        yield Cluster(harness, net, client)
        client.close()
        assert net.router.unrouted == [], "a node connected somewhere no link leads"


@pytest.fixture
def c(cluster: Cluster) -> Iterator[Cluster]:
    """Every node running and ready; every link healed after the test, however it ends."""
    local = cluster.harness.local
    for name in local.nodes:  # a failed test may have left one paused behind the harness
        if local.is_running(name):
            local.resume(name)
    all_running(cluster.harness)
    with proxies.faults():
        yield cluster


def commits(c: Cluster, what: str) -> None:
    """The healed cluster commits an acks=all write."""
    offset = c.client.produce_until_acked(TOPIC, records(what.encode()), timeout_s=30)
    assert offset >= 0


def broker_id(c: Cluster, name: str) -> int:
    return c.harness.node(name).node_id


def broker_answers(c: Cluster, name: str, timeout_s: float) -> bool:
    try:
        c.client.stub(broker_id(c, name)).Metadata(pb.MetadataRequest(topics=[]),
                                                   timeout=timeout_s)
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error
        return False
    return True


def gone(pid: int) -> bool:
    """No such process, or only its exit status left (a zombie not reaped yet)."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, FileNotFoundError):
        return True
    return state == "Z"


def answer_within(address: tuple[str, int], timeout_s: float) -> bytes | None:
    """Bytes answered to an HTTP/2 preface sent to ``address`` within ``timeout_s``; None
    when the connection is refused or reset."""
    try:
        with socket.create_connection(address, timeout=timeout_s) as sock:
            sock.sendall(H2_PREFACE)
            sock.settimeout(timeout_s)
            try:
                return sock.recv(1024)
            except TimeoutError:
                return b""
    except (ConnectionRefusedError, ConnectionResetError):
        return None


def test_every_link_is_routed(cluster: Cluster) -> None:
    tunnels = cluster.net.router.tunnels
    assert set(cluster.harness.broker_names) <= set(tunnels), tunnels
    # Of each pair of controllers the one with the greater address dials (pysyncobj's rule):
    # three Raft connections at least, none from the lowest address.
    assert sum(tunnels[n] for n in cluster.harness.controller_names) >= 3, tunnels
    assert len(cluster.net.links) == 6 * 5 - 3 * 3  # controllers never dial brokers


def test_paused_processes_take_no_requests_until_healed(c: Cluster) -> None:
    follower = next(n for n in c.harness.controller_names
                    if n != active_controller(c.harness.local))
    broker = Pause(c.harness.local, "broker-2", duration_s=0)
    controller = Pause(c.harness.local, follower, duration_s=0)
    broker.start()
    controller.start()
    assert broker.targets == ("broker-2",) and controller.targets == (follower,)
    assert not broker_answers(c, "broker-2", PAUSED_RPC_TIMEOUT_S)
    assert c.harness.describe_quorum(follower, timeout_s=PAUSED_RPC_TIMEOUT_S) is None
    broker.heal()
    controller.heal()
    assert broker_answers(c, "broker-2", 5)
    assert c.harness.describe_quorum(follower, timeout_s=5) is not None
    commits(c, "after-pause")


def test_kill_the_active_controller_and_restart_it(c: Cluster) -> None:
    local = c.harness.local
    pids = {n: c.harness.node(n).pid for n in c.harness.controller_names}
    fault = Kill(local, lambda: active_controller(local), label="active-controller")
    fault.start()
    (victim,) = fault.targets
    assert fault.name == "kill-active-controller"
    assert not local.is_running(victim) and gone(pids[victim])
    others = [n for n in c.harness.controller_names if n != victim]
    assert c.harness.controller_name(c.harness.wait_for_leader(among=others)) != victim
    fault.heal()
    assert local.is_running(victim) and local.readiness(victim) is None
    assert fault.window is not None and fault.window.healed_ns is not None
    commits(c, "after-kill")


def test_graceful_restart_of_a_broker(c: Cluster) -> None:
    fault = GracefulRestart(c.harness.local, "broker-3")
    fault.start()
    assert not c.harness.local.is_running("broker-3")
    fault.heal()
    assert broker_answers(c, "broker-3", 5)
    commits(c, "after-restart")


def test_kill_the_whole_cluster_and_restart_it(c: Cluster) -> None:
    local = c.harness.local
    fault = KillCluster(local)
    fault.start()
    assert sorted(fault.targets) == sorted(local.nodes)
    assert not any(local.is_running(n) for n in local.nodes)
    fault.heal()
    assert all(local.readiness(n) is None for n in local.nodes)
    c.harness.wait_for_leader()
    commits(c, "after-cluster-kill")


def test_isolated_active_controller_is_replaced(c: Cluster) -> None:
    old = active_controller(c.harness.local)
    fault = Partition(c.net, IsolateActiveController(), mode="cut")
    fault.start()
    assert fault.targets and all(old in t.split(">") for t in fault.targets)
    raft_link = c.net.links[(old, next(n for n in c.harness.controller_names if n != old))]
    assert answer_within(proxies.address(raft_link), 1.0) is None, "a cut link refuses"
    others = [n for n in c.harness.controller_names if n != old]
    new = c.harness.wait_for_leader(among=others)
    assert c.harness.controller_name(new) != old, "the others elected a leader without it"
    fault.heal()
    assert active_controller(c.harness.local) in c.harness.controller_names
    c.harness.wait_for_leader()
    commits(c, "after-isolation")


def test_broker_cut_from_the_controllers_is_fenced(c: Cluster) -> None:
    fault = Partition(c.net, BrokerFromControllers("broker-1"), mode="stall")
    fault.start()
    assert sorted(fault.targets) == [f"broker-1>{n}" for n in c.harness.controller_names]
    link = c.net.links[("broker-1", c.harness.controller_names[0])]
    assert answer_within(proxies.address(link), STALL_WATCH_S) == b"", "no byte passes"
    b1, others = broker_id(c, "broker-1"), [broker_id(c, n) for n in ("broker-2", "broker-3")]
    wait_for(lambda: b1 not in (c.client.unfenced(via=others) or [b1]), "broker-1 fenced",
             timeout_s=20)
    fault.heal()
    assert answer_within(proxies.address(link), 5.0), "bytes pass again"
    wait_for(lambda: b1 in (c.client.unfenced(via=others) or []), "broker-1 unfenced",
             timeout_s=20)
    commits(c, "after-broker-cut")


def test_slow_and_flaky_links_are_set_and_removed(c: Cluster) -> None:
    link = c.net.links[("broker-2", c.harness.controller_names[0])]
    started = time.monotonic()
    assert answer_within(proxies.address(link), 5.0)
    clean_s = time.monotonic() - started
    slow = LinkToxic.latency(c.net, "broker-2", LATENCY_MS, JITTER_MS, duration_s=0)
    slow.start()
    assert set(slow.targets) == {f"{a}>{b}" for a, b in c.net.links_of("broker-2")}
    started = time.monotonic()
    assert answer_within(proxies.address(link), 5.0)
    # The server's SETTINGS frame comes back whatever it is sent: latency - jitter at least.
    assert time.monotonic() - started >= (LATENCY_MS - JITTER_MS) / 1000, clean_s
    slow.heal()
    assert not any(c.net.links[lk].toxics() for lk in c.net.links_of("broker-2"))
    for fault, kind in ((LinkToxic.bandwidth(c.net, "broker-3", 100), "bandwidth"),
                        (LinkToxic.reset_peer(c.net, "broker-3", 500, toxicity=0.5),
                         "reset_peer"),
                        (LinkToxic.slicer(c.net, "broker-3"), "slicer")):
        fault.start()
        for lk in c.net.links_of("broker-3"):
            types = {t.type for t in c.net.links[lk].toxics().values()}
            assert types == {kind}, (lk, types)
        fault.heal()
        assert not any(c.net.links[lk].toxics() for lk in c.net.links_of("broker-3"))
    commits(c, "after-toxics")

