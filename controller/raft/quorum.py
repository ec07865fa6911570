"""RaftQuorum: a controller's membership in the Raft quorum (the adapter around pysyncobj).

It replicates opaque byte batches and knows nothing about metadata records. The controller hands
it a :class:`StateMachine` (its image + replay) and proposes protobuf-encoded record batches; every
controller applies every committed batch in log order. The package docstring lists the API.

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

Snapshots (log compaction) run by default (RaftSettings: snapshot_min_entries entries,
snapshot_interval_s, or snapshot_journal_bytes of applied journal, whichever first), through
pysyncobj's snapshot path, which is unsafe unpatched; with the patches it passes the simulation
(docs/decisions.md, "Raft adapter"). ``force_snapshot`` compacts at once.
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

Durability. The journal is journal.py's DurableJournal (pysyncobj's FileJournal never fsyncs):
entries, term and vote reach the disk at the patched SyncObj's flush points, and no message
leaves before the sync covering what it reports (a vote, an acknowledged append): one fsync per
flush point covers everything a tick answers. Snapshots this node writes are fsynced, so is one
received from the leader, and their rename is made durable before the journal drops what they
cover. A journal that cannot be written (a full disk: the file grows into space reserved with
posix_fallocate, so that is an error, not a SIGBUS; an I/O error; its size limit) stops the node
(``failure``), with one log line saying why; until then a leader refuses proposals that would
take the journal past ``journal_bytes_max`` (JOURNAL_FULL).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import math
import os
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from pysyncobj import SyncObjConf, SyncObjConsumer, replicated
from pysyncobj.poller import POLL_EVENT_TYPE

from tidelog.cluster_secret import derive_key, is_loopback
from tidelog.controller.raft.errors import FailReason, ProposeError, RaftStartError
from tidelog.controller.raft.framing import (
    _APPEND_METHOD_ID,
    _ENVELOPE_BYTES_MAX,
    _ENVELOPE_PICKLE_PROTOCOL,
    _NO_SECRET_KEY,
    _REGULAR_COMMAND_PREFIX,
)
from tidelog.controller.raft.journal import RECORD_OVERHEAD_BYTES, DurableJournal, JournalError
from tidelog.controller.raft.patches import _STATE_LEADER, _PatchedSyncObj
from tidelog.controller.raft.self_test import _self_test
from tidelog.controller.raft.settings import RaftSettings
from tidelog.controller.raft.snapshot_codec import _decode_snapshot, _encode_snapshot
from tidelog.controller.raft.tls_wire import _TlsContexts
from tidelog.controller.raft.transport import _make_transport_class
from tidelog.tls import TlsFiles

logger = logging.getLogger("controller.raft")  # one logger for the whole adapter

#: logCompactionMinEntries when compaction is off: more entries than a log can hold.
_NEVER_ENTRIES = 2**62

#: Proposals handed to pysyncobj per tick. pysyncobj drains its queue for at most one
#: append-entries period per tick; one left in its queue across a tick may meet a leadership
#: change (see _make_transport_class). 64 appends take a few ms when the process is not starved.
_PROPOSALS_PER_TICK_MAX = 64
#: How long close() waits for the tick thread; a tick never blocks longer than tick_period_s
#: plus a snapshot write.
_CLOSE_TIMEOUT_S = 10.0
#: A leader refusing proposals at the journal's limit says so at most this often.
_JOURNAL_FULL_LOG_INTERVAL_S = 60.0


class StateMachine(Protocol):
    """What the adapter drives. Every call comes from the adapter's one tick thread, in order."""

    def apply(self, batch: bytes, index: int) -> None:
        """Replays one committed batch. ``index`` is the Raft log index, for logs and metrics:
        indexes increase but have gaps (pysyncobj's own no-op entries are not passed on).
        Raising stops the node: a state machine that could not apply an entry has diverged.
        A long replay should call :meth:`RaftQuorum.keep_alive` every few hundred records."""

    def snapshot(self) -> bytes:
        """Returns the whole state as of the last applied batch (protobuf bytes of the image)."""

    def restore(self, data: bytes) -> None:
        """Replaces the whole state with a ``snapshot()`` result (on start or when the leader
        sends one). The state machine must start empty: on start the adapter restores the
        latest snapshot, if any, then applies the journal's committed entries after it."""


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
        tls_files: TlsFiles | None = None,
        on_leadership_change: Callable[[bool, int], None] | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
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
        # The node's [tls] files: the transport runs inside mutual TLS (tls_wire.py). Loaded now,
        # so an unusable file fails the constructor with InvalidConfigError naming it.
        self._tls = None if tls_files is None else _TlsContexts(tls_files)
        self._data_dir = Path(data_dir)
        self._data_dir.mkdir(parents=True, exist_ok=True)
        self.journal_path = self._data_dir / "raft.journal"
        #: The journal's term, vote and commit index (journal.py).
        self.journal_state_path = self._data_dir / "raft.state"
        self._journal: DurableJournal | None = None  # opened on the tick thread
        self._journal_full_logged = -math.inf  # tick thread only
        self.snapshot_path = self._data_dir / "raft.snapshot"

        self._lock = threading.Lock()  # guards the three collections below and _next_seq
        self._queued: collections.deque[_Proposal] = collections.deque()
        self._in_flight: dict[int, _Proposal] = {}
        self._tick_tasks: collections.deque[Callable[[], None]] = collections.deque()
        self._next_seq = 0

        self._listeners: list[Callable[[bool, int], None]] = []  # tick thread only
        self._was_leader = False  # tick thread only
        self._applied_index = 0  # tick thread only: last index given to the state machine
        self._last_keep_alive = 0.0  # tick thread only: monotonic time of the last keep_alive
        self._handed: dict[int, _Proposal] = {}  # tick thread only: id(command) -> proposal
        self._last_expiry_check = 0.0
        self._failure: BaseException | None = None
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._syncobj: Any = None
        self._wakeup: _Wakeup | None = None
        if on_leadership_change is not None:
            self._listeners.append(on_leadership_change)
        #: Called once, on the tick thread, after a failure stopped the node (see ``failure``).
        self._on_failure = on_failure

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
            "transport_tls": self._tls is not None,
            # Bytes of the journal file in use, and its syncs (each covering a flush point).
            "journal_bytes": 0 if self._journal is None else self._journal.bytes_used,
            "journal_syncs": 0 if self._syncobj is None else int(self._syncobj._tl_sends.syncs),
            "running": self._thread.is_alive(),
            "failure": None if self._failure is None else repr(self._failure),
        }

    # --------------------------------------------------------------------------------- close

    def close(self) -> None:
        """Stops the node: pending proposals fail with CLOSED, sockets close, the journal is
        synced and closed. Idempotent. The same data dir may then be reopened."""
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
            self._journal = DurableJournal(self.journal_path, self.journal_state_path,
                                           bytes_max=self._settings.journal_bytes_max)
            consumer = _AppendConsumer(self._apply_committed)
            self._syncobj = _TidelogSyncObj(
                self.self_address, list(self.peer_addresses), self._build_conf(),
                consumers=[consumer], journal=self._journal,
                snapshot_journal_bytes=self._settings.snapshot_journal_bytes,
                fast_election_stagger_s=self._settings.fast_election_stagger_s or None,
                transportClass=_make_transport_class(self._settings, self._on_forward_attempt,
                                                     key=key, tls=self._tls),
            )
            method_name = self._syncobj._getFuncName((id(consumer), "append"))
            method_id = self._syncobj._methodToID[(id(consumer), method_name)]
            assert method_id == _APPEND_METHOD_ID, f"append has method id {method_id}"
            self._wakeup = _Wakeup(self._syncobj._poller)
        except BaseException as exc:
            if self._journal is not None and self._syncobj is None:
                self._journal._destroy()
            start_error.append(exc)
            started.set()
            return
        started.set()
        logger.info("raft node %d started at %s (listening on %s, %s) with peers %s",
                    self.node_id, self.self_address, self.bind_address,
                    "mutual TLS" if self._tls is not None else "no TLS",
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
            except JournalError as exc:
                # One line: the message names the file and the cause (ENOSPC, EIO, the limit).
                self._fail("cannot write its Raft journal", exc, traceback=False)
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
        if self._failure is not None and self._on_failure is not None:
            try:
                self._on_failure(self._failure)
            except Exception:
                logger.exception("raft node %d: the failure callback failed", self.node_id)

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
            # snapshot_min_entries 0 leaves only the journal-bytes trigger (_PatchedSyncObj).
            logCompactionMinEntries=s.snapshot_min_entries if s.snapshots_on else _NEVER_ENTRIES,
            logCompactionMinTime=s.snapshot_interval_s if s.snapshots_on else math.inf,
            logCompactionSplit=False,
            logCompactionBatchSize=s.snapshot_chunk_bytes,
            commandsWaitLeader=False,  # no leader: fail fast with MISSING_LEADER, never queue
            fullDumpFile=str(self.snapshot_path),
            # None: pysyncobj's FileJournal is never fsynced; the patched SyncObj runs on our
            # DurableJournal instead (journal=, see _run).
            journalFile=None,
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
        handed_bytes = 0  # journal bytes of the commands handed in this tick, not yet appended
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
            entry_bytes = len(command) + RECORD_OVERHEAD_BYTES
            if self._journal_full(handed_bytes + entry_bytes):
                self._complete(proposal, None, FailReason.JOURNAL_FULL)
                continue
            handed_bytes += entry_bytes
            proposal.command = command
            self._handed[id(command)] = proposal
            # Already prefixed with the command type, so passed with commandType=None: pysyncobj
            # queues this very object, which lets _on_forward_attempt recognise it.
            self._syncobj._applyCommand(command, functools.partial(self._on_outcome, proposal))

    def _journal_full(self, more_bytes: int) -> bool:
        """Whether appending ``more_bytes`` would take the journal past its limit (logged at
        most once a minute: compaction should have kept it far below)."""
        journal = self._journal
        assert journal is not None
        if journal.bytes_used + more_bytes < journal.bytes_max:
            return False
        now = time.monotonic()
        if now - self._journal_full_logged >= _JOURNAL_FULL_LOG_INTERVAL_S:
            self._journal_full_logged = now
            logger.error("raft node %d: refusing proposals: the journal holds %d bytes, its "
                         "limit is %d (journal_bytes_max); log compaction has not kept it "
                         "below %d (snapshot_journal_bytes): see the snapshot errors logged "
                         "before this", self.node_id, journal.bytes_used, journal.bytes_max,
                         self._settings.snapshot_journal_bytes)
        return True

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
        started = self._last_keep_alive = time.monotonic()
        try:
            self._state_machine.apply(batch, index)
        except Exception as exc:
            self._fail(f"state machine failed to apply entry {index}", exc)
            raise _StateMachineFailed() from exc
        self._applied_index = index
        took = time.monotonic() - started
        if took > self._settings.append_entries_period_s:
            # Its end, whatever the state machine called meanwhile: a follower's election
            # deadline counts from now (see keep_alive).
            self._syncobj.tl_keep_alive()
            if took > self._settings.election_timeout_min_s:
                logger.info("raft node %d: applying entry %d took %.0f ms (election timeout "
                            "%.0f ms; kept alive meanwhile)", self.node_id, index, took * 1000,
                            self._settings.election_timeout_min_s * 1000)
        return index

    def keep_alive(self) -> None:
        """For the state machine, between the records of a long apply: the leader sends its
        append_entries (heartbeats, the commit index) as its tick would, a follower pushes its
        election deadline back (patches.py, _PatchedSyncObj "Long applies"). At most once per
        append_entries period; a no-op off the tick thread (a snapshot restore, tests)."""
        if threading.current_thread() is not self._thread or self._syncobj is None:
            return
        now = time.monotonic()
        if now - self._last_keep_alive < self._settings.append_entries_period_s:
            return
        self._last_keep_alive = now
        self._syncobj.tl_keep_alive()

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

    def _fail(self, what: str, exc: BaseException, *, traceback: bool = True) -> None:
        if traceback:
            logger.critical("raft node %d: %s; stopping the node", self.node_id, what,
                            exc_info=exc)
        else:
            logger.critical("raft node %d: %s, stopping the node: %s", self.node_id, what, exc)
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


class _TidelogSyncObj(_PatchedSyncObj):
    """The patched SyncObj reading the adapter's snapshot format (see _encode_snapshot)."""

    def _tl_snapshot_last_entry(self, path: str) -> tuple[int, int]:
        last_entry, _prev, _cluster, _state = _decode_snapshot(Path(path).read_bytes())
        return last_entry[1], last_entry[2]
