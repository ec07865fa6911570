"""The controller's Raft adapter: the one module in Tidelog that imports pysyncobj.

It replicates opaque byte batches and knows nothing about metadata records. The controller hands
it a :class:`StateMachine` (its image + replay) and proposes protobuf-encoded record batches; every
controller applies every committed batch in log order.

API (all thread-safe unless noted)::

    quorum = RaftQuorum(node_id, "127.0.0.1:9094", ["127.0.0.1:9095", ...], data_dir,
                        state_machine, settings=RaftSettings(),
                        bind_address="127.0.0.1:9094", cluster_secret=secret_or_None)
    quorum.propose(batch, *, leader_epoch=None, timeout_ms=None) -> Future[int]   # index
    await quorum.propose_async(batch, ...) -> int
    quorum.on_leadership_change(callback)        # callback(is_leader: bool, leader_epoch: int)
    quorum.force_snapshot()
    quorum.is_leader() / leader_address() / leader_epoch / commit_index / last_applied
    quorum.has_quorum / peer_connections() / patch_counts() / transport_refusals()
    quorum.status() -> dict / failure
    quorum.close()

Transport. pysyncobj's own TCP transport binds 0.0.0.0 unless told otherwise, unpickles every
message it reads before anything is authenticated (a pickle runs code), serves syncobj_admin's
utility messages and admits any 'readonly' peer. Ours (_make_transport_class) keeps pysyncobj's
connection management and replaces the wire:

* the listener binds exactly ``bind_address`` (default: self_address; never a wildcard unless
  given one, and a non-loopback one needs a cluster secret);
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

Anything else closes that connection (logged as a refusal with the peer's address and the
reason, rate-limited, and counted in ``transport_refusals()``); pysyncobj redials as after any
lost connection, so no input can stop or stall the node. Without a cluster secret (loopback-only
development configs) the same wire runs under a fixed key: it then proves only that the peer
can reach loopback, and the quorum logs a WARNING saying so. Frames are authenticated, not
encrypted: confidentiality comes with TLS (the security issue). pysyncobj's ``password``
encryption is not used.

pysyncobj is patched. pysyncobj 0.3.17 breaks Raft's safety in its follower's append_entries
and snapshot handling (tests/sim found it: acknowledged, committed entries lost; state machines
diverging or going back in time). Every quorum runs ``_PatchedSyncObj``, a subclass that restores
Raft's rules in three of SyncObj's private methods (see its docstring for each bug, its sim seed
and the rule), and its transport applies ``_RejectFloor`` (reject-pingpong, a livelock). The
patches are guarded: importing this module checks pysyncobj's version and the SHA-256 of the two
modules they depend on (PysyncobjMismatchError otherwise), and the first quorum to start runs a
self-test that replays the bug's messages. tests/sim runs this very code (``patched="adapter"``).

Threading. The adapter owns one thread, ``raft-<node_id>``, that constructs the SyncObj (with
``autoTick=False``), runs every pysyncobj tick, and destroys it. pysyncobj's own auto-tick thread
dies with the thread that constructed the SyncObj (measured), so owning the thread is the robust
choice: callers may construct a ``RaftQuorum`` from any thread, including a short-lived one. Every
StateMachine call (``apply``, ``snapshot``, ``restore``), every leadership callback and every
Future completion happens on that one thread, in log order. Callbacks must not block; hand work to
an event loop with ``loop.call_soon_threadsafe``. Proposing from a callback is fine (non-blocking).

Log entries. There is one replicated method, ``append(batch: bytes)``, pysyncobj method id 0,
code version 0. The journal entry is pysyncobj's 1-byte command type followed by
``pickle.dumps((0, (batch,)), protocol=4)``, which we build ourselves: protocol 4 stores ``bytes``
raw (``BINBYTES``), so an entry holds only an int and the batch, no ``GLOBAL`` opcodes and no 1.5x
latin-1 blow-up that pysyncobj's protocol 2 gives binary data. A unit test decodes every journal
entry with an unpickler that refuses all globals. A new entry format would be ``@replicated(ver=1)``
rolled out with ``setCodeVersion``; existing ids do not shift because versions sort after 0.

Snapshots (log compaction) are off unless ``RaftSettings.snapshot_min_entries`` is set: the Raft
log then stays in memory and in the journal for good (fine at metadata rates; start-up replays it
all). On, they run pysyncobj's snapshot path, which is unsafe unpatched; with the patches it
passes the simulation (docs/decisions.md, "Raft adapter"). ``force_snapshot`` works either way.
``SyncObjConf(serializer=, deserializer=)`` write and read our own file: a header, the
two Raft entries pysyncobj needs, the cluster's addresses, and ``StateMachine.snapshot()`` bytes,
with a CRC-32 checked on read. pysyncobj pickles no attributes when a custom serializer is set.
A snapshot that fails its CRC or whose ``restore`` raises stops the node (see ``failure``) instead
of letting pysyncobj log and carry on from an empty state machine.

Proposals. Only the leader proposes: ``propose`` fails fast with ``ProposeError(NOT_LEADER)`` on
a follower. Proposals are handed to pysyncobj on the tick thread, right after checking leadership
(and ``leader_epoch`` when given), and pysyncobj appends them within the same tick, so a proposal
is appended in the epoch it was checked against or fails. It is never forwarded to another leader
(the transport refuses; see _make_transport_class). The one gap: in a process starved for a whole
election timeout, a proposal could wait in pysyncobj's queue while this node loses and regains
leadership, and be appended in the later epoch; replay re-checks every record anyway.

The Future resolves with the Raft log index once the entry is committed in the epoch it was
appended in AND applied locally. On becoming leader, the controller proposes a NoOp with
``leader_epoch`` and acts on its image only once that resolves: pysyncobj may briefly have two
leaders, and only a committed entry of its own epoch proves that the local image holds every
entry committed before it.

Durability. pysyncobj's journal is an mmap without fsync (its meta file neither): it survives
kill -9 (the page cache has it) but not power loss or a VM crash. Snapshots this node writes are
fsynced; so is one received from the leader (the patched receive path).

The Raft word "term" stays inside this module: outside it is the quorum's ``leader_epoch``.
"""

from __future__ import annotations

import _socket
import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import enum
import functools
import gzip
import hashlib
import hmac
import io
import logging
import math
import os
import pickle
import secrets
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

# Importing pysyncobj runs pysyncobj/win_inet_pton.py (tcp_connection imports it), which replaces
# socket.inet_ntop in the WHOLE process with a Windows-only version that raises TypeError
# elsewhere. Saved here and restored right after pysyncobj's imports below; if pysyncobj was
# imported before this module (tests/sim does), the saved one is already pysyncobj's, so the
# C implementation is put back instead.
_socket_inet_ntop = socket.inet_ntop

import pysyncobj.syncobj as syncobj_module  # noqa: E402
import pysyncobj.version as pysyncobj_version  # noqa: E402
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated  # noqa: E402
from pysyncobj.node import Node  # noqa: E402
from pysyncobj.poller import POLL_EVENT_TYPE  # noqa: E402
from pysyncobj.syncobj import _COMMAND_TYPE  # noqa: E402
from pysyncobj.tcp_connection import CONNECTION_STATE, _getAddrType, set_keepalive  # noqa: E402
from pysyncobj.transport import Transport  # noqa: E402
from pysyncobj.win_inet_pton import inet_ntop as _windows_inet_ntop  # noqa: E402

from tidelog.cluster_secret import derive_key, is_loopback  # noqa: E402

socket.inet_ntop = _socket.inet_ntop if _socket_inet_ntop is _windows_inet_ntop \
    else _socket_inet_ntop

__all__ = [
    "FailReason",
    "ProposeError",
    "PysyncobjMismatchError",
    "RaftQuorum",
    "RaftSettings",
    "RaftStartError",
    "SnapshotCorruptError",
    "StateMachine",
]

logger = logging.getLogger(__name__)

# pysyncobj's states (its _RAFT_STATE is private; these values are its wire/status values).
_STATE_LEADER = 2

#: Method id of ``append`` on the wire and in the journal. It is id 0 because it is the only
#: replicated method at code version 0; asserted when the SyncObj is built.
_APPEND_METHOD_ID = 0
#: logCompactionMinEntries when compaction is off: more entries than a log can hold.
_NEVER_ENTRIES = 2**62
#: Pickle protocol of the entry envelope: 4 stores bytes raw; pysyncobj's own 2 does not.
_ENVELOPE_PICKLE_PROTOCOL = 4
#: Upper bound of what the envelope adds to a batch (type byte, pickle framing, int, tuples).
_ENVELOPE_BYTES_MAX = 64
#: pysyncobj's command-type byte for a call of a replicated method.
_REGULAR_COMMAND_PREFIX = bytes([_COMMAND_TYPE.REGULAR])
#: Largest frame of the Raft transport (sequence number, MAC and payload); a peer announcing a
#: bigger one is disconnected. RaftSettings keeps what pysyncobj sends below it.
_FRAME_BYTES_MAX = 16 * 1024 * 1024

