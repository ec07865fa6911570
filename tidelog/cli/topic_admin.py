"""``tidelog topic create|list|describe|delete|add-partitions|alter-config|describe-config``:
the topic admin commands (modelled on ``rpk topic`` and Kafka's ``kafka-topics``).

Each command opens an Admin on ``--brokers`` (tidelog.cli.common's ``admin_client``), makes one
admin call, prints a table or, with ``--format json``, JSON whose field names are part of the
interface (docs/cli.md lists them), and ends with one error line per item that failed.
tidelog/cli/topic.py adds them to the ``topic`` group.
"""

from __future__ import annotations

from typing import Any

import click

from tidelog.cli.common import (
    CliError,
    OneLineCommand,
    admin_client,
    brokers_option,
    echo_json,
    fail,
    format_option,
    ids,
    parse_pairs,
    raise_item_errors,
    table,
    timeout_option,
)

__all__ = ["add_partitions", "alter_config", "create", "delete", "describe", "describe_config",
           "list_cmd"]


@click.command("create", cls=OneLineCommand)
@click.argument("names", nargs=-1, required=True)
@click.option("-p", "--partitions", type=int, default=-1, show_default=True,
              help="partitions (-1: the cluster's num.partitions)")
@click.option("-r", "--replicas", "replication_factor", type=int, default=-1, show_default=True,
              help="replication factor (-1: the cluster's default.replication.factor)")
