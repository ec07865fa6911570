"""What one produce request may cost the leader, and the order its batches are appended in.

Before it appends a produced batch the leader checks its records (``record_batch.
validate_records``: CRC, decompression, the framing of every record, keys for compacted topics;
DESIGN §4), so a batch that consumers or the log cleaner could not decode never enters the log.
That check costs ~0.1-0.3 µs per record and ~1 ms per MiB decompressed, and a 1 MB zstd batch
can hold 500,000 records. So, per request (:func:`plan_checks`):

* **bounds** (tidelog.limits): records and uncompressed bytes summed over the request's batch
  headers, ``PRODUCE_REQUEST_RECORDS_MAX`` and ``PRODUCE_REQUEST_UNCOMPRESSED_BYTES_MAX``;
  past either, every batch is refused with RECORD_LIST_TOO_LARGE before any is decompressed;
* **where**: batches within ``PRODUCE_INLINE_CHECK_RECORDS_MAX`` records and
  ``PRODUCE_INLINE_CHECK_BYTES_MAX`` uncompressed bytes (for the request as a whole, in request
  order) are checked on the event loop, ~1 ms at most: a hop to a thread and back costs more
  than a producer's usual batch. The others go to the :class:`RecordChecker`'s threads, in one
  job per request, and the event loop goes on serving other requests meanwhile (the
  decompressors and crc32c release the GIL; protobuf's parser holds it ~0.1 µs per record, in
  batches of at most 65,536 records; larger ones are walked in Python).

**Order.** A produce used to append every batch before its first ``await``, which is what kept
the appends of one ProduceStream (and of one request) in arrival order. A batch checked off the
loop appends later, so each partition keeps a line (``Partition.next_turn``): a batch that
cannot append now takes a turn, synchronously and in request order, and appends when its
check is done and every turn before it has ended. A batch checked inline appends at once when
nothing is in line before it, as before. Leadership, min.insync.replicas and the producer's
sequence are checked again at the append, on the loop, with no await from there to the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tidelog import limits
from tidelog.broker.partition import Partition
from tidelog.broker.partition_writer import AppendOutcome, PendingAppend, TopicIdPartition
from tidelog.errors import (
    NotLeaderOrFollowerError,
    RecordListTooLargeError,
    TidelogError,
    UnknownServerError,
)
from tidelog.record_batch import RecordBatch, validate_records

__all__ = [
    "CheckPlan",
    "Produced",
    "RecordChecker",
    "check_records",
    "plan_checks",
    "start_checked_appends",
]

log = logging.getLogger("tidelog.broker.produce_checks")

#: A batch's check result: its first keyless record (-1: none; None: keys not looked for), or
#: the error that refuses it.
CheckResult = int | None | TidelogError


@dataclass(slots=True)
class Produced:
    """One batch of a produce request whose header passed (``Partition.validate_produced``)."""

    tp: TopicIdPartition
    partition: Partition
    batch: RecordBatch
    size: int  # bytes as produced
    find_keyless: bool  # the topic is compacted: look for keyless records


@dataclass(frozen=True, slots=True)
class CheckPlan:
    """Where a request's batches are checked: ``inline`` on the loop, ``threads`` off it (in
    request order); or ``refusal`` for all of them, past the request's bounds."""

    inline: tuple[Produced, ...] = ()
    threads: tuple[Produced, ...] = ()
    refusal: TidelogError | None = None


def plan_checks(produced: Sequence[Produced], *,
                records_max: int = limits.PRODUCE_REQUEST_RECORDS_MAX,
                bytes_max: int = limits.PRODUCE_REQUEST_UNCOMPRESSED_BYTES_MAX,
                inline_records_max: int = limits.PRODUCE_INLINE_CHECK_RECORDS_MAX,
                inline_bytes_max: int = limits.PRODUCE_INLINE_CHECK_BYTES_MAX) -> CheckPlan:
    """The request's bounds and where each batch is checked (module doc), from the headers."""
    records = sum(p.batch.record_count for p in produced)
    uncompressed = sum(p.batch.uncompressed_size for p in produced)
    if records > records_max or uncompressed > bytes_max:
        return CheckPlan(refusal=RecordListTooLargeError(
            f"produce request of {records} records and {uncompressed} uncompressed bytes is "
            f"above the limits of {records_max} records and {bytes_max} bytes per request; "
            "send fewer batches per request"))
    inline: list[Produced] = []
    threads: list[Produced] = []
    inline_records = inline_bytes = 0
    for p in produced:
        count, size = p.batch.record_count, p.batch.uncompressed_size
        if (inline_records + count <= inline_records_max
                and inline_bytes + size <= inline_bytes_max):
            inline_records += count
            inline_bytes += size
            inline.append(p)
        else:
            threads.append(p)
    return CheckPlan(tuple(inline), tuple(threads))


