"""`tidelog dev`: one combined controller + broker node in the foreground, run as a user runs it.

Starts `python -m tidelog.cli dev` as a subprocess on free ports in a temporary directory, waits
for /readyz, creates a topic, produces and consumes through the CLI (JSON lines parsed), stops it
with SIGTERM (exit 0), and starts it again on the same data dir to check the data survived.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tidelog.local_cluster import free_ports

pytestmark = pytest.mark.integration


def start_dev(base: Path, ports: list[int]) -> subprocess.Popen[bytes]:
    port, controller_port, raft_port, metrics_port = ports
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidelog.cli", "dev", "--dir", str(base), "--port", str(port),
         "--controller-port", str(controller_port), "--raft-port", str(raft_port),
         "--metrics-port", str(metrics_port)],
        stdout=subprocess.DEVNULL, stderr=open(base.parent / "dev.log", "ab"))  # noqa: SIM115
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, (base.parent / "dev.log").read_text()[-2000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=1):
                return proc
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("tidelog dev did not become ready")


def tidelog(port: int, *args: str, stdin: str | None = None) -> str:
    env = dict(os.environ, TIDELOG_BROKERS=f"127.0.0.1:{port}")
    result = subprocess.run([sys.executable, "-m", "tidelog.cli", *args], input=stdin,
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_dev_node_serves_and_keeps_data_across_restarts(tmp_path: Path) -> None:
    base = tmp_path / "dev"
    ports = free_ports(4)
    proc = start_dev(base, ports)
    try:
        tidelog(ports[0], "topic", "create", "events", "-p", "2", "-r", "1")
        tidelog(ports[0], "topic", "produce", "events", "-k", ":", stdin="a:1\nb:2\nc:3\n")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        proc = start_dev(base, ports)  # same data dir: formatted once, reused
        out = tidelog(ports[0], "topic", "consume", "events", "--from-beginning", "-n", "3",
                      "--format", "json", "--timeout-ms", "20000")
        values = sorted(json.loads(line)["value"] for line in out.splitlines())
        assert values == ["1", "2", "3"]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
