"""RaftSettings: every timing and limit of the controller quorum, checked when built.

No pysyncobj import: quorum.py turns these into pysyncobj's SyncObjConf.
"""

from __future__ import annotations

import dataclasses

from tidelog.controller.raft.framing import _ENVELOPE_BYTES_MAX, _FRAME_BYTES_MAX
from tidelog.controller.raft.journal import RECORD_OVERHEAD_BYTES


@dataclasses.dataclass(frozen=True)
class RaftSettings:
    """Every timing and limit of the quorum; docs/decisions.md ("Raft adapter") says why."""

    #: Heartbeat (append-entries) period when idle; appends are sent at once regardless.
    append_entries_period_s: float = 0.05
    #: Randomised election timeout range; > 3 heartbeats so one lost packet is no election.
    election_timeout_min_s: float = 0.25
    election_timeout_max_s: float = 0.5
    #: When the leader's connection ends (its process died), the surviving voters ask for
    #: pre-votes this far apart by rank (controller/raft/prevote.py); 0 turns fast elections
    #: off (elections then come only from the timeout above).
    fast_election_stagger_s: float = 0.05
    #: A connection with nothing read for this long is dropped and redialled.
    connection_timeout_s: float = 2.0
    #: How often to redial a peer; pysyncobj's 5 s default made restarts take ~4 s (measured).
    #: Only the voter with the higher address dials (transport.py), so a restarted voter with
    #: the lower one waits for this: at 0.5 s, a leader killed just after a follower's restart
    #: found the two survivors not yet connected, and the election waited for the redial
    #: (issue 26). A refused connect to a dead peer costs next to nothing.
    connection_retry_s: float = 0.1
    #: Peer-to-peer keepalive period, so idle follower-follower links stay readable (see docs).
    peer_keepalive_s: float = 0.5
    #: A leader that heard from no majority for this long steps down (pysyncobj default 30 s).
    leader_fallback_timeout_s: float = 2.0
    #: Longest wait in one poll of the tick loop; proposals and sockets wake it earlier.
    tick_period_s: float = 0.05
    #: Log compaction (snapshots) once the log holds this many entries or the last snapshot is
    #: this old (if anything was applied since), whichever first; 0 = neither (the journal is
    #: then compacted only at snapshot_journal_bytes). Metadata changes are rare at steady
    #: state (a heartbeat writes nothing; ISR changes, topic admin and producer-id blocks do):
    #: 20,000 entries keep a restart's journal replay near 0.1 s, the hour bounds it for a
    #: slow trickle, and a snapshot costs the tick thread ~5 ms per 1,000 partitions (measured:
    #: 48 ms at 10,000, 430 ms at 100,000; the state machine keeps the quorum alive meanwhile).
    snapshot_min_entries: int = 20_000
    snapshot_interval_s: float = 3600.0
    #: A snapshot is forced once the applied part of the journal holds this many bytes: one
    #: entry can carry a 1 MiB batch (a 10,000-partition CreateTopics is ~0.45 MiB), so
    #: counting entries alone does not bound the journal.
    snapshot_journal_bytes: int = 64 * 1024 * 1024
    #: The journal's size limit (the whole Raft log also lives in memory): a proposal that
    #: would cross it fails JOURNAL_FULL, and a node whose journal must grow past it stops
    #: with a line saying so. Compaction keeps the journal far below it; it holds a full queue
    #: of the largest uncommitted batches above snapshot_journal_bytes (checked below).
    journal_bytes_max: int = 2 * 1024 * 1024 * 1024
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
        """Whether pysyncobj's own triggers (entries, time) compact; the journal-bytes one and
        force_snapshot work either way."""
        return self.snapshot_min_entries > 0

    @property
    def uncommitted_bytes_max(self) -> int:
        """The journal bytes a full queue of the largest proposals can take."""
        return self.proposals_in_flight_max * (self.batch_bytes_max + _ENVELOPE_BYTES_MAX
                                               + RECORD_OVERHEAD_BYTES)

    def __post_init__(self) -> None:
        # pysyncobj's validate() asserts the first four; checking here gives a readable error.
        if not self.election_timeout_min_s > 3 * self.append_entries_period_s:
            raise ValueError("election_timeout_min_s must exceed 3 * append_entries_period_s")
        if not self.election_timeout_max_s > self.election_timeout_min_s:
            raise ValueError("election_timeout_max_s must exceed election_timeout_min_s")
        if not 0 <= self.fast_election_stagger_s < self.election_timeout_min_s:
            # Past the timeout a voter's round would come after its own election anyway.
            raise ValueError("fast_election_stagger_s must be in [0, election_timeout_min_s)")
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
        if not (self.snapshot_journal_bytes > 0 and self.journal_bytes_max
                >= self.snapshot_journal_bytes + self.uncommitted_bytes_max):
            raise ValueError("journal_bytes_max must hold snapshot_journal_bytes plus "
                             "proposals_in_flight_max batches of batch_bytes_max")
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
