"""A follower's decisions on one fetch response (Kafka's AbstractFetcherThread, per partition).

Pure functions of the request, the leader's answer and the local log (a LogView), used by
``PartitionState.on_fetch_response`` once it has checked that the answer is still current.
They return effects in the order the shell must apply them.
"""

from __future__ import annotations

from tidelog.broker.replication.effects import (
    AppendFetchedBatches,
    BackoffFetch,
    Effect,
    MaybeIncrementLogStartOffset,
    TruncateFullyAndStartAt,
    TruncateTo,
    UpdateHighWatermark,
)
from tidelog.broker.replication.fetch import (
    UNDEFINED_EPOCH,
    DivergingEpoch,
    FollowerFetch,
    LeaderFetchResponse,
    LogView,
)
from tidelog.invariants import InvariantViolation
from tidelog.v1.common_pb2 import ErrorCode

__all__ = ["on_diverging_epoch", "on_offset_out_of_range", "on_records", "truncation_offset"]


def on_records(request: FollowerFetch, response: LeaderFetchResponse, log: LogView
               ) -> list[Effect]:
    """Append what came, then take the leader's HW (clamped to our new LEO, as Kafka's
    ``log.updateHighWatermark`` does), then follow its log start offset."""
    effects: list[Effect] = []
    new_leo = request.fetch_offset
    if response.batches_next_offset is not None:
        if response.batches_next_offset <= new_leo:
            raise InvariantViolation(
                f"fetched batches end at {response.batches_next_offset}, not past the fetch offset "
                f"{new_leo}")
        new_leo = response.batches_next_offset
        effects.append(AppendFetchedBatches(new_leo))
    # A follower's HW may go down (a new leader's HW can lag): consumers read from leaders.
    hw = min(response.high_watermark, new_leo)
    if hw != log.high_watermark and hw >= log.log_start_offset:
        effects.append(UpdateHighWatermark(hw))
    log_start_offset = min(response.log_start_offset, hw)
    if log_start_offset > log.log_start_offset:
        effects.append(MaybeIncrementLogStartOffset(log_start_offset))
    return effects


def on_diverging_epoch(diverging: DivergingEpoch, log: LogView) -> list[Effect]:
    if diverging.epoch == UNDEFINED_EPOCH or diverging.end_offset < 0:
        # A leader answers OFFSET_OUT_OF_RANGE when it has no end for the epoch; never this.
        return [BackoffFetch(ErrorCode.UNKNOWN_SERVER_ERROR)]
    return [TruncateTo(truncation_offset(diverging, log))]


def truncation_offset(diverging: DivergingEpoch, log: LogView) -> int:
    """Kafka's getOffsetTruncationState: where a follower truncates after a divergence.

    The leader says its epoch E ends at X. If our largest epoch <= E is E itself, both logs hold
    E's leader's batches up to the smaller of the two ends; if it is an older epoch F, we cut to
    F's end and the next fetch asks again with F. Never below what both logs share, and never
    to the HW (KIP-101). Every answer removes data -- and the next fetch carries an older epoch
    or a smaller offset -- as long as the log's last epoch entry holds data, which is why the
    leader never records its epoch before its first append (PartitionState's
    _end_offset_for_epoch).
    """
    leo = log.log_end_offset
    own_epoch, own_end = log.end_offset_for_epoch(diverging.epoch)
    if own_epoch == UNDEFINED_EPOCH or own_end < 0:
        return min(diverging.end_offset, leo)
    if own_epoch != diverging.epoch:
        return min(own_end, leo)
    return min(own_end, diverging.end_offset, leo)


def on_offset_out_of_range(response: LeaderFetchResponse, log: LogView) -> list[Effect]:
    """Kafka's fetchOffsetAndTruncate, with the leader's offsets taken from the response."""
    leo = log.log_end_offset
    if 0 <= response.log_end_offset < leo:
        # Only after an unclean election: the leader has less than we do.
        return [TruncateTo(response.log_end_offset)]
    if response.log_start_offset > leo:
        return [TruncateFullyAndStartAt(response.log_start_offset)]
    return [BackoffFetch(ErrorCode.OFFSET_OUT_OF_RANGE)]
