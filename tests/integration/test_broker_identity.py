"""A broker is exactly one broker (issue 25, point 3), and refused peers cost no memory (point 4).

On a real TLS + ACL cluster (one controller, two brokers, certificates and credentials as
``tidelog cluster up --tls`` makes them, client certificates required, ACLs on with
``User:admin`` a super user), every check speaks raw gRPC to the controller listener
(BrokerHeartbeat) and to a broker's inter-broker listener (a replica Fetch), as an attacker
holding some of a broker's material would:

* a call repeating ``tidelog-peer-id`` (``[id=102, id=101]`` with broker 101's credential, the
  reproduced attack) is refused, as is any repeated peer-auth key;
* what broker 101's config gives it (its own credential, never the cluster secret) cannot act
  as broker 102;
* a valid certificate for broker-101 with broker 102's valid credential is refused, naming both;
  so is a user's client certificate of the same CA with a valid credential, even one named
  ``broker-101`` (it lists no addresses); the same certificate claiming its own id is answered;
* a 100 MiB CreateTopics without credentials to the controller, a 100 MiB replica Fetch without
  credentials to a broker, and the same requests with valid credentials (over the listener's
  message limit) are refused while the server's peak RSS (VmHWM) grows by less than 32 MiB;
* refused at start, with one line saying what to do: a broker-only node configured with the
  cluster secret, and a plaintext controller or inter-broker listener on a non-loopback address
  (0.0.0.0 inside a network namespace this test creates; needs root, skipped otherwise).

Every process is started by the harness (stopped by pid at the end) or by the test itself
(killed by pid); every wait is bounded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_harness import ClusterHarness

from tidelog import limits
from tidelog.certs import Issued, issue
from tidelog.cluster_secret import (
    BROKERS,
    CONTROLLERS,
    PEER_AUTH_METADATA,
    PEER_ID_METADATA,
    broker_credential,
    read_secret_file,
    write_broker_credential_file,
)
from tidelog.config import load_config
from tidelog.local_cluster import HOST, free_ports
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import broker_pb2_grpc, controller_pb2, controller_pb2_grpc

pytestmark = pytest.mark.integration

OVERRIDES: dict[str, dict[str, Any]] = {
    "tls": {"client_auth": "required"},
    "authorization": {"enabled": True, "super_users": ["User:admin"]},
}
RPC_TIMEOUT_S = 10.0
HUGE_BYTES = 100 * 1024 * 1024
#: What a refused request may add to the server's peak RSS (the issue's bound).
RSS_GROWTH_MAX_KB = 32 * 1024
START_TIMEOUT_S = 30.0
CHANNEL_OPTIONS = [("grpc.max_send_message_length", 2 * HUGE_BYTES),
                   ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                   ("grpc.enable_http_proxy", 0)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("identity") / "cluster"
    cluster = ClusterHarness.create(base, controllers=1, brokers=2, overrides=OVERRIDES,
                                    tls=True)
    try:
        cluster.start_controllers()
        cluster.start_brokers()
        yield cluster
    finally:
        cluster.close()


# ------------------------------------------------------------------------------- helpers
def pki(cluster: ClusterHarness) -> Path:
    return cluster.base_dir / "pki"


def channel(cluster: ClusterHarness, port: int, certificate: str) -> grpc.Channel:
    """Mutual TLS to ``port`` presenting ``pki/<certificate>.crt``."""
    d = pki(cluster)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(d / "ca.crt").read_bytes(),
        private_key=(d / f"{certificate}.key").read_bytes(),
        certificate_chain=(d / f"{certificate}.crt").read_bytes())
    return grpc.secure_channel(f"{HOST}:{port}", credentials, options=CHANNEL_OPTIONS)


def key(cluster: ClusterHarness, broker_id: int, audience: str) -> str:
    """Broker ``broker_id``'s valid key for ``audience``, made from the cluster secret (which
    the test, as the operator, holds)."""
    root = read_secret_file(cluster.local.secret_path)
    return broker_credential(root, broker_id).presented_to(audience)


def claim(broker_id: int, credential: str) -> tuple[tuple[str, str], ...]:
    return ((PEER_ID_METADATA, str(broker_id)), (PEER_AUTH_METADATA, credential))


def heartbeat(cluster: ClusterHarness, certificate: str, metadata: Any,
              broker_id: int) -> grpc.StatusCode | tuple[grpc.StatusCode, str]:
    """A BrokerHeartbeat as ``broker_id`` (a broker epoch no registration has, so an answered
    one changes nothing): OK when answered, else the refusal's code and message."""
    port = cluster.node(cluster.controller_names[0]).controller_port
    request = controller_pb2.BrokerHeartbeatRequest(broker_id=broker_id, broker_epoch=2**62)
    with channel(cluster, port, certificate) as ch:
        try:
            controller_pb2_grpc.ControllerServiceStub(ch).BrokerHeartbeat(
                request, timeout=RPC_TIMEOUT_S, metadata=metadata)
        except grpc.RpcError as error:
            return error.code(), error.details() or ""
    return grpc.StatusCode.OK


