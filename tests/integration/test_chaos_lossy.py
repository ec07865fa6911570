"""The chaos suite can fail: a cluster deliberately configured to lose data is reported as lossy.

The ``unclean-loss`` scenario (chaos/scenarios.py), run by the runner on its own cluster of 3
controller and 3 broker processes: one partition, RF 3, min.insync.replicas 1,
``unclean.leader.election.enable=true`` on the topic, an acks=1 and an acks=all producer (no
consumer but the final drain). Both followers are paused (SIGSTOP) past the session timeout, so
they are fenced and leave the ISR while the leader goes on acknowledging writes alone; then
the leader is killed (kill -9) and the followers resumed: the controller elects one of them
although it is not in the ISR (controller/managers/replication_control.py's unclean election),
and it lacks every write since the pause. The old leader, started again, truncates to it.

What must hold:

- under the run's own promise (not durable) the verdict is valid, yet the losses are counted
  and reported: ``lost-write`` > 0, none of them forbidden;
- the same history checked against the durable promise (acks=all, min.insync.replicas 2, no
  unclean election) is broken: the acks=all writes among them are forbidden lost writes;
- ``tidelog chaos check`` says the same: exit 0 with the run's result.json, exit 1 with
  ``--min-insync-replicas 2 --no-unclean-leader-election``.

About 25 s; every wait inside the runner is bounded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.chaos import scenarios
from tidelog.chaos.checkers import Promise, check_history
from tidelog.chaos.history import read_history
from tidelog.chaos.runner import RunOptions, run_scenario
from tidelog.cli import main

pytestmark = pytest.mark.integration


def _check(*args: str) -> int:
    try:
        main(["chaos", "check", *args])
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def test_an_unclean_election_after_lagging_followers_is_reported_as_lossy(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = scenarios.get("unclean-loss")
    outcome = run_scenario(RunOptions(scenario, seed=1, duration_s=scenario.min_duration_s,
                                      run_dir=tmp_path / "run"))
    lost = outcome.check.result("lost-write")
    assert lost.count > 0, "\n".join(outcome.summary)
    assert lost.forbidden_count == 0
    assert outcome.valid, outcome.summary
    assert not outcome.check.promise.durable
    # The same history against the promise acks=all writes survive.
    durable = check_history(read_history(outcome.run_dir / "history.jsonl"), Promise(3, 2, False))
    assert not durable.valid
    assert durable.result("lost-write").forbidden_count > 0
    assert all(a.details["acks"] == "all" for a in durable.result("lost-write").examples
               if a.forbidden)
    history = str(outcome.run_dir / "history.jsonl")
    assert _check(history) == 0
    assert _check(history, "--min-insync-replicas", "2", "--no-unclean-leader-election") == 1
    capsys.readouterr()