#: Proposals handed to pysyncobj per tick. pysyncobj drains its queue for at most one
#: append-entries period per tick; one left in its queue across a tick may meet a leadership
#: change (see _make_transport_class). 64 appends take a few ms when the process is not starved.
_PROPOSALS_PER_TICK_MAX = 64
#: How long close() waits for the tick thread; a tick never blocks longer than tick_period_s
#: plus a snapshot write.
_CLOSE_TIMEOUT_S = 10.0

_SNAPSHOT_MAGIC = b"TLRAFTSN"
_SNAPSHOT_FORMAT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct("<8sIQQQQ")  # magic, version, last/prev index, last/prev term
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")



class StateMachine(Protocol):
    """What the adapter drives. Every call comes from the adapter's one tick thread, in order."""

    def apply(self, batch: bytes, index: int) -> None:
        """Replays one committed batch. ``index`` is the Raft log index, for logs and metrics:
        indexes increase but have gaps (pysyncobj's own no-op entries are not passed on).
        Raising stops the node: a state machine that could not apply an entry has diverged."""

    def snapshot(self) -> bytes:
        """Returns the whole state as of the last applied batch (protobuf bytes of the image)."""

    def restore(self, data: bytes) -> None:
        """Replaces the whole state with a ``snapshot()`` result (on start or when the leader
        sends one). The state machine must start empty: on start the adapter restores the
        latest snapshot, if any, then applies the journal's committed entries after it."""


class FailReason(enum.IntEnum):
    """Why a proposal failed: pysyncobj's FAIL_REASON values, plus the adapter's own (>= 100)."""

    SUCCESS = FAIL_REASON.SUCCESS
    QUEUE_FULL = FAIL_REASON.QUEUE_FULL
    MISSING_LEADER = FAIL_REASON.MISSING_LEADER
    DISCARDED = FAIL_REASON.DISCARDED
    NOT_LEADER = FAIL_REASON.NOT_LEADER
    LEADER_CHANGED = FAIL_REASON.LEADER_CHANGED
    REQUEST_DENIED = FAIL_REASON.REQUEST_DENIED
    UNKNOWN_OUTCOME = FAIL_REASON.UNKNOWN_OUTCOME
    #: No outcome within the proposal's timeout; the entry may still commit later.
    REQUEST_TIMED_OUT = 100
    #: The quorum was closed (or failed) before the outcome was known.
    CLOSED = 101


#: Reasons after which the batch is known NOT to be in the log (safe to rebuild and re-propose).
_NOT_APPENDED = frozenset(
    {FailReason.QUEUE_FULL, FailReason.MISSING_LEADER, FailReason.NOT_LEADER,
     FailReason.DISCARDED, FailReason.REQUEST_DENIED}
)


class ProposeError(Exception):
    """A proposal did not commit. Callers answer NOT_CONTROLLER (with ``leader_address``)."""

    def __init__(self, reason: FailReason, *, leader_address: str | None, detail: str = "") -> None:
        self.reason = reason
        self.leader_address = leader_address
        text = f"proposal failed: {reason.name}"
        if detail:
            text += f" ({detail})"
        if leader_address:
            text += f"; last known leader {leader_address}"
        super().__init__(text)

    @property
    def outcome_known(self) -> bool:
        """True when the batch is certainly not in the log; False when it may still commit."""
        return self.reason in _NOT_APPENDED


class RaftStartError(Exception):
    """The quorum could not start (bind failure, unreadable journal)."""


class SnapshotCorruptError(Exception):
    """A snapshot file failed its magic, version, length or CRC check."""


@dataclasses.dataclass(frozen=True)
class RaftSettings:
    """Every timing and limit of the quorum; docs/decisions.md ("Raft adapter") says why."""

    #: Heartbeat (append-entries) period when idle; appends are sent at once regardless.
    append_entries_period_s: float = 0.05
    #: Randomised election timeout range; > 3 heartbeats so one lost packet is no election.
    election_timeout_min_s: float = 0.25
    election_timeout_max_s: float = 0.5
    #: A connection with nothing read for this long is dropped and redialled.
    connection_timeout_s: float = 2.0
    #: How often to redial a peer; pysyncobj's 5 s default made restarts take ~4 s (measured).
    connection_retry_s: float = 0.5
    #: Peer-to-peer keepalive period, so idle follower-follower links stay readable (see docs).
    peer_keepalive_s: float = 0.5
    #: A leader that heard from no majority for this long steps down (pysyncobj default 30 s).
    leader_fallback_timeout_s: float = 2.0
    #: Longest wait in one poll of the tick loop; proposals and sockets wake it earlier.
    tick_period_s: float = 0.05
    #: Log compaction (snapshots) after this many log entries or this long, whichever first;
    #: 0 = never (the default). Off, the whole Raft log stays in memory and in the journal for
    #: good: fine at metadata rates, but start-up replays it all (pysyncobj reads the whole
    #: journal: ~0.55 s per 100k entries measured, libraries.md section 1). On is an opt-in
    #: that runs pysyncobj's snapshot code, which is unsafe unpatched (tests/sim README bugs
    #: 1, 2, 7) and is covered here by _PatchedSyncObj only (see docs/decisions.md).
    snapshot_min_entries: int = 0
    snapshot_interval_s: float = 600.0
    #: Snapshot bytes per message when a follower is sent a snapshot.
    snapshot_chunk_bytes: int = 256 * 1024
    #: Largest batch ``propose`` accepts (Kafka's message.max.bytes scale); split bigger ones.
    batch_bytes_max: int = 1024 * 1024
    #: Bytes of entries per append-entries message; must hold the largest entry whole, since
    #: pysyncobj's path for an entry larger than this mis-marks its last chunk (read the source).
    append_entries_bytes_max: int = 2 * 1024 * 1024
    #: Proposals queued or awaiting commit; beyond it ``propose`` fails with QUEUE_FULL.
    proposals_in_flight_max: int = 1_000
    #: Default time for a proposal to resolve before REQUEST_TIMED_OUT.
    propose_timeout_ms: int = 5_000
    #: Socket buffers (pysyncobj's defaults, stated so they are not forgotten).
    socket_buffer_bytes: int = 64 * 1024
    #: (idle_s, interval_s, probes) of TCP keepalive (pysyncobj's default).
    tcp_keepalive: tuple[int, int, int] = (16, 3, 5)

    @property
    def snapshots_on(self) -> bool:
        """Whether log compaction runs on its own (force_snapshot works either way)."""
        return self.snapshot_min_entries > 0

    def __post_init__(self) -> None:
        # pysyncobj's validate() asserts the first four; checking here gives a readable error.
        if not self.election_timeout_min_s > 3 * self.append_entries_period_s:
            raise ValueError("election_timeout_min_s must exceed 3 * append_entries_period_s")
        if not self.election_timeout_max_s > self.election_timeout_min_s:
            raise ValueError("election_timeout_max_s must exceed election_timeout_min_s")
        if not self.connection_timeout_s >= self.election_timeout_max_s:
            raise ValueError("connection_timeout_s must be >= election_timeout_max_s")
        if not self.leader_fallback_timeout_s > self.append_entries_period_s:
            raise ValueError("leader_fallback_timeout_s must exceed append_entries_period_s")
        if not 0 < self.peer_keepalive_s < self.connection_timeout_s:
            raise ValueError("peer_keepalive_s must be in (0, connection_timeout_s)")
        if not self.append_entries_bytes_max >= self.batch_bytes_max + _ENVELOPE_BYTES_MAX:
            raise ValueError("append_entries_bytes_max must hold batch_bytes_max plus envelope")
        if self.snapshot_min_entries == 1 or self.snapshot_min_entries < 0 \
                or self.snapshot_interval_s <= 0:
            raise ValueError("snapshot_min_entries must be 0 (off) or >= 2, and "
                             "snapshot_interval_s > 0")
        if self.proposals_in_flight_max < 1 or self.propose_timeout_ms < 1:
            raise ValueError("proposals_in_flight_max and propose_timeout_ms must be positive")
        if self.tick_period_s <= 0 or self.snapshot_chunk_bytes <= 0:
            raise ValueError("tick_period_s and snapshot_chunk_bytes must be positive")
        # An append_entries message holds entries adding up to less than
        # append_entries_bytes_max plus one batch; pickling adds well under 1.5x even for the
        # smallest entries (~20 bytes of command each). A snapshot chunk is one file read.
        if 3 * self.append_entries_bytes_max + self.batch_bytes_max > _FRAME_BYTES_MAX \
                or 2 * self.snapshot_chunk_bytes > _FRAME_BYTES_MAX:
            raise ValueError(f"append_entries_bytes_max or snapshot_chunk_bytes is too large "
                             f"for the Raft transport's frames of {_FRAME_BYTES_MAX} bytes")


