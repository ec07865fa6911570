"""``tidelog group list|describe|delete|reset-offsets|delete-offsets``: consumer groups (modelled on
``rpk group`` and Kafka's ``kafka-consumer-groups``).

Each command opens an Admin on ``--brokers`` (tidelog.cli.common's ``admin_client``): ``list``
asks every broker (ListGroups) and merges; ``describe`` asks each group's coordinator for the
group (DescribeGroups) and its committed offsets with lag (OffsetFetch), and the partitions'
leaders for their log end offsets (DescribeLogs); ``delete`` deletes groups with no members
(DeleteGroups); ``reset-offsets`` computes new committed offsets of a topic's partitions
(ListOffsets and the group's OffsetFetch), prints them, and with ``--execute`` commits them as a
simple consumer (Admin.alter_group_offsets), refused while the group has members;
``delete-offsets`` deletes a group's committed offsets of chosen topics or partitions
(OffsetDelete, refused per partition while a member subscribes to its topic). Output is a
table or, with ``--format json``, JSON whose field names are part of the interface
(docs/cli.md lists them); each group that failed ends in one error line.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

import click

from tidelog.cli.common import (
    CliError,
    OneLineCommand,
    OneLineGroup,
    admin_client,
    brokers_option,
    echo_json,
    fail,
    format_option,
    raise_item_errors,
    table,
    timeout_option,
)
from tidelog.client import EARLIEST, LATEST
from tidelog.client.records import TopicPartition
from tidelog.errors import GroupIdNotFoundError, TidelogError

__all__ = ["group"]

_K = TypeVar("_K")


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
    raise_item_errors(_named_once(result.errors, str), lambda n: f"cannot describe group {n!r}",
                      brokers)


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
            "client_id": m.client_id, "client_host": m.client_host,
            "member_epoch": m.member_epoch, "subscribed_topics": list(m.subscribed_topics),
            "subscribed_topic_regex": m.subscribed_topic_regex,
            "assignment": [{"topic": tp.topic, "partition": tp.partition}
                           for tp in m.assignment],
            "target_assignment": [{"topic": tp.topic, "partition": tp.partition}
                                  for tp in m.target_assignment]} for m in g.members],
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
            "client": m["client_id"] or "-", "host": m["client_host"] or "-",
            "instance": m["instance_id"] or "-",
            "subscription": _subscription(m["subscribed_topics"], m["subscribed_topic_regex"]),
            "assignment": _partitions(m["assignment"]),
            "target": _partitions(m["target_assignment"])} for m in g["members"]])
    click.echo("")
    table([{"topic": o["topic"], "partition": o["partition"], "committed": o["committed_offset"],
            "log_end": o["log_end_offset"], "lag": o["lag"]} for o in g["offsets"]])


def _subscription(topics: list[str], regex: str) -> str:
    shown = ",".join(topics)
    if regex:
        shown = (shown + " " if shown else "") + f"/{regex}/"
    return shown or "-"


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
    raise_item_errors(_named_once(result.errors, str), lambda n: f"cannot delete group {n!r}",
                      brokers)


@group.command("delete-offsets", cls=OneLineCommand)
@click.argument("group_id")
@click.option("--topic", "topic_specs", required=True, multiple=True, metavar="TOPIC[:P1,P2]",
              help="a topic (all its committed partitions) or some of its partitions; "
                   "repeatable")
@brokers_option
@timeout_option
@format_option
def delete_offsets(group_id: str, topic_specs: tuple[str, ...], brokers: str, timeout_ms: int,
                   fmt: str) -> None:
    """Delete a group's committed offsets of topics or partitions (Kafka's
    kafka-consumer-groups --delete-offsets).

    Refused for a partition whose topic a member of the group subscribes to (stop the members
    or change their subscription first); a partition without a committed offset counts as
    deleted."""
    wanted: list[TopicPartition | str] = []
    for spec in topic_specs:
        topic, pids = _parse_topic_spec(spec)
        wanted.extend([topic] if pids is None else [TopicPartition(topic, p) for p in pids])
    what = f"cannot delete offsets of group {group_id!r}"
    with admin_client(brokers, timeout_ms, what) as admin, _group_errors(what, group_id, brokers):
        result = admin.delete_group_offsets(group_id, wanted)
    rows = [{"topic": tp.topic, "partition": tp.partition, "status": "deleted"}
            for tp in result.values]
    if fmt == "json":
        echo_json(rows)
    elif rows or not result.errors:
        table(rows)  # "(none)" when nothing was committed there, rather than silence
    # Each error names the partition already (Admin's message).
    raise_item_errors(_named_once(result.errors, lambda _: group_id), lambda _: what, brokers)


_TO_OPTIONS = ("--to-earliest", "--to-latest", "--to-offset", "--to-datetime", "--shift-by")


@group.command("reset-offsets", cls=OneLineCommand)
@click.argument("group_id")
@click.option("--topic", "topic_spec", required=True, metavar="TOPIC[:P1,P2]",
              help="the topic, and optionally which of its partitions (default: all)")
@click.option("--to-earliest", is_flag=True, help="to each partition's log start offset")
@click.option("--to-latest", is_flag=True, help="to each partition's high watermark")
@click.option("--to-offset", type=int, default=None, help="to this offset (clamped to the log)")
@click.option("--to-datetime", default=None, metavar="ISO8601",
              help="to the first offset at or after this time (UTC if no zone is given)")
@click.option("--shift-by", type=int, default=None,
              help="by N from the committed offset (clamped to the log)")
@click.option("--execute", is_flag=True, help="apply the new offsets (default: a dry run)")
@brokers_option
@timeout_option
@format_option
def reset_offsets(group_id: str, topic_spec: str, to_earliest: bool, to_latest: bool,
                  to_offset: int | None, to_datetime: str | None, shift_by: int | None,
                  execute: bool, brokers: str, timeout_ms: int, fmt: str) -> None:
    """Reset a group's committed offsets of a topic (the group must have no members).

    Prints each partition's committed offset and the new one; nothing changes without
    --execute. New offsets are clamped to [log start offset, high watermark], as Kafka's
    kafka-consumer-groups does."""
    chosen = [name for name, value in zip(
        _TO_OPTIONS, (to_earliest, to_latest, to_offset is not None, to_datetime is not None,
                      shift_by is not None), strict=True) if value]
    if len(chosen) != 1:
        raise CliError(f"give exactly one of {', '.join(_TO_OPTIONS)}"
                       + (f" (got {', '.join(chosen)})" if chosen else ""))
    topic, wanted = _parse_topic_spec(topic_spec)
    at_ms = _parse_datetime(to_datetime) if to_datetime is not None else None
    what = f"cannot reset offsets of group {group_id!r}"
    with admin_client(brokers, timeout_ms, what) as admin, _group_errors(what, group_id, brokers):
        _refuse_active_members(admin, group_id, what)
        tps = _partitions_of(admin, topic, wanted, what, brokers)
        earliest = admin.list_offsets(dict.fromkeys(tps, EARLIEST))
        latest = admin.list_offsets(dict.fromkeys(tps, LATEST))
        current = {tp: o.offset for tp, o in admin.list_group_offsets(group_id, tps).items()}
        by_time = admin.list_offsets(dict.fromkeys(tps, at_ms)) if at_ms is not None else {}
        new: dict[TopicPartition, int] = {}
        for tp in tps:
            if to_earliest:
                target = earliest[tp]
            elif to_latest:
                target = latest[tp]
            elif to_offset is not None:
                target = to_offset
            elif at_ms is not None:
                target = by_time[tp] if by_time[tp] >= 0 else latest[tp]
            else:
                if current.get(tp, -1) < 0:
                    raise CliError(f"{what}: {tp.topic}-{tp.partition} has no committed offset "
                                   f"to shift")
                target = current[tp] + (shift_by or 0)
            new[tp] = max(earliest[tp], min(latest[tp], target))
        if execute:
            admin.alter_group_offsets(group_id, new)
    rows: list[dict[str, Any]] = [{"topic": tp.topic, "partition": tp.partition,
             "current_offset": current.get(tp, -1), "new_offset": new[tp]} for tp in tps]
    if fmt == "json":
        echo_json(rows)
    else:
        table([{"topic": r["topic"], "partition": r["partition"],
                "current": r["current_offset"] if r["current_offset"] >= 0 else "-",
                "new": r["new_offset"]} for r in rows])
    if not execute:
        click.echo("dry run: nothing changed; --execute applies it", err=True)


def _without_group_prefix(error: TidelogError, group_id: str) -> TidelogError:
    """``error`` without the ``group 'G': `` its message starts with: the Admin names the group
    for a library caller, but the CLI's line names it already in what failed."""
    trimmed = copy.copy(error)
    trimmed.message = error.message.removeprefix(f"group {group_id!r}: ")
    return trimmed


