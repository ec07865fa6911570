"""The read planner of the Tidelog source: options and partition offsets in, offset ranges out.

The shell (the PySpark DataSource, later) does the I/O in this order and hands each answer back
as plain values, as the replication core's shell does (``broker/replication/effects.py``):

1. metadata → :func:`resolve_partitions` (which partitions the subscription reads);
2. each partition's log start offset and high watermark → ``{TopicPartition: PartitionInfo}``;
3. for a timestamp option, :func:`timestamps_to_look_up` → the first offset at or after each
   timestamp (``None`` where no record is that late) → ``start_``/``end_timestamp_offsets``;
4. a batch query: :func:`plan_batch` → a :class:`ReadPlan`; a streaming query:
   :func:`initial_offsets` once, then per micro-batch :func:`next_end_offsets` (Spark's
   ``latestOffset``) and :func:`plan_micro_batch` (Spark's ``partitions(start, end)``).

Only records below the high watermark are ever planned. Data loss, Spark's meaning: offsets a
query should read that the log no longer has (below the log start offset, removed by retention),
a partition that vanished, or a partition whose offsets went back. With ``failOnDataLoss=true``
(the default) the planner raises :class:`SparkDataLossError` naming the partition and offsets;
with ``false`` it starts at what the log still has and lists the loss in ``ReadPlan.data_loss``
for the shell to log. New partitions of a streaming query (a topic grew, or a new topic matches
``subscribePattern``) start at their log start offset, as Spark's new partitions start at
earliest. A restarted query's start is its checkpointed JSON (``offsets.offsets_from_dict``).
Pure: no I/O, no clock, no pyspark, no client import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tidelog.spark.offsets import EARLIEST, LATEST, SparkOptionError, TopicPartition
from tidelog.spark.options import (
    Assign,
    EarliestOffsets,
    GlobalTimestamp,
    LatestOffsets,
    OffsetLimit,
    SourceOptions,
    SpecificOffsets,
    SpecificTimestamps,
    Subscribe,
    SubscribePattern,
    Subscription,
)
from tidelog.spark.ranges import InputRange, rate_limit, split_ranges

__all__ = [
    "PartitionInfo",
    "ReadPlan",
    "SparkDataLossError",
    "StartOffsets",
    "delay_batch",
    "initial_offsets",
    "next_end_offsets",
    "plan_batch",
    "plan_micro_batch",
    "resolve_partitions",
    "timestamps_to_look_up",
]

INTERNAL_TOPICS = frozenset({"__consumer_offsets"})
FAIL_ON_DATA_LOSS_TRUE = (
    "Some data may have been lost because they are not available in Tidelog any more; either "
    "the data was aged out by retention or the topic may have been deleted before all the data "
    "in the topic was processed. If you don't want your query to fail on such cases, set the "
    "source option 'failOnDataLoss' to 'false'.")


class SparkDataLossError(RuntimeError):
    """Offsets the query should read are gone (``failOnDataLoss=true``)."""

    def __init__(self, topic_partitions: tuple[TopicPartition, ...], message: str) -> None:
        self.topic_partitions = topic_partitions
        super().__init__(f"{message}. {FAIL_ON_DATA_LOSS_TRUE}")


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """What the cluster says of a partition now (ListOffsets earliest and latest)."""

    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """The input partitions of one read, and the losses accepted with ``failOnDataLoss=false``
    and other notes, each a sentence for the shell to log."""

    ranges: tuple[InputRange, ...]
    data_loss: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StartOffsets:
    """A streaming query's first start offsets (every partition resolved to a number)."""

    offsets: dict[TopicPartition, int]
    data_loss: tuple[str, ...] = ()


@dataclass
class _Losses:
    """Collects data losses, or raises on the first when the query fails on data loss."""

    fail: bool
    found: list[str] = field(default_factory=list)

    def report(self, message: str, *tps: TopicPartition) -> None:
        if self.fail:
            raise SparkDataLossError(tuple(tps), message)
        self.found.append(f"{message}. Some data may have been missed")