class _AppendConsumer(SyncObjConsumer):  # type: ignore[misc]
    """Holds the one replicated method. It has no replicated attributes: snapshots go through
    our serializer, which never looks at consumers."""

    def __init__(self, on_append: Callable[[bytes], int]) -> None:
        # Assigned before SyncObjConsumer.__init__ so pysyncobj's attribute snapshot (unused with
        # a custom serializer) would exclude it anyway.
        self._on_append = on_append
        super().__init__()

    @replicated  # type: ignore[untyped-decorator]
    def append(self, batch: bytes) -> int:
        return self._on_append(batch)


class _StateMachineFailed(Exception):
    """Raised on the tick thread to abort a tick after the state machine failed."""


class _Wakeup:
    """A pipe in pysyncobj's poller, so a proposal or close() ends the tick's poll at once."""

    def __init__(self, poller: Any) -> None:
        self._poller = poller
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        poller.subscribe(self._read_fd, self._drain, POLL_EVENT_TYPE.READ)

    def notify(self) -> None:
        # A full pipe means a wakeup is already pending; closed means the loop has ended.
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._write_fd, b"w")

    def _drain(self, _fd: int, _event_mask: int) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read_fd, 4096):
                pass

    def close(self) -> None:
        self._poller.unsubscribe(self._read_fd)
        os.close(self._read_fd)
        os.close(self._write_fd)


@dataclasses.dataclass(eq=False)
class _Proposal:
    seq: int
    batch: bytes
    leader_epoch: int | None
    deadline: float
    future: concurrent.futures.Future[int]
    #: The command handed to pysyncobj (kept so its id() stays unique while it is tracked).
    command: bytes | None = None