def fetch(cluster: ClusterHarness, certificate: str, metadata: Any, replica_id: int,
          *, at: str = "broker-2", topic: str = "x") -> grpc.StatusCode | tuple[Any, str]:
    """A replica Fetch from broker ``at`` as ``replica_id`` (a broker epoch no registration
    has: an answered one is STALE_BROKER_EPOCH and serves nothing)."""
    port = cluster.node(at).inter_broker_port
    request = pb.FetchRequest(replica_id=replica_id, replica_broker_epoch=2**62, max_wait_ms=0,
                              max_bytes=1 << 20)
    request.topics.add(name=topic).partitions.add(partition_id=0, fetch_offset=0,
                                                  partition_max_bytes=1 << 20)
    with channel(cluster, port, certificate) as ch:
        try:
            broker_pb2_grpc.ReplicaServiceStub(ch).Fetch(request, timeout=RPC_TIMEOUT_S,
                                                         metadata=metadata)
        except grpc.RpcError as error:
            return error.code(), error.details() or ""
    return grpc.StatusCode.OK


def refused(outcome: Any, *words: str) -> bool:
    """Whether ``outcome`` is an UNAUTHENTICATED refusal whose message has every word."""
    if outcome == grpc.StatusCode.OK:
        return False
    code, message = outcome
    return bool(code == grpc.StatusCode.UNAUTHENTICATED and all(w in message for w in words))


def peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for pid {pid}")


# ------------------------------------------------------------------ one identity per call
def test_a_repeated_peer_id_is_refused_on_both_listeners(cluster: ClusterHarness) -> None:
    """Issue 25's reproduction: broker 101's credential with [id=102, id=101] was handled as
    broker 102 (the check read the last id, the handlers the first)."""
    to_controller = ((PEER_ID_METADATA, "102"), (PEER_ID_METADATA, "101"),
                     (PEER_AUTH_METADATA, key(cluster, 101, CONTROLLERS)))
    outcome = heartbeat(cluster, "broker-1", to_controller, broker_id=102)
    assert refused(outcome, "repeats tidelog-peer-id"), outcome
    to_broker = ((PEER_ID_METADATA, "102"), (PEER_ID_METADATA, "101"),
                 (PEER_AUTH_METADATA, key(cluster, 101, BROKERS)))
    outcome = fetch(cluster, "broker-1", to_broker, replica_id=102)
    assert refused(outcome, "repeats tidelog-peer-id"), outcome
    twice = ((PEER_ID_METADATA, "101"), (PEER_AUTH_METADATA, key(cluster, 101, BROKERS)),
             (PEER_AUTH_METADATA, key(cluster, 101, BROKERS)))
    assert refused(fetch(cluster, "broker-1", twice, replica_id=101), "repeats")
    # The same broker, once: answered (the handler wants its exact epoch; nothing is served).
    assert heartbeat(cluster, "broker-1", claim(101, key(cluster, 101, CONTROLLERS)),
                     broker_id=101) == grpc.StatusCode.OK
    assert fetch(cluster, "broker-1", claim(101, key(cluster, 101, BROKERS)),
                 replica_id=101) == grpc.StatusCode.OK


def test_what_a_broker_holds_cannot_act_as_another_broker(cluster: ClusterHarness) -> None:
    """Everything broker 101's config gives it, used to claim broker 102 (with broker 102's
    certificate, so that the credential decides): its own credential, and whatever a cluster
    secret among its files would make (before issue 25 every broker held the secret)."""
    held = load_config(cluster.local.config_path("broker-1"))
    own = held.broker_credential()
    assert own is not None and own.broker_id == 101
    made = [own]
    root = held.cluster_secret()
    if root is not None:
        made.append(broker_credential(root, 102))
    for credential in made:
        for audience, call in ((CONTROLLERS, heartbeat), (BROKERS, fetch)):
            outcome = call(cluster, "broker-2", claim(102, credential.presented_to(audience)),
                           102)
            assert refused(outcome, "credential is not broker 102's"), (audience, outcome)
    assert root is None, "a broker-only node holds no cluster secret"
    # What it presents to brokers (a leader sees it on every fetch) does not open the
    # controllers, even as itself.
    outcome = heartbeat(cluster, "broker-1", claim(101, own.presented_to(BROKERS)), 101)
    assert refused(outcome, "credential is not broker 101's"), outcome


