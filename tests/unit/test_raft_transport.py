"""The controllers' Raft transport (controller/raft/): handshake, frames, restricted unpickler.

The pure pieces are checked as bytes in and bytes out: a handshake between a dialer and a
listener with the same key gives both the same session (frames open on the other side); the
listener refuses a wrong key, a non-voter, an address that is not its own, a voter that it
dials itself, a wrong magic and an out-of-order step; the dialer refuses a listener without the
key; a frame fails on a wrong MAC, a replayed or reordered sequence number and an oversize
payload; the unpickler refuses every global (pysyncobj's own protocol-2 pickles, a __reduce__
that would run a command, EXT codes) and every message type or log entry we do not carry.

Then a real RaftQuorum (one voter of two, the other is this test) is attacked through its real
socket, as a peer that knows the cluster secret would and as one that does not: each bad
connection is closed without an answer and counted, the node keeps running, and the marker file
that a code-running pickle would create never appears. That pysyncobj's real messages all pass
the checks is shown by tests/unit/test_raft_adapter.py, which records every message its
quorums send (elections, appends, a snapshot install, keepalives) and decodes each one.
"""

from __future__ import annotations

import os
import pickle
import shlex
import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidelog.cluster_secret import derive_key
from tidelog.controller import raft
from tidelog.controller.raft import RaftQuorum, RaftSettings

SECRET = "s" * 43
KEY = derive_key(SECRET, "raft")
WAIT_S = 10.0
A, B = "127.0.0.1:9094", "127.0.0.2:9094"  # B > A: B dials A (pysyncobj's rule)


