"""Fast fencing of dead brokers: the probe's evidence rule and its bounds (no timing asserted).

The decisions (which brokers are probed, when a refusal fences) are in the golden scenario
testdata/controller/fast_fencing.txt; here: the runtime's connect check on real sockets, the
tracker's probe bookkeeping, and the config key.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from tidelog.config import parse_config
from tidelog.controller.broker_prober import all_refused
from tidelog.controller.managers.broker_heartbeats import PROBE_INTERVAL_MS, BrokerHeartbeatTracker
from tidelog.errors import InvalidConfigError


def _closed_port() -> int:
    """A port nothing listens on (bound, then released; nobody takes it within the test)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_refused_only_when_every_listener_refuses() -> None:
    async def scenario() -> None:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        listening = server.sockets[0].getsockname()[1]
        closed = _closed_port()
        try:
            assert await all_refused((("127.0.0.1", closed),))
            assert await all_refused((("127.0.0.1", closed), ("127.0.0.1", _closed_port())))
            # One listener still accepts: the process lives (stalled, or one listener down).
            assert not await all_refused((("127.0.0.1", listening),))
            assert not await all_refused((("127.0.0.1", closed), ("127.0.0.1", listening)))
            assert not await all_refused((("127.0.0.1", listening), ("127.0.0.1", closed)))
            # A name that does not resolve, or nothing to probe: no evidence.
            assert not await all_refused((("no-such-host.invalid", closed),))
            assert not await all_refused(())
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_a_stopped_process_still_accepts_connects() -> None:
    """A listening socket whose owner never calls accept (SIGSTOP) is no evidence: the kernel
    completes the handshake into the backlog."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        assert not asyncio.run(all_refused((("127.0.0.1", port),)))


def test_probe_bookkeeping() -> None:
    tracker = BrokerHeartbeatTracker(9000)
    assert not tracker.start_probe(1, 0), "no session, no probe"
    tracker.touch(1, 0)
    assert tracker.start_probe(1, 100)
    assert tracker.probe_started_ms(1) == 100
    assert not tracker.start_probe(1, 100 + PROBE_INTERVAL_MS), "one in flight per broker"
    tracker.end_probe(1, 99)  # not the probe in flight: ignored
    assert tracker.probe_started_ms(1) == 100
    tracker.end_probe(1, 100)
    assert tracker.probe_started_ms(1) is None
    assert not tracker.start_probe(1, 100 + PROBE_INTERVAL_MS - 1), "spaced"
    assert tracker.start_probe(1, 100 + PROBE_INTERVAL_MS)
    tracker.reset([1], 5000)  # a new active controller: fresh sessions, no probes
    assert tracker.probe_started_ms(1) is None and tracker.last_contact_ms(1) == 5000
    assert tracker.silent_brokers([1, 2], 7500, 2500) == []
    assert tracker.silent_brokers([1, 2], 7501, 2500) == [1]


def _config(extra: str) -> str:
    return f"""
node_id = 1
roles = ["controller"]
data_dir = "/tmp/x"
[[controller.voters]]
id = 1
host = "127.0.0.1"
[controller]
{extra}
"""


def test_config_key() -> None:
    assert parse_config(_config("")).controller.broker_probe_after_ms == 2500
    assert parse_config(_config("broker_probe_after_ms = 0")).controller.broker_probe_after_ms == 0
    with pytest.raises(InvalidConfigError, match="broker_probe_after_ms"):
        parse_config(_config("broker_probe_after_ms = -1"))
