"""The Raft adapter (controller/raft/) with real pysyncobj nodes inside this process.

Quorums of 1 or 3 RaftQuorum objects talk over 127.0.0.1 on free ports, each with its own data
dir under tmp_path and a list-of-batches state machine that records every call and its thread.
The tests check: ordered apply on the one tick thread, the same batches on every node; a
follower's proposal failing at once with the leader's address, and never forwarded to the
leader even when it got past the check; each typed failure (NOT_LEADER,
QUEUE_FULL, REQUEST_TIMED_OUT, CLOSED) and which ones leave the outcome unknown; leadership
callbacks in order, with a NoOp proposed from the callback; snapshots through the custom
serializer (forced compaction, restart, restore + journal replay; install on a lagging follower;
a corrupt snapshot or a failing state machine stopping the node; a restart between a snapshot
and its compaction keeping the journal after it); journal entries holding only the batch bytes
(decoded with an unpickler that refuses every global); every SyncObjConf field set explicitly
(pysyncobj's FileJournal replaced by the DurableJournal); compaction on by default, and by
journal bytes keeping the journal below its limit; a leader refusing proposals (JOURNAL_FULL)
once snapshots fail and the journal reaches its limit; every
message the quorums send passing the transport's checks, and a node with another cluster secret
kept out (tests/unit/test_raft_transport.py tests the transport itself); and the
pysyncobj patches (controller/raft/patches.py's _PatchedSyncObj, proven in tests/sim): used by every
quorum, refused on any other pysyncobj, the self-test, and the transport's rejection floor; fast
elections: a closed leader replaced through a pre-vote before any election timeout, and a follower
whose own connection to a live leader resets refused its pre-votes (no term changes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import math
import pickle
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pysyncobj import SyncObj, SyncObjConf

from tidelog.controller import raft
from tidelog.controller.raft import (
    FailReason,
    ProposeError,
    RaftQuorum,
    RaftSettings,
    SnapshotCorruptError,
)

WAIT_S = 10.0
#: 3-node tests use the production defaults: shorter timeouts invite spurious elections on a
#: busy 2-core machine. A 1-node quorum cannot have those, so it elects itself in ~0.1 s.
SETTINGS = RaftSettings()
SINGLE = RaftSettings(append_entries_period_s=0.02, election_timeout_min_s=0.07,
                      election_timeout_max_s=0.1)
_LENGTH = struct.Struct("<I")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


class ListStateMachine:
    """Records applied batches with their indexes, restores, and the threads calls came on."""

    def __init__(self, fail_on: bytes | None = None) -> None:
        self.batches: list[bytes] = []
        self.indexes: list[int] = []
        self.restored: list[bytes] = []
        self.threads: set[str] = set()
        self.fail_on = fail_on
        self.block: threading.Event | None = None

    def apply(self, batch: bytes, index: int) -> None:
        self.threads.add(threading.current_thread().name)
        if self.block is not None:
            assert self.block.wait(WAIT_S)
        if batch == self.fail_on:
            raise RuntimeError("cannot apply")
        self.batches.append(batch)
        self.indexes.append(index)

    def snapshot(self) -> bytes:
        self.threads.add(threading.current_thread().name)
        return b"".join(_LENGTH.pack(len(b)) + b for b in self.batches)

    def restore(self, data: bytes) -> None:
        self.threads.add(threading.current_thread().name)
        self.restored.append(data)
        self.batches, offset = [], 0
        while offset < len(data):
            (length,) = _LENGTH.unpack_from(data, offset)
            self.batches.append(data[offset + 4:offset + 4 + length])
            offset += 4 + length
        self.indexes = [0] * len(self.batches)


class Cluster:
    """Starts quorums and closes every one of them at the end of the test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[RaftQuorum] = []

    def start(self, node_id: int, addresses: list[str], machine: ListStateMachine,
              settings: RaftSettings | None = None, **kwargs: Any) -> RaftQuorum:
        if settings is None:
            settings = SINGLE if len(addresses) == 1 else SETTINGS
        quorum = RaftQuorum(node_id, addresses[node_id], addresses,
                            self.tmp_path / f"node{node_id}", machine, settings=settings,
                            **kwargs)
        self.started.append(quorum)
        return quorum

    def start_all(self, size: int, settings: RaftSettings | None = None,
                  ) -> tuple[list[RaftQuorum], list[ListStateMachine]]:
        addresses = [f"127.0.0.1:{free_port()}" for _ in range(size)]
        machines = [ListStateMachine() for _ in range(size)]
        quorums = [self.start(i, addresses, machines[i], settings) for i in range(size)]
        return quorums, machines


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        for quorum in c.started:
            quorum.close()


