"""_RaftConnection: one Raft TCP connection, pysyncobj's TcpConnection over Tidelog's wire.

It drives framing.py's _Handshake and _FrameCodec over a non-blocking socket in pysyncobj's
poller, checks each frame's length against its state's limit before buffering it, and hands
pysyncobj only messages that passed _decode_message. transport.py creates and tracks them.

With TLS (``tls``: the node's _TlsContexts, when it has ``[tls]``), tls_wire.py's _TlsWire sits
between the socket and all of that: bytes read go through it and only its plaintext reaches the
frame logic; everything queued is encrypted before it joins the write buffer. The dialer sends
its HELLO once the TLS handshake is done, so the handshake timeout covers both, and a TLS
failure is a refusal like any other.
"""

from __future__ import annotations

import logging
import pickle
import socket
import time
from collections.abc import Callable
from typing import Any

from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE, _getAddrType, set_keepalive

from tidelog.controller.raft.framing import (
    _FRAME_BYTES_MAX,
    _FRAME_LENGTH,
    _HANDSHAKE_FRAME_BYTES_MAX,
    _decode_message,
    _encode_message,
    _FrameCodec,
    _Handshake,
    _PeerRefused,
)
from tidelog.controller.raft.tls_wire import _host_of, _TlsContexts, _TlsWire

logger = logging.getLogger("controller.raft")  # one logger for the whole adapter

#: How a TLS record carrying a handshake starts (content type 22, version 3.x): what a node
#: without [tls] reads as the length of a first frame when a node with [tls] dials it.
_TLS_RECORD_START = b"\x16\x03"


def _remote_of(sock: socket.socket) -> str:
    try:
        peer = sock.getpeername()
    except OSError:
        return "?"
    return f"{peer[0]}:{peer[1]}"


