"""``tidelog topic …``: create, list, describe, delete and grow topics, read and change their
configs, and produce and consume records from the shell (modelled on ``rpk topic`` and Kafka's
``kafka-topics`` / console producer and consumer).

Every command talks to the brokers named by ``--brokers`` (default ``$TIDELOG_BROKERS``, else
``127.0.0.1:9092``) through the client library, and prints a table or, with ``--format json``,
JSON whose field names are part of the interface (docs/cli.md lists them).

Errors end in one line on stderr, ``error: <what failed>: <why> (<CODE>); <what to do>``, and a
non-zero exit code: 2 for a mistake of the user (an unknown topic, an invalid config, bad
syntax), 1 when the cluster could not do it (unreachable, timed out, records not delivered).
The helpers at the top of this module (options, the Admin context, error lines) are shared with
``tidelog.cli_info``.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from tidelog.cli_cluster import _table
from tidelog.errors import TidelogError

if TYPE_CHECKING:
    from tidelog.client import Admin, ConsumerRecord, RecordMetadata

__all__ = [
    "EXIT_FAILURE",
    "EXIT_USER_ERROR",
    "CliError",
    "OneLineCommand",
    "admin_client",
    "brokers_option",
    "format_option",
    "timeout_option",
    "topic",
]

BROKERS_ENV = "TIDELOG_BROKERS"
DEFAULT_BROKERS = "127.0.0.1:9092"
#: The same codes as tidelog.cli's main() (not imported from there: ``python -m tidelog.cli``
#: runs that module as __main__, and importing it again would register the commands twice).
EXIT_FAILURE = 1
EXIT_USER_ERROR = 2
#: Default bound on a command's wait for the cluster; a CLI call should fail within seconds, not
#: the minute the client library allows a long-lived application.
TIMEOUT_MS_DEFAULT = 30_000
#: The client's own request timeout is capped at this (a single request; retries fit inside the
#: command's timeout).
REQUEST_TIMEOUT_MS_MAX = 30_000
#: The reachability probe: one TCP connect per bootstrap address, at most this many, this long.
PROBE_ADDRESSES_MAX = 8
PROBE_TIMEOUT_S = 1.0
#: How long consume waits in one poll; bounds how late it notices the idle timeout.
POLL_TIMEOUT_MS_MAX = 500
#: The producer batches per partition; a larger batch than the library's 16 KiB default
#: amortises per-request work when thousands of lines are piped in.
PRODUCE_BATCH_BYTES = 256 * 1024
PRODUCE_LINGER_MS = 10


# ======================================================================= shared with cli_info
class CliError(click.ClickException):
    """A failed command: printed as one ``error: …`` line (never a traceback), with an exit code.
    """

    def __init__(self, message: str, exit_code: int = EXIT_USER_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click reads it per instance

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class OneLineCommand(click.Command):
    """A command whose usage mistakes (a missing argument, a bad option value) are one error
    line too, like every other failure, instead of click's usage block."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            raise CliError(f"{e.format_message()} (`{ctx.command_path} -h` lists the "
                           f"options)") from None


class OneLineGroup(click.Group):
    command_class = OneLineCommand


def brokers_option(f: Any) -> Any:
    return click.option(
        "--brokers", envvar=BROKERS_ENV, default=DEFAULT_BROKERS, show_default=True,
        show_envvar=True, metavar="HOST:PORT,…", help="brokers to bootstrap from")(f)


def timeout_option(f: Any) -> Any:
    return click.option(
        "--timeout-ms", type=click.IntRange(min=1), default=TIMEOUT_MS_DEFAULT,
        show_default=True, help="how long to wait for the cluster before giving up")(f)


def format_option(f: Any) -> Any:
    return click.option("--format", "fmt", type=click.Choice(["table", "json"]),
                        default="table", show_default=True, help="output format")(f)


def exit_code_for(error: TidelogError) -> int:
    """2 when the user must change the request, 1 when the cluster could not serve it."""
    from tidelog.errors import UnknownTopicOrPartitionError

    # UNKNOWN_TOPIC_OR_PARTITION is retriable for clients (metadata may trail a creation), but
    # at the command line it almost always means a typo.
    if isinstance(error, UnknownTopicOrPartitionError):
        return EXIT_USER_ERROR
    return EXIT_FAILURE if error.retriable else EXIT_USER_ERROR