class RaftQuorum:
    """A controller's membership in the Raft quorum. See the module docstring."""

    def __init__(
        self,
        node_id: int,
        self_address: str,
        peer_addresses: Sequence[str],
        data_dir: str | os.PathLike[str],
        state_machine: StateMachine,
        *,
        settings: RaftSettings,
        bind_address: str | None = None,
        cluster_secret: str | None = None,
        on_leadership_change: Callable[[bool, int], None] | None = None,
    ) -> None:
        peers = [p for p in peer_addresses if p != self_address]
        if len(set(peers)) != len(peers):
            raise ValueError(f"duplicate peer addresses: {list(peer_addresses)}")
        #: Where the Raft port listens: exactly this host:port (never a wildcard by default).
        self.bind_address = bind_address or self_address
        bind_host = self.bind_address.rsplit(":", 1)[0].strip("[]")
        if cluster_secret is None and not is_loopback(bind_host):
            raise ValueError(f"raft node {node_id}: binding {self.bind_address} (not loopback) "
                             f"needs a cluster secret")
        self.node_id = node_id
        self.self_address = self_address
        self.peer_addresses: tuple[str, ...] = tuple(sorted(peers))
        self._settings = settings
        self._state_machine = state_machine
        self._data_dir = Path(data_dir)
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self.journal_path = self._data_dir / "raft.journal"
        self.snapshot_path = self._data_dir / "raft.snapshot"

        self._lock = threading.Lock()  # guards the three collections below and _next_seq
        self._queued: collections.deque[_Proposal] = collections.deque()
        self._in_flight: dict[int, _Proposal] = {}
        self._tick_tasks: collections.deque[Callable[[], None]] = collections.deque()
        self._next_seq = 0

        self._listeners: list[Callable[[bool, int], None]] = []  # tick thread only
        self._was_leader = False  # tick thread only
        self._applied_index = 0  # tick thread only: last index given to the state machine
        self._handed: dict[int, _Proposal] = {}  # tick thread only: id(command) -> proposal
        self._last_expiry_check = 0.0
        self._failure: BaseException | None = None
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._syncobj: Any = None
        self._wakeup: _Wakeup | None = None
        if on_leadership_change is not None:
            self._listeners.append(on_leadership_change)

        _self_test()
        started = threading.Event()
        start_error: list[BaseException] = []
        # A daemon, so a process that forgets close() still exits (as pysyncobj's own thread
        # ends with the main thread); the journal is then as after kill -9.
        if cluster_secret is None:
            logger.warning(
                "raft node %d: no cluster secret: the Raft transport's handshake proves only "
                "that a peer can reach %s (loopback); set cluster_secret_file before binding "
                "anything else", node_id, self.bind_address)
            key = _NO_SECRET_KEY
        else:
            key = derive_key(cluster_secret, "raft")
        self._thread = threading.Thread(
            target=self._run, args=(key, started, start_error),
            name=f"raft-{node_id}", daemon=True,
        )
        self._thread.start()
        started.wait()
        if start_error:
            self._thread.join(_CLOSE_TIMEOUT_S)
            raise RaftStartError(f"raft node {node_id} at {self_address}: {start_error[0]!r}") \
                from start_error[0]

    # ----------------------------------------------------------------------------- proposing

    def propose(
        self, batch: bytes, *, leader_epoch: int | None = None, timeout_ms: int | None = None
    ) -> concurrent.futures.Future[int]:
        """Proposes one batch; the Future gives its log index once committed and applied here.

        Fails (through the Future) with ProposeError: NOT_LEADER at once on a follower, or when
        ``leader_epoch`` is given and is no longer this leader's epoch when the batch reaches
        pysyncobj; QUEUE_FULL, DISCARDED, MISSING_LEADER, REQUEST_TIMED_OUT, CLOSED otherwise.
        Raises ValueError for a batch that is not bytes or exceeds ``batch_bytes_max``.
        """
        if not isinstance(batch, bytes):
            raise ValueError(f"batch must be bytes, not {type(batch).__name__}")
        if len(batch) > self._settings.batch_bytes_max:
            raise ValueError(
                f"batch of {len(batch)} bytes exceeds batch_bytes_max "
                f"{self._settings.batch_bytes_max}; split it"
            )
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        reason = self._check_can_propose(leader_epoch)
        if reason is not None:
            future.set_exception(self._error(reason))
            return future
        timeout_s = (timeout_ms or self._settings.propose_timeout_ms) / 1000.0
        with self._lock:
            if len(self._in_flight) >= self._settings.proposals_in_flight_max:
                reason = FailReason.QUEUE_FULL
            else:
                proposal = _Proposal(self._next_seq, batch, leader_epoch,
                                     time.monotonic() + timeout_s, future)
                self._next_seq += 1
                self._in_flight[proposal.seq] = proposal
                self._queued.append(proposal)
        if reason is not None:
            future.set_exception(self._error(reason))
            return future
        self._notify()
        return future

    async def propose_async(
        self, batch: bytes, *, leader_epoch: int | None = None, timeout_ms: int | None = None
    ) -> int:
        """``propose`` for asyncio callers: returns the log index or raises ProposeError."""
        return await asyncio.wrap_future(
            self.propose(batch, leader_epoch=leader_epoch, timeout_ms=timeout_ms)
        )

    def on_leadership_change(self, callback: Callable[[bool, int], None]) -> None:
        """Registers ``callback(is_leader, leader_epoch)``. It is called once with the current
        state, then on every gain or loss of leadership, in order, on the tick thread."""

        def register() -> None:
            self._listeners.append(callback)
            self._call_listener(callback, self._was_leader, self._term())

        with self._lock:
            self._tick_tasks.append(register)
        self._notify()

    def force_snapshot(self) -> None:
        """Asks for a snapshot (log compaction) at the next tick, whatever the thresholds."""
        with self._lock:
            self._tick_tasks.append(lambda: self._syncobj.forceLogCompaction())
        self._notify()

    # -------------------------------------------------------------------------------- status

    def is_leader(self) -> bool:
        """True while pysyncobj is in the leader state (briefly, two nodes may both be)."""
        obj = self._syncobj
        # After close or a failure pysyncobj's state still says leader: it is not ticking.
        return obj is not None and not self._stopping.is_set() and bool(obj._isLeader())

    def leader_address(self) -> str | None:
        """The last known leader's Raft address, or None during an election."""
        obj = self._syncobj
        if obj is None:
            return None
        leader = obj._getLeader()
        return None if leader is None else str(leader.address)

    @property
    def leader_epoch(self) -> int:
        """The quorum's epoch (Raft's current term) as this node knows it."""
        return self._term()

    @property
    def commit_index(self) -> int:
        obj = self._syncobj
        return 0 if obj is None else int(obj.raftCommitIndex)

    @property
    def last_applied(self) -> int:
        obj = self._syncobj
        return 0 if obj is None else int(obj.raftLastApplied)

    @property
    def has_quorum(self) -> bool:
        """Whether this node is connected to a majority (counting itself)."""
        connected = sum(self.peer_connections().values()) + 1
        return connected > (len(self.peer_addresses) + 1) / 2

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped the node (state machine or snapshot failure), if any."""
        return self._failure

    def is_ready(self) -> bool:
        """True once this node has applied everything the leader had committed when it joined."""
        return self._ready.is_set()

    def peer_connections(self) -> dict[str, bool]:
        """Peer address -> whether the Raft TCP connection to it is up."""
        obj = self._syncobj
        if obj is None:
            return {address: False for address in self.peer_addresses}
        # isNodeConnected is a set membership test: safe from any thread (getStatus() iterates
        # dicts the tick thread mutates, so it is not used here).
        return {str(node.address): bool(obj.isNodeConnected(node)) for node in obj.otherNodes}

    def peer_match_index(self) -> dict[str, int]:
        """On the leader: peer address -> highest log index known replicated there (empty on a
        follower). Read without the tick thread's cooperation, so a snapshot copy may race one
        update; a failed copy is retried once and then reported empty (it is for status only)."""
        obj = self._syncobj
        if obj is None or not self.is_leader():
            return {}
        for _ in range(2):
            try:
                match = dict(obj._SyncObj__raftMatchIndex)
            except RuntimeError:  # "dictionary changed size during iteration"
                continue
            return {str(node.address): int(idx) for node, idx in match.items()}
        return {}

    def patch_counts(self) -> dict[str, int]:
        """How often each pysyncobj patch took a path pysyncobj would have got wrong (see
        _PatchedSyncObj), plus "reject_floor_rewrite"; for status and metrics only, read without
        the tick thread's cooperation (a copy that races an update is retried, then empty)."""
        obj = self._syncobj
        if obj is None:
            return {}
        for _ in range(2):
            try:
                counts = dict(obj.tl_counts)
            except RuntimeError:  # "dictionary changed size during iteration"
                continue
            counts["reject_floor_rewrite"] = obj._SyncObj__transport._reject_floor.rewrites
            return counts
        return {}

    def transport_refusals(self) -> int:
        """Connections the Raft transport refused since start (not a voter, failed handshake
        or frame, too many handshakes); each is logged, rate-limited."""
        obj = self._syncobj
        return 0 if obj is None else int(obj._SyncObj__transport._refusals.total)

    def status(self) -> dict[str, Any]:
        """A point-in-time view for DescribeQuorum, /readyz and metrics (fields read separately,
        so not one atomic snapshot)."""
        with self._lock:
            in_flight = len(self._in_flight)
        return {
            "node_id": self.node_id,
            "self_address": self.self_address,
            "is_leader": self.is_leader(),
            "leader_address": self.leader_address(),
            "leader_epoch": self.leader_epoch,
            "commit_index": self.commit_index,
            "last_applied": self.last_applied,
            # Entries held in memory (and in the journal) since the last snapshot.
            "log_entries": 0 if self._syncobj is None else int(self._syncobj._getRaftLogSize()),
            "has_quorum": self.has_quorum,
            "ready": self.is_ready(),
            "peers": self.peer_connections(),
            "proposals_in_flight": in_flight,
            "peer_match_index": self.peer_match_index(),
            "pysyncobj_patches": self.patch_counts(),
            "transport_refused": self.transport_refusals(),
            "running": self._thread.is_alive(),
            "failure": None if self._failure is None else repr(self._failure),
        }

    # --------------------------------------------------------------------------------- close

    def close(self) -> None:
        """Stops the node: pending proposals fail with CLOSED, sockets close, the journal is
        flushed (msync) and closed. Idempotent. The same data dir may then be reopened."""
        self._stopping.set()
        self._notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(_CLOSE_TIMEOUT_S)
            if self._thread.is_alive():
                raise RuntimeError(f"raft node {self.node_id}: tick thread did not stop")

    def __enter__(self) -> RaftQuorum:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ tick thread: lifecycle

    def _run(self, key: bytes, started: threading.Event,
             start_error: list[BaseException]) -> None:
        try:
            consumer = _AppendConsumer(self._apply_committed)
            self._syncobj = _TidelogSyncObj(
                self.self_address, list(self.peer_addresses), self._build_conf(),
                consumers=[consumer],
                transportClass=_make_transport_class(self._settings, self._on_forward_attempt,
                                                     key=key),
            )
            method_name = self._syncobj._getFuncName((id(consumer), "append"))
            method_id = self._syncobj._methodToID[(id(consumer), method_name)]
            assert method_id == _APPEND_METHOD_ID, f"append has method id {method_id}"
            self._wakeup = _Wakeup(self._syncobj._poller)
        except BaseException as exc:
            start_error.append(exc)
            started.set()
            return
        started.set()
        logger.info("raft node %d started at %s (listening on %s) with peers %s",
                    self.node_id, self.self_address, self.bind_address,
                    list(self.peer_addresses))
        try:
            self._tick_loop()
        finally:
            self._shutdown()

    def _tick_loop(self) -> None:
        while not self._stopping.is_set() and self._failure is None:
            self._run_tick_tasks()
            self._hand_proposals_to_pysyncobj()
            try:
                self._syncobj.doTick(self._settings.tick_period_s)
            except _StateMachineFailed:
                break
            except Exception:
                # pysyncobj's own auto-tick loop does the same: log, pause a tick, go on. Its
                # handlers raise on malformed peer messages; that must not stop the node.
                logger.exception("raft node %d: pysyncobj tick failed", self.node_id)
                time.sleep(self._settings.tick_period_s)
            self._maybe_expire_proposals()

    def _shutdown(self) -> None:
        self._stopping.set()  # also after a failure: is_leader() and propose() see it
        obj = self._syncobj
        with contextlib.suppress(Exception):
            obj.destroy()  # autoTick=False: destroys transport and journal right here
        if self._wakeup is not None:
            self._wakeup.close()
            self._wakeup = None
        if self._was_leader:
            self._was_leader = False
            self._notify_listeners(False, int(obj.raftCurrentTerm))
        with self._lock:
            pending = list(self._in_flight.values())
            self._in_flight.clear()
            self._queued.clear()
        for proposal in pending:
            self._complete(proposal, None, FailReason.CLOSED)
        logger.info("raft node %d stopped%s", self.node_id,
                    "" if self._failure is None else f" after failure: {self._failure!r}")

    def _build_conf(self) -> SyncObjConf:
        s = self._settings
        # Every SyncObjConf field is given, so an upgrade's changed default changes nothing here
        # (a unit test checks that none is left out).
        return SyncObjConf(
            # pysyncobj's own encryption is never used: our transport authenticates every
            # connection and frame itself (see _make_transport_class).
            password=None,
            autoTick=False,  # our thread ticks: see the module docstring
            autoTickPeriod=s.tick_period_s,
            commandsQueueSize=s.proposals_in_flight_max,
            raftMinTimeout=s.election_timeout_min_s,
            raftMaxTimeout=s.election_timeout_max_s,
            appendEntriesPeriod=s.append_entries_period_s,
            connectionTimeout=s.connection_timeout_s,
            connectionRetryTime=s.connection_retry_s,
            leaderFallbackTimeout=s.leader_fallback_timeout_s,
            appendEntriesUseBatch=False,  # send each append at once: ~2k vs ~10 sync ops/s
            appendEntriesBatchSizeBytes=s.append_entries_bytes_max,
            bindAddress=self.bind_address,  # our transport binds exactly this
            preferredAddrType="ipv4",
            sendBufferSize=s.socket_buffer_bytes,
            recvBufferSize=s.socket_buffer_bytes,
            dnsCacheTime=600.0,
            dnsFailCacheTime=30.0,
            # pysyncobj compacts when the log is longer than the first OR the last compaction
            # is older than the second: "off" needs both out of reach (force_snapshot works).
            logCompactionMinEntries=s.snapshot_min_entries if s.snapshots_on else _NEVER_ENTRIES,
            logCompactionMinTime=s.snapshot_interval_s if s.snapshots_on else math.inf,
            logCompactionSplit=False,
            logCompactionBatchSize=s.snapshot_chunk_bytes,
            commandsWaitLeader=False,  # no leader: fail fast with MISSING_LEADER, never queue
            fullDumpFile=str(self.snapshot_path),
            journalFile=str(self.journal_path),
            bindRetryTime=1.0,
            maxBindRetries=1,  # a busy port fails the start at once (autoTick=False would spin)
            onReady=self._ready.set,
            onStateChanged=self._on_state_changed,
            dynamicMembershipChange=False,  # the voter set is static configuration
            pollerType="auto",
            useFork=False,  # gRPC does not survive fork; our serializer writes in-thread anyway
            serializer=self._write_snapshot,
            serializeChecker=None,  # our serializer is synchronous
            deserializer=self._read_snapshot,
            onCodeVersionChanged=None,
            tcp_keepalive=s.tcp_keepalive,
        )

    # ------------------------------------------------------------- tick thread: proposals

    def _run_tick_tasks(self) -> None:
        with self._lock:
            tasks = list(self._tick_tasks)
            self._tick_tasks.clear()
        for task in tasks:
            task()

    def _hand_proposals_to_pysyncobj(self) -> None:
        with self._lock:
            count = min(len(self._queued), _PROPOSALS_PER_TICK_MAX)
            proposals = [self._queued.popleft() for _ in range(count)]
            more_remain = bool(self._queued)
        if more_remain:
            self._notify()  # so the next tick's poll returns at once
        for proposal in proposals:
            if proposal.future.done():  # cancelled by the caller
                self._forget(proposal)
                continue
            # Checked here, on the tick thread: the leadership and epoch can only change inside
            # doTick, and pysyncobj appends these within the next doTick, before it reads any
            # message, so the entry is appended in this epoch or fails with MISSING_LEADER (or,
            # if that tick is starved, NOT_LEADER from the transport: _make_transport_class).
            reason = self._check_can_propose(proposal.leader_epoch)
            if reason is not None:
                self._complete(proposal, None, reason)
                continue
            command = _REGULAR_COMMAND_PREFIX + pickle.dumps(
                (_APPEND_METHOD_ID, (proposal.batch,)), protocol=_ENVELOPE_PICKLE_PROTOCOL)
            assert len(command) < len(proposal.batch) + _ENVELOPE_BYTES_MAX
            proposal.command = command
            self._handed[id(command)] = proposal
            # Already prefixed with the command type, so passed with commandType=None: pysyncobj
            # queues this very object, which lets _on_forward_attempt recognise it.
            self._syncobj._applyCommand(command, functools.partial(self._on_outcome, proposal))

    def _on_forward_attempt(self, command: Any) -> None:
        """Our transport refused to forward ``command`` to another leader (see
        _make_transport_class): the proposal fails with NOT_LEADER, known not to be in the log."""
        proposal = self._handed.get(id(command))
        if proposal is None or proposal.command is not command:
            # Its proposal already completed (timed out): the Future has its answer.
            logger.info("raft node %d: refused to forward a command of a completed proposal",
                        self.node_id)
            return
        self._complete(proposal, None, FailReason.NOT_LEADER)

    def _on_outcome(self, proposal: _Proposal, result: Any, error: int) -> None:
        self._complete(proposal, result, FailReason(error))

    def _complete(self, proposal: _Proposal, index: Any, reason: FailReason) -> None:
        self._forget(proposal)
        if proposal.future.done():
            return
        try:
            if reason == FailReason.SUCCESS:
                proposal.future.set_result(int(index))
            else:
                proposal.future.set_exception(self._error(reason))
        except concurrent.futures.InvalidStateError:
            pass  # cancelled between the check and the set

    def _forget(self, proposal: _Proposal) -> None:
        with self._lock:
            self._in_flight.pop(proposal.seq, None)
        if proposal.command is not None:
            self._handed.pop(id(proposal.command), None)

    def _maybe_expire_proposals(self) -> None:
        now = time.monotonic()
        if now - self._last_expiry_check < self._settings.tick_period_s:
            return
        self._last_expiry_check = now
        with self._lock:
            expired = [p for p in self._in_flight.values() if p.deadline <= now]
        for proposal in expired:
            # pysyncobj may still call back later for an appended one: _complete ignores it.
            self._complete(proposal, None, FailReason.REQUEST_TIMED_OUT)

    def _check_can_propose(self, leader_epoch: int | None) -> FailReason | None:
        if self._failure is not None or self._stopping.is_set() or self._syncobj is None:
            return FailReason.CLOSED
        if not self._syncobj._isLeader():
            return FailReason.NOT_LEADER
        if leader_epoch is not None and leader_epoch != self._term():
            return FailReason.NOT_LEADER
        return None

    def _error(self, reason: FailReason) -> ProposeError:
        leader = None if reason == FailReason.CLOSED else self.leader_address()
        return ProposeError(reason, leader_address=leader, detail=f"node {self.node_id}")

    # ------------------------------------------------------ tick thread: state machine

    def _apply_committed(self, batch: bytes) -> int:
        """The body of the replicated ``append``: runs for each committed entry, in order."""
        if self._failure is not None:
            raise _StateMachineFailed()
        # pysyncobj increments raftLastApplied right after this returns.
        index = int(self._syncobj.raftLastApplied) + 1
        assert index > self._applied_index, f"apply of {index} after {self._applied_index}"
        try:
            self._state_machine.apply(batch, index)
        except Exception as exc:
            self._fail(f"state machine failed to apply entry {index}", exc)
            raise _StateMachineFailed() from exc
        self._applied_index = index
        return index

    def _write_snapshot(self, file_name: str, data: tuple[Any, Any, Any]) -> None:
        """pysyncobj's serializer hook, on the tick thread, with the state at last_applied."""
        last_entry, prev_entry, cluster = data
        try:
            state = self._state_machine.snapshot()
            assert isinstance(state, bytes), "StateMachine.snapshot() must return bytes"
            encoded = _encode_snapshot(last_entry, prev_entry,
                                       sorted(str(node.address) for node in cluster), state)
            with open(file_name, "wb") as f:
                f.write(encoded)
                f.flush()
                os.fsync(f.fileno())
        except Exception:
            # pysyncobj swallows serializer errors ("Failed to store full dump") and retries
            # later; log the cause here, since it would be lost otherwise.
            logger.exception("raft node %d: snapshot at index %d failed", self.node_id,
                             last_entry[1])
            raise
        logger.info("raft node %d: snapshot at index %d (%d bytes of state)", self.node_id,
                    last_entry[1], len(state))

    def _read_snapshot(self, file_name: str) -> tuple[Any, Any, set[str]]:
        """pysyncobj's deserializer hook, on the tick thread (on start and on install)."""
        try:
            with open(file_name, "rb") as f:
                last_entry, prev_entry, cluster, state = _decode_snapshot(f.read())
            self._state_machine.restore(state)
        except Exception as exc:
            # pysyncobj would log and go on from an empty state machine: stop instead.
            self._fail(f"cannot load snapshot {file_name}", exc)
            raise
        self._applied_index = last_entry[1]
        logger.info("raft node %d: restored snapshot at index %d (%d bytes of state)",
                    self.node_id, last_entry[1], len(state))
        return last_entry, prev_entry, set(cluster)

    def _fail(self, what: str, exc: BaseException) -> None:
        logger.critical("raft node %d: %s; stopping the node", self.node_id, what, exc_info=exc)
        if self._failure is None:
            self._failure = exc

    # ------------------------------------------------------ tick thread: leadership

    def _on_state_changed(self, old_state: int, new_state: int) -> None:
        is_leader = new_state == _STATE_LEADER
        if is_leader == (old_state == _STATE_LEADER) or is_leader == self._was_leader:
            return
        self._was_leader = is_leader
        epoch = self._term()
        logger.info("raft node %d %s leadership in epoch %d", self.node_id,
                    "gained" if is_leader else "lost", epoch)
        self._notify_listeners(is_leader, epoch)

    def _notify_listeners(self, is_leader: bool, epoch: int) -> None:
        for listener in list(self._listeners):
            self._call_listener(listener, is_leader, epoch)

    def _call_listener(self, listener: Callable[[bool, int], None], is_leader: bool,
                       epoch: int) -> None:
        try:
            listener(is_leader, epoch)
        except Exception:
            # A listener's bug must not stop replication; it is the listener's to fix.
            logger.exception("raft node %d: leadership listener failed", self.node_id)

    # ------------------------------------------------------------------------- helpers

    def _term(self) -> int:
        obj = self._syncobj
        return 0 if obj is None else int(obj.raftCurrentTerm)

    def _notify(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None:
            wakeup.notify()


# ------------------------------------------------------------------------------ transport
#
# The wire between controllers (the module docstring, "Transport", says what and why). pysyncobj's
# own TcpConnection unpickles whatever arrives and its TCPTransport answers utility messages and
# admits read-only nodes: here a connection runs a handshake first, every frame after it carries
# a sequence number and a MAC checked before anything is decoded, and payloads are read by an
# unpickler that builds no object but dicts, lists, tuples, str, bytes, ints, bools and None.

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
#: Incoming connections still in their handshake; past it, the oldest of them is closed.
_PENDING_HANDSHAKES_MAX = 16
#: A refusal is logged the first time per (peer host, reason), then at most once per interval.
_REFUSAL_LOG_INTERVAL_S = 60.0
_REFUSAL_LOG_KEYS_MAX = 1_000
#: The keepalive's message type (see _make_transport_class).
_KEEPALIVE_TYPE = "tidelog_keepalive"
#: pysyncobj's no-op log entry, as it writes it (a command-type byte alone).
_NO_OP_COMMAND = bytes([_COMMAND_TYPE.NO_OP])
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
                 on_refused: Callable[[_RaftConnection, str], None]) -> None:
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
        self._write_buffer += frame
        self._flush()

    def disconnect(self) -> None:
        notify = self._on_disconnected is not None \
            and self._state != CONNECTION_STATE.DISCONNECTED
        if self._fileno is not None:
            self._poller.unsubscribe(self._fileno)
            self._fileno = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
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
            self._read_buffer += data
            self._last_read = time.monotonic()
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
        self._write_buffer += _FRAME_LENGTH.pack(len(body)) + body
        self._flush()

    def _refuse(self, reason: str) -> None:
        self._on_refused(self, reason)
        self.disconnect()


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
                          key: bytes) -> type:
    """pysyncobj's TCP transport over Tidelog's wire, with three more changes.

    Wire. Connections are _RaftConnection (handshake keyed by ``key``, MAC'd frames, restricted
    unpickler) and the listener is _RaftListener on SyncObjConf.bindAddress. A listener accepts
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
                keepalive=conf.tcp_keepalive, on_refused=self._on_refused)

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


# ------------------------------------------------------------------------- pysyncobj patches
#
# pysyncobj 0.3.17 breaks Raft in its follower's append and snapshot paths and in the leader's
# handling of replies; tests/sim found each (its README.md, raftsim.KNOWN_BUGS, with the seeds).
# _PatchedSyncObj restores Raft's rules by overriding three of SyncObj's private methods in a
# subclass, so every other SyncObj in the process (the simulator's unpatched runs) keeps
# pysyncobj's own code. The overrides copy pysyncobj's code where they do not change it and read
# its private attributes, so they refuse to run on any pysyncobj but the one they were written and
# simulated against: the version and the SHA-256 of the two modules they depend on are checked when
# this module is imported, and _self_test() replays truncate-acked-on-resend's messages before
# the first quorum starts.
# To upgrade pysyncobj: re-read the overridden methods, run tests/sim (patched suites, slow sweeps
# included), then update the digests below.

_PYSYNCOBJ_VERSION = "0.3.17"
_PYSYNCOBJ_SHA256 = {
    "syncobj.py": "e8bdf06797085d734df86e24ab4802fe87893dff77268565ec036f7ad4a1cfe4",
    "serializer.py": "4d39fde2f15000ad8f507ec229ebd4f6a86371b6f84d4dc1439a9cccd52857ee",
    # The transport overrides TCPTransport's methods and stands in for its TcpConnection.
    "transport.py": "0c9d89f9c4781ec9772df8011d7975a1a4a1a5f541357e12eae85a813e92b50b",
    "tcp_connection.py": "7784ed8da031369fe36f805cb186a2e94a3bd6f10fed2dd59c8cc3713fd6331c",
}
_STATE_FOLLOWER = 0
#: Suffix of the file a snapshot from the leader is received into, next to fullDumpFile.
_INCOMING_SNAPSHOT_SUFFIX = ".incoming"


class PysyncobjMismatchError(RuntimeError):
    """The installed pysyncobj is not the one the adapter's patches were verified against."""


