"""The `tidelog topic …` commands and `tidelog cluster info/health`, run as a user runs them.

What it checks: every topic command end to end (create with configs, list, describe with
offsets after producing, add-partitions, alter-config seen by describe-config, delete);
produce → consume round trips through stdin/stdout with keys, headers and JSON lines, including
thousands of piped lines and the start positions (--offset N / -N, --from-timestamp,
--partition); `consume --group`: two member processes split a topic, stop on SIGTERM / Ctrl-C
having committed what they printed and left the group, and a third run resumes after it (and
commits at --num); `cluster info`; `cluster health` exiting 0, then 3 with the partitions named once
two brokers of an RF=3, min.insync.replicas=2 topic are killed; and that mistakes (an unknown
topic, an invalid config, bad -c syntax, unreachable brokers) end in one line on stderr with a
non-zero exit code and no traceback.

How: one local cluster (3 controllers, 3 brokers, a short broker session timeout so kills are
noticed quickly) for the module; each command is a `python -m tidelog.cli` subprocess with
TIDELOG_BROKERS set to the cluster, and JSON output is parsed. Topic names are unique per test.
The health test kills brokers, so it runs last. Waits are bounded polls.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tidelog.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

# Group timings short enough that `consume --group` members join and rebalance in a second.
FAST = {"controller": {"broker_session_timeout_ms": 3_000, "fence_check_interval_ms": 100},
        "broker": {"offsets_topic_num_partitions": 3,
                   "group_consumer_heartbeat_interval_ms": 200,
                   "group_consumer_session_timeout_ms": 6_000}}
COMMAND_TIMEOUT_S = 60
WAIT_S = 20.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    base: Path = tmp_path_factory.mktemp("cli-topic") / "cluster"
    with LocalCluster.create(base, controllers=3, brokers=3, overrides=FAST).running() as c:
        yield c


def run(cluster: LocalCluster, *args: str, stdin: str | None = None,
        ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TIDELOG_BROKERS=cluster.bootstrap)
    result = subprocess.run([sys.executable, "-m", "tidelog.cli", *args], input=stdin,
                            capture_output=True, text=True, env=env, timeout=COMMAND_TIMEOUT_S)
    assert "Traceback" not in result.stderr, result.stderr
    if ok:
        assert result.returncode == 0, result.stderr
    return result


def run_json(cluster: LocalCluster, *args: str, stdin: str | None = None) -> Any:
    return json.loads(run(cluster, *args, "--format", "json", stdin=stdin).stdout)


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str,
                          code: int | None = None) -> None:
    assert result.returncode != 0
    if code is not None:
        assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def wait_full_isr(cluster: LocalCluster, topic: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + WAIT_S
    while True:
        parts = run_json(cluster, "topic", "describe", topic)[0]["partitions"]
        if all(p["leader"] >= 0 and len(p["isr"]) == len(p["replicas"]) for p in parts):
            return parts
        assert time.monotonic() < deadline, parts
        time.sleep(0.2)


# ---------------------------------------------------------------------------- topic admin
def test_create_list_describe(cluster: LocalCluster) -> None:
    created = run_json(cluster, "topic", "create", "orders", "-p", "3", "-r", "3",
                       "-c", "min.insync.replicas=2", "-c", "retention.ms=86400000")
    assert created[0]["topic"] == "orders" and created[0]["partitions"] == 3
    assert created[0]["replication_factor"] == 3
    assert created[0]["configs"]["min.insync.replicas"] == "2"
    listed = run_json(cluster, "topic", "list")
    assert {"topic": "orders", "partitions": 3} in [
        {"topic": t["topic"], "partitions": t["partitions"]} for t in listed]
    parts = wait_full_isr(cluster, "orders")
    assert [p["partition"] for p in parts] == [0, 1, 2]
    for p in parts:
        assert sorted(p["replicas"]) == [101, 102, 103] and p["leader"] in p["replicas"]
        assert p["high_watermark"] == 0 and p["log_start_offset"] == 0
    table = run(cluster, "topic", "describe", "orders").stdout.splitlines()
    assert table[1].split()[:4] == ["PARTITION", "LEADER", "EPOCH", "REPLICAS"]
    assert len(table) == 2 + 3
    dry = run(cluster, "topic", "create", "never-made", "-p", "1", "--dry-run")
    assert "dry run" in dry.stdout
    assert "never-made" not in [t["topic"] for t in run_json(cluster, "topic", "list")]


def test_alter_config_is_visible_in_describe_config(cluster: LocalCluster) -> None:
    run(cluster, "topic", "create", "cfg", "-p", "1", "-r", "1",
        "-c", "cleanup.policy=compact")
    run(cluster, "topic", "alter-config", "cfg", "--set", "retention.ms=3600000",
        "--set", "max.message.bytes=200000", "--delete", "cleanup.policy")
    configs = run_json(cluster, "topic", "describe-config", "cfg")["configs"]
    assert configs["retention.ms"] == {**configs["retention.ms"], "value": "3600000",
                                       "source": "topic"}
    assert configs["max.message.bytes"]["value"] == "200000"
    assert configs["cleanup.policy"]["source"] == "default"
    assert configs["cleanup.policy"]["value"] == "delete"
    overrides = run(cluster, "topic", "describe-config", "cfg", "--overrides").stdout
    assert "retention.ms" in overrides and "cleanup.policy" not in overrides


def test_add_partitions_then_delete(cluster: LocalCluster) -> None:
    run(cluster, "topic", "create", "grow", "-p", "2", "-r", "2")
    added = run_json(cluster, "topic", "add-partitions", "grow", "--num", "2")
    assert added == [{"topic": "grow", "partitions_before": 2, "partitions": 4,
                      "dry_run": False}]
    assert len(run_json(cluster, "topic", "describe", "grow")[0]["partitions"]) == 4
    shrink = run(cluster, "topic", "add-partitions", "grow", "--total", "3", ok=False)
    assert_one_line_error(shrink, "grow", "INVALID_PARTITIONS", code=2)
    assert run_json(cluster, "topic", "delete", "grow") == [{"topic": "grow",
                                                             "status": "deleted"}]
    assert "grow" not in [t["topic"] for t in run_json(cluster, "topic", "list")]
    gone = run(cluster, "topic", "describe", "grow", ok=False)
    assert_one_line_error(gone, "'grow'", "does not exist", "tidelog topic list", code=2)


# ---------------------------------------------------------------------------- produce/consume
def test_produce_consume_round_trip_with_keys_and_headers(cluster: LocalCluster) -> None:
    run(cluster, "topic", "create", "events", "-p", "3", "-r", "3")
    wait_full_isr(cluster, "events")
    lines = [f"user-{i % 7}|event {i} ünïcode" for i in range(300)]
    summary = json.loads(run(cluster, "topic", "produce", "events", "--key-separator", "|",
                             "-H", "source=cli", "-H", "trace=a=b", "--format", "json",
                             stdin="\n".join(lines) + "\n").stdout)
    assert summary["records"] == 300 and summary["failed"] == 0
    assert sum(p["records"] for p in summary["partitions"]) == 300
    records = json_lines(run(cluster, "topic", "consume", "events", "--from-beginning",
                             "--num", "300", "--format", "json").stdout)
    assert len(records) == 300
    assert sorted(f"{r['key']}|{r['value']}" for r in records) == sorted(lines)
    assert all(r["headers"] == [{"key": "source", "value": "cli"},
                                {"key": "trace", "value": "a=b"}] for r in records)
    partition_of: dict[str, int] = {}
    for r in records:  # one key, one partition (murmur2), and offsets in order per partition
        assert partition_of.setdefault(r["key"], r["partition"]) == r["partition"]
    for p in range(3):
        offsets = [r["offset"] for r in records if r["partition"] == p]
        assert offsets == list(range(len(offsets)))
    described = run_json(cluster, "topic", "describe", "events")[0]["partitions"]
    by_partition = {p["partition"]: p for p in summary["partitions"]}
    for p in described:
        expected = by_partition.get(p["partition"], {"records": 0})["records"]
        assert p["high_watermark"] == p["log_end_offset"] == expected
        assert p["log_start_offset"] == 0 and (p["size_bytes"] > 0) == (expected > 0)


def test_piped_lines_and_start_positions(cluster: LocalCluster) -> None:
    run(cluster, "topic", "create", "piped", "-p", "1", "-r", "1")
    first = "".join(f"line {i}\n" for i in range(5000))
    started = time.monotonic()
    summary = run_json(cluster, "topic", "produce", "piped", "--acks", "1", stdin=first)
    assert summary["records"] == 5000, summary
    assert time.monotonic() - started < 15, "5,000 piped lines should take a few seconds"
    time.sleep(0.05)  # the second batch's create times are after `boundary`
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    run(cluster, "topic", "produce", "piped", "-p", "0", stdin="late 1\nlate 2\n")

    everything = run(cluster, "topic", "consume", "piped", "--from-beginning",
                     "--timeout-ms", "1500").stdout.splitlines()
    assert everything == [f"line {i}" for i in range(5000)] + ["late 1", "late 2"]
    middle = json_lines(run(cluster, "topic", "consume", "piped", "--offset", "10", "-n", "3",
                            "--partition", "0", "--format", "json").stdout)
    assert [(r["offset"], r["value"]) for r in middle] == [(10, "line 10"), (11, "line 11"),
                                                          (12, "line 12")]
    tail = run(cluster, "topic", "consume", "piped", "--offset", "-3", "--timeout-ms", "1000")
    assert tail.stdout.splitlines() == ["line 4999", "late 1", "late 2"]
    since = run(cluster, "topic", "consume", "piped", "--from-timestamp", str(boundary_ms),
                "--timeout-ms", "1000")
    assert since.stdout.splitlines() == ["late 1", "late 2"]
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(boundary_ms / 1000 - 3600))
    hour_ago = run(cluster, "topic", "consume", "piped", "--from-timestamp", iso, "-n", "1")
    assert hour_ago.stdout == "line 0\n"
    latest = run(cluster, "topic", "consume", "piped", "--timeout-ms", "500")
    assert latest.stdout == ""  # the default starts at the end, as Kafka's console consumer


# ---------------------------------------------------------------------------- consume --group
def start_consume(cluster: LocalCluster, out: Path, *args: str) -> subprocess.Popen[bytes]:
    """`tidelog topic consume ARGS` in the background, its stdout to ``out``."""
    env = dict(os.environ, TIDELOG_BROKERS=cluster.bootstrap)
    with out.open("wb") as stdout:
        return subprocess.Popen([sys.executable, "-m", "tidelog.cli", "topic", "consume", *args],
                                stdout=stdout, stderr=subprocess.PIPE, env=env)


def describe_group(cluster: LocalCluster, group: str) -> Any:
    from tidelog.client import Admin

    with Admin(cluster.bootstrap) as admin:
        return admin.describe_groups([group])[group]


def wait_group_stable(cluster: LocalCluster, group: str, members: int) -> None:
    """Until ``members`` members each own a non-empty assignment equal to their target at the
    group's epoch (the rebalance is over)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            g = describe_group(cluster, group)
        except Exception:  # the group does not exist until the first member joined
            g = None
        if g is not None and len(g.members) == members and all(
                m.assignment and set(m.assignment) == set(m.target_assignment)
                and m.member_epoch == g.group_epoch for m in g.members):
            return
        assert time.monotonic() < deadline, g
        time.sleep(0.2)


