"""The Spark source's read planner (tidelog/spark/planner.py and ranges.py).

The planner is fed what the shell would learn from the cluster (each partition's log start
offset and high watermark, the offsets found for timestamps) as plain values, and its plans are
compared whole. Checked: only offsets below the HW are planned; every offset form resolves;
data loss fails naming partition and offsets, or (failOnDataLoss=false) is listed and skipped;
minPartitions splits as Spark's KafkaOffsetRangeCalculator and covers each offset exactly once
(a seeded, bounded property test); maxOffsetsPerTrigger shares the limit as Spark's rateLimit
(sums checked on random inputs); new partitions start at their log start; a restart from the
checkpointed JSON plans the same batch.
"""

from __future__ import annotations

import random

import pytest

from tidelog.spark.offsets import (
    SparkOptionError,
    TopicPartition,
    offsets_from_dict,
    offsets_to_dict,
)
from tidelog.spark.options import Assign, SourceOptions, SubscribePattern, parse_source_options
from tidelog.spark.planner import (
    PartitionInfo,
    ReadPlan,
    SparkDataLossError,
    delay_batch,
    initial_offsets,
    next_end_offsets,
    plan_batch,
    plan_micro_batch,
    resolve_partitions,
    timestamps_to_look_up,
)
from tidelog.spark.ranges import InputRange, rate_limit, split_ranges

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
U0 = TopicPartition("u", 0)


def options(streaming: bool = False, **extra: str) -> SourceOptions:
    return parse_source_options({"bootstrap.servers": "127.0.0.1:9092", "subscribe": "t",
                                 **extra}, streaming=streaming)


def r(tp: TopicPartition, start: int, end: int) -> InputRange:
    return InputRange(tp.topic, tp.partition, start, end)


CLUSTER = {T0: PartitionInfo(0, 10), T1: PartitionInfo(3, 8), U0: PartitionInfo(0, 4)}


# -- resolving the subscription ---------------------------------------------------------------

def test_resolve_partitions_for_each_subscription() -> None:
    counts = {"t": 2, "orders.eu": 1, "old.orders.eu": 1, "__consumer_offsets": 50}
    assert resolve_partitions(options(subscribe="t,missing").subscription, counts) == (T0, T1)
    assert resolve_partitions(SubscribePattern("orders\\..*"), counts) == (
        TopicPartition("orders.eu", 0),)
    assert resolve_partitions(SubscribePattern(".*"), counts)[-1] == TopicPartition("t", 1)
    assert all(tp.topic != "__consumer_offsets"
               for tp in resolve_partitions(SubscribePattern(".*"), counts))
    assert resolve_partitions(Assign((T2,)), counts) == (T2,)


def test_timestamps_to_look_up() -> None:
    assert timestamps_to_look_up(options(startingTimestamp="5").starting,
                                 {T0: CLUSTER[T0], T1: CLUSTER[T1]}) == {T0: 5, T1: 5}
    by_partition = options(startingOffsetsByTimestamp='{"t":{"0":7,"1":8}}').starting
    assert timestamps_to_look_up(by_partition, {T0: CLUSTER[T0]}) == {T0: 7}
    assert timestamps_to_look_up(options().starting, CLUSTER) == {}


# -- batch ------------------------------------------------------------------------------------

def test_a_batch_reads_from_the_log_start_to_the_high_watermark() -> None:
    assert plan_batch(options(), CLUSTER) == ReadPlan((r(T0, 0, 10), r(T1, 3, 8)))


def test_specific_offsets_with_earliest_and_latest() -> None:
    plan = plan_batch(options(startingOffsets='{"t":{"0":4,"1":-2}}',
                              endingOffsets='{"t":{"0":6,"1":-1}}'), CLUSTER)
    assert plan == ReadPlan((r(T0, 4, 6), r(T1, 3, 8)))


def test_an_ending_offset_above_the_high_watermark_reads_only_up_to_it() -> None:
    plan = plan_batch(options(endingOffsets='{"t":{"0":50,"1":-1}}',
                              startingOffsets='{"t":{"0":0,"1":3}}'), CLUSTER)
    assert plan.ranges == (r(T0, 0, 10), r(T1, 3, 8))
    assert plan.warnings == ("t-0: the ending offset 50 is above the high watermark 10: reading "
                             "up to the high watermark",)