def wait_leader(quorums: list[RaftQuorum]) -> RaftQuorum:
    leader: RaftQuorum = wait_for(
        lambda: next((q for q in quorums if q.is_leader()), None), "a leader")
    return leader


def propose_all(quorum: RaftQuorum, batches: list[bytes]) -> list[int]:
    futures = [quorum.propose(b) for b in batches]
    return [f.result(WAIT_S) for f in futures]


def test_settings_reject_broken_relations() -> None:
    with pytest.raises(ValueError, match="3 \\* append_entries_period_s"):
        RaftSettings(append_entries_period_s=0.1, election_timeout_min_s=0.3)
    with pytest.raises(ValueError, match="connection_timeout_s"):
        RaftSettings(connection_timeout_s=0.4)
    with pytest.raises(ValueError, match="append_entries_bytes_max"):
        RaftSettings(batch_bytes_max=2 * 1024 * 1024)
    with pytest.raises(ValueError, match="peer_keepalive_s"):
        RaftSettings(peer_keepalive_s=5.0)


def test_every_syncobjconf_field_is_set_explicitly(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_conf = raft.quorum.SyncObjConf
    passed: dict[str, Any] = {}

    def recording_conf(**kwargs: Any) -> Any:
        passed.update(kwargs)
        return real_conf(**kwargs)

    monkeypatch.setattr(raft.quorum, "SyncObjConf", recording_conf)
    quorum, _ = cluster.start_all(1)
    assert set(passed) == set(vars(real_conf())), "a SyncObjConf field is left to its default"
    assert passed["appendEntriesUseBatch"] is False and passed["useFork"] is False
    assert passed["commandsWaitLeader"] is False and passed["dynamicMembershipChange"] is False
    assert passed["connectionRetryTime"] == RaftSettings().connection_retry_s == 0.1
    # pysyncobj's FileJournal is never fsynced: the patched SyncObj runs on the DurableJournal.
    assert passed["journalFile"] is None
    assert isinstance(quorum[0]._syncobj._SyncObj__raftLog, raft.journal.DurableJournal)
    assert quorum[0]._syncobj._SyncObj__raftLog.path == quorum[0].journal_path


def test_single_node_applies_in_order_on_its_tick_thread(cluster: Cluster) -> None:
    (quorum,), (machine,) = cluster.start_all(1)
    wait_leader([quorum])
    batches = [b"batch-%d" % i for i in range(50)]
    indexes = propose_all(quorum, batches)
    assert machine.batches == batches
    assert indexes == machine.indexes and indexes == sorted(set(indexes))
    assert machine.threads == {"raft-0"}
    assert quorum.last_applied >= indexes[-1] and quorum.commit_index >= indexes[-1]
    assert asyncio.run(quorum.propose_async(b"from-asyncio")) > indexes[-1]
    status = quorum.status()
    assert status["is_leader"] and status["has_quorum"] and status["peers"] == {}
    assert status["leader_address"] == quorum.self_address and status["proposals_in_flight"] == 0


def test_three_nodes_same_batches_and_follower_fails_fast(cluster: Cluster) -> None:
    quorums, machines = cluster.start_all(3)
    leader = wait_leader(quorums)
    batches = [b"b%d" % i for i in range(100)]
    indexes = propose_all(leader, batches)
    wait_for(lambda: all(len(m.batches) == 100 for m in machines), "every node to apply")
    for machine, quorum in zip(machines, quorums, strict=True):
        assert machine.batches == batches and machine.indexes == indexes
        assert machine.threads == {f"raft-{quorum.node_id}"}

    follower = next(q for q in quorums if q is not leader)
    started = time.monotonic()
    future = follower.propose(b"on-a-follower")
    with pytest.raises(ProposeError) as failure:
        future.result(WAIT_S)
    assert time.monotonic() - started < 0.1
    assert failure.value.reason == FailReason.NOT_LEADER and failure.value.outcome_known
    assert failure.value.leader_address == leader.self_address == follower.leader_address()
    assert follower.leader_epoch == leader.leader_epoch

    # A stale epoch is fenced on the leader too, before anything reaches the log.
    with pytest.raises(ProposeError) as failure:
        leader.propose(b"stale", leader_epoch=leader.leader_epoch - 1).result(WAIT_S)
    assert failure.value.reason == FailReason.NOT_LEADER
    assert leader.status()["peers"] == {q.self_address: True for q in quorums if q is not leader}


def test_a_command_that_reaches_a_follower_is_never_forwarded(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    quorums, machines = cluster.start_all(3)
    leader = wait_leader(quorums)
    follower = next(q for q in quorums if q is not leader)
    # Knowing the leader is what makes pysyncobj forward (else it fails MISSING_LEADER).
    wait_for(lambda: follower.leader_address() == leader.self_address, "the follower's leader")
    # As if leadership moved between the check and pysyncobj's append (a starved process).
    monkeypatch.setattr(follower, "_check_can_propose", lambda _epoch: None)
    with pytest.raises(ProposeError) as failure:
        follower.propose(b"would-be-forwarded").result(WAIT_S)
    assert failure.value.reason == FailReason.NOT_LEADER and failure.value.outcome_known
    propose_all(leader, [b"after"])
    wait_for(lambda: all(m.batches == [b"after"] for m in machines), "every node to apply")


def test_propose_rejects_what_is_not_a_batch(cluster: Cluster) -> None:
    settings = dataclasses.replace(SINGLE, batch_bytes_max=1000, append_entries_bytes_max=2000)
    (quorum,), _ = cluster.start_all(1, settings)
    with pytest.raises(ValueError, match="bytes"):
        quorum.propose("text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_bytes_max"):
        quorum.propose(b"x" * 1001)


def test_queue_full_then_closed(cluster: Cluster) -> None:
    (quorum,), (machine,) = cluster.start_all(1, dataclasses.replace(SINGLE,
                                                                     proposals_in_flight_max=1))
    wait_leader([quorum])
    machine.block = threading.Event()  # holds the tick thread inside apply()
    first = quorum.propose(b"first")
    wait_for(lambda: machine.threads, "apply to start")
    with pytest.raises(ProposeError) as failure:
        quorum.propose(b"second").result(WAIT_S)
    assert failure.value.reason == FailReason.QUEUE_FULL and failure.value.outcome_known
    machine.block.set()
    assert first.result(WAIT_S) > 0

    quorum.close()
    with pytest.raises(ProposeError) as failure:
        quorum.propose(b"after-close").result(WAIT_S)
    assert failure.value.reason == FailReason.CLOSED
    assert not quorum.is_leader() and not quorum.status()["running"]


def test_leader_without_majority_times_out_then_steps_down(cluster: Cluster) -> None:
    settings = RaftSettings(leader_fallback_timeout_s=0.6)
    quorums, _ = cluster.start_all(3, settings)
    events: list[tuple[bool, int]] = []
    leader = wait_leader(quorums)
    leader.on_leadership_change(lambda is_leader, epoch: events.append((is_leader, epoch)))
    epoch = leader.leader_epoch
    assert leader.propose(b"with-majority").result(WAIT_S) > 0
    for quorum in quorums:
        if quorum is not leader:
            quorum.close()

    with pytest.raises(ProposeError) as failure:
        leader.propose(b"alone", timeout_ms=300).result(WAIT_S)
    # Appended but not committed: it may still commit if the majority comes back.
    assert failure.value.reason == FailReason.REQUEST_TIMED_OUT
    assert not failure.value.outcome_known
    wait_for(lambda: not leader.is_leader(), "the lone leader to step down")
    assert not leader.has_quorum
    with pytest.raises(ProposeError) as failure:
        leader.propose(b"after-step-down").result(WAIT_S)
    assert failure.value.reason == FailReason.NOT_LEADER
    wait_for(lambda: len(events) == 2, "the step-down callback")
    assert events == [(True, epoch), (False, epoch)]


def test_leadership_callback_can_propose_a_noop(cluster: Cluster) -> None:
    addresses = [f"127.0.0.1:{free_port()}"]
    machine = ListStateMachine()
    events: list[tuple[bool, int]] = []
    noops: list[Any] = []
    holder: list[RaftQuorum] = []

    def on_change(is_leader: bool, epoch: int) -> None:
        events.append((is_leader, epoch))
        if is_leader:  # the controller's pattern: act only once its own-epoch NoOp commits
            noops.append(holder[0].propose(b"noop", leader_epoch=epoch))

    quorum = cluster.start(0, addresses, machine, on_leadership_change=on_change)
    holder.append(quorum)
    wait_for(lambda: noops, "the leadership callback")
    assert noops[0].result(WAIT_S) > 0 and machine.batches == [b"noop"]
    late: list[tuple[bool, int]] = []
    quorum.on_leadership_change(lambda is_leader, epoch: late.append((is_leader, epoch)))
    wait_for(lambda: late, "the current state for a late listener")
    quorum.close()
    epoch = quorum.leader_epoch
    assert events == [(True, epoch), (False, epoch)] and late == [(True, epoch), (False, epoch)]


def _journal_commands(path: Path) -> list[tuple[int, bytes]]:
    """Parses the journal's format (a 16-byte header, then [u32 body size, u32 chained CRC,
    u64 index, u64 term, command] records up to a zero size) without the adapter, so the
    on-disk layout itself is checked."""
    data = path.read_bytes()
    assert data.startswith(b"TLRAFTJL")
    offset, commands = 16, []
    while True:
        size, _crc = struct.unpack_from("<II", data, offset)
        if size == 0:
            return commands
        index, _term = struct.unpack_from("<QQ", data, offset + 8)
        commands.append((index, data[offset + 24:offset + 8 + size]))
        offset += size + 8


class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise AssertionError(f"journal entry refers to {module}.{name}")


def test_snapshot_round_trip_after_forced_compaction_and_restart(cluster: Cluster) -> None:
    addresses = [f"127.0.0.1:{free_port()}"]
    machine = ListStateMachine()
    quorum = cluster.start(0, addresses, machine)
    wait_leader([quorum])
    first = [b"\x00\xff before %d" % i for i in range(20)]
    propose_all(quorum, first)
    quorum.force_snapshot()
    wait_for(quorum.snapshot_path.exists, "the snapshot file")
    second = [b"after %d" % i for i in range(10)]
    last_index = propose_all(quorum, second)[-1]
    quorum.close()

    assert quorum.snapshot_path.read_bytes().startswith(b"TLRAFTSN")
    for _index, command in _journal_commands(quorum.journal_path):
        if command[0] == 0:  # pysyncobj's REGULAR command: our append envelope
            method_id, (batch,) = _NoGlobalsUnpickler(io.BytesIO(command[1:])).load()
            assert method_id == 0 and isinstance(batch, bytes)
    assert [c for _, c in _journal_commands(quorum.journal_path) if c[0] == 0], "no entries"

    again = ListStateMachine()
    restarted = cluster.start(0, addresses, again)  # same address and data dir
    wait_for(lambda: len(again.batches) == 30, "restore plus journal replay")
    assert again.restored == [b"".join(_LENGTH.pack(len(b)) + b for b in first)]
    assert again.batches == first + second and again.threads == {"raft-0"}
    wait_leader([restarted])
    assert restarted.propose(b"new").result(WAIT_S) > last_index


def test_restart_without_snapshot_replays_the_journal(cluster: Cluster) -> None:
    addresses = [f"127.0.0.1:{free_port()}"]
    quorum = cluster.start(0, addresses, ListStateMachine())
    wait_leader([quorum])
    batches = [b"j%d" % i for i in range(10)]
    propose_all(quorum, batches)
    quorum.close()
    again = ListStateMachine()
    cluster.start(0, addresses, again)
    wait_for(lambda: len(again.batches) == 10, "journal replay")
    assert again.batches == batches and again.restored == []


def test_lagging_follower_receives_the_leaders_snapshot(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every message the quorums send is recorded: each must pass the transport's checks (the
    # run covers elections, appends, keepalives and a snapshot install).
    sent: list[Any] = []
    real_encode = raft._encode_message

    def recording_encode(message: Any) -> bytes:
        sent.append(message)
        return real_encode(message)

    monkeypatch.setattr(raft.connection, "_encode_message", recording_encode)
    quorums, machines = cluster.start_all(3)
    leader = wait_leader(quorums)
    lagging = next(q for q in quorums if q is not leader)
    lagging_index = quorums.index(lagging)
    propose_all(leader, [b"early"])
    wait_for(lambda: machines[lagging_index].batches == [b"early"], "the follower to apply")
    lagging.close()
    batches = [b"early"] + [b"while-away-%d" % i for i in range(30)]
    propose_all(leader, batches[1:])
    # Compact both live logs past what the follower has, so whichever of them leads when it
    # returns (a busy machine may see an election meanwhile) must send it a snapshot. The file
    # is written one tick before pysyncobj drops the entries it covers: wait for the latter.
    live = [q for q in quorums if q is not lagging]
    # A follower learns the commit index one append-entries later; a snapshot taken before that
    # would cover only the old entries.
    wait_for(lambda: all(q.last_applied == leader.last_applied for q in live), "live nodes")
    for quorum in live:
        quorum.force_snapshot()
    # 34 entries before; 2 after, plus one no-op per election since (a few under load).
    wait_for(lambda: all(q.status()["log_entries"] < 10 for q in live), "log compaction")

    machine = ListStateMachine()
    addresses = [q.self_address for q in quorums]
    cluster.start(lagging_index, addresses, machine)
    wait_for(lambda: machine.batches == batches, "the snapshot install")
    assert len(machine.restored) == 1
    recorded = list(sent)
    for message in recorded:
        assert raft._decode_message(real_encode(message)) == message
    kinds = {m["type"] for m in recorded}
    # Keepalives go out only after peer_keepalive_s of silence, which a fast run may never
    # have (test_raft_transport.py decodes them on their own).
    assert {"append_entries", "next_node_idx", "request_vote", "response_vote"} <= kinds
    assert any(m.get("entries") for m in recorded)
    assert any(m.get("serialized") for m in recorded)
    assert all(q.transport_refusals() == 0 for q in quorums if q.status()["running"])


def test_a_quorum_with_a_secret_refuses_a_node_with_another(cluster: Cluster) -> None:
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    secret = "a" * 43
    quorums = [cluster.start(i, addresses, ListStateMachine(), cluster_secret=secret)
               for i in range(2)]
    leader = wait_leader(quorums)
    propose_all(leader, [b"with-the-secret"])
    stranger_machine = ListStateMachine()
    stranger = cluster.start(2, addresses, stranger_machine, cluster_secret="b" * 43)
    wait_for(lambda: sum(q.transport_refusals() for q in [*quorums, stranger]) >= 2,
             "the handshakes to fail on both sides")
    assert not any(stranger.peer_connections().values())
    assert not stranger.is_leader() and stranger_machine.batches == []
    assert propose_all(leader, [b"still-committing"])


def test_corrupt_snapshot_stops_the_node(cluster: Cluster) -> None:
    addresses = [f"127.0.0.1:{free_port()}"]
    quorum = cluster.start(0, addresses, ListStateMachine())
    wait_leader([quorum])
    propose_all(quorum, [b"a", b"b", b"c"])
    quorum.force_snapshot()
    wait_for(quorum.snapshot_path.exists, "the snapshot file")
    quorum.close()
    data = bytearray(quorum.snapshot_path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    quorum.snapshot_path.write_bytes(bytes(data))

    machine = ListStateMachine()
    broken = cluster.start(0, addresses, machine)
    wait_for(lambda: not broken.status()["running"], "the node to stop")
    assert isinstance(broken.failure, SnapshotCorruptError)
    assert machine.batches == [] and not broken.is_leader()


def test_failing_state_machine_stops_the_node(cluster: Cluster) -> None:
    addresses = [f"127.0.0.1:{free_port()}"]
    machine = ListStateMachine(fail_on=b"boom")
    events: list[tuple[bool, int]] = []
    quorum = cluster.start(0, addresses, machine,
                           on_leadership_change=lambda leads, e: events.append((leads, e)))
    wait_leader([quorum])
    assert quorum.propose(b"fine").result(WAIT_S) > 0
    with pytest.raises(ProposeError) as failure:
        quorum.propose(b"boom").result(WAIT_S)
    assert failure.value.reason == FailReason.CLOSED and not failure.value.outcome_known
    assert isinstance(quorum.failure, RuntimeError) and machine.batches == [b"fine"]
    wait_for(lambda: not quorum.status()["running"], "the node to stop")
    assert events[-1][0] is False


def test_compaction_is_on_by_default(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """pysyncobj compacts when the log is longer than logCompactionMinEntries OR the last
    compaction is older than logCompactionMinTime: both are passed (the journal-bytes trigger is
    the patched SyncObj's); 0 entries leaves both out of reach."""
    real_conf = raft.quorum.SyncObjConf
    passed: list[dict[str, Any]] = []

    def recording_conf(**kwargs: Any) -> Any:
        passed.append(kwargs)
        return real_conf(**kwargs)

    monkeypatch.setattr(raft.quorum, "SyncObjConf", recording_conf)
    defaults = RaftSettings()
    assert defaults.snapshots_on and defaults.snapshot_min_entries == 20_000
    assert defaults.snapshot_interval_s == 3600.0
    (quorum,), _ = cluster.start_all(1)
    assert passed[-1]["logCompactionMinEntries"] == 20_000
    assert passed[-1]["logCompactionMinTime"] == 3600.0
    assert quorum._syncobj._tl_snapshot_journal_bytes == defaults.snapshot_journal_bytes
    off = dataclasses.replace(SINGLE, snapshot_min_entries=0)
    cluster.start_all(1, off)
    assert passed[-1]["logCompactionMinEntries"] >= 2**62
    assert passed[-1]["logCompactionMinTime"] == math.inf
    for bad in (1, -1):
        with pytest.raises(ValueError, match="snapshot_min_entries"):
            RaftSettings(snapshot_min_entries=bad)


def test_quorums_run_the_patched_syncobj(cluster: Cluster) -> None:
    (quorum,), _ = cluster.start_all(1)
    wait_leader([quorum])
    assert isinstance(quorum._syncobj, raft._PatchedSyncObj)
    assert raft.self_test._self_test_passed
    propose_all(quorum, [b"one"])
    counts = quorum.status()["pysyncobj_patches"]
    assert counts.get("reject_floor_rewrite") == 0  # a lone node rejects nothing


def test_pysyncobj_other_than_the_verified_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raft._check_pysyncobj()  # the installed one passes (it did at import)
    monkeypatch.setattr(raft.patches.pysyncobj_version, "VERSION", "0.3.18")
    with pytest.raises(raft.PysyncobjMismatchError, match=r"0\.3\.18 is installed"):
        raft._check_pysyncobj()
    monkeypatch.undo()
    monkeypatch.setitem(raft._PYSYNCOBJ_SHA256, "syncobj.py", "0" * 64)
    with pytest.raises(raft.PysyncobjMismatchError, match="re-verify"):
        raft._check_pysyncobj()


def test_self_test_tells_the_patched_follower_from_pysyncobjs() -> None:
    """The start-up self-test passes on the patched SyncObj and fails on pysyncobj's own."""
    from pysyncobj.node import Node

    conf = SyncObjConf(autoTick=False, appendEntriesUseBatch=True, pollerType="select",
                       dynamicMembershipChange=False, journalFile=None)
    for cls, fails in ((raft._PatchedSyncObj, False), (SyncObj, True)):
        leader = Node("leader")
        journal = {"journal": raft.journal.InMemoryJournal()} if not fails else {}
        obj = cls(Node("self"), [leader], conf, transportClass=raft._SelfTestTransport,
                  **journal)
        try:
            if fails:
                with pytest.raises(raft.PysyncobjMismatchError, match="truncated matching"):
                    raft._run_self_test(obj, obj._SyncObj__transport, leader)
            else:
                raft._run_self_test(obj, obj._SyncObj__transport, leader)
        finally:
            obj.destroy()


def test_patched_syncobj_refuses_dynamic_membership() -> None:
    conf = SyncObjConf(autoTick=False, dynamicMembershipChange=True, journalFile=None)
    with pytest.raises(ValueError, match="dynamic membership"):
        raft._PatchedSyncObj("127.0.0.1:1", [], conf)


def test_reject_floor_keeps_the_conflict_until_a_success() -> None:
    """reject-pingpong: a pipelined gap rejection (next=last+1) must not undo a conflict one."""
    floor = raft._RejectFloor()

    def reply(next_index: int, success: bool = False) -> int:
        message = {"type": "next_node_idx", "next_node_idx": next_index, "reset": not success,
                   "success": success}
        return int(floor.apply("leader", message)["next_node_idx"])

    assert reply(40) == 40  # conflict at 40
    assert reply(57) == 40 and reply(57) == 40  # gaps, pipelined behind it
    assert reply(38) == 38  # a lower conflict lowers the floor
    assert reply(41, success=True) == 41  # a success clears it
    assert reply(57) == 57
    assert floor.rewrites == 2
    keepalive = {"type": "tidelog_keepalive"}
    assert floor.apply("leader", keepalive) is keepalive


def test_importing_the_adapter_leaves_socket_inet_ntop_working() -> None:
    """pysyncobj's tcp_connection imports its win_inet_pton, which replaces socket.inet_ntop in
    the whole process with a Windows-only one that raises on Linux; the adapter undoes that."""
    import tidelog.controller.raft  # noqa: F401 (imported above too: this is the import under test)

    assert socket.inet_ntop(socket.AF_INET, b"\x7f\x00\x00\x01") == "127.0.0.1"
    assert socket.inet_ntop(socket.AF_INET6, bytes(15) + b"\x01") == "::1"


class SlowStateMachine(ListStateMachine):
    """Applies ``b"slow"`` for ``seconds`` (sleeping, as a replay on a busy machine would
    hold the tick thread), calling its quorum's keep_alive every 10 ms when ``keep_alive``."""

    def __init__(self, seconds: float, keep_alive: bool) -> None:
        super().__init__()
        self.seconds = seconds
        self.keep_alive = keep_alive
        self.quorum: RaftQuorum | None = None

    def apply(self, batch: bytes, index: int) -> None:
        if batch == b"slow":
            until = time.monotonic() + self.seconds
            while time.monotonic() < until:
                time.sleep(0.01)
                if self.keep_alive and self.quorum is not None:
                    self.quorum.keep_alive()
        super().apply(batch, index)


@pytest.mark.parametrize("keep_alive", [True, False])
def test_a_long_apply_keeps_the_leader_when_the_state_machine_keeps_it_alive(
        cluster: Cluster, keep_alive: bool) -> None:
    # An entry applied for 3x the largest election timeout on every node. Kept alive between
    # records (controller/raft/patches.py "Long applies"), the leader keeps sending and the
    # followers do not count their own busy time: nobody starts an election. Without it the
    # followers hear nothing while the leader applies, and elect another leader.
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    seconds = 3 * SETTINGS.election_timeout_max_s
    machines = [SlowStateMachine(seconds, keep_alive) for _ in range(3)]
    quorums = [cluster.start(i, addresses, machines[i]) for i in range(3)]
    for quorum, machine in zip(quorums, machines, strict=True):
        machine.quorum = quorum
    leader = wait_leader(quorums)
    (before,) = propose_all(leader, [b"before"])
    # A settled quorum: every node connected to both others and caught up (a node still
    # connecting would elect anyway, keep-alive or not).
    wait_for(lambda: all(q.last_applied >= before and all(q.peer_connections().values())
                         for q in quorums), "a settled quorum")
    epoch = leader.leader_epoch
    index = leader.propose(b"slow").result(WAIT_S * 2)
    wait_for(lambda: all(q.last_applied >= index for q in quorums), "every node applied it",
             WAIT_S * 2)
    after = 0
    while not after:  # after elections, the first leader found may be about to lose
        try:
            (after,) = propose_all(wait_leader(quorums), [b"after"])
        except ProposeError as error:
            assert not keep_alive, error
            assert error.reason in (FailReason.NOT_LEADER, FailReason.LEADER_CHANGED), error
    wait_for(lambda: all(q.last_applied >= after for q in quorums), "every node applied it")
    epochs = {q.leader_epoch for q in quorums}
    if keep_alive:
        assert leader.is_leader() and epochs == {epoch}, (epoch, epochs)
        assert leader.patch_counts().get("keep_alive", 0) > 0
    else:
        assert max(epochs) > epoch, "the followers elected a new leader meanwhile"
    for machine in machines:
        assert machine.batches == [b"before", b"slow", b"after"]


#: A journal limit small enough to reach in a test: 16 batches of 64 KiB in flight, compaction
#: at 256 KiB of applied journal, the limit at 2 MiB (the production limits: test_raft_journal).
SMALL_JOURNAL = dataclasses.replace(
    SINGLE, snapshot_min_entries=0, batch_bytes_max=64 * 1024, proposals_in_flight_max=16,
    snapshot_journal_bytes=256 * 1024, journal_bytes_max=2 * 1024 * 1024)


def test_compaction_keeps_the_journal_below_its_limit(cluster: Cluster) -> None:
    """Batches adding up to three times the journal's limit: compaction (by journal bytes, the
    entry count being off here) keeps it below the limit, and a restart has every batch."""
    addresses = [f"127.0.0.1:{free_port()}"]
    quorum = cluster.start(0, addresses, ListStateMachine(), SMALL_JOURNAL)
    wait_leader([quorum])
    batches = [b"%04d" % i + bytes(60_000) for i in range(100)]
    for start in range(0, len(batches), 8):
        propose_all(quorum, batches[start:start + 8])
        assert quorum.status()["journal_bytes"] < SMALL_JOURNAL.journal_bytes_max
    assert quorum.patch_counts().get("snapshot_for_journal_bytes", 0) > 0
    assert quorum.journal_path.stat().st_size < SMALL_JOURNAL.journal_bytes_max
    quorum.close()
    again = ListStateMachine()
    cluster.start(0, addresses, again, SMALL_JOURNAL)
    wait_for(lambda: again.batches == batches, "snapshot restore and journal replay")


class FailingSnapshots(ListStateMachine):
    def snapshot(self) -> bytes:
        raise OSError("cannot take a snapshot")


def test_a_leader_refuses_proposals_at_the_journal_limit(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Snapshots failing, the journal fills up to its limit: proposals then fail JOURNAL_FULL
    (known not appended) with a line naming the limit; the node keeps serving."""
    addresses = [f"127.0.0.1:{free_port()}"]
    machine = FailingSnapshots()
    quorum = cluster.start(0, addresses, machine, SMALL_JOURNAL)
    wait_leader([quorum])
    refused: list[ProposeError] = []
    for i in range(60):  # 3.6 MB: past the 2 MiB limit
        try:
            quorum.propose(b"%04d" % i + bytes(60_000)).result(WAIT_S)
        except ProposeError as error:
            refused.append(error)
    assert refused and all(e.reason == FailReason.JOURNAL_FULL and e.outcome_known
                           for e in refused)
    assert quorum.status()["journal_bytes"] < SMALL_JOURNAL.journal_bytes_max
    assert len(machine.batches) == 60 - len(refused)
    assert any("refusing proposals" in r.getMessage() and "journal_bytes_max" in r.getMessage()
               for r in caplog.records)
    assert quorum.failure is None and quorum.status()["running"]


def test_a_restart_between_a_snapshot_and_its_compaction_keeps_the_journal(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot is written one tick before the journal drops what it covers: a node stopped
    in between restarts on a dump and a journal that starts before it. The patched start keeps
    the journal's entries after the dump (pysyncobj cleared them: sim bug dump-clears-journal);
    the durable journal reads the same entries back."""
    addresses = [f"127.0.0.1:{free_port()}"]
    monkeypatch.setattr(raft._PatchedSyncObj, "_SyncObj__deleteEntriesTo",
                        lambda self, to_index: None)  # the compaction never comes
    quorum = cluster.start(0, addresses, ListStateMachine())
    wait_leader([quorum])
    before = [b"before %d" % i for i in range(10)]
    propose_all(quorum, before)
    quorum.force_snapshot()
    wait_for(quorum.snapshot_path.exists, "the snapshot file")
    after = [b"after %d" % i for i in range(10)]
    propose_all(quorum, after)
    quorum.close()
    monkeypatch.undo()

    again = ListStateMachine()
    restarted = cluster.start(0, addresses, again)
    wait_for(lambda: again.batches == before + after, "restore plus the journal after it")
    assert len(again.restored) == 1
    assert restarted.patch_counts().get("dump_journal_kept") == 1


# --- fast elections (controller/raft/prevote.py) ----------------------------------------------
#: Election timeouts far longer than anything these tests wait for: a new leader can then only
#: come from the fast path (a pre-vote when the leader's connection ends), never from a
#: timeout, whatever the machine's load.
SLOW_TIMEOUTS = RaftSettings(election_timeout_min_s=2.0, election_timeout_max_s=3.0,
                             connection_timeout_s=3.0)


def wait_followers(quorums: list[RaftQuorum], leader: RaftQuorum) -> None:
    """Until every other voter names ``leader`` (a follower learns it from its first append)."""
    wait_for(lambda: all(q.leader_address() == leader.self_address for q in quorums),
             "every voter to follow the leader")


def test_a_closed_leaders_survivors_elect_through_a_pre_vote(cluster: Cluster) -> None:
    """A leader whose sockets close (its process died, or here: closed) is replaced without
    waiting out the election timeout: a survivor's pre-vote gets a majority and it stands."""
    quorums, machines = cluster.start_all(3, SLOW_TIMEOUTS)
    leader = wait_leader(quorums)
    epoch = leader.leader_epoch
    propose_all(leader, [b"before"])
    wait_followers(quorums, leader)
    # Voters refuse pre-votes for the minimum election timeout after a vote was asked of them
    # (patches.py, _tl_has_live_leader): the leader dies once that is over.
    time.sleep(SLOW_TIMEOUTS.election_timeout_min_s + 0.1)
    leader.close()
    survivors = [q for q in quorums if q is not leader]
    new_leader = wait_leader(survivors)
    assert new_leader.leader_epoch == epoch + 1
    assert new_leader.patch_counts().get("fast_elections") == 1
    assert propose_all(new_leader, [b"after"])
    kept = [m for q, m in zip(quorums, machines, strict=True) if q is not leader]
    wait_for(lambda: all(m.batches[-1:] == [b"after"] for m in kept),
             "the survivors to apply a new write")


def test_a_follower_that_loses_only_its_own_connection_disrupts_nothing(
    cluster: Cluster,
) -> None:
    """A follower whose connection to a live leader resets asks for pre-votes, and is refused:
    the other follower still hears the leader and the leader never grants one. No term
    changes, no election, and the follower is back on the leader once it reconnects."""
    quorums, _ = cluster.start_all(3, SLOW_TIMEOUTS)
    leader = wait_leader(quorums)
    epoch = leader.leader_epoch
    # The survivor ranked first asks at once, on the tick after the reset, before any poll
    # could bring the leader's next append_entries: its round is certain to happen.
    follower = min((q for q in quorums if q is not leader), key=lambda q: q.self_address)
    obj = follower._syncobj
    assert obj is not None

    def rounds() -> int:
        return int(follower.patch_counts().get("pre_vote_rounds", 0))

    def back_on_the_leader(since: float) -> bool:
        return bool(obj._SyncObj__raftLeader in obj._SyncObj__connectedNodes
                    and obj._tl_leader_heard_at > since)

    for i in range(3):
        wait_followers(quorums, leader)
        wait_for(lambda: back_on_the_leader(0.0), "the follower connected to the leader")
        before = rounds()
        connection = obj._SyncObj__transport._connections[obj._SyncObj__raftLeader]
        reset_at = time.monotonic()
        connection._socket.shutdown(socket.SHUT_RDWR)  # a reset, seen by both ends
        wait_for(lambda before=before: rounds() > before, "the follower's pre-vote round")
        wait_for(lambda since=reset_at: back_on_the_leader(since),
                 "the follower back on the leader")
        assert follower.leader_address() == leader.self_address
        assert propose_all(leader, [b"write %d" % i])
    assert leader.is_leader() and all(q.leader_epoch == epoch for q in quorums)
    assert not any(q.patch_counts().get("fast_elections") for q in quorums)
