"""A controller whose disk fills up stops cleanly, with one line saying why; never a SIGBUS.

Three real controllers (`tidelog server`, laid out by LocalCluster); one of them keeps its Raft
directory on a small tmpfs mounted for the test, filled up but for a little space once the
controller runs. Metadata is then written (brokers registered, topics created, as
bench.controller does) until that controller's journal must grow: posix_fallocate fails with
ENOSPC. Checked: the process exits with status 1 (not killed by a signal: pysyncobj's mmap
journal died of SIGBUS there), its log has the journal line naming the file and "No space left
on device" and the node's last line, and the two others keep committing.

Mounting needs root (CAP_SYS_ADMIN); elsewhere the test skips saying so. The tmpfs is unmounted
and every process stopped in the fixture's finally.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.controller import Quorum, heartbeat_forever, register_brokers, topic
from tidelog.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

#: The tmpfs: room for the journal's first allocation (1 MiB) and its state file, not its next.
TMPFS_BYTES = 4 * 1024 * 1024
#: Left free once the controller runs: less than one growth step of the journal.
FREE_LEFT_BYTES = 256 * 1024
VICTIM = "controller-3"
WAIT_S = 60.0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES},mode=0700", "tmpfs",
         str(mount_point)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _wait_ready(cluster: LocalCluster, name: str, process: subprocess.Popen[bytes]) -> None:
    """Its /readyz, read here: LocalCluster's own check would reap our child (waitpid) and
    lose its exit status."""
    spec = cluster.nodes[name]
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(OSError):
            url = f"http://{spec.host}:{spec.metrics_port}/readyz"
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        time.sleep(0.1)
    raise AssertionError(f"{name} not ready: {cluster.log_tail(name)}")


def _fill(mount_point: Path) -> None:
    stat = os.statvfs(mount_point)
    free = stat.f_bavail * stat.f_frsize
    fd = os.open(mount_point / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.posix_fallocate(fd, 0, max(free - FREE_LEFT_BYTES, 0))
    finally:
        os.close(fd)


async def _fill_the_journal(cluster: LocalCluster, victim: subprocess.Popen[bytes],
                            ) -> tuple[int, bool]:
    """Registers three brokers (heartbeating them), creates 1,000-partition topics until the
    victim exits, then one more topic: (topics created, whether the last one was)."""
    quorum = Quorum(cluster.controller_addresses, cluster.secret_path.read_text().strip())
    epochs, listeners = await register_brokers(quorum, cluster.cluster_id, 3)
    beats = asyncio.ensure_future(heartbeat_forever(quorum, epochs))
    try:
        await asyncio.sleep(1.0)  # the brokers unfence: RF=3 needs all three
        deadline = time.monotonic() + WAIT_S
        created = 0
        while victim.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                response = await quorum.call(
                    "CreateTopics", topic(f"fill-{uuid.uuid4().hex}", 1000), deadline_s=5)
                created += response.error_code == 0 and response.topics[0].error_code == 0
        # The two others still form a majority and commit.
        response = await quorum.call("CreateTopics", topic("after-the-full-disk", 1),
                                     deadline_s=WAIT_S / 2)
        return created, response.error_code == 0 and response.topics[0].error_code == 0
    finally:
        beats.cancel()
        for listener in listeners:
            listener.close()


def test_a_full_disk_stops_the_controller_with_a_clear_line(
    tmp_path: Path, small_disk: Path
) -> None:
    cluster = LocalCluster.create(tmp_path / "cluster", controllers=3, brokers=0)
    raft_dir = cluster.data_dir(VICTIM) / "raft"
    raft_dir.symlink_to(small_disk)  # the victim's Raft directory is on the small disk
    victim: subprocess.Popen[bytes] | None = None
    log_path = cluster.log_path(VICTIM)
    try:
        for spec in cluster.controllers():
            if spec.name != VICTIM:
                cluster.start(spec.name)
        with open(log_path, "ab") as log:
            victim = subprocess.Popen(
                [sys.executable, "-m", "tidelog.cli", "server", "--config",
                 str(cluster.config_path(VICTIM))],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        cluster.wait_ready([s.name for s in cluster.controllers() if s.name != VICTIM])
        _wait_ready(cluster, VICTIM, victim)
        assert (small_disk / "raft.journal").exists()
        _fill(small_disk)

        created, committed_after = asyncio.run(_fill_the_journal(cluster, victim))
        status = victim.wait(WAIT_S)
        text = log_path.read_text()
        assert status == 1, f"exit status {status} after {created} topics:\n{text[-3000:]}"
        journal_lines = [line for line in text.splitlines()
                         if "cannot write its Raft journal" in line]
        assert len(journal_lines) == 1, text[-3000:]
        assert "raft.journal" in journal_lines[0]
        assert "No space left on device" in journal_lines[0]
        assert "stopped after a fatal error" in text.splitlines()[-1], text[-3000:]
        assert committed_after, "the two other controllers stopped committing"
    finally:
        if victim is not None and victim.poll() is None:
            victim.kill()
            victim.wait(WAIT_S)
        cluster.stop_all()