def resolve_partitions(subscription: Subscription, partition_counts: Mapping[str, int]
                       ) -> tuple[TopicPartition, ...]:
    """The partitions a subscription reads, given each existing topic's partition count:
    ``subscribe``'s topics that exist, the non-internal topics ``subscribePattern`` matches in
    full, or ``assign``'s partitions as given (one missing from the cluster is vanished)."""
    if isinstance(subscription, Assign):
        return subscription.partitions
    topics = [t for t in partition_counts if _reads_topic(subscription, t)]
    return tuple(TopicPartition(t, p) for t in sorted(topics) for p in range(partition_counts[t]))


def timestamps_to_look_up(limit: OffsetLimit, partitions: Mapping[TopicPartition, PartitionInfo]
                          ) -> dict[TopicPartition, int]:
    """The (partition → timestamp) lookups a timestamp option needs; ``{}`` for the others."""
    if isinstance(limit, GlobalTimestamp):
        return {tp: limit.timestamp_ms for tp in sorted(partitions)}
    if isinstance(limit, SpecificTimestamps):
        return {tp: ts for tp, ts in sorted(limit.timestamps.items()) if tp in partitions}
    return {}


def plan_batch(options: SourceOptions, partitions: Mapping[TopicPartition, PartitionInfo], *,
               start_timestamp_offsets: Mapping[TopicPartition, int | None] | None = None,
               end_timestamp_offsets: Mapping[TopicPartition, int | None] | None = None
               ) -> ReadPlan:
    """The input partitions of a batch read, from the starting to the ending offsets. With a
    timestamp option, ``start_``/``end_timestamp_offsets`` are the offsets found for the
    lookups :func:`timestamps_to_look_up` named for ``options.starting``/``options.ending``."""
    losses, warnings = _Losses(options.fail_on_data_loss), []
    present = _present(options, partitions, losses)
    ranges = []
    for tp in present:
        info = partitions[tp]
        start = _resolve(options.starting, tp, info, start_timestamp_offsets or {},
                         starting=True, strategy=options.timestamp_strategy)
        end = _resolve(options.ending, tp, info, end_timestamp_offsets or {}, starting=False,
                       strategy="latest")
        if end > info.high_watermark:
            warnings.append(f"{tp}: the ending offset {end} is above the high watermark "
                            f"{info.high_watermark}: reading up to the high watermark")
            end = info.high_watermark
        piece = _batch_range(tp, start, end, info, losses)
        if piece is not None:
            ranges.append(piece)
    pieces = split_ranges(ranges, min_partitions=options.min_partitions,
                          max_records_per_partition=options.max_records_per_partition)
    return ReadPlan(tuple(pieces), tuple(losses.found), tuple(warnings))


def initial_offsets(options: SourceOptions, partitions: Mapping[TopicPartition, PartitionInfo],
                    *, start_timestamp_offsets: Mapping[TopicPartition, int | None] | None = None
                    ) -> StartOffsets:
    """A new streaming query's start (Spark's initialOffset): ``startingOffsets`` resolved
    against the partitions now (latest by default)."""
    losses = _Losses(options.fail_on_data_loss)
    offsets: dict[TopicPartition, int] = {}
    for tp in _present(options, partitions, losses):
        info = partitions[tp]
        start = _resolve(options.starting, tp, info, start_timestamp_offsets or {},
                         starting=True, strategy=options.timestamp_strategy)
        if start > info.high_watermark:
            losses.report(f"{tp}: the starting offset {start} is above the high watermark "
                          f"{info.high_watermark}", tp)
            start = info.high_watermark
        if start < info.log_start_offset:
            losses.report(f"{tp}: the starting offset {start} is below the log start offset "
                          f"{info.log_start_offset}: offsets {start} to "
                          f"{info.log_start_offset - 1} are gone", tp)
            start = info.log_start_offset
        offsets[tp] = start
    return StartOffsets(offsets, tuple(losses.found))


