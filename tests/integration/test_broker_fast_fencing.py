"""Failure handling without waiting out a session, against real processes: 3 controllers and 3
brokers with the default controller settings (broker_session_timeout_ms = 9000,
broker_probe_after_ms = 2500).

What it checks:
- kill -9 of a broker: its leaderships move and it is fenced well before the 9 s session
  timeout. Its metadata stream to the active controller ends, the controller's TCP connects to
  its listeners are refused, and it is fenced at once (the figure is printed; the issue's target
  is 3 s, asserted here as 5 s to stay robust on a loaded machine);
- SIGSTOP of another broker for 4 s (past broker_probe_after_ms, within the session): its
  kernel still accepts the controller's connects, so it is never fenced, neither during the
  pause nor after SIGCONT (no flapping: the same broker epoch, unfenced throughout).

A broker whose process lives but sends no heartbeats is still fenced at session expiry, not
before: tests/integration/test_broker_control_plane.py
(test_a_silent_broker_is_fenced_and_loses_leadership, with a listener that accepts); one whose
listeners are gone is fenced fast there too
(test_a_dead_broker_is_fenced_before_its_session_expires).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from cluster_harness import ClusterHarness

from tidelog.client import Admin, NewTopic
from tidelog.errors import TidelogError

pytestmark = pytest.mark.integration

T = TypeVar("T")
WAIT_S = 30.0
POLL_S = 0.02
SESSION_TIMEOUT_S = 9.0  # the default broker_session_timeout_ms
MOVED_WITHIN_S = 5.0
PAUSE_S = 4.0
TOPIC = "fast-fence"
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("fast-fence") / "cluster"
    with ClusterHarness.started(base, controllers=3, brokers=3) as harness:
        harness.start_brokers()
        yield harness


def eventually(check: Callable[[], T], *, what: str, timeout_s: float = WAIT_S) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except (AssertionError, TidelogError):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}") from None
            time.sleep(0.05)


def address(cluster: ClusterHarness, broker_id: int) -> str:
    spec = next(s for s in cluster.local.brokers() if s.node_id == broker_id)
    return f"{spec.host}:{spec.broker_port}"


def name_of(cluster: ClusterHarness, broker_id: int) -> str:
    return next(s.name for s in cluster.local.brokers() if s.node_id == broker_id)


def fenced(admin: Admin) -> dict[int, bool]:
    return {b.broker_id: b.fenced for b in admin.describe_cluster(timeout_ms=2_000).brokers}


def leaders(admin: Admin) -> list[int]:
    described = admin.describe_topics([TOPIC], include_offsets=False, timeout_ms=2_000)
    return [p.leader for p in described[TOPIC].partitions]


def test_kill_moves_leaderships_fast_and_a_paused_broker_is_not_fenced(
        cluster: ClusterHarness) -> None:
    ids = sorted(s.node_id for s in cluster.local.brokers())
    with Admin(cluster.bootstrap) as admin:
        eventually(lambda: assert_unfenced(fenced(admin), ids), what="three unfenced brokers")
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)]).all()
        led = eventually(lambda: all_led(leaders(admin)), what="a leader for every partition")
    victim, paused, survivor = ids[0], ids[1], ids[2]
    assert led.count(victim) >= 1, f"broker {victim} leads nothing: {led}"

    with Admin(address(cluster, survivor)) as admin:
        # kill -9: leaderships move and the broker is fenced long before its session ends.
        killed_at = time.monotonic()
        cluster.kill(name_of(cluster, victim))
        moved_s = fenced_s = None
        while moved_s is None or fenced_s is None:
            elapsed = time.monotonic() - killed_at
            assert elapsed < WAIT_S, "the killed broker's leaderships never moved"
            try:
                now_led, now_fenced = leaders(admin), fenced(admin)
            except TidelogError:
                continue
            if moved_s is None and victim not in now_led and all(b >= 0 for b in now_led):
                moved_s = time.monotonic() - killed_at
            if fenced_s is None and now_fenced.get(victim):
                fenced_s = time.monotonic() - killed_at
            time.sleep(POLL_S)
        print(f"kill -9 of broker {victim}: leaderships moved after {moved_s:.2f} s, fenced "
              f"after {fenced_s:.2f} s (session timeout {SESSION_TIMEOUT_S:.0f} s)")
        assert moved_s < MOVED_WITHIN_S, f"leaderships moved only after {moved_s:.2f} s"
        assert fenced_s < MOVED_WITHIN_S, f"fenced only after {fenced_s:.2f} s"

        # SIGSTOP past the probe threshold, within the session: never fenced.
        cluster.pause(name_of(cluster, paused))
        try:
            pause_end = time.monotonic() + PAUSE_S
            while time.monotonic() < pause_end:
                with_fence = fenced(admin)
                assert not with_fence[paused], f"paused broker {paused} was fenced"
                time.sleep(0.1)
        finally:
            cluster.resume(name_of(cluster, paused))
        # After SIGCONT: it stays unfenced (no flapping), at the same broker epoch.
        steady_end = time.monotonic() + 3.0
        while time.monotonic() < steady_end:
            assert not fenced(admin)[paused], f"broker {paused} was fenced after its pause"
            time.sleep(0.1)
    fence_lines = [line for line in controller_logs(cluster)
                   if "fences broker" in line and "before its session expires" in line]
    assert any(f"broker {victim} " in line for line in fence_lines), fence_lines
    assert not any(f"broker {paused} " in line for line in fence_lines), fence_lines


def assert_unfenced(state: dict[int, bool], ids: list[int]) -> None:
    assert sorted(b for b, f in state.items() if not f) == ids


def all_led(led: list[int]) -> list[int]:
    assert len(led) == PARTITIONS and all(b >= 0 for b in led), led
    return led


def controller_logs(cluster: ClusterHarness) -> list[str]:
    lines: list[str] = []
    for name in cluster.controller_names:
        path = cluster.local.log_path(name)
        if path.exists():
            lines += path.read_text(errors="replace").splitlines()
    return lines