class RunCommand:
    """Unpickling this runs ``touch <path>``: what an attacker would send pysyncobj."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {shlex.quote(str(self.path))}",))


def handshake(dialer_key: bytes = KEY, listener_key: bytes = KEY, *,
              voters: tuple[str, ...] = (B,)) -> tuple[raft._FrameCodec, raft._FrameCodec]:
    def accept(address: str) -> str | None:
        return None if address in voters else f"{address} is not a voter"

    dialer = raft._Handshake(dialer_key, self_address=B, dial_address=A,
                             accept_peer=lambda _a: None)
    listener = raft._Handshake(listener_key, self_address=A, dial_address=None,
                               accept_peer=accept)
    challenge, none = listener.receive(dialer.hello())
    assert challenge is not None and none is None
    proof, dialer_codec = dialer.receive(challenge)
    assert proof is not None and dialer_codec is not None
    reply, listener_codec = listener.receive(proof)
    assert reply is None and listener_codec is not None
    return dialer_codec, listener_codec


def body(frame: bytes) -> bytes:
    (length,) = raft._FRAME_LENGTH.unpack_from(frame)
    assert len(frame) == raft._FRAME_LENGTH.size + length
    return frame[raft._FRAME_LENGTH.size:]


# ---------------------------------------------------------------------------------- pure pieces


def test_handshake_gives_both_sides_one_session() -> None:
    dialer, listener = handshake()
    message = {"type": "append_entries", "term": 3, "commit_index": 7, "prevLogIdx": 7,
               "prevLogTerm": 3, "entries": [(b"\x01", 8, 3)]}
    for _ in range(3):
        sealed = dialer.seal(raft._encode_message(message))
        assert raft._decode_message(listener.open(body(sealed))) == message
        answer = {"type": "next_node_idx", "next_node_idx": 9, "reset": False, "success": True}
        assert raft._decode_message(dialer.open(body(listener.seal(
            raft._encode_message(answer))))) == answer
    # A frame is good in its own direction only.
    with pytest.raises(raft._PeerRefused, match="MAC"):
        dialer.open(body(dialer.seal(b"x")))


def test_listener_refuses_a_dialer_without_the_key() -> None:
    with pytest.raises(raft._PeerRefused, match="the listener failed authentication"):
        handshake(dialer_key=b"k" * 32)  # the dialer sees the listener's proof fail first
    # A dialer that skips that check still cannot make a proof the listener accepts.
    listener = raft._Handshake(KEY, self_address=A, dial_address=None,
                               accept_peer=lambda _a: None)
    dialer = raft._Handshake(b"k" * 32, self_address=B, dial_address=A,
                             accept_peer=lambda _a: None)
    challenge, _ = listener.receive(dialer.hello())
    assert challenge is not None
    nonce = challenge[len(raft._WIRE_MAGIC) + 1:][:raft._NONCE_BYTES]
    transcript = raft._transcript(dialer._nonce, nonce, B, A)
    forged = raft._WIRE_MAGIC + raft._PROOF + raft._mac(b"k" * 32, b"dialer proof", transcript)
    with pytest.raises(raft._PeerRefused, match="the dialer failed authentication"):
        listener.receive(forged)
    # Nor can it replay the listener's own proof as its own (direction labels differ).
    listener2 = raft._Handshake(KEY, self_address=A, dial_address=None,
                                accept_peer=lambda _a: None)
    challenge2, _ = listener2.receive(raft._Handshake(
        KEY, self_address=B, dial_address=A, accept_peer=lambda _a: None).hello())
    assert challenge2 is not None
    with pytest.raises(raft._PeerRefused, match="the dialer failed authentication"):
        listener2.receive(raft._WIRE_MAGIC + raft._PROOF + challenge2[-raft._MAC_BYTES:])


@pytest.mark.parametrize(("hello", "reason"), [
    (lambda: raft._Handshake(KEY, self_address="127.0.0.9:1", dial_address=A,
                             accept_peer=lambda _a: None).hello(), "not a voter"),
    (lambda: raft._Handshake(KEY, self_address=B, dial_address="127.0.0.1:1",
                             accept_peer=lambda _a: None).hello(), "this node is"),
    (lambda: b"NOTRAFT!" + b"H" + b"\0" * 40, "wrong magic"),
    (lambda: raft._WIRE_MAGIC + raft._HELLO + b"\0" * 10, "short nonce"),
    (lambda: raft._WIRE_MAGIC + raft._HELLO + b"\0" * 32 + b"\xff", "runs past the end"),
    (lambda: raft._WIRE_MAGIC + raft._PROOF + b"\0" * 32, "unexpected handshake message"),
    (lambda: struct.pack("i", 5) + zlib.compress(pickle.dumps(["status"])), "wrong magic"),
])
def test_listener_refuses_bad_hellos(hello: Callable[[], bytes], reason: str) -> None:
    listener = raft._Handshake(KEY, self_address=A, dial_address=None,
                               accept_peer=lambda a: None if a == B else f"{a} is not a voter")
    with pytest.raises(raft._PeerRefused, match=reason):
        listener.receive(hello())


def test_frames_refuse_wrong_mac_replay_reorder_and_oversize() -> None:
    dialer, listener = handshake()
    first, second, third = (body(dialer.seal(b"payload-%d" % i)) for i in range(3))
    assert listener.open(first) == b"payload-0"
    with pytest.raises(raft._PeerRefused, match=r"expected 1 \(replayed or reordered"):
        listener.open(first)  # replayed
    with pytest.raises(raft._PeerRefused, match="2, expected 1"):
        listener.open(third)  # reordered
    tampered = bytearray(second)
    tampered[-1] ^= 1
    with pytest.raises(raft._PeerRefused, match="MAC"):
        listener.open(bytes(tampered))
    with pytest.raises(raft._PeerRefused, match="shorter than its header"):
        listener.open(b"\0" * 12)
    assert listener.open(second) == b"payload-1"
    with pytest.raises(ValueError, match="exceeds"):
        dialer.seal(b"\0" * raft._FRAME_BYTES_MAX)


def test_unpickler_refuses_every_global(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    message = {"type": "append_entries", "term": 1, "commit_index": 1, "prevLogIdx": 1,
               "prevLogTerm": 1, "entries": [(b"\x00data", 2, 1)]}
    refused = [
        pickle.dumps({"type": "tidelog_keepalive", "x": RunCommand(marker)}, protocol=4),
        pickle.dumps(RunCommand(marker), protocol=0),
        pickle.dumps(message, protocol=2),  # pysyncobj's own: bytes need _codecs.encode
        pickle.dumps({"type": "tidelog_keepalive", "p": Path("/")}, protocol=4),
        b"\x80\x02\x82\x01\x00\x00\x00)\x81.",  # EXT1 code 1, then NEWOBJ
    ]
    for payload in refused:
        with pytest.raises(raft._PeerRefused, match="undecodable payload"):
            raft._decode_message(payload)
    assert not marker.exists()
    with pytest.raises(raft._PeerRefused, match="trailing bytes"):
        raft._decode_message(raft._encode_message({"type": "tidelog_keepalive"}) + b".")


def _entries_message(command: bytes) -> dict[str, Any]:
    return {"type": "append_entries", "term": 1, "commit_index": 1, "prevLogIdx": 1,
            "prevLogTerm": 1, "entries": [(command, 2, 1)]}


@pytest.mark.parametrize(("message", "reason"), [
    ([1, 2], "a list is not a message"),
    ({"type": "apply_command", "command": b"\x00"}, "not one the Raft transport carries"),
    ({"type": "status"}, "not one the Raft transport carries"),
    ({"type": "request_vote", "term": "1", "last_log_index": 1, "last_log_term": 1},
     "integer 'term'"),
    ({"type": "next_node_idx", "next_node_idx": 3, "reset": 0, "success": True}, "booleans"),
    ({"type": "append_entries", "term": 1, "commit_index": 1, "prevLogIdx": 1, "prevLogTerm": 1,
      "transmission": "finish", "data": b"x"}, "chunks"),
    ({"type": "append_entries", "term": 1, "commit_index": 1}, "neither entries nor"),
    ({"type": "append_entries", "term": 1, "commit_index": 1, "serialized": (b"x", 1, 1)},
     "snapshot chunk"),
    (_entries_message(bytes([3]) + pickle.dumps(2)), "command type"),  # setCodeVersion
    (_entries_message(bytes([2]) + pickle.dumps(["add", "x"])), "command type"),
    (_entries_message(b"\x00" + pickle.dumps((0, (b"x",)), protocol=2)), "undecodable"),
    (_entries_message(b"\x00" + pickle.dumps((1, (b"x",)), protocol=4)), r"append\(batch\)"),
    (_entries_message(b"\x00" + pickle.dumps((0, ("x",)), protocol=4)), r"append\(batch\)"),
])
def test_only_pysyncobjs_own_messages_are_carried(message: Any, reason: str) -> None:
    with pytest.raises(raft._PeerRefused, match=reason):
        raft._decode_message(raft._encode_message(message))


def test_carried_messages_decode_to_themselves() -> None:
    batch_entry = b"\x00" + pickle.dumps((0, (b"batch",)), protocol=4)
    messages = [
        _entries_message(batch_entry),
        _entries_message(raft._NO_OP_COMMAND),
        {"type": "append_entries", "term": 2, "commit_index": 5, "serialized": None},
        {"type": "append_entries", "term": 2, "commit_index": 5,
         "serialized": (b"chunk", True, False)},
        {"type": "request_vote", "term": 2, "last_log_index": 5, "last_log_term": 1},
        {"type": "response_vote", "term": 2},
        {"type": "timeout_now", "term": 2},
        {"type": "next_node_idx", "next_node_idx": 6, "reset": True, "success": False},
        {"type": "tidelog_keepalive"},
    ]
    for message in messages:
        assert raft._decode_message(raft._encode_message(message)) == message


def test_settings_keep_pysyncobjs_messages_inside_a_frame() -> None:
    with pytest.raises(ValueError, match="Raft transport's frames"):
        RaftSettings(append_entries_bytes_max=6 * 1024 * 1024)
    with pytest.raises(ValueError, match="Raft transport's frames"):
        RaftSettings(snapshot_chunk_bytes=raft._FRAME_BYTES_MAX)


def test_a_non_loopback_bind_needs_a_secret(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a cluster secret"):
        RaftQuorum(0, A, [A, B], tmp_path, object(),  # type: ignore[arg-type]
                   settings=RaftSettings(), bind_address="0.0.0.0:9094")


# ------------------------------------------------------------------- a real node, attacked


class Peer:
    """This test as voter B, dialling node A's real Raft port over TCP."""

    def __init__(self, target: str, *, key: bytes = KEY, address: str = B) -> None:
        host, port = target.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
        self.handshake = raft._Handshake(key, self_address=address, dial_address=target,
                                         accept_peer=lambda _a: None)
        self.target = target
        self.address = address
        self.key = key
        self.codec: raft._FrameCodec | None = None

    def authenticate(self) -> raft._FrameCodec:
        self.send_body(self.handshake.hello())
        proof, codec = self.handshake.receive(self.read_body())
        assert proof is not None and codec is not None
        self.send_body(proof)
        self.codec = codec
        return codec

    def send_body(self, data: bytes) -> None:
        self.sock.sendall(raft._FRAME_LENGTH.pack(len(data)) + data)

    def read_body(self) -> bytes:
        (length,) = raft._FRAME_LENGTH.unpack(self._read_exactly(raft._FRAME_LENGTH.size))
        return self._read_exactly(length)

    def _read_exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def closed_by_node(self) -> bool:
        """True once the node closes the connection (what it sent before is read and dropped);
        False if it is still open after WAIT_S."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not self.sock.recv(65536):
                    return True
            except TimeoutError:
                return False
            except ConnectionResetError:
                return True
        return False

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[RaftQuorum]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    machine = _NullMachine()
    quorum = RaftQuorum(0, address, [address, B], tmp_path / "a", machine,
                        settings=RaftSettings(), cluster_secret=SECRET)
    try:
        yield quorum
    finally:
        quorum.close()


class _NullMachine:
    def apply(self, batch: bytes, index: int) -> None:
        pass

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass


def _wait_refusals(node: RaftQuorum, count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while node.transport_refusals() < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert node.transport_refusals() >= count


def test_a_voter_with_the_key_is_served(node: RaftQuorum) -> None:
    peer = Peer(node.self_address)
    try:
        codec = peer.authenticate()
        peer.sock.sendall(codec.seal(raft._encode_message({"type": "tidelog_keepalive"})))
        # The node talks back: a vote request or a keepalive, each a frame that opens.
        message = raft._decode_message(codec.open(peer.read_body()))
        assert message["type"] in {"request_vote", "tidelog_keepalive"}
        assert node.transport_refusals() == 0
    finally:
        peer.close()


def _after_auth(make_frames: Callable[[raft._FrameCodec, Path], list[bytes]]
                ) -> Callable[[Peer, Path], None]:
    def attack(peer: Peer, marker: Path) -> None:
        codec = peer.authenticate()
        for frame in make_frames(codec, marker):
            peer.sock.sendall(frame)

    return attack


def _seal(message: Any) -> Callable[[raft._FrameCodec, Path], list[bytes]]:
    return lambda codec, _marker: [codec.seal(raft._encode_message(message))]


def _wrong_mac(codec: raft._FrameCodec, marker: Path) -> list[bytes]:
    frame = bytearray(codec.seal(pickle.dumps(RunCommand(marker), protocol=2)))
    frame[raft._FRAME_LENGTH.size + raft._FRAME_SEQ.size] ^= 1
    return [bytes(frame)]


def _replayed(codec: raft._FrameCodec, _marker: Path) -> list[bytes]:
    frame = codec.seal(raft._encode_message({"type": "tidelog_keepalive"}))
    return [frame, frame]


def _reordered(codec: raft._FrameCodec, _marker: Path) -> list[bytes]:
    first = codec.seal(raft._encode_message({"type": "tidelog_keepalive"}))
    return [codec.seal(raft._encode_message({"type": "tidelog_keepalive"})), first]


def _old_framing(peer: Peer, marker: Path) -> None:
    data = zlib.compress(pickle.dumps(RunCommand(marker), protocol=2), 3)
    peer.sock.sendall(struct.pack("i", len(data)) + data)


def _unauthenticated_frame(peer: Peer, marker: Path) -> None:
    peer.send_body(peer.handshake.hello())
    peer.read_body()  # the challenge; this peer cannot answer it, so it sends a frame instead
    fake = raft._FrameCodec(send_key=b"x" * 32, receive_key=b"y" * 32)
    peer.sock.sendall(fake.seal(pickle.dumps(RunCommand(marker), protocol=4)))


def _wrong_key(peer: Peer, marker: Path) -> None:
    peer.send_body(peer.handshake.hello())
    challenge = peer.read_body()
    nonce = challenge[len(raft._WIRE_MAGIC) + 1:][:raft._NONCE_BYTES]
    transcript = raft._transcript(peer.handshake._nonce, nonce, peer.address, peer.target)
    peer.send_body(raft._WIRE_MAGIC + raft._PROOF
                   + raft._mac(b"k" * 32, b"dialer proof", transcript))


ATTACKS: dict[str, Callable[[Peer, Path], None]] = {
    "pysyncobj's framing, a pickle that runs a command": _old_framing,
    "a frame after the challenge, without the proof": _unauthenticated_frame,
    "a proof under another key": _wrong_key,
    "a non-voter's hello": lambda peer, _m: peer.send_body(raft._Handshake(
        KEY, self_address="127.0.0.3:1", dial_address=peer.target,
        accept_peer=lambda _a: None).hello()),
    "an oversize handshake frame": lambda peer, _m: peer.sock.sendall(
        raft._FRAME_LENGTH.pack(raft._HANDSHAKE_FRAME_BYTES_MAX + 1)),
    "a wrong MAC": _after_auth(_wrong_mac),
    "a replayed frame": _after_auth(_replayed),
    "a reordered frame": _after_auth(_reordered),
    "an oversize frame": _after_auth(
        lambda _c, _m: [raft._FRAME_LENGTH.pack(raft._FRAME_BYTES_MAX + 1)]),
    "a pickle that runs a command, with a good MAC": _after_auth(
        lambda codec, marker: [codec.seal(pickle.dumps(RunCommand(marker), protocol=2))]),
    "pysyncobj's forwarding": _after_auth(_seal({"type": "apply_command", "command": b"\0"})),
    "chunked entries": _after_auth(_seal({
        "type": "append_entries", "term": 99, "commit_index": 1, "prevLogIdx": 1,
        "prevLogTerm": 1, "transmission": "start", "data": b"x"})),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_bad_peers_are_closed_counted_and_the_node_keeps_running(
    node: RaftQuorum, tmp_path: Path, attack: str
) -> None:
    marker = tmp_path / "pwned"
    peer = Peer(node.self_address)
    try:
        ATTACKS[attack](peer, marker)
        assert peer.closed_by_node(), f"{attack}: the connection stayed open"
    finally:
        peer.close()
    _wait_refusals(node, 1)
    assert not marker.exists()
    assert node.status()["running"] and node.failure is None
    # And a good peer is still served afterwards.
    good = Peer(node.self_address)
    try:
        codec = good.authenticate()
        assert raft._decode_message(codec.open(good.read_body()))["type"]
    finally:
        good.close()


def test_idle_handshakes_cannot_keep_a_voter_out(node: RaftQuorum) -> None:
    port = int(node.self_address.rsplit(":", 1)[1])
    idle = [socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
            for _ in range(raft._PENDING_HANDSHAKES_MAX + 2)]
    try:
        _wait_refusals(node, 2)  # the two oldest idle ones were closed to make room
        good = Peer(node.self_address)
        try:
            codec = good.authenticate()
            assert raft._decode_message(codec.open(good.read_body()))["type"]
        finally:
            good.close()
    finally:
        for sock in idle:
            sock.close()
