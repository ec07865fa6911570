"""The chaos scenarios and their planner (chaos/scenarios.py), and the report's pure parts
(chaos/report.py): fault windows, recovery figures, the summary; the timeline PNG is drawn.

How: the planner is a pure function of (scenario, seed, duration), so its schedules are checked
exactly; the report is fed hand-made histories with known times (one ok acks=all send every
10 ms, a gap where a fault stopped the writes).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tidelog.chaos import scenarios
from tidelog.chaos.checkers import Promise, check_history
from tidelog.chaos.history import Entry, Fault, History, Op, Send
from tidelog.chaos.report import fault_windows, recovery, summary_lines, timeline
from tidelog.chaos.report_png import draw_timeline
from tidelog.chaos.scenarios import (
    COOLDOWN_S,
    SCENARIOS,
    WARMUP_S,
    FaultSpec,
    Scenario,
    get,
    plan,
)

ITEM_1_FAULTS = {
    ("kill", "leader", ""), ("kill", "active-controller", ""), ("pause", "leader", ""),
    ("restart", "leader", ""), ("kill-cluster", "", ""), ("partition", "leader", "isolate"),
    ("partition", "", "isolate-active-controller"),
    ("partition", "leader", "broker-from-controllers"), ("partition", "", "majority-minority"),
    ("partition", "", "bridge"), ("slow", "leader", ""), ("flaky", "leader", ""),
    ("kill-member", "", ""), ("kill", "coordinator", ""),
}


def test_there_are_at_least_12_scenarios_covering_every_fault_of_the_issue() -> None:
    assert len(SCENARIOS) >= 12
    found = {(f.kind, f.target, f.shape) for s in SCENARIOS.values() for f in s.faults}
    assert found >= ITEM_1_FAULTS
    assert SCENARIOS["random"].random


def test_every_scenario_plans_within_the_default_duration() -> None:
    for scenario in SCENARIOS.values():
        schedule = plan(scenario, seed=3)
        assert schedule.duration_s == scenarios.DURATION_S_DEFAULT
        for f in schedule.faults:
            assert WARMUP_S <= f.start_s < f.heal_s <= schedule.duration_s - COOLDOWN_S, (
                scenario.name, f)


def test_the_durable_promise_unless_the_scenario_is_about_losing_data() -> None:
    for scenario in SCENARIOS.values():
        if scenario.name == "unclean-loss":
            assert not scenario.promise.durable
            assert scenario.producer_acks == ("1", "all")
        else:
            assert scenario.promise == Promise(3, 2, False), scenario.name
            assert scenario.acks == "all"


def test_a_pause_outlasts_the_session_timeout() -> None:
    pause = get("pause-broker").faults[0]
    assert pause.kind == "pause" and pause.hold_s > scenarios.SESSION_TIMEOUT_S


def test_unclean_loss_kills_the_leader_while_the_followers_are_paused() -> None:
    schedule = plan(get("unclean-loss"), seed=0)
    pauses = [f for f in schedule.faults if f.spec.kind == "pause"]
    kill = next(f for f in schedule.faults if f.spec.kind == "kill")
    assert {f.spec.target for f in pauses} == {"follower-1", "follower-2"}
    for pause in pauses:
        # paused past the session timeout before the kill, resumed while the leader is down
        assert pause.start_s + scenarios.SESSION_TIMEOUT_S < kill.start_s < pause.heal_s
        assert pause.heal_s < kill.heal_s


def test_the_random_mix_is_a_function_of_the_seed() -> None:
    random = get("random")
    a, b = plan(random, 7, 60), plan(random, 7, 60)
    assert a == b and a.faults
    assert plan(random, 8, 60) != a
    kinds = {f.spec.kind for seed in range(30) for f in plan(random, seed, 60).faults}
    assert kinds == {"kill", "pause", "restart", "partition", "slow", "flaky"}
    for seed in range(30):
        faults = plan(random, seed, 60).faults
        for earlier, later in itertools.pairwise(faults):
            assert earlier.heal_s < later.start_s  # one fault at a time
        assert all(f.heal_s <= 60 - COOLDOWN_S for f in faults)


def test_events_heal_before_starting_at_the_same_second() -> None:
    s = Scenario("x", "x", (FaultSpec("kill", "leader", at_s=0, hold_s=2),
                            FaultSpec("pause", "leader", at_s=2, hold_s=2)))
    assert plan(s, 0, 12).events() == [(3.0, "start", 0), (5.0, "heal", 0),
                                       (5.0, "start", 1), (7.0, "heal", 1)]


def test_bad_input_is_refused_naming_the_problem() -> None:
    with pytest.raises(KeyError, match=r"unknown scenario 'nope' .*kill-leader"):
        get("nope")
    with pytest.raises(ValueError, match=r"needs a duration of at least 19\.5 s, got 10"):
        plan(get("unclean-loss"), 0, 10)
    with pytest.raises(ValueError, match="duration must be within"):
        plan(get("kill-leader"), 0, 1)
    with pytest.raises(ValueError, match="a shape goes with a partition"):
        FaultSpec("partition")
    with pytest.raises(ValueError, match="unknown partition shape"):
        FaultSpec("partition", shape="ring")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hold_s must be positive"):
        FaultSpec("kill", "leader", hold_s=0)


def test_with_acks_changes_the_producers_not_the_promise() -> None:
    s = get("kill-leader").with_acks("1")
    assert s.acks == "1" and s.acks_label == "1"
    assert s.promise == get("kill-leader").promise
    assert get("unclean-loss").with_acks("all").acks_label == "all"


# -- the report


MS = 1_000_000


def _history(ops: list[Op]) -> History:
    return History(tuple(Entry(i + 1, op) for i, op in enumerate(ops)))


def _sends(start_ms: int, end_ms: int, *, every_ms: int = 10, latency_ms: int = 5,
           first_value: int = 0) -> list[Op]:
    ops: list[Op] = []
    for n, t in enumerate(range(start_ms, end_ms, every_ms)):
        invoke = Send("invoke", 0, t * MS, "q", first_value + n, "all", True)
        ops += [invoke, Send("ok", 0, (t + latency_ms) * MS, "q", first_value + n, "all", True,
                             0, first_value + n)]
    return ops


def _faulted() -> History:
    """Writes every 10 ms for 10 s except while the fault (4 s -> 6 s) and until 7 s."""
    ops = _sends(0, 4_000)
    ops += [Fault("invoke", "start", 4_000 * MS, "kill-leader"),
            Fault("ok", "start", 4_010 * MS, "kill-leader", ("broker-2",))]
    ops += [Fault("invoke", "stop", 6_000 * MS, "kill-leader", ("broker-2",)),
            Fault("ok", "stop", 6_100 * MS, "kill-leader", ("broker-2",))]
    ops += _sends(7_000, 10_000, first_value=400)
    return _history(ops)


def test_fault_windows_and_recovery_from_the_history() -> None:
    history = _faulted()
    windows = fault_windows(history)
    assert [(w.name, w.targets, w.start_s, w.heal_s) for w in windows] == [
        ("kill-leader", ("broker-2",), 4.0, 6.1)]
    [r] = recovery(history, windows)
    # The first acks=all send invoked after the heal (6.1 s) is the one at 7.0 s, acked 7.005.
    assert r.first_write_after_heal_s == pytest.approx(0.905)
    assert r.first_write_after_start_s == pytest.approx(3.005)
    # 100 sends/s before; the bucket [7.0, 7.5) is the first back at 90%: its end - heal.
    assert r.throughput_after_heal_s == pytest.approx(1.4)
    assert r.throughput_after_start_s == pytest.approx(3.5)


def test_recovery_without_a_dip_and_without_a_heal() -> None:
    ops = [*_sends(0, 4000), Fault("invoke", "start", 2000 * MS, "slow-broker-1"),
           Fault("ok", "start", 2001 * MS, "slow-broker-1")]
    history = _history(ops)
    [w] = fault_windows(history)
    assert w.heal_s is None
    [r] = recovery(history, [w])
    assert r.throughput_after_start_s == 0.0  # throughput never fell
    assert r.first_write_after_heal_s is None and r.throughput_after_heal_s is None


def test_timeline_latencies_and_buckets() -> None:
    line = timeline(_faulted())
    assert len(line.sends) == 700
    assert {p.latency_ms for p in line.sends} == {5.0}
    assert line.rate(2) == 100.0 and line.rate(10) == 0.0  # [1.0, 1.5) and [5.0, 5.5)


def test_the_summary_names_faults_counts_and_verdict(tmp_path: Path) -> None:
    history = _faulted()
    check = check_history(history, Promise())
    windows = fault_windows(history)
    lines = summary_lines(scenario="kill-leader", seed=4, run_dir="/r", check=check,
                          windows=windows, recoveries=recovery(history, windows))
    text = "\n".join(lines)
    assert "scenario kill-leader (seed 4): /r" in text
    assert "kill-leader on broker-2: 4.0 s -> 6.1 s" in text
    assert "0.9 s after heal" in text
    assert "lost-write" in text and text.endswith("verdict: the promise held")
    assert len(lines) < 40  # one screen
    draw_timeline(timeline(history), windows, tmp_path / "t.png", title="t")
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