def _named_once(errors: Mapping[_K, TidelogError], group_of: Any) -> dict[_K, TidelogError]:
    """Per-item errors, each without its group prefix (``group_of(key)`` is its group)."""
    return {key: _without_group_prefix(e, group_of(key)) for key, e in errors.items()}


@contextlib.contextmanager
def _group_errors(what: str, group_id: str, brokers: str) -> Iterator[None]:
    """A group-level error of the Admin as one line that names the group once."""
    try:
        yield
    except TidelogError as e:
        raise fail(what, _without_group_prefix(e, group_id), brokers) from None


def _parse_topic_spec(spec: str) -> tuple[str, list[int] | None]:
    """``TOPIC`` or ``TOPIC:P1,P2`` -> (topic, partitions or None for all)."""
    topic, sep, parts = spec.partition(":")
    if not topic:
        raise CliError(f"invalid --topic {spec!r}: write TOPIC or TOPIC:P1,P2")
    if not sep:
        return topic, None
    try:
        pids = [int(p) for p in parts.split(",")]
    except ValueError:
        raise CliError(f"invalid --topic {spec!r}: partitions are numbers, e.g. "
                       f"{topic}:0,1") from None
    if any(p < 0 for p in pids) or len(set(pids)) != len(pids):
        raise CliError(f"invalid --topic {spec!r}: partitions must be distinct and >= 0")
    return topic, sorted(pids)


