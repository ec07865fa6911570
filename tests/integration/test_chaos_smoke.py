"""A smoke of the chaos suite (make test): two scenarios end to end, each on its own cluster of
3 controller and 3 broker processes that the runner starts and stops itself.

* ``kill-leader`` through the CLI's entry point (``tidelog chaos run kill-leader --format
  json``), as a user runs it: exit 0, the promise held, the run's directory holds
  history.jsonl, result.json, summary.txt and timeline.png, the history records the fault's
  start and stop and the workload's sends and polls, the recovery figures are measured, and
  ``tidelog chaos check`` re-checks the stored history under the run's promise (exit 0);
* ``isolate-controller`` through :func:`chaos.runner.run_scenario`, on a cluster whose links go
  through Toxiproxy-compatible proxies: the active controller's links were cut and healed, the
  promise held.

After each run no process of its cluster is left running (the runner stops them by pid). Every
wait inside the runner is bounded; the module takes about 40 s.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tidelog.chaos import scenarios
from tidelog.chaos.history import Fault, Poll, Send, read_history
from tidelog.chaos.runner import RunOptions, run_scenario
from tidelog.cli import main

pytestmark = pytest.mark.integration

DURATION_S = 13.0


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _nothing_left_running(run_dir: Path) -> None:
    state = json.loads((run_dir / "cluster" / "cluster.json").read_text())
    for node in state["nodes"]:
        pid = node["pid"]
        if pid:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            assert stat == "Z", f"{node['name']} (pid {pid}) still running"


def test_kill_leader_through_the_cli(tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "kill-leader"
    code, out, err = _cli(capsys, "chaos", "run", "kill-leader", "--seed", "3", "--duration",
                          str(DURATION_S), "--dir", str(run_dir), "--format", "json")
    assert code == 0, err
    result = json.loads(out)
    assert result["valid"] and result["check"]["forbidden_kinds"] == []
    assert result["promise"]["durable"]
    for name in ("history.jsonl", "result.json", "summary.txt", "timeline.png"):
        assert (run_dir / name).is_file(), name
    assert (run_dir / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert "verdict: the promise held" in (run_dir / "summary.txt").read_text()
    assert "starting a local cluster" in err  # the progress lines
    history = read_history(run_dir / "history.jsonl")
    faults = [e.op for e in history if isinstance(e.op, Fault)]
    assert [(f.f, f.type) for f in faults] == [("start", "invoke"), ("start", "ok"),
                                               ("stop", "invoke"), ("stop", "ok")]
    assert faults[1].fault == "kill-leader" and faults[1].targets[0].startswith("broker-")
    assert sum(isinstance(e.op, Send) and e.op.type == "ok" for e in history) > 300
    assert any(isinstance(e.op, Poll) and e.op.drain for e in history)
    [rec] = result["recovery"]
    assert rec["first_write_after_heal_s"] is not None
    assert rec["first_write_after_start_s"] is not None
    assert result["drain"]["complete"], result["drain"]
    _nothing_left_running(run_dir)
    code, out, _ = _cli(capsys, "chaos", "check", str(run_dir / "history.jsonl"))
    assert code == 0 and "verdict: the promise held" in out


def test_isolate_controller_on_a_routed_cluster(tmp_path: Path) -> None:
    run_dir = tmp_path / "isolate-controller"
    outcome = run_scenario(RunOptions(scenarios.get("isolate-controller"), seed=3,
                                      duration_s=DURATION_S, run_dir=run_dir))
    assert outcome.valid, outcome.summary
    [window] = outcome.result["faults"]
    assert window["fault"] == "partition-isolate-active-controller"
    assert window["heal_s"] is not None and window["error"] is None
    # Every link to and from one controller: from the 3 brokers, and the Raft links with the
    # 2 other controllers both ways.
    cut = window["targets"]
    [controller] = set.intersection(*(set(link.split(">")) for link in cut))
    assert controller.startswith("controller-") and len(cut) == 7, cut
    assert outcome.result["notes"] == [], outcome.result["notes"]
    _nothing_left_running(run_dir)
