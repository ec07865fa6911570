"""Invariants of a replicated log, checked after every simulation event.

The checker knows nothing about pysyncobj or the simulated network: the simulation reports what
it observes (roles, applied entries, client outcomes, a new leader's journal) and calls
:meth:`InvariantChecker.after_event` once per event. A broken invariant raises
:class:`InvariantViolation` at once, so the trace ends at the event that broke it.

Invariants (Raft's safety properties, as a client and an operator can see them):
- **Election safety**: at most one node is leader in any term (every role change is reported,
  including one that a single event both enters and leaves).
- **Identical images at equal offsets**: every node's applied sequence is a prefix of one common
  sequence: the batch at position p is the same on every node that has applied p, and so is a
  digest of the first p batches. The Raft index a batch was applied at is also the same
  everywhere (state machine safety).
- **No committed record lost**: a batch whose callback reported success sits, on every node that
  has applied that far, at the position reported to the client, including nodes rebuilt after a
  crash from their journal and snapshot; and a new leader's journal holds every batch committed
  in an earlier term (leader completeness).
- **Applied index never decreases** on a live node (one process lifetime).
- **Definite failures are definite**: a batch whose callback reported a failure that means "not
  appended" never appears; no batch is applied twice; no batch appears that nobody proposed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: Raft roles as pysyncobj numbers them (_RAFT_STATE).
FOLLOWER, CANDIDATE, LEADER = 0, 1, 2


class InvariantViolation(AssertionError):
    """A safety invariant broke; the message says which and where."""


def chain_digest(previous: bytes, batch: bytes) -> bytes:
    """The digest of an applied sequence after one more batch (a hash chain)."""
    return hashlib.blake2b(previous + batch, digest_size=16).digest()


@dataclass
class NodeView:
    """What the simulation observes of one running node after an event."""

    name: str
    incarnation: int
    term: int
    state: int
    last_applied: int
    commit_index: int
    batches: list[bytes]


@dataclass
class _Image:
    """The checker's record of one node process's applied sequence (reset on restart)."""

    incarnation: int
    batches: list[bytes] | None = None
    checked: int = 0
    chain: bytes = b""
    positions: dict[bytes, int] = field(default_factory=dict)
    last_applied: int = 0


class InvariantChecker:
    def __init__(self, *, is_proposed: Callable[[bytes], bool]) -> None:
        self._is_proposed = is_proposed
        self.leader_of_term: dict[int, str] = {}
        self.max_term = 0
        # The common sequence, as first seen on any node.
        self.batch_at_position: list[bytes] = []
        self.chain_at: list[bytes] = [b""]
        self.position_of: dict[bytes, int] = {}
        self.batch_at_index: dict[int, bytes] = {}
        self.index_of: dict[bytes, int] = {}
        # Client outcomes.
        self.acked: dict[bytes, int] = {}
        self.ack_term_bound: dict[bytes, int] = {}
        self.failed: dict[bytes, str] = {}
        self.committed_entry: dict[int, tuple[int, bytes]] = {}
        self._images: dict[str, _Image] = {}

    # --- reports from the simulation ---------------------------------------------------------
    def on_role(self, name: str, term: int, state: int) -> None:
        self.max_term = max(self.max_term, term)
        if state != LEADER:
            return
        holder = self.leader_of_term.setdefault(term, name)
        if holder != name:
            raise InvariantViolation(
                f"election safety: {holder} and {name} are both leader in term {term}"
            )

    def on_apply(self, name: str, raft_index: int, batch: bytes) -> None:
        """A node applied ``batch`` at Raft log index ``raft_index``."""
        first = self.batch_at_index.setdefault(raft_index, batch)
        if first != batch:
            raise InvariantViolation(
                f"state machine safety: {name} applied {_short(batch)} at raft index "
                f"{raft_index}, where {_short(first)} was applied before"
            )
        index = self.index_of.setdefault(batch, raft_index)
        if index != raft_index:
            raise InvariantViolation(
                f"state machine safety: {name} applied {_short(batch)} at raft index "
                f"{raft_index}, and it was applied at index {index} before"
            )

    def on_committed_entry(self, name: str, raft_index: int, term: int, command: bytes) -> None:
        """An entry at or below a node's commit index: the same on every node (log matching)."""
        digest = hashlib.blake2b(command, digest_size=16).digest()
        first = self.committed_entry.setdefault(raft_index, (term, digest))
        if first != (term, digest):
            raise InvariantViolation(
                f"log matching: {name}'s journal holds a term {term} entry at raft index "
                f"{raft_index}, below its commit index, where another node committed a "
                f"{'different ' if first[0] == term else ''}term {first[0]} entry"
            )

    def on_ack(self, name: str, batch: bytes, position: int) -> None:
        """A client's callback reported success; ``position`` is what ``append`` returned."""
        if batch in self.failed:
            raise InvariantViolation(
                f"{_short(batch)} acked by {name} but reported failed ({self.failed[batch]})"
            )
        self.acked[batch] = position
        self.ack_term_bound[batch] = self.max_term
        if position > len(self.batch_at_position) or self.batch_at_position[position - 1] != batch:
            raise InvariantViolation(
                f"{name} acked {_short(batch)} at position {position}, which holds "
                f"{_short(self._at(position))}"
            )

    def on_definite_failure(self, name: str, batch: bytes, reason: str) -> None:
        """A client's callback reported a failure that means the batch was never appended."""
        self.failed[batch] = reason
        if batch in self.position_of:
            raise InvariantViolation(
                f"{name} reported {_short(batch)} failed ({reason}) but it was applied at "
                f"position {self.position_of[batch]}"
            )

    def on_leader_log(
        self, name: str, term: int, entry_at: Callable[[int], bytes | None], first_index: int,
        last_index: int,
    ) -> None:
        """Leader completeness: a new leader's journal holds every batch committed earlier.

        Only batches acked while no term >= ``term`` had been seen are checked: those were
        committed in an earlier term, so Raft guarantees the new leader has them. A batch whose
        index is below ``first_index`` lives in the leader's snapshot and is not checked here.
        """
        for batch, bound in self.ack_term_bound.items():
            if bound >= term:
                continue
            index = self.index_of[batch]
            if index < first_index:
                continue
            found = entry_at(index) if index <= last_index else None
            if found != batch:
                raise InvariantViolation(
                    f"leader completeness: {name} became leader of term {term} without "
                    f"{_short(batch)} (committed at raft index {index}, acked before term "
                    f"{bound + 1}); its journal holds {_short(found)} there, last index "
                    f"{last_index}"
                )

    def on_restart(self, name: str) -> None:
        self._images.pop(name, None)

    # --- after every event --------------------------------------------------------------------
    def after_event(self, views: Sequence[NodeView]) -> None:
        for view in views:
            self.on_role(view.name, view.term, view.state)
            self._check_image(view)

    def _check_image(self, view: NodeView) -> None:
        image = self._images.get(view.name)
        if image is None or image.incarnation != view.incarnation:
            image = self._images[view.name] = _Image(incarnation=view.incarnation)
        if view.last_applied < image.last_applied:
            raise InvariantViolation(
                f"{view.name}: applied index went back from {image.last_applied} to "
                f"{view.last_applied}"
            )
        image.last_applied = view.last_applied
        batches = view.batches
        if batches is not image.batches:
            # A snapshot was loaded (the list was replaced): check it from the start.
            if len(batches) < image.checked:
                raise InvariantViolation(
                    f"{view.name}: loading a snapshot took the image back from "
                    f"{image.checked} to {len(batches)} batches"
                )
            image.batches, image.checked, image.chain, image.positions = batches, 0, b"", {}
        elif len(batches) < image.checked or (
            image.checked and batches[image.checked - 1] is not self._at(image.checked)
            and batches[image.checked - 1] != self._at(image.checked)
        ):
            raise InvariantViolation(
                f"{view.name}: applied batches changed under the checker (had {image.checked}, "
                f"now {len(batches)})"
            )
        for position in range(image.checked + 1, len(batches) + 1):
            self._check_position(view.name, image, position, batches[position - 1])
        image.checked = len(batches)

    def _check_position(self, name: str, image: _Image, position: int, batch: bytes) -> None:
        if not self._is_proposed(batch):
            raise InvariantViolation(f"{name} applied {_short(batch)}, which nobody proposed")
        if batch in image.positions:
            raise InvariantViolation(
                f"{name} applied {_short(batch)} twice (positions {image.positions[batch]} and "
                f"{position})"
            )
        if batch in self.failed:
            raise InvariantViolation(
                f"{name} applied {_short(batch)} at position {position}, but a client was told "
                f"it failed ({self.failed[batch]})"
            )
        image.positions[batch] = position
        image.chain = chain_digest(image.chain, batch)
        if position > len(self.batch_at_position):
            assert position == len(self.batch_at_position) + 1
            self.batch_at_position.append(batch)
            self.chain_at.append(image.chain)
            self.position_of.setdefault(batch, position)
            return
        expected = self.batch_at_position[position - 1]
        if batch != expected:
            acked = " (acked)" if self.acked.get(expected) == position else ""
            raise InvariantViolation(
                f"images differ: {name} has {_short(batch)} at position {position}, another node "
                f"applied {_short(expected)}{acked} there"
            )
        if image.chain != self.chain_at[position]:
            raise InvariantViolation(
                f"images differ: {name}'s digest of its first {position} batches differs"
            )

    # --- end of a run -------------------------------------------------------------------------
    def check_final(self, views: Sequence[NodeView]) -> list[str]:
        """After healing and settling: the longest image holds every ack.

        Returns the nodes still behind the longest image: a liveness note, not a safety
        violation (the caller decides whether enough nodes caught up).
        """
        self.after_event(views)
        longest = max(len(view.batches) for view in views)
        for batch, position in self.acked.items():
            if position > longest:
                raise InvariantViolation(
                    f"committed record lost: {_short(batch)} acked at position {position}, but "
                    f"the healed cluster holds only {longest} batches"
                )
        return [
            f"{view.name} behind: {len(view.batches)} of {longest} batches"
            for view in views if len(view.batches) < longest
        ]

    def _at(self, position: int) -> bytes | None:
        if 1 <= position <= len(self.batch_at_position):
            return self.batch_at_position[position - 1]
        return None


def _short(batch: bytes | None) -> str:
    if batch is None:
        return "nothing"
    return repr(batch.split(b"|", 1)[0].decode("ascii", "replace"))
