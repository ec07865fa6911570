"""Broker sessions: the active controller's soft state about heartbeats (Kafka's
BrokerHeartbeatManager).

Only the active controller keeps it, and only decisions made from it (fence, unfence, controlled
shutdown) become records. It is a plain object driven by ``now_ms`` arguments: no clock, no timer.
``now_ms`` must come from a monotonic clock (the runtime passes ``time.monotonic``'s): sessions
are durations, and on the wall clock a step forward fenced every live broker while a step back
kept a dead one unfenced for as long as the step. Nothing here is stored in records.
A new active controller starts every registered broker with a fresh session (``reset``), as Kafka
does, so a failover never fences a healthy broker just because its heartbeats went elsewhere.

Probes (fast fencing of dead brokers, docs/decisions.md "Failure handling without waiting out a
session"): the runtime TCP-connects to a silent broker's listeners. The tracker only bounds them,
one in flight per broker and starts at least ``PROBE_INTERVAL_MS`` apart, and remembers when the
one in flight started: a refused probe counts as evidence only if no heartbeat arrived since.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tidelog.invariants import InvariantViolation

__all__ = ["PROBE_INTERVAL_MS", "BrokerHeartbeatTracker"]

#: Probes of one broker start at least this far apart (a live but stalled broker accepts every
#: connect, so it is probed about twice a second until it heartbeats or its session expires).
PROBE_INTERVAL_MS = 500


@dataclass(slots=True)
class _Session:
    last_contact_ms: int
    #: Last offset of the batch that put the broker into controlled shutdown: the broker may shut
    #: down once it has applied it (it then knows it leads nothing). None when not shutting down.
    controlled_shutdown_offset: int | None = None
    #: When the probe in flight started; None when no probe is in flight.
    probe_started_ms: int | None = None
    #: When the last probe started (None: never probed in this session).
    last_probe_ms: int | None = None


class BrokerHeartbeatTracker:
    """Last contact time per broker, and the session rule built on it."""

    def __init__(self, session_timeout_ms: int) -> None:
        if session_timeout_ms <= 0:
            raise InvariantViolation(f"session timeout {session_timeout_ms} ms is not positive")
        self._session_timeout_ms = session_timeout_ms
        self._sessions: dict[int, _Session] = {}

    @property
    def session_timeout_ms(self) -> int:
        return self._session_timeout_ms

    def reset(self, broker_ids: Iterable[int], now_ms: int) -> None:
        """Forget everything, then give each broker a fresh session starting at ``now_ms``."""
        self._sessions = {broker_id: _Session(now_ms) for broker_id in broker_ids}

    def clear(self) -> None:
        self._sessions.clear()

    def touch(self, broker_id: int, now_ms: int) -> None:
        """A heartbeat (or registration) from ``broker_id`` arrived at ``now_ms``."""
        session = self._sessions.get(broker_id)
        if session is None:
            self._sessions[broker_id] = _Session(now_ms)
        else:
            session.last_contact_ms = max(session.last_contact_ms, now_ms)

    def remove(self, broker_id: int) -> None:
        """End the broker's session (it shut down cleanly, or a new incarnation replaced it)."""
        self._sessions.pop(broker_id, None)

    def is_tracked(self, broker_id: int) -> bool:
        return broker_id in self._sessions

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        """Whether the broker was heard from within the session timeout."""
        session = self._sessions.get(broker_id)
        return session is not None and now_ms - session.last_contact_ms <= self._session_timeout_ms

    def stale_brokers(self, broker_ids: Iterable[int], now_ms: int) -> list[int]:
        """Of ``broker_ids``, those with an expired session, oldest contact first."""
        stale = [
            (self._sessions[b].last_contact_ms, b)
            for b in broker_ids
            if b in self._sessions and not self.has_valid_session(b, now_ms)
        ]
        return [broker_id for _, broker_id in sorted(stale)]

    def last_contact_ms(self, broker_id: int) -> int | None:
        """When the broker was last heard from (None when it has no session here)."""
        session = self._sessions.get(broker_id)
        return session.last_contact_ms if session is not None else None

    def silent_brokers(self, broker_ids: Iterable[int], now_ms: int, silent_ms: int) -> list[int]:
        """Of ``broker_ids``, those not heard from for more than ``silent_ms``, oldest first."""
        silent = [
            (self._sessions[b].last_contact_ms, b)
            for b in broker_ids
            if b in self._sessions and now_ms - self._sessions[b].last_contact_ms > silent_ms
        ]
        return [broker_id for _, broker_id in sorted(silent)]

    def start_probe(self, broker_id: int, now_ms: int) -> bool:
        """Start a probe of ``broker_id`` at ``now_ms``, unless it has no session, one is in
        flight, or the last one started less than PROBE_INTERVAL_MS ago."""
        session = self._sessions.get(broker_id)
        if session is None or session.probe_started_ms is not None:
            return False
        if session.last_probe_ms is not None and now_ms - session.last_probe_ms < PROBE_INTERVAL_MS:
            return False
        session.probe_started_ms = session.last_probe_ms = now_ms
        return True

    def probe_started_ms(self, broker_id: int) -> int | None:
        """When the probe in flight started (None when there is none)."""
        session = self._sessions.get(broker_id)
        return session.probe_started_ms if session is not None else None

    def end_probe(self, broker_id: int, started_ms: int) -> None:
        """The probe started at ``started_ms`` is over (a no-op if the session was reset or a
        newer probe is the one in flight)."""
        session = self._sessions.get(broker_id)
        if session is not None and session.probe_started_ms == started_ms:
            session.probe_started_ms = None

    def set_controlled_shutdown_offset(self, broker_id: int, offset: int) -> None:
        session = self._sessions.get(broker_id)
        assert session is not None, "a broker heartbeats before it asks to shut down"
        session.controlled_shutdown_offset = offset

    def controlled_shutdown_offset(self, broker_id: int) -> int | None:
        session = self._sessions.get(broker_id)
        return session.controlled_shutdown_offset if session is not None else None
