"""``tidelog chaos check HISTORY``: re-check a chaos run's history (``chaos list`` and ``chaos
run`` come with the nemeses and workloads).

``check`` reads a ``history.jsonl`` (chaos/history.py; the format is in docs/chaos.md), runs
every checker (chaos/checkers) under the scenario's promise, given by ``--replication-factor``,
``--min-insync-replicas`` and ``--unclean-leader-election`` (default: 3, 2, off: the promise
that acks=all writes survive), and prints a one-screen summary (operation counts, each
anomaly kind's count and how many the promise forbids, the first few anomalies with the lines
that show them) or, with ``--format json``, the whole result (field names in docs/chaos.md).

Exit codes: 0 when the promise held, 1 when an anomaly it forbids was found (an ``error:``
line on stderr names the kinds), 2 for a usage error or a history that cannot be read or is
invalid (one line naming the file, the line number and the reason).

The chaos/ package is imported inside the command, not at module level: production code never
imports chaos/ (tests/unit/test_import_contracts.py), and ``tidelog`` starts without it.
"""

from __future__ import annotations

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


@click.group(cls=OneLineGroup)
def chaos() -> None:
    """Check what clients saw while a cluster was broken on purpose (Jepsen-style)."""


@chaos.command("check", cls=OneLineCommand)
@click.argument("history", type=click.Path(dir_okay=False, path_type=str))
@click.option("--replication-factor", type=click.IntRange(min=1), default=3, show_default=True,
              help="the topics' replication factor in the run")
@click.option("--min-insync-replicas", type=click.IntRange(min=1), default=2,
              show_default=True, help="the topics' min.insync.replicas in the run")
@click.option("--unclean-leader-election/--no-unclean-leader-election", default=False,
              show_default=True, help="whether the run allowed unclean leader election")
@format_option
def check_cmd(history: str, replication_factor: int, min_insync_replicas: int,
              unclean_leader_election: bool, fmt: str) -> None:
    """Check a chaos run's HISTORY (history.jsonl) for lost, duplicated, inconsistent and
    skipped records; exit 1 when the promise was broken."""
    from chaos.checkers import Promise, check_history
    from chaos.history import HistoryError, read_history

    try:
        promise = Promise(replication_factor, min_insync_replicas, unclean_leader_election)
    except ValueError as e:
        raise CliError(f"invalid promise: {e}") from None
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


def _summary(history: str, result: Any) -> None:
    """``result`` is a chaos.checkers.HistoryCheck (not imported here: see the docstring)."""
    from chaos.history import encode_op

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
