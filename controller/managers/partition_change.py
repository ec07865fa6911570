"""Leader election and ISR changes for one partition (Kafka's PartitionChangeBuilder).

Given a partition's registration and a target ISR, :func:`build_partition_change` decides the
leader and returns the ``PartitionChangeRecord`` that gets there, or None when nothing changes:

- The current leader stays if it is still in the ISR and eligible (no needless movement).
- Otherwise the leader is the first replica, in replica order (preferred leader first), that is in
  the ISR and eligible. Eligible = an active broker (registered, unfenced, not in controlled
  shutdown), as the caller's ``is_eligible`` says.
- If none is, and the topic allows unclean election, the first eligible replica leads with an ISR
  of itself (data the old ISR had may be lost: that is what "unclean" means).
- Otherwise the partition goes offline (leader -1) and keeps its ISR, so the last in-sync replica
  can lead again when it comes back.

Replay bumps the partition epoch on every change and the leader epoch only when the leader
changes, so an ISR shrink that keeps the leader does not bump the leader epoch (Kafka's rule).

:class:`LeaderElections` counts the elections a batch makes, for the controller's
``leader_elections_total{kind}`` metric (replay counts them: ``MetadataDelta.leader_elections``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tidelog.invariants import InvariantViolation
from tidelog.metadata.image import (
    NO_LEADER,
    PartitionRegistration,
    partition_problem,
)
from tidelog.v1 import common_pb2, metadata_pb2

__all__ = [
    "LeaderElections",
    "build_partition_change",
    "elect_leader",
    "without_broker",
]


@dataclass(frozen=True, slots=True)
class LeaderElections:
    """Leader elections in one batch (Kafka's LeaderElectionRateAndTimeMs count and
    UncleanLeaderElectionsPerSec)."""

    clean: int = 0
    #: The new leader was not in the ISR just before: data the ISR had may be lost.
    unclean: int = 0


def elect_leader(
    replicas: tuple[int, ...], isr: tuple[int, ...], is_eligible: Callable[[int], bool]
) -> int:
    """The first replica in the ISR that is eligible, or NO_LEADER."""
    for broker_id in replicas:
        if broker_id in isr and is_eligible(broker_id):
            return broker_id
    return NO_LEADER


def without_broker(isr: tuple[int, ...], broker_id: int) -> tuple[int, ...]:
    """The ISR without ``broker_id``, except that the last member is kept (ISR never empties)."""
    if broker_id in isr and len(isr) > 1:
        return tuple(b for b in isr if b != broker_id)
    return isr


def build_partition_change(
    topic_id: bytes,
    partition_id: int,
    current: PartitionRegistration,
    *,
    is_eligible: Callable[[int], bool],
    unclean_allowed: bool,
    target_isr: tuple[int, ...] | None = None,
) -> metadata_pb2.PartitionChangeRecord | None:
    """The change to ``target_isr`` (default: unchanged) with the leader it implies, or None."""
    isr = current.isr if target_isr is None else target_isr
    if (problem := partition_problem(current.replicas, isr, NO_LEADER)) is not None:
        raise InvariantViolation(f"partition {partition_id}, ISR {list(isr)}: {problem}")
    leader = current.leader
    if leader == NO_LEADER or leader not in isr or not is_eligible(leader):
        leader = elect_leader(current.replicas, isr, is_eligible)
        if leader == NO_LEADER and unclean_allowed:
            leader = elect_leader(current.replicas, current.replicas, is_eligible)
            if leader != NO_LEADER:
                isr = (leader,)
    if leader == current.leader and isr == current.isr:
        return None
    record = metadata_pb2.PartitionChangeRecord(
        topic_id=topic_id,
        partition_id=partition_id,
        expected_partition_epoch=current.partition_epoch,
    )
    if leader != current.leader:
        record.leader = leader
    if isr != current.isr:
        record.isr.CopyFrom(common_pb2.ReplicaList(broker_ids=isr))
    if (problem := partition_problem(current.replicas, isr, leader)) is not None:
        raise InvariantViolation(
            f"partition {partition_id}, ISR {list(isr)}, leader {leader}: {problem}")
    return record