def read_lines_until(files: list[Path], count: int) -> list[list[dict[str, Any]]]:
    deadline = time.monotonic() + WAIT_S
    while True:
        per_file = [json_lines(f.read_text()) for f in files]
        if sum(len(lines) for lines in per_file) >= count:
            return per_file
        assert time.monotonic() < deadline, [len(lines) for lines in per_file]
        time.sleep(0.2)


def committed_ends(cluster: LocalCluster, group: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (committed offset, lag)."""
    from tidelog.client import Admin

    with Admin(cluster.bootstrap) as admin:
        offsets = admin.list_group_offsets(group)
    return {tp.partition: (o.offset, o.lag) for tp, o in offsets.items() if tp.topic == topic}


def test_consume_as_a_group_splits_commits_and_resumes(cluster: LocalCluster,
                                                       tmp_path: Path) -> None:
    """Two `consume --group` processes split the topic and read each record once; stopped by
    SIGTERM and Ctrl-C they commit and leave at once; a third run resumes after what they
    printed, and its --num exit commits too."""
    run(cluster, "topic", "create", "shared", "-p", "4", "-r", "3")
    wait_full_isr(cluster, "shared")
    outs = [tmp_path / "member-0.jsonl", tmp_path / "member-1.jsonl"]
    members = [start_consume(cluster, out, "shared", "--group", "readers", "--from-beginning",
                             "--format", "json") for out in outs]
    try:
        wait_group_stable(cluster, "readers", members=2)
        first = [f"k{i}|v{i}" for i in range(200)]  # 200 keys: every partition gets some
        run(cluster, "topic", "produce", "shared", "-k", "|", stdin="\n".join(first) + "\n")
        per_member = read_lines_until(outs, len(first))
        for m in per_member:  # each read its own partitions only, and some records
            assert m and {r["partition"] for r in m}.isdisjoint(
                {r["partition"] for other in per_member if other is not m for r in other})
        printed = [f"{r['key']}|{r['value']}" for m in per_member for r in m]
        assert sorted(printed) == sorted(first)
        members[0].send_signal(signal.SIGTERM)
        members[1].send_signal(signal.SIGINT)
        codes = [p.wait(timeout=COMMAND_TIMEOUT_S) for p in members]
        for p in members:
            assert p.stderr is not None and b"Traceback" not in p.stderr.read()
        assert codes == [128 + signal.SIGTERM, 128 + signal.SIGINT]
        # They left (not timed out: the session timeout is 6 s) and committed all they printed.
        assert describe_group(cluster, "readers").members == ()
        ends = {p["partition"]: p["high_watermark"]
                for p in run_json(cluster, "topic", "describe", "shared")[0]["partitions"]}
        assert committed_ends(cluster, "readers", "shared") == {p: (hw, 0)
                                                               for p, hw in ends.items()}
    finally:
        for p in members:
            if p.poll() is None:
                p.kill()
                p.wait()
    later = [f"k{i}|later {i}" for i in range(20)]
    run(cluster, "topic", "produce", "shared", "-k", "|", stdin="\n".join(later) + "\n")
    third = json_lines(run(cluster, "topic", "consume", "shared", "--group", "readers",
                           "--from-beginning", "--num", "20", "--format", "json").stdout)
    assert sorted(f"{r['key']}|{r['value']}" for r in third) == sorted(later)
    assert all(r["offset"] >= ends[r["partition"]] for r in third)
    assert all(lag == 0 for _, lag in committed_ends(cluster, "readers", "shared").values())
    again = run(cluster, "topic", "consume", "shared", "--group", "readers", "--from-beginning",
                "--timeout-ms", "1500")
    assert again.stdout == ""  # --num's exit committed the 20 too


# ---------------------------------------------------------------------------- mistakes
@pytest.mark.parametrize("args, stdin, fragments, code", [
    (("topic", "describe", "no-such-topic"), None, ("no-such-topic", "does not exist"), 2),
    (("topic", "consume", "no-such-topic", "-n", "1"), None, ("does not exist",), 2),
    (("topic", "produce", "no-such-topic"), "x\n", ("does not exist",), 2),
    (("topic", "describe-config", "no-such-topic"), None, ("does not exist",), 2),
    (("topic", "alter-config", "no-such-topic", "-s", "retention.ms=1"), None,
     ("does not exist",), 2),
    (("topic", "create", "bad-config", "-c", "no.such.config=1"), None,
     ("unknown topic config 'no.such.config'", "INVALID_CONFIG", "describe-config"), 2),
    (("topic", "create", "bad-value", "-c", "retention.ms=soon"), None,
     ("retention.ms", "not an integer"), 2),
    (("topic", "create", "bad-syntax", "-c", "retention.ms"), None,
     ("invalid -c 'retention.ms'", "KEY=VALUE"), 2),
    (("topic", "create", "too-many-replicas", "-r", "5"), None, ("replication factor",), 2),
    (("topic", "consume", "orders", "--offset", "soon"), None, ("invalid --offset",), 2),
    (("topic", "consume", "orders", "--group", "g", "-p", "0"), None,
     ("--partition cannot be used with --group",), 2),
    (("topic", "consume", "orders", "--group", "g", "--offset", "5"), None,
     ("cannot be used with --group", "tidelog group reset-offsets"), 2),
    (("topic", "consume", "orders", "-g", "g", "--from-timestamp", "0"), None,
     ("cannot be used with --group",), 2),
    (("topic", "consume", "orders", "--group", ""), None, ("invalid --group",), 2),
    (("topic", "create", "x", "-p", "many"), None, ("'many' is not a valid integer",
                                                     "tidelog topic create -h"), 2),
    (("topic", "list", "--brokers", "127.0.0.1:1"), None,
     ("cannot reach any broker", "127.0.0.1:1", "is the cluster running"), 1),
    (("topic", "produce", "orders", "--brokers", "127.0.0.1:1"), "x\n",
     ("cannot reach any broker",), 1),
    (("cluster", "health", "--brokers", "127.0.0.1:1"), None, ("cannot reach any broker",), 1),
    (("cluster", "info", "--brokers", "nohost:port"), None, ("invalid --brokers",), 2),
])
def test_mistakes_are_one_line_without_traceback(
    cluster: LocalCluster, args: tuple[str, ...], stdin: str | None, fragments: tuple[str, ...],
    code: int,
) -> None:
    assert_one_line_error(run(cluster, *args, stdin=stdin, ok=False), *fragments, code=code)


# ---------------------------------------------------------------------------- cluster
def test_cluster_info(cluster: LocalCluster) -> None:
    info = run_json(cluster, "cluster", "info")
    assert info["cluster_id"] == cluster.cluster_id
    assert [b["id"] for b in info["brokers"]] == [101, 102, 103]
    assert not any(b["fenced"] for b in info["brokers"])
    assert [c["id"] for c in info["controllers"]] == [1, 2, 3]
    leaders = [c["id"] for c in info["controllers"] if c["leader"]]
    assert leaders == [info["controller_id"]]
    assert "CONTROLLERS" in run(cluster, "cluster", "info").stdout


def test_health_fails_after_killing_two_brokers(cluster: LocalCluster) -> None:
    """Runs last in the module: it leaves two brokers dead."""
    run(cluster, "topic", "create", "critical", "-p", "2", "-r", "3",
        "-c", "min.insync.replicas=2")
    wait_full_isr(cluster, "critical")
    healthy = run_json(cluster, "cluster", "health")
    assert healthy["healthy"] is True and healthy["under_min_isr_partitions"] == []
    cluster.kill("broker-2")
    cluster.kill("broker-3")
    deadline = time.monotonic() + WAIT_S
    while True:  # until the controller has fenced both and shrunk the ISRs
        result = run(cluster, "cluster", "health", "--format", "json", ok=False)
        report = json.loads(result.stdout)
        if result.returncode != 0 and sorted(report["fenced_brokers"]) == [102, 103]:
            break
        assert time.monotonic() < deadline, result.stdout
        time.sleep(0.3)
    assert result.returncode == 3 and report["healthy"] is False
    critical = {(p["topic"], p["partition"]) for p in report["under_min_isr_partitions"]
                + report["offline_partitions"]}
    assert {("critical", 0), ("critical", 1)} <= critical
    assert_one_line_error(result, "cluster unhealthy")
    text = run(cluster, "cluster", "health", ok=False)
    assert text.returncode == 3 and "critical" in text.stdout and "healthy: no" in text.stdout