def test_a_start_below_the_log_start_fails_naming_partition_and_offsets() -> None:
    with pytest.raises(SparkDataLossError) as caught:
        plan_batch(options(startingOffsets='{"t":{"0":0,"1":1}}'), CLUSTER)
    assert caught.value.topic_partitions == (T1,)
    assert "t-1: the starting offset 1 is below the log start offset 3: offsets 1 to 2 are " \
           "gone" in str(caught.value)
    assert "failOnDataLoss" in str(caught.value)


def test_without_fail_on_data_loss_the_read_starts_at_the_log_start() -> None:
    plan = plan_batch(options(startingOffsets='{"t":{"0":0,"1":1}}', failOnDataLoss="false"),
                      CLUSTER)
    assert plan.ranges == (r(T0, 0, 10), r(T1, 3, 8))
    assert len(plan.data_loss) == 1 and plan.data_loss[0].startswith(
        "t-1: the starting offset 1 is below the log start offset 3")


def test_a_start_above_the_high_watermark_is_data_loss_both_ways() -> None:
    spec = '{"t":{"0":12,"1":3}}'
    with pytest.raises(SparkDataLossError, match="t-0: the starting offset 12 is above the high "
                                                 "watermark 10"):
        plan_batch(options(startingOffsets=spec), CLUSTER)
    plan = plan_batch(options(startingOffsets=spec, failOnDataLoss="false"), CLUSTER)
    assert plan.ranges == (r(T1, 3, 8),) and len(plan.data_loss) == 1


def test_an_assigned_partition_that_vanished_both_ways() -> None:
    base = {"bootstrap.servers": "h:1", "assign": '{"t":[0,2]}'}
    with pytest.raises(SparkDataLossError, match=r"\[t-2\] are gone: no such partition") as e:
        plan_batch(parse_source_options(base, streaming=False), CLUSTER)
    assert e.value.topic_partitions == (T2,)
    plan = plan_batch(parse_source_options({**base, "failOnDataLoss": "false"},
                                           streaming=False), CLUSTER)
    assert plan.ranges == (r(T0, 0, 10),) and "t-2" in plan.data_loss[0]


def test_specific_offsets_must_name_every_partition_read() -> None:
    with pytest.raises(SparkOptionError) as caught:
        plan_batch(options(startingOffsets='{"t":{"0":1}}'), CLUSTER)
    assert caught.value.option == "startingOffsets"
    assert "you must specify all TopicPartitions" in str(caught.value)
    assert "Specified: [t-0] Assigned: [t-0, t-1]" in str(caught.value)
    with pytest.raises(SparkOptionError, match=r"startingOffsets names \[u-0\], which the "
                                               "subscription does not read"):
        plan_batch(options(startingOffsets='{"t":{"0":1,"1":3},"u":{"0":0}}'), CLUSTER)


def test_timestamps_resolve_to_the_offsets_found() -> None:
    opts = options(startingTimestamp="1000", endingTimestamp="2000")
    plan = plan_batch(opts, CLUSTER, start_timestamp_offsets={T0: 2, T1: 5},
                      end_timestamp_offsets={T0: 7, T1: None})
    # An ending timestamp no record reaches reads up to the high watermark.
    assert plan.ranges == (r(T0, 2, 7), r(T1, 5, 8))
    opts = options(startingOffsetsByTimestamp='{"t":{"0":1000,"1":1000}}',
                   endingOffsetsByTimestamp='{"t":{"0":2000,"1":2000}}',
                   startingOffsetsByTimestampStrategy="latest")
    plan = plan_batch(opts, CLUSTER, start_timestamp_offsets={T0: 2, T1: None},
                      end_timestamp_offsets={T0: None, T1: None})
    # A start no record reaches is the HW under the "latest" strategy: nothing to read there.
    assert plan.ranges == (r(T0, 2, 10),)
    start = initial_offsets(options(True, startingTimestamp="1000"), CLUSTER,
                            start_timestamp_offsets={T0: 4, T1: 6})
    assert start.offsets == {T0: 4, T1: 6}