class _RaftConnection:
    """pysyncobj's TcpConnection as TCPTransport uses it, over the handshake and frames.

    Nothing reaches pysyncobj before the handshake is done: the dialer reports "connected" and
    the listener "authenticated" only then. A frame's length is checked against the limit of
    the connection's state before it is buffered whole, and its MAC and sequence number before
    its payload is decoded. Any refusal closes the connection (``on_refused`` logs it);
    pysyncobj redials as after any lost connection.
    """

    def __init__(self, poller: Any, new_handshake: Callable[[], _Handshake], *,
                 sock: socket.socket | None, timeout_s: float, buffer_bytes: int,
                 keepalive: tuple[int, int, int] | None,
                 on_refused: Callable[[_RaftConnection, str], None],
                 tls: _TlsContexts | None = None) -> None:
        # TCPTransport sets these for pysyncobj's own encryption, which is never on here.
        self.encryptor = None
        self.sendRandKey = None
        self.recvRandKey = None
        self._poller = poller
        self._new_handshake = new_handshake
        self._handshake = new_handshake()
        self._codec: _FrameCodec | None = None
        self._timeout_s = timeout_s
        self._buffer_bytes = buffer_bytes
        self._keepalive = keepalive
        self._on_refused = on_refused
        self._tls_contexts = tls
        #: This socket's TLS (with [tls] only), made new for every socket.
        self._tls: _TlsWire | None = None
        self._tls_established = False
        self._read_buffer = bytearray()
        self._write_buffer = bytearray()
        self._last_read = self.handshake_deadline = 0.0
        self._on_connected: Callable[[], None] | None = None
        self._on_message: Callable[[Any], None] | None = None
        self._on_disconnected: Callable[[], None] | None = None
        #: The listener's: called with the peer's voter address once it has proved it.
        self.on_authenticated: Callable[[str], None] | None = None
        self._socket: socket.socket | None = None
        self._fileno: int | None = None
        self._state = CONNECTION_STATE.DISCONNECTED
        self._tcp_connected = False
        self.remote = "?"
        if sock is not None:  # accepted by the listener: the handshake waits for a HELLO
            self._open(sock, tcp_connected=True)

    # --- what TCPTransport calls

    @property
    def state(self) -> int:
        return int(self._state)

    @property
    def claimed_address(self) -> str | None:
        return self._handshake.peer_address

    def fileno(self) -> int | None:
        return self._fileno

    def setOnConnectedCallback(self, callback: Callable[[], None]) -> None:
        self._on_connected = callback

    def setOnMessageReceivedCallback(self, callback: Callable[[Any], None]) -> None:
        self._on_message = callback

    def setOnDisconnectedCallback(self, callback: Callable[[], None]) -> None:
        self._on_disconnected = callback

    def getSendBufferSize(self) -> int:
        return len(self._write_buffer)

    def connect(self, host: str | None, port: int) -> bool:
        if host is None:
            return False
        self.disconnect()
        self._handshake = self._new_handshake()
        try:
            sock = socket.socket(_getAddrType(host), socket.SOCK_STREAM)
        except Exception:
            return False
        try:
            sock.setblocking(False)
            sock.connect((host, port))
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            sock.close()
            return False
        self._open(sock, tcp_connected=False)
        return True

    def send(self, message: Any) -> None:
        if self._codec is None or self._state != CONNECTION_STATE.CONNECTED:
            return
        try:
            frame = self._codec.seal(_encode_message(message))
        except (ValueError, pickle.PicklingError) as exc:
            kind = message.get("type") if isinstance(message, dict) else type(message).__name__
            logger.error("raft: cannot send a %s message to %s: %s; closing the connection",
                         kind, self.claimed_address, exc)
            self.disconnect()
            return
        self._queue(frame)

    def disconnect(self) -> None:
        notify = self._on_disconnected is not None \
            and self._state != CONNECTION_STATE.DISCONNECTED
        if self._fileno is not None:
            self._poller.unsubscribe(self._fileno)
            self._fileno = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self._tls = None
        self._tls_established = False
        self._read_buffer.clear()
        self._write_buffer.clear()
        self._codec = None
        self._state = CONNECTION_STATE.DISCONNECTED
        if notify and self._on_disconnected is not None:
            self._on_disconnected()

    def check_timeout(self, now: float) -> None:
        """Called every tick: a handshake that is not done in time, or a connection with
        nothing read for timeout_s, is closed (pysyncobj checked only when it sent)."""
        if self._state == CONNECTION_STATE.CONNECTING and now > self.handshake_deadline:
            if self._handshake.is_dialer:
                self.disconnect()  # a peer that is down or paused: redialled, not an attack
            else:
                self._refuse(f"handshake not done within {self._timeout_s} s")
        elif self._state == CONNECTION_STATE.CONNECTED and \
                now - self._last_read > self._timeout_s:
            self.disconnect()

    # --- I/O

    def _open(self, sock: socket.socket, *, tcp_connected: bool) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._buffer_bytes)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._buffer_bytes)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._keepalive is not None:
            set_keepalive(sock, *self._keepalive)
        self._socket = sock
        self._fileno = sock.fileno()
        self._state = CONNECTION_STATE.CONNECTING
        if self._tls_contexts is not None:
            # The dialer verifies the listener's certificate for the host of the voter address
            # it dials (not the resolved IP pysyncobj connects to); the listener learns who
            # dials it from the HELLO (see _on_handshake_frame).
            dialled = self._handshake.peer_address if self._handshake.is_dialer else None
            self._tls = self._tls_contexts.wire(
                server_hostname=None if dialled is None else _host_of(dialled))
        self._tcp_connected = tcp_connected
        if tcp_connected:
            self.remote = _remote_of(sock)
        self._last_read = time.monotonic()
        self.handshake_deadline = self._last_read + self._timeout_s
        self._subscribe()

    def _subscribe(self) -> None:
        if self._fileno is None:
            return
        events = POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.ERROR
        if self._write_buffer or not self._tcp_connected:
            events |= POLL_EVENT_TYPE.WRITE
        self._poller.subscribe(self._fileno, self._on_event, events)

    def _on_event(self, fd: int, event: int) -> None:
        if fd != self._fileno or self._socket is None:
            self._poller.unsubscribe(fd)
            return
        if event & POLL_EVENT_TYPE.ERROR:
            self.disconnect()
            return
        if not self._tcp_connected:
            if self._socket.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                self.disconnect()
                return
            self._tcp_connected = True
            self.remote = _remote_of(self._socket)
            if self._tls is not None:
                try:
                    self._write_buffer += self._tls.start()  # the HELLO follows TLS's handshake
                except _PeerRefused as exc:
                    self._refuse_tls(str(exc))
                    return
                self._flush()
            else:
                self._queue_frame(self._handshake.hello())
        if event & POLL_EVENT_TYPE.WRITE:
            self._flush()
        if event & POLL_EVENT_TYPE.READ and self._state != CONNECTION_STATE.DISCONNECTED:
            self._read()

    def _flush(self) -> None:
        while self._write_buffer and self._socket is not None:
            try:
                sent = self._socket.send(self._write_buffer)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.disconnect()
                return
            del self._write_buffer[:sent]
        self._subscribe()

    def _read(self) -> None:
        if self._socket is None:
            return
        # Bounded read-ahead: at most one frame of this state's limit plus one recv.
        limit = _FRAME_BYTES_MAX if self._codec is not None else _HANDSHAKE_FRAME_BYTES_MAX
        # With TLS the limit counts plaintext: each recv adds at most its own size (the TLS
        # layer keeps no more than one partial record back).
        closed = False
        while len(self._read_buffer) < _FRAME_LENGTH.size + limit:
            try:
                data = self._socket.recv(self._buffer_bytes)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.disconnect()
                return
            if not data:
                closed = True
                break
            self._last_read = time.monotonic()
            tls = self._tls
            if tls is not None:
                try:
                    data = self._from_tls(tls, data)
                except _PeerRefused as exc:
                    self._refuse_tls(str(exc))
                    return
                if self._socket is None:  # its reply could not be sent: disconnected
                    return
                closed = tls.closed
            self._read_buffer += data
            if closed:
                break
        self._process_frames()
        if closed:
            self.disconnect()

    def _process_frames(self) -> None:
        buffer = self._read_buffer
        while self._state != CONNECTION_STATE.DISCONNECTED and \
                len(buffer) >= _FRAME_LENGTH.size:
            (length,) = _FRAME_LENGTH.unpack_from(buffer, 0)
            limit = _FRAME_BYTES_MAX if self._codec is not None else _HANDSHAKE_FRAME_BYTES_MAX
            if length > limit:
                if self._tls is None and self._codec is None \
                        and buffer.startswith(_TLS_RECORD_START):
                    self._refuse("the peer starts TLS, but this node has no [tls] (TLS on the "
                                 "Raft transport needs [tls] on every controller)")
                    return
                self._refuse(f"a frame of {length} bytes exceeds the limit of {limit}")
                return
            end = _FRAME_LENGTH.size + length
            if len(buffer) < end:
                return
            body = bytes(buffer[_FRAME_LENGTH.size:end])
            del buffer[:end]
            try:
                if self._codec is None:
                    self._on_handshake_frame(body)
                    continue
                message = _decode_message(self._codec.open(body))
            except _PeerRefused as exc:
                self._refuse(str(exc))
                return
            if self._on_message is not None:
                self._on_message(message)

    def _on_handshake_frame(self, body: bytes) -> None:
        reply, codec = self._handshake.receive(body)
        if self._tls is not None and not self._handshake.is_dialer and codec is None \
                and self.claimed_address is not None:
            # The HELLO named the voter the dialer claims to be: its certificate (of the CA,
            # verified in the TLS handshake) must cover that voter's host, as the dialer checks
            # the listener's. Refused before the challenge is sent.
            mismatch = self._tls.peer_mismatch(_host_of(self.claimed_address))
            if mismatch is not None:
                raise _PeerRefused(mismatch)
        if reply is not None:
            self._queue_frame(reply)
        if codec is None:
            return
        self._codec = codec
        self._state = CONNECTION_STATE.CONNECTED
        self._last_read = time.monotonic()
        if self._handshake.is_dialer:
            if self._on_connected is not None:
                self._on_connected()
        elif self.on_authenticated is not None and self.claimed_address is not None:
            self.on_authenticated(self.claimed_address)

    def _queue_frame(self, body: bytes) -> None:
        self._queue(_FRAME_LENGTH.pack(len(body)) + body)

    def _queue(self, data: bytes) -> None:
        """Queues bytes of the wire (handshake or data frames), encrypted when TLS is on."""
        if self._tls is not None:
            try:
                data = self._tls.send(data)
            except _PeerRefused as exc:
                self._refuse_tls(str(exc))
                return
        self._write_buffer += data
        self._flush()

    def _from_tls(self, tls: _TlsWire, data: bytes) -> bytes:
        """Ciphertext read in, the plaintext it completes out; sends what TLS answers, and the
        dialer's HELLO once the TLS handshake is done."""
        plaintext = tls.receive(data)
        self._write_buffer += tls.outgoing()
        if tls.handshake_done and not self._tls_established:
            self._tls_established = True
            if self._handshake.is_dialer:
                self._queue_frame(self._handshake.hello())  # flushes the TLS reply with it
                return plaintext
        if self._write_buffer:
            self._flush()
        return plaintext

    def _refuse_tls(self, reason: str) -> None:
        # The alert TLS prepared says why (e.g. "unknown ca") to the peer: sent if the socket
        # takes it now, never waited for.
        if self._tls is not None:
            self._write_buffer += self._tls.outgoing()
            self._flush()
        self._refuse(reason)

    def _refuse(self, reason: str) -> None:
        self._on_refused(self, reason)
        self.disconnect()
