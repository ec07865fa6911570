"""The `tidelog cluster` and `tidelog storage` commands, run as a user runs them.

Each command is a subprocess of the installed CLI against a real local controller quorum in a
temporary directory; JSON output is parsed. Checks that nodes can be killed, paused and restarted
by name, that the quorum view follows a failover, and that mistakes end in one error line with a
non-zero exit and no traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def tidelog(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "tidelog.cli", *args], capture_output=True,
                            text=True, timeout=120)
    if ok:
        assert result.returncode == 0, result.stderr
    return result


def quorum(cluster_dir: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(tidelog("cluster", "quorum", "--dir", str(cluster_dir), "--format",
                              "json").stdout)


def test_cluster_lifecycle_through_the_cli(tmp_path: Path) -> None:
    d = tmp_path / "c"
    try:
        tidelog("cluster", "up", "--controllers", "3", "--brokers", "0", "--dir", str(d))
        status = json.loads(tidelog("cluster", "status", "--dir", str(d), "--format",
                                    "json").stdout)
        assert [n["name"] for n in status] == ["controller-1", "controller-2", "controller-3"]
        assert all(n["running"] and n["ready"] for n in status)
        q = quorum(d)
        leader = q["leader_id"]
        assert leader in (1, 2, 3) and len(q["voters"]) == 3
        tidelog("cluster", "stop-node", f"controller-{leader}", "--signal", "KILL", "--dir", str(d))
        deadline = time.monotonic() + 20
        while quorum(d)["leader_id"] in (leader, -1):
            assert time.monotonic() < deadline, "no new leader after kill -9"
            time.sleep(0.2)
        tidelog("cluster", "start-node", f"controller-{leader}", "--dir", str(d))
        tidelog("cluster", "stop-node", "controller-2", "--signal", "STOP", "--dir", str(d))
        tidelog("cluster", "start-node", "controller-2", "--dir", str(d))  # resumes it
        status = json.loads(tidelog("cluster", "status", "--dir", str(d), "--format",
                                    "json").stdout)
        assert all(n["running"] for n in status)
    finally:
        tidelog("cluster", "down", "--dir", str(d), "--purge", ok=False)
    assert not d.exists()


@pytest.mark.parametrize("args, message", [
    (("cluster", "status", "--dir", "/nonexistent/tidelog"), "no local cluster in"),
    (("cluster", "quorum", "--controller", "127.0.0.1:1", "--wait", "0.5"),
     "no controller answered"),
    (("server", "--config", "/nonexistent/node.toml"), "cannot read config file"),
    (("storage", "format", "--dir", "/tmp/x"), "--cluster-id"),
])
def test_mistakes_are_one_line_without_traceback(args: tuple[str, ...], message: str) -> None:
    result = tidelog(*args, ok=False)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_format_refuses_another_cluster(tmp_path: Path) -> None:
    d = str(tmp_path / "data")
    tidelog("storage", "format", "--dir", d, "--node-id", "1", "--cluster-id", "aaaa")
    again = tidelog("storage", "format", "--dir", d, "--node-id", "1", "--cluster-id", "bbbb",
                    ok=False)
    assert again.returncode != 0 and "Traceback" not in again.stderr
    assert "aaaa" in again.stderr and "bbbb" in again.stderr
