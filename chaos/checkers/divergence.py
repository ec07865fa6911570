"""Replica divergence: after heal, every replica of a partition holds the same batches below the
high watermark.

Input, collected from the brokers by the runner after heal: per partition, per broker id, the
log as ``(offset, digest)`` pairs in offset order (a batch's base offset and its CRC32C or a
hash of its bytes: the checker only compares them), and the partition's HW. Followers copy the
leader's batches byte for byte (DESIGN.md §4, §7), so below the HW the lists must be equal:
same offsets, same digests. A replica missing an entry there, or holding another, diverged
(KIP-101's failure: a follower truncating to its own HW instead of the leader's epoch end).
Jepsen has no such checker (it sees the system through clients only); this one is ours, and
forbidden whatever the promise, because even an unclean election makes the others truncate
to the new leader.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tidelog.chaos.checkers.model import Anomaly, Collector, Json
from tidelog.chaos.checkers.observations import TopicPartition

__all__ = ["ReplicaDumps", "check_replicas"]

#: partition -> broker id -> [(offset, digest), ...] in offset order
ReplicaDumps = Mapping[TopicPartition, Mapping[int, Sequence[tuple[int, str]]]]


def check_replicas(dumps: ReplicaDumps, high_watermarks: Mapping[TopicPartition, int],
                   out: Collector) -> None:
    """One anomaly per diverged partition, at the first offset where the replicas differ.
    Entries at or above the partition's HW are left out (no HW given: all are compared)."""
    for tp in sorted(dumps):
        replicas = dumps[tp]
        if len(replicas) < 2:
            continue
        hw = high_watermarks.get(tp)
        logs = {broker: [e for e in entries if hw is None or e[0] < hw]
                for broker, entries in sorted(replicas.items())}
        first_diff = _first_difference(list(logs.values()))
        if first_diff is None:
            continue
        topic, partition = tp
        at: dict[str, Json] = {}
        for broker, entries in logs.items():
            entry = entries[first_diff] if first_diff < len(entries) else None
            at[str(broker)] = None if entry is None else [entry[0], entry[1]]
        shown = ", ".join(f"broker {b}: {'missing' if e is None else e}" for b, e in at.items())
        out.add(Anomaly(
            "replica-divergence", True,
            f"{topic}-{partition} replicas differ at entry {first_diff} below HW {hw}: {shown}",
            (), {"topic": topic, "partition": partition, "high_watermark": hw,
                 "entry": first_diff, "replicas": at}))


def _first_difference(logs: list[list[tuple[int, str]]]) -> int | None:
    longest = max(len(log) for log in logs)
    for index in range(longest):
        seen = {tuple(log[index]) if index < len(log) else None for log in logs}
        if len(seen) > 1:
            return index
    return None