def test_a_starting_timestamp_with_no_record_that_late_fails_by_default() -> None:
    opts = options(startingTimestamp="1000")
    with pytest.raises(SparkOptionError) as caught:
        plan_batch(opts, CLUSTER, start_timestamp_offsets={T0: 2, T1: None})
    assert caught.value.option == "startingTimestamp"
    assert "No offset matched from request of topic-partition t-1 and timestamp 1000" in str(
        caught.value)
    with pytest.raises(ValueError, match="no timestamp lookup result for t-1"):
        plan_batch(opts, CLUSTER, start_timestamp_offsets={T0: 2})


def test_a_resolved_start_after_the_resolved_end_is_refused() -> None:
    opts = options(startingTimestamp="1000", endingOffsets='{"t":{"0":5,"1":5}}')
    with pytest.raises(SparkOptionError, match="resolved starting offset 7 is greater than the "
                                               "resolved ending offset 5 for t-0"):
        plan_batch(opts, CLUSTER, start_timestamp_offsets={T0: 7, T1: 4})


def test_min_partitions_splits_the_large_ranges_as_spark() -> None:
    # Spark's KafkaOffsetRangeCalculatorSuite case: 4 and 20 records, minPartitions 3.
    got = split_ranges([r(T0, 1, 5), r(T1, 1, 21)], min_partitions=3)
    assert got == [r(T0, 1, 5), r(T1, 1, 11), r(T1, 11, 21)]
    # Enough ranges already: no split; empty ones dropped.
    assert split_ranges([r(T0, 0, 9), r(T1, 5, 5)], min_partitions=1) == [r(T0, 0, 9)]
    # One range into 3 as equal as integer division makes them, the remainder last.
    assert split_ranges([r(T0, 0, 10)], min_partitions=3) == [r(T0, 0, 3), r(T0, 3, 6),
                                                              r(T0, 6, 10)]
    assert split_ranges([r(T0, 0, 10)], min_partitions=None,
                        max_records_per_partition=4) == [r(T0, 0, 3), r(T0, 3, 6), r(T0, 6, 10)]
    plan = plan_batch(options(minPartitions="4"), CLUSTER)
    assert sum(x.size for x in plan.ranges) == 15 and len(plan.ranges) == 4


def test_split_pieces_cover_each_offset_exactly_once() -> None:
    """Seeded and bounded: 500 random sets of ranges and minPartitions/maxRecordsPerPartition."""
    rng = random.Random(12)
    for _ in range(500):
        ranges = [r(TopicPartition("t", p), start, start + rng.choice([0, 1, 7, rng.randrange(
            0, 5000)])) for p in range(rng.randrange(1, 6)) for start in [rng.randrange(0, 99)]]
        min_partitions = rng.choice([None, 1, 2, 3, 7, 40, 1000])
        max_records = rng.choice([None, None, 1, 13, 700])
        pieces = split_ranges(ranges, min_partitions=min_partitions,
                              max_records_per_partition=max_records)
        for whole in ranges:
            mine = [x for x in pieces if x.topic_partition == whole.topic_partition]
            covered = [o for x in mine for o in range(x.from_offset, x.until_offset)]
            assert covered == list(range(whole.from_offset, whole.until_offset))
        assert all(x.size > 0 for x in pieces)
        if max_records is not None:
            assert all(x.size <= max_records for x in pieces)
        non_empty = sum(1 for x in ranges if x.size > 0)
        if min_partitions is not None and max_records is None and \
                min_partitions > non_empty and sum(x.size for x in ranges) >= min_partitions:
            # "approximately minPartitions": never fewer than it, up to rounding.
            assert len(pieces) >= min_partitions - non_empty


# -- streaming --------------------------------------------------------------------------------