def _parse_datetime(text: str) -> int:
    """ISO 8601 -> ms since the epoch; a time without a zone is UTC."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"invalid --to-datetime {text!r}: write ISO 8601, e.g. "
                       f"2026-01-31T12:00:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def _refuse_active_members(admin: Any, group_id: str, what: str) -> None:
    """Kafka's rule: offsets are reset only while the group has no members (an unknown group
    has none)."""
    described = admin.describe_groups([group_id])
    error = described.errors.get(group_id)
    if error is not None and not isinstance(error, GroupIdNotFoundError):
        raise error
    found = described.values.get(group_id)
    if found is not None and found.members:
        raise CliError(f"{what}: group {group_id!r} has {len(found.members)} active "
                       f"member(s); stop them first")


def _partitions_of(admin: Any, topic: str, wanted: list[int] | None, what: str,
                   brokers: str) -> list[TopicPartition]:
    described = admin.describe_topics([topic], include_offsets=False)
    if topic in described.errors:
        raise fail(what, described.errors[topic], brokers)
    count = len(described.values[topic].partitions)
    if wanted is None:
        return [TopicPartition(topic, p) for p in range(count)]
    missing = [p for p in wanted if p >= count]
    if missing:
        raise CliError(f"{what}: topic {topic!r} has {count} partitions, no "
                       f"{', '.join(map(str, missing))}")
    return [TopicPartition(topic, p) for p in wanted]
