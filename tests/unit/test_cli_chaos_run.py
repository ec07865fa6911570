"""``tidelog chaos list``, the usage errors of ``tidelog chaos run`` (exit 2, one line, nothing
started), and ``tidelog chaos check`` taking the promise from the run's result.json.

How: through ``tidelog.cli.main``, the console script's entry point, with stdout and stderr
captured. No cluster is started: every refused run fails before the runner starts anything
(the runs themselves are in tests/integration/test_chaos_smoke.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chaos_testkit import Builder

from tidelog.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(["chaos", *args])
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_list_names_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list")
    assert code == 0
    for name in ("kill-leader", "kill-controller", "pause-broker", "bridge", "flaky-link",
                 "kill-member", "kill-coordinator", "random", "unclean-loss"):
        assert name in out
    code, out, _ = run(capsys, "list", "--format", "json")
    rows = json.loads(out)
    assert len(rows) >= 12
    assert {r["scenario"]: r["links"] for r in rows}["isolate-controller"] == "yes"
    assert all(isinstance(r["min_duration_s"], (int, float)) for r in rows), \
        "durations are numbers in JSON"


@pytest.mark.parametrize(("args", "message"), [
    (["nope"], "error: unknown scenario 'nope' (scenarios: kill-leader, "),
    (["unclean-loss", "--duration", "10"],
     "error: scenario unclean-loss needs a duration of at least 19.5 s, got 10"),
    (["kill-leader", "--duration", "0"], "error: duration must be within"),
    (["bridge", "--cluster-dir", "CLUSTER"],
     "error: scenario bridge needs the cluster's links routed through proxies"),
    (["kill-leader", "--cluster-dir", "CLUSTER"], "error: no cluster at "),
    (["kill-leader", "--acks", "2"], "Invalid value for '--acks'"),
    (["kill-leader", "--seed", "-1"], "Invalid value for '--seed'"),
])
def test_run_usage_errors_exit_2_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
        message: str) -> None:
    args = [str(tmp_path / "nothing") if a == "CLUSTER" else a for a in args]
    code, _, err = run(capsys, "run", *args, "--dir", str(tmp_path / "run"))
    assert code == 2, err
    assert message in err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run" / "cluster").exists()


def test_run_refuses_a_directory_already_used(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "history.jsonl").write_text("")
    code, _, err = run(capsys, "run", "kill-leader", "--dir", str(tmp_path / "run"))
    assert code == 2
    assert "already exists and is not an empty directory" in err


def _lossy_run(tmp_path: Path, *, durable: bool) -> str:
    """A run's directory: an acks=all write lost (acknowledged, read past, never read), and
    the result.json of a run whose promise was durable or not."""
    b = Builder()
    b.send(0, 1, offset=0)
    b.send(0, 2, offset=1)
    b.poll(9, 0, [(0, 1, 2)], drain=True)
    (tmp_path / "history.jsonl").write_text("\n".join(b.lines()) + "\n")
    promise = {"replication_factor": 3, "min_insync_replicas": 2 if durable else 1,
               "unclean_leader_election": not durable, "durable": durable}
    (tmp_path / "result.json").write_text(json.dumps({"promise": promise}))
    return str(tmp_path / "history.jsonl")


def test_check_takes_the_promise_of_the_runs_result_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history = _lossy_run(tmp_path, durable=False)
    code, out, _ = run(capsys, "check", history)
    assert code == 0  # the run's promise allows it
    assert "min.insync.replicas 1, unclean leader election on" in out
    # The options win over result.json: checked against the durable promise, it is broken.
    code, _, err = run(capsys, "check", history, "--min-insync-replicas", "2",
                       "--no-unclean-leader-election")
    assert code == 1
    assert "error: the promise was broken: lost-write (1)" in err
    (tmp_path / "result.json").unlink()  # no result.json: the durable default
    code, _, _ = run(capsys, "check", history)
    assert code == 1


def test_check_refuses_a_result_json_it_cannot_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history = _lossy_run(tmp_path, durable=True)
    (tmp_path / "result.json").write_text('{"promise": {"replication_factor": 3}}')
    code, _, err = run(capsys, "check", history)
    assert code == 2
    assert "cannot read the promise in" in err
    (tmp_path / "result.json").write_text("{not json")
    code, _, err = run(capsys, "check", history)
    assert code == 2
    assert "invalid promise" in err
