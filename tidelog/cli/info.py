"""``tidelog cluster info`` and ``tidelog cluster health``: the cluster as its brokers see it.

Unlike the rest of the ``cluster`` group (tidelog/cli/cluster.py, which adds these two to it),
which manages local processes found through ``--dir``, these commands ask any cluster through
its brokers (``--brokers``, default ``$TIDELOG_BROKERS``), like ``rpk cluster info`` /
``rpk cluster health``.

``health`` exits with :data:`EXIT_UNHEALTHY` when a partition is offline (no leader) or has fewer
in-sync replicas than its topic's ``min.insync.replicas`` (acks=all writes to it fail), or when
the controller quorum has no leader. Under-replicated partitions and fenced brokers are reported
but do not fail the check: the cluster still serves every read and write then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from tidelog.cli.common import (
    CliError,
    OneLineCommand,
    admin_client,
    brokers_option,
    echo_json,
    format_option,
    ids,
    table,
    timeout_option,
)
from tidelog.errors import TidelogError

if TYPE_CHECKING:
    from tidelog.client import Admin, QuorumDescription

__all__ = ["EXIT_UNHEALTHY", "health", "info"]

#: Distinct from 1 (the cluster could not be asked) and 2 (a usage mistake), so a monitoring
#: script can tell "unhealthy" from "could not check".
EXIT_UNHEALTHY = 3
#: Table output lists at most this many partitions per kind (JSON lists all), so the report of
#: a large broken cluster stays readable.
TABLE_PARTITIONS_MAX = 50


@click.command("info", cls=OneLineCommand)
@brokers_option
@timeout_option
@format_option
def info(brokers: str, timeout_ms: int, fmt: str) -> None:
    """Show brokers, controllers and who leads."""
    with admin_client(brokers, timeout_ms, "cannot describe the cluster") as admin:
        described = admin.describe_cluster()
        quorum, quorum_error = _quorum(admin)
    doc: dict[str, Any] = {
        "cluster_id": described.cluster_id,
        "controller_id": described.controller_id,
        "metadata_offset": described.metadata_offset,
        "brokers": [{"id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack,
                     "fenced": b.fenced} for b in described.brokers],
        "quorum_leader_epoch": quorum.leader_epoch if quorum else None,
        "controllers": None if quorum is None else [
            {"id": v.node_id, "host": v.host, "port": v.port, "leader": v.is_leader,
             "connected": v.connected, "lag": v.lag} for v in quorum.voters],
        "quorum_error": quorum_error,
    }
    if fmt == "json":
        echo_json(doc)
        return
    leader = described.controller_id if described.controller_id >= 0 else "none"
    click.echo(f"cluster {described.cluster_id}   active controller: {leader}   metadata "
               f"offset: {described.metadata_offset}")
    click.echo("\nBROKERS")
    table([{"id": b["id"], "host": b["host"], "port": b["port"], "rack": b["rack"] or "-",
             "status": "fenced" if b["fenced"] else "active"} for b in doc["brokers"]])
    click.echo("\nCONTROLLERS" + (f" (leader epoch {quorum.leader_epoch})" if quorum else ""))
    if quorum is None:
        click.echo(f"(not available: {quorum_error})")
    else:
        table([{"id": c["id"], "host": c["host"], "port": c["port"],
                 "role": "leader" if c["leader"] else "follower",
                 "connected": "yes" if c["connected"] else "no", "lag": c["lag"]}
                for c in doc["controllers"]])


def _quorum(admin: Admin) -> tuple[QuorumDescription | None, str | None]:
    """The quorum's view, or why there is none: a broker that cannot reach the controllers still
    answers the rest of the report from its metadata image."""
    try:
        return admin.describe_quorum(), None
    except TidelogError as e:
        return None, f"{e.message} ({e.code_name})"


@dataclass
class _Health:
    controller_leader: int = -1
    brokers: list[int] = field(default_factory=list)
    fenced_brokers: list[int] = field(default_factory=list)
    offline: list[dict[str, Any]] = field(default_factory=list)
    under_min_isr: list[dict[str, Any]] = field(default_factory=list)
    under_replicated: list[dict[str, Any]] = field(default_factory=list)
    quorum_error: str | None = None

    @property
    def problems(self) -> list[str]:
        """Why the cluster is unhealthy, one phrase each; empty when healthy."""
        out = []
        if self.offline:
            out.append(f"{len(self.offline)} partition(s) offline")
        if self.under_min_isr:
            out.append(f"{len(self.under_min_isr)} partition(s) under min.insync.replicas")
        if self.controller_leader < 0:
            out.append("the controller quorum has no leader"
                       + (f" ({self.quorum_error})" if self.quorum_error else ""))
        return out


@click.command("health", cls=OneLineCommand)
@brokers_option
@timeout_option
@format_option
def health(brokers: str, timeout_ms: int, fmt: str) -> None:
    """Check for offline and under-min-ISR partitions.

    Lists offline partitions (no leader), partitions whose ISR is smaller than their topic's
    min.insync.replicas, under-replicated partitions and fenced brokers. Exits 3 when a
    partition is offline or under min.insync.replicas, or the controller quorum has no leader;
    0 when healthy."""
    with admin_client(brokers, timeout_ms, "cannot check the cluster's health") as admin:
        report = _check(admin)
    problems = report.problems
    if fmt == "json":
        echo_json({"healthy": not problems, "problems": problems,
                   "controller_leader": report.controller_leader, "brokers": report.brokers,
                   "fenced_brokers": report.fenced_brokers,
                   "offline_partitions": report.offline,
                   "under_min_isr_partitions": report.under_min_isr,
                   "under_replicated_partitions": report.under_replicated})
    else:
        _print_health(report)
    if problems:
        raise CliError("cluster unhealthy: " + "; ".join(problems), EXIT_UNHEALTHY)


def _check(admin: Admin) -> _Health:
    from tidelog.client import ConfigResource

    described = admin.describe_cluster()
    quorum, quorum_error = _quorum(admin)
    report = _Health(
        controller_leader=quorum.leader_id if quorum else described.controller_id,
        brokers=[b.broker_id for b in described.brokers],
        fenced_brokers=[b.broker_id for b in described.brokers if b.fenced],
        quorum_error=quorum_error,
    )
    names = list(admin.list_topics(include_internal=True))
    if not names:
        return report
    topics = admin.describe_topics(names, include_offsets=False)
    configs = admin.describe_configs([ConfigResource("topic", n) for n in names])
    # A topic deleted between the listing and these calls shows up as a per-item error: it no
    # longer exists, so it cannot be unhealthy.
    for name, description in topics.values.items():
        entries = configs.values.get(ConfigResource("topic", name), {})
        entry = entries.get("min.insync.replicas")
        min_isr = int(entry.value) if entry is not None and entry.value.isdigit() else 1
        for p in description.partitions:
            row = {"topic": name, "partition": p.partition, "leader": p.leader,
                   "replicas": list(p.replicas), "isr": list(p.isr),
                   "min_insync_replicas": min_isr}
            if p.leader < 0:
                report.offline.append(row)
            elif len(p.isr) < min_isr:  # Kafka's --under-min-isr-partitions
                report.under_min_isr.append(row)
            elif len(p.isr) < len(p.replicas):
                report.under_replicated.append(row)
    return report


def _print_health(report: _Health) -> None:
    problems = report.problems
    click.echo(f"healthy: {'no' if problems else 'yes'}")
    leader = report.controller_leader if report.controller_leader >= 0 else "none"
    click.echo(f"controller leader: {leader}   brokers: {ids(report.brokers)}   fenced: "
               f"{ids(report.fenced_brokers)}")
    for title, rows in (("offline partitions", report.offline),
                        ("partitions under min.insync.replicas", report.under_min_isr),
                        ("under-replicated partitions", report.under_replicated)):
        click.echo(f"{title}: {len(rows)}")
        if rows:
            table([{"topic": r["topic"], "partition": r["partition"], "leader": r["leader"],
                     "replicas": ids(r["replicas"]), "isr": ids(r["isr"]),
                     "min_isr": r["min_insync_replicas"]}
                    for r in rows[:TABLE_PARTITIONS_MAX]])
            if len(rows) > TABLE_PARTITIONS_MAX:
                click.echo(f"... and {len(rows) - TABLE_PARTITIONS_MAX} more (--format json "
                           f"lists all)")

