"""The start-up self-test of the pysyncobj patches (patches.py), run before the first quorum.

It replays sim seed 244's messages (truncate-acked-on-resend, and the leader's stale success
reply) into a _PatchedSyncObj wired up by SyncObj.__init__ as in production, over a transport
that only records what is sent, and raises PysyncobjMismatchError unless Raft's answers come
back. It runs once per process.
"""

from __future__ import annotations

import threading
from typing import Any

from pysyncobj import SyncObjConf
from pysyncobj.node import Node
from pysyncobj.transport import Transport

from tidelog.controller.raft.journal import InMemoryJournal
from tidelog.controller.raft.patches import (
    _STATE_FOLLOWER,
    _STATE_LEADER,
    PysyncobjMismatchError,
    _PatchedSyncObj,
)


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
        obj = _PatchedSyncObj(Node("self-test"), [leader], conf, journal=InMemoryJournal(),
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