# ------------------------------------------------------------------ tied to the certificate
def test_a_certificate_for_another_broker_is_refused_on_both_listeners(
        cluster: ClusterHarness) -> None:
    """broker-101's valid certificate with broker 102's valid credential, claiming 102."""
    outcome = heartbeat(cluster, "broker-1", claim(102, key(cluster, 102, CONTROLLERS)), 102)
    assert refused(outcome, "'broker-101', not 'broker-102'"), outcome
    outcome = fetch(cluster, "broker-1", claim(102, key(cluster, 102, BROKERS)), 102)
    assert refused(outcome, "'broker-101', not 'broker-102'"), outcome
    assert fetch(cluster, "broker-2", claim(102, key(cluster, 102, BROKERS)), 102,
                 at="broker-1") == grpc.StatusCode.OK


def test_a_users_certificate_cannot_call_the_peer_listeners(cluster: ClusterHarness) -> None:
    """admin (a super user of the client listener) holds a client certificate of the CA; with
    a valid broker credential it still is no broker. Nor is a user certificate named like one."""
    outcome = heartbeat(cluster, "admin", claim(101, key(cluster, 101, CONTROLLERS)), 101)
    assert refused(outcome, "'admin', not 'broker-101'"), outcome
    outcome = fetch(cluster, "admin", claim(101, key(cluster, 101, BROKERS)), 101)
    assert refused(outcome, "'admin', not 'broker-101'"), outcome
    d = pki(cluster)
    ca = Issued((d / "ca.key").read_bytes(), (d / "ca.crt").read_bytes())
    lookalike = issue(ca, "broker-101")  # `tidelog security init --client broker-101`
    (d / "lookalike.crt").write_bytes(lookalike.cert_pem)
    (d / "lookalike.key").write_bytes(lookalike.key_pem)
    outcome = fetch(cluster, "lookalike", claim(101, key(cluster, 101, BROKERS)), 101)
    assert refused(outcome, "lists no addresses"), outcome
    outcome = heartbeat(cluster, "lookalike", claim(101, key(cluster, 101, CONTROLLERS)), 101)
    assert refused(outcome, "lists no addresses"), outcome


# ------------------------------------------------------------------ refusals cost nothing
def huge_create_topics() -> controller_pb2.CreateTopicsRequest:
    request = controller_pb2.CreateTopicsRequest()
    request.topics.add(name="big", num_partitions=1, replication_factor=1).configs.add(
        name="cleanup.policy", value="x" * HUGE_BYTES)
    return request


def huge_fetch() -> pb.FetchRequest:
    request = pb.FetchRequest(replica_id=101, replica_broker_epoch=1, max_bytes=1 << 20)
    request.topics.add(name="x" * HUGE_BYTES).partitions.add(partition_id=0)
    return request


def test_refused_100_mib_requests_cost_the_server_no_memory(cluster: ClusterHarness) -> None:
    controller = cluster.node(cluster.controller_names[0])
    broker = cluster.node("broker-2")
    create, replica_fetch = huge_create_topics(), huge_fetch()
    cases = [
        ("CreateTopics, no credential", controller, (), grpc.StatusCode.UNAUTHENTICATED),
        ("CreateTopics, a broker's credential", controller,
         claim(101, key(cluster, 101, CONTROLLERS)), grpc.StatusCode.RESOURCE_EXHAUSTED),
        ("replica Fetch, no credential", broker, (), grpc.StatusCode.UNAUTHENTICATED),
        ("replica Fetch, a broker's credential", broker,
         claim(101, key(cluster, 101, BROKERS)), grpc.StatusCode.RESOURCE_EXHAUSTED),
    ]
    growth: dict[str, int] = {}
    for what, node, metadata, expected in cases:
        before = peak_rss_kb(node.pid)
        is_controller = node is controller
        port = node.controller_port if is_controller else node.inter_broker_port
        with channel(cluster, port, "broker-1") as ch:
            call = controller_pb2_grpc.ControllerServiceStub(ch).CreateTopics \
                if is_controller else broker_pb2_grpc.ReplicaServiceStub(ch).Fetch
            with pytest.raises(grpc.RpcError) as error:
                call(create if is_controller else replica_fetch, timeout=30, metadata=metadata)
        assert error.value.code() == expected, (what, error.value.details())
        time.sleep(0.5)  # whatever the server still does with it, done before we look
        after = peak_rss_kb(node.pid)
        growth[what] = after - before
        print(f"{what}: peak RSS {before} -> {after} KiB")
    assert all(kb < RSS_GROWTH_MAX_KB for kb in growth.values()), growth
    assert cluster.is_running(cluster.controller_names[0]) and cluster.is_running("broker-2")