def error_line(what: str, error: TidelogError, brokers: str) -> str:
    """``<what>: <why> (<CODE>)[; <what to do>]`` for one failure."""
    hint = _hint(error, brokers)
    return f"{what}: {error.message} ({error.code_name})" + (f"; {hint}" if hint else "")


def _hint(error: TidelogError, brokers: str) -> str:
    from tidelog import errors as e

    hints: list[tuple[type[TidelogError], str]] = [
        (e.NetworkError, f"is the cluster running? --brokers / ${BROKERS_ENV} is {brokers}"),
        (e.RequestTimedOutError, "the cluster did not answer in time; check `tidelog cluster "
                                 "health`, then retry or raise --timeout-ms"),
        (e.UnknownTopicOrPartitionError, "`tidelog topic list` shows the topics"),
        (e.TopicAlreadyExistsError, "pick another name, or delete the topic first"),
        (e.InvalidConfigError, "`tidelog topic describe-config TOPIC --docs` lists the topic "
                               "configs (docs/configuration.md)"),
        (e.InvalidReplicationFactorError, "use -r at most the number of live brokers "
                                          "(`tidelog cluster info`)"),
        (e.InvalidPartitionsError, "a topic has at least 1 partition and can only grow"),
        (e.InvalidTopicError, "topic names use [a-zA-Z0-9._-], at most 249 characters"),
        (e.NotEnoughReplicasError, "fewer replicas are in sync than min.insync.replicas; "
                                   "`tidelog cluster health` says which"),
        (e.NotEnoughReplicasAfterAppendError, "fewer replicas are in sync than "
                                              "min.insync.replicas; see `tidelog cluster health`"),
        (e.MessageTooLargeError, "the record is above the topic's max.message.bytes"),
    ]
    return next((hint for cls, hint in hints if isinstance(error, cls)), "")


def fail(what: str, error: TidelogError, brokers: str) -> CliError:
    return CliError(error_line(what, error, brokers), exit_code_for(error))


def parse_brokers(brokers: str) -> list[str]:
    # The clients' own parser (private to the client package), so the CLI accepts exactly the
    # bootstrap lists the library does and can probe the same addresses.
    from tidelog.client._io import parse_bootstrap

    try:
        return parse_bootstrap(brokers)
    except (ValueError, TypeError) as e:
        raise CliError(f"invalid --brokers / ${BROKERS_ENV} {brokers!r}: {e}") from None


def check_reachable(bootstrap: list[str], brokers: str) -> None:
    """Fail at once when no bootstrap address accepts a TCP connection.

    The client library retries an unreachable bootstrap list until its timeout, which is right
    for a long-lived application waiting out a restart but makes a CLI call with a typo in
    --brokers (or a stopped cluster) hang for the whole --timeout-ms. A refused connection is
    certain, so say so now; anything that does accept a connection goes to the client.
    """
    problems = []
    for address in bootstrap[:PROBE_ADDRESSES_MAX]:
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)),
                                          timeout=PROBE_TIMEOUT_S):
                return
        except OSError as e:
            problems.append(f"{address}: {e.strerror or e}")
    raise CliError(f"cannot reach any broker ({'; '.join(problems)}); is the cluster running? "
                   f"--brokers / ${BROKERS_ENV} is {brokers}", EXIT_FAILURE)


@contextlib.contextmanager
def admin_client(brokers: str, timeout_ms: int, what: str) -> Iterator[Admin]:
    """An Admin for the command; a request-level error becomes one ``what: why`` line."""
    from tidelog.client import Admin

    bootstrap = parse_brokers(brokers)
    check_reachable(bootstrap, brokers)
    try:
        with Admin(bootstrap, request_timeout_ms=min(timeout_ms, REQUEST_TIMEOUT_MS_MAX),
                   default_api_timeout_ms=timeout_ms, client_id="tidelog-cli") as admin:
            yield admin
    except TidelogError as e:
        raise fail(what, e, brokers) from None


