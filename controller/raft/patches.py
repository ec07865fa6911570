"""pysyncobj patches: _PatchedSyncObj, _RejectFloor, and the guard on pysyncobj's code.

pysyncobj 0.3.17 breaks Raft's safety in its follower's append_entries and snapshot handling
and in the leader's handling of replies (tests/sim found each: acknowledged, committed entries
lost; state machines diverging or going back in time; its README.md and raftsim.KNOWN_BUGS give
the seeds). Every quorum runs ``_PatchedSyncObj``, a subclass that restores Raft's rules in three
of SyncObj's private methods (see its docstring for each bug, its sim seed and the rule), and its
transport applies ``_RejectFloor`` (reject-pingpong, a livelock). Being a subclass, it leaves
every other SyncObj in the process (the simulator's unpatched runs) on pysyncobj's own code.
tests/sim runs this very code (``patched="adapter"``).

The overrides copy pysyncobj's code where they do not change it and read its private
attributes, so they refuse to run on any pysyncobj but the one they were written and simulated
against: importing this module checks pysyncobj's version and the SHA-256 of the modules they
depend on (PysyncobjMismatchError otherwise), and self_test.py replays truncate-acked-on-resend's
messages before the first quorum starts.

To upgrade pysyncobj: re-read the overridden methods, run tests/sim (patched suites, slow sweeps
included), then update the digests below.
"""

from __future__ import annotations

import collections
import gzip
import hashlib
import logging
import math
import os
from pathlib import Path
from typing import Any

import pysyncobj.syncobj as syncobj_module
import pysyncobj.version as pysyncobj_version
from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.syncobj import _COMMAND_TYPE

from tidelog.controller.raft.framing import (
    _NO_OP_COMMAND,
    _REGULAR_COMMAND_PREFIX,
    PRE_VOTE_RESPONSE_TYPE,
    PRE_VOTE_TYPE,
)
from tidelog.controller.raft.journal import fsync_directory
from tidelog.controller.raft.prevote import FastElection, PreVote, grants_pre_vote

logger = logging.getLogger("controller.raft")  # one logger for the whole adapter

# pysyncobj's states (its _RAFT_STATE is private; these values are its wire/status values).
_STATE_FOLLOWER = 0
_STATE_LEADER = 2
_PYSYNCOBJ_VERSION = "0.3.17"
_PYSYNCOBJ_SHA256 = {
    "syncobj.py": "e8bdf06797085d734df86e24ab4802fe87893dff77268565ec036f7ad4a1cfe4",
    "serializer.py": "4d39fde2f15000ad8f507ec229ebd4f6a86371b6f84d4dc1439a9cccd52857ee",
    # journal.py's DurableJournal implements its Journal interface and converts its FileJournal.
    "journal.py": "9cf1eaf6acc704581a4cf7d3de330a404403913107adc91c929778b7e3f35edf",
    # The transport overrides TCPTransport's methods and stands in for its TcpConnection.
    "transport.py": "0c9d89f9c4781ec9772df8011d7975a1a4a1a5f541357e12eae85a813e92b50b",
    "tcp_connection.py": "7784ed8da031369fe36f805cb186a2e94a3bd6f10fed2dd59c8cc3713fd6331c",
}
#: Seconds between the survivors' pre-vote rounds by rank when the leader's connection ends
#: (controller/raft/prevote.py): well above one round (pre-vote and vote, a few ms) and well
#: below the election timeout; RaftSettings.fast_election_stagger_s is what quorums use.
FAST_ELECTION_STAGGER_S = 0.05
#: Suffix of the file a snapshot from the leader is received into, next to fullDumpFile.
_INCOMING_SNAPSHOT_SUFFIX = ".incoming"


class PysyncobjMismatchError(RuntimeError):
    """The installed pysyncobj is not the one the adapter's patches were verified against."""