def _check_pysyncobj() -> None:
    version = pysyncobj_version.VERSION
    if version != _PYSYNCOBJ_VERSION:
        raise PysyncobjMismatchError(
            f"controller/raft.py patches pysyncobj {_PYSYNCOBJ_VERSION}; {version} is installed")
    directory = Path(syncobj_module.__file__).parent
    for name, expected in _PYSYNCOBJ_SHA256.items():
        try:
            digest = hashlib.sha256((directory / name).read_bytes()).hexdigest()
        except OSError as exc:
            raise PysyncobjMismatchError(f"cannot read pysyncobj's {name} to verify it") from exc
        if digest != expected:
            raise PysyncobjMismatchError(
                f"pysyncobj's {name} (sha256 {digest}) is not the code controller/raft.py's "
                f"patches were verified against; re-verify them with tests/sim first")


_check_pysyncobj()


class _PatchedSyncObj(SyncObj):  # type: ignore[misc]
    """pysyncobj's SyncObj with Raft's rules restored where 0.3.17 breaks them.

    Follower, append_entries (_tl_append): truncate only from the first entry whose term
    conflicts ("if an existing entry conflicts with a new one (same index but different terms),
    delete the existing entry and all that follow it"; Raft, Figure 2, AppendEntries rule 3) and
    advance the commit index only to ``min(leaderCommit, index of last new entry)`` (rule 5).
    pysyncobj deletes everything after prevLogIdx on every append_entries, matching entries
    included, so a resent or reordered older message drops entries the follower had acknowledged
    and the leader had committed (sim seeds 244 "truncate-acked-on-resend", 5
    "truncate-on-reorder", 1064). That truncation was also behind "compaction-empties-journal"
    (seed 228): a compaction finishing after the journal was cut below its index.

    Follower, snapshot (_tl_install_snapshot_chunk): a chunk says nothing about the follower's
    log, so only a complete snapshot moves the commit index (pysyncobj ran its commit update
    after every chunk and applied its own uncommitted tail: seed 1, "snapshot-commit"); a
    snapshot at or below last applied is not loaded (pysyncobj loaded it and took the state
    machine back in time: seed 3, "snapshot-rollback"); one whose last entry the log already
    holds with the same term is not loaded either and the log after it is kept (InstallSnapshot
    rule 6; pysyncobj cleared the journal, acknowledged entries included). The snapshot is
    received into a side file and replaces fullDumpFile only when it is loaded, fsynced.

    Start (_SyncObj__loadDumpFile): the journal entries after the dump are kept when the journal
    holds the dump's last two entries; pysyncobj cleared the journal unless its first two entries
    were exactly those, so a crash between writing a dump and compacting the journal (one tick)
    lost the entries after the dump on restart.

    Compaction (_SyncObj__deleteEntriesTo) never leaves fewer than two entries (pysyncobj reads
    ``raftLog[0]`` and ``raftLog[1]`` everywhere; an empty journal raised IndexError forever).

    Leader, next_node_idx replies (_tl_on_next_node_idx): a success only moves nextIndex and
    matchIndex forward. pysyncobj set nextIndex to a success reply's value whenever matchIndex
    grew, so the reply to an older pipelined message sent it back to resend what the follower
    already had (the first half of seed 244).

    Not patched: the leader's chunking of an entry of appendEntriesBatchSizeBytes or more
    (RaftSettings keeps every entry below it), dynamic membership (refused), a snapshot without
    a fullDumpFile (ignored), the leader's loop of empty snapshot messages while its dump is
    being written (harmless now: a follower ignores them).
    """

    # pysyncobj's private state that the overrides assign (SyncObj.__init__ sets all of it).
    _SyncObj__transferInProgress: bool
    _SyncObj__raftElectionDeadline: float
    _SyncObj__raftLeader: Any
    _SyncObj__leaderCommitIndex: int | None
    _SyncObj__recvTransmission: Any
    _SyncObj__raftCommitIndex: int
    _SyncObj__raftLastApplied: int
    _SyncObj__raftState: int

    def __init__(self, selfNode: Any, otherNodes: Any, conf: SyncObjConf, **kwargs: Any) -> None:
        if conf.dynamicMembershipChange:
            raise ValueError("the pysyncobj patches do not cover dynamic membership changes")
        # Before SyncObj.__init__: attributes that exist when it ends stay out of pysyncobj's
        # pickled snapshots (its __properies), and an open file must not be pickled.
        self._tl_incoming: Any = None
        #: How often each patched path ran where pysyncobj would have done otherwise (status(),
        #: and tests/sim checks that its suites reach each of them).
        self.tl_counts: collections.Counter[str] = collections.Counter()
        super().__init__(selfNode, otherNodes, conf, **kwargs)

    # --- dispatch: the transport calls this (bound by SyncObj.__init__ through the name)

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        kind = message.get("type") if isinstance(message, dict) else None
        # pysyncobj handles each message type in its own block: these two blocks are replaced,
        # every other type goes to pysyncobj's handler unchanged.
        if kind == "append_entries" and message["term"] >= self._SyncObj__raftCurrentTerm:
            self._tl_on_append_entries(node, message)
        elif kind == "next_node_idx":
            if self._SyncObj__raftState == _STATE_LEADER:
                self._tl_on_next_node_idx(node, message)
        else:
            SyncObj._SyncObj__onMessageReceived(self, node, message)

    # --- follower

    def _tl_on_append_entries(self, node: Any, message: dict[str, Any]) -> None:
        # pysyncobj's own preamble (syncobj.py, __onMessageReceived), unchanged.
        if message["term"] > self._SyncObj__raftCurrentTerm:
            self._SyncObj__transferInProgress = False
        if not self._SyncObj__transferInProgress:
            self._SyncObj__raftElectionDeadline = (syncobj_module.monotonicTime()
                                                   + self._SyncObj__generateRaftTimeout())
        if self._SyncObj__raftLeader != node:
            self._SyncObj__onLeaderChanged()
        self._SyncObj__raftLeader = node
        if message["term"] > self._SyncObj__raftCurrentTerm:
            self._SyncObj__setCurrentTerm(message["term"], None)
        self._SyncObj__setState(_STATE_FOLLOWER)
        self._SyncObj__leaderCommitIndex = message["commit_index"]
        if "prevLogIdx" in message:
            self._tl_append(node, message)
        elif "serialized" in message:
            self._tl_install_snapshot_chunk(node, message)

    def _tl_append(self, node: Any, message: dict[str, Any]) -> None:
        entries = message.get("entries", [])
        transmission = message.get("transmission")
        if transmission is not None:  # one large entry in chunks: pysyncobj's code, unchanged
            if transmission == "start":
                self._SyncObj__recvTransmission = message["data"]
                self._SyncObj__sendNextNodeIdx(node, success=False, reset=False)
                return
            if transmission == "process":
                self._SyncObj__recvTransmission += message["data"]
                self._SyncObj__sendNextNodeIdx(node, success=False, reset=False)
                return
            if transmission != "finish":
                raise ValueError(f"wrong transmission type {transmission!r}")
            self._SyncObj__recvTransmission += message["data"]
            entries = [syncobj_module.pickle.loads(self._SyncObj__recvTransmission)]
            self._SyncObj__recvTransmission = ""

        prev_index, prev_term = message["prevLogIdx"], message["prevLogTerm"]
        prev = self._SyncObj__getEntries(prev_index, 1)
        if not prev:  # we lack prevLogIdx: continue after our last entry (as pysyncobj)
            self._SyncObj__sendNextNodeIdx(node, success=False, reset=True)
            return
        if prev[0][2] != prev_term:  # Raft rule 2 (as pysyncobj)
            self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=prev_index, success=False,
                                           reset=True)
            return
        log = self._SyncObj__raftLog
        last_index = self._SyncObj__getCurrentLogIndex()
        conflict = False
        for position, entry in enumerate(entries):
            index = entry[1]
            if index <= last_index:
                if self._SyncObj__getEntries(index, 1)[0][2] == entry[2]:
                    continue  # the same entry: keep it, and what follows it (rule 3)
                conflict = True
                self._tl_truncate_from(index)
            for new_entry in entries[position:]:  # rule 4
                log.add(*new_entry)
            break
        last_new = prev_index + len(entries)
        if not conflict and last_index > last_new:
            # pysyncobj would have deleted the entries after last_new, matching ones included.
            self.tl_counts["append_kept_tail"] += 1
        self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=last_new + 1, success=True)

        # Rule 5: entries after last_new were not matched with this leader's log, so they must
        # not be committed here (pysyncobj used its last index: it had just dropped the rest).
        commit = min(self._SyncObj__raftCommitIndex, self._SyncObj__getCurrentLogIndex())
        commit = max(commit, min(message["commit_index"], last_new))
        self._SyncObj__raftCommitIndex = commit
        log.setRaftCommitIndex(commit)

    def _tl_truncate_from(self, index: int) -> None:
        self.tl_counts["append_conflict"] += 1
        applied = self._SyncObj__raftLastApplied
        if index <= applied:
            # A committed entry cannot conflict with a leader's (Raft's leader completeness);
            # reaching this means lost durability (power loss) or a bug: say so loudly.
            logger.critical("raft: the leader's entry %d conflicts with one this node has "
                            "applied (last applied %d); its state machine has diverged",
                            index, applied)
        self._SyncObj__deleteEntriesFrom(index)

    def _tl_install_snapshot_chunk(self, node: Any, message: dict[str, Any]) -> None:
        serialized = message["serialized"]
        if not serialized:
            # The leader's dump was being written (None): no data, and nothing learnt.
            return
        path = self._tl_receive_chunk(serialized)
        if path is None:
            self.tl_counts["snapshot_chunk_no_commit"] += 1
            return  # more chunks to come; nothing is known about our log yet (no commit)
        try:
            last_index, last_term = self._tl_snapshot_last_entry(path)
        except Exception:
            logger.exception("raft: dropping an unreadable snapshot received from %s", node)
            os.remove(path)
            return
        applied = self._SyncObj__raftLastApplied
        ours = self._SyncObj__getEntries(last_index, 1)
        if last_index <= applied:
            # A stale snapshot (a stale rejection made the leader send it again): everything
            # up to last applied is committed, so it is the leader's log too.
            self.tl_counts["snapshot_stale_ignored"] += 1
            os.remove(path)
            self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=applied + 1, success=True)
            return
        if ours and ours[0][2] == last_term:
            # We hold its last entry: by log matching, every entry up to it is the leader's,
            # and a snapshot only holds committed entries. Keep the log, commit to there.
            self.tl_counts["snapshot_log_kept"] += 1
            os.remove(path)
            commit = max(self._SyncObj__raftCommitIndex, last_index)
        else:
            os.replace(path, self._SyncObj__conf.fullDumpFile)
            if not self._tl_load_dump(keep_matching_journal=False):
                return
            self.tl_counts["snapshot_installed"] += 1
            commit = max(min(self._SyncObj__raftCommitIndex, self._SyncObj__getCurrentLogIndex()),
                         last_index)
        self._SyncObj__raftCommitIndex = commit
        self._SyncObj__raftLog.setRaftCommitIndex(commit)
        self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=last_index + 1, success=True)

    def _tl_receive_chunk(self, serialized: Any) -> str | None:
        """Writes one chunk ((data, is_first, is_last), pysyncobj's format) into the side file;
        returns its path once complete and fsynced."""
        data, is_first, is_last = serialized
        dump_file = self._SyncObj__conf.fullDumpFile
        if dump_file is None:
            logger.error("raft: ignoring a snapshot from the leader: no fullDumpFile")
            return None
        path = str(dump_file) + _INCOMING_SNAPSHOT_SUFFIX
        if is_first:
            self._tl_close_incoming()
            self._tl_incoming = open(path, "wb")  # noqa: SIM115 (open across messages)
        elif self._tl_incoming is None:
            return None  # its start went to an earlier connection: the leader restarts it
        incoming = self._tl_incoming
        try:
            incoming.write(data)
            if not is_last:
                return None
            incoming.flush()
            os.fsync(incoming.fileno())
        except OSError:
            logger.exception("raft: cannot write a snapshot received from the leader")
            self._tl_close_incoming()
            return None
        self._tl_close_incoming()
        return path

    def _tl_close_incoming(self) -> None:
        incoming, self._tl_incoming = self._tl_incoming, None
        if incoming is not None:
            incoming.close()

    def _tl_snapshot_last_entry(self, path: str) -> tuple[int, int]:
        """(index, term) of a snapshot file's last entry, without loading it. This reads
        pysyncobj's own format (a gzipped pickle); with a custom serializer, override it."""
        if self._SyncObj__conf.deserializer is not None:
            raise NotImplementedError("override _tl_snapshot_last_entry for this snapshot format")
        with open(path, "rb") as f, gzip.GzipFile(fileobj=f) as g:
            data = syncobj_module.pickle.load(g)
        return int(data[1][1]), int(data[1][2])

    # --- start and compaction

    def _SyncObj__loadDumpFile(self, clearJournal: bool) -> None:
        # pysyncobj calls this on its first tick (clearJournal=False); installs go through
        # _tl_install_snapshot_chunk.
        self._tl_load_dump(keep_matching_journal=not clearJournal)

    def _tl_load_dump(self, *, keep_matching_journal: bool) -> bool:
        """pysyncobj's __loadDumpFile, but the journal after the dump is kept when the journal
        holds the dump's two entries; False if it could not be loaded (logged)."""
        try:
            data = self._SyncObj__serializer.deserialize()
            if data[0] is not None:  # pysyncobj's pickled attributes and consumers, unchanged
                consumers = self._SyncObj__consumers
                self_data, consumers_data = (data[0][0], data[0][1:]) if consumers \
                    else (data[0], [])
                for key, value in self_data.items():
                    self.__dict__[key] = value
                for i, consumer in enumerate(consumers):
                    consumer._deserialize(consumers_data[i])
            last, prev = data[1], data[2]
            log = self._SyncObj__raftLog
            if keep_matching_journal and self._tl_holds(prev) and self._tl_holds(last):
                if log[0][1] != prev[1]:  # pysyncobj would have cleared the journal
                    self.tl_counts["dump_journal_kept"] += 1
                self._SyncObj__deleteEntriesTo(prev[1])
            else:
                log.clear()
                log.add(*prev)
                log.add(*last)
            self._SyncObj__raftLastApplied = last[1]
            last_index = self._SyncObj__getCurrentLogIndex()
            if self._SyncObj__raftCommitIndex > last_index:
                self._SyncObj__raftCommitIndex = last_index
                log.setRaftCommitIndex(last_index)
            self._SyncObj__onSetCodeVersion(0)
            return True
        except Exception:
            logger.exception("raft: failed to load the snapshot")
            return False

    def _tl_holds(self, entry: Any) -> bool:
        ours = self._SyncObj__getEntries(entry[1], 1)
        return bool(ours) and ours[0][2] == entry[2]

    def _SyncObj__deleteEntriesTo(self, toIDx: int) -> None:
        last_index = self._SyncObj__getCurrentLogIndex()
        if toIDx >= last_index:
            self.tl_counts["compaction_refused"] += 1
            logger.critical("raft: not compacting the journal to index %d: its last entry is "
                            "%d, and pysyncobj needs two", toIDx, last_index)
            return
        SyncObj._SyncObj__deleteEntriesTo(self, toIDx)

    # --- leader

    def _tl_on_next_node_idx(self, node: Any, message: dict[str, Any]) -> None:
        next_index = message["next_node_idx"]
        next_indexes = self._SyncObj__raftNextIndex
        if message["reset"]:  # a rejection says where to continue (as pysyncobj)
            next_indexes[node] = next_index
        if message["success"]:
            match_indexes = self._SyncObj__raftMatchIndex
            if match_indexes[node] < next_index - 1 and next_index < next_indexes[node]:
                self.tl_counts["leader_stale_success"] += 1  # pysyncobj went back to it
            match_indexes[node] = max(match_indexes[node], next_index - 1)
            next_indexes[node] = max(next_indexes[node], next_index)
        self._SyncObj__lastResponseTime[node] = syncobj_module.monotonicTime()


