"""The Raft transport's wire, as bytes in and bytes out: no sockets, no pysyncobj import.

The wire between controllers (transport.py says why it replaces pysyncobj's):

* every connection starts with a challenge-response handshake keyed by
  ``derive_key(secret, "raft")``: the dialer sends a nonce, its voter address and the address it
  dialled; the listener refuses an address that is not a voter allowed to dial it (pysyncobj's
  rule: the greater address dials) and proves the key with HMAC-SHA256 over both nonces, both
  addresses and a direction label; the dialer checks that and proves the key the same way;
* every later frame is ``length | seq | HMAC | payload`` under a per-connection, per-direction
  key derived from the handshake; the length is checked against a limit before the frame is
  buffered (1 KiB during the handshake, ``_FRAME_BYTES_MAX`` after) and the MAC and sequence
  number before the payload is decoded;
* payloads are pickles of protocol 4, read by an unpickler that resolves no global at all, and
  then checked to be one of the message types pysyncobj sends between voters (append_entries,
  next_node_idx, request_vote, response_vote, timeout_now, our keepalive) with the right field
  types; log entries must be pysyncobj's no-op or our ``append`` envelope (pysyncobj unpickles
  an entry unrestricted when it applies it), and chunked 'transmission' entries are refused.

This module also holds the log entry envelope's format (one replicated method, ``append``,
pickled at protocol 4), since the transport checks every entry against it before pysyncobj
unpickles it. The pysyncobj command-type bytes below are checked against pysyncobj's own in
controller/raft/patches.py, where pysyncobj is imported. transport.py and connection.py drive
these classes over pysyncobj's poller.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import pickle
import secrets
import struct
from collections.abc import Callable
from typing import Any

#: Method id of ``append`` on the wire and in the journal. It is id 0 because it is the only
#: replicated method at code version 0; asserted when the SyncObj is built.
_APPEND_METHOD_ID = 0
#: Pickle protocol of the entry envelope: 4 stores bytes raw; pysyncobj's own 2 does not.
_ENVELOPE_PICKLE_PROTOCOL = 4
#: Upper bound of what the envelope adds to a batch (type byte, pickle framing, int, tuples).
_ENVELOPE_BYTES_MAX = 64
#: pysyncobj's command-type byte for a call of a replicated method (_COMMAND_TYPE.REGULAR).
_REGULAR_COMMAND_PREFIX = bytes([0])
#: pysyncobj's no-op log entry, as it writes it (a command-type byte alone: _COMMAND_TYPE.NO_OP).
_NO_OP_COMMAND = bytes([1])
#: Largest frame of the Raft transport (sequence number, MAC and payload); a peer announcing a
#: bigger one is disconnected. RaftSettings keeps what pysyncobj sends below it.
_FRAME_BYTES_MAX = 16 * 1024 * 1024

#: Key of the handshake and frames when no cluster secret is set (loopback-only dev configs):
#: everything still runs, but it proves only that the peer can reach this loopback address.
_NO_SECRET_KEY = hashlib.sha256(b"tidelog/v1/raft/no-cluster-secret").digest()
_WIRE_MAGIC = b"TLRAFT01"
_HELLO, _CHALLENGE, _PROOF = b"H", b"C", b"P"
_NONCE_BYTES = 32
_MAC_BYTES = 32
_ADDRESS_BYTES_MAX = 255
_FRAME_LENGTH = struct.Struct(">I")
_FRAME_SEQ = struct.Struct(">Q")
#: Largest handshake frame (magic, kind, nonce, two addresses: at most 554 bytes).
_HANDSHAKE_FRAME_BYTES_MAX = 1024
#: The keepalive's message type (see _make_transport_class).
_KEEPALIVE_TYPE = "tidelog_keepalive"
#: The pre-vote's request and answer (controller/raft/prevote.py).
PRE_VOTE_TYPE = "tidelog_pre_vote"
PRE_VOTE_RESPONSE_TYPE = "tidelog_pre_vote_response"
#: Integer fields each carried message type must have; no other type is carried. pysyncobj's
#: apply_command(_response) (forwarding, refused by our transport) and its utility messages are
#: not among them.
_MESSAGE_INT_FIELDS: dict[str, tuple[str, ...]] = {
    "append_entries": ("term", "commit_index"),
    "next_node_idx": ("next_node_idx",),
    "request_vote": ("term", "last_log_index", "last_log_term"),
    "response_vote": ("term",),
    "timeout_now": ("term",),
    _KEEPALIVE_TYPE: (),
    PRE_VOTE_TYPE: ("term", "last_log_index", "last_log_term"),
    PRE_VOTE_RESPONSE_TYPE: ("term",),
}


class _PeerRefused(Exception):
    """A peer, handshake or frame the transport refuses: the connection is closed and logged."""


def _mac(key: bytes, label: bytes, data: bytes) -> bytes:
    return hmac.new(key, label + data, hashlib.sha256).digest()


def _pack_address(address: str) -> bytes:
    raw = address.encode()
    if len(raw) > _ADDRESS_BYTES_MAX:
        raise ValueError(f"raft address {address!r} is longer than {_ADDRESS_BYTES_MAX} bytes")
    return bytes([len(raw)]) + raw


def _unpack_addresses(data: bytes, count: int) -> list[str]:
    """``count`` length-prefixed addresses filling ``data`` exactly."""
    addresses, offset = [], 0
    for _ in range(count):
        if offset >= len(data) or offset + 1 + data[offset] > len(data):
            raise _PeerRefused("malformed handshake: an address runs past the end")
        raw = data[offset + 1:offset + 1 + data[offset]]
        offset += 1 + len(raw)
        try:
            addresses.append(raw.decode())
        except UnicodeDecodeError:
            raise _PeerRefused("malformed handshake: an address is not UTF-8") from None
    if offset != len(data):
        raise _PeerRefused("malformed handshake: trailing bytes")
    return addresses


def _transcript(dialer_nonce: bytes, listener_nonce: bytes, dialer: str, listener: str) -> bytes:
    return (_WIRE_MAGIC + dialer_nonce + listener_nonce + _pack_address(dialer)
            + _pack_address(listener))


class _FrameCodec:
    """Seals and opens one connection's data frames: length, sequence number, MAC, payload.

    The MAC is HMAC-SHA256 under this direction's session key over the sequence number and the
    payload; ``open`` checks it, then that the sequence number is the next one expected, before
    returning the payload. Bytes in, bytes out: no sockets.
    """

    def __init__(self, *, send_key: bytes, receive_key: bytes) -> None:
        self._send_key = send_key
        self._receive_key = receive_key
        self._send_seq = 0
        self._receive_seq = 0

    @classmethod
    def for_session(cls, key: bytes, transcript: bytes, *, dialer: bool) -> _FrameCodec:
        session = _mac(key, b"session", transcript)
        to_listener = _mac(session, b"dialer to listener", b"")
        to_dialer = _mac(session, b"listener to dialer", b"")
        if dialer:
            return cls(send_key=to_listener, receive_key=to_dialer)
        return cls(send_key=to_dialer, receive_key=to_listener)

    def seal(self, payload: bytes) -> bytes:
        """The whole frame for ``payload`` (ValueError if it would exceed _FRAME_BYTES_MAX)."""
        body_length = _FRAME_SEQ.size + _MAC_BYTES + len(payload)
        if body_length > _FRAME_BYTES_MAX:
            raise ValueError(f"a frame of {body_length} bytes exceeds {_FRAME_BYTES_MAX}")
        seq = _FRAME_SEQ.pack(self._send_seq)
        self._send_seq += 1
        mac = hmac.new(self._send_key, seq, hashlib.sha256)
        mac.update(payload)
        return _FRAME_LENGTH.pack(body_length) + seq + mac.digest() + payload

    def open(self, body: bytes) -> bytes:
        """The payload of one frame body (after its length), or _PeerRefused."""
        header = _FRAME_SEQ.size + _MAC_BYTES
        if len(body) < header:
            raise _PeerRefused(f"a frame of {len(body)} bytes is shorter than its header")
        seq_bytes, mac, payload = body[:_FRAME_SEQ.size], body[_FRAME_SEQ.size:header], \
            body[header:]
        expected = hmac.new(self._receive_key, seq_bytes, hashlib.sha256)
        expected.update(payload)
        if not hmac.compare_digest(mac, expected.digest()):
            raise _PeerRefused("a frame failed its MAC")
        (seq,) = _FRAME_SEQ.unpack(seq_bytes)
        if seq != self._receive_seq:
            raise _PeerRefused(f"frame sequence number {seq}, expected {self._receive_seq} "
                               f"(replayed or reordered)")
        self._receive_seq += 1
        return payload


class _Handshake:
    """One side of a connection's handshake, as bytes in and bytes out (no I/O).

    The dialer sends HELLO (its nonce, its voter address, the address it dialled). The listener
    refuses an address that is not its own or a peer that is not a voter allowed to dial it,
    and answers CHALLENGE (its nonce and its proof). The dialer checks that proof and sends
    PROOF (its own). A proof is HMAC-SHA256 under the Raft key over a direction label and the
    transcript (magic, both nonces, both addresses), so it is valid for neither the other
    direction nor another connection; the session keys come from the same transcript.
    """

    def __init__(self, key: bytes, *, self_address: str, dial_address: str | None,
                 accept_peer: Callable[[str], str | None], nonce: bytes | None = None) -> None:
        self._key = key
        self._self_address = self_address
        self._accept_peer = accept_peer
        self._nonce = nonce if nonce is not None else secrets.token_bytes(_NONCE_BYTES)
        self.is_dialer = dial_address is not None
        #: The peer's voter address: the one dialled, or the one a HELLO claimed.
        self.peer_address = dial_address
        self._transcript = b""
        self._state = "start" if self.is_dialer else "await_hello"

    def hello(self) -> bytes:
        if self._state != "start" or self.peer_address is None:
            raise RuntimeError("hello() is the dialer's first step only")
        self._state = "await_challenge"
        return (_WIRE_MAGIC + _HELLO + self._nonce + _pack_address(self._self_address)
                + _pack_address(self.peer_address))

    def receive(self, body: bytes) -> tuple[bytes | None, _FrameCodec | None]:
        """Takes one handshake frame; returns (the frame to answer with, the frame codec once
        this side is done). Raises _PeerRefused for anything but the next expected step."""
        if body[:len(_WIRE_MAGIC)] != _WIRE_MAGIC:
            raise _PeerRefused("not a Tidelog Raft handshake (wrong magic)")
        kind, rest = body[len(_WIRE_MAGIC):len(_WIRE_MAGIC) + 1], body[len(_WIRE_MAGIC) + 1:]
        if self._state == "await_hello" and kind == _HELLO:
            return self._on_hello(rest), None
        if self._state == "await_challenge" and kind == _CHALLENGE:
            return self._on_challenge(rest)
        if self._state == "await_proof" and kind == _PROOF:
            return None, self._on_proof(rest)
        raise _PeerRefused(f"unexpected handshake message {kind!r} (state {self._state})")

    def _on_hello(self, rest: bytes) -> bytes:
        nonce = rest[:_NONCE_BYTES]
        if len(nonce) != _NONCE_BYTES:
            raise _PeerRefused("malformed handshake: short nonce")
        dialer, listener = _unpack_addresses(rest[_NONCE_BYTES:], 2)
        self.peer_address = dialer
        if listener != self._self_address:
            raise _PeerRefused(f"it dialled {listener!r}, but this node is {self._self_address!r}")
        reason = self._accept_peer(dialer)
        if reason is not None:
            raise _PeerRefused(reason)
        self._transcript = _transcript(nonce, self._nonce, dialer, self._self_address)
        self._state = "await_proof"
        return _WIRE_MAGIC + _CHALLENGE + self._nonce + \
            _mac(self._key, b"listener proof", self._transcript)

    def _on_challenge(self, rest: bytes) -> tuple[bytes, _FrameCodec]:
        if len(rest) != _NONCE_BYTES + _MAC_BYTES or self.peer_address is None:
            raise _PeerRefused("malformed handshake: challenge of the wrong length")
        transcript = _transcript(self._nonce, rest[:_NONCE_BYTES], self._self_address,
                                 self.peer_address)
        if not hmac.compare_digest(rest[_NONCE_BYTES:],
                                   _mac(self._key, b"listener proof", transcript)):
            raise _PeerRefused("the listener failed authentication (another cluster secret?)")
        self._state = "done"
        return (_WIRE_MAGIC + _PROOF + _mac(self._key, b"dialer proof", transcript),
                _FrameCodec.for_session(self._key, transcript, dialer=True))

    def _on_proof(self, rest: bytes) -> _FrameCodec:
        if not hmac.compare_digest(rest, _mac(self._key, b"dialer proof", self._transcript)):
            raise _PeerRefused("the dialer failed authentication (another cluster secret?)")
        self._state = "done"
        return _FrameCodec.for_session(self._key, self._transcript, dialer=False)


class _MessageUnpickler(pickle.Unpickler):
    """Builds no object that needs a global: every GLOBAL, STACK_GLOBAL, INST, EXT and
    persistent id is refused, and without them REDUCE, NEWOBJ and BUILD have nothing to call.
    What remains is dicts, lists, tuples, sets, str, bytes, numbers, bools and None."""

    def find_class(self, module_name: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused global {module_name}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id")


def _restricted_loads(data: bytes) -> Any:
    """Unpickles ``data`` with _MessageUnpickler; _PeerRefused for anything else or extra."""
    stream = io.BytesIO(data)
    try:
        value = _MessageUnpickler(stream).load()
    except Exception as exc:  # pickle raises many types on malformed input
        raise _PeerRefused(f"undecodable payload: {type(exc).__name__}: {exc}") from None
    if stream.tell() != len(data):
        raise _PeerRefused("undecodable payload: trailing bytes")
    return value


def _encode_message(message: Any) -> bytes:
    # Protocol 4 stores bytes raw (BINBYTES): pysyncobj's messages then need no global at all
    # (its own protocol 2 turns bytes into a call of _codecs.encode).
    return pickle.dumps(message, protocol=_ENVELOPE_PICKLE_PROTOCOL)


def _decode_message(payload: bytes) -> dict[str, Any]:
    """A message from an authenticated peer, or _PeerRefused if it is not one we carry."""
    message = _restricted_loads(payload)
    if not isinstance(message, dict):
        raise _PeerRefused(f"a {type(message).__name__} is not a message")
    kind = message.get("type")
    fields = _MESSAGE_INT_FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        raise _PeerRefused(f"message type {kind!r} is not one the Raft transport carries")
    for name in fields:
        if type(message.get(name)) is not int:
            raise _PeerRefused(f"{kind} without an integer {name!r}")
    if kind == "next_node_idx" and not (type(message.get("reset")) is bool
                                        and type(message.get("success")) is bool):
        raise _PeerRefused("next_node_idx without booleans 'reset' and 'success'")
    if kind == PRE_VOTE_RESPONSE_TYPE and type(message.get("granted")) is not bool:
        raise _PeerRefused(f"{kind} without a boolean 'granted'")
    if kind == "append_entries":
        _check_append_entries(message)
    return message


def _check_append_entries(message: dict[str, Any]) -> None:
    if "transmission" in message:
        # pysyncobj's chunks of one large entry, which it joins and unpickles unrestricted;
        # RaftSettings keeps every entry small enough that the leader never sends them.
        raise _PeerRefused("append_entries in chunks ('transmission') is not carried")
    if "prevLogIdx" in message:
        if type(message["prevLogIdx"]) is not int or type(message.get("prevLogTerm")) is not int:
            raise _PeerRefused("append_entries without integer prevLogIdx and prevLogTerm")
        entries = message.get("entries")
        if type(entries) is not list:
            raise _PeerRefused("append_entries without a list of entries")
        for entry in entries:
            _check_entry(entry)
    elif "serialized" in message:
        chunk = message["serialized"]
        if chunk is not None and not (type(chunk) is tuple and len(chunk) == 3
                                      and type(chunk[0]) is bytes and type(chunk[1]) is bool
                                      and type(chunk[2]) is bool):
            raise _PeerRefused("append_entries with a snapshot chunk that is not "
                               "(bytes, bool, bool)")
    else:
        raise _PeerRefused("append_entries with neither entries nor a snapshot chunk")


def _check_entry(entry: Any) -> None:
    """A log entry is (command, index, term) whose command is pysyncobj's no-op or our
    ``append`` envelope: pysyncobj unpickles a command unrestricted when it applies it, so a
    command is decoded here first with the restricted unpickler and its shape checked."""
    if not (type(entry) is tuple and len(entry) == 3 and type(entry[0]) is bytes
            and type(entry[1]) is int and type(entry[2]) is int):
        raise _PeerRefused("a log entry that is not (bytes, int, int)")
    command = entry[0]
    if command == _NO_OP_COMMAND:
        return
    if command[:1] != _REGULAR_COMMAND_PREFIX:
        raise _PeerRefused(f"log entry {entry[1]} has command type {command[:1]!r}: only "
                           f"append and no-op entries are carried")
    call = _restricted_loads(command[1:])
    if not (type(call) is tuple and len(call) == 2 and call[0] == _APPEND_METHOD_ID
            and type(call[1]) is tuple and len(call[1]) == 1 and type(call[1][0]) is bytes):
        raise _PeerRefused(f"log entry {entry[1]} is not a call of append(batch)")