def _check_pysyncobj() -> None:
    version = pysyncobj_version.VERSION
    if version != _PYSYNCOBJ_VERSION:
        raise PysyncobjMismatchError(
            f"controller/raft/patches.py patches pysyncobj {_PYSYNCOBJ_VERSION}; "
            f"{version} is installed")
    directory = Path(syncobj_module.__file__).parent
    for name, expected in _PYSYNCOBJ_SHA256.items():
        try:
            digest = hashlib.sha256((directory / name).read_bytes()).hexdigest()
        except OSError as exc:
            raise PysyncobjMismatchError(f"cannot read pysyncobj's {name} to verify it") from exc
        if digest != expected:
            raise PysyncobjMismatchError(
                f"pysyncobj's {name} (sha256 {digest}) is not the code controller/raft's "
                f"patches were verified against; re-verify them with tests/sim first")


def _check_command_types() -> None:
    """framing.py writes pysyncobj's command-type bytes without importing pysyncobj."""
    ours = (_REGULAR_COMMAND_PREFIX, _NO_OP_COMMAND)
    if ours != (bytes([_COMMAND_TYPE.REGULAR]), bytes([_COMMAND_TYPE.NO_OP])):
        raise PysyncobjMismatchError("pysyncobj's command types are not framing.py's")


