"""Per-member reconciliation towards the target assignment (Kafka's CurrentAssignmentBuilder).

A member moves from its current assignment to its target one in steps, so that no partition is
ever owned by two members at once (a member owns what it is assigned plus what it has been asked
to revoke and has not yet acknowledged):

- STABLE at an older epoch, or UNRELEASED_PARTITIONS: compute the next step. Partitions it keeps
  stay; partitions leaving its target become *pending revocation*; partitions joining it are
  given only if no other member owns them (else they are *unreleased*).
- If it still owns a partition to revoke, it stays at its epoch in UNREVOKED_PARTITIONS and is
  told to give them up; it is given nothing new until its heartbeat's ``owned_partitions`` no
  longer lists them.
- Otherwise it moves to the target epoch: UNRELEASED_PARTITIONS while some partition of its
  target is still owned by another member (it gets them on a later heartbeat, once released),
  else STABLE.

Pure functions of the member, the target and who owns what.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tidelog.broker.group.group import ConsumerGroupMember
from tidelog.broker.group.records import Partitions
from tidelog.v1 import groups_pb2 as gpb

__all__ = ["OwnedByOther", "reconcile"]

#: (topic id, partition) -> whether a member other than this one owns it.
OwnedByOther = Callable[[bytes, int], bool]


def reconcile(member: ConsumerGroupMember, *, target_epoch: int, target: Partitions,
              owned: Partitions, owned_by_other: OwnedByOther) -> ConsumerGroupMember:
    """The member's next state; ``owned`` is what its heartbeat says it owns now."""
    if member.state == gpb.MEMBER_STATE_STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, target_epoch, target, owned, owned_by_other)
    if member.state == gpb.MEMBER_STATE_UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next_assignment(member, target_epoch, target, owned, owned_by_other)
    return _next_assignment(member, target_epoch, target, owned, owned_by_other)


def _next_assignment(member: ConsumerGroupMember, target_epoch: int, target: Partitions,
                     owned: Partitions, owned_by_other: OwnedByOther) -> ConsumerGroupMember:
    kept: dict[bytes, frozenset[int]] = {}
    to_revoke: dict[bytes, frozenset[int]] = {}
    assignable: dict[bytes, frozenset[int]] = {}
    unreleased = False
    for topic_id in sorted(set(target) | set(member.assigned)):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        new = wanted - current
        free = frozenset(p for p in new if not owned_by_other(topic_id, p))
        unreleased = unreleased or free != new
        _put(kept, topic_id, current & wanted)
        _put(to_revoke, topic_id, current - wanted)
        _put(assignable, topic_id, free)
    if to_revoke and _owns_any(owned, to_revoke):
        # Revoke first, at the current epoch: nothing new until the member acknowledges.
        return replace(member, state=gpb.MEMBER_STATE_UNREVOKED_PARTITIONS, assigned=kept,
                       pending_revocation=to_revoke)
    assigned = {t: kept.get(t, frozenset()) | assignable.get(t, frozenset())
                for t in set(kept) | set(assignable)}
    state = (gpb.MEMBER_STATE_UNRELEASED_PARTITIONS if unreleased
             else gpb.MEMBER_STATE_STABLE)
    # The previous epoch moves only with the epoch: it is what a member that missed this
    # response may still send (check_member_epoch).
    previous = (member.member_epoch if target_epoch != member.member_epoch
                else member.previous_member_epoch)
    return replace(member, state=state, member_epoch=target_epoch,
                   previous_member_epoch=previous, assigned=assigned,
                   pending_revocation={})


def _put(into: dict[bytes, frozenset[int]], topic_id: bytes, partitions: frozenset[int]) -> None:
    if partitions:
        into[topic_id] = partitions


def _owns_any(owned: Partitions, partitions: Partitions) -> bool:
    return any(owned.get(topic_id, frozenset()) & parts for topic_id, parts in partitions.items())
