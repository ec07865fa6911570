"""A consumer's membership in a KIP-848 group: a pure state machine (Kafka's
ConsumerMembershipManager and AbstractMembershipManager).

Input: heartbeat responses and errors, what the application thread reports back (a
reconciliation step or a loss handled, a leave wanted), timer checks; ``now_ms`` is always an
argument. Output: the next ``ConsumerGroupHeartbeatRequest`` (and when it is due), and work for
the application thread (:class:`Reconciliation`, :class:`PartitionsLost`), which it runs inside
``poll()`` (callbacks, commits, fetch state) and reports back with :meth:`work_done`. No I/O, no
threads, no clock: the shell (``_group_coordinator.py``) sends, and serialises calls with a lock.

States (Kafka's MemberState): UNSUBSCRIBED -> JOINING (heartbeat with epoch 0 at once) ->
RECONCILING (a target assignment to reach: the application revokes owned - target, then takes
target - owned, one step at a time) -> ACKNOWLEDGING (report the new owned set at once) ->
STABLE (heartbeat every interval the coordinator gives). FENCED (FENCED_MEMBER_EPOCH or
UNKNOWN_MEMBER_ID: the partitions are lost, never committed; then JOINING again with epoch 0 and
the same member id), PREPARE_LEAVING (the application runs its revocation before leaving) ->
LEAVING (a heartbeat with epoch -1, or -2 for a static member) -> UNSUBSCRIBED, STALE (the
application did not poll within max_poll_interval_ms: the member left; the next poll() loses the
partitions and rejoins), FATAL (a non-retriable heartbeat error: raised from poll(), no more
heartbeats).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Mapping
from dataclasses import dataclass

from tidelog.client._metadata import Backoff
from tidelog.client.records import TopicPartition
from tidelog.errors import ErrorCode, TidelogError, error_for_code
from tidelog.v1 import broker_pb2 as pb

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "MemberState",
    "Membership",
    "MembershipConfig",
    "PartitionsLost",
    "Reconciliation",
]

#: Kafka's epochs with a meaning: leave the group; a static member leaves but keeps its place.
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
#: The heartbeat interval before the coordinator has told us its own.
HEARTBEAT_INTERVAL_MS_DEFAULT = 5_000

#: Errors after which the member has lost its partitions and must rejoin (epoch 0).
_FENCED_CODES = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})


class MemberState(enum.Enum):
    UNSUBSCRIBED = "UNSUBSCRIBED"
    JOINING = "JOINING"
    RECONCILING = "RECONCILING"
    ACKNOWLEDGING = "ACKNOWLEDGING"
    STABLE = "STABLE"
    FENCED = "FENCED"
    PREPARE_LEAVING = "PREPARE_LEAVING"
    LEAVING = "LEAVING"
    STALE = "STALE"
    FATAL = "FATAL"


#: States that send no heartbeat at all.
_SILENT = frozenset({MemberState.UNSUBSCRIBED, MemberState.FENCED, MemberState.STALE,
                     MemberState.FATAL})
#: States that heartbeat as soon as they can (something to tell the coordinator).
_URGENT = frozenset({MemberState.JOINING, MemberState.ACKNOWLEDGING, MemberState.LEAVING})


@dataclass(frozen=True, slots=True)
class MembershipConfig:
    group_id: str
    instance_id: str = ""
    rack_id: str = ""
    server_assignor: str = ""
    rebalance_timeout_ms: int = 300_000
    max_poll_interval_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """One step towards the target: revoke ``revoked`` (commit first, then
    on_partitions_revoked, then drop their fetch state), then take ``assigned``
    (on_partitions_assigned, then positions from the committed offsets)."""

    revoked: frozenset[TopicPartition]
    assigned: frozenset[TopicPartition]
    member_epoch: int


@dataclass(frozen=True, slots=True)
class PartitionsLost:
    """The member was fenced or went stale: on_partitions_lost, drop them, no commit."""

    lost: frozenset[TopicPartition]


Work = Reconciliation | PartitionsLost


class Membership:
    """The member's state (see the module doc). Not thread-safe: the shell holds a lock."""

    def __init__(self, config: MembershipConfig, *, backoff: Backoff, now_ms: int) -> None:
        self.config = config
        self.state = MemberState.UNSUBSCRIBED
        self.member_id = ""
        self.member_epoch = 0
        self.topics: tuple[str, ...] = ()
        self.pattern = ""
        #: What the application owns now (reported in every heartbeat).
        self.owned: frozenset[TopicPartition] = frozenset()
        #: The latest assignment from the coordinator, by topic id; None until one came.
        self.target: dict[bytes, frozenset[int]] | None = None
        self.heartbeat_interval_ms = HEARTBEAT_INTERVAL_MS_DEFAULT
        self.fatal_error: TidelogError | None = None
        self._names: dict[bytes, str] = {}
        self._ids: dict[str, bytes] = {}
        self._backoff = backoff
        self._failures = 0
        self._retry_at_ms = 0
        self._next_heartbeat_ms = 0
        self._in_flight = False
        self._in_flight_leave = False
        self._in_flight_owned: frozenset[TopicPartition] = frozenset()
        self._work: Work | None = None  # handed to the application, not yet done
        self._lost_pending = False
        self._leave_epoch = LEAVE_GROUP_MEMBER_EPOCH
        self._stale_after_leave = False
        self._last_poll_ms = now_ms

    # --- the application's requests ------------------------------------------------------------

    def subscribe(self, topics: tuple[str, ...], pattern: str, now_ms: int) -> None:
        """Join (from UNSUBSCRIBED) or change the subscription (told at the next heartbeat,
        which is sent at once)."""
        if self.state in (MemberState.FATAL, MemberState.LEAVING, MemberState.PREPARE_LEAVING):
            raise RuntimeError(f"cannot subscribe while the member is {self.state.value}")
        self.topics, self.pattern = topics, pattern
        self._last_poll_ms = now_ms
        if self.state == MemberState.UNSUBSCRIBED:
            self._transition_to_joining()
        else:
            self._next_heartbeat_ms = now_ms

    @property
    def subscribed(self) -> bool:
        return bool(self.topics or self.pattern)

    def prepare_leaving(self) -> bool:
        """The application is about to revoke everything and leave; False when there is no
        membership to leave (never joined, fenced, stale: nothing to tell the coordinator)."""
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL):
            return False
        if self.state in (MemberState.FENCED, MemberState.STALE) or not self.member_id:
            self._clear_membership()
            return False
        self.state = MemberState.PREPARE_LEAVING
        return True

    def leave(self, now_ms: int) -> None:
        """Send the leave heartbeat (-1, or -2 for a static member) at once."""
        if self.state != MemberState.PREPARE_LEAVING:
            return
        self.state = MemberState.LEAVING
        self._leave_epoch = (LEAVE_GROUP_STATIC_MEMBER_EPOCH if self.config.instance_id
                             else LEAVE_GROUP_MEMBER_EPOCH)
        self._stale_after_leave = False
        self._retry_at_ms = now_ms

    def on_poll(self, now_ms: int) -> None:
        """The application polled: the poll timer restarts; a stale member may rejoin once it
        has handled the loss (take_work gives it)."""
        self._last_poll_ms = now_ms

    def check_poll_timer(self, now_ms: int) -> str | None:
        """Leave when the application has not polled for max_poll_interval_ms (Kafka's
        behaviour); returns the warning to log when it does."""
        in_group = self.state in (MemberState.JOINING, MemberState.RECONCILING,
                                  MemberState.ACKNOWLEDGING, MemberState.STABLE)
        waited = now_ms - self._last_poll_ms
        if not in_group or waited <= self.config.max_poll_interval_ms:
            return None
        if not self.member_id:
            self.state = MemberState.STALE
            self._lost_pending = True
            return None
        self.state = MemberState.LEAVING
        self._leave_epoch = (LEAVE_GROUP_STATIC_MEMBER_EPOCH if self.config.instance_id
                             else LEAVE_GROUP_MEMBER_EPOCH)
        self._stale_after_leave = True
        self._retry_at_ms = now_ms
        return (f"consumer of group {self.config.group_id!r} did not poll for {waited} ms, "
                f"more than max_poll_interval_ms ({self.config.max_poll_interval_ms}): it "
                "leaves the group (its partitions go to other members) and rejoins at the next "
                "poll(). Poll more often, or process fewer records per poll (max_poll_records).")

    def poll_timer_delay_ms(self, now_ms: int) -> int:
        return max(0, self._last_poll_ms + self.config.max_poll_interval_ms + 1 - now_ms)

    # --- heartbeats -----------------------------------------------------------------------------

    def heartbeat_delay_ms(self, now_ms: int) -> int | None:
        """How long until the next heartbeat is due; None when none is (silent, or one is in
        flight)."""
        if self._in_flight or self.state in _SILENT:
            return None
        if self.state == MemberState.LEAVING and not self.member_id:
            return None
        due = self._retry_at_ms
        if self.state not in _URGENT and not self._ack_pending():
            due = max(due, self._next_heartbeat_ms)
        return max(0, due - now_ms)

    def _ack_pending(self) -> bool:
        return self.state == MemberState.ACKNOWLEDGING

    def build_heartbeat(self, now_ms: int) -> pb.ConsumerGroupHeartbeatRequest:
        """The heartbeat to send now (the caller checked heartbeat_delay_ms() == 0)."""
        self._in_flight = True
        self._in_flight_owned = self.owned
        self._in_flight_leave = self.state == MemberState.LEAVING
        config = self.config
        if self._in_flight_leave:
            return pb.ConsumerGroupHeartbeatRequest(
                group_id=config.group_id, member_id=self.member_id,
                member_epoch=self._leave_epoch, instance_id=config.instance_id)
        # Every field, every time: the coordinator compares and changes only what differs, and
        # a coordinator that just loaded the group (or a lost answer) needs nothing replayed.
        return pb.ConsumerGroupHeartbeatRequest(
            group_id=config.group_id, member_id=self.member_id, member_epoch=self.member_epoch,
            instance_id=config.instance_id, rack_id=config.rack_id,
            rebalance_timeout_ms=config.rebalance_timeout_ms,
            subscribed_topic_names=sorted(self.topics), subscribed_topic_regex=self.pattern,
            subscription_changed=True, server_assignor=config.server_assignor,
            owned_partitions=self._wire_owned())

    def _wire_owned(self) -> list[pb.TopicPartitions]:
        by_topic: dict[str, list[int]] = {}
        for tp in self.owned:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return [pb.TopicPartitions(topic_id=self._ids.get(topic, b""), topic=topic,
                                   partitions=sorted(parts))
                for topic, parts in sorted(by_topic.items())]

    def on_heartbeat_response(self, response: pb.ConsumerGroupHeartbeatResponse,
                              now_ms: int, rng: random.Random) -> None:
        if response.error_code != ErrorCode.NONE:
            self.on_heartbeat_error(response.error_code, response.error_message, now_ms, rng)
            return
        was_leave, self._in_flight = self._in_flight_leave, False
        self._failures = 0
        self._retry_at_ms = 0
        if self.state == MemberState.LEAVING:
            if was_leave:
                self._left()
            return  # an answer to a heartbeat sent before the leave: the leave goes next
        if self.state in _SILENT:
            return  # an answer to a heartbeat sent before the member was fenced or went stale
        self.member_id = response.member_id or self.member_id
        self.member_epoch = response.member_epoch
        if response.heartbeat_interval_ms > 0:
            self.heartbeat_interval_ms = response.heartbeat_interval_ms
        self._next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
        if response.assignment_changed:
            self.target = {}
            for entry in response.assignment:
                topic_id = bytes(entry.topic_id)
                if entry.topic:
                    self.learn_topic_name(topic_id, entry.topic)
                self.target[topic_id] = (self.target.get(topic_id, frozenset())
                                         | frozenset(entry.partitions))
        if self.state == MemberState.PREPARE_LEAVING:
            return
        if self.state == MemberState.ACKNOWLEDGING and self._in_flight_owned != self.owned:
            return  # this answer is to a heartbeat sent before the step finished: ack again
        self._update_reconciling()

    def on_heartbeat_error(self, code: int, message: str, now_ms: int,
                           rng: random.Random) -> None:
        """A heartbeat failed: ``code`` from the response, or the typed error of a transport
        failure (NETWORK_EXCEPTION, REQUEST_TIMED_OUT) or of finding the coordinator."""
        was_leave, self._in_flight = self._in_flight_leave, False
        if self.state == MemberState.LEAVING:
            if was_leave:
                self._left()  # as Kafka: done whatever the answer (the session ends it anyway)
            return
        if self.state in _SILENT:
            return
        error = error_for_code(code, message)
        if code in _FENCED_CODES:
            self._fence()
        elif error.retriable:
            self._failures += 1
            self._retry_at_ms = now_ms + self._backoff.delay_ms(self._failures, rng)
        else:
            self.state = MemberState.FATAL
            self.fatal_error = error

    def _fence(self) -> None:
        self.state = MemberState.FENCED
        self.member_epoch = 0
        self.target = None
        self._lost_pending = True

    def _left(self) -> None:
        if self._stale_after_leave:
            self.state = MemberState.STALE
            self.member_epoch = 0
            self.target = None
            self._lost_pending = True
        else:
            self._clear_membership()

    def _clear_membership(self) -> None:
        """Out of the group (the member id is kept: a rejoin reuses it, as Kafka's does)."""
        self.state = MemberState.UNSUBSCRIBED
        self.member_epoch = 0
        self.target = None
        self._lost_pending = False
        self._failures = 0
        self._retry_at_ms = 0

    def _transition_to_joining(self) -> None:
        self.state = MemberState.JOINING
        self.member_epoch = 0
        self.target = None
        self._failures = 0
        self._retry_at_ms = 0

    # --- reconciliation -------------------------------------------------------------------------

    def learn_topic_name(self, topic_id: bytes, name: str) -> None:
        self._names[topic_id] = name
        self._ids[name] = topic_id

    def unresolved_topic_ids(self) -> set[bytes]:
        """Topic ids of the target whose names are not known yet (look them up in metadata)."""
        return {t for t in self.target or {} if t not in self._names}

    def resolved_target(self) -> frozenset[TopicPartition]:
        return frozenset(TopicPartition(self._names[t], p)
                         for t, parts in (self.target or {}).items() if t in self._names
                         for p in parts)

    def _update_reconciling(self) -> None:
        if self.target is None:
            return
        if self.resolved_target() != self.owned or self.unresolved_topic_ids():
            self.state = MemberState.RECONCILING
        elif self._work is None:
            self.state = MemberState.STABLE

    def take_work(self) -> Work | None:
        """The next step for the application thread, one at a time."""
        if self._work is not None:
            return None
        if self._lost_pending:
            self._work = PartitionsLost(self.owned)
            return self._work
        if self.state != MemberState.RECONCILING:
            return None
        target = self.resolved_target()
        if target == self.owned:
            if not self.unresolved_topic_ids():
                self.state = MemberState.STABLE
            return None
        self._work = Reconciliation(revoked=self.owned - target, assigned=target - self.owned,
                                    member_epoch=self.member_epoch)
        return self._work

    def work_done(self, work: Work, now_ms: int) -> None:
        """The application finished ``work`` (callbacks ran, fetch state updated)."""
        if work is not self._work:
            raise RuntimeError("work_done() for work that was not handed out")
        self._work = None
        if isinstance(work, PartitionsLost):
            self.owned = self.owned - work.lost
            self._lost_pending = False
            if self.state in (MemberState.FENCED, MemberState.STALE):
                if self.subscribed:
                    self._transition_to_joining()
                else:
                    self._clear_membership()
            return
        self.owned = (self.owned - work.revoked) | work.assigned
        if self.state == MemberState.RECONCILING:
            self.state = MemberState.ACKNOWLEDGING
            self._next_heartbeat_ms = now_ms

    def forget_owned(self, partitions: frozenset[TopicPartition]) -> None:
        """The application dropped these itself (unsubscribe, close) after revoking them."""
        self.owned = self.owned - partitions

    def commit_identity(self) -> tuple[str, int] | None:
        """(member id, epoch) to commit with: ("", -1) for a consumer that did not subscribe
        (a simple consumer), None while a subscribed member has no epoch to commit with."""
        if not self.subscribed and self.state == MemberState.UNSUBSCRIBED:
            return "", -1
        if self.member_id and self.member_epoch > 0 and self.state not in _SILENT:
            return self.member_id, self.member_epoch
        return None

    def names_by_id(self) -> Mapping[bytes, str]:
        return dict(self._names)