class _RejectFloor:
    """KNOWN_BUGS["reject-pingpong"] (sim seed 6), fixed where a follower sends its replies.

    A follower with a conflicting entry rejects the first of several pipelined append_entries
    with next=k (the conflict) and the later ones with next=its last index+1 (a gap); the
    leader keeps the last reset it reads, so the walk back to k restarts forever and the
    follower never catches up. Until its next success, a follower's rejections to a node say at
    most the lowest ``next`` it rejected with since. The leader then never skips the conflict;
    a lower ``next`` than needed only makes it resend entries the follower keeps (_tl_append).
    The adapter's transport and tests/sim's patched mode both use this class.
    """

    def __init__(self) -> None:
        self._lowest: dict[Any, int] = {}
        self.rewrites = 0

    def apply(self, node: Any, message: Any) -> Any:
        if not isinstance(message, dict) or message.get("type") != "next_node_idx":
            return message
        if message["success"]:
            self._lowest.pop(node, None)
            return message
        lowest = self._lowest.get(node)
        if lowest is not None and message["next_node_idx"] > lowest:
            self.rewrites += 1
            return dict(message, next_node_idx=lowest)
        self._lowest[node] = message["next_node_idx"]
        return message


class _SelfTestTransport(Transport):  # type: ignore[misc]
    """Records what the SyncObj sends; no sockets."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        super().__init__(syncObj, selfNode, otherNodes)
        self.sent: list[dict[str, Any]] = []

    @property
    def ready(self) -> bool:
        return True

    def send(self, node: Any, message: Any) -> bool:
        self.sent.append(message)
        return True

    def deliver(self, node: Any, message: dict[str, Any]) -> dict[str, Any] | None:
        """Hands ``message`` to the SyncObj as a received one; returns its reply, if any."""
        before = len(self.sent)
        self._onMessageReceived(node, message)
        return self.sent[-1] if len(self.sent) > before else None


_self_test_lock = threading.Lock()
_self_test_passed = False


def _self_test() -> None:
    """Replays seed 244's messages (truncate-acked-on-resend) into a _PatchedSyncObj wired up
    by SyncObj.__init__ as in production; raises PysyncobjMismatchError if Raft's answer is not
    what comes back (the overrides are not reached, or pysyncobj changed under them)."""
    global _self_test_passed
    with _self_test_lock:
        if _self_test_passed:
            return
        # No sockets, no pipe notifier (batch mode), an in-memory journal. SyncObj.__init__ also
        # sets pysyncobj's process-wide DNS cache settings: these defaults are the adapter's.
        conf = SyncObjConf(autoTick=False, appendEntriesUseBatch=True, pollerType="select",
                           dynamicMembershipChange=False, journalFile=None)
        leader = Node("self-test-leader")
        obj = _PatchedSyncObj(Node("self-test"), [leader], conf,
                              transportClass=_SelfTestTransport)
        try:
            _run_self_test(obj, obj._SyncObj__transport, leader)
        finally:
            obj.destroy()
        _self_test_passed = True


def _run_self_test(obj: Any, transport: _SelfTestTransport, leader: Any) -> None:
    def append(term: int, prev: tuple[int, int], entries: list[tuple[bytes, int, int]],
               commit: int) -> dict[str, Any] | None:
        return transport.deliver(leader, {
            "type": "append_entries", "term": term, "commit_index": commit,
            "prevLogIdx": prev[0], "prevLogTerm": prev[1], "entries": entries})

    def log() -> list[tuple[int, int]]:
        return [(entry[1], entry[2]) for entry in obj._SyncObj__raftLog[:]]

    def check(what: str, ok: bool) -> None:
        if not ok:
            raise PysyncobjMismatchError(f"pysyncobj patch self-test failed: {what} (log "
                                         f"{log()}, commit {obj.raftCommitIndex})")

    a, b, c, x = (b"a", 2, 1), (b"b", 3, 1), (b"c", 4, 1), (b"x", 3, 2)
    reply = append(1, (1, 0), [a, b, c], commit=1)
    check("append", log() == [(1, 0), (2, 1), (3, 1), (4, 1)]
          and reply == {"type": "next_node_idx", "next_node_idx": 5, "reset": False,
                        "success": True})
    reply = append(1, (1, 0), [a], commit=4)  # an older message, resent or reordered
    check("a resend truncated matching entries", len(log()) == 4)
    check("commit past the last new entry", obj.raftCommitIndex == 2)
    check("resend reply", reply is not None and reply["next_node_idx"] == 3)
    append(1, (1, 0), [], commit=4)  # an old heartbeat
    check("a heartbeat truncated matching entries", len(log()) == 4)
    reply = append(2, (2, 1), [x], commit=2)  # a new leader's conflicting entry 3
    check("conflict", log() == [(1, 0), (2, 1), (3, 2)] and reply is not None
          and reply["success"] and reply["next_node_idx"] == 4)

    obj._SyncObj__raftState = _STATE_LEADER  # the leader's side: a stale success reply
    obj._SyncObj__raftNextIndex[leader] = 10
    obj._SyncObj__raftMatchIndex[leader] = 0
    for next_index in (5, 3):
        transport.deliver(leader, {"type": "next_node_idx", "next_node_idx": next_index,
                                   "reset": False, "success": True})
    check("a stale success moved nextIndex or matchIndex back",
          obj._SyncObj__raftNextIndex[leader] == 10 and obj._SyncObj__raftMatchIndex[leader] == 4)
    obj._SyncObj__raftState = _STATE_FOLLOWER


class _TidelogSyncObj(_PatchedSyncObj):
    """The patched SyncObj reading the adapter's snapshot format (see _encode_snapshot)."""

    def _tl_snapshot_last_entry(self, path: str) -> tuple[int, int]:
        last_entry, _prev, _cluster, _state = _decode_snapshot(Path(path).read_bytes())
        return last_entry[1], last_entry[2]


