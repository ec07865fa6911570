"""Crash recovery of the partition log with a real process killed by SIGKILL mid-append.

A child Python process opens the Storage and appends batches to two partitions as fast as it
can, printing one line per acknowledged append (partition, base offset, next offset, SHA-256 of
the stored bytes) and flushing stdout after each. The test reads those lines, sends SIGKILL at a
random moment while appends are in flight, restarts the child on the same data dir (it continues
from the recovered log end) and kills it again, three times. Then it reopens the storage itself
and checks, per partition: every acknowledged batch is there with the same bytes and a valid CRC,
the log is contiguous from its start to its end (no torn or missing batch), and the LEO is the
end of the last stored batch and at least the end of the last acknowledged one.

The "mixed" variant also moves the HW and applies size retention with small segments while
appending, so range deletes and state writes are cut by the kill too; acknowledged batches below
the recovered log start offset are then allowed to be gone, none above it.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidelog.broker.storage import Storage
from tidelog.data_dir import format_data_dir
from tidelog.record_batch import validate_batch

pytestmark = pytest.mark.integration

CLUSTER = "crash-cluster"
TOPIC = bytes(range(16))
PARTITIONS = (0, 1)
KILLS = 3
#: Appends acknowledged before a kill is allowed (random in this range), and time limits.
ACKS_BEFORE_KILL = (150, 600)
CHILD_START_TIMEOUT_S = 20.0
ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import hashlib, sys
from tidelog.broker.storage import LogConfig, Storage
from tidelog.record_batch import NewRecord, build_batch, validate_batch

data_dir, mode, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
topic = bytes(range(16))
config = LogConfig(segment_bytes=64 * 1024) if mode == "mixed" else LogConfig()
storage = Storage.open(data_dir, cluster_id="crash-cluster", node_id=0)
logs = [storage.get_or_create_log(topic, p, config=config) for p in (0, 1)]
out = sys.stdout
i = 0
while True:
    p = i % 2
    log = logs[p]
    records = [NewRecord(b"k%d" % seed, b"%d-%d-" % (seed, i) + b"x" * 200) for _ in range(20)]
    batch = validate_batch(build_batch(records, now_ms=1_000 + i))
    info = log.append_as_leader(batch, leader_epoch=seed, now_ms=1_000 + i)
    stored = log.read(info.base_offset, 1).batches[0]
    out.write("%d %d %d %s\n" % (p, info.base_offset, info.last_offset + 1,
                                 hashlib.sha256(stored).hexdigest()))
    out.flush()
    if mode == "mixed" and i % 7 == 0:
        log.update_high_watermark(log.log_end_offset - 10)
        log.enforce_retention(0, retention_ms=-1, retention_bytes=128 * 1024)
    i += 1
"""


def run_and_kill(data_dir: Path, mode: str, seed: int, rng: random.Random) -> list[list[str]]:
    """Start the child, let it acknowledge a random number of appends, SIGKILL it; returns every
    complete acknowledgement line it wrote."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data_dir), mode, str(seed)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
    )
    assert child.stdout is not None
    kill_after = rng.randint(*ACKS_BEFORE_KILL)
    acks: list[list[str]] = []
    deadline = time.monotonic() + CHILD_START_TIMEOUT_S
    try:
        while len(acks) < kill_after:
            line = child.stdout.readline()
            if not line:
                err = child.stderr.read().decode() if child.stderr else ""
                pytest.fail(f"child exited early ({child.wait()}): {err[-2000:]}")
            acks.append(line.decode().split())
            assert time.monotonic() < deadline, "child too slow"
        child.send_signal(signal.SIGKILL)  # mid-stream: it never pauses between appends
        rest = child.stdout.read().decode()
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    # A line cut by the kill has no newline: that append was never acknowledged.
    acks.extend(line.split() for line in rest.split("\n")[:-1] if line)
    return acks


@pytest.mark.parametrize("mode", ["append", "mixed"])
def test_kill_9_mid_append_loses_no_acknowledged_batch(tmp_path: Path, mode: str) -> None:
    rng = random.Random(f"storage-recovery-{mode}")
    format_data_dir(tmp_path, CLUSTER, 0)
    acked: dict[int, dict[int, tuple[int, str]]] = {p: {} for p in PARTITIONS}
    for seed in range(1, KILLS + 1):
        for partition, base, nxt, digest in run_and_kill(tmp_path, mode, seed, rng):
            acked[int(partition)][int(base)] = (int(nxt), digest)
    with Storage.open(tmp_path, cluster_id=CLUSTER, node_id=0) as storage:
        for p in PARTITIONS:
            check_partition(storage, p, acked[p])


def check_partition(storage: Storage, partition: int, acked: dict[int, tuple[int, str]]) -> None:
    log = storage.log(TOPIC, partition)
    log.check_invariants()
    start, leo = log.log_start_offset, log.log_end_offset
    stored: dict[int, tuple[int, str]] = {}
    offset = start
    while offset < leo:  # walk the whole log: contiguous, every batch CRC-valid
        for data in log.read(offset, 1 << 20).batches:
            batch = validate_batch(data, max_bytes=1 << 30)
            assert batch.base_offset == offset or (batch.base_offset < start == offset)
            offset = batch.base_offset + batch.record_count
            stored[batch.base_offset] = (offset, hashlib.sha256(data).hexdigest())
    assert offset == leo, "the LEO is the end of the last stored batch"
    assert acked, "the child acknowledged appends"
    assert leo >= max(nxt for nxt, _ in acked.values())
    lost = [base for base, ack in acked.items() if ack[0] > start and stored.get(base) != ack]
    assert not lost, f"partition {partition}: acknowledged batches lost or changed at {lost[:5]}"
