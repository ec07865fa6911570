"""TLS on the controllers' Raft transport, as real processes: three `tidelog server` controllers
with ``[tls]`` (certificates from tidelog.certs, as `tidelog security init` makes them).

What must hold, checked from outside the processes:

* the quorum elects a leader and commits (a RegisterBroker write moves the Raft commit index,
  read back in DescribeQuorum over the controllers' mutual-TLS gRPC listener), and every
  controller logs that its Raft transport runs in mutual TLS;
* the Raft port speaks TLS only: a TLS client with a certificate of the CA is answered with the
  controller's own certificate, while the old plaintext wire (a HELLO made with the cluster's
  real key) gets nothing and is closed, and the refusal is logged;
* a dialer presenting another CA's certificate is refused in the TLS handshake (logged, naming
  the verify failure); one with a certificate of the CA and the cluster secret, but whose
  certificate does not cover the voter it claims to be, is refused at its HELLO; and after all
  of it the quorum still commits.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_harness import ClusterHarness

from tidelog.certs import Issued, issue, make_ca
from tidelog.cluster_secret import CONTROLLERS as TO_CONTROLLERS
from tidelog.cluster_secret import (
    PEER_AUTH_METADATA,
    PEER_ID_METADATA,
    broker_credential,
    derive_key,
    read_secret_file,
)
from tidelog.controller import raft
from tidelog.v1 import common_pb2, controller_pb2, controller_pb2_grpc
from tidelog.v1.common_pb2 import ErrorCode

pytestmark = pytest.mark.integration

HOST = "127.0.0.1"
WAIT_S = 10.0
CONTROLLERS = ("controller-1", "controller-2", "controller-3")
#: The broker ids the tests register as (each with its own certificate, broker-<id>).
BROKER_IDS = (101, 102)


def write(pki: Path, name: str, issued: Issued) -> None:
    (pki / f"{name}.crt").write_bytes(issued.cert_pem)
    key = pki / f"{name}.key"
    key.write_bytes(issued.key_pem)
    key.chmod(0o600)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pki = tmp_path_factory.mktemp("pki")
    ca, other_ca = make_ca(), make_ca("Another CA")
    (pki / "ca.crt").write_bytes(ca.cert_pem)
    for name in CONTROLLERS:
        write(pki, name, issue(ca, name, hosts=(HOST,)))
    write(pki, "admin", issue(ca, "admin"))  # a client user's certificate: no SANs
    for broker_id in BROKER_IDS:  # what the test registers as (a broker's certificate names it)
        write(pki, f"broker-{broker_id}", issue(ca, f"broker-{broker_id}", hosts=(HOST,)))
    write(pki, "rogue", issue(other_ca, "rogue", hosts=(HOST,)))
    return pki


@pytest.fixture(scope="module")
def cluster(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    tls = {"ca_file": str(pki / "ca.crt"), "cert_file": f"{pki}/{{name}}.crt",
           "key_file": f"{pki}/{{name}}.key"}
    cluster = ClusterHarness.create(tmp_path_factory.mktemp("raft-tls") / "cluster",
                                    controllers=3, overrides={"tls": tls})
    try:
        cluster.start_controllers()  # waits for /readyz: the quorum has a leader
        yield cluster
    finally:
        cluster.close()


# ------------------------------------------------------------------------------- helpers


def stub(cluster: ClusterHarness, pki: Path, name: str,
         as_who: str = "admin") -> tuple[grpc.Channel, Any]:
    """The controller's gRPC service over mutual TLS (its listener wants a CA certificate; a
    broker's calls, one naming that broker)."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.crt").read_bytes(),
        private_key=(pki / f"{as_who}.key").read_bytes(),
        certificate_chain=(pki / f"{as_who}.crt").read_bytes())
    channel = grpc.secure_channel(f"{HOST}:{cluster.node(name).controller_port}", credentials)
    return channel, controller_pb2_grpc.ControllerServiceStub(channel)


def quorum_views(cluster: ClusterHarness, pki: Path) -> list[controller_pb2.DescribeQuorumResponse]:
    views = []
    for name in CONTROLLERS:
        channel, service = stub(cluster, pki, name)
        with channel, contextlib.suppress(grpc.RpcError):
            views.append(service.DescribeQuorum(
                controller_pb2.DescribeQuorumRequest(), timeout=2))
    return views


