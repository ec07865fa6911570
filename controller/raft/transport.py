"""The controllers' Raft transport: pysyncobj's TCPTransport over Tidelog's wire.

pysyncobj's own TCP transport binds 0.0.0.0 unless told otherwise, unpickles every
message it reads before anything is authenticated (a pickle runs code), serves syncobj_admin's
utility messages and admits any 'readonly' peer. Ours (_make_transport_class) keeps pysyncobj's
connection management and replaces the wire:

* the listener binds exactly ``bind_address`` (default: self_address; never a wildcard unless
  given one, and a non-loopback one needs a cluster secret);
* every connection runs framing.py's handshake, every later frame carries a sequence number
  and a MAC, and payloads are read by its restricted unpickler and checked to be one of the
  messages pysyncobj sends between voters (framing.py's docstring says how).

Anything else closes that connection (logged as a refusal with the peer's address and the
reason, rate-limited, and counted in ``transport_refusals()``); pysyncobj redials as after any
lost connection, so no input can stop or stall the node. Without a cluster secret (loopback-only
development configs) the same wire runs under a fixed key: it then proves only that the peer
can reach loopback, and the quorum logs a WARNING saying so. The frames are authenticated, not
encrypted; with ``[tls]`` the whole wire runs inside mutual TLS against the cluster CA
(tls_wire.py), which adds confidentiality and a second, independent authentication (the
certificate must also cover the voter's host). pysyncobj's ``password`` encryption is not used.

framing.py holds the wire (handshake, frames, restricted unpickler), tls_wire.py the TLS under
it, connection.py one connection; this module holds the listener, the refusal log and the
transport class itself (_make_transport_class).
"""

from __future__ import annotations

import functools
import logging
import math
import socket
import time
from collections.abc import Callable
from typing import Any

from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE

from tidelog.controller.raft.connection import _RaftConnection
from tidelog.controller.raft.framing import _KEEPALIVE_TYPE, _Handshake
from tidelog.controller.raft.patches import _RejectFloor
from tidelog.controller.raft.settings import RaftSettings
from tidelog.controller.raft.tls_wire import _TlsContexts

logger = logging.getLogger("controller.raft")  # one logger for the whole adapter

#: Incoming connections still in their handshake; past it, the oldest of them is closed.
_PENDING_HANDSHAKES_MAX = 16
#: A refusal is logged the first time per (peer host, reason), then at most once per interval.
_REFUSAL_LOG_INTERVAL_S = 60.0
_REFUSAL_LOG_KEYS_MAX = 1_000


class _Refusals:
    """Counts refused connections and logs them, rate-limited per (peer host, reason)."""

    def __init__(self) -> None:
        self.total = 0
        self._logged: dict[tuple[str, str], tuple[float, int]] = {}

    def record(self, remote: str, claimed: str | None, reason: str) -> None:
        self.total += 1
        key = (remote.rsplit(":", 1)[0], reason)
        now = time.monotonic()
        last, suppressed = self._logged.get(key, (-math.inf, 0))
        if now - last < _REFUSAL_LOG_INTERVAL_S:
            self._logged[key] = (last, suppressed + 1)
            return
        if len(self._logged) >= _REFUSAL_LOG_KEYS_MAX:
            self._logged.clear()
        self._logged[key] = (now, 0)
        logger.warning("raft: refused the connection with %s (voter address %s): %s%s", remote,
                       claimed or "not given", reason,
                       f" ({suppressed} more like it not logged)" if suppressed else "")


