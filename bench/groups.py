"""Consumer-group benchmark (issue 10) against a local 3-controller + 3-broker cluster.

``python -m bench.groups [--heartbeat-interval-ms MS] [--session-timeout-ms MS] [--seconds S]
[--records N] [--phases rebalance,commits,consume]`` starts the cluster as local processes (the
brokers' group timings are their defaults, 5 s and 45 s, unless given) and measures, with
every consumer a separate OS process (this module run as ``python -m bench.groups member MODE
...``) on default client configs:

1. **rebalance**: 10 members on a 60-partition topic (RF 3) while a producer writes
   ``REBALANCE_RATE`` records/s over it. The time from an 11th member's subscribe() until the
   group is stable again (DescribeGroups: every member's epoch is the group epoch and its
   assignment is its target), then from that member's close() until stable, then from a
   kill -9 of another member until stable. Targets: join and leave ≤ 3 heartbeat intervals,
   kill ≤ session timeout + 1 interval. For each, whether a member stopped reading a partition
   it kept: a kept partition (in the member's assignment before and after) that its rebalance
   listener saw revoked, or from which it read nothing during the rebalance (checked when the
   rebalance lasted at least ``KEPT_WINDOW_MIN_S``; the producer gives each partition
   ``REBALANCE_RATE / 60`` records a second).
2. **commits**: 8 members of one group, one partition each, each calling a synchronous
   ``commit({tp: offset})`` (one partition per commit, written acks=all) in a loop for
   ``--seconds``: commits per second and the round trip's p50/p99. Target ≥ 5,000/s. Then the
   same with each member in a group of its own (``commits_one_group_each``), whose commits
   spread over several ``__consumer_offsets`` partitions and coordinators: how much of the
   figure is one shard writing one commit at a time; and one member alone
   (``commits_one_member``): the bare round trip. The headline is the sync figure; a second,
   labelled one (``commits_async_window``) has each of the 8 members keep ``COMMIT_WINDOW``
   ``commit_async()`` calls in flight (as Kafka users do), which shows what the coordinator
   takes when members do not wait for each commit.
3. **consume**: ``--records`` records pre-produced to a 12-partition topic, read once by a group
   of one and once by a group of three (members pause what they are given until the group is
   stable and all start together): records per second, from the start until the last member
   read its partitions' ends.

Prints readable lines as it goes and a final JSON line with the figures, the targets met, and
the machine's state (cores, load average before and after). Every wait is bounded.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from tidelog import Admin, Consumer, NewTopic, Producer, TopicPartition
from tidelog.client import ConsumerRebalanceListener, OffsetAndMetadata
from tidelog.config import BrokerConfig
from tidelog.local_cluster import LocalCluster

MEMBERS = 10
REBALANCE_PARTITIONS = 60
REBALANCE_RATE = 1_200
KEPT_WINDOW_MIN_S = 1.0
COMMITTERS = 8
READ_PARTITIONS = 12
VALUE = b"x" * 100
#: Bounds of the bench's waits.
FORM_S = 180.0
DESCRIBE_EVERY_S = 0.05
COMMIT_TARGET_PER_S = 5_000
#: commit_async() calls each member keeps in flight in the labelled second commit figure.
COMMIT_WINDOW = 16
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(BrokerConfig)
             if isinstance(f.default, int)}


# ======================================================================= member processes
def _emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def _stdin_lines() -> queue.Queue[str]:
    """Lines the parent sends ("go", "close"), read by a daemon thread."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            lines.put(line.strip())
        lines.put("close")  # the parent went away

    threading.Thread(target=read, daemon=True).start()
    return lines


