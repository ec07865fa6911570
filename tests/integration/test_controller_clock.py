"""Broker sessions on the controller are measured with a monotonic clock: stepping the
controller's wall clock neither fences live brokers nor keeps a dead one unfenced.

How: we cannot step the machine's clock, so the controller process alone gets a stepped wall
clock: tests/integration/clock_step/sitecustomize.py (first on its PYTHONPATH) makes its
``time.time()`` the real time plus an offset the test writes to a file; ``time.monotonic()`` is
left alone. A real cluster (1 controller, 2 brokers; tidelog.local_cluster via the harness) with
a 3 s broker session timeout, then:
- the wall clock steps forward one hour: with sessions on the wall clock every broker's last
  heartbeat looked an hour old and both were fenced at the next check; now neither is;
- the wall clock steps back one hour and a broker is paused (SIGSTOP): with sessions on the wall
  clock its last heartbeat lay an hour in the future and it stayed unfenced for that hour; now
  it is fenced within the session timeout.
The other broker answers the Admin's DescribeCluster throughout. Waits are bounded.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_harness import ClusterHarness

from tidelog.client import Admin

pytestmark = pytest.mark.integration

HOOK_DIR = Path(__file__).parent / "clock_step"
SESSION_MS = 3_000
FAST = {"controller": {"broker_session_timeout_ms": SESSION_MS, "fence_check_interval_ms": 100}}
STEP_S = 3_600
WATCH_S = 2 * SESSION_MS / 1000
FENCE_WAIT_S = SESSION_MS / 1000 + 10


@pytest.fixture
def offset_file(tmp_path: Path) -> Path:
    path = tmp_path / "clock-offset"
    path.write_text("0")
    return path


@pytest.fixture
def cluster(tmp_path: Path, offset_file: Path) -> Iterator[ClusterHarness]:
    hook = {"PYTHONPATH": os.pathsep.join(filter(None, [str(HOOK_DIR),
                                                        os.environ.get("PYTHONPATH")])),
            "TIDELOG_TEST_CLOCK_OFFSET_FILE": str(offset_file)}
    with ClusterHarness.started(tmp_path / "cluster", controllers=1, brokers=2, overrides=FAST,
                                env={"controller-1": hook}) as harness:
        harness.start_brokers()
        yield harness


def fenced(admin: Admin) -> dict[int, bool]:
    return {b.broker_id: b.fenced for b in admin.describe_cluster().brokers}


def test_wall_clock_steps_do_not_drive_broker_sessions(cluster: ClusterHarness,
                                                       offset_file: Path) -> None:
    watcher, victim = cluster.broker_names
    spec = cluster.node(watcher)
    with Admin(f"127.0.0.1:{spec.broker_port}", request_timeout_ms=5_000) as admin:
        deadline = time.monotonic() + FENCE_WAIT_S
        while fenced(admin) != {b.node_id: False for b in cluster.local.brokers()}:
            assert time.monotonic() < deadline, f"brokers not unfenced: {fenced(admin)}"
            time.sleep(0.1)

        offset_file.write_text(str(STEP_S))  # forward: sessions would look an hour old
        until = time.monotonic() + WATCH_S
        while time.monotonic() < until:
            assert not any(fenced(admin).values()), "a wall-clock step fenced a live broker"
            time.sleep(0.05)

        offset_file.write_text(str(-STEP_S))  # back: sessions would look fresh for an hour
        time.sleep(0.5)  # heartbeats under the stepped clock reach the controller
        victim_id = cluster.node(victim).node_id
        cluster.pause(victim)
        try:
            deadline = time.monotonic() + FENCE_WAIT_S
            while not fenced(admin).get(victim_id):
                assert time.monotonic() < deadline, \
                    "a paused broker stayed unfenced after the wall clock stepped back"
                time.sleep(0.1)
            assert not fenced(admin)[spec.node_id]
        finally:
            cluster.resume(victim)