def next_end_offsets(options: SourceOptions, start: Mapping[TopicPartition, int],
                     partitions: Mapping[TopicPartition, PartitionInfo], *,
                     max_rows: int | None,
                     available_now: Mapping[TopicPartition, int] | None = None
                     ) -> dict[TopicPartition, int]:
    """Spark's ``latestOffset(start, limit)``: each read partition's high watermark (or, under
    the availableNow trigger, the offsets taken when it began), limited to ``max_rows``
    records in all (``None``: all available). New partitions count from their log start."""
    if available_now is not None:
        latest = dict(available_now)
    else:
        latest = {tp: partitions[tp].high_watermark for tp in partitions
                  if _reads(options.subscription, tp)}
    if max_rows is None:
        return latest
    begin = {tp: start[tp] if tp in start else partitions[tp].log_start_offset
             for tp in latest if tp in start or tp in partitions}
    limited = rate_limit(max_rows, begin, {tp: end for tp, end in latest.items() if tp in begin})
    # A new partition that vanished since keeps its end; plan_micro_batch reports it.
    return {tp: limited.get(tp, end) for tp, end in latest.items()}


def delay_batch(min_rows: int, start: Mapping[TopicPartition, int],
                latest: Mapping[TopicPartition, int], *, now_ms: int, last_trigger_ms: int,
                max_trigger_delay_ms: int) -> bool:
    """``minOffsetsPerTrigger``: wait for more records (True) while fewer than ``min_rows`` are
    available and ``maxTriggerDelay`` has not passed since the last batch ran."""
    if now_ms - last_trigger_ms >= max_trigger_delay_ms:
        return False
    available = sum(end - start.get(tp, 0) for tp, end in latest.items())
    return available < min_rows


def plan_micro_batch(options: SourceOptions, start: Mapping[TopicPartition, int],
                     end: Mapping[TopicPartition, int],
                     partitions: Mapping[TopicPartition, PartitionInfo]) -> ReadPlan:
    """Spark's ``getOffsetRangesFromResolvedOffsets``: the input partitions from ``start`` to
    ``end`` (both checkpointed offsets), with new partitions from their log start offset."""
    losses = _Losses(options.fail_on_data_loss)
    begin = dict(start)
    for tp in sorted(set(end) - set(start)):
        if tp not in partitions:
            losses.report(f"Cannot find earliest offsets of {tp}", tp)
            continue
        begin[tp] = partitions[tp].log_start_offset
        if begin[tp] != 0:
            losses.report(f"Added partition {tp} starts from {begin[tp]} instead of 0", tp)
    gone = sorted(set(start) - set(end))
    if gone:
        losses.report(f"[{', '.join(map(str, gone))}] are gone", *gone)
    ranges = []
    for tp in sorted(set(end) & set(begin)):
        from_offset, until_offset = begin[tp], end[tp]
        if until_offset < from_offset:
            losses.report(f"Partition {tp}'s offset was changed from {from_offset} to "
                          f"{until_offset}", tp)
            continue
        log_start = partitions[tp].log_start_offset if tp in partitions else from_offset
        if from_offset < log_start:
            losses.report(f"{tp}: offsets {from_offset} to {min(log_start, until_offset) - 1} "
                          f"were removed (log start offset {log_start}) before they were read",
                          tp)
            from_offset = min(log_start, until_offset)
        ranges.append(InputRange(tp.topic, tp.partition, from_offset, until_offset))
    pieces = split_ranges(ranges, min_partitions=options.min_partitions,
                          max_records_per_partition=options.max_records_per_partition)
    return ReadPlan(tuple(pieces), tuple(losses.found))


def _reads_topic(subscription: Subscription, topic: str) -> bool:
    if isinstance(subscription, Subscribe):
        return topic in subscription.topics
    if isinstance(subscription, SubscribePattern):
        return topic not in INTERNAL_TOPICS and subscription.matches(topic)
    return any(tp.topic == topic for tp in subscription.partitions)


def _reads(subscription: Subscription, tp: TopicPartition) -> bool:
    if isinstance(subscription, Assign):
        return tp in subscription.partitions
    return _reads_topic(subscription, tp.topic)


