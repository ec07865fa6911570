"""``tidelog topic produce`` and ``tidelog topic consume``: records between the shell and a
topic (modelled on ``rpk topic produce/consume`` and Kafka's console producer and consumer).

``produce`` sends stdin's lines through a Producer and waits once, at the end, for every
acknowledgement; ``consume`` assigns the partitions to a Consumer, seeks to the asked start and
prints each record as text or as one JSON object per line. Both check first that the topic
exists, so a typo fails at once instead of at the client's timeout. tidelog/cli/topic.py adds
them to the ``topic`` group.

``consume --group G`` instead subscribes as a member of consumer group G (Kafka's console
consumer with ``--group``): the group's coordinator chooses the partitions, each starts at the
group's committed offset (``--from-beginning`` / ``--offset earliest|latest`` only say where a
partition without one starts), and the consumer auto-commits what it printed and commits once
more as it leaves the group on exit. SIGINT and SIGTERM stop the poll loop (a flag, checked
after each poll) rather than interrupting it, so that exit is clean too.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from tidelog.cli.common import (
    EXIT_FAILURE,
    REQUEST_TIMEOUT_MS_MAX,
    TIMEOUT_MS_DEFAULT,
    CliError,
    OneLineCommand,
    admin_client,
    brokers_option,
    client_options,
    fail,
    parse_brokers,
    parse_pairs,
    timeout_option,
)
from tidelog.errors import TidelogError
from tidelog.limits import GROUP_TEXT_LENGTH_MAX

if TYPE_CHECKING:
    from tidelog.client import ConsumerRecord, RecordMetadata

__all__ = ["consume", "produce"]

#: How long consume waits in one poll; bounds how late it notices the idle timeout.
POLL_TIMEOUT_MS_MAX = 500
#: The producer batches per partition; a larger batch than the library's 16 KiB default
#: amortises per-request work when thousands of lines are piped in.
PRODUCE_BATCH_BYTES = 256 * 1024
PRODUCE_LINGER_MS = 10


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


@click.command("produce", cls=OneLineCommand)
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
                                              request_timeout_ms + PRODUCE_LINGER_MS),
                      **client_options()) as producer:
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
@click.command("consume", cls=OneLineCommand)
@click.argument("name")
@click.option("--from-beginning", is_flag=True, help="start at each partition's log start")
@click.option("-o", "--offset", metavar="N|-N|earliest|latest",
              help="start at offset N, N records before the end (-N), or earliest/latest")
@click.option("--from-timestamp", metavar="MS|ISO-8601",
              help="start at the first record at or after this time (ms since the epoch, or "
                   "e.g. 2025-01-31T12:00:00Z; no zone means UTC)")
@click.option("-p", "--partition", "partitions", type=click.IntRange(min=0), multiple=True,
              help="read only this partition (repeatable; default: all)")
@click.option("-g", "--group", metavar="GROUP",
              help="consume as a member of this consumer group: the group shares the "
                   "topic's partitions among its members, each starts at the group's "
                   "committed offset (else as --from-beginning / --offset earliest|latest "
                   "say) and commits what it printed")
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
            partitions: tuple[int, ...], group: str | None, num: int | None,
            idle_timeout_ms: int | None, fmt: str, print_key: bool, key_separator: str,
            use_base64: bool, brokers: str) -> None:
    """Print a topic's records.

    By default only records written from now on (as Kafka's console consumer). Exits after
    --num records, or after --timeout-ms without a record, else on Ctrl-C. With --group, as a
    member of that consumer group: it commits what it printed and leaves the group on exit
    (also on Ctrl-C or SIGTERM)."""
    given = [opt for opt, used in (("--from-beginning", from_beginning),
                                   ("--offset", offset is not None),
                                   ("--from-timestamp", from_timestamp is not None)) if used]
    if len(given) > 1:
        raise CliError(f"{' and '.join(given)} contradict each other: give at most one")
    start = _parse_start(from_beginning, offset, from_timestamp)
    reset = _group_reset(group, start, partitions) if group is not None else ""
    num_partitions = _existing_partitions(name, brokers, TIMEOUT_MS_DEFAULT)
    wanted = list(dict.fromkeys(partitions)) or list(range(num_partitions))
    unknown = [p for p in wanted if p >= num_partitions]
    if unknown:
        raise CliError(f"cannot consume {name}-{unknown[0]}: topic {name!r} has partitions "
                       f"0..{num_partitions - 1}")
    write = _record_writer(fmt, print_key=print_key, separator=key_separator.encode(),
                           use_base64=use_base64)
    what = f"cannot consume topic {name!r}" + (f" as group {group!r}" if group else "")
    try:
        if group is not None:
            signum = _consume_group(name, group, reset, num=num, idle_timeout_ms=idle_timeout_ms,
                                    write=write, brokers=brokers)
            if signum is not None:
                sys.exit(128 + signum)  # as a shell reports a process ended by that signal
        else:
            _consume(name, wanted, start, num=num, idle_timeout_ms=idle_timeout_ms,
                     write=write, brokers=brokers)
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
                  client_id="tidelog-cli", request_timeout_ms=TIMEOUT_MS_DEFAULT,
                  **client_options()) as consumer:
        consumer.assign(tps)
        _seek(consumer, tps, start)
        _poll_loop(consumer, num=num, idle_timeout_ms=idle_timeout_ms, write=write,
                   stopped=lambda: False)


def _poll_loop(consumer: Any, *, num: int | None, idle_timeout_ms: int | None,
               write: Callable[[list[ConsumerRecord]], None],
               stopped: Callable[[], bool]) -> None:
    """Poll and write until --num records, --timeout-ms idle, or ``stopped()`` (a signal)."""
    remaining = num
    last_record = time.monotonic()
    # Bounded by --num, --timeout-ms, or the user (Ctrl-C, SIGTERM) when neither is given.
    while (remaining is None or remaining > 0) and not stopped():
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


# ----------------------------------------------------------------------- consume --group
def _group_reset(group: str, start: tuple[str, int], partitions: tuple[int, ...]) -> str:
    """The auto_offset_reset of a group member: where a partition without a committed offset
    starts. Options that choose partitions or positions are refused: the group chooses them."""
    if not group or len(group) > GROUP_TEXT_LENGTH_MAX:
        raise CliError(f"invalid --group {group!r}: give a non-empty name of at most "
                       f"{GROUP_TEXT_LENGTH_MAX} characters")
    if partitions:
        raise CliError("--partition cannot be used with --group: the group assigns the "
                       "partitions to its members (drop --group to read chosen partitions)")
    how, _ = start
    if how not in ("earliest", "latest"):
        raise CliError("--offset N, --offset -N and --from-timestamp cannot be used with "
                       "--group: a member starts at the group's committed offsets "
                       "(--from-beginning or --offset earliest|latest say where when it has "
                       "none); to move them: tidelog group reset-offsets")
    return how


class _StopOnSignal:
    """While entered, SIGINT and SIGTERM ask the poll loop to stop (checked after each poll,
    so within POLL_TIMEOUT_MS_MAX) instead of interrupting it, so the consumer then commits
    and leaves the group in close(). A second signal acts as usual (stops at once)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signum = self.signum or signum
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT
                      else signal.SIG_DFL)

    def __enter__(self) -> _StopOnSignal:
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _consume_group(name: str, group: str, reset: str, *, num: int | None,
                   idle_timeout_ms: int | None, write: Callable[[list[ConsumerRecord]], None],
                   brokers: str) -> int | None:
    """Subscribe as a member of ``group`` and print what it is given; returns the signal that
    stopped it (None: --num or --timeout-ms). Auto-commit commits, inside poll(), positions of
    records earlier polls returned, i.e. records already written; close() commits the rest,
    then leaves the group, so the group's next member starts after the last record printed."""
    from tidelog.client import Consumer, TopicPartition

    with _StopOnSignal() as stop, Consumer(
            parse_brokers(brokers), group_id=group, auto_offset_reset=reset,  # type: ignore[arg-type]
            client_id="tidelog-cli", request_timeout_ms=TIMEOUT_MS_DEFAULT,
            **client_options()) as consumer:
        consumer.subscribe([name])

        def write_or_rewind(records: list[ConsumerRecord]) -> None:
            try:
                write(records)
            except BrokenPipeError:
                # Not all of these reached the reader: commit (in close()) from the first of
                # them in each partition, so they are printed again rather than skipped.
                first: dict[TopicPartition, int] = {}
                for r in records:
                    first.setdefault(TopicPartition(r.topic, r.partition), r.offset)
                for tp, offset in first.items():
                    consumer.seek(tp, offset)
                raise

        _poll_loop(consumer, num=num, idle_timeout_ms=idle_timeout_ms, write=write_or_rewind,
                   stopped=lambda: stop.signum is not None)
    return stop.signum


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