class _RaftListener:
    """pysyncobj's TcpServer, bound exactly at the host it is given (never a wildcard of its
    own choosing), handing each accepted socket to ``on_accept``."""

    #: Connections accepted per poller event, so a flood cannot hold the tick thread.
    _ACCEPTS_PER_EVENT_MAX = 16

    def __init__(self, poller: Any, host: str, port: int,
                 on_accept: Callable[[socket.socket], None], *, buffer_bytes: int) -> None:
        self._poller = poller
        self.host = host
        self.port = port
        self._on_accept = on_accept
        self._buffer_bytes = buffer_bytes
        self._socket: socket.socket | None = None

    def bind(self) -> None:
        family, kind, proto, _name, address = socket.getaddrinfo(
            self.host, self.port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setblocking(False)
            sock.bind(address)
            sock.listen(_PENDING_HANDSHAKES_MAX)
        except BaseException:
            sock.close()
            raise
        self._socket = sock
        self._poller.subscribe(sock.fileno(), self._on_event,
                               POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.ERROR)

    def unbind(self) -> None:
        sock, self._socket = self._socket, None
        if sock is not None:
            self._poller.unsubscribe(sock.fileno())
            sock.close()

    def _on_event(self, _fd: int, event: int) -> None:
        if event & POLL_EVENT_TYPE.ERROR:
            logger.error("raft: the listener on %s:%s reported an error", self.host, self.port)
        for _ in range(self._ACCEPTS_PER_EVENT_MAX):
            if self._socket is None:
                return
            try:
                sock, _address = self._socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                logger.warning("raft: accept on %s:%s failed", self.host, self.port,
                               exc_info=True)
                return
            self._on_accept(sock)


def _make_transport_class(settings: RaftSettings, on_forward_attempt: Callable[[Any], None], *,
                          key: bytes, tls: _TlsContexts | None = None) -> type:
    """pysyncobj's TCP transport over Tidelog's wire, with three more changes.

    Wire. Connections are _RaftConnection (handshake keyed by ``key``, MAC'd frames, restricted
    unpickler; inside mutual TLS with ``tls``) and the listener is _RaftListener on
    SyncObjConf.bindAddress. A listener accepts
    only a configured voter whose address is greater than its own (pysyncobj's rule for who
    dials whom) and that proved the key; it answers no utility message (none is registered:
    syncobj_admin's status, add, remove, set_version, transfer) and admits no read-only node.

    No forwarding. pysyncobj sends a command queued on a node that is no longer the leader to the
    leader it knows ("apply_command"). Proposals are checked for leadership and epoch just before
    they are queued, and pysyncobj appends them within the next tick, but it drains its queue
    for at most one append-entries period of wall-clock time: a starved process (GIL contention)
    can leave some queued across a tick in which leadership moved. Those must not be appended by
    another leader in another epoch, so the send is refused and the proposal fails NOT_LEADER.

    Keepalive. A tiny message to every connected peer each ``peer_keepalive_s``. pysyncobj drops
    a connection when it SENDS on one that has read nothing for connectionTimeout. Followers
    never talk to each other, so after an idle spell the first vote request between them is
    dropped with the link, costing a whole extra election round on failover (measured: 0.70 s
    instead of 0.37 s). A keepalive that the receiver ignores (unknown message types fall
    through pysyncobj's handler) keeps those links readable, and keeps connectionTimeout
    meaningful as dead-peer detection.

    Rejection floor. As a follower, this node's rejections to a leader go through _RejectFloor,
    so a pipelined "gap" rejection cannot undo a "conflict" one (reject-pingpong, sim seed 6: a
    healthy cluster could stop committing).
    """
    from pysyncobj.transport import TCPTransport

    class TidelogTCPTransport(TCPTransport):  # type: ignore[misc]
        _keepalive_message = {"type": _KEEPALIVE_TYPE}

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._next_keepalive = 0.0
            self._reject_floor = _RejectFloor()
            self._refusals = _Refusals()
            super().__init__(*args, **kwargs)

        # --- wire: listener and connections

        def _createServer(self) -> None:
            bind_address = self._syncObj.conf.bindAddress
            if not bind_address:
                raise RuntimeError("the Raft transport needs an explicit bindAddress")
            host, port = bind_address.rsplit(":", 1)
            self._server = _RaftListener(self._syncObj._poller, host.strip("[]"), int(port),
                                         self._on_accept,
                                         buffer_bytes=self._syncObj.conf.recvBufferSize)

        def _new_connection(self, sock: socket.socket | None,
                            dial_address: str | None) -> _RaftConnection:
            conf = self._syncObj.conf
            return _RaftConnection(
                self._syncObj._poller,
                functools.partial(_Handshake, key, self_address=self._selfNode.address,
                                  dial_address=dial_address, accept_peer=self._accept_peer),
                sock=sock, timeout_s=conf.connectionTimeout, buffer_bytes=conf.recvBufferSize,
                keepalive=conf.tcp_keepalive, on_refused=self._on_refused, tls=tls)

        def addNode(self, node: Any) -> None:
            # pysyncobj's addNode with our connection for the nodes this one dials.
            self._nodes.add(node)
            self._nodeAddrToNode[node.address] = node
            if self._shouldConnect(node):
                conn = self._new_connection(None, node.address)
                conn.setOnConnectedCallback(functools.partial(self._onOutgoingConnected, conn))
                conn.setOnMessageReceivedCallback(
                    functools.partial(self._onMessageReceived, node))
                conn.setOnDisconnectedCallback(functools.partial(self._onDisconnected, conn))
                self._connections[node] = conn

        def _on_accept(self, sock: socket.socket) -> None:
            if len(self._unknownConnections) >= _PENDING_HANDSHAKES_MAX:
                # The oldest goes, not the newest: a voter finishes its handshake in one round
                # trip, so connections left open in it cannot keep the voters out.
                oldest = min(self._unknownConnections, key=lambda c: c.handshake_deadline)
                self._on_refused(oldest, f"more than {_PENDING_HANDSHAKES_MAX} connections "
                                 f"in handshake: the oldest is closed")
                oldest.disconnect()
            conn = self._new_connection(sock, None)
            conn.on_authenticated = functools.partial(self._on_incoming_authenticated, conn)
            conn.setOnDisconnectedCallback(functools.partial(self._onDisconnected, conn))
            self._unknownConnections.add(conn)

        def _accept_peer(self, address: str) -> str | None:
            """Why a listener refuses a dialer claiming ``address``, or None."""
            if address not in self._nodeAddrToNode:
                return f"{address!r} is not a voter of this quorum"
            if not address > self._selfNode.address:
                return f"voter {address} must not dial this node: this node dials it"
            return None

        def _on_incoming_authenticated(self, conn: _RaftConnection, address: str) -> None:
            # pysyncobj's _onIncomingMessageReceived for a voter's address, after the proof.
            node = self._nodeAddrToNode[address]
            self._unknownConnections.discard(conn)
            old = self._connections.get(node)
            self._connections[node] = conn
            conn.setOnMessageReceivedCallback(functools.partial(self._onMessageReceived, node))
            if old is not None and old is not conn:
                old.disconnect()  # the peer redialled; no longer mapped, so no callback
            self._onNodeConnected(node)

        def _onIncomingMessageReceived(self, conn: Any, message: Any) -> None:
            # pysyncobj's utility messages, 'readonly' and address announcements: never here.
            self._on_refused(conn, "a message before the handshake")
            conn.disconnect()

        def _onOutgoingConnected(self, conn: Any) -> None:
            # The handshake told the listener who this node is (pysyncobj sends it, pickled).
            self._onNodeConnected(self._connToNode(conn))

        def setOnUtilityMessageCallback(self, message: str, callback: Any) -> None:
            pass  # syncobj_admin's commands are not served: nothing is registered

        def _on_refused(self, conn: Any, reason: str) -> None:
            self._refusals.record(getattr(conn, "remote", "?"),
                                  getattr(conn, "claimed_address", None), reason)

        # --- sending, forwarding, keepalive

        def send(self, node: Any, message: Any) -> bool:
            if isinstance(message, dict) and message.get("type") == "apply_command":
                on_forward_attempt(message.get("command"))
                return False
            return bool(super().send(node, self._reject_floor.apply(node, message)))

        def _onTick(self) -> None:
            super()._onTick()
            now = time.monotonic()
            for conn in list(self._connections.values()) + list(self._unknownConnections):
                conn.check_timeout(now)
            if now < self._next_keepalive:
                return
            self._next_keepalive = now + settings.peer_keepalive_s
            for node, connection in list(self._connections.items()):
                if node in self._nodes and connection.state == CONNECTION_STATE.CONNECTED:
                    self.send(node, self._keepalive_message)

    return TidelogTCPTransport