def test_initial_offsets_for_each_starting_form() -> None:
    assert initial_offsets(options(True), CLUSTER).offsets == {T0: 10, T1: 8}
    assert initial_offsets(options(True, startingOffsets="earliest"), CLUSTER).offsets == {
        T0: 0, T1: 3}
    start = initial_offsets(options(True, startingOffsets='{"t":{"0":-1,"1":-2}}'), CLUSTER)
    assert start.offsets == {T0: 10, T1: 3}
    with pytest.raises(SparkDataLossError, match="t-1: the starting offset 0 is below"):
        initial_offsets(options(True, startingOffsets='{"t":{"0":1,"1":0}}'), CLUSTER)
    lenient = initial_offsets(options(True, startingOffsets='{"t":{"0":1,"1":0}}',
                                      failOnDataLoss="false"), CLUSTER)
    assert lenient.offsets == {T0: 1, T1: 3} and len(lenient.data_loss) == 1


def test_next_end_offsets_without_a_limit_are_the_high_watermarks() -> None:
    assert next_end_offsets(options(True), {T0: 2, T1: 3}, CLUSTER, max_rows=None) == {
        T0: 10, T1: 8}
    capped = next_end_offsets(options(True), {T0: 2, T1: 3}, CLUSTER, max_rows=None,
                              available_now={T0: 6, T1: 8})
    assert capped == {T0: 6, T1: 8}


def test_rate_limit_shares_in_proportion_and_feeds_small_partitions() -> None:
    # 8 and 5 available, limit 4: t-0 gets floor(4*8/13)=2, t-1 floor(4*5/13)=1.
    assert next_end_offsets(options(True), {T0: 2, T1: 3}, CLUSTER, max_rows=4) == {
        T0: 4, T1: 4}
    # A share below one record is one record.
    assert rate_limit(2, {T0: 0, T1: 0}, {T0: 1000, T1: 1}) == {T0: 1, T1: 1}
    # A new partition (no start) counts from its log start offset (t-1: 3).
    assert next_end_offsets(options(True), {T0: 10}, CLUSTER, max_rows=100) == {T0: 10, T1: 8}
    with pytest.raises(ValueError, match="rate limit must be positive"):
        rate_limit(0, {T0: 0}, {T0: 1})


def test_rate_limit_sums() -> None:
    """Seeded and bounded: 500 random starts, ends and limits."""
    rng = random.Random(7)
    for _ in range(500):
        tps = [TopicPartition("t", p) for p in range(rng.randrange(1, 8))]
        start = {tp: rng.randrange(0, 100) for tp in tps}
        latest = {tp: start[tp] + rng.choice([0, 1, rng.randrange(0, 10_000)]) for tp in tps}
        limit = rng.choice([1, 2, 10, 999, 50_000])
        ends = rate_limit(limit, start, latest)
        read = sum(ends[tp] - start[tp] for tp in tps)
        available = sum(latest[tp] - start[tp] for tp in tps)
        assert all(start[tp] <= ends[tp] <= latest[tp] for tp in tps)
        assert read <= limit + len(tps)
        if available <= limit:
            assert ends == latest
        else:
            assert read >= min(available, limit) - len(tps)


def test_a_micro_batch_plans_start_to_end() -> None:
    opts = options(True)
    assert plan_micro_batch(opts, {T0: 2, T1: 3}, {T0: 6, T1: 8}, CLUSTER) == ReadPlan(
        (r(T0, 2, 6), r(T1, 3, 8)))
    assert plan_micro_batch(opts, {T0: 6}, {T0: 6}, CLUSTER) == ReadPlan(())
    split = plan_micro_batch(options(True, minPartitions="3"), {T0: 0}, {T0: 9}, CLUSTER)
    assert split.ranges == (r(T0, 0, 3), r(T0, 3, 6), r(T0, 6, 9))


def test_a_new_partition_starts_at_its_log_start() -> None:
    cluster = {**CLUSTER, T2: PartitionInfo(0, 5)}
    plan = plan_micro_batch(options(True), {T0: 10, T1: 8}, {T0: 10, T1: 8, T2: 5}, cluster)
    assert plan == ReadPlan((r(T2, 0, 5),))
    # A newly matching topic under subscribePattern is found by the end offsets, then planned.
    pattern = parse_source_options({"bootstrap.servers": "h:1", "subscribePattern": "[tu]"},
                                   streaming=True)
    end = next_end_offsets(pattern, {T0: 10, T1: 8}, CLUSTER, max_rows=None)
    assert end == {T0: 10, T1: 8, U0: 4}
    assert plan_micro_batch(pattern, {T0: 10, T1: 8}, end, CLUSTER).ranges == (r(U0, 0, 4),)


