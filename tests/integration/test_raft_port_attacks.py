"""The controllers' Raft port, attacked as real processes: three `tidelog server` controllers.

A cluster laid out by tidelog.local_cluster (the launcher behind `tidelog cluster up`, with its
generated cluster secret) runs three controllers and no broker. The tests check, from outside
the processes: the Raft socket of each controller listens on 127.0.0.1 only (read from
/proc/<pid>/fd and /proc/<pid>/net/tcp{,6}, not from the config); a pickle whose unpickling would
create a marker file, sent as pysyncobj framed messages (zlib-compressed pickle behind a 4-byte
length) and inside the new framing (unauthenticated, with a wrong MAC, and authenticated with
the cluster secret but a pickle of globals), creates no file; a connection claiming a non-voter
address, or sending pysyncobj's utility message ['status'], gets no answer and is closed; and
after all of it every controller still runs, the quorum has a leader, and a write commits
(RegisterBroker, read back as a higher Raft commit index in DescribeQuorum).
"""

from __future__ import annotations

import os
import pickle
import shlex
import socket
import struct
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_harness import ClusterHarness

from tidelog.cluster_secret import (
    CONTROLLERS,
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

WAIT_S = 10.0
LISTEN_STATE = "0A"


class RunCommand:
    """Unpickling this runs ``touch <path>`` inside whoever unpickles it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {shlex.quote(str(self.path))}",))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    with ClusterHarness.started(tmp_path_factory.mktemp("raft") / "cluster",
                                controllers=3) as harness:
        yield harness


def listening_hosts(pid: int, port: int) -> list[str]:
    """The local addresses of ``pid``'s listening TCP sockets on ``port``."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    hosts = []
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            host_hex, port_hex = local.split(":")
            if state != LISTEN_STATE or inode not in inodes or int(port_hex, 16) != port:
                continue
            raw = bytes.fromhex(host_hex)
            # /proc prints each 32-bit word of the address in host (little-endian) order.
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
            hosts.append(socket.inet_ntop(family, raw))
    return hosts


def raft_target(cluster: ClusterHarness, name: str) -> tuple[str, int]:
    return "127.0.0.1", cluster.node(name).raft_port


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
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
    return None


def frame(body: bytes) -> bytes:
    return raft._FRAME_LENGTH.pack(len(body)) + body


def read_body(sock: socket.socket) -> bytes:
    sock.settimeout(WAIT_S)
    data = b""
    while len(data) < 4 or len(data) < 4 + raft._FRAME_LENGTH.unpack_from(data)[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed during the handshake")
        data += chunk
    (length,) = raft._FRAME_LENGTH.unpack_from(data)
    return data[4:4 + length]


def commit_index(cluster: ClusterHarness) -> int:
    leader = cluster.wait_for_leader()
    answer = cluster.describe_quorum(cluster.controller_name(leader))
    assert answer is not None
    return int(answer.high_watermark)


def register_broker(cluster: ClusterHarness, broker_id: int) -> None:
    """A write through the active controller, with the broker credential a broker would send."""
    secret = read_secret_file(cluster.local.secret_path)
    key = broker_credential(secret, broker_id).presented_to(CONTROLLERS)
    metadata = ((PEER_ID_METADATA, str(broker_id)), (PEER_AUTH_METADATA, key))
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        for name in cluster.controller_names:
            port = cluster.node(name).controller_port
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = controller_pb2_grpc.ControllerServiceStub(channel)
                try:
                    r = stub.RegisterBroker(controller_pb2.RegisterBrokerRequest(
                        cluster_id=cluster.cluster_id, broker_id=broker_id,
                        incarnation_id=uuid.uuid4().bytes,
                        endpoint=common_pb2.Endpoint(host="127.0.0.1", port=30000 + broker_id)),
                        timeout=2, metadata=metadata)
                except grpc.RpcError:
                    continue
            if r.error_code == ErrorCode.NONE:
                return
        time.sleep(0.1)
    raise AssertionError(f"broker {broker_id} could not register")


def assert_quorum_works(cluster: ClusterHarness, broker_id: int) -> None:
    assert all(cluster.is_running(n) for n in cluster.controller_names)
    before = commit_index(cluster)
    register_broker(cluster, broker_id)
    deadline = time.monotonic() + WAIT_S
    while commit_index(cluster) <= before:
        assert time.monotonic() < deadline, "the commit index did not move"
        time.sleep(0.05)


def test_raft_port_listens_on_loopback_only(cluster: ClusterHarness) -> None:
    for name in cluster.controller_names:
        spec = cluster.node(name)
        assert listening_hosts(spec.pid, spec.raft_port) == ["127.0.0.1"], name


def test_a_pickle_that_runs_code_runs_nothing(cluster: ClusterHarness, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = pickle.dumps(RunCommand(marker), protocol=2)
    names = cluster.controller_names
    for name in names:
        # pysyncobj's framing: native-endian int32 length, zlib-compressed pickle.
        compressed = zlib.compress(evil, 3)
        with socket.create_connection(raft_target(cluster, name), timeout=WAIT_S) as sock:
            sock.sendall(struct.pack("i", len(compressed)) + compressed)
            assert read_until_closed(sock) == b"", f"{name} answered or kept the connection"
    assert not marker.exists(), "a controller ran code sent in pysyncobj's framing"
    # The new framing, to the controller with the lowest address, posing as the highest (which
    # dials it). Without the key: a HELLO, then a data frame in place of the proof.
    addresses = sorted(f"127.0.0.1:{cluster.node(n).raft_port}" for n in names)
    lowest = next(n for n in names if f"127.0.0.1:{cluster.node(n).raft_port}" == addresses[0])
    with socket.create_connection(raft_target(cluster, lowest), timeout=WAIT_S) as sock:
        hello = raft._Handshake(b"k" * 32, self_address=addresses[-1],
                                dial_address=addresses[0], accept_peer=lambda _a: None).hello()
        sock.sendall(frame(hello))
        assert read_body(sock).startswith(raft._WIRE_MAGIC + raft._CHALLENGE)
        fake = raft._FrameCodec(send_key=b"x" * 32, receive_key=b"y" * 32)
        sock.sendall(fake.seal(evil))
        assert read_until_closed(sock) == b"", "a frame without a proof was not refused"
    # With the key (a peer holding the cluster secret): first a wrong MAC, then the right MAC
    # on a pickle of globals, which the restricted unpickler refuses.
    key = derive_key(read_secret_file(cluster.local.secret_path), "raft")
    for wrong_mac in (True, False):
        with socket.create_connection(raft_target(cluster, lowest), timeout=WAIT_S) as sock:
            handshake = raft._Handshake(key, self_address=addresses[-1],
                                        dial_address=addresses[0], accept_peer=lambda _a: None)
            sock.sendall(frame(handshake.hello()))
            proof, codec = handshake.receive(read_body(sock))
            assert proof is not None and codec is not None
            sealed = bytearray(codec.seal(evil))
            if wrong_mac:
                sealed[raft._FRAME_LENGTH.size + raft._FRAME_SEQ.size] ^= 1
            sock.sendall(frame(proof) + bytes(sealed))
            assert read_until_closed(sock) is not None, "a bad frame was not refused"
    assert not marker.exists(), "a controller ran code it was sent"
    assert_quorum_works(cluster, broker_id=101)


def test_non_voters_and_utility_messages_get_no_answer(cluster: ClusterHarness) -> None:
    name = cluster.controller_names[0]
    target = f"127.0.0.1:{cluster.node(name).raft_port}"
    status = zlib.compress(pickle.dumps(["status"], protocol=2), 3)
    readonly = zlib.compress(pickle.dumps("readonly", protocol=2), 3)
    attempts = {
        "pysyncobj's ['status']": lambda: struct.pack("i", len(status)) + status,
        "pysyncobj's 'readonly'": lambda: struct.pack("i", len(readonly)) + readonly,
        "a hello from a non-voter": lambda: frame(raft._Handshake(
            b"k" * 32, self_address="127.0.0.99:9094", dial_address=target,
            accept_peer=lambda _a: None).hello()),
    }
    for what, data in attempts.items():
        with socket.create_connection(raft_target(cluster, name), timeout=WAIT_S) as sock:
            sock.sendall(data())
            assert read_until_closed(sock) == b"", f"{what}: answered or left open"
    log = cluster.local.log_path(name).read_text()
    assert "is not a voter of this quorum" in log and "exceeds the limit of 1024" in log
    assert_quorum_works(cluster, broker_id=102)