@click.option("-c", "--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="a topic config (repeatable), e.g. -c min.insync.replicas=2")
@click.option("--dry-run", is_flag=True, help="validate only; create nothing")
@brokers_option
@timeout_option
@format_option
def create(names: tuple[str, ...], partitions: int, replication_factor: int,
           configs: tuple[str, ...], dry_run: bool, brokers: str, timeout_ms: int,
           fmt: str) -> None:
    """Create one or more topics."""
    from tidelog.client import NewTopic

    config_map = parse_pairs(configs, "-c", "retention.ms=86400000")
    with admin_client(brokers, timeout_ms, "cannot create topics") as admin:
        result = admin.create_topics(
            [NewTopic(n, partitions, replication_factor, config_map) for n in names],
            validate_only=dry_run)
    created = [{"topic": t.name, "topic_id": t.topic_id, "partitions": t.num_partitions,
                "replication_factor": t.replication_factor, "configs": t.configs,
                "dry_run": dry_run} for t in result.values.values()]
    if fmt == "json":
        echo_json(created)
    elif created:
        table([{"topic": c["topic"], "status": "valid (dry run)" if dry_run else "created",
                 "partitions": c["partitions"], "replication_factor": c["replication_factor"],
                 "id": c["topic_id"] or "-"} for c in created])
    raise_item_errors(result.errors, lambda n: f"cannot create topic {n!r}", brokers)


@click.command("list", cls=OneLineCommand)
@click.option("-i", "--internal", is_flag=True, help="include internal topics")
@brokers_option
@timeout_option
@format_option
def list_cmd(internal: bool, brokers: str, timeout_ms: int, fmt: str) -> None:
    """List topics with their partition counts."""
    with admin_client(brokers, timeout_ms, "cannot list topics") as admin:
        listings = admin.list_topics(include_internal=internal)
    rows = [{"topic": t.name, "partitions": t.num_partitions, "internal": t.is_internal,
             "topic_id": t.topic_id} for t in listings.values()]
    if fmt == "json":
        echo_json(rows)
    else:
        table([{"topic": r["topic"], "partitions": r["partitions"], "id": r["topic_id"]}
                | ({"internal": r["internal"]} if internal else {}) for r in rows])


@click.command("describe", cls=OneLineCommand)
@click.argument("names", nargs=-1, required=True)
@brokers_option
@timeout_option
@format_option
def describe(names: tuple[str, ...], brokers: str, timeout_ms: int, fmt: str) -> None:
    """Show partitions: leaders, replicas, ISR, offsets.

    For each partition: leader, leader epoch, replicas, ISR, offline replicas, log start offset,
    high watermark, log end offset and size in bytes (-1 where the leader did not answer)."""
    with admin_client(brokers, timeout_ms, "cannot describe topics") as admin:
        result = admin.describe_topics(list(dict.fromkeys(names)))
    described: list[dict[str, Any]] = [{
        "topic": t.name, "topic_id": t.topic_id, "internal": t.is_internal,
        "partitions": [{
            "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
            "replicas": list(p.replicas), "isr": list(p.isr),
            "offline_replicas": list(p.offline_replicas), "log_start_offset": p.log_start_offset,
            "high_watermark": p.high_watermark, "log_end_offset": p.log_end_offset,
            "size_bytes": p.size_bytes} for p in t.partitions],
    } for t in result.values.values()]
    if fmt == "json":
        echo_json(described)
    else:
        for i, t in enumerate(described):
            parts = t["partitions"]
            rf = len(parts[0]["replicas"]) if parts else 0
            click.echo(("\n" if i else "") + f"topic {t['topic']}  id {t['topic_id']}  "
                       f"partitions {len(parts)}  replication factor {rf}"
                       + ("  (internal)" if t["internal"] else ""))
            table([{"partition": p["partition"], "leader": p["leader"],
                     "epoch": p["leader_epoch"], "replicas": ids(p["replicas"]),
                     "isr": ids(p["isr"]), "offline": ids(p["offline_replicas"]),
                     "log_start": p["log_start_offset"], "hw": p["high_watermark"],
                     "log_end": p["log_end_offset"], "size": p["size_bytes"]} for p in parts])
    raise_item_errors(result.errors, lambda n: f"cannot describe topic {n!r}", brokers)


@click.command("delete", cls=OneLineCommand)
@click.argument("names", nargs=-1, required=True)
@brokers_option
@timeout_option
@format_option
def delete(names: tuple[str, ...], brokers: str, timeout_ms: int, fmt: str) -> None:
    """Delete topics and all their records."""
    with admin_client(brokers, timeout_ms, "cannot delete topics") as admin:
        result = admin.delete_topics(list(dict.fromkeys(names)))
    rows = [{"topic": name, "status": "deleted"} for name in result.values]
    if fmt == "json":
        echo_json(rows)
    elif rows:
        table(rows)
    raise_item_errors(result.errors, lambda n: f"cannot delete topic {n!r}", brokers)


@click.command("add-partitions", cls=OneLineCommand)
@click.argument("names", nargs=-1, required=True)
@click.option("-n", "--num", type=click.IntRange(min=1), help="partitions to add")
@click.option("--total", type=click.IntRange(min=1), help="partition count to grow to")
@click.option("--dry-run", is_flag=True, help="validate only; change nothing")
@brokers_option
@timeout_option
@format_option
def add_partitions(names: tuple[str, ...], num: int | None, total: int | None, dry_run: bool,
                   brokers: str, timeout_ms: int, fmt: str) -> None:
    """Add partitions to topics.

    Records already written stay where they are, so a key may map to another partition from
    now on."""
    if (num is None) == (total is None):
        raise CliError("give exactly one of --num N (partitions to add) and --total N")
    wanted = list(dict.fromkeys(names))
    with admin_client(brokers, timeout_ms, "cannot add partitions") as admin:
        before = admin.list_topics(include_internal=True)
        missing = [n for n in wanted if n not in before]
        if missing:
            from tidelog.errors import UnknownTopicOrPartitionError

            raise_item_errors({n: UnknownTopicOrPartitionError(f"topic {n!r} does not exist")
                               for n in missing}, lambda n: f"cannot add partitions to {n!r}",
                              brokers)
        counts = {n: total if total is not None else before[n].num_partitions + (num or 0)
                  for n in wanted}
        result = admin.create_partitions(counts, validate_only=dry_run)
    rows = [{"topic": n, "partitions_before": before[n].num_partitions,
             "partitions": counts[n], "dry_run": dry_run} for n in result.values]
    if fmt == "json":
        echo_json(rows)
    elif rows:
        table([{"topic": r["topic"], "before": r["partitions_before"],
                 "after": r["partitions"], "status": "valid (dry run)" if dry_run else "added"}
                for r in rows])
    raise_item_errors(result.errors, lambda n: f"cannot add partitions to {n!r}", brokers)


@click.command("alter-config", cls=OneLineCommand)
@click.argument("name")
@click.option("-s", "--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="set a config (repeatable)")
@click.option("-d", "--delete", "deletes", multiple=True, metavar="KEY",
              help="remove an override: back to the cluster default (repeatable)")
@click.option("--append", "appends", multiple=True, metavar="KEY=VALUE",
              help="add an item to a list config (repeatable)")
@click.option("--subtract", "subtracts", multiple=True, metavar="KEY=VALUE",
              help="remove an item from a list config (repeatable)")
@click.option("--dry-run", is_flag=True, help="validate only; change nothing")
@brokers_option
@timeout_option
@format_option
def alter_config(name: str, sets: tuple[str, ...], deletes: tuple[str, ...],
                 appends: tuple[str, ...], subtracts: tuple[str, ...], dry_run: bool,
                 brokers: str, timeout_ms: int, fmt: str) -> None:
    """Set or delete a topic's configs.

    Incremental: configs not named keep their values; a deleted one falls back to the
    cluster default."""
    from tidelog.client import AlterConfigOp, ConfigResource

    ops = [AlterConfigOp(k, v, "set")
           for k, v in parse_pairs(sets, "--set", "retention.ms=3600000").items()]
    ops += [AlterConfigOp(k.strip(), None, "delete") for k in deletes if k.strip()]
    ops += [AlterConfigOp(k, v, "append")
            for k, v in parse_pairs(appends, "--append", "cleanup.policy=compact").items()]
    ops += [AlterConfigOp(k, v, "subtract")
            for k, v in parse_pairs(subtracts, "--subtract", "cleanup.policy=compact").items()]
    if not ops:
        raise CliError("nothing to change: give --set KEY=VALUE and/or --delete KEY")
    resource = ConfigResource("topic", name)
    what = f"cannot alter configs of topic {name!r}"
    with admin_client(brokers, timeout_ms, what) as admin:
        result = admin.alter_configs({resource: ops}, validate_only=dry_run)
    if resource in result.errors:
        raise fail(what, result.errors[resource], brokers)
    changes = [{"op": op.op, "name": op.name, "value": op.value} for op in ops]
    if fmt == "json":
        echo_json({"topic": name, "changes": changes, "dry_run": dry_run})
    else:
        done = "; ".join(f"{c['op']} {c['name']}" + ("" if c["value"] is None
                                                     else f"={c['value']}") for c in changes)
        click.echo(f"topic {name}: {done}" + ("  (dry run: validated, not applied)"
                                              if dry_run else ""))


@click.command("describe-config", cls=OneLineCommand)
@click.argument("name")
@click.option("--overrides", "overrides_only", is_flag=True,
              help="only configs set on the topic itself")
@click.option("--docs", is_flag=True, help="add each config's one-line documentation")
@brokers_option
@timeout_option
@format_option
def describe_config(name: str, overrides_only: bool, docs: bool, brokers: str,
                    timeout_ms: int, fmt: str) -> None:
    """Show a topic's configs and their sources.

    Every effective config with its value and where it comes from: the topic itself (topic),
    the cluster-wide default (cluster), or the built-in default (default)."""
    from tidelog.client import ConfigResource

    resource = ConfigResource("topic", name)
    what = f"cannot describe configs of topic {name!r}"
    with admin_client(brokers, timeout_ms, what) as admin:
        result = admin.describe_configs([resource])
    if resource in result.errors:
        raise fail(what, result.errors[resource], brokers)
    entries = [e for _, e in sorted(result.values[resource].items())
               if not overrides_only or e.source == "topic"]
    if fmt == "json":
        echo_json({"topic": name, "configs": {
            e.name: {"value": e.value, "source": e.source, "read_only": e.read_only,
                     "sensitive": e.sensitive, "documentation": e.documentation}
            for e in entries}})
        return
    table([{"name": e.name, "value": e.value if e.value != "" else '""', "source": e.source}
            | ({"documentation": e.documentation} if docs else {}) for e in entries])