def _present(options: SourceOptions, partitions: Mapping[TopicPartition, PartitionInfo],
             losses: _Losses) -> list[TopicPartition]:
    """The partitions the read covers that exist, sorted; the assigned or named ones that do not
    exist are vanished (data loss); a specific offsets JSON must name every partition read."""
    present = sorted(tp for tp in partitions if _reads(options.subscription, tp))
    named: set[TopicPartition] = set()
    if isinstance(options.subscription, Assign):
        named |= set(options.subscription.partitions)
    for option, limit in (("startingOffsets", options.starting),
                          ("endingOffsets", options.ending)):
        keys = _named_partitions(limit)
        if keys is None:
            continue
        outside = sorted(tp for tp in keys if not _reads(options.subscription, tp))
        if outside:
            raise SparkOptionError(option, f"{option} names {_names(outside)}, which the "
                                   f"subscription does not read")
        missing = sorted(set(present) - keys)
        if missing:
            raise SparkOptionError(option, f"If {option} contains specific offsets, you must "
                                   f"specify all TopicPartitions. Use -1 for latest, -2 for "
                                   f"earliest. Specified: {_names(keys)} Assigned: "
                                   f"{_names(present)}")
        named |= keys
    vanished = sorted(named - set(partitions))
    if vanished:
        losses.report(f"[{', '.join(map(str, vanished))}] are gone: no such partition in the "
                      f"cluster", *vanished)
    return present


def _named_partitions(limit: OffsetLimit) -> set[TopicPartition] | None:
    if isinstance(limit, SpecificOffsets):
        return set(limit.offsets)
    if isinstance(limit, SpecificTimestamps):
        return set(limit.timestamps)
    return None


def _resolve(limit: OffsetLimit, tp: TopicPartition, info: PartitionInfo,
             timestamp_offsets: Mapping[TopicPartition, int | None], *, starting: bool,
             strategy: str) -> int:
    """One partition's offset for a starting or ending limit."""
    if isinstance(limit, EarliestOffsets):
        return info.log_start_offset
    if isinstance(limit, LatestOffsets):
        return info.high_watermark
    if isinstance(limit, SpecificOffsets):
        offset = limit.offsets[tp]
        return {EARLIEST: info.log_start_offset, LATEST: info.high_watermark}.get(offset, offset)
    if tp not in timestamp_offsets:
        raise ValueError(f"no timestamp lookup result for {tp}: look up what "
                         f"timestamps_to_look_up returns")
    found = timestamp_offsets[tp]
    if found is not None:
        return found
    if starting and strategy == "error":
        timestamp = (limit.timestamp_ms if isinstance(limit, GlobalTimestamp)
                     else limit.timestamps[tp])
        option = "startingTimestamp" if isinstance(limit, GlobalTimestamp) else \
            "startingOffsetsByTimestamp"
        raise SparkOptionError(option, f"No offset matched from request of topic-partition {tp} "
                               f"and timestamp {timestamp} (option '{option}'; set "
                               f"startingOffsetsByTimestampStrategy to 'latest' to start at the "
                               f"latest offset instead)")
    return info.high_watermark


def _batch_range(tp: TopicPartition, start: int, end: int, info: PartitionInfo,
                 losses: _Losses) -> InputRange | None:
    """``start``..``end`` (``end`` at most the HW) checked against the log, or None."""
    if start > info.high_watermark:
        losses.report(f"{tp}: the starting offset {start} is above the high watermark "
                      f"{info.high_watermark}", tp)
        return None
    if start > end:
        raise SparkOptionError("endingOffsets", f"The resolved starting offset {start} is "
                               f"greater than the resolved ending offset {end} for {tp}")
    if start < info.log_start_offset:
        losses.report(f"{tp}: the starting offset {start} is below the log start offset "
                      f"{info.log_start_offset}: offsets {start} to "
                      f"{min(info.log_start_offset, end) - 1} are gone", tp)
        start = min(info.log_start_offset, end)
    return InputRange(tp.topic, tp.partition, start, end)


def _names(partitions: set[TopicPartition] | list[TopicPartition]) -> str:
    return "[" + ", ".join(str(tp) for tp in sorted(partitions)) + "]"
