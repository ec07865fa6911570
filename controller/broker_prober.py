"""Fast fencing of dead brokers: the active controller's probes (docs/decisions.md "Failure
handling without waiting out a session").

When a broker's metadata stream to the active controller ends, when another broker's heartbeat
reports it unreachable (a follower's fetch connection to it failed), once for every unfenced
broker when a controller becomes active, and on every periodic tick for brokers silent for
``broker_probe_after_ms``, :class:`BrokerProber` probes the broker with a TCP connect to each
registered listener, outside the logic's lock (at most PROBES_IN_FLIGHT_MAX at once, one per
broker). When every connect is refused (nothing listens there any more) it asks the logic to
fence the broker (``handle_broker_unreachable``) and commits the fencing, in parts when the
broker is in more ISRs than one batch holds, FENCE_PARTS_IN_FLIGHT parts in flight.

The runtime (controller/runtime.py) owns the logic, its lock and the commits; the prober sees
them through :class:`ProberHost`, and is asked to :meth:`BrokerProber.start` probes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tidelog.controller.clock import monotonic_ms
from tidelog.controller.control import ControllerLogic, ControllerResult
from tidelog.controller.managers.cluster_control import ProbeTarget
from tidelog.controller.raft import ProposeError
from tidelog.v1 import metadata_pb2

__all__ = [
    "FENCE_PARTS_IN_FLIGHT",
    "PROBES_IN_FLIGHT_MAX",
    "UNREACHABLE_HINTS_MAX",
    "BrokerProber",
    "ProberHost",
    "all_refused",
]

log = logging.getLogger("tidelog.controller")

#: A probe started on a hint looks again this long after a listener accepted (see _probe).
PROBE_RECHECK_S = 0.2
#: Brokers one heartbeat may report unreachable that are read (more are ignored).
UNREACHABLE_HINTS_MAX = 16
#: A probe's connect (or name lookup) gives up after this: no answer is no evidence.
PROBE_CONNECT_TIMEOUT_S = 1.0
#: Probes in flight at once, over all brokers (each is one connect at a time).
PROBES_IN_FLIGHT_MAX = 32
#: Parts one probe may fence a broker in (each at most FENCE_CHANGES_PER_BATCH_MAX partition
#: changes): enough for 1.5 million partitions; past it the session expiry finishes the job.
PROBE_FENCE_PARTS_MAX = 100
#: Fencing parts proposed and not yet committed, at most: the next part is built on the
#: speculative image while the quorum commits and applies the one before, so the active
#: controller's work on part k+1 overlaps the followers' replay of part k.
FENCE_PARTS_IN_FLIGHT = 3


@dataclass(frozen=True)
class ProberHost:
    """What the prober needs of the runtime, and nothing else."""

    node_id: int
    logic: ControllerLogic
    #: Guards ``logic`` between the event loop and the Raft thread; never held across an await.
    lock: threading.RLock
    #: The leader epoch this controller is active in, or None while it is not active.
    active_epoch: Callable[[], int | None]
    #: Propose records as one batch in the epoch: a future of the committed base offset.
    start_commit: Callable[[list[metadata_pb2.MetadataRecord], int], asyncio.Future[int]]
    #: A proposal of the epoch failed: resign, and activate again on the committed image.
    resign_after_failure: Callable[[int, str], None]
    #: broker_probe_after_ms (0: probes off).
    probe_after_ms: int


class BrokerProber:
    """The active controller's probes of brokers that may be dead (see the module doc)."""

    def __init__(self, host: ProberHost) -> None:
        self._host = host
        self._probes: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        return len(self._probes)

    def start(self, hinted: tuple[int, ...] = ()) -> None:
        """Probe the brokers that are due (silent, or ``hinted``); on the active controller
        only."""
        h = self._host
        room = PROBES_IN_FLIGHT_MAX - len(self._probes)
        epoch = h.active_epoch()
        if epoch is None or h.probe_after_ms <= 0 or room <= 0:
            return
        with h.lock:
            targets = h.logic.start_broker_probes(
                monotonic_ms(), silent_ms=h.probe_after_ms, hinted=hinted, limit=room)
        for target in targets:
            task = asyncio.ensure_future(self._probe(target, epoch))
            self._probes.add(task)
            task.add_done_callback(self._probes.discard)

    def cancel(self) -> None:
        """Stop every probe in flight (the controller is stopping)."""
        for task in self._probes:
            task.cancel()

    def on_unreachable_reported(self, reporter: int, broker_ids: Sequence[int]) -> None:
        """``reporter``'s heartbeat says it could not reach these brokers (a follower's fetch
        connection to its leader failed): probe them now. A hint only, as a stream's end is:
        the probe's own refused connects are the evidence, so a wrong report costs a probe
        (spaced per broker, bounded in number), never a fencing."""
        hinted = tuple(b for b in broker_ids[:UNREACHABLE_HINTS_MAX] if b != reporter)
        if hinted:
            self.start(hinted=hinted)

    def _still_active(self, leader_epoch: int) -> bool:
        return self._host.active_epoch() == leader_epoch

    async def _probe(self, target: ProbeTarget, leader_epoch: int) -> None:
        """Connect to every listener of the broker; if all refuse, fence it (unless it was
        heard from since the probe started, or this controller is no longer the same active)."""
        h = self._host
        try:
            refused = await all_refused(target.endpoints)
            if not refused and target.hinted:
                # A dying process closes its sockets one by one: its metadata stream's end (or
                # a follower's failed fetch) can reach us before its listeners are closed
                # (seen: a connect accepted 1 ms after the stream ended, refused 2 ms later,
                # and the next probe came only with the 2.5 s of silence). Once more, later.
                await asyncio.sleep(PROBE_RECHECK_S)
                refused = await all_refused(target.endpoints)
            if not refused or not self._still_active(leader_epoch):
                return
            with h.lock:
                now = monotonic_ms()
                last_contact = h.logic.heartbeats.last_contact_ms(target.broker_id)
                result = h.logic.handle_broker_unreachable(
                    target.broker_id, target.broker_epoch, target.started_ms, now)
            if not result.records:
                return
            silent_ms = now - last_contact if last_contact is not None else -1
            log.warning(
                "controller %d fences broker %d (epoch %d) before its session expires: every "
                "listener (%s) refused a connection; last heard from %d ms ago",
                h.node_id, target.broker_id, target.broker_epoch,
                ", ".join(f"{host}:{port}" for host, port in target.endpoints), silent_ms)
            await self._fence_in_parts(target, result, leader_epoch)
        except Exception:
            log.exception("controller %d: probe of broker %d failed", h.node_id,
                          target.broker_id)
        finally:
            with h.lock:
                h.logic.heartbeats.end_probe(target.broker_id, target.started_ms)

    async def _fence_in_parts(self, target: ProbeTarget, first: ControllerResult[None],
                              leader_epoch: int) -> None:
        """Commit the first part of a fencing, then the rest: a broker in more ISRs than one
        batch holds is fenced in parts (ClusterControlManager.fence_records), on the same
        evidence. Up to FENCE_PARTS_IN_FLIGHT parts are in flight: each next one is made from
        the speculative image, which has the parts before it."""
        h = self._host
        started = time.monotonic()
        in_flight: collections.deque[asyncio.Future[int]] = collections.deque()
        parts, changes = 1, len(first.records)
        try:
            in_flight.append(h.start_commit(list(first.records), leader_epoch))
            for _ in range(PROBE_FENCE_PARTS_MAX):
                if len(in_flight) >= FENCE_PARTS_IN_FLIGHT:
                    await in_flight.popleft()
                if not self._still_active(leader_epoch):
                    return
                with h.lock:
                    result = h.logic.handle_broker_unreachable(
                        target.broker_id, target.broker_epoch, target.started_ms, monotonic_ms())
                if not result.records:
                    break
                in_flight.append(h.start_commit(list(result.records), leader_epoch))
                parts, changes = parts + 1, changes + len(result.records)
            while in_flight:
                await in_flight.popleft()
            log.info("controller %d fenced broker %d in %d parts (%d records) in %.0f ms",
                     h.node_id, target.broker_id, parts, changes,
                     (time.monotonic() - started) * 1000)
        except (TimeoutError, ProposeError, ValueError) as e:
            # ValueError: the quorum refused the batch (larger than batch_bytes_max); the
            # speculative image already has it, so it is rebuilt by resigning too.
            h.resign_after_failure(leader_epoch, f"fencing proposal failed: {e}")
        finally:
            # Left early (no longer the same active controller, a part failed, or stopping):
            # later parts would fail with the first that did (their records expect its
            # epochs), so they are dropped, and a finished one's error is taken, not leaked.
            for part in in_flight:
                if not part.done():
                    part.cancel()
                elif not part.cancelled():
                    part.exception()


async def all_refused(endpoints: tuple[tuple[str, int], ...]) -> bool:
    """Whether every address of every endpoint refused a TCP connect (ECONNREFUSED: nothing
    listens there). Any other outcome (accepted, a timeout, unreachable, a failed lookup) is no
    evidence of death, so False; stops at the first such address."""
    for host, port in endpoints:
        if not await _refused(host, port):
            return False
    return bool(endpoints)


async def _refused(host: str, port: int) -> bool:
    loop = asyncio.get_running_loop()
    try:
        addresses = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), PROBE_CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError):
        return False
    for family, kind, proto, _, address in addresses:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, address), PROBE_CONNECT_TIMEOUT_S)
        except ConnectionRefusedError:
            continue
        except (OSError, TimeoutError):
            return False
        finally:
            sock.close()
        return False  # accepted: something listens
    return bool(addresses)