# ------------------------------------------------------------------ refused at start
def start(config: Path, *, netns: str = "") -> subprocess.Popen[str]:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    return subprocess.Popen([*prefix, sys.executable, "-m", "tidelog.cli", "server",
                             "--config", str(config)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def refusal_at_start(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """(exit code, stderr) of a node that must exit by itself; killed (by pid) if it runs on."""
    try:
        _, stderr = proc.communicate(timeout=START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, 9)
        proc.communicate(timeout=START_TIMEOUT_S)
        raise AssertionError("the node started: it should have refused its config") from None
    return proc.returncode, stderr


def broker_config(cluster: ClusterHarness, base: Path, *, secret_line: str,
                  inter_broker_listen_host: str = HOST) -> Path:
    """A new broker-only node (id 150, its own data dir and ports) of this cluster."""
    from tidelog.data_dir import format_data_dir

    data = base / "broker-150"
    format_data_dir(data, cluster_id=cluster.cluster_id, node_id=150)
    port, inter_port = free_ports(2)
    controller = cluster.node(cluster.controller_names[0])
    config = base / "broker-150.toml"
    config.write_text("\n".join([
        "node_id = 150", f'data_dir = "{data}"', 'roles = ["broker"]', secret_line, "",
        "[broker]", f"port = {port}", f"inter_broker_port = {inter_port}",
        f'inter_broker_listen_host = "{inter_broker_listen_host}"', "",
        "[[controller.voters]]", f"id = {controller.node_id}", f'host = "{HOST}"',
        f"port = {controller.controller_port}", f"raft_port = {controller.raft_port}", ""]))
    return config


def test_a_broker_configured_with_the_cluster_secret_is_refused_at_start(
        cluster: ClusterHarness, tmp_path: Path) -> None:
    config = broker_config(cluster, tmp_path,
                           secret_line=f'cluster_secret_file = "{cluster.local.secret_path}"')
    code, stderr = refusal_at_start(start(config))
    lines = stderr.strip().splitlines()
    assert code != 0 and len(lines) == 1, stderr
    assert "broker-only node 150" in lines[0]
    assert "tidelog storage broker-credential" in lines[0] and "--broker-id 150" in lines[0]


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace of this test's own (only its loopback up), removed after."""
    if os.geteuid() != 0:
        pytest.skip("needs root (ip netns)")
    name = f"tidelog-id-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=10)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"],
                       check=True, timeout=10)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, timeout=10)


@pytest.mark.parametrize("role", ["broker", "controller"])
def test_a_plaintext_peer_listener_off_loopback_is_refused_at_start(
        cluster: ClusterHarness, tmp_path: Path, netns: str, role: str) -> None:
    """0.0.0.0 without [tls], with a credential: a capture of any broker's call on it could be
    replayed. Inside a namespace of the test's own, where binding it reaches nothing else."""
    if role == "broker":
        credential = tmp_path / "broker-150.credential"  # as the operator makes it
        root = read_secret_file(cluster.local.secret_path)
        write_broker_credential_file(credential, broker_credential(root, 150))
        config = broker_config(cluster, tmp_path, inter_broker_listen_host="0.0.0.0",
                               secret_line=f'broker_credential_file = "{credential}"')
        key_name = "broker.inter_broker_listen_host"
    else:
        from tidelog.data_dir import format_data_dir

        format_data_dir(tmp_path / "controller-9", cluster_id=cluster.cluster_id, node_id=9)
        port, raft = free_ports(2)
        config = tmp_path / "controller-9.toml"
        config.write_text("\n".join([
            "node_id = 9", f'data_dir = "{tmp_path / "controller-9"}"', 'roles = ["controller"]',
            f'cluster_secret_file = "{cluster.local.secret_path}"', "",
            "[controller]", 'listen_host = "0.0.0.0"', f'raft_listen_host = "{HOST}"', "",
            "[[controller.voters]]", "id = 9", f'host = "{HOST}"', f"port = {port}",
            f"raft_port = {raft}", ""]))
        key_name = "controller.listen_host"
    code, stderr = refusal_at_start(start(config, netns=netns))
    lines = stderr.strip().splitlines()
    assert code != 0 and len(lines) == 1, stderr
    assert f"{key_name} = '0.0.0.0' is not loopback and [tls] is not set" in lines[0]
    assert "replay" in lines[0]