def check_records(batches: Sequence[tuple[RecordBatch, bool]]) -> list[CheckResult]:
    """Check each (batch, find keyless) in turn; never raises (runs on a check thread)."""
    out: list[CheckResult] = []
    for batch, find_keyless in batches:
        try:
            keyless = validate_records(batch, find_keyless=find_keyless)
            out.append(keyless if find_keyless else None)
        except TidelogError as e:
            out.append(e)
        except Exception as e:  # a bug: refuse this batch, check the others
            log.exception("the record check of a produced batch failed")
            out.append(UnknownServerError(f"record check failed: {type(e).__name__}: {e}"))
    return out


class RecordChecker:
    """The record-check threads (``limits.RECORD_CHECK_THREADS``), started with the data plane
    and stopped with it."""

    def __init__(self, threads: int = limits.RECORD_CHECK_THREADS, *, name: str = "") -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads,
                                        thread_name_prefix=f"record-check{name}")

    def check(self, produced: Sequence[Produced]) -> asyncio.Future[list[CheckResult]]:
        """:func:`check_records` of ``produced`` on a check thread."""
        batches = [(p.batch, p.find_keyless) for p in produced]
        return asyncio.get_running_loop().run_in_executor(self._pool, check_records, batches)

    def close(self) -> None:
        """Stop the threads; checks not started are cancelled (their appends are refused)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


#: Appends one checked batch now, on the loop: (the batch, its check result, whether it comes
#: after its request's turn of the loop, so the request's clocks are stale) -> the outcome.
AppendNow = Callable[[Produced, CheckResult, bool], PendingAppend]


def refused(p: Produced, error: TidelogError) -> PendingAppend:
    return PendingAppend(p.tp, AppendOutcome(error), p.partition)


def start_checked_appends(produced: Sequence[Produced], checker: RecordChecker,
                          append_now: AppendNow) -> dict[int, asyncio.Future[PendingAppend]]:
    """Check and append ``produced`` (one request's batches, in request order) as the module
    doc says; returns each batch's outcome by its index in ``produced``. Batches checked inline
    with nothing in line before them are appended before this returns (their futures done)."""
    loop = asyncio.get_running_loop()
    out: dict[int, asyncio.Future[PendingAppend]] = {}
    plan = plan_checks(produced)
    if plan.refusal is not None:
        for index, p in enumerate(produced):
            out[index] = _done(loop, refused(p, plan.refusal))
        return out
    inline = {id(p): result for p, result in zip(
        plan.inline, check_records([(p.batch, p.find_keyless) for p in plan.inline]),
        strict=True)}
    job = checker.check(plan.threads) if plan.threads else None
    position = {id(p): i for i, p in enumerate(plan.threads)}
    for index, p in enumerate(produced):
        if id(p) in inline and not p.partition.appends_queued:
            out[index] = _done(loop, append_now(p, inline[id(p)], False))
            continue
        before, mine = p.partition.next_turn()
        checked: asyncio.Future[list[CheckResult]] | CheckResult = inline.get(id(p), job)
        out[index] = loop.create_task(
            _append_in_turn(p, checked, position.get(id(p), -1), before, mine, append_now),
            name=f"produce-{p.tp}")
    return out


async def _append_in_turn(p: Produced, checked: asyncio.Future[list[CheckResult]] | CheckResult,
                          position: int, before: asyncio.Future[None] | None,
                          mine: asyncio.Future[None], append_now: AppendNow) -> PendingAppend:
    """Wait for the batch's check and for the turn before it, then append (or refuse). The
    futures waited for are shared (the request's check job, another append's turn), so a
    cancelled wait must not cancel them: shielded."""
    try:
        result: CheckResult
        if isinstance(checked, asyncio.Future):
            try:
                result = (await asyncio.shield(checked))[position]
            except asyncio.CancelledError:
                if not checked.cancelled():
                    raise
                result = NotLeaderOrFollowerError(  # the checker stopped: the broker stops
                    f"{p.partition.name}: the broker is stopping")
        else:
            result = checked
        if before is not None:
            await asyncio.shield(before)  # only ever resolved: see Partition.next_turn
        if isinstance(result, TidelogError):
            return refused(p, result)
        return append_now(p, result, True)
    finally:
        if not mine.done():
            mine.set_result(None)


def _done(loop: asyncio.AbstractEventLoop, value: PendingAppend) -> asyncio.Future[PendingAppend]:
    future: asyncio.Future[PendingAppend] = loop.create_future()
    future.set_result(value)
    return future