def test_a_new_partition_missing_records_is_data_loss_both_ways() -> None:
    cluster = {**CLUSTER, T2: PartitionInfo(4, 9)}
    with pytest.raises(SparkDataLossError, match="Added partition t-2 starts from 4 instead "
                                                 "of 0"):
        plan_micro_batch(options(True), {T0: 10}, {T0: 10, T2: 9}, cluster)
    plan = plan_micro_batch(options(True, failOnDataLoss="false"), {T0: 10}, {T0: 10, T2: 9},
                            cluster)
    assert plan.ranges == (r(T2, 4, 9),) and len(plan.data_loss) == 1
    # In the end offsets but gone from the cluster since: its earliest offset cannot be found.
    plan = plan_micro_batch(options(True, failOnDataLoss="false"), {T0: 10}, {T0: 10, T2: 9},
                            CLUSTER)
    assert plan.ranges == () and "Cannot find earliest offsets of t-2" in plan.data_loss[0]


def test_a_partition_gone_or_gone_back_is_data_loss_both_ways() -> None:
    with pytest.raises(SparkDataLossError, match=r"\[t-1\] are gone") as caught:
        plan_micro_batch(options(True), {T0: 2, T1: 3}, {T0: 6}, CLUSTER)
    assert caught.value.topic_partitions == (T1,)
    with pytest.raises(SparkDataLossError, match="Partition t-0's offset was changed from 9 "
                                                 "to 4"):
        plan_micro_batch(options(True), {T0: 9}, {T0: 4}, CLUSTER)
    lenient = options(True, failOnDataLoss="false")
    plan = plan_micro_batch(lenient, {T0: 9, T1: 3}, {T0: 4}, CLUSTER)
    assert plan.ranges == () and len(plan.data_loss) == 2


def test_records_removed_by_retention_before_a_batch_read_them() -> None:
    cluster = {T0: PartitionInfo(5, 10)}
    with pytest.raises(SparkDataLossError, match="t-0: offsets 2 to 4 were removed"):
        plan_micro_batch(options(True), {T0: 2}, {T0: 8}, cluster)
    plan = plan_micro_batch(options(True, failOnDataLoss="false"), {T0: 2}, {T0: 8}, cluster)
    assert plan.ranges == (r(T0, 5, 8),) and len(plan.data_loss) == 1


def test_a_restart_from_the_checkpointed_json_plans_the_same_batch() -> None:
    opts = options(True, maxOffsetsPerTrigger="6")
    start = initial_offsets(options(True, startingOffsets="earliest"), CLUSTER).offsets
    end = next_end_offsets(opts, start, CLUSTER, max_rows=opts.max_offsets_per_trigger)
    checkpointed_start = offsets_from_dict(offsets_to_dict(start))
    checkpointed_end = offsets_from_dict(offsets_to_dict(end))
    assert plan_micro_batch(opts, checkpointed_start, checkpointed_end, CLUSTER) == \
        plan_micro_batch(opts, start, end, CLUSTER)
    # The next batch starts where the checkpoint says, reading only what is new.
    following = next_end_offsets(opts, checkpointed_end, CLUSTER, max_rows=None)
    plan = plan_micro_batch(opts, checkpointed_end, following, CLUSTER)
    assert [(x.topic_partition, x.from_offset) for x in plan.ranges] == [
        (tp, checkpointed_end[tp]) for tp in sorted(checkpointed_end)
        if checkpointed_end[tp] < following[tp]]


def test_delay_batch_waits_for_min_offsets_until_the_max_delay() -> None:
    start, latest = {T0: 0, T1: 0}, {T0: 3, T1: 4}
    assert delay_batch(10, start, latest, now_ms=1000, last_trigger_ms=0,
                       max_trigger_delay_ms=5000)
    assert not delay_batch(7, start, latest, now_ms=1000, last_trigger_ms=0,
                           max_trigger_delay_ms=5000)
    assert not delay_batch(10, start, latest, now_ms=5000, last_trigger_ms=0,
                           max_trigger_delay_ms=5000)
