"""``tidelog group list|describe|delete``: consumer groups (modelled on ``rpk group`` and
Kafka's ``kafka-consumer-groups``).

Each command opens an Admin on ``--brokers`` (tidelog.cli.common's ``admin_client``): ``list``
asks every broker (ListGroups) and merges; ``describe`` asks each group's coordinator for the
group (DescribeGroups) and its committed offsets with lag (OffsetFetch), and the partitions'
leaders for their log end offsets (DescribeLogs); ``delete`` deletes groups with no members
(DeleteGroups). Output is a table or, with ``--format json``, JSON whose field names are part of
the interface (docs/cli.md lists them); each group that failed ends in one error line.
"""

from __future__ import annotations

from typing import Any

import click

from tidelog.cli.common import (
    OneLineCommand,
    OneLineGroup,
    admin_client,
    brokers_option,
    echo_json,
    format_option,
    raise_item_errors,
    table,
    timeout_option,
)

__all__ = ["group"]


@click.group(cls=OneLineGroup)
def group() -> None:
    """List, describe and delete consumer groups."""


@group.command("list", cls=OneLineCommand)
@brokers_option
@timeout_option
@format_option
def list_cmd(brokers: str, timeout_ms: int, fmt: str) -> None:
    """List consumer groups with their state and coordinator."""
    with admin_client(brokers, timeout_ms, "cannot list groups") as admin:
        listings = admin.list_groups()
    rows = [{"group": g.group_id, "state": g.state, "coordinator": g.coordinator}
            for g in listings.values()]
    if fmt == "json":
        echo_json(rows)
    else:
        table(rows)


@group.command("describe", cls=OneLineCommand)
@click.argument("group_ids", nargs=-1, required=True)
@brokers_option
@timeout_option
@format_option
def describe(group_ids: tuple[str, ...], brokers: str, timeout_ms: int, fmt: str) -> None:
    """Show groups: state, epochs, members and their assignments, committed offsets and lag.

    Per partition with a committed offset: the offset, the partition's log end offset and the
    lag (high watermark - committed; -1 where unknown)."""
    wanted = list(dict.fromkeys(group_ids))
    with admin_client(brokers, timeout_ms, "cannot describe groups") as admin:
        result = admin.describe_groups(wanted)
        described = [_describe_one(admin, g) for g in result.values.values()]
    if fmt == "json":
        echo_json(described)
    else:
        for i, g in enumerate(described):
            _print_group(g, first=i == 0)
    raise_item_errors(result.errors, lambda n: f"cannot describe group {n!r}", brokers)


def _describe_one(admin: Any, g: Any) -> dict[str, Any]:
    offsets = admin.list_group_offsets(g.group_id)
    topics = sorted({tp.topic for tp in offsets})
    ends: dict[tuple[str, int], int] = {}
    if topics:
        found = admin.describe_topics(topics)
        for t in found.values.values():
            for p in t.partitions:
                ends[(t.name, p.partition)] = p.log_end_offset
    return {
        "group": g.group_id, "state": g.state, "group_epoch": g.group_epoch,
        "assignment_epoch": g.assignment_epoch, "assignor": g.assignor,
        "coordinator": g.coordinator,
        "members": [{
            "member_id": m.member_id, "instance_id": m.instance_id,
            "client_host": m.client_host, "member_epoch": m.member_epoch,
            "subscribed_topics": list(m.subscribed_topics),
            "assignment": [{"topic": tp.topic, "partition": tp.partition}
                           for tp in m.assignment]} for m in g.members],
        "offsets": [{
            "topic": tp.topic, "partition": tp.partition, "committed_offset": o.offset,
            "log_end_offset": ends.get((tp.topic, tp.partition), -1), "lag": o.lag,
            "metadata": o.metadata} for tp, o in offsets.items()],
    }


def _print_group(g: dict[str, Any], *, first: bool) -> None:
    click.echo(("" if first else "\n") + f"group {g['group']}  state {g['state']}  "
               f"epoch {g['group_epoch']}  assignment epoch {g['assignment_epoch']}  "
               f"assignor {g['assignor'] or '-'}  coordinator {g['coordinator']}")
    table([{"member": m["member_id"], "epoch": m["member_epoch"],
            "host": m["client_host"] or "-", "instance": m["instance_id"] or "-",
            "assignment": _partitions(m["assignment"])} for m in g["members"]])
    click.echo("")
    table([{"topic": o["topic"], "partition": o["partition"], "committed": o["committed_offset"],
            "log_end": o["log_end_offset"], "lag": o["lag"]} for o in g["offsets"]])


def _partitions(assignment: list[dict[str, Any]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in assignment:
        by_topic.setdefault(tp["topic"], []).append(tp["partition"])
    return " ".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items()))\
        or "-"


@group.command("delete", cls=OneLineCommand)
@click.argument("group_ids", nargs=-1, required=True)
@brokers_option
@timeout_option
@format_option
def delete(group_ids: tuple[str, ...], brokers: str, timeout_ms: int, fmt: str) -> None:
    """Delete groups (they must have no members) and their committed offsets."""
    with admin_client(brokers, timeout_ms, "cannot delete groups") as admin:
        result = admin.delete_groups(list(dict.fromkeys(group_ids)))
    rows = [{"group": name, "status": "deleted"} for name in result.values]
    if fmt == "json":
        echo_json(rows)
    elif rows:
        table(rows)
    raise_item_errors(result.errors, lambda n: f"cannot delete group {n!r}", brokers)