def commit_index(cluster: ClusterHarness, pki: Path) -> int:
    """The commit index once every controller names the same leader."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        views = quorum_views(cluster, pki)
        leaders = {v.leader_id for v in views}
        if len(views) == len(CONTROLLERS) and len(leaders) == 1 and leaders.pop() >= 0:
            return max(int(v.high_watermark) for v in views)
        time.sleep(0.05)
    raise AssertionError(f"no agreed leader: {quorum_views(cluster, pki)}")


def register_broker(cluster: ClusterHarness, pki: Path, broker_id: int) -> None:
    """A write through the active controller, with the credential a broker would send."""
    secret = read_secret_file(cluster.local.secret_path)
    key = broker_credential(secret, broker_id).presented_to(TO_CONTROLLERS)
    metadata = ((PEER_ID_METADATA, str(broker_id)), (PEER_AUTH_METADATA, key))
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        for name in CONTROLLERS:
            channel, service = stub(cluster, pki, name, f"broker-{broker_id}")
            with channel:
                try:
                    answer = service.RegisterBroker(
                        controller_pb2.RegisterBrokerRequest(
                            cluster_id=cluster.cluster_id, broker_id=broker_id,
                            incarnation_id=uuid.uuid4().bytes,
                            endpoint=common_pb2.Endpoint(host=HOST, port=30000 + broker_id)),
                        timeout=2, metadata=metadata)
                except grpc.RpcError:
                    continue
            if answer.error_code == ErrorCode.NONE:
                return
        time.sleep(0.1)
    raise AssertionError(f"broker {broker_id} could not register")


def assert_quorum_commits(cluster: ClusterHarness, pki: Path, broker_id: int) -> None:
    assert all(cluster.is_running(n) for n in CONTROLLERS)
    before = commit_index(cluster, pki)
    register_broker(cluster, pki, broker_id)
    deadline = time.monotonic() + WAIT_S
    while commit_index(cluster, pki) <= before:
        assert time.monotonic() < deadline, "the commit index did not move"
        time.sleep(0.05)


def raft_port(cluster: ClusterHarness, name: str) -> int:
    return cluster.node(name).raft_port


def raft_addresses(cluster: ClusterHarness) -> list[str]:
    return sorted(f"{HOST}:{raft_port(cluster, n)}" for n in CONTROLLERS)


def lowest(cluster: ClusterHarness) -> str:
    """The controller with the lowest Raft address: every other voter dials it."""
    return min(CONTROLLERS, key=lambda n: f"{HOST}:{raft_port(cluster, n)}")


def wait_logged(cluster: ClusterHarness, name: str, text: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while text not in cluster.local.log_path(name).read_text():
        assert time.monotonic() < deadline, f"{name} did not log {text!r}:\n" \
            f"{cluster.log_tail(name, 20)}"
        time.sleep(0.05)


def tls_dial(cluster: ClusterHarness, pki: Path, name: str, as_: str) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / f"{as_}.crt"), str(pki / f"{as_}.key"))
    raw = socket.create_connection((HOST, raft_port(cluster, name)), timeout=WAIT_S)
    return context.wrap_socket(raw, server_hostname=HOST)


def read_until_closed(sock: socket.socket) -> bytes | None:
    """Everything the node sends until it closes the connection; None if still open."""
    received = b""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return None
        except (ConnectionResetError, ssl.SSLError):
            return received
        if not chunk:
            return received
        received += chunk
    return None


def frame(body: bytes) -> bytes:
    return raft._FRAME_LENGTH.pack(len(body)) + body


# --------------------------------------------------------------------------------- tests


def test_a_tls_quorum_elects_a_leader_and_commits(cluster: ClusterHarness, pki: Path) -> None:
    for name in CONTROLLERS:
        wait_logged(cluster, name, "mutual TLS) with peers")
    views = quorum_views(cluster, pki)
    leader = next(v for v in views if v.responder_id == v.leader_id)
    assert all(v.connected for v in leader.voters), leader  # Raft links up, through TLS
    assert_quorum_commits(cluster, pki, broker_id=101)


def test_the_raft_port_speaks_tls_only(cluster: ClusterHarness, pki: Path) -> None:
    name = lowest(cluster)
    with tls_dial(cluster, pki, name, "admin") as sock:
        served = sock.getpeercert(binary_form=True)
        assert sock.version() in ("TLSv1.2", "TLSv1.3")
    assert served is not None
    assert ssl.DER_cert_to_PEM_cert(served).strip() == \
        (pki / f"{name}.crt").read_text().strip()
    # The wire of a controller without [tls]: a HELLO under the cluster's real key, from the
    # voter with the highest address (which dials this one). No answer, closed, logged.
    addresses = raft_addresses(cluster)
    key = derive_key(read_secret_file(cluster.local.secret_path), "raft")
    hello = raft._Handshake(key, self_address=addresses[-1], dial_address=addresses[0],
                            accept_peer=lambda _a: None).hello()
    with socket.create_connection((HOST, raft_port(cluster, name)), timeout=WAIT_S) as plain:
        plain.sendall(frame(hello))
        assert read_until_closed(plain) == b"", "a plaintext HELLO was answered or kept open"
    wait_logged(cluster, name, "TLS handshake failed: the peer does not speak TLS")


def test_other_cas_and_uncovered_voters_are_refused_and_the_quorum_keeps_working(
        cluster: ClusterHarness, pki: Path) -> None:
    name = lowest(cluster)
    # Another CA's certificate: the controller refuses it in the TLS handshake (TLS 1.3: this
    # side learns it from the alert on its first read).
    with pytest.raises((ssl.SSLError, ConnectionError)), \
            tls_dial(cluster, pki, name, "rogue") as sock:
        sock.sendall(b"x")
        sock.recv(1)
    wait_logged(cluster, name, "TLS handshake failed: certificate verify failed: ")
    # A certificate of the CA and the cluster secret, but the certificate names no voter host:
    # TLS lets it in, its HELLO is refused before any challenge.
    addresses = raft_addresses(cluster)
    key = derive_key(read_secret_file(cluster.local.secret_path), "raft")
    with tls_dial(cluster, pki, name, "admin") as sock:
        sock.sendall(frame(raft._Handshake(
            key, self_address=addresses[-1], dial_address=addresses[0],
            accept_peer=lambda _a: None).hello()))
        assert read_until_closed(sock) == b"", "an uncovered voter was answered"
    wait_logged(cluster, name, "its TLS certificate does not cover voter host '127.0.0.1'")
    assert_quorum_commits(cluster, pki, broker_id=102)
