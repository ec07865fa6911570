"""The controller's Raft adapter: the one package in Tidelog that imports pysyncobj.

pysyncobj may be imported only inside this package ("one module per library", here one package):
the metadata state machine, the managers and everything else in the controller stay free of it.

It replicates opaque byte batches and knows nothing about metadata records. The controller hands
it a :class:`StateMachine` (its image + replay) and proposes protobuf-encoded record batches; every
controller applies every committed batch in log order.

API (all thread-safe unless noted)::

    quorum = RaftQuorum(node_id, "127.0.0.1:9094", ["127.0.0.1:9095", ...], data_dir,
                        state_machine, settings=RaftSettings(),
                        bind_address="127.0.0.1:9094", cluster_secret=secret_or_None,
                        tls_files=TlsFiles_or_None)    # [tls]: the transport in mutual TLS
    quorum.propose(batch, *, leader_epoch=None, timeout_ms=None) -> Future[int]   # index
    await quorum.propose_async(batch, ...) -> int
    quorum.on_leadership_change(callback)        # callback(is_leader: bool, leader_epoch: int)
    quorum.force_snapshot()
    quorum.is_leader() / leader_address() / leader_epoch / commit_index / last_applied
    quorum.has_quorum / peer_connections() / patch_counts() / transport_refusals()
    quorum.status() -> dict / failure
    quorum.close()

Modules, one concept each (each module's docstring says what and how):

* quorum.py: RaftQuorum, the StateMachine protocol, the tick thread, proposals, the log entry
  envelope, snapshot hooks, durability;
* settings.py: RaftSettings; errors.py: FailReason, ProposeError, RaftStartError;
* journal.py: DurableJournal, the Raft log and term/vote on disk (fsynced, preallocated,
  CRC-chained records, atomic compaction), pysyncobj's Journal interface; JournalError;
* patches.py: _PatchedSyncObj and _RejectFloor (Raft's rules where pysyncobj 0.3.17 breaks
  them) and the version and SHA-256 guard on pysyncobj's code, checked on import;
* self_test.py: the patches' start-up self-test;
* snapshot_codec.py: the snapshot file format (pure);
* framing.py: the transport's wire, handshake, frames and restricted unpickler (pure: no
  pysyncobj import); tls_wire.py: mutual TLS under that wire, over memory BIOs, and the
  certificate contexts that reload renewed files (no pysyncobj import either);
  connection.py: one connection over both; transport.py: the listener and pysyncobj's
  TCPTransport over Tidelog's wire (_make_transport_class).

The Raft word "term" stays inside this package: outside it is the quorum's ``leader_epoch``.
"""

from __future__ import annotations

import _socket
import socket

# Importing pysyncobj runs pysyncobj/win_inet_pton.py (pysyncobj.tcp_connection imports it),
# which replaces socket.inet_ntop in the WHOLE process with a Windows-only version that raises
# TypeError elsewhere (it would break any code in the controller that formats an address). So
# inet_ntop is saved before the first pysyncobj import and restored right after. If pysyncobj
# was imported before this package (tests/sim does), the saved one is already pysyncobj's: the
# C implementation is put back instead. Every submodule is imported below, after this, and
# importing any of them runs this first.
_socket_inet_ntop = socket.inet_ntop

from pysyncobj.win_inet_pton import inet_ntop as _windows_inet_ntop  # noqa: E402

socket.inet_ntop = _socket.inet_ntop if _socket_inet_ntop is _windows_inet_ntop \
    else _socket_inet_ntop

# The public API, then the private names the tests use (explicit re-exports: "as" keeps them
# exported under mypy --strict).
from tidelog.controller.raft.errors import FailReason, ProposeError, RaftStartError  # noqa: E402
from tidelog.controller.raft.framing import _CHALLENGE as _CHALLENGE  # noqa: E402
from tidelog.controller.raft.framing import _FRAME_BYTES_MAX as _FRAME_BYTES_MAX  # noqa: E402
from tidelog.controller.raft.framing import _FRAME_LENGTH as _FRAME_LENGTH  # noqa: E402
from tidelog.controller.raft.framing import _FRAME_SEQ as _FRAME_SEQ  # noqa: E402
from tidelog.controller.raft.framing import (  # noqa: E402
    _HANDSHAKE_FRAME_BYTES_MAX as _HANDSHAKE_FRAME_BYTES_MAX,
)
from tidelog.controller.raft.framing import _HELLO as _HELLO  # noqa: E402
from tidelog.controller.raft.framing import _MAC_BYTES as _MAC_BYTES  # noqa: E402
from tidelog.controller.raft.framing import _NO_OP_COMMAND as _NO_OP_COMMAND  # noqa: E402
from tidelog.controller.raft.framing import _NONCE_BYTES as _NONCE_BYTES  # noqa: E402
from tidelog.controller.raft.framing import _PROOF as _PROOF  # noqa: E402
from tidelog.controller.raft.framing import _WIRE_MAGIC as _WIRE_MAGIC  # noqa: E402
from tidelog.controller.raft.framing import _decode_message as _decode_message  # noqa: E402
from tidelog.controller.raft.framing import _encode_message as _encode_message  # noqa: E402
from tidelog.controller.raft.framing import _FrameCodec as _FrameCodec  # noqa: E402
from tidelog.controller.raft.framing import _Handshake as _Handshake  # noqa: E402
from tidelog.controller.raft.framing import _mac as _mac  # noqa: E402
from tidelog.controller.raft.framing import _PeerRefused as _PeerRefused  # noqa: E402
from tidelog.controller.raft.framing import _transcript as _transcript  # noqa: E402
from tidelog.controller.raft.journal import DurableJournal as DurableJournal  # noqa: E402
from tidelog.controller.raft.journal import JournalError  # noqa: E402
from tidelog.controller.raft.patches import _PYSYNCOBJ_SHA256 as _PYSYNCOBJ_SHA256  # noqa: E402
from tidelog.controller.raft.patches import PysyncobjMismatchError  # noqa: E402
from tidelog.controller.raft.patches import _check_pysyncobj as _check_pysyncobj  # noqa: E402
from tidelog.controller.raft.patches import _PatchedSyncObj as _PatchedSyncObj  # noqa: E402
from tidelog.controller.raft.patches import _RejectFloor as _RejectFloor  # noqa: E402
from tidelog.controller.raft.quorum import RaftQuorum, StateMachine  # noqa: E402
from tidelog.controller.raft.self_test import _run_self_test as _run_self_test  # noqa: E402
from tidelog.controller.raft.self_test import _self_test as _self_test  # noqa: E402
from tidelog.controller.raft.self_test import _SelfTestTransport as _SelfTestTransport  # noqa: E402
from tidelog.controller.raft.settings import RaftSettings  # noqa: E402
from tidelog.controller.raft.snapshot_codec import SnapshotCorruptError  # noqa: E402
from tidelog.controller.raft.transport import (  # noqa: E402
    _PENDING_HANDSHAKES_MAX as _PENDING_HANDSHAKES_MAX,
)

__all__ = [
    "FailReason",
    "JournalError",
    "ProposeError",
    "PysyncobjMismatchError",
    "RaftQuorum",
    "RaftSettings",
    "RaftStartError",
    "SnapshotCorruptError",
    "StateMachine",
]