class _Listener(ConsumerRebalanceListener):
    """Reports each callback to the parent; pauses what it is given until ``started``."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.started = False

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        _emit(event="revoked", t=time.time(), partitions=sorted(tp.partition for tp in revoked))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if not self.started and assigned:
            self.consumer.pause(*assigned)
        _emit(event="assigned", t=time.time(), partitions=sorted(tp.partition for tp in assigned))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        _emit(event="lost", t=time.time(), partitions=sorted(tp.partition for tp in lost))


def member_main(mode: str, bootstrap: str, group: str, topic: str, client_id: str) -> None:
    commands = _stdin_lines()
    consumer = Consumer(bootstrap, group_id=group, client_id=client_id,
                        auto_offset_reset="earliest")
    listener = _Listener(consumer)
    listener.started = mode == "rebalance"
    _emit(event="subscribe", t=time.time())
    consumer.subscribe([topic], listener=listener)
    if mode == "rebalance":
        _rebalance_member(consumer, commands)
    else:
        _wait_for_go(consumer, commands)
        listener.started = True
        if mode == "commit":
            _commit_member(consumer)
        elif mode == "commit_async":
            _commit_async_member(consumer, int(os.environ["BENCH_WINDOW"]))
        else:
            _read_member(consumer)
        _wait_for_close(consumer, commands)
    _emit(event="closing", t=time.time())
    consumer.close()


def _rebalance_member(consumer: Consumer, commands: queue.Queue[str]) -> None:
    """Poll until told to close, reporting how many records each poll read per partition."""
    while commands.empty():  # bounded by the parent: it sends "close" or kills us
        counts: dict[int, int] = {}
        for r in consumer.poll(timeout_ms=200):
            counts[r.partition] = counts.get(r.partition, 0) + 1
        if counts:
            _emit(event="read", t=time.time(), counts=counts)


def _wait_for_go(consumer: Consumer, commands: queue.Queue[str]) -> None:
    """Poll (so the rebalance proceeds; what is given stays paused) until the parent says go."""
    reported: set[TopicPartition] = set()
    while commands.empty():  # bounded by the parent
        consumer.poll(timeout_ms=100)
        if consumer.assignment() != reported:
            reported = consumer.assignment()
            _emit(event="owns", partitions=sorted(tp.partition for tp in reported))
    commands.get()


def _wait_for_close(consumer: Consumer, commands: queue.Queue[str]) -> None:
    while commands.empty():  # bounded by the parent
        consumer.poll(timeout_ms=100)


def _commit_member(consumer: Consumer) -> None:
    tp = min(consumer.assignment())
    seconds = float(os.environ["BENCH_SECONDS"])
    latencies: list[float] = []
    errors = 0
    started = time.perf_counter()
    # Bounded by --seconds.
    while time.perf_counter() - started < seconds:
        t0 = time.perf_counter()
        try:
            consumer.commit({tp: OffsetAndMetadata(len(latencies) + errors)})
        except Exception:
            errors += 1
            continue
        latencies.append((time.perf_counter() - t0) * 1000)
    _emit(event="commits", seconds=time.perf_counter() - started, errors=errors,
          latencies_ms=[round(x, 3) for x in latencies])


def _commit_async_member(consumer: Consumer, window: int) -> None:
    """commit_async() with at most ``window`` commits in flight (each one partition, a new
    offset), their callbacks run by poll(): how Kafka users keep a coordinator busy without
    waiting for each commit. Latencies are from commit_async() to its callback."""
    tp = min(consumer.assignment())
    seconds = float(os.environ["BENCH_SECONDS"])
    latencies: list[float] = []
    sent: dict[int, float] = {}
    errors = 0

    def done(offsets: dict[TopicPartition, OffsetAndMetadata],
             error: BaseException | None) -> None:
        nonlocal errors
        t0 = sent.pop(offsets[tp].offset)
        if error is not None:
            errors += 1
        else:
            latencies.append((time.perf_counter() - t0) * 1000)

    started = time.perf_counter()
    offset = 0
    # Bounded by --seconds, then by the drain's deadline.
    while time.perf_counter() - started < seconds:
        while len(sent) < window:
            offset += 1
            sent[offset] = time.perf_counter()
            consumer.commit_async({tp: OffsetAndMetadata(offset)}, done)
        consumer.poll(timeout_ms=2)  # runs the callbacks of finished commits
    elapsed = time.perf_counter() - started
    drain_deadline = time.perf_counter() + 30
    while sent and time.perf_counter() < drain_deadline:
        consumer.poll(timeout_ms=10)
    _emit(event="commits", seconds=elapsed, errors=errors + len(sent),
          latencies_ms=[round(x, 3) for x in latencies])


def _read_member(consumer: Consumer) -> None:
    tps = sorted(consumer.assignment())
    ends = consumer.end_offsets(tps)
    consumer.resume(*tps)
    count = 0
    started = time.time()
    deadline = time.monotonic() + FORM_S
    # Bounded by the partitions' ends (pre-produced) and a deadline.
    while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
        count += len(consumer.poll(timeout_ms=200, max_records=10_000))
    _emit(event="read_done", start=started, end=time.time(), count=count)


# ======================================================================= the parent's side
class Member:
    """A member process; its JSON lines collected by a thread."""

    def __init__(self, mode: str, bootstrap: str, group: str, topic: str, client_id: str,
                 env: dict[str, str] | None = None) -> None:
        self.client_id = client_id
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.groups", "member", mode, bootstrap, group, topic,
             client_id], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})})
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def find(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e["event"] == name]

    def wait_event(self, name: str, timeout_s: float = FORM_S) -> dict[str, Any]:
        found = _wait(lambda: self.find(name), f"{self.client_id}'s {name}", timeout_s)
        return found[0]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("close")
                self.proc.wait(timeout=40)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def _wait(check: Callable[[], Any], what: str, timeout_s: float = FORM_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(DESCRIBE_EVERY_S)
    raise TimeoutError(f"{what} not within {timeout_s:.0f} s")


def stable_assignment(admin: Admin, group: str, members: int) -> dict[str, set[int]] | None:
    """client id -> partitions when the group has ``members`` members, each at the group
    epoch with its assignment equal to its target; else None."""
    try:
        g = admin.describe_groups([group])[group]
    except Exception:  # not created yet, or its coordinator is moving
        return None
    if len(g.members) != members or not all(
            m.member_epoch == g.group_epoch and set(m.assignment) == set(m.target_assignment)
            for m in g.members):
        return None
    return {m.client_id: {tp.partition for tp in m.assignment} for m in g.members}


def wait_stable(admin: Admin, group: str, members: int) -> tuple[float, dict[str, set[int]]]:
    found = _wait(lambda: stable_assignment(admin, group, members),
                  f"group {group} stable with {members} members")
    return time.time(), found


def kept_check(members: list[Member], before: dict[str, set[int]], after: dict[str, set[int]],
               start: float, end: float) -> dict[str, Any]:
    """Kept partitions revoked, and kept partitions read nothing from in [start, end]."""
    revoked = idle = kept_total = 0
    check_reads = end - start >= KEPT_WINDOW_MIN_S
    for m in members:
        kept = before.get(m.client_id, set()) & after.get(m.client_id, set())
        kept_total += len(kept)
        for e in m.find("revoked") + m.find("lost"):
            if start <= e["t"] <= end:
                revoked += len(kept & set(e["partitions"]))
        if check_reads:
            read = {int(p) for e in m.find("read") if start <= e["t"] <= end for p in e["counts"]}
            idle += len(kept - read)
    return {"kept_partitions": kept_total, "kept_partitions_revoked": revoked,
            "kept_partitions_not_read": idle if check_reads else None}


class Writer(threading.Thread):
    """Writes REBALANCE_RATE records/s, keyed over the partitions, until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.stopping = threading.Event()

    def run(self) -> None:
        with Producer(self.bootstrap, linger_ms=5) as producer:
            n = 0
            started = time.monotonic()
            while not self.stopping.is_set():  # bounded by the phase that runs it
                for _ in range(REBALANCE_RATE // 20):
                    producer.send(self.topic, VALUE, b"%d" % n)
                    n += 1
                time.sleep(max(0.0, started + n / REBALANCE_RATE - time.monotonic()))


def rebalance(bootstrap: str, hb_ms: int, session_ms: int) -> dict[str, Any]:
    topic, group = "rebalance", "rebalancers"
    writer = Writer(bootstrap, topic)
    writer.start()
    members = [Member("rebalance", bootstrap, group, topic, f"m{i}") for i in range(MEMBERS)]
    out: dict[str, Any] = {}
    try:
        with Admin(bootstrap) as admin:
            _, before = wait_stable(admin, group, MEMBERS)
            print(f"rebalance: {MEMBERS} members stable on {REBALANCE_PARTITIONS} partitions")
            joiner = Member("rebalance", bootstrap, group, topic, "joiner")
            members.append(joiner)
            joined = joiner.wait_event("subscribe")["t"]
            stable_at, after = wait_stable(admin, group, MEMBERS + 1)
            out["join_s"] = round(stable_at - joined, 3)
            out["join_kept"] = kept_check(members[:-1], before, after, joined, stable_at)
            print(f"join → stable: {out['join_s']} s {out['join_kept']}")

            before = after
            joiner.send("close")
            left = joiner.wait_event("closing")["t"]
            stable_at, after = wait_stable(admin, group, MEMBERS)
            out["leave_s"] = round(stable_at - left, 3)
            out["leave_kept"] = kept_check(members[:-1], before, after, left, stable_at)
            print(f"leave (close) → stable: {out['leave_s']} s {out['leave_kept']}")

            before = after
            victim = members[0]
            killed = time.time()
            victim.kill()
            stable_at, after = wait_stable(admin, group, MEMBERS - 1)
            out["kill_s"] = round(stable_at - killed, 3)
            out["kill_kept"] = kept_check(members[1:-1], before, after, killed, stable_at)
            print(f"kill -9 → stable: {out['kill_s']} s {out['kill_kept']}")
    finally:
        writer.stopping.set()
        for m in members:
            m.close()
        writer.join(timeout=30)
    out["targets_s"] = {"join": 3 * hb_ms / 1000, "leave": 3 * hb_ms / 1000,
                        "kill": (session_ms + hb_ms) / 1000}
    return out


def commits(bootstrap: str, seconds: float, *, groups: int, count: int = COMMITTERS,
            window: int = 0) -> dict[str, Any]:
    """``count`` members committing in a loop: in one group (groups=1), or each in a group of
    its own (groups=count), so their commits go to several coordinator shards. ``window`` > 0:
    each member keeps that many commit_async() in flight instead of a sync commit() each."""
    topic = "commits"
    names = [f"committers-{count}-{groups}-{window}-{i % groups}" for i in range(count)]
    mode = "commit_async" if window else "commit"
    members = [Member(mode, bootstrap, group, topic, f"c{i}",
                      env={"BENCH_SECONDS": str(seconds), "BENCH_WINDOW": str(window)})
               for i, group in enumerate(names)]
    try:
        with Admin(bootstrap) as admin:
            for group in set(names):
                wait_stable(admin, group, names.count(group))
        for m in members:
            m.send("go")
        results = [m.wait_event("commits", seconds + 60) for m in members]
    finally:
        for m in members:
            m.close()
    latencies = sorted(x for r in results for x in r["latencies_ms"])
    per_s = sum(len(r["latencies_ms"]) / r["seconds"] for r in results)
    out = {"members": count, "groups": groups, "seconds": seconds,
           "mode": f"commit_async, {window} in flight per member" if window else "sync commit()",
           "commits": len(latencies),
           "errors": sum(r["errors"] for r in results), "commits_per_s": round(per_s),
           "p50_ms": round(statistics.median(latencies), 2) if latencies else -1,
           "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2) if latencies else -1}
    print(f"commits: {out['commits_per_s']:,}/s, {count} member(s) in {groups} group(s), "
          f"{out['mode']}, "
          f"round trip p50 "
          f"{out['p50_ms']} ms, p99 {out['p99_ms']} ms")
    return out


def consume(bootstrap: str, records: int) -> dict[str, Any]:
    topic = "read"
    with Producer(bootstrap, acks=1, linger_ms=5, batch_size=256 * 1024) as producer:
        for _ in range(records // 1000):
            producer.send_many(topic, [VALUE] * 1000)
        producer.flush()
    out: dict[str, Any] = {"records": records // 1000 * 1000}
    for size in (1, 3):
        group = f"readers-{size}"
        members = [Member("read", bootstrap, group, topic, f"r{size}-{i}") for i in range(size)]
        try:
            with Admin(bootstrap) as admin:
                wait_stable(admin, group, size)
            for m in members:
                m.send("go")
            done = [m.wait_event("read_done") for m in members]
        finally:
            for m in members:
                m.close()
        count = sum(d["count"] for d in done)
        elapsed = max(d["end"] for d in done) - min(d["start"] for d in done)
        out[f"group_of_{size}"] = {"records": count, "seconds": round(elapsed, 3),
                                   "records_per_s": round(count / elapsed)}
        print(f"consume, group of {size}: {count / elapsed:,.0f} records/s")
    return out


def meets(out: dict[str, Any]) -> dict[str, bool]:
    met: dict[str, bool] = {}
    if "rebalance" in out:
        r = out["rebalance"]
        for k in ("join", "leave", "kill"):
            met[k] = r[f"{k}_s"] <= r["targets_s"][k]
        met["kept_partitions_uninterrupted"] = all(
            r[f"{k}_kept"]["kept_partitions_revoked"] == 0
            and not r[f"{k}_kept"]["kept_partitions_not_read"] for k in ("join", "leave", "kill"))
    if "commits" in out:
        met["commits_per_s"] = out["commits"]["commits_per_s"] >= COMMIT_TARGET_PER_S
    return met


def run(args: argparse.Namespace) -> dict[str, Any]:
    hb_ms = args.heartbeat_interval_ms or _DEFAULTS["group_consumer_heartbeat_interval_ms"]
    session_ms = args.session_timeout_ms or _DEFAULTS["group_consumer_session_timeout_ms"]
    overrides = {"broker": {"group_consumer_heartbeat_interval_ms": hb_ms,
                            "group_consumer_session_timeout_ms": session_ms}}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as tmp:
        cluster = LocalCluster.create(tmp, controllers=3, brokers=3, overrides=overrides)
        with cluster.running():
            bootstrap = cluster.bootstrap
            isr2 = {"min.insync.replicas": "2"}
            with Admin(bootstrap) as admin:
                admin.create_topics([
                    NewTopic("rebalance", REBALANCE_PARTITIONS, 3, configs=isr2),
                    NewTopic("commits", COMMITTERS, 3, configs=isr2),
                    NewTopic("read", READ_PARTITIONS, 3, configs=isr2),
                ]).all()
            time.sleep(1.0)  # leaders take over their partitions
            out: dict[str, Any] = {}
            if "rebalance" in args.phases:
                out["rebalance"] = rebalance(bootstrap, hb_ms, session_ms)
            if "commits" in args.phases:
                out["commits"] = commits(bootstrap, args.seconds, groups=1)
                out["commits_one_group_each"] = commits(bootstrap, args.seconds,
                                                        groups=COMMITTERS)
                out["commits_one_member"] = commits(bootstrap, args.seconds, groups=1,
                                                    count=1)
                out["commits_async_window"] = commits(bootstrap, args.seconds, groups=1,
                                                      window=COMMIT_WINDOW)
            if "consume" in args.phases:
                out["consume"] = consume(bootstrap, args.records)
    return {
        "bench": "groups", "heartbeat_interval_ms": hb_ms, "session_timeout_ms": session_ms,
        **out, "meets_targets": meets(out),
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(),
                    "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()]},
    }


def main() -> None:
    if sys.argv[1:2] == ["member"]:
        member_main(*sys.argv[2:7])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heartbeat-interval-ms", type=int, default=0,
                        help="the brokers' group_consumer_heartbeat_interval_ms "
                             "(default: the broker's default)")
    parser.add_argument("--session-timeout-ms", type=int, default=0,
                        help="the brokers' group_consumer_session_timeout_ms (default: ditto)")
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="seconds of the commit loop")
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="records pre-produced for the consume comparison")
    parser.add_argument("--phases", type=lambda v: v.split(","),
                        default=["rebalance", "commits", "consume"],
                        help="comma-separated: rebalance, commits, consume")
    args = parser.parse_args()
    unknown = set(args.phases) - {"rebalance", "commits", "consume"}
    if unknown:
        parser.error(f"unknown phases: {sorted(unknown)}")
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
