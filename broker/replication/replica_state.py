"""What a partition leader knows about one follower: Kafka's ``ReplicaState``.

The leader learns a follower's LEO only from its fetch offset (a follower fetches from its LEO,
and the divergence check proved its log equals the leader's below it). "Caught up" is Kafka's
time-based rule: a follower is caught up at time t when its fetch reached the leader's LEO at t,
or when it reached the leader's LEO *as of its previous fetch* (then it was caught up at the time
of that previous fetch). A follower whose last caught-up time is older than
``replica.lag.time.max.ms`` falls out of the ISR -- unless it sits exactly at the leader's LEO
(an idle partition keeps its followers).
"""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.invariants import InvariantViolation

__all__ = ["UNKNOWN_OFFSET", "ReplicaState"]

#: A follower's LEO before its first fetch in this leader epoch.
UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class ReplicaState:
    """One follower, as the leader sees it. ``None`` times mean "never" (Kafka uses 0, which
    breaks with a simulated clock starting at 0)."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int | None = None
    last_caught_up_time_ms: int | None = None
    #: The broker epoch its last accepted fetch carried (KIP-903; -1 before any).
    broker_epoch: int = -1

    @classmethod
    def fresh(cls, *, in_isr: bool, now_ms: int) -> ReplicaState:
        """State at the start of a leader epoch. An ISR member gets a full lag period to fetch
        before it can be shrunk out; others must earn their place (Kafka's resetReplicaState)."""
        return cls(last_caught_up_time_ms=now_ms if in_isr else None)

    def on_fetch(self, *, fetch_offset: int, leader_log_end_offset: int, now_ms: int,
                 broker_epoch: int = -1) -> None:
        """Kafka's Replica.updateFetchState for a fetch that passed every check."""
        if not 0 <= fetch_offset <= leader_log_end_offset:
            raise InvariantViolation(
                f"fetch offset {fetch_offset} outside 0..leader LEO {leader_log_end_offset}")
        self.broker_epoch = broker_epoch
        if fetch_offset >= leader_log_end_offset:
            self.last_caught_up_time_ms = _latest(self.last_caught_up_time_ms, now_ms)
        elif (fetch_offset >= self.last_fetch_leader_log_end_offset
              and self.last_fetch_time_ms is not None):
            # It has everything the leader had when it last fetched: caught up as of then.
            self.last_caught_up_time_ms = _latest(self.last_caught_up_time_ms,
                                                  self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = max(leader_log_end_offset,
                                                    self.last_fetch_leader_log_end_offset)
        self.last_fetch_time_ms = now_ms

    def on_repeated_fetch(self, at_ms: int) -> None:
        """The follower fetched again at ``at_ms`` from its last fetch offset, and the leader's
        LEO had not moved since that fetch: what :meth:`on_fetch` would record for it (an
        incremental fetch session leaves such a partition out of the request; see
        broker.replication.fetch_session). A no-op before the first fetch or for an older time."""
        last = self.last_fetch_time_ms
        if last is None or at_ms <= last:
            return
        if self.log_end_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = _latest(self.last_caught_up_time_ms, at_ms)
        self.last_fetch_time_ms = at_ms

    def is_caught_up(
        self, *, leader_log_end_offset: int, now_ms: int, replica_lag_time_max_ms: int
    ) -> bool:
        """Kafka's ReplicaState.isCaughtUp."""
        if self.log_end_offset == leader_log_end_offset:
            return True
        caught_up = self.last_caught_up_time_ms
        return caught_up is not None and now_ms - caught_up <= replica_lag_time_max_ms


def _latest(current: int | None, candidate: int) -> int:
    return candidate if current is None else max(current, candidate)
