"""Raft's persistence rules in the adapter, observed from outside: nothing answered before it
is on disk.

Raft: a node has its term and vote on stable storage before it asks for or gives a vote, and the
entries it acknowledges before it answers an append with success. A 3-node quorum of real
RaftQuorum objects (pysyncobj over 127.0.0.1, as in test_raft_adapter.py) runs with recorders in
the process: os.fsync and os.fdatasync (which file, on which node's tick thread), and every
message each node decodes and encodes (raft.connection's _decode_message / _encode_message, on
the same thread). Each node's events are then read in order: a vote answer must follow an fsync
of its state file after the request came, a vote request an fsync of it since its last request
of an older term, and a successful append reply an fsync of its journal after every entry it
acknowledges arrived (an entry it already had on disk needs none). The run covers a first
election, appends, the leader's close and a second election with appends.

On the adapter before its DurableJournal (pysyncobj's FileJournal, never fsynced) the first vote
and the first acknowledgement already fail these checks.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidelog.controller import raft
from tidelog.controller.raft import RaftQuorum, RaftSettings

WAIT_S = 10.0


class _NullMachine:
    def __init__(self) -> None:
        self.applied = 0

    def apply(self, batch: bytes, index: int) -> None:
        self.applied += 1

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


class Recorder:
    """Events in the order they happened, each with the tick thread (node) it happened on."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []
        self._lock = threading.Lock()

    def record(self, kind: str, what: Any) -> None:
        thread = threading.current_thread().name
        if thread.startswith("raft-"):
            with self._lock:
                self.events.append((thread, kind, what))

    def of(self, thread: str) -> list[tuple[str, Any]]:
        return [(kind, what) for name, kind, what in self.events if name == thread]


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder()
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def synced(fd: int, real: Any = real) -> None:
            try:
                path = Path(f"/proc/self/fd/{fd}").readlink().name
            except OSError:
                path = "?"
            real(fd)
            recorder.record("sync", path)

        monkeypatch.setattr(os, name, synced)
    real_decode, real_encode = raft.connection._decode_message, raft.connection._encode_message

    def decode(data: bytes) -> Any:
        message = real_decode(data)
        recorder.record("in", message)
        return message

    def encode(message: Any) -> bytes:
        recorder.record("out", message)
        return real_encode(message)

    monkeypatch.setattr(raft.connection, "_decode_message", decode)
    monkeypatch.setattr(raft.connection, "_encode_message", encode)
    return recorder


@pytest.fixture
def quorums(tmp_path: Path, recorder: Recorder) -> Iterator[list[RaftQuorum]]:
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    started = [RaftQuorum(i, addresses[i], addresses, tmp_path / f"node{i}", _NullMachine(),
                          settings=RaftSettings()) for i in range(3)]
    try:
        yield started
    finally:
        for quorum in started:
            quorum.close()


def _is_journal(name: str) -> bool:
    return name.startswith("raft.journal")  # the journal, or its compacted copy


def _is_state_file(name: str) -> bool:
    # The state file (term, vote) before its rename; pysyncobj's FileJournal writes
    # raft.journal.meta (never fsynced).
    return name.startswith("raft.state") or name.endswith(".meta")


def _is_data_dir(name: str) -> bool:
    return name.startswith("node")


def check_node(events: list[tuple[str, Any]]) -> list[str]:
    """Where a node's messages went out before the sync covering them."""
    problems: list[str] = []
    on_disk: set[tuple[int, int]] = set()  # (index, term) of received entries synced since
    arrived: set[tuple[int, int]] = set()  # received, not synced since
    state_synced_at = -1  # the directory's fsync after the state file's: the rename durable
    state_file_synced = False
    request_came_at: dict[int, int] = {}
    asked_term, asked_at = -1, -1
    for seq, (kind, what) in enumerate(events):
        if kind == "sync":
            if _is_journal(what):
                on_disk |= arrived
                arrived.clear()
            if _is_state_file(what):
                state_file_synced = True
            elif _is_data_dir(what) and state_file_synced:
                state_synced_at, state_file_synced = seq, False
            continue
        kind_of = what.get("type")
        if kind == "in" and kind_of == "append_entries":
            arrived |= {(e[1], e[2]) for e in what.get("entries", [])} - on_disk
        elif kind == "in" and kind_of == "request_vote":
            request_came_at.setdefault(what["term"], seq)
        elif kind == "out" and kind_of == "response_vote":
            if state_synced_at < request_came_at.get(what["term"], seq):
                problems.append(f"vote of term {what['term']} answered before its fsync")
        elif kind == "out" and kind_of == "request_vote" and what["term"] != asked_term:
            if state_synced_at < asked_at or state_synced_at < 0:
                problems.append(f"votes of term {what['term']} asked for before its fsync")
            asked_term, asked_at = what["term"], seq
        elif kind == "out" and kind_of == "next_node_idx" and what["success"]:
            unsynced = sorted(e for e in arrived if e[0] < what["next_node_idx"])
            if unsynced:
                problems.append(f"entries {unsynced[:3]}... acknowledged before their fsync")
    return problems


def test_votes_and_acknowledgements_leave_only_after_their_fsync(
    quorums: list[RaftQuorum], recorder: Recorder
) -> None:
    leader = wait_for(lambda: next((q for q in quorums if q.is_leader()), None), "a leader")
    for i in range(20):
        assert leader.propose(b"first %d" % i).result(WAIT_S) > 0
    leader.close()
    survivors = [q for q in quorums if q is not leader]
    second = wait_for(lambda: next((q for q in survivors if q.is_leader()), None),
                      "a second leader")
    for i in range(20):
        assert second.propose(b"second %d" % i).result(WAIT_S) > 0

    kinds = {(kind, what.get("type") if isinstance(what, dict) else "sync")
             for _, kind, what in recorder.events}
    # The run had what the checks are about: votes both ways, entries acknowledged, syncs.
    assert {("in", "request_vote"), ("out", "response_vote"), ("out", "request_vote"),
            ("in", "append_entries"), ("out", "next_node_idx")} <= kinds
    problems = {f"raft-{q.node_id}": check_node(recorder.of(f"raft-{q.node_id}"))
                for q in quorums}
    assert not any(problems.values()), problems
    assert all(q.status()["journal_syncs"] > 0 for q in survivors)


def test_a_lone_leader_commits_only_what_is_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-voter quorum commits on its own count alone: every entry it applies (commits) must
    be in its journal's last sync."""
    synced_last = [0]
    real_sync = raft.journal.DurableJournal.sync

    def sync(self: Any) -> None:
        last = self[-1][1] if len(self) else 0
        real_sync(self)
        synced_last[0] = last

    monkeypatch.setattr(raft.journal.DurableJournal, "sync", sync)
    applied_beyond: list[tuple[int, int]] = []

    class Machine(_NullMachine):
        def apply(self, batch: bytes, index: int) -> None:
            if index > synced_last[0]:
                applied_beyond.append((index, synced_last[0]))

    address = f"127.0.0.1:{free_port()}"
    quorum = RaftQuorum(0, address, [address], tmp_path / "node0", Machine(),
                        settings=RaftSettings(append_entries_period_s=0.02,
                                              election_timeout_min_s=0.07,
                                              election_timeout_max_s=0.1))
    try:
        wait_for(quorum.is_leader, "leadership")
        futures = [quorum.propose(b"lone %d" % i) for i in range(200)]
        assert all(f.result(WAIT_S) > 0 for f in futures)
    finally:
        quorum.close()
    assert synced_last[0] > 200 and not applied_beyond, applied_beyond[:5]