# ------------------------------------------------------------------------------ snapshot file


def _encode_snapshot(last_entry: tuple[bytes, int, int], prev_entry: tuple[bytes, int, int],
                     cluster: list[str], state: bytes) -> bytes:
    """Layout: header (magic, version, last/prev index, last/prev term), then u32-length-prefixed
    last and prev entry commands and the '\\n'-joined cluster addresses, then u64-length-prefixed
    state, then CRC-32 (zlib) of everything before it."""
    assert last_entry[1] == prev_entry[1] + 1, (last_entry[1], prev_entry[1])
    cluster_bytes = "\n".join(cluster).encode()
    parts = [
        _SNAPSHOT_HEADER.pack(_SNAPSHOT_MAGIC, _SNAPSHOT_FORMAT_VERSION, last_entry[1],
                              prev_entry[1], last_entry[2], prev_entry[2]),
        _U32.pack(len(last_entry[0])), bytes(last_entry[0]),
        _U32.pack(len(prev_entry[0])), bytes(prev_entry[0]),
        _U32.pack(len(cluster_bytes)), cluster_bytes,
        _U64.pack(len(state)), state,
    ]
    body = b"".join(parts)
    return body + _U32.pack(zlib.crc32(body))


def _decode_snapshot(
    data: bytes,
) -> tuple[tuple[bytes, int, int], tuple[bytes, int, int], list[str], bytes]:
    if len(data) < _SNAPSHOT_HEADER.size + _U32.size:
        raise SnapshotCorruptError(f"snapshot of {len(data)} bytes is too short")
    body, (crc,) = data[:-_U32.size], _U32.unpack(data[-_U32.size:])
    if zlib.crc32(body) != crc:
        raise SnapshotCorruptError("snapshot CRC mismatch")
    magic, version, last_index, prev_index, last_term, prev_term = \
        _SNAPSHOT_HEADER.unpack_from(body, 0)
    if magic != _SNAPSHOT_MAGIC or version != _SNAPSHOT_FORMAT_VERSION:
        raise SnapshotCorruptError(f"not a snapshot of format {_SNAPSHOT_FORMAT_VERSION}")
    offset = _SNAPSHOT_HEADER.size
    fields: list[bytes] = []
    for prefix in (_U32, _U32, _U32, _U64):
        (length,) = prefix.unpack_from(body, offset)
        offset += prefix.size
        if offset + length > len(body):
            raise SnapshotCorruptError("snapshot field runs past the end")
        fields.append(body[offset:offset + length])
        offset += length
    if offset != len(body) or last_index != prev_index + 1:
        raise SnapshotCorruptError("snapshot has trailing bytes or non-adjacent entries")
    last_command, prev_command, cluster_bytes, state = fields
    cluster = cluster_bytes.decode().split("\n") if cluster_bytes else []
    # Tuples of exactly (bytes, int, int): pysyncobj compares them with its journal's entries and
    # clears the journal on a mismatch.
    return (last_command, last_index, last_term), (prev_command, prev_index, prev_term), \
        cluster, state
