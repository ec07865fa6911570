"""How a proposal or a start fails: FailReason, ProposeError, RaftStartError."""

from __future__ import annotations

import enum

from pysyncobj import FAIL_REASON


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
    #: The journal is at its size limit (RaftSettings.journal_bytes_max): not appended.
    JOURNAL_FULL = 102


#: Reasons after which the batch is known NOT to be in the log (safe to rebuild and re-propose).
_NOT_APPENDED = frozenset(
    {FailReason.QUEUE_FULL, FailReason.MISSING_LEADER, FailReason.NOT_LEADER,
     FailReason.DISCARDED, FailReason.REQUEST_DENIED, FailReason.JOURNAL_FULL}
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
    """The quorum could not start (bind failure, unreadable or damaged journal)."""
