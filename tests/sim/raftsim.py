"""A deterministic simulation of a pysyncobj Raft cluster: real SyncObj code, simulated world.

N real ``pysyncobj.SyncObj`` instances (3 or 5) run in one process and on one thread, each with
``autoTick=False``. One scheduler loop owns everything that happens: it pops the next event (a
node tick, a message arriving, a connection attempt finishing, a client request, a fault) from
a heap ordered by simulated time, with ties broken by a seeded draw, runs it, and then checks
the invariants (:mod:`raftsim_checker`) on every node the event ran in (the others cannot have
changed). Nothing depends on wall-clock time or thread scheduling: a seed replays the same run,
event for event, and the trace digest says so.

What pysyncobj sees (:mod:`raftsim_env`):
- time: each node's own clock, ``offset + rate * now`` (rates differ by a seeded drift);
- randomness (election timeouts): a per-node ``random.Random`` seeded from the run's seed;
- its journal: a :class:`SimJournal` (FileJournal's durability under kill -9) that outlives the
  node's crash and is handed to the restarted ``SyncObj``; its snapshot: a real dump file in a
  temporary directory (``fullDumpFile``, ``useFork=False``), written synchronously;
- its network: :class:`SimTransport` over :class:`SimNetwork` (:mod:`raftsim_net`).

The replicated state is :class:`SimLog`: one replicated method, ``append(batch: bytes)``, whose
state is the list of applied batches: opaque bytes, the shape of Tidelog's metadata adapter.
Clients propose batches with unique ids to a node that thinks it is leader (or, one time in
five, to any node, so that forwarding is exercised) and record each callback's outcome.

A run: ``warmup_s`` without faults, ``duration_s`` of faults (:mod:`raftsim_faults`) under load,
then everything is healed; the load goes on for ``settle_load_s`` and the cluster then gets up
to ``converge_max_s`` to converge (the run ends as soon as it has). A majority must end with one
image holding every acknowledged batch; nodes still behind are reported, with a diagnosis.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import os
import random
import shutil
import tempfile
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pysyncobj.pickle as pysyncobj_pickle
from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj.config import FAIL_REASON
from raftsim_checker import LEADER, InvariantChecker, InvariantViolation, NodeView
from raftsim_env import SimEnvironment, SimJournal, SimNode, patched_pysyncobj
from raftsim_faults import FaultInjector, fault_weights
from raftsim_net import US, NetConfig, SimNetwork, SimTransport

__all__ = [
    "KNOWN_BUGS",
    "InvariantViolation",
    "PysyncobjRaised",
    "SimConfig",
    "SimLog",
    "SimResult",
    "Simulation",
    "scenario",
]

MS = 1_000
#: A message or client request wakes the node's tick loop (pysyncobj's poll returns, then
#: _onTick runs); messages arriving within this window are handled by the same tick.
TICK_SOON_US = 100
#: pysyncobj's autoTickPeriod is 50 ms; a real tick loop also loses some time to the scheduler.
TICK_JITTER_US = 2 * MS
#: Simulated time does not pass inside an event, but pysyncobj has loops bounded only by its
#: clock (they stop after appendEntriesPeriod). Each clock read inside a step costs this much
#: of the node's time, as running code would, so such loops end; the node's clock never goes
#: back (it is the later of the simulated time and its last reading plus this).
CLOCK_READ_COST_S = 20e-6
#: Messages one node may send in one step before it is reported as a flood.
FLOOD_MESSAGES = 500
#: A run that needs more events than this is a runaway (a bug in the simulator or a loop in
#: pysyncobj that the clock model does not bound): it stops with an error, not by eating memory.
EVENTS_MAX = 3_000_000
#: How often the end phase looks whether the cluster has converged.
CONVERGE_POLL_US = 500 * MS
#: Rejections remembered per follower, to tell a livelock from a slow walk back.
REJECTS_KEPT = 8
#: A follower whose rejections jumped back up this often in the end phase is in a livelock.
LIVELOCK_RESETS = 3
TRACE_TAIL_LINES = 400
#: Callback outcomes that mean the batch was never appended (so it must never be applied).
DEFINITE_FAILURES = {
    FAIL_REASON.QUEUE_FULL: "QUEUE_FULL",
    FAIL_REASON.MISSING_LEADER: "MISSING_LEADER",
    FAIL_REASON.DISCARDED: "DISCARDED",
    FAIL_REASON.NOT_LEADER: "NOT_LEADER",
    FAIL_REASON.REQUEST_DENIED: "REQUEST_DENIED",
}
#: Outcomes after which the batch may or may not be committed.
UNKNOWN_FAILURES = {
    FAIL_REASON.LEADER_CHANGED: "LEADER_CHANGED",
    FAIL_REASON.UNKNOWN_OUTCOME: "UNKNOWN_OUTCOME",
}
#: Raft parameters as DESIGN.md section 6 asks Tidelog's adapter to set them; compaction is off
#: (see KNOWN_BUGS: with snapshots, pysyncobj 0.3.17 breaks two invariants).
RAFT_DEFAULTS: tuple[tuple[str, Any], ...] = (
    ("appendEntriesUseBatch", False),
    ("appendEntriesPeriod", 0.05),
    ("raftMinTimeout", 0.2),
    ("raftMaxTimeout", 0.5),
    ("connectionRetryTime", 0.5),
    ("connectionTimeout", 3.5),
    ("leaderFallbackTimeout", 30.0),
    ("logCompactionMinEntries", 10**9),
    ("logCompactionMinTime", 10**9),
    ("appendEntriesBatchSizeBytes", 2**16),
    ("commandsWaitLeader", True),
)

#: pysyncobj 0.3.17 bugs this simulation found, each with a run that shows it (see README.md).
#: The tests replay these and expect them to fail (strict xfail): a change to the simulator
#: that moves a run off its bug turns the test into an XPASS, and the seed must be found again.
KNOWN_BUGS: dict[str, dict[str, Any]] = {
    "snapshot-commit": {
        "what": "a follower advances its commit index on a snapshot chunk without matching its "
                "log, then applies its own uncommitted tail (state machine safety)",
        "seed": 1, "overrides": {"snapshots": True},
    },
    "snapshot-rollback": {
        "what": "a stale reset makes the leader resend a snapshot the follower already has; "
                "__loadDumpFile loads it anyway and the state machine goes back in time",
        "seed": 3, "overrides": {"snapshots": True, "workarounds": ["snapshot-commit"]},
    },
    "reject-pingpong": {
        "what": "a follower with a conflicting entry rejects a pipelined batch of "
                "append_entries with next=k (conflict) and then next=k+1 (gap); the leader "
                "keeps the last, so the follower never catches up while that repeats",
        "seed": 3, "overrides": {},
    },
    "truncate-acked-on-resend": {
        "what": "a success reply to an older pipelined append_entries lowers the leader's "
                "nextIndex; it resends a window cut by appendEntriesBatchSizeBytes; the "
                "follower truncates everything after prevLogIdx and so drops entries it has "
                "acknowledged (and the leader committed); it crashes, and a later leader lacks "
                "a committed entry (leader completeness), over an in-order network",
        "seed": 244, "overrides": {"duration_s": 60.0, "snapshots": True,
                                   "workarounds": ["reject-pingpong", "snapshot-commit"]},
    },
    "truncate-acked-no-snapshots": {
        "what": "truncate-acked-on-resend without log compaction: n1 acknowledged entries "
                "397-398, then truncated them on a resend of 365-396 (after the leader's "
                "nextIndex went back on a stale success); the leader n0 had committed 398 "
                "counting that ack; n1, elected in term 22, wrote another entry at 398, and n0, "
                "restarted, applied its committed 398 (state machine safety)",
        "seed": 1064, "overrides": {"duration_s": 60.0},
    },
    "compaction-empties-journal": {
        "what": "a compaction serialized at index i finishes (deleteEntriesTo(i)) after an "
                "append_entries truncated the journal below i: the journal is left empty and "
                "every later step raises IndexError (the node is dead until restarted)",
        "seed": 228, "overrides": {"duration_s": 60.0, "snapshots": True,
                                   "workarounds": ["reject-pingpong", "snapshot-commit"]},
    },
    "truncate-on-reorder": {
        "what": "a follower truncates its log after prevLogIdx on every append_entries (the "
                "'truncating already-applied log entries' CRITICAL line); a delayed, older "
                "append_entries thus removes entries it already acknowledged, the leader "
                "commits them counting that ack, and a later leader lacks them (leader "
                "completeness). Needs out-of-order delivery: this run uses the datagram network",
        "seed": 5, "overrides": {"duration_s": 30.0, "workarounds": ["reject-pingpong"],
                                 "net": NetConfig(datagram=True, drop_rate=0.05)},
    },
    "large-entry-chunks": {
        "what": "an entry of appendEntriesBatchSizeBytes or more is sent in chunks; 'finish' is "
                "chosen by the command's length, not the pickled entry's, so the follower "
                "unpickles a truncated entry (EOFError on its tick, the entry never arrives)",
        "seed": 3, "overrides": {"batch_bytes": (1500, 3000), "raft_overrides":
                                 {"appendEntriesBatchSizeBytes": 1024}},
    },
}


def adapter_patches() -> Any:
    """controller/raft/, where Tidelog's pysyncobj patches live. Imported on first use: the
    import checks that the installed pysyncobj is the one they were verified against."""
    from tidelog.controller import raft

    return raft


#: Patched modes whose nodes run on the adapter's DurableJournal model (SimJournal durable=True).
DURABLE_MODES = frozenset({"adapter", "follower-only"})
#: Simulated seconds between the kernel's writebacks of a journal that never syncs (Linux's
#: dirty_writeback_centisecs is 5 s; pages older than dirty_expire_centisecs, 30 s, go then).
WRITEBACK_PERIOD_S = 5.0


def _syncobj_class(patched: str) -> type:
    if not patched:
        return SyncObj
    patched_class: type = adapter_patches()._PatchedSyncObj
    if patched in ("adapter", "no-fsync"):
        # no-fsync: the adapter before its durable journal (pysyncobj's FileJournal model: it
        # never needs a sync, so nothing waits for one and nothing survives a power loss but
        # what the kernel wrote back).
        return patched_class
    if patched == "follower-only":
        return type("FollowerOnlyPatches", (patched_class,), {
            "_tl_on_next_node_idx": lambda self, node, message:
                SyncObj._SyncObj__onMessageReceived(self, node, message),
        })
    raise ValueError(f"unknown patched mode {patched!r}")


class PysyncobjRaised(AssertionError):
    """pysyncobj raised inside a node step (its tick thread would log it and carry on)."""


class SimLog(SyncObjConsumer):
    """The replicated state: the applied batches, in order (Tidelog's adapter keeps bytes too)."""

    def __init__(self, on_apply: Callable[[int, bytes], None]) -> None:
        # Set before SyncObjConsumer.__init__, so it is left out of snapshots (on purpose).
        self._on_apply = on_apply
        super().__init__()
        self.batches: list[bytes] = []

    @replicated
    def append(self, batch: bytes) -> int:
        return self._apply(batch)

    def _apply(self, batch: bytes) -> int:
        """Apply one committed batch (a subclass may break this on purpose, to test the checker)."""
        raft_index = self._syncObj.raftLastApplied + 1
        self.batches.append(batch)
        self._on_apply(raft_index, batch)
        return len(self.batches)


#: Builds node i's state machine; the argument is the hook it calls for each applied batch.
LogFactory = Callable[[int, Callable[[int, bytes], None]], SimLog]


def _default_log(index: int, on_apply: Callable[[int, bytes], None]) -> SimLog:
    return SimLog(on_apply)


@dataclass(frozen=True)
class SimConfig:
    seed: int
    nodes: int = 3
    warmup_s: float = 1.0
    duration_s: float = 40.0
    settle_load_s: float = 3.0
    converge_max_s: float = 30.0
    client_rate_per_s: float = 30.0
    #: Client requests without an outcome yet; more are not issued (a bounded client).
    outstanding_max: int = 64
    batch_bytes: tuple[int, int] = (16, 512)
    #: Share of requests sent to a random node instead of a node that thinks it is leader.
    to_any_node: float = 0.2
    fault_interval_s: float = 2.0
    fault_weights: tuple[tuple[str, float], ...] = fault_weights(snapshots=False)
    #: Most nodes down (crashed or paused) at once, except a whole-cluster crash; None: minority.
    down_max: int | None = None
    clock_drift: float = 0.02
    #: An exception from pysyncobj ends the run (PysyncobjRaised); with False the run goes on,
    #: as pysyncobj's _autoTickThread does (log, carry on), and it is listed as an anomaly.
    exceptions_fatal: bool = True
    #: Workarounds for pysyncobj bugs, applied where Tidelog's adapter could apply them (in its
    #: transport); names are keys of raftsim_net.WORKAROUNDS.
    workarounds: frozenset[str] = frozenset()
    net: NetConfig = field(default_factory=NetConfig)
    raft: tuple[tuple[str, Any], ...] = RAFT_DEFAULTS
    #: Run pysyncobj with Tidelog's patches (the adapter's own code, imported: adapter_patches):
    #: "adapter" puts controller/raft/patches.py's _PatchedSyncObj in place of SyncObj and its
    #: transport's _RejectFloor on every reply a follower sends; "follower-only" is the same
    #: with the leader's reply handling left as pysyncobj's (its stale-success nextIndex
    #: regression makes resends frequent, so the follower's rule is shown to hold alone).
    #: "no-fsync" is "adapter" on pysyncobj's FileJournal model (never synced: the adapter as
    #: it was before its DurableJournal), to show what power loss does without the syncs.
    #: "" runs pysyncobj as is. Not combined with ``workarounds``.
    patched: str = ""
    #: Patched runs: check Raft's persistence rules as each message is sent and as a leader
    #: commits (check_durable_send, _check_durable_commit). False leaves only the invariants
    #: a client sees, to show what breaking those rules leads to.
    check_durability: bool = True
    #: Patched runs: _PatchedSyncObj's fast_election_stagger_s (its "Fast elections": a
    #: pre-vote when the leader's connection ends); None turns them off, as the known bugs'
    #: pinned runs do, so that they replay the course on which pysyncobj went wrong.
    fast_election_stagger_s: float | None = 0.05

    def raft_conf(self) -> dict[str, Any]:
        return dict(self.raft)


def scenario(seed: int, *, snapshots: bool = False, raft_overrides: dict[str, Any] | None = None,
             workarounds: list[str] | tuple[str, ...] = (), power_loss: bool = False,
             **overrides: Any) -> SimConfig:
    """The seed's random scenario: cluster size, timing, load and fault rate all vary.

    ``snapshots=True`` turns log compaction on (a random, small threshold, plus forced
    compactions as a fault), so followers install snapshots. ``power_loss=True`` adds power
    losses of one node and of all (raftsim_faults.py).
    """
    rng = random.Random(f"{seed}/scenario")
    raft = dict(RAFT_DEFAULTS)
    compaction_entries = rng.randint(20, 300)
    if rng.random() < 0.5:
        # Small enough that catching up takes several append_entries messages; larger than any
        # batch (a single entry of this size or more hits KNOWN_BUGS["large-entry-chunks"]).
        raft["appendEntriesBatchSizeBytes"] = rng.choice([4096, 16384])
    if rng.random() < 0.5:
        raft["leaderFallbackTimeout"] = rng.choice([1.0, 2.0, 5.0])
    if rng.random() < 0.3:
        raft["connectionTimeout"] = rng.choice([0.5, 1.0, 2.0])
    if snapshots:
        raft["logCompactionMinEntries"] = compaction_entries
        raft["logCompactionMinTime"] = 300
    raft.update(raft_overrides or {})
    config = SimConfig(
        seed=seed,
        nodes=3 if rng.random() < 0.7 else 5,
        client_rate_per_s=rng.choice([10.0, 30.0, 60.0]),
        batch_bytes=(16, rng.choice([64, 512, 2048])),
        fault_interval_s=rng.choice([0.5, 1.0, 2.0, 4.0]),
        fault_weights=fault_weights(snapshots=snapshots, power_loss=power_loss),
        clock_drift=rng.choice([0.0, 0.02, 0.1]),
        net=NetConfig(base_delay_us=(100, rng.choice([1_000, 5_000, 20_000]))),
        raft=tuple(raft.items()),
        workarounds=frozenset(workarounds),
    )
    return replace(config, **overrides)


def known_bug_config(name: str) -> SimConfig:
    bug = KNOWN_BUGS[name]
    return scenario(bug["seed"], **bug["overrides"])


@dataclass
class SimResult:
    seed: int
    trace_digest: str
    events: int
    simulated_s: float
    ops: dict[str, int]
    terms: int
    faults: dict[str, int]
    messages: dict[str, int]
    applied: int
    behind: list[str]
    anomalies: list[str]
    nodes: int
    #: Patched runs: how often each of the adapter's patched paths ran (_PatchedSyncObj.tl_counts,
    #: plus "reject_floor_rewrite"), summed over every node process of the run.
    patch_counts: dict[str, int] = field(default_factory=dict)

    @property
    def majority_converged(self) -> bool:
        """A majority holds the longest image (the cluster can commit again)."""
        lagging = [note for note in self.behind if " behind: " in note]
        return self.nodes - len(lagging) > self.nodes // 2

    def summary(self) -> str:
        critical = sum(1 for a in self.anomalies if "CRITICAL" in a)
        patched = f", patched paths {self.patch_counts}" if self.patch_counts else ""
        return (f"seed {self.seed}: {self.simulated_s:.1f} simulated s, {self.events} events, "
                f"{self.terms} terms, {self.applied} batches applied, ops {self.ops}, "
                f"faults {self.faults}, {critical} pysyncobj CRITICAL lines{patched}, "
                f"behind: {self.behind or 'none'}")


@dataclass
class _Op:
    op_id: int
    batch: bytes
    node: int
    incarnation: int
    outcome: str | None = None


@dataclass
class _Node:
    index: int
    obj: SimNode
    journal: SimJournal
    dump_path: str
    rng: random.Random
    clock_offset_s: float
    clock_rate: float
    so: Any = None
    log: SimLog | None = None
    incarnation: int = 0
    running: bool = False
    paused: bool = False
    tick_due_us: int | None = None
    commit_seen: int = 0
    commit_verified: int = 0
    rejects: deque[int] = field(default_factory=lambda: deque(maxlen=REJECTS_KEPT))
    reject_resets: int = 0
    last_clock_s: float = 0.0

    def clock(self, now_us: int) -> float:
        """The node's monotonic clock: drifting simulated time, plus CPU time inside a step."""
        reading = max(self.clock_offset_s + self.clock_rate * now_us / US,
                      self.last_clock_s + CLOCK_READ_COST_S)
        self.last_clock_s = reading
        return reading


class Simulation:
    def __init__(self, config: SimConfig, *, log_factory: LogFactory = _default_log) -> None:
        self.config = config
        self.log_factory = log_factory
        self.now_us = 0
        self._heap: list[tuple[int, float, int, str, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self._tiebreak = self.rng_for("tiebreak")
        self._client_rng = self.rng_for("clients")
        self._power_rng = self.rng_for("power")
        if config.patched and config.workarounds:
            raise ValueError("patched runs use the adapter's fixes only, not the sim's workarounds")
        self._raft_conf = config.raft_conf()
        self._syncobj_class = _syncobj_class(config.patched)
        self._tick_period_s = float(self._raft_conf.get("autoTickPeriod", 0.05))
        self.env = SimEnvironment()
        self._dump_dir = tempfile.mkdtemp(prefix="raftsim-")
        self.nodes = [self._make_node(i) for i in range(config.nodes)]
        self.net = SimNetwork(self, config.net, config.nodes)
        self.faults = FaultInjector(self)
        self.checker = InvariantChecker(is_proposed=self._is_proposed)
        self._digest = hashlib.sha256()
        self._tail: deque[str] = deque(maxlen=TRACE_TAIL_LINES)
        self.events = 0
        self.ops: dict[int, _Op] = {}
        self._proposed: set[bytes] = set()
        self._outstanding = 0
        self._next_op = 0
        self._load_on = True
        self._stop = False
        self._last_lengths: tuple[int, ...] | None = None
        self._dirty: set[int] = set()
        self._pending_applies: list[tuple[int, int, bytes]] = []
        self._pending_roles: list[tuple[int, int, int]] = []
        self._pending_results: list[tuple[_Op, Any, int]] = []
        self.anomalies: list[str] = []
        self.behind: list[str] = []
        self.patch_counts: Counter[str] = Counter()
        self._current: int | None = None

    # --- services for the network, the faults and the environment -------------------------------
    def rng_for(self, stream: str) -> random.Random:
        return random.Random(f"{self.config.seed}/{stream}")

    def schedule(self, at_us: int, label: str, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at_us, self._tiebreak.random(), self._seq, label, fn, args))

    def trace(self, line: str) -> None:
        text = f"{self.now_us} {line}"
        self._digest.update(text.encode())
        self._digest.update(b"\n")
        self._tail.append(text)

    def trace_tail(self, lines: int = 150) -> str:
        return "\n".join(list(self._tail)[-lines:])

    def is_running(self, i: int) -> bool:
        return self.nodes[i].running

    def is_paused(self, i: int) -> bool:
        return self.nodes[i].paused

    def host_accepts(self, i: int) -> bool:
        """A connection to node i succeeds: its process is alive (a paused kernel still accepts)."""
        return self.nodes[i].running

    def incarnation(self, i: int) -> int:
        return self.nodes[i].incarnation

    def node_obj(self, i: int) -> SimNode:
        return self.nodes[i].obj

    def sync_conf_value(self, name: str) -> Any:
        return self._raft_conf[name]

    def note_reject(self, follower: int, next_index: int) -> None:
        """A follower rejected append_entries: remember it for the lag diagnosis."""
        node = self.nodes[follower]
        if not self._load_on and node.rejects and next_index > node.rejects[-1]:
            node.reject_resets += 1
        node.rejects.append(next_index)

    def call_in_node(self, i: int, fn: Callable[[], None], *, wake: bool = True) -> None:
        """Run fn as node i's process (its clock and randomness), then wake its tick loop."""
        node = self.nodes[i]
        assert node.running and not node.paused and self._current is None
        self._enter(node)
        try:
            fn()
        except Exception as e:
            if self.config.exceptions_fatal:
                raise PysyncobjRaised(f"n{i}: {type(e).__name__}: {e}") from e
            self._anomaly(f"pysyncobj raised on n{i}: {type(e).__name__}: {e}")
        finally:
            self._leave()
        if wake:
            self._tick_at(i, self.now_us + TICK_SOON_US)

    def _enter(self, node: _Node) -> None:
        self._sent_before = self.net.counters["sent"]
        self._current = node.index
        self._dirty.add(node.index)
        self.env.node_name = node.obj.id
        self.env.node_clock = functools.partial(node.clock, self.now_us)
        self.env.node_rng = node.rng

    def _leave(self) -> None:
        sent = self.net.counters["sent"] - self._sent_before
        if sent > FLOOD_MESSAGES:
            self._anomaly(f"n{self._current} sent {sent} messages in one step (flood)")
        self._current = None
        self.env.node_name = None
        self.env.node_clock = None
        self.env.node_rng = None

    # --- node processes ---------------------------------------------------------------------------
    def _make_node(self, i: int) -> _Node:
        rng = self.rng_for(f"node{i}")
        drift = self.config.clock_drift
        return _Node(
            index=i, obj=SimNode(i),
            journal=SimJournal(durable=self.config.patched in DURABLE_MODES),
            dump_path=os.path.join(self._dump_dir, f"n{i}.dump"), rng=rng,
            clock_offset_s=rng.uniform(1_000.0, 100_000.0),
            clock_rate=rng.uniform(1.0 - drift, 1.0 + drift),
        )

    def start(self, i: int) -> None:
        """Start (or restart) node i's process on its journal and dump file."""
        node = self.nodes[i]
        node.incarnation += 1
        incarnation = node.incarnation
        conf = SyncObjConf(
            autoTick=False, fullDumpFile=node.dump_path, journalFile=None, useFork=False,
            pollerType="select", dynamicMembershipChange=False,
            onStateChanged=lambda old, new: self._on_state_changed(i, incarnation, new),
            **self._raft_conf,
        )
        log = self.log_factory(i, functools.partial(self._on_apply, i))
        others = [n.obj for n in self.nodes if n.index != i]
        transport_class = functools.partial(SimTransport, net=self.net, index=i)
        node.running, node.paused, node.log = True, False, log
        node.commit_seen = node.commit_verified = 0
        self.env.next_journal = node.journal
        self._enter(node)
        try:
            extra = ({"fast_election_stagger_s": self.config.fast_election_stagger_s}
                     if self.config.patched else {})
            node.so = self._syncobj_class(node.obj, others, conf, consumers=[log],
                                          nodeClass=SimNode, transportClass=transport_class,
                                          **extra)
        finally:
            self._leave()
        transport = node.so._SyncObj__transport
        # Patched, that is the adapter's _DurableSends around the SimTransport.
        self.net.register(i, getattr(transport, "transport", transport))
        self.checker.on_restart(node.obj.id)
        self.trace(f"start n{i} incarnation {incarnation} journal {len(node.journal)} entries")
        self._tick_at(i, self.now_us + TICK_SOON_US)

    def crash(self, i: int, *, power_loss: bool = False) -> None:
        """kill -9: the process is gone, its journal keeps what its model keeps; with
        ``power_loss``, the machine is too: its journal keeps only what reached the disk."""
        node = self.nodes[i]
        node.running, node.paused, node.tick_due_us = False, False, None
        self.net.on_crash(i)
        if power_loss:
            node.journal.power_loss(self._power_rng)
        else:
            node.journal.crash()
        self._release_process(node)
        for op in self.ops.values():
            if op.node == i and op.incarnation == node.incarnation and op.outcome is None:
                self._finish_op(op, "info:crashed")
        self.trace(f"{'power loss' if power_loss else 'crash'} n{i}")

    def pause(self, i: int) -> None:
        self.nodes[i].paused = True
        self.trace(f"pause n{i}")

    def resume(self, i: int, incarnation: int) -> None:
        node = self.nodes[i]
        if node.incarnation != incarnation or not node.paused:
            return
        node.paused = False
        self.trace(f"resume n{i}")
        self.net.on_resume(i)
        self._tick_at(i, self.now_us + TICK_SOON_US)

    def _release_process(self, node: _Node) -> None:
        """Close what a SyncObj holds outside Python objects (its pipe notifier's fds)."""
        if self.config.patched and node.so is not None:
            self.patch_counts.update(node.so.tl_counts)
            floor = node.so._SyncObj__transport.reject_floor
            self.patch_counts["reject_floor_rewrite"] += floor.rewrites
        notifier = getattr(node.so, "_SyncObj__pipeNotifier", None)
        for attr in ("_PipeNotifier__pipeR", "_PipeNotifier__pipeW"):
            fd = getattr(notifier, attr, None)
            if fd is not None:
                os.close(fd)
        node.so, node.log = None, None

    def _tick_at(self, i: int, at_us: int) -> None:
        node = self.nodes[i]
        if node.tick_due_us is not None and node.tick_due_us <= at_us:
            return
        node.tick_due_us = at_us
        self.schedule(at_us, f"tick n{i}", self._on_tick, i, node.incarnation, at_us)

    def _on_tick(self, i: int, incarnation: int, at_us: int) -> None:
        node = self.nodes[i]
        if node.incarnation != incarnation or not node.running or node.tick_due_us != at_us:
            return
        node.tick_due_us = None
        if node.paused:
            return  # resume() ticks it
        self.call_in_node(i, lambda: node.so.doTick(0.0), wake=False)
        period_us = int(self._tick_period_s * US / node.clock_rate)
        self._tick_at(i, self.now_us + period_us + self._tiebreak.randint(0, TICK_JITTER_US))

    def _on_writeback(self) -> None:
        """The kernel's periodic writeback (journals that never sync; a no-op for the others)."""
        self.schedule(self.now_us + int(WRITEBACK_PERIOD_S * US), "writeback", self._on_writeback)
        for node in self.nodes:
            if node.running:
                node.journal.on_writeback()

    # --- durability (patched runs): nothing answered before it is on disk ----------------------
    def check_durable_send(self, a: int, b: int, message: Any) -> None:
        """Raft's persistence rules, checked as node a sends: a vote request or answer only once
        the term and vote it reflects are synced, a successful append reply only once the
        entries it acknowledges are."""
        if not (self.config.patched and self.config.check_durability):
            return
        kind = message.get("type")
        journal = self.nodes[a].journal
        if kind in ("request_vote", "response_vote"):
            term, vote = journal.synced_term_and_vote()
            voted_for = self.nodes[a if kind == "request_vote" else b].obj.id
            if not (term > message["term"] or (term == message["term"] and vote == voted_for)):
                raise InvariantViolation(
                    f"durability: n{a} sent {kind} of term {message['term']} to n{b} while its "
                    f"synced term and vote were {term}, {vote!r} (a power loss forgets it)")
        elif kind == "next_node_idx" and message["success"]:
            acked = min(message["next_node_idx"] - 1, journal.entries[-1][1])
            synced = journal.synced_entry_at(acked)
            if synced is None or (synced is not True and synced != journal.entry_at(acked)):
                raise InvariantViolation(
                    f"durability: n{a} acknowledged entries up to {acked} to n{b} before "
                    f"syncing them (a power loss loses an acknowledged entry)")

    def _check_durable_commit(self, node: _Node, commit: int) -> None:
        """A leader's commit index counts only copies on disk: a majority must have synced the
        entry it commits (with the leader's term for it)."""
        if not (self.config.patched and self.config.check_durability) \
                or node.so._SyncObj__raftState != LEADER:
            return
        entry = node.journal.entry_at(commit)
        if entry is None:
            return  # compacted: counted when it was committed
        holders = sum(1 for n in self.nodes
                      if n.journal.synced_entry_at(commit) in (True, entry))
        if holders <= self.config.nodes // 2:
            raise InvariantViolation(
                f"durability: leader n{node.index} committed entry {commit} while only "
                f"{holders} of {self.config.nodes} nodes had it on disk")

    # --- pysyncobj callbacks (run inside a node step) ---------------------------------------------
    def _on_apply(self, i: int, raft_index: int, batch: bytes) -> None:
        self._pending_applies.append((i, raft_index, batch))
        self.trace(f"n{i} apply {raft_index} {batch[:8].decode()}")

    def _on_state_changed(self, i: int, incarnation: int, new_state: int) -> None:
        node = self.nodes[i]
        if node.incarnation == incarnation and node.so is not None:
            self._pending_roles.append((i, node.so.raftCurrentTerm, new_state))

    def _on_result(self, op: _Op, result: Any, err: int) -> None:
        self._pending_results.append((op, result, err))

    # --- clients ----------------------------------------------------------------------------------
    def _is_proposed(self, batch: bytes) -> bool:
        return batch in self._proposed

    def _on_client(self) -> None:
        rng = self._client_rng
        self.schedule(self.now_us + int(rng.expovariate(self.config.client_rate_per_s) * US),
                      "client", self._on_client)
        if not self._load_on or self._outstanding >= self.config.outstanding_max:
            return
        up = [n for n in self.nodes if n.running and not n.paused]
        if not up:
            return
        leaders = [n for n in up if n.so._isLeader()]
        use_leader = leaders and rng.random() >= self.config.to_any_node
        target = rng.choice(leaders if use_leader else up)
        self._next_op += 1
        size = rng.randint(*self.config.batch_bytes)
        batch = b"%08d|" % self._next_op + rng.randbytes(max(0, size - 9))
        op = _Op(self._next_op, batch, target.index, target.incarnation)
        self.ops[op.op_id] = op
        self._proposed.add(batch)
        self._outstanding += 1
        self.trace(f"invoke op {op.op_id} at n{target.index}")
        log = target.log
        assert log is not None
        callback = functools.partial(self._on_result, op)
        self.call_in_node(target.index, lambda: log.append(batch, callback=callback))

    def _finish_op(self, op: _Op, outcome: str) -> None:
        if op.outcome is None:
            op.outcome = outcome
            self._outstanding -= 1
            self.trace(f"op {op.op_id} {outcome}")

    def _record_result(self, op: _Op, result: Any, err: int) -> None:
        name = f"n{op.node}"
        if err == FAIL_REASON.SUCCESS:
            self._finish_op(op, f"ok at {result}")
            self.checker.on_ack(name, op.batch, result)
        elif err in DEFINITE_FAILURES:
            self._finish_op(op, f"fail:{DEFINITE_FAILURES[err]}")
            self.checker.on_definite_failure(name, op.batch, DEFINITE_FAILURES[err])
        else:
            self._finish_op(op, f"info:{UNKNOWN_FAILURES.get(err, err)}")

    # --- the phases of a run ----------------------------------------------------------------------
    def _end_faults(self) -> None:
        self.faults.end()
        self.trace("end of faults")

    def _end_load(self) -> None:
        self._load_on = False
        self.trace("end of load")
        self.schedule(self.now_us + CONVERGE_POLL_US, "converged?", self._poll_converged)

    def _poll_converged(self) -> None:
        """Stop once every node has applied the same number of batches twice in a row."""
        lengths = tuple(len(n.log.batches) if n.log else -1 for n in self.nodes)
        if lengths == self._last_lengths and len(set(lengths)) == 1:
            self._stop = True
            return
        self._last_lengths = lengths
        self.schedule(self.now_us + CONVERGE_POLL_US, "converged?", self._poll_converged)

    def run(self) -> SimResult:
        config = self.config
        faults_end_us = int((config.warmup_s + config.duration_s) * US)
        load_end_us = faults_end_us + int(config.settle_load_s * US)
        end_us = load_end_us + int(config.converge_max_s * US)
        if config.patched:
            # The adapter's start-up self-test, outside the simulated clock (it builds a SyncObj).
            adapter_patches()._self_test()
        with patched_pysyncobj(self.env):
            try:
                for i in range(config.nodes):
                    self.start(i)
                self.schedule(int(config.warmup_s * US), "fault", self.faults.on_fault)
                self.schedule(0, "client", self._on_client)
                if any(kind.startswith("power_loss") for kind, _ in config.fault_weights):
                    # Only then does it matter (scheduling draws a tie-break, moving seeds).
                    self.schedule(int(WRITEBACK_PERIOD_S * US), "writeback", self._on_writeback)
                self.schedule(faults_end_us, "end of faults", self._end_faults)
                self.schedule(load_end_us, "end of load", self._end_load)
                self._loop(end_us)
                self._finish()
            finally:
                for node in self.nodes:
                    if node.running:
                        self._release_process(node)
                shutil.rmtree(self._dump_dir, ignore_errors=True)
        return self._result()

    def _loop(self, end_us: int) -> None:
        while self._heap and self._heap[0][0] <= end_us and not self._stop:
            at_us, _, _, label, fn, args = heapq.heappop(self._heap)
            assert at_us >= self.now_us, "simulated time never goes back"
            self.now_us = at_us
            self.events += 1
            if self.events > EVENTS_MAX or len(self._heap) > EVENTS_MAX // 10:
                raise RuntimeError(f"runaway simulation: {self.events} events, "
                                   f"{len(self._heap)} pending")
            self.trace(label)
            fn(*args)
            self._after_event()

    def _finish(self) -> None:
        self._collect_log_records()
        behind = self.checker.check_final(self._views(range(self.config.nodes)))
        self.behind = [f"{note} ({self._diagnose(note.split(' ', 1)[0])})" for note in behind]
        if behind:  # a node can hold the longest image and still be stuck (see _diagnose)
            self.behind += [f"n{n.index} stuck ({self._diagnose(f'n{n.index}')})"
                            for n in self.nodes if f"n{n.index} behind" not in " ".join(behind)
                            and "livelock" in self._diagnose(f"n{n.index}")]

    def _diagnose(self, name: str) -> str:
        node = self.nodes[int(name[1:])]
        rejects = list(node.rejects)
        if node.so is not None and node.so._isLeader():
            return "leader, its followers have not caught up"
        if len(rejects) < REJECTS_KEPT:
            return "catching up"
        if max(rejects) - min(rejects) == 1:
            return f"livelock, rejects alternate {sorted(set(rejects))}: reject-pingpong"
        if node.reject_resets >= LIVELOCK_RESETS:
            return (f"livelock, walks back and is reset up {node.reject_resets} times: "
                    f"reject-pingpong")
        return f"walking back one entry per round, at {rejects[-1]}"

    # --- checks after every event -----------------------------------------------------------------
    def _views(self, indexes: Any) -> list[NodeView]:
        views = []
        for i in sorted(indexes):
            node = self.nodes[i]
            if node.running and node.log is not None:
                so = node.so
                views.append(NodeView(
                    name=node.obj.id, incarnation=node.incarnation, term=so.raftCurrentTerm,
                    state=so._SyncObj__raftState, last_applied=so.raftLastApplied,
                    commit_index=so.raftCommitIndex, batches=node.log.batches,
                ))
        return views

    def _after_event(self) -> None:
        if self.env.log_records:
            self._collect_log_records()
        checker = self.checker
        applies, self._pending_applies = self._pending_applies, []
        for i, raft_index, batch in applies:
            checker.on_apply(f"n{i}", raft_index, batch)
        roles, self._pending_roles = self._pending_roles, []
        for i, term, state in roles:
            self.trace(f"n{i} term {term} state {state}")
            checker.on_role(f"n{i}", term, state)
            if state == LEADER:
                self._check_leader_log(i, term)
        if self._dirty:
            dirty, self._dirty = self._dirty, set()
            checker.after_event(self._views(dirty))
            for i in dirty:
                self._check_committed_entries(self.nodes[i])
        results, self._pending_results = self._pending_results, []
        for op, result, err in results:
            self._record_result(op, result, err)

    def _check_committed_entries(self, node: _Node) -> None:
        """Journal entries up to the commit index are committed: the same on every node."""
        if not node.running:
            return
        journal = node.journal
        last = journal.entries[-1][1] if journal.entries else 0
        commit = node.so.raftCommitIndex
        if commit < node.commit_seen:
            self._anomaly(f"n{node.index} commit index went back {node.commit_seen} -> {commit}")
        if commit > node.commit_seen:
            self._check_durable_commit(node, commit)
        node.commit_seen = commit
        verified = min(node.commit_verified, commit)
        for raft_index in range(max(verified + 1, journal.first_index()), min(commit, last) + 1):
            entry = journal.entry_at(raft_index)
            assert entry is not None
            self.checker.on_committed_entry(f"n{node.index}", raft_index, entry[2], entry[0])
        node.commit_verified = max(verified, min(commit, last))

    def _check_leader_log(self, i: int, term: int) -> None:
        journal = self.nodes[i].journal

        def batch_at(raft_index: int) -> bytes | None:
            entry = journal.entry_at(raft_index)
            return None if entry is None else _batch_of(entry[0])

        last = journal.entries[-1][1] if journal.entries else 0
        self.checker.on_leader_log(f"n{i}", term, batch_at, journal.first_index(), last)

    def _collect_log_records(self) -> None:
        records, self.env.log_records = self.env.log_records, []
        for node, record in records:
            self._anomaly(f"pysyncobj {record.levelname} on {node}: {record.getMessage()}")

    def _anomaly(self, text: str) -> None:
        self.anomalies.append(f"t={self.now_us / US:.3f}s {text}")
        self.trace(f"anomaly {text}")

    def _result(self) -> SimResult:
        outcomes: dict[str, int] = {}
        for op in self.ops.values():
            key = (op.outcome or "info:pending").split(" ")[0]
            outcomes[key] = outcomes.get(key, 0) + 1
        return SimResult(
            seed=self.config.seed, trace_digest=self._digest.hexdigest(), events=self.events,
            simulated_s=self.now_us / US, ops=dict(sorted(outcomes.items())),
            terms=len(self.checker.leader_of_term), faults=dict(self.faults.counts),
            messages=dict(self.net.counters), applied=len(self.checker.batch_at_position),
            behind=list(self.behind), anomalies=list(self.anomalies), nodes=self.config.nodes,
            patch_counts=dict(sorted((k, v) for k, v in self.patch_counts.items() if v)),
        )


def _batch_of(command: bytes) -> bytes | None:
    """The batch inside a journal entry, if it is a regular ``append`` command."""
    if not command or command[0] != 0:  # pysyncobj's _COMMAND_TYPE.REGULAR
        return None
    decoded = pysyncobj_pickle.loads(command[1:])
    if isinstance(decoded, tuple) and len(decoded) >= 2 and decoded[1]:
        batch = decoded[1][0]
        return batch if isinstance(batch, bytes) else None
    return None