_check_pysyncobj()
_check_command_types()


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

    Long applies (tl_keep_alive, not a bug fix but an addition): pysyncobj applies committed
    entries on its tick thread between reading the network and sending append_entries, so a
    batch that takes longer to replay than the election timeout (10,000 new partitions: ~0.2 s
    idle, up to 0.6 s on a busy machine) silenced the leader, and a follower that spent as long
    applying started an election on its next tick, before reading the leader's messages waiting
    in its socket. The state machine calls tl_keep_alive between records: the leader sends its
    append_entries as its tick would (followers learn the commit index and apply in parallel);
    a follower or candidate pushes its election deadline back by a fresh timeout (its own busy
    time is not the leader's silence; delaying an election never breaks safety).

    Durability (not a bug in the protocol code but in what it runs on: pysyncobj never fsyncs
    its journal or its term/vote file). Raft: a node has currentTerm and votedFor on stable
    storage before it answers a RequestVote (or asks for votes), and its entries before it
    answers an AppendEntries with success; a leader counts itself toward a majority only for
    entries it has made durable. Here every message the SyncObj sends goes through
    _DurableSends: while the journal (a DurableJournal, or any journal with ``needs_sync`` and
    ``sync()``) has changes not on disk, messages wait; at each flush point the journal is
    synced once, then they leave in order. Flush points: the start of a tick (before the
    leader's commit count, so it counts this node only for entries on disk), just before the
    tick polls the network (the leader's appends of this tick, with their append_entries), at
    the end of the tick (what the poll's messages changed: appends to acknowledge, votes to
    answer), and right after becoming leader (its no-op, counted in the same tick when it is
    the only voter). A snapshot's rename is made durable (its directory fsynced) before the
    journal is compacted or cleared for it. With ``snapshot_journal_bytes``, a compaction is
    forced once the applied part of the journal exceeds that many bytes (pysyncobj counts
    entries and time only; one entry can hold a 1 MiB batch).

    Fast elections (controller/raft/prevote.py; not a bug fix but an addition, issue 26): when
    the connection to the leader ends (its process died: the kernel closed its sockets), a
    follower asks the others for pre-votes, at its rank among the survivors times
    ``fast_election_stagger_s``; a voter grants only when it has no live leader itself (its
    connection to the leader is closed too, or it heard nothing from it within raftMinTimeout)
    and never while it leads, so a follower that lost only its own connection disrupts nothing.
    A majority sets the election deadline to now: pysyncobj's own election runs at the next
    tick. The messages are ours (``tidelog_pre_vote``, ``tidelog_pre_vote_response``; framing.py
    carries them) and change no term and no vote.

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
    _SyncObj__raftLog: Any
    _SyncObj__transport: Any
    _SyncObj__raftCurrentTerm: int
    _SyncObj__votedForNodeId: Any
    _SyncObj__forceLogCompaction: bool
    _SyncObj__selfNode: Any
    _SyncObj__otherNodes: Any
    _SyncObj__connectedNodes: set[Any]
    _SyncObj__conf: SyncObjConf

    def __init__(self, selfNode: Any, otherNodes: Any, conf: SyncObjConf, *,
                 journal: Any = None, snapshot_journal_bytes: int | None = None,
                 fast_election_stagger_s: float | None = FAST_ELECTION_STAGGER_S,
                 **kwargs: Any) -> None:
        """``journal``: the journal to run on (conf.journalFile must then be None); without
        it, the one pysyncobj creates (the simulation's). Either way it must have
        ``needs_sync`` and ``sync()``. ``snapshot_journal_bytes``: see the class doc.
        ``fast_election_stagger_s``: see "Fast elections" in the class doc (None: off)."""
        if conf.dynamicMembershipChange:
            raise ValueError("the pysyncobj patches do not cover dynamic membership changes")
        if conf.autoTick:
            raise ValueError("the patched SyncObj is ticked by its owner (autoTick=False)")
        if journal is not None and conf.journalFile is not None:
            raise ValueError("give the journal or conf.journalFile, not both")
        # Before SyncObj.__init__: attributes that exist when it ends stay out of pysyncobj's
        # pickled snapshots (its __properies), and an open file must not be pickled.
        self._tl_incoming: Any = None
        self._tl_sends: _DurableSends | None = None
        self._tl_snapshot_journal_bytes = snapshot_journal_bytes
        #: How often each patched path ran where pysyncobj would have done otherwise (status(),
        #: and tests/sim checks that its suites reach each of them).
        self.tl_counts: collections.Counter[str] = collections.Counter()
        self._tl_fast: FastElection | None = None
        self._tl_leader_heard_at = 0.0
        self._tl_vote_asked_at = -math.inf  # a request_vote of the current term or later
        super().__init__(selfNode, otherNodes, conf, **kwargs)
        if fast_election_stagger_s is not None and self._SyncObj__selfNode is not None:
            self._tl_fast = FastElection(
                self_id=self._SyncObj__selfNode.id,
                voters=[self._SyncObj__selfNode.id, *(n.id for n in self._SyncObj__otherNodes)],
                stagger_s=fast_election_stagger_s)
        if journal is not None:
            self._tl_use_journal(journal)
        log = self._SyncObj__raftLog
        if not (hasattr(log, "needs_sync") and callable(getattr(log, "sync", None))):
            raise TypeError(f"the patched SyncObj needs a journal that syncs, not "
                            f"{type(log).__name__}")
        self._tl_sends = _DurableSends(self._SyncObj__transport, log)
        self._SyncObj__transport = self._tl_sends
        self.addOnTickCallback(self._tl_flush)  # runs just before the tick's poll

    def _tl_use_journal(self, journal: Any) -> None:
        """SyncObj.__init__ built a MemoryJournal (journalFile None); these are its lines that
        read the persistent state, on ``journal``, which replaces it."""
        self._SyncObj__raftLog = journal
        if len(journal) == 0:
            journal.add(_NO_OP_COMMAND, 1, 0)
        self._SyncObj__raftCurrentTerm = max(journal.getCurrentTerm(), journal[-1][2])
        self._SyncObj__votedForNodeId = journal.getVotedForNodeId()
        # Clamped: a commit index past the log would commit whatever is appended there next.
        self._SyncObj__raftCommitIndex = min(journal.getRaftCommitIndex(), journal[-1][1])

    # --- durability (see the class doc)

    def _tl_flush(self) -> None:
        """Syncs the journal if it changed, then sends what waited for it. Raises
        JournalError (the node must stop: nothing it held may be sent)."""
        assert self._tl_sends is not None
        self._tl_sends.flush()

    def _onTick(self, timeToWait: float = 0.0) -> None:
        self._tl_flush()
        self._tl_maybe_ask_pre_votes()
        SyncObj._onTick(self, timeToWait)
        self._tl_flush()

    # --- fast elections (controller/raft/prevote.py; see the class doc)

    def _SyncObj__onNodeDisconnected(self, node: Any) -> None:
        SyncObj._SyncObj__onNodeDisconnected(self, node)
        if (self._tl_fast is not None and node == self._SyncObj__raftLeader
                and self._SyncObj__raftState == _STATE_FOLLOWER):
            self._tl_fast.on_leader_disconnected(node.id, syncobj_module.monotonicTime())

    def _tl_maybe_ask_pre_votes(self) -> None:
        fast = self._tl_fast
        if fast is None:
            return
        if self._SyncObj__raftState != _STATE_FOLLOWER:
            fast.cancel()
            return
        term = fast.due(syncobj_module.monotonicTime(), self._SyncObj__raftCurrentTerm)
        if term is None:
            return
        self.tl_counts["pre_vote_rounds"] += 1
        logger.info("raft node %s: no connection to the leader; asking for pre-votes at term %d",
                    self._SyncObj__selfNode.id, term)
        log = self._SyncObj__raftLog
        for node in self._SyncObj__otherNodes:
            self._SyncObj__transport.send(node, {
                "type": PRE_VOTE_TYPE, "term": term, "last_log_index": log[-1][1],
                "last_log_term": log[-1][2]})

    def _tl_has_live_leader(self) -> bool:
        """Whether this node hears a leader, or an election is under way: connected to its
        leader and heard from it within the minimum election timeout (Raft thesis §9.6's
        pre-vote condition, with the closed connection as the evidence that lets a survivor
        answer at once), or asked for a vote within that time. The second covers the first
        moments of a new term, when a voter has voted but not yet heard the new leader: a
        follower whose connection to that leader reset then must not win (seen under load)."""
        now = syncobj_module.monotonicTime()
        min_timeout = self._SyncObj__conf.raftMinTimeout
        if now - self._tl_vote_asked_at < min_timeout:
            return True
        leader = self._SyncObj__raftLeader
        if leader is None or leader not in self._SyncObj__connectedNodes:
            return False
        return bool(now - self._tl_leader_heard_at < min_timeout)

    def _tl_on_pre_vote(self, node: Any, message: dict[str, Any]) -> None:
        log = self._SyncObj__raftLog
        granted = grants_pre_vote(
            PreVote(message["term"], message["last_log_index"], message["last_log_term"]),
            current_term=self._SyncObj__raftCurrentTerm, last_log_index=log[-1][1],
            last_log_term=log[-1][2], is_leader=self._SyncObj__raftState == _STATE_LEADER,
            has_live_leader=self._tl_has_live_leader())
        self._SyncObj__transport.send(node, {"type": PRE_VOTE_RESPONSE_TYPE,
                                             "term": message["term"], "granted": granted})

    def _tl_on_pre_vote_response(self, node: Any, message: dict[str, Any]) -> None:
        fast = self._tl_fast
        if fast is None or self._SyncObj__raftState != _STATE_FOLLOWER:
            return
        logger.debug("raft node %s: pre-vote at term %d %s by %s", self._SyncObj__selfNode.id,
                     message["term"], "granted" if message["granted"] else "refused", node.id)
        if fast.on_response(node.id, message["term"], message["granted"]) \
                and message["term"] == self._SyncObj__raftCurrentTerm + 1:
            logger.info("raft node %s: pre-vote majority at term %d; standing now",
                        self._SyncObj__selfNode.id, message["term"])
            # pysyncobj's own election, at the start of the next tick: the same code a
            # timeout runs (term + 1, its vote for itself made durable before any request).
            self.tl_counts["fast_elections"] += 1
            self._SyncObj__raftElectionDeadline = 0.0

    def _SyncObj__onBecomeLeader(self) -> None:
        SyncObj._SyncObj__onBecomeLeader(self)
        self._tl_flush()

    def _tl_make_dump_durable(self) -> None:
        """A dump (snapshot) renamed into place is durable only once its directory is
        fsynced; the journal must not lose the entries it covers before that."""
        dump_file = self._SyncObj__conf.fullDumpFile
        if dump_file is not None:
            fsync_directory(Path(dump_file).parent)

    def _SyncObj__tryLogCompaction(self) -> None:
        limit = self._tl_snapshot_journal_bytes
        log = self._SyncObj__raftLog
        if limit is not None and not self._SyncObj__forceLogCompaction:
            applied = self._SyncObj__raftLastApplied - log[0][1]
            if log.bytes_before(applied) > limit:
                self.tl_counts["snapshot_for_journal_bytes"] += 1
                self._SyncObj__forceLogCompaction = True
        SyncObj._SyncObj__tryLogCompaction(self)

    def tl_keep_alive(self) -> None:
        """During a long apply, on the tick thread (see the class doc, "Long applies")."""
        if self._SyncObj__raftState == _STATE_LEADER:
            self._SyncObj__sendAppendEntries()
        else:
            now = syncobj_module.monotonicTime()
            self._SyncObj__raftElectionDeadline = max(
                self._SyncObj__raftElectionDeadline, now + self._SyncObj__generateRaftTimeout())
            if self._SyncObj__raftLeader in self._SyncObj__connectedNodes:
                # Nor is it the leader's silence to a pre-vote (_tl_has_live_leader): a voter
                # busy applying refuses rather than grants while its connection stands.
                self._tl_leader_heard_at = now
        self.tl_counts["keep_alive"] += 1

    # --- dispatch: the transport calls this (bound by SyncObj.__init__ through the name)

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        kind = message.get("type") if isinstance(message, dict) else None
        # pysyncobj handles each message type in its own block: these two blocks are replaced,
        # every other type goes to pysyncobj's handler unchanged.
        if kind == "append_entries" and message["term"] >= self._SyncObj__raftCurrentTerm:
            self._tl_on_append_entries(node, message)
        elif kind == PRE_VOTE_TYPE:
            self._tl_on_pre_vote(node, message)
        elif kind == PRE_VOTE_RESPONSE_TYPE:
            self._tl_on_pre_vote_response(node, message)
        elif kind == "next_node_idx":
            if self._SyncObj__raftState == _STATE_LEADER:
                self._tl_on_next_node_idx(node, message)
        else:
            if kind == "request_vote" and message["term"] >= self._SyncObj__raftCurrentTerm:
                self._tl_vote_asked_at = syncobj_module.monotonicTime()  # see _tl_has_live_leader
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
        self._tl_leader_heard_at = syncobj_module.monotonicTime()
        if self._tl_fast is not None:
            self._tl_fast.cancel()
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
            self._tl_make_dump_durable()
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
        self._tl_make_dump_durable()
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


class _DurableSends:
    """The SyncObj's transport, with every answer held while the journal needs a sync.

    ``send`` queues a message while the journal has changes not on disk (or while earlier
    messages to that node wait: order is kept); ``flush`` syncs the journal once, then sends
    everything that waited, in order. One sync covers all a tick answers (batching). A failed
    sync raises JournalError from ``flush`` and nothing held is ever sent. Every other attribute
    is the transport's.

    A leader's append_entries go at once (unless something to that node waits): they report
    nothing about this node's disk. The leader writes its entries in parallel with the
    followers (Raft thesis 10.2.1) and counts itself toward a majority only at the next tick's
    commit count, after the flush that synced them; its term and vote were synced before its
    vote requests left.
    """

    def __init__(self, transport: Any, journal: Any) -> None:
        self.transport = transport
        self._journal = journal
        self._held: list[tuple[Any, Any]] = []
        #: Journal syncs done, and messages that waited for one (status, tests).
        self.syncs = 0
        self.held_total = 0

    def send(self, node: Any, message: Any) -> bool:
        leader_append = isinstance(message, dict) and message.get("type") == "append_entries"
        if (self._journal.needs_sync and not leader_append) \
                or any(held_node == node for held_node, _ in self._held):
            self._held.append((node, message))
            self.held_total += 1
            return True  # sent as far as pysyncobj can tell: a lost connection is found later
        return bool(self.transport.send(node, message))

    def flush(self) -> None:
        if self._journal.needs_sync:
            self._journal.sync()
            self.syncs += 1
        held, self._held = self._held, []
        for node, message in held:
            self.transport.send(node, message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


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
