"""Replica dumps for the divergence checker: what every replica of every partition holds, as
``(base offset, digest)`` per batch, read from the brokers' data dirs after the run.

The wire has no "read a follower's log" call (a Fetch is served by the leader only, and
DescribeLogs gives offsets, not contents), so the dumps are read from disk, as
tests/integration/replica_checks.py does: once the cluster has healed and the workload stopped,

1. :func:`wait_for_replicas_in_sync` waits (bounded) until every partition of the topics has a
   leader, its ISR holds every replica, and the leader's HW equals its log end offset (every
   replica has everything: HW is the minimum LEO over the ISR), and returns each partition's
   replicas and HW. A replica still catching up would otherwise look diverged;
2. the runner stops the brokers (kill -9 is fine: RocksDB's WAL keeps every write);
3. :func:`dump_replicas` runs ``tidelog storage dump-log`` on each broker's data dir (the
   broker's own recovery, as a restart would run it: chaos/ is a user of the cluster and
   imports nothing of broker/), which lists each hosted partition's batches from its log start
   to its log end offset: the base offset and the BLAKE2b-128 of the stored bytes (the whole
   batch, header included, so a different leader epoch or producer state shows too).

The result is :data:`chaos.checkers.ReplicaDumps` plus the HWs, ready for
``check_history(..., replicas=, high_watermarks=)``, which compares them below the HW.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelog.chaos.checkers.observations import TopicPartition as CheckedPartition
from tidelog.client import Admin

__all__ = ["InSyncPartitions", "dump_replicas", "wait_for_replicas_in_sync"]

_POLL_S = 0.2
#: One dump-log of a broker's data dir (it retries a held lock for 5 s itself).
DUMP_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class InSyncPartitions:
    """Every partition of the topics, fully in sync: its replicas and HW, and the topic ids
    (the storage keys logs by topic id)."""

    replicas: dict[CheckedPartition, tuple[int, ...]]
    high_watermarks: dict[CheckedPartition, int]
    topic_ids: dict[str, str]


def wait_for_replicas_in_sync(bootstrap: str, topics: Iterable[str], *, timeout_s: float,
                              request_timeout_ms: int = 5_000) -> InSyncPartitions:
    """Wait until every partition of ``topics`` is fully in sync (see the module doc);
    TimeoutError naming the partitions that are not, at ``timeout_s``."""
    names = sorted(set(topics))
    deadline = time.monotonic() + timeout_s
    lagging: list[str] = ["(not described yet)"]
    with Admin(bootstrap, request_timeout_ms=request_timeout_ms) as admin:
        # Bounded: one describe per pass, until the deadline.
        while time.monotonic() < deadline:
            try:
                described = admin.describe_topics(names, timeout_ms=request_timeout_ms).all()
            except Exception as e:  # a broker still coming back: try again
                lagging = [f"describe failed: {e}"]
                time.sleep(_POLL_S)
                continue
            found = InSyncPartitions({}, {}, {})
            lagging = []
            for name, topic in described.items():
                found.topic_ids[name] = topic.topic_id
                for p in topic.partitions:
                    tp = (name, p.partition)
                    if (p.leader < 0 or set(p.isr) != set(p.replicas) or p.high_watermark < 0
                            or p.high_watermark != p.log_end_offset):
                        lagging.append(f"{name}-{p.partition} (leader {p.leader}, replicas "
                                       f"{list(p.replicas)}, ISR {list(p.isr)}, HW "
                                       f"{p.high_watermark}, LEO {p.log_end_offset})")
                    found.replicas[tp] = tuple(p.replicas)
                    found.high_watermarks[tp] = p.high_watermark
            if not lagging:
                return found
            time.sleep(_POLL_S)
    raise TimeoutError(f"replicas not in sync after {timeout_s:.0f} s: {', '.join(lagging[:8])}")


def dump_replicas(data_dirs: Mapping[int, Path | str], topic_ids: Mapping[str, str]
                  ) -> dict[CheckedPartition, dict[int, list[tuple[int, str]]]]:
    """Every replica of the topics in ``topic_ids`` (name -> topic id, as Admin describes it)
    held by the brokers whose data dirs are given (broker id -> data dir). The brokers must
    be stopped."""
    names = {uuid.UUID(topic_id).hex: name for name, topic_id in topic_ids.items()}
    dumps: dict[CheckedPartition, dict[int, list[tuple[int, str]]]] = {}
    for broker_id, data_dir in sorted(data_dirs.items()):
        for row in _dump_log(Path(data_dir), broker_id, sorted(names)):
            entries = dumps.setdefault((names[row["topic_id"]], row["partition"]), {})
            if row["kind"] == "partition":  # a replica, perhaps without a batch
                entries[broker_id] = []
            else:
                entries[broker_id].append((row["base_offset"], row["digest"]))
    return dumps


def _dump_log(data_dir: Path, broker_id: int, topic_ids: list[str]) -> list[dict[str, Any]]:
    """``tidelog storage dump-log --format json`` of one data dir, for these topic ids."""
    command = [sys.executable, "-m", "tidelog.cli", "storage", "dump-log",
               "--dir", str(data_dir), "--node-id", str(broker_id), "--format", "json"]
    for topic_id in topic_ids:
        command += ["--topic-id", topic_id]
    done = subprocess.run(command, capture_output=True, text=True, timeout=DUMP_TIMEOUT_S,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"dump-log of broker {broker_id}'s {data_dir} failed "
                           f"(exit {done.returncode}): {done.stderr.strip()}")
    return [json.loads(line) for line in done.stdout.splitlines()]
