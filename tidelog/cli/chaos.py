"""``tidelog chaos list|run|check``: break a cluster on purpose and check what its clients saw
(Jepsen-style; docs/chaos.md).

``list`` prints the named scenarios (chaos/scenarios.py) and what each does. ``run SCENARIO``
runs one (chaos/runner.py): against a local cluster it starts itself in the run's directory
(``--dir``, default a new one under ./chaos-runs/), or an existing ``tidelog cluster up``
cluster (``--cluster-dir``, process faults only), with its links faulted through proxies or,
with ``--network netns``, each node in a network namespace of its own (chaos/netns/), with a
progress line on stderr, then prints the one-screen summary (or, with ``--format json``,
result.json) and leaves history.jsonl,
result.json, summary.txt and timeline.png in the run's directory. ``check HISTORY`` re-checks a
stored history (chaos/history.py) with every checker (chaos/checkers) under a promise: the
one given by ``--replication-factor``, ``--min-insync-replicas`` and
``--unclean-leader-election`` when any is given, else the one in the ``result.json`` beside the
history (the run's own), else 3, 2, off (the promise that acks=all writes survive); it prints
the operation counts, each anomaly kind's count and how many the promise forbids, the first
few anomalies with the lines that show them, or with ``--format json`` the whole result.

Exit codes of ``run`` and ``check``: 0 when the promise held, 1 when an anomaly it forbids was
found (an ``error:`` line on stderr names the kinds; for ``run`` also a run that failed), 2
for a usage error (an unknown scenario, a duration too short for it, link faults with
``--cluster-dir``, a history that cannot be read or is invalid: one line naming the file, the
line number and the reason).

The chaos/ package is imported inside the commands, not at module level: production code never
imports chaos/ (tests/unit/test_import_contracts.py), and ``tidelog`` starts without it. Its
libraries are an extra (``pip install 'tidelog[chaos]'``): without them every ``tidelog chaos``
command stops with one ``error:`` line saying what to install (exit code 2).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import click

from tidelog.cli.common import (
    EXIT_FAILURE,
    CliError,
    OneLineCommand,
    OneLineGroup,
    echo_json,
    format_option,
    table,
)

__all__ = ["chaos"]

#: Anomalies printed per kind in the text summary (--format json has the checkers' full cap).
EXAMPLES_SHOWN = 3


#: What the chaos suite needs beyond a client install: module -> distribution (the "chaos"
#: extra of pyproject.toml).
CHAOS_EXTRA = {"toxiproxy": "toxiproxy-python", "aiohttp": "aiohttp", "matplotlib": "matplotlib"}


def missing_chaos_extra() -> list[str]:
    """The distributions of the chaos extra that are not installed (looked up, not imported:
    matplotlib alone takes a third of a second)."""
    missing = []
    for module, distribution in CHAOS_EXTRA.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ValueError:  # in sys.modules as None: blocked
            found = False
        if not found:
            missing.append(distribution)
    return missing


@click.group(cls=OneLineGroup)
def chaos() -> None:
    """Check what clients saw while a cluster was broken on purpose (Jepsen-style)."""
    missing = missing_chaos_extra()
    if missing:
        raise CliError(f"tidelog chaos needs the chaos extra ({', '.join(missing)} not "
                       f"installed): pip install 'tidelog[chaos]'")


@chaos.command("list", cls=OneLineCommand)
@format_option
def list_cmd(fmt: str) -> None:
    """The named scenarios and what each does."""
    from tidelog.chaos.scenarios import SCENARIOS

    rows = [{"scenario": s.name, "links": "yes" if s.needs_links else "no",
             "acks": s.acks_label, "min_duration_s": s.min_duration_s,
             "description": s.description} for s in SCENARIOS.values()]
    if fmt == "json":
        echo_json(rows)  # min_duration_s a number here, 12 rather than 12.0 in the table
        return
    table([{**r, "min_duration_s": f"{r['min_duration_s']:g}"} for r in rows])
    click.echo("\nlinks: the scenario cuts or slows links, so it needs a cluster the runner "
               "starts (not --cluster-dir)")


@chaos.command("run", cls=OneLineCommand)
@click.argument("scenario")
@click.option("--seed", type=click.IntRange(min=0, max=2**63 - 1), default=None,
              help="seeds the schedule (the random mix, partition sides); default: drawn "
                   "and printed")
@click.option("--duration", type=float, default=None,
              help="seconds the workload runs  [default: 20]")
@click.option("--acks", type=click.Choice(["all", "1", "0"]), default=None,
              help="the producers' acks  [default: the scenario's, all for most]")
@click.option("--dir", "run_dir", type=click.Path(file_okay=False, path_type=str),
              default=None, help="the run's directory  [default: ./chaos-runs/<new>]")
@click.option("--cluster-dir", type=click.Path(file_okay=False, path_type=str), default=None,
              help="run against the cluster `tidelog cluster up --dir` started (process "
                   "faults only)")
@click.option("--network", type=click.Choice(["proxy", "netns"]), default="proxy",
              show_default=True,
              help="how links are faulted: through proxies, or each node in its own network "
                   "namespace with tc (root, ip, tc; docs/chaos.md)")
@format_option
def run_cmd(scenario: str, seed: int | None, duration: float | None, acks: str | None,
            run_dir: str | None, cluster_dir: str | None, network: str, fmt: str) -> None:
    """Run SCENARIO against a cluster while recording every client operation, then check
    the history; exit 1 when the promise was broken."""
    import random
    from pathlib import Path

    from tidelog.chaos import scenarios
    from tidelog.chaos.runner import RunOptions, UsageError, run_scenario

    try:
        chosen = scenarios.get(scenario)
    except KeyError as e:
        raise CliError(str(e.args[0])) from None
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    netns_plan = None
    if network == "netns":
        if cluster_dir is not None:
            raise CliError("--network netns puts the nodes of a cluster the runner starts in "
                           "namespaces; it cannot run against --cluster-dir")
        netns_plan = _netns_plan_or_exit(chosen, [
            "chaos", "run", scenario, "--network", "netns", "--seed", str(seed),
            *(["--duration", repr(duration)] if duration is not None else []),
            *(["--acks", acks] if acks else []), *(["--dir", run_dir] if run_dir else []),
            "--format", fmt])
    options = RunOptions(
        chosen, seed=seed, network=network, netns_plan=netns_plan,
        duration_s=scenarios.DURATION_S_DEFAULT if duration is None else duration,
        acks=acks,  # type: ignore[arg-type]  # one of the click choices
        run_dir=Path(run_dir) if run_dir else None,
        cluster_dir=Path(cluster_dir) if cluster_dir else None, progress=_Progress())
    try:
        outcome = run_scenario(options)
    except UsageError as e:
        raise CliError(str(e)) from None
    finally:
        options.progress("")
    if fmt == "json":
        echo_json(outcome.result)
    else:
        click.echo("\n".join(outcome.summary))
    if not outcome.valid:
        raise CliError(f"the promise was broken: {', '.join(outcome.check.forbidden_kinds)} "
                       f"(evidence in {outcome.run_dir / 'result.json'})", EXIT_FAILURE)


def _netns_plan_or_exit(chosen: Any, argv: list[str]) -> Any:
    """Inside the netns mode's client namespace: the run's plan (a chaos.netns.NetnsPlan).
    Outside: create the namespaces, run ``tidelog <argv>`` inside and exit with its code
    (2 with one line when the machine cannot: chaos/netns/session.py)."""
    from tidelog.chaos.netns import session
    from tidelog.chaos.runner import BROKERS, CONTROLLERS

    try:
        plan = session.plan_from_env()
    except ValueError as e:
        raise CliError(str(e)) from None
    if plan is not None:
        return plan
    netem = chosen.random or any(f.kind in ("slow", "flaky") for f in chosen.faults)
    code = session.run_outside(session.cluster_nodes(CONTROLLERS, BROKERS), argv, netem=netem)
    if isinstance(code, str):
        raise CliError(code)
    raise click.exceptions.Exit(code)


class _Progress:
    """The progress line on stderr: rewritten in place on a terminal; elsewhere (a log) a
    line when the phase changes and every 5 s of the workload."""

    EVERY_S = 5.0

    def __init__(self) -> None:
        import sys

        self.tty = sys.stderr.isatty()
        self.last = ""
        self.printed_at = 0.0

    def __call__(self, line: str) -> None:
        import time

        if self.tty:
            if line or self.last:
                click.echo("\r" + line.ljust(len(self.last)) + ("" if line else "\r"),
                           err=True, nl=False)
            self.last = line
            return
        now = time.monotonic()
        phase_changed = not line.startswith("[") or not self.last.startswith("[")
        if line and (phase_changed or now - self.printed_at >= self.EVERY_S):
            click.echo(line, err=True)
            self.printed_at = now
        self.last = line


@chaos.command("check", cls=OneLineCommand)
@click.argument("history", type=click.Path(dir_okay=False, path_type=str))
@click.option("--replication-factor", type=click.IntRange(min=1), default=None,
              help="the topics' replication factor in the run  [default: result.json's, "
                   "else 3]")
@click.option("--min-insync-replicas", type=click.IntRange(min=1), default=None,
              help="the topics' min.insync.replicas in the run  [default: result.json's, "
                   "else 2]")
@click.option("--unclean-leader-election/--no-unclean-leader-election", default=None,
              help="whether the run allowed unclean leader election  [default: "
                   "result.json's, else off]")
@format_option
def check_cmd(history: str, replication_factor: int | None, min_insync_replicas: int | None,
              unclean_leader_election: bool | None, fmt: str) -> None:
    """Check a chaos run's HISTORY (history.jsonl) for lost, duplicated, inconsistent and
    skipped records; exit 1 when the promise was broken."""
    from tidelog.chaos.checkers import check_history
    from tidelog.chaos.history import HistoryError, read_history

    promise = _promise(history, replication_factor, min_insync_replicas,
                       unclean_leader_election)
    try:
        ops = read_history(history)
    except OSError as e:
        raise CliError(f"cannot read history {history}: {e.strerror or e}") from None
    except HistoryError as e:
        raise CliError(f"invalid history {history}: {e}") from None
    result = check_history(ops, promise)
    if fmt == "json":
        echo_json({"history": history, **result.to_json()})
    else:
        _summary(history, result)
    if not result.valid:
        broken = ", ".join(f"{r.kind} ({r.forbidden_count})" for r in result.results
                           if r.forbidden_count)
        raise CliError(f"the promise was broken: {broken}", EXIT_FAILURE)


def _promise(history: str, replication_factor: int | None, min_insync_replicas: int | None,
             unclean_leader_election: bool | None) -> Any:
    """The options' promise when any is given, else result.json's beside the history, else
    the durable default (a chaos.checkers.Promise)."""
    import json
    from pathlib import Path

    from tidelog.chaos.checkers import Promise

    given = (replication_factor, min_insync_replicas, unclean_leader_election)
    saved = Path(history).with_name("result.json")
    try:
        if all(v is None for v in given) and saved.is_file():
            p = json.loads(saved.read_text())["promise"]
            return Promise(int(p["replication_factor"]), int(p["min_insync_replicas"]),
                           bool(p["unclean_leader_election"]))
        return Promise(3 if replication_factor is None else replication_factor,
                       2 if min_insync_replicas is None else min_insync_replicas,
                       bool(unclean_leader_election))
    except ValueError as e:  # json.JSONDecodeError included
        raise CliError(f"invalid promise: {e}") from None
    except (OSError, KeyError, TypeError) as e:
        raise CliError(f"cannot read the promise in {saved}: {e!r}") from None


def _summary(history: str, result: Any) -> None:
    """``result`` is a chaos.checkers.HistoryCheck (not imported here: see the docstring)."""
    from tidelog.chaos.history import encode_op

    counts = ", ".join(f"{f} " + " / ".join(f"{n} {t}" for t, n in types.items() if n)
                       for f, types in sorted(result.op_counts.items()))
    p = result.promise
    click.echo(f"history: {history}: {counts or 'no operations'}")
    click.echo(f"promise: replication factor {p.replication_factor}, min.insync.replicas "
               f"{p.min_insync_replicas}, unclean leader election "
               f"{'on' if p.unclean_leader_election else 'off'}"
               f" ({'acks=all writes must survive' if p.durable else 'not durable'})")
    click.echo("")
    table([{"anomaly": r.kind, "count": r.count, "forbidden": r.forbidden_count}
           for r in result.results])
    for r in result.results:
        for anomaly in r.examples[:EXAMPLES_SHOWN]:
            mark = "FORBIDDEN" if anomaly.forbidden else "allowed"
            click.echo(f"\n{r.kind} ({mark}): {anomaly.message}")
            for entry in anomaly.evidence:
                click.echo(f"  line {entry.line}: {encode_op(entry.op)}")
        if r.count > EXAMPLES_SHOWN:
            click.echo(f"  ... {r.count - EXAMPLES_SHOWN} more {r.kind} (--format json "
                       f"lists up to {len(r.examples)})")
    click.echo("")
    click.echo("verdict: the promise held" if result.valid else
               "verdict: BROKEN (" + ", ".join(result.forbidden_kinds) + ")")
