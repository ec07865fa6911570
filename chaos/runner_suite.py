"""``make chaos``: every named scenario once, one after another, and a table of their figures.

    python -m tidelog.chaos.runner_suite [--duration S] [--seed N] [--dir D] [SCENARIO ...]

Each scenario runs as ``tidelog chaos run`` would (chaos/runner.py: its own cluster, started
and stopped by the run) in ``D/<scenario>`` (default ``chaos-runs/suite-<time>/``). At the end
it prints, and writes to ``D/suite.json``, per scenario: operations, faults, anomalies (all and
forbidden), recovery times, the verdict and how long the run took, and the suite's running
time. Exit 0 when every scenario's promise held, 1 otherwise (a run that failed counts as
broken: its error is printed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from tidelog.chaos.runner import RUNS_DIR, RunOptions, run_scenario
from tidelog.chaos.scenarios import DURATION_S_DEFAULT, SCENARIOS

__all__ = ["figures", "main"]


def figures(result: dict[str, Any]) -> dict[str, Any]:
    """One row of the suite's table from a run's result.json."""
    check = result["check"]
    anomalies = {k: a["count"] for k, a in check["anomalies"].items() if a["count"]}
    ops = sum(sum(types.values()) for f, types in check["ops"].items()
              if f in ("send", "poll"))
    recoveries = result["recovery"]
    return {
        "scenario": result["scenario"], "ops": ops,
        "faults": ", ".join(f["fault"] for f in result["faults"]) or "-",
        "anomalies": ", ".join(f"{k} {n}" for k, n in anomalies.items()) or "none",
        "forbidden": ", ".join(check["forbidden_kinds"]) or "none",
        "write_after_heal_s": _worst(r["first_write_after_heal_s"] for r in recoveries),
        "throughput_after_heal_s": _worst(r["throughput_after_heal_s"] for r in recoveries),
        "write_after_start_s": _worst(r["first_write_after_start_s"] for r in recoveries),
        "valid": result["valid"], "elapsed_s": result["elapsed_s"],
    }


def _worst(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidelog.chaos.runner_suite")
    parser.add_argument("scenarios", nargs="*", default=list(SCENARIOS))
    parser.add_argument("--duration", type=float, default=DURATION_S_DEFAULT)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(unknown)}")
    base = args.dir or RUNS_DIR / f"suite-{time.strftime('%Y%m%d-%H%M%S')}"
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    for name in args.scenarios:
        scenario = SCENARIOS[name]
        duration = max(args.duration, scenario.min_duration_s)
        print(f"== {name} ({duration:g} s)", flush=True)
        try:
            outcome = run_scenario(RunOptions(scenario, seed=args.seed, duration_s=duration,
                                              run_dir=base / name))
        except Exception as e:  # the suite goes on; the run counts as broken
            print(f"   failed: {type(e).__name__}: {e}", flush=True)
            rows.append({"scenario": name, "valid": False, "error": f"{e}"[:300]})
            continue
        rows.append(figures(outcome.result))
        print("   " + "\n   ".join(outcome.summary[-3:]), flush=True)
    elapsed = time.monotonic() - started
    (base / "suite.json").write_text(json.dumps({"elapsed_s": round(elapsed), "runs": rows},
                                                indent=1) + "\n")
    print(f"\n{'scenario':<24}{'ops':>7}  {'write/heal':>10} {'90%/heal':>9} {'run':>5}  "
          "anomalies (forbidden)")
    for r in rows:
        if "error" in r:
            print(f"{r['scenario']:<24} FAILED: {r['error']}")
            continue
        print(f"{r['scenario']:<24}{r['ops']:>7}  {_s(r['write_after_heal_s']):>10} "
              f"{_s(r['throughput_after_heal_s']):>9} {r['elapsed_s']:>4.0f}s  "
              f"{r['anomalies']} ({r['forbidden']})")
    print(f"\nsuite: {len(rows)} scenarios in {elapsed:.0f} s; {base / 'suite.json'}")
    return 0 if all(r["valid"] for r in rows) else 1


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


if __name__ == "__main__":
    sys.exit(main())
