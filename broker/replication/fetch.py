"""The data a replica fetch carries between the shell and the replication core.

Two sides of ReplicaService.Fetch (broker.proto), reduced to what decisions need:

* the **leader** gets a follower's request and answers with a :class:`FollowerFetchDecision`
  (an error, a diverging epoch, or "read from ``fetch_offset``", plus the offsets to put in the
  response); the shell reads the batches itself;
* the **follower** builds its request from :class:`FollowerFetch` and hands the answer back as a
  :class:`LeaderFetchResponse` (batches stay in the shell; only where they end is needed).

:class:`LogView` is the read-only window on the local partition log the core may look through
(etcd-raft's ``Storage`` idea): ``broker.storage.PartitionLog`` satisfies it as it is, and the
simulations use an in-memory log. The core never writes through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from tidelog.broker.replication.effects import Effect
from tidelog.errors import TidelogError

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "DivergingEpoch",
    "FollowerFetch",
    "FollowerFetchDecision",
    "LeaderFetchResponse",
    "LogView",
]

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LogView(Protocol):
    """What the core reads from the local partition log (``PartitionLog`` has all of it)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    def latest_epoch(self) -> int:
        """The newest leader epoch in the epoch cache, -1 when none."""
        ...

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """KIP-279: (largest epoch <= ``leader_epoch``, where it ends); (-1, -1) when none."""
        ...


class DivergingEpoch(NamedTuple):
    """FetchResponse.diverging_epoch (KIP-320): the follower must truncate to at most
    ``end_offset``, the leader's end of ``epoch``."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class FollowerFetch:
    """One partition of a follower's FetchRequest, as the core wants it sent."""

    leader_id: int  # where to send it
    leader_epoch: int  # PartitionData.current_leader_epoch
    fetch_offset: int  # the follower's LEO
    last_fetched_epoch: int  # divergence check (-1: the log has no epoch yet)
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class LeaderFetchResponse:
    """One partition of the leader's FetchResponse, as the follower's core needs it.

    ``batches_next_offset`` is the offset after the last returned batch (its base offset plus
    record count), None when the response holds no batch.
    """

    error_code: int
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    diverging_epoch: DivergingEpoch | None = None
    batches_next_offset: int | None = None


@dataclass(frozen=True, slots=True)
class FollowerFetchDecision:
    """The leader's answer to one follower fetch, before the shell reads any batch.

    When ``error`` and ``diverging_epoch`` are both None the shell reads batches from
    ``fetch_offset`` (no upper bound but the LEO) and answers with them; in every case it copies
    the offsets below into the response (a follower needs them with OFFSET_OUT_OF_RANGE too).
    ``effects`` are the leader's own (HW advanced, ISR expansion proposed): do them first.
    """

    error: TidelogError | None
    diverging_epoch: DivergingEpoch | None
    fetch_offset: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    effects: tuple[Effect, ...] = field(default=())

    @property
    def should_read(self) -> bool:
        return self.error is None and self.diverging_epoch is None
