"""What the replication core asks its shell to do: effects as plain, comparable data.

:class:`~broker.replication.partition_state.PartitionState` never touches a log, a socket or a
clock; each of its methods returns a list of these effects and the shell carries them out **in
list order**, which the core arranges as "persist, then send, then acknowledge":

1. log changes first (``TruncateTo``, ``TruncateFullyAndStartAt``,
   ``AppendFetchedBatches``, ``UpdateHighWatermark``, ``MaybeIncrementLogStartOffset``);
2. then messages (``ProposeIsr`` → an AlterPartition request to the active controller);
3. then completions: after a list holding ``UpdateHighWatermark`` or ``CheckProduceWaiters``, the
   shell re-evaluates every waiting acks=all produce of the partition with
   ``PartitionState.acks_all_outcome`` (and wakes delayed consumer fetches on a HW change).

``BackoffFetch`` tells a follower's fetcher to wait ``replica.fetch.backoff.ms`` before its next
fetch. Every effect is a frozen dataclass, so tests compare whole lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "AppendFetchedBatches",
    "BackoffFetch",
    "CheckProduceWaiters",
    "Effect",
    "MaybeIncrementLogStartOffset",
    "ProposeIsr",
    "TruncateFullyAndStartAt",
    "TruncateTo",
    "UpdateHighWatermark",
]


@dataclass(frozen=True, slots=True)
class UpdateHighWatermark:
    """``log.update_high_watermark(high_watermark)``; then complete acks=all waiters and wake
    consumer fetches. On a leader it only ever grows within a leader epoch."""

    high_watermark: int


@dataclass(frozen=True, slots=True)
class ProposeIsr:
    """Leader: send AlterPartition(leader_epoch, new_isr, partition_epoch) to the controller and
    hand the answer (or the transport failure) to ``on_alter_partition_response``. At most one is
    in flight per partition; a retry re-sends the same object."""

    leader_epoch: int
    partition_epoch: int  # the committed partition epoch the proposal is based on (CAS)
    new_isr: tuple[int, ...]
    #: KIP-903: each new_isr member's broker epoch as of its fetch that the leader last
    #: accepted (-1 unknown: the leader itself, or not fetched in this leader epoch), in new_isr's
    #: order. Not part of equality: a proposal is the same proposal whatever epochs it carries.
    new_isr_broker_epochs: tuple[int, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class CheckProduceWaiters:
    """Role, leader epoch or ISR changed without a HW change: re-evaluate acks=all waiters (they
    may now fail with NOT_LEADER_OR_FOLLOWER or NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""


@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Follower: ``log.truncate_to(offset)`` (a diverging epoch, KIP-320), then bring the producer
    state back in line (``ProducerStateTable.truncate_to(log.log_end_offset)`` or a rebuild).
    The log may cut lower, at a batch boundary; the core reads the real LEO on the next fetch."""

    offset: int


@dataclass(frozen=True, slots=True)
class TruncateFullyAndStartAt:
    """Follower: the leader's log start passed our LEO. ``log.truncate_fully_and_start_at(offset)``
    and clear the producer state (``ProducerStateTable.truncate_fully_and_start_at``)."""

    offset: int


@dataclass(frozen=True, slots=True)
class AppendFetchedBatches:
    """Follower: ``log.append_as_follower`` every batch of the response, in order, and feed each
    header to ``ProducerStateTable.on_append``. Afterwards the LEO must be ``next_offset``."""

    next_offset: int


@dataclass(frozen=True, slots=True)
class MaybeIncrementLogStartOffset:
    """Follower: follow the leader's log start (``log.maybe_increment_log_start_offset``); the
    offset is never above the HW this same list sets."""

    offset: int


@dataclass(frozen=True, slots=True)
class BackoffFetch:
    """Follower: the fetch failed with ``error_code`` (a retriable ErrorCode); wait, then fetch."""

    error_code: int


Effect = (
    UpdateHighWatermark
    | ProposeIsr
    | CheckProduceWaiters
    | TruncateTo
    | TruncateFullyAndStartAt
    | AppendFetchedBatches
    | MaybeIncrementLogStartOffset
    | BackoffFetch
)