def raise_item_errors(errors: Mapping[Any, TidelogError], what: Callable[[Any], str],
                      brokers: str) -> None:
    """Per-item failures of a call about several items: one line each; the last one ends the
    command with the first failure's exit code (the successes were printed already)."""
    if not errors:
        return
    lines = [error_line(what(key), error, brokers) for key, error in errors.items()]
    for line in lines[:-1]:
        click.echo(f"error: {line}", err=True)
    raise CliError(lines[-1], exit_code_for(next(iter(errors.values()))))


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2))


def parse_pairs(values: Iterable[str], option: str, example: str) -> dict[str, str]:
    """``key=value`` strings (split at the first ``=``) -> dict; a malformed one is an error."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"invalid {option} {item!r}: write KEY=VALUE, e.g. {option} {example}")
        out[key.strip()] = value
    return out


def _ids(values: Iterable[int]) -> str:
    return ",".join(map(str, values)) or "-"


# ======================================================================= admin commands
@click.group(cls=OneLineGroup)
def topic() -> None:
    """Create, inspect, change and delete topics; produce and consume records."""


@topic.command("create")
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
        _table([{"topic": c["topic"], "status": "valid (dry run)" if dry_run else "created",
                 "partitions": c["partitions"], "replication_factor": c["replication_factor"],
                 "id": c["topic_id"] or "-"} for c in created])
    raise_item_errors(result.errors, lambda n: f"cannot create topic {n!r}", brokers)


@topic.command("list")
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
        _table([{"topic": r["topic"], "partitions": r["partitions"], "id": r["topic_id"]}
                | ({"internal": r["internal"]} if internal else {}) for r in rows])


@topic.command("describe")
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
            _table([{"partition": p["partition"], "leader": p["leader"],
                     "epoch": p["leader_epoch"], "replicas": _ids(p["replicas"]),
                     "isr": _ids(p["isr"]), "offline": _ids(p["offline_replicas"]),
                     "log_start": p["log_start_offset"], "hw": p["high_watermark"],
                     "log_end": p["log_end_offset"], "size": p["size_bytes"]} for p in parts])
    raise_item_errors(result.errors, lambda n: f"cannot describe topic {n!r}", brokers)


@topic.command("delete")
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
        _table(rows)
    raise_item_errors(result.errors, lambda n: f"cannot delete topic {n!r}", brokers)


@topic.command("add-partitions")
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
        _table([{"topic": r["topic"], "before": r["partitions_before"],
                 "after": r["partitions"], "status": "valid (dry run)" if dry_run else "added"}
                for r in rows])
    raise_item_errors(result.errors, lambda n: f"cannot add partitions to {n!r}", brokers)


@topic.command("alter-config")
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


@topic.command("describe-config")
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
    _table([{"name": e.name, "value": e.value if e.value != "" else '""', "source": e.source}
            | ({"documentation": e.documentation} if docs else {}) for e in entries])


# ======================================================================= produce
@dataclass
class _Deliveries:
    """What came back for the records sent. Written only by delivery callbacks (the client's
    I/O thread, one at a time) and read by the command after flush(), which waits for them."""

    acked: int = 0
    failed: int = 0
    first_error: BaseException | None = None
    #: partition -> [first offset, last offset, records]
    partitions: dict[int, list[int]] = field(default_factory=dict)

    def on_delivery(self, metadata: RecordMetadata | None, error: BaseException | None) -> None:
        if error is not None or metadata is None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = error
            return
        self.acked += 1
        seen = self.partitions.get(metadata.partition)
        if seen is None:
            self.partitions[metadata.partition] = [metadata.offset, metadata.offset, 1]
        else:
            seen[0] = min(seen[0], metadata.offset)
            seen[1] = max(seen[1], metadata.offset)
            seen[2] += 1


@topic.command("produce")
@click.argument("name")
@click.option("-k", "--key-separator", metavar="SEP",
              help="split each line at the first SEP into key and value (no SEP: no key)")
@click.option("-H", "--header", "headers", multiple=True, metavar="KEY=VALUE",
              help="a header on every record (repeatable)")
@click.option("-p", "--partition", type=click.IntRange(min=0),
              help="write every record to this partition (default: by key, else sticky)")
@click.option("--acks", type=click.Choice(["all", "1", "0"]), default="all", show_default=True,
              help="all: on every in-sync replica; 1: on the leader; 0: do not wait")
@click.option("--compression", type=click.Choice(["none", "gzip", "lz4", "zstd"]),
              default="none", show_default=True, help="batch compression")
@brokers_option
@timeout_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="format of the summary printed at the end")
def produce(name: str, key_separator: str | None, headers: tuple[str, ...],
            partition: int | None, acks: str, compression: str, brokers: str, timeout_ms: int,
            fmt: str) -> None:
    """Send stdin's lines as records.

    Each line of stdin becomes one record (without its newline); a summary is printed at the
    end. Records are batched and sent without waiting for each other; the command waits once, at
    the end, for every acknowledgement. It stops at the first failed record.
    """
    if key_separator == "":
        raise CliError("--key-separator must not be empty")
    header_list: list[tuple[str, bytes | None]] = [(k, v.encode()) for k, v in
                   parse_pairs(headers, "-H", "source=cli").items()]
    num_partitions = _existing_partitions(name, brokers, timeout_ms)
    if partition is not None and partition >= num_partitions:
        raise CliError(f"cannot produce to {name}-{partition}: topic {name!r} has partitions "
                       f"0..{num_partitions - 1}")
    started = time.monotonic()
    deliveries, lines = _send_lines(name, sys.stdin.buffer, key_separator=key_separator,
                                    headers=header_list, partition=partition, acks=acks,
                                    compression=compression, brokers=brokers,
                                    timeout_ms=timeout_ms)
    elapsed_s = time.monotonic() - started
    parts = [{"partition": p, "first_offset": first, "last_offset": last, "records": n}
             for p, (first, last, n) in sorted(deliveries.partitions.items())]
    if fmt == "json":
        click.echo(json.dumps({"topic": name, "records": deliveries.acked,
                               "failed": deliveries.failed, "partitions": parts}))
    else:
        click.echo(f"produced {deliveries.acked} record(s) to topic {name} in {elapsed_s:.2f}s"
                   + (f" ({deliveries.failed} failed)" if deliveries.failed else ""))
    if deliveries.first_error is not None:
        what = (f"cannot produce to topic {name!r} ({deliveries.acked} of {lines} line(s) "
                f"acknowledged)")
        error = deliveries.first_error
        if isinstance(error, TidelogError):
            raise fail(what, error, brokers)
        raise CliError(f"{what}: {error}", EXIT_FAILURE)


def _existing_partitions(name: str, brokers: str, timeout_ms: int) -> int:
    """The topic's partition count; fails at once for an unknown topic (the producer and the
    consumer would wait for it to appear until their timeouts)."""
    what = f"cannot use topic {name!r}"
    with admin_client(brokers, timeout_ms, what) as admin:
        result = admin.describe_topics([name], include_offsets=False)
    if name in result.errors:
        raise fail(what, result.errors[name], brokers)
    return len(result.values[name].partitions)


def _send_lines(name: str, source: BinaryIO, *, key_separator: str | None,
                headers: list[tuple[str, bytes | None]], partition: int | None, acks: str,
                compression: str, brokers: str, timeout_ms: int) -> tuple[_Deliveries, int]:
    """Send every line of ``source``; returns what came back and how many lines were read."""
    from tidelog.client import Producer

    deliveries = _Deliveries()
    separator = key_separator.encode() if key_separator is not None else None
    request_timeout_ms = min(timeout_ms, REQUEST_TIMEOUT_MS_MAX)
    lines = 0
    try:
        with Producer(parse_brokers(brokers), acks=acks,  # type: ignore[arg-type]
                      compression_type=compression, client_id="tidelog-cli",
                      linger_ms=PRODUCE_LINGER_MS, batch_size=PRODUCE_BATCH_BYTES,
                      max_block_ms=timeout_ms, request_timeout_ms=request_timeout_ms,
                      delivery_timeout_ms=max(timeout_ms,
                                              request_timeout_ms + PRODUCE_LINGER_MS)) as producer:
            # Bounded by the input: one send per line, none waits for an acknowledgement.
            for raw in source:
                if deliveries.first_error is not None:
                    break
                lines += 1
                key, value = _split_line(raw, separator)
                producer.send(name, value, key, partition=partition, headers=headers or None,
                              on_delivery=deliveries.on_delivery)
            producer.flush()
    except TidelogError as e:
        if deliveries.first_error is None:
            deliveries.first_error = e
    return deliveries, lines


def _split_line(raw: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    line = raw[:-1] if raw.endswith(b"\n") else raw
    if line.endswith(b"\r"):
        line = line[:-1]  # a file with Windows line ends
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    return (key, value) if sep else (None, line)


# ======================================================================= consume
@topic.command("consume")
@click.argument("name")
@click.option("--from-beginning", is_flag=True, help="start at each partition's log start")
@click.option("-o", "--offset", metavar="N|-N|earliest|latest",
              help="start at offset N, N records before the end (-N), or earliest/latest")
@click.option("--from-timestamp", metavar="MS|ISO-8601",
              help="start at the first record at or after this time (ms since the epoch, or "
                   "e.g. 2025-01-31T12:00:00Z; no zone means UTC)")
@click.option("-p", "--partition", "partitions", type=click.IntRange(min=0), multiple=True,
              help="read only this partition (repeatable; default: all)")
@click.option("-n", "--num", type=click.IntRange(min=1), help="exit after N records")
@click.option("--timeout-ms", "idle_timeout_ms", type=click.IntRange(min=1),
              help="exit once no record came for this long (default: wait for more forever)")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="text: the value per line; json: one JSON object per line")
@click.option("--print-key", is_flag=True, help="text format: print KEY<separator>VALUE")
@click.option("-k", "--key-separator", default="\t", show_default="tab",
              help="text format: what --print-key puts between key and value")
@click.option("--base64", "use_base64", is_flag=True,
              help="json format: keys, values and header values as base64 (binary data)")
@brokers_option
def consume(name: str, from_beginning: bool, offset: str | None, from_timestamp: str | None,
            partitions: tuple[int, ...], num: int | None, idle_timeout_ms: int | None,
            fmt: str, print_key: bool, key_separator: str, use_base64: bool,
            brokers: str) -> None:
    """Print a topic's records.

    By default only records written from now on (as Kafka's console consumer). Exits after
    --num records, or after --timeout-ms without a record, else on Ctrl-C."""
    given = [opt for opt, used in (("--from-beginning", from_beginning),
                                   ("--offset", offset is not None),
                                   ("--from-timestamp", from_timestamp is not None)) if used]
    if len(given) > 1:
        raise CliError(f"{' and '.join(given)} contradict each other: give at most one")
    start = _parse_start(from_beginning, offset, from_timestamp)
    num_partitions = _existing_partitions(name, brokers, TIMEOUT_MS_DEFAULT)
    wanted = list(dict.fromkeys(partitions)) or list(range(num_partitions))
    unknown = [p for p in wanted if p >= num_partitions]
    if unknown:
        raise CliError(f"cannot consume {name}-{unknown[0]}: topic {name!r} has partitions "
                       f"0..{num_partitions - 1}")
    write = _record_writer(fmt, print_key=print_key, separator=key_separator.encode(),
                           use_base64=use_base64)
    what = f"cannot consume topic {name!r}"
    try:
        _consume(name, wanted, start, num=num, idle_timeout_ms=idle_timeout_ms, write=write,
                 brokers=brokers)
    except TidelogError as e:
        raise fail(what, e, brokers) from None
    except BrokenPipeError:
        # The reader went away (`| head`): that is the end, not an error. Point stdout at
        # /dev/null so the interpreter's final flush does not complain a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _parse_start(from_beginning: bool, offset: str | None,
                 from_timestamp: str | None) -> tuple[str, int]:
    """("earliest"|"latest", 0), ("offset", N), ("before_end", N) or ("timestamp", ms)."""
    if from_beginning:
        return "earliest", 0
    if from_timestamp is not None:
        return "timestamp", _parse_timestamp(from_timestamp)
    if offset is None or offset == "latest":
        return "latest", 0
    if offset == "earliest":
        return "earliest", 0
    text = offset.strip()
    if text.lstrip("+-").isdigit():
        n = int(text)
        return ("before_end", -n) if text.startswith("-") else ("offset", n)
    raise CliError(f"invalid --offset {offset!r}: give N, -N (N before the end), earliest or "
                   f"latest")


def _parse_timestamp(text: str) -> int:
    if text.strip().isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise CliError(f"invalid --from-timestamp {text!r}: give milliseconds since the epoch "
                       f"or an ISO-8601 time such as 2025-01-31T12:00:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return max(0, int(when.timestamp() * 1000))


def _consume(name: str, partitions: list[int], start: tuple[str, int], *, num: int | None,
             idle_timeout_ms: int | None, write: Callable[[list[ConsumerRecord]], None],
             brokers: str) -> None:
    from tidelog.client import Consumer, TopicPartition

    tps = [TopicPartition(name, p) for p in partitions]
    with Consumer(parse_brokers(brokers), auto_offset_reset="earliest",
                  client_id="tidelog-cli", request_timeout_ms=TIMEOUT_MS_DEFAULT) as consumer:
        consumer.assign(tps)
        _seek(consumer, tps, start)
        remaining = num
        last_record = time.monotonic()
        # Bounded by --num, --timeout-ms, or the user (Ctrl-C) when neither is given.
        while remaining is None or remaining > 0:
            wait_ms = POLL_TIMEOUT_MS_MAX
            if idle_timeout_ms is not None:
                idle_ms = (time.monotonic() - last_record) * 1000
                if idle_ms >= idle_timeout_ms:
                    return
                wait_ms = max(1, min(wait_ms, int(idle_timeout_ms - idle_ms)))
            records = consumer.poll(timeout_ms=wait_ms, max_records=remaining)
            if not records:
                continue
            last_record = time.monotonic()
            if remaining is not None:
                records = records[:remaining]
                remaining -= len(records)
            write(records)


def _seek(consumer: Any, tps: list[Any], start: tuple[str, int]) -> None:
    how, n = start
    if how == "earliest":
        consumer.seek_to_beginning(*tps)
    elif how == "latest":
        consumer.seek_to_end(*tps)
    elif how == "timestamp":
        found = consumer.offsets_for_times(dict.fromkeys(tps, n))
        for tp in tps:
            if found.get(tp) is None:
                consumer.seek_to_end(tp)  # nothing that new yet: wait for new records
            else:
                consumer.seek(tp, found[tp].offset)
    else:
        # Clamp into [log start, HW] so an offset past either end starts at that end rather
        # than jumping back to the beginning through OFFSET_OUT_OF_RANGE.
        starts = consumer.beginning_offsets(tps)
        ends = consumer.end_offsets(tps)
        for tp in tps:
            target = n if how == "offset" else ends[tp] - n
            consumer.seek(tp, min(max(target, starts[tp]), ends[tp]))


def _record_writer(fmt: str, *, print_key: bool, separator: bytes,
                   use_base64: bool) -> Callable[[list[ConsumerRecord]], None]:
    out = sys.stdout.buffer

    def text(records: list[ConsumerRecord]) -> None:
        chunks = []
        for r in records:
            if print_key:
                chunks.append((r.key or b"") + separator)
            chunks.append((r.value or b"") + b"\n")
        out.write(b"".join(chunks))
        out.flush()

    def as_text(data: bytes | None) -> str | None:
        if data is None:
            return None
        if use_base64:
            return base64.b64encode(data).decode("ascii")
        return data.decode("utf-8", errors="replace")

    def json_lines(records: list[ConsumerRecord]) -> None:
        lines = [json.dumps({
            "topic": r.topic, "partition": r.partition, "offset": r.offset,
            "timestamp_ms": r.timestamp_ms,
            "timestamp_type": "LogAppendTime" if r.timestamp_type == 1 else "CreateTime",
            "key": as_text(r.key), "value": as_text(r.value),
            "headers": [{"key": k, "value": as_text(v)} for k, v in r.headers],
        }, ensure_ascii=False) for r in records]
        out.write(("\n".join(lines) + "\n").encode())
        out.flush()

    return json_lines if fmt == "json" else text
