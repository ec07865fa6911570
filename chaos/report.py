"""A chaos run's report, computed from its history: the timeline (throughput and latency over
time), the fault windows, the time to recover after each heal, and the one-screen summary.

Pure: a :class:`~chaos.history.History` (and the checkers' result) in, numbers and text out;
chaos/runner.py writes them to ``result.json`` and ``summary.txt``, and chaos/report_png.py
draws the timeline (the only module that imports matplotlib).

* :func:`timeline`: each completed send as ``(completed at, latency, type, acks)`` (latency:
  from its ``invoke`` to its completion, paired by process), and ok sends per
  :data:`BUCKET_S` bucket: Jepsen's perf graphs (``jepsen.checker.perf``), per send;
* :func:`fault_windows`: each fault from its nemesis ``start`` invoke to its ``stop``
  completion (open until the end of the run when it was never healed);
* :func:`recovery`: per fault, as the issue defines it: the first successful acks=all write
  after the fault (the first acks=all send *invoked* after the heal that ended ``ok``: seconds
  from the heal to its acknowledgement; and the same from the fault's start, which shows a
  failover that finished while the fault was still on), and the time until produce throughput
  is back to 90% of the baseline (the ok sends per second before the first fault, warm-up
  second excluded): the end of the first bucket after the heal whose rate reaches it; and,
  from the start, the end of the throughput dip the fault caused (a failover that completed
  while the fault was on: 0 when throughput never fell below 90%).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from tidelog.chaos.checkers import HistoryCheck
from tidelog.chaos.history import Fault, History, Send

__all__ = ["BUCKET_S", "FaultWindow", "Recovery", "SendPoint", "Timeline", "fault_windows",
           "recovery", "summary_lines", "timeline"]

#: Throughput is counted per bucket of this many seconds.
BUCKET_S: Final = 0.5
#: Throughput counts as recovered at this share of the baseline.
RECOVERED_SHARE: Final = 0.9
#: The first second of a run (clients connecting) is left out of the baseline.
BASELINE_SKIP_S: Final = 1.0
NS: Final = 1_000_000_000


@dataclass(frozen=True, slots=True)
class SendPoint:
    """One completed send: when it completed (s), how long it took (ms), how it ended."""

    t_s: float
    latency_ms: float
    type: str
    acks: str


@dataclass(frozen=True, slots=True)
class Timeline:
    sends: tuple[SendPoint, ...]
    #: ok sends per bucket, bucket i covering [i * BUCKET_S, (i + 1) * BUCKET_S)
    ok_per_bucket: tuple[int, ...]
    end_s: float

    def rate(self, bucket: int) -> float:
        return self.ok_per_bucket[bucket] / BUCKET_S


@dataclass(frozen=True, slots=True)
class FaultWindow:
    name: str
    targets: tuple[str, ...]
    start_s: float
    #: None when the fault was never healed
    heal_s: float | None
    error: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"fault": self.name, "targets": list(self.targets), "start_s": self.start_s,
                "heal_s": self.heal_s, "error": self.error}


@dataclass(frozen=True, slots=True)
class Recovery:
    """Seconds after a fault: None when it did not happen before the run ended."""

    fault: str
    first_write_after_start_s: float | None
    first_write_after_heal_s: float | None
    throughput_after_heal_s: float | None
    #: From the fault's start to the end of its throughput dip (0 when there was none)
    throughput_after_start_s: float | None = None

    def to_json(self) -> dict[str, object]:
        return {"fault": self.fault,
                "first_write_after_start_s": self.first_write_after_start_s,
                "first_write_after_heal_s": self.first_write_after_heal_s,
                "throughput_after_start_s": self.throughput_after_start_s,
                "throughput_after_heal_s": self.throughput_after_heal_s}


def timeline(history: History) -> Timeline:
    invoked: dict[int, float] = {}
    points: list[SendPoint] = []
    end_ns = 0
    for entry in history:
        op = entry.op
        end_ns = max(end_ns, op.time_ns)
        if not isinstance(op, Send):
            continue
        if op.type == "invoke":
            invoked[op.process] = op.time_ns
            continue
        start = invoked.pop(op.process, op.time_ns)
        points.append(SendPoint(op.time_ns / NS, (op.time_ns - start) / 1e6, op.type, op.acks))
    buckets = [0] * (int(end_ns / NS / BUCKET_S) + 1)
    for p in points:
        if p.type == "ok":
            buckets[int(p.t_s / BUCKET_S)] += 1
    return Timeline(tuple(points), tuple(buckets), end_ns / NS)


def fault_windows(history: History) -> list[FaultWindow]:
    """Each fault's window, in the order they started (a fault name may start again after
    its heal: each start opens a new window)."""
    windows: list[FaultWindow] = []
    open_: dict[str, int] = {}
    for entry in history:
        op = entry.op
        if not isinstance(op, Fault):
            continue
        t = op.time_ns / NS
        if op.f == "start" and op.type == "invoke":
            open_[op.fault] = len(windows)
            windows.append(FaultWindow(op.fault, (), t, None))
        elif op.f == "start" and op.fault in open_:
            w = windows[open_[op.fault]]
            windows[open_[op.fault]] = FaultWindow(w.name, op.targets, w.start_s, None,
                                                   op.error)
        elif op.f == "stop" and op.type != "invoke" and op.fault in open_:
            index = open_.pop(op.fault)
            w = windows[index]
            windows[index] = FaultWindow(w.name, w.targets or op.targets, w.start_s, t,
                                         w.error or op.error)
    return windows


def recovery(history: History, windows: Sequence[FaultWindow],
             line: Timeline | None = None) -> list[Recovery]:
    line = line or timeline(history)
    acked = _acks_all_ok(history)
    baseline = _baseline(line, windows)
    out = []
    for w in windows:
        after_start = _first_write(acked, w.start_s)
        after_heal = _first_write(acked, w.heal_s) if w.heal_s is not None else None
        out.append(Recovery(w.name, after_start, after_heal,
                            _throughput_back(line, w.heal_s, baseline),
                            _dip_end(line, w.start_s, w.heal_s, baseline)))
    return out


def _acks_all_ok(history: History) -> list[tuple[float, float]]:
    """(invoked at, acknowledged at) of every ok acks=all send, in invoke order."""
    invoked: dict[int, float] = {}
    out = []
    for entry in history:
        op = entry.op
        if isinstance(op, Send) and op.acks == "all":
            if op.type == "invoke":
                invoked[op.process] = op.time_ns / NS
            elif op.process in invoked:
                start = invoked.pop(op.process)
                if op.type == "ok":
                    out.append((start, op.time_ns / NS))
    return sorted(out)


def _first_write(acked: list[tuple[float, float]], after_s: float | None) -> float | None:
    if after_s is None:
        return None
    done = [ack for invoked, ack in acked if invoked >= after_s]
    return round(min(done) - after_s, 3) if done else None


def _baseline(line: Timeline, windows: Sequence[FaultWindow]) -> float | None:
    """ok sends per second before the first fault (warm-up second left out)."""
    first = min((w.start_s for w in windows), default=line.end_s)
    lo, hi = int(BASELINE_SKIP_S / BUCKET_S), int(first / BUCKET_S)
    counted = line.ok_per_bucket[lo:hi]
    return sum(counted) / (len(counted) * BUCKET_S) if counted else None


def _throughput_back(line: Timeline, heal_s: float | None,
                     baseline: float | None) -> float | None:
    if heal_s is None or not baseline:
        return None
    first = int(heal_s / BUCKET_S)
    for bucket in range(first, len(line.ok_per_bucket) - 1):  # the last one is partial
        if line.rate(bucket) >= RECOVERED_SHARE * baseline:
            return round(max(0.0, (bucket + 1) * BUCKET_S - heal_s), 3)
    return None


def _dip_end(line: Timeline, start_s: float, heal_s: float | None,
             baseline: float | None) -> float | None:
    """Seconds from ``start_s`` to the end of the first bucket back at 90% of the baseline
    after throughput fell below it; 0.0 when it did not fall while the fault was on (a later
    dip is another fault's, or the end of the run); None when it never came back."""
    if not baseline:
        return None
    threshold = RECOVERED_SHARE * baseline
    last = len(line.ok_per_bucket) - 1  # the last bucket is partial
    dipped = False
    for bucket in range(int(start_s / BUCKET_S) + 1, last):
        if line.rate(bucket) < threshold:
            if not dipped and heal_s is not None and bucket * BUCKET_S >= heal_s:
                return 0.0
            dipped = True
        elif dipped:
            return round((bucket + 1) * BUCKET_S - start_s, 3)
    return None if dipped else 0.0


def _targets(targets: Sequence[str]) -> str:
    """At most 3 targets named (a partition's cut links are many; result.json has them all).
    """
    if not targets:
        return "-"
    more = f" (+{len(targets) - 3} more)" if len(targets) > 3 else ""
    return ",".join(targets[:3]) + more


def _seconds(value: object) -> str:
    return "-" if value is None else f"{value:.1f} s"


def summary_lines(*, scenario: str, seed: int, run_dir: str, check: HistoryCheck,
                  windows: Sequence[FaultWindow], recoveries: Sequence[Recovery],
                  extra: Mapping[str, str] | None = None) -> list[str]:
    """The one-screen summary: operations, faults with their windows and recovery, each
    checker's count, the verdict."""
    lines = [f"scenario {scenario} (seed {seed}): {run_dir}"]
    for key, value in (extra or {}).items():
        lines.append(f"{key}: {value}")
    for f, types in sorted(check.op_counts.items()):
        done = {t: n for t, n in types.items() if t != "invoke"}
        lines.append(f"  {f:<6} {types.get('invoke', 0):>7} invoked: "
                     + ", ".join(f"{n} {t}" for t, n in done.items()))
    lines.append("faults:")
    if not windows:
        lines.append("  none")
    for w, rec in zip(windows, recoveries, strict=True):
        healed = "never healed" if w.heal_s is None else f"{w.heal_s:.1f} s"
        lines.append(f"  {w.name} on {_targets(w.targets)}: {w.start_s:.1f} s -> "
                     f"{healed}" + (f" (error: {w.error})" if w.error else ""))
        lines.append(f"    first acks=all write: {_seconds(rec.first_write_after_start_s)} "
                     f"after start, {_seconds(rec.first_write_after_heal_s)} after heal; "
                     f"throughput at 90%: {_seconds(rec.throughput_after_start_s)} after "
                     f"start, {_seconds(rec.throughput_after_heal_s)} after heal")
    p = check.promise
    lines.append(f"promise: RF {p.replication_factor}, min.insync.replicas "
                 f"{p.min_insync_replicas}, unclean leader election "
                 f"{'on' if p.unclean_leader_election else 'off'} "
                 f"({'acks=all writes must survive' if p.durable else 'not durable'})")
    lines.append("checkers (count / forbidden):")
    for r in check.results:
        lines.append(f"  {r.kind:<22} {r.count:>6} {r.forbidden_count:>6}")
    lines.append("verdict: the promise held" if check.valid else
                 "verdict: BROKEN (" + ", ".join(check.forbidden_kinds) + ")")
    return lines
