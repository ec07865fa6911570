"""PartitionState (broker/replication/partition_state.py), one rule per test, as pure data.

Each test builds a state with a few calls -- metadata (become_leader/become_follower), follower
fetches, ticks, AlterPartition answers -- and compares the returned effects and decisions
whole, and the state's read-only view. The local log is ``FakeLog``, a LogView over the
storage's own LeaderEpochCache; one test drives the core with a real RocksDB PartitionLog to
show that it is a LogView as it is. Broker 1 is the local broker; time starts at 10 000 ms.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tidelog.broker.replication import (
    AcksDone,
    AppendFetchedBatches,
    BackoffFetch,
    CheckProduceWaiters,
    DivergingEpoch,
    FollowerFetch,
    LeaderFetchResponse,
    MaybeIncrementLogStartOffset,
    PartitionState,
    ProposeIsr,
    Role,
    TruncateFullyAndStartAt,
    TruncateTo,
    UpdateHighWatermark,
)
from tidelog.broker.replication.fetch import FollowerFetchDecision
from tidelog.broker.storage import LogConfig, PartitionLog, Storage
from tidelog.broker.storage.epoch_cache import LeaderEpochCache
from tidelog.data_dir import format_data_dir
from tidelog.errors import (
    FencedLeaderEpochError,
    InvalidRequiredAcksError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from tidelog.record_batch import NewRecord, build_batch, validate_batch
from tidelog.v1.common_pb2 import ErrorCode

ME = 1
NOW = 10_000
LAG = 1_000


class FakeLog:
    """A LogView: epochs (epoch, start offset), offsets; nothing else."""

    def __init__(self, epochs: Sequence[tuple[int, int]] = ((0, 0),), *, leo: int = 10,
                 start: int = 0, hw: int = 0) -> None:
        self.epochs = LeaderEpochCache(list(epochs))
        self.log_start_offset = start
        self.log_end_offset = leo
        self.high_watermark = hw

    def latest_epoch(self) -> int:
        return self.epochs.latest_epoch()

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for_epoch(leader_epoch, self.log_end_offset)


def leader(*, isr: Sequence[int] = (1, 2, 3), replicas: Sequence[int] = (1, 2, 3),
           leo: int = 10, hw: int = 5, epoch: int = 5) -> PartitionState:
    state = PartitionState(ME, replica_lag_time_max_ms=LAG)
    state.become_leader(leader_epoch=epoch, partition_epoch=10, replicas=replicas, isr=isr,
                        log_end_offset=leo, high_watermark=hw, now_ms=NOW)
    return state


def fetch(state: PartitionState, replica: int, offset: int, *, now: int = NOW,
          last_epoch: int | None = None, log: FakeLog | None = None,
          current_epoch: int | None = None) -> FollowerFetchDecision:
    """A follower fetch; by default its log matches the leader's (epoch 0, then the leader's)."""
    log = log or FakeLog([(0, 0), (state.leader_epoch, state.leader_epoch_start_offset)],
                         leo=state.log_end_offset)
    if last_epoch is None:
        last_epoch = state.leader_epoch if offset > state.leader_epoch_start_offset else 0
    return state.on_follower_fetch(
        replica, fetch_offset=offset, last_fetched_epoch=last_epoch,
        current_leader_epoch=state.leader_epoch if current_epoch is None else current_epoch,
        log=log, now_ms=now)


def commit(state: PartitionState, proposal: ProposeIsr, *, now: int = NOW) -> list[object]:
    return list(state.on_alter_partition_response(
        proposal, error_code=ErrorCode.NONE, leader_id=ME, leader_epoch=proposal.leader_epoch,
        isr=proposal.new_isr, partition_epoch=proposal.partition_epoch + 1, now_ms=now))


# --- metadata ----------------------------------------------------------------------------------


def test_become_leader_waits_for_the_followers_first_fetches() -> None:
    state = PartitionState(ME, replica_lag_time_max_ms=LAG)
    effects = state.become_leader(leader_epoch=5, partition_epoch=10, replicas=(1, 2, 3),
                                  isr=(1, 2), log_end_offset=10, high_watermark=5, now_ms=NOW)
    assert effects == [CheckProduceWaiters()]
    assert (state.role, state.leader_id, state.leader_epoch, state.partition_epoch) == (
        Role.LEADER, ME, 5, 10)
    assert (state.isr, state.high_watermark, state.leader_epoch_start_offset) == ((1, 2), 5, 10)


def test_a_sole_isr_member_commits_its_whole_log() -> None:
    state = PartitionState(ME)
    effects = state.become_leader(leader_epoch=0, partition_epoch=0, replicas=(1, 2), isr=(1,),
                                  log_end_offset=7, high_watermark=0, now_ms=NOW)
    assert effects == [UpdateHighWatermark(7), CheckProduceWaiters()]
    assert state.on_local_append(9, now_ms=NOW) == [UpdateHighWatermark(9)]


def test_stale_metadata_is_ignored() -> None:
    state = leader(epoch=5)
    assert state.become_leader(leader_epoch=4, partition_epoch=11, replicas=(1, 2, 3), isr=(1,),
                               log_end_offset=10, high_watermark=5, now_ms=NOW) == []
    assert state.become_follower(leader_id=2, leader_epoch=4, partition_epoch=11,
                                 replicas=(1, 2, 3), isr=(2,)) == []
    for partition_epoch in (9, 10):  # the same partition epoch again is no news either
        assert state.become_leader(leader_epoch=5, partition_epoch=partition_epoch,
                                   replicas=(1, 2, 3), isr=(1,), log_end_offset=10,
                                   high_watermark=5, now_ms=NOW) == []
    assert (state.role, state.isr, state.partition_epoch) == (Role.LEADER, (1, 2, 3), 10)


def test_same_epoch_isr_update_keeps_what_the_leader_knows() -> None:
    state = leader(isr=(1, 2, 3))
    fetch(state, 2, 10)
    assert state.high_watermark == 5  # broker 3 has not fetched yet
    effects = state.become_leader(leader_epoch=5, partition_epoch=11, replicas=(1, 2, 3),
                                  isr=(1, 2), log_end_offset=10, high_watermark=5, now_ms=NOW)
    assert effects == [UpdateHighWatermark(10), CheckProduceWaiters()]
    assert state.follower_state(2) is not None and state.follower_state(2).log_end_offset == 10


def test_a_new_leader_epoch_forgets_follower_offsets_even_for_the_same_leader() -> None:
    state = leader(isr=(1, 2), replicas=(1, 2))
    fetch(state, 2, 10)
    assert state.high_watermark == 10
    state.on_local_append(12, now_ms=NOW)
    effects = state.become_leader(leader_epoch=6, partition_epoch=11, replicas=(1, 2),
                                  isr=(1, 2), log_end_offset=12, high_watermark=10, now_ms=NOW)
    assert effects == [CheckProduceWaiters()]
    assert state.follower_state(2).log_end_offset == -1  # type: ignore[union-attr]
    assert state.leader_epoch_start_offset == 12


def test_become_follower() -> None:
    state = leader()
    effects = state.become_follower(leader_id=2, leader_epoch=6, partition_epoch=11,
                                    replicas=(1, 2, 3), isr=(2, 3))
    assert effects == [CheckProduceWaiters()]  # waiting produces now fail
    assert (state.role, state.leader_id, state.leader_epoch, state.isr) == (
        Role.FOLLOWER, 2, 6, (2, 3))
    assert isinstance(state.check_produce(1, 1), NotLeaderOrFollowerError)
    # An ISR change of the same epoch only updates the view.
    assert state.become_follower(leader_id=2, leader_epoch=6, partition_epoch=12,
                                 replicas=(1, 2, 3), isr=(1, 2, 3)) == []
    assert state.isr == (1, 2, 3)


# --- HW ----------------------------------------------------------------------------------------


def test_hw_is_the_minimum_leo_over_the_isr_and_never_goes_back() -> None:
    state = leader(isr=(1, 2, 3), leo=10, hw=5)
    assert fetch(state, 2, 8).effects == ()
    assert fetch(state, 3, 9).effects == (UpdateHighWatermark(8),)
    assert fetch(state, 2, 10).effects == (UpdateHighWatermark(9),)
    decision = fetch(state, 3, 10)
    assert decision.effects == (UpdateHighWatermark(10),)
    assert (decision.high_watermark, decision.log_end_offset) == (10, 10)
    state.on_local_append(15, now_ms=NOW)
    # A follower that reports less (it truncated) does not pull the HW back.
    assert fetch(state, 2, 10).effects == ()
    assert state.high_watermark == 10


def test_hw_ignores_lagging_followers_outside_the_isr() -> None:
    state = leader(isr=(1, 2), leo=10, hw=5)
    fetch(state, 3, 0)
    assert fetch(state, 2, 10).effects == (UpdateHighWatermark(10),)


def caught_up_outside_the_isr() -> PartitionState:
    """Broker 3 caught up (at LEO 10) but not in the ISR: broker 4's expansion is pending."""
    state = leader(isr=(1, 2), replicas=(1, 2, 3, 4), leo=10, hw=5)
    fetch(state, 2, 10)
    assert fetch(state, 4, 10).effects == (ProposeIsr(5, 10, (1, 2, 4)),)
    assert fetch(state, 3, 10).effects == ()
    state.on_local_append(20, now_ms=NOW)
    fetch(state, 2, 20, now=NOW + 1)
    fetch(state, 4, 20, now=NOW + 1)
    assert state.high_watermark == 10
    return state


def test_hw_waits_for_a_caught_up_follower_about_to_join_the_isr() -> None:
    """Kafka's shouldWaitForReplicaToJoinIsr: else, under load, it could never join."""
    state = caught_up_outside_the_isr()
    assert fetch(state, 3, 15, now=NOW + 2).effects == (UpdateHighWatermark(15),)
    # Once its caught-up time is older than the lag limit, it no longer holds the HW.
    assert state.tick(NOW + LAG + 1) == [UpdateHighWatermark(20)]


def test_an_ineligible_follower_never_holds_the_hw_from_outside_the_isr() -> None:
    state = caught_up_outside_the_isr()
    assert state.set_ineligible_replicas(frozenset({3}), now_ms=NOW) == [UpdateHighWatermark(20)]


# --- caught up, ISR shrink ---------------------------------------------------------------------


def test_last_caught_up_time_follows_kafkas_rule() -> None:
    state = leader(isr=(1, 2), leo=10, hw=5)
    fetch(state, 2, 10, now=NOW + 100)  # at the leader's LEO: caught up now
    assert state.follower_state(2).last_caught_up_time_ms == NOW + 100  # type: ignore[union-attr]
    state.on_local_append(20, now_ms=NOW)
    fetch(state, 2, 10, now=NOW + 200)  # behind, and not past the LEO of its last fetch... at it
    assert state.follower_state(2).last_caught_up_time_ms == NOW + 100  # type: ignore[union-attr]
    state.on_local_append(30, now_ms=NOW)
    fetch(state, 2, 20, now=NOW + 300)  # has what the leader had at its previous fetch
    assert state.follower_state(2).last_caught_up_time_ms == NOW + 200  # type: ignore[union-attr]
    fetch(state, 2, 25, now=NOW + 400)  # short of the LEO (30) of its previous fetch
    assert state.follower_state(2).last_caught_up_time_ms == NOW + 200  # type: ignore[union-attr]


def test_tick_shrinks_followers_not_caught_up_within_the_lag() -> None:
    state = leader(isr=(1, 2, 3), leo=10, hw=5)
    fetch(state, 2, 10)
    fetch(state, 3, 10)
    state.on_local_append(12, now_ms=NOW)
    fetch(state, 2, 12, now=NOW + LAG)
    assert state.tick(NOW + LAG) == []
    proposal = ProposeIsr(leader_epoch=5, partition_epoch=10, new_isr=(1, 2))
    assert state.tick(NOW + LAG + 1) == [proposal]
    assert state.pending_isr_change == proposal
    assert state.isr == (1, 2, 3)  # until the controller commits it
    assert state.tick(NOW + LAG + 2) == []  # one proposal at a time


def test_an_idle_follower_at_the_leaders_leo_is_never_shrunk() -> None:
    state = leader(isr=(1, 2), leo=10, hw=5)
    fetch(state, 2, 10)
    assert state.tick(NOW + 100 * LAG) == []


def test_a_pending_shrink_still_holds_the_hw_for_the_removed_follower() -> None:
    """KIP-497: until committed, the controller may still elect the follower being removed."""
    state = leader(isr=(1, 2, 3), leo=10, hw=5)
    fetch(state, 2, 10)
    fetch(state, 3, 7)
    [proposal] = state.tick(NOW + LAG + 1)
    assert proposal == ProposeIsr(5, 10, (1, 2))
    fetch(state, 2, 10, now=NOW + LAG + 2)
    assert state.high_watermark == 7
    assert commit(state, proposal, now=NOW + LAG + 3) == [UpdateHighWatermark(10),
                                                           CheckProduceWaiters()]
    assert (state.isr, state.partition_epoch, state.pending_isr_change) == ((1, 2), 11, None)


# --- ISR expansion -----------------------------------------------------------------------------


def test_expansion_needs_the_hw_and_the_leader_epoch_start_offset() -> None:
    state = leader(isr=(1, 2), leo=10, hw=5)
    fetch(state, 2, 10)  # HW 10
    assert fetch(state, 3, 9).effects == ()
    assert fetch(state, 3, 10).effects == (ProposeIsr(5, 10, (1, 2, 3)),)

    state = leader(isr=(1, 2), leo=10, hw=4)
    fetch(state, 2, 6)  # HW 6 < the epoch start offset 10
    assert fetch(state, 3, 8).effects == ()  # has the HW, not all the previous leaders wrote
    assert fetch(state, 3, 10).effects == (ProposeIsr(5, 10, (1, 2, 3)),)


def test_expansion_skips_ineligible_replicas_and_waits_for_a_pending_change() -> None:
    state = leader(isr=(1,), replicas=(1, 2, 3), leo=10, hw=10)
    state.set_ineligible_replicas(frozenset({3}), now_ms=NOW)
    assert fetch(state, 3, 10).effects == ()
    assert fetch(state, 2, 10).effects == (ProposeIsr(5, 10, (1, 2)),)
    state.set_ineligible_replicas(frozenset(), now_ms=NOW)
    assert fetch(state, 3, 10).effects == ()  # one in flight


def test_a_pending_expansion_holds_the_hw_for_the_new_member() -> None:
    state = leader(isr=(1,), replicas=(1, 2), leo=10, hw=10)
    assert fetch(state, 2, 10).effects == (ProposeIsr(5, 10, (1, 2)),)
    assert state.maximal_isr == frozenset({1, 2})
    assert state.on_local_append(14, now_ms=NOW) == []  # would be 14 with the committed ISR
    assert fetch(state, 2, 14).effects == (UpdateHighWatermark(14),)


def test_alter_partition_answers() -> None:
    state = leader(isr=(1,), replicas=(1, 2), leo=10, hw=10)
    [proposal] = fetch(state, 2, 10).effects
    assert isinstance(proposal, ProposeIsr)
    timeout = ErrorCode.REQUEST_TIMED_OUT
    assert state.on_alter_partition_response(proposal, error_code=timeout, now_ms=NOW) == [
        proposal]  # retry the same proposal
    for code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION):
        assert state.on_alter_partition_response(proposal, error_code=code, now_ms=NOW) == []
        assert state.pending_isr_change == proposal  # it may have been applied: wait for metadata
    stale = state.on_alter_partition_response(proposal, error_code=ErrorCode.NONE, leader_id=ME,
                                              leader_epoch=4, isr=(1, 2), partition_epoch=11,
                                              now_ms=NOW)
    assert stale == [] and state.pending_isr_change == proposal
    assert state.on_alter_partition_response(proposal, error_code=ErrorCode.INELIGIBLE_REPLICA,
                                             now_ms=NOW) == [CheckProduceWaiters()]
    assert state.pending_isr_change is None and state.isr == (1,)
    assert commit(state, proposal) == []  # an answer to nothing pending


def test_metadata_with_the_change_clears_the_pending_proposal() -> None:
    state = leader(isr=(1,), replicas=(1, 2), leo=10, hw=10)
    [proposal] = fetch(state, 2, 10).effects
    state.become_leader(leader_epoch=5, partition_epoch=11, replicas=(1, 2), isr=(1, 2),
                        log_end_offset=10, high_watermark=10, now_ms=NOW)
    assert (state.isr, state.pending_isr_change) == ((1, 2), None)
    assert isinstance(proposal, ProposeIsr)
    assert commit(state, proposal) == []  # the late answer changes nothing


# --- leader: fetch checks and divergence -------------------------------------------------------


def test_fetch_errors() -> None:
    state = leader(isr=(1, 2), leo=10, hw=5, epoch=5)
    log = FakeLog([(0, 0), (5, 10)], leo=10, start=3)
    assert isinstance(fetch(state, 2, 10, current_epoch=4, log=log).error, FencedLeaderEpochError)
    assert isinstance(fetch(state, 2, 10, current_epoch=6, log=log).error, UnknownLeaderEpochError)
    assert fetch(state, 2, 10, current_epoch=-1, log=log).error is None
    assert isinstance(fetch(state, 9, 10, log=log).error, NotLeaderOrFollowerError)
    below = fetch(state, 2, 2, log=log)
    assert isinstance(below.error, OffsetOutOfRangeError)
    assert (below.log_start_offset, below.log_end_offset, below.should_read) == (3, 10, False)
    assert isinstance(fetch(state, 2, 11, last_epoch=-1, log=log).error, OffsetOutOfRangeError)
    follower = PartitionState(ME)
    follower.become_follower(leader_id=2, leader_epoch=5, partition_epoch=1, replicas=(1, 2),
                             isr=(1, 2))
    assert isinstance(fetch(follower, 2, 0, log=log).error, NotLeaderOrFollowerError)


def test_divergence_is_answered_and_leaves_the_follower_untracked() -> None:
    state = leader(isr=(1, 2), leo=30, hw=5, epoch=5)
    log = FakeLog([(1, 0), (3, 20), (5, 30)], leo=30)
    # The follower claims more of the current epoch than the leader has.
    assert fetch(state, 2, 31, last_epoch=5, log=log).diverging_epoch == DivergingEpoch(5, 30)
    # The follower's last epoch (2) never existed here: the largest below it, and its end,
    # whatever the fetch offset.
    assert fetch(state, 2, 18, last_epoch=2, log=log).diverging_epoch == DivergingEpoch(1, 20)
    decision = fetch(state, 2, 22, last_epoch=2, log=log)
    assert (decision.diverging_epoch, decision.error, decision.effects, decision.should_read) == (
        DivergingEpoch(1, 20), None, (), False)
    assert state.follower_state(2).log_end_offset == -1  # type: ignore[union-attr]
    # Epoch 3 ends at 30 here: a follower at 25 in epoch 3 is on the leader's log.
    assert fetch(state, 2, 25, last_epoch=3, log=log).should_read
    assert state.follower_state(2).log_end_offset == 25  # type: ignore[union-attr]


def test_divergence_before_the_first_append_of_the_epoch() -> None:
    """The leader epoch is not in the log until its first append; answers are as if it were."""
    state = leader(isr=(1, 2), leo=20, hw=5, epoch=7)
    log = FakeLog([(1, 0), (3, 12)], leo=20)
    # Epoch 5 (another leader's, never seen here) -> our epoch 3 ends where epoch 7 starts.
    assert fetch(state, 2, 22, last_epoch=5, log=log).diverging_epoch == DivergingEpoch(3, 20)
    assert fetch(state, 2, 20, last_epoch=3, log=log).should_read
    empty = FakeLog([], leo=20, start=20)
    assert fetch(state, 2, 25, last_epoch=4, log=empty).diverging_epoch == DivergingEpoch(4, 20)


# --- acks --------------------------------------------------------------------------------------


def test_check_produce() -> None:
    state = leader(isr=(1, 2), leo=10, hw=5)
    assert isinstance(state.check_produce(2, 1), InvalidRequiredAcksError)
    assert state.check_produce(-1, 2) is None
    assert isinstance(state.check_produce(-1, 3), NotEnoughReplicasError)
    assert state.check_produce(1, 3) is None and state.check_produce(0, 3) is None
    fetch(state, 2, 10)
    fetch(state, 3, 10)  # expansion proposed: the committed ISR still has 2 members
    assert state.pending_isr_change is not None
    assert isinstance(state.check_produce(-1, 3), NotEnoughReplicasError)


def test_acks_all_outcome() -> None:
    state = leader(isr=(1, 2, 3), leo=10, hw=5)
    wait = {"required_offset": 10, "leader_epoch": 5, "min_insync_replicas": 2}
    assert state.acks_all_outcome(**wait) is None
    fetch(state, 2, 10)
    fetch(state, 3, 10)
    assert state.acks_all_outcome(**wait) == AcksDone(None)


def test_acks_all_after_the_isr_shrank_below_min_isr() -> None:
    state = leader(isr=(1, 2), leo=10, hw=5)
    [proposal] = state.tick(NOW + LAG + 1)
    assert isinstance(proposal, ProposeIsr)
    assert state.acks_all_outcome(required_offset=10, leader_epoch=5,
                                  min_insync_replicas=2) is None
    commit(state, proposal)
    done = state.acks_all_outcome(required_offset=10, leader_epoch=5, min_insync_replicas=2)
    assert done is not None and isinstance(done.error, NotEnoughReplicasAfterAppendError)


def test_acks_all_fail_when_the_leader_epoch_changes() -> None:
    state = leader(isr=(1,), replicas=(1, 2), leo=10, hw=10)
    state.become_leader(leader_epoch=6, partition_epoch=11, replicas=(1, 2), isr=(1,),
                        log_end_offset=10, high_watermark=10, now_ms=NOW)
    done = state.acks_all_outcome(required_offset=10, leader_epoch=5, min_insync_replicas=1)
    assert done is not None and isinstance(done.error, NotLeaderOrFollowerError)


# --- follower ----------------------------------------------------------------------------------


def follower(*, leader_id: int = 2, epoch: int = 5) -> PartitionState:
    state = PartitionState(ME)
    state.become_follower(leader_id=leader_id, leader_epoch=epoch, partition_epoch=3,
                          replicas=(1, 2, 3), isr=(1, 2, 3))
    return state


def request_for(state: PartitionState, log: FakeLog) -> FollowerFetch:
    request = state.fetch_request(log)
    assert request is not None
    return request


def test_fetch_request() -> None:
    state = follower(epoch=5)
    log = FakeLog([(0, 0), (3, 8)], leo=12, start=2)
    assert state.fetch_request(log) == FollowerFetch(2, 5, 12, 3, 2)
    offline = follower(leader_id=-1)
    assert offline.fetch_request(log) is None
    assert leader().fetch_request(log) is None


def test_records_append_then_hw_then_log_start() -> None:
    state = follower()
    log = FakeLog([(0, 0)], leo=10, start=0, hw=4)
    response = LeaderFetchResponse(ErrorCode.NONE, high_watermark=15, log_start_offset=3,
                                   log_end_offset=20, batches_next_offset=13)
    assert state.on_fetch_response(request_for(state, log), response, log) == [
        AppendFetchedBatches(13), UpdateHighWatermark(13), MaybeIncrementLogStartOffset(3)]
    empty = LeaderFetchResponse(ErrorCode.NONE, high_watermark=4, log_start_offset=0,
                                log_end_offset=10)
    assert state.on_fetch_response(request_for(state, log), empty, log) == []


def test_stale_responses_are_dropped() -> None:
    state = follower(epoch=5)
    log = FakeLog([(0, 0)], leo=10)
    request = request_for(state, log)
    response = LeaderFetchResponse(ErrorCode.NONE, high_watermark=10, log_start_offset=0,
                                   log_end_offset=12, batches_next_offset=12)
    log.log_end_offset = 8  # the log changed since the request
    assert state.on_fetch_response(request, response, log) == []
    log.log_end_offset = 10
    state.become_follower(leader_id=3, leader_epoch=6, partition_epoch=4, replicas=(1, 2, 3),
                          isr=(1, 3))
    assert state.on_fetch_response(request, response, log) == []


@pytest.mark.parametrize(("leader_says", "own_epochs", "leo", "expected"), [
    # Our largest epoch <= 3 is 3: both logs hold epoch 3's batches up to the smaller end.
    (DivergingEpoch(3, 25), [(1, 0), (3, 20), (4, 28)], 40, 25),
    (DivergingEpoch(3, 30), [(1, 0), (3, 20), (4, 28)], 40, 28),
    # We never had epoch 2: cut to the end of our epoch 1, then ask again.
    (DivergingEpoch(2, 30), [(1, 0), (3, 20)], 40, 20),
    # The leader's epoch 3 went further than ours: our end of it.
    (DivergingEpoch(3, 45), [(1, 0), (3, 20), (4, 38)], 40, 38),
])
def test_truncation_on_divergence(leader_says: DivergingEpoch, own_epochs: list[tuple[int, int]],
                                  leo: int, expected: int) -> None:
    state = follower()
    log = FakeLog(own_epochs, leo=leo, hw=38)  # the HW plays no part
    response = LeaderFetchResponse(ErrorCode.NONE, high_watermark=50, log_start_offset=0,
                                   log_end_offset=50, diverging_epoch=leader_says)
    assert state.on_fetch_response(request_for(state, log), response, log) == [
        TruncateTo(expected)]


def test_offset_out_of_range() -> None:
    state = follower()
    log = FakeLog([(0, 0)], leo=10, start=0)

    def answer(start: int, end: int) -> list[object]:
        response = LeaderFetchResponse(ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=start,
                                       log_end_offset=end)
        return list(state.on_fetch_response(request_for(state, log), response, log))

    assert answer(20, 30) == [TruncateFullyAndStartAt(20)]
    assert answer(0, 7) == [TruncateTo(7)]  # the leader has less (unclean election)
    assert answer(5, 30) == [BackoffFetch(ErrorCode.OFFSET_OUT_OF_RANGE)]


def test_fetch_errors_on_the_follower() -> None:
    state = follower(epoch=5)
    log = FakeLog([(0, 0)], leo=10)
    request = request_for(state, log)
    unknown = LeaderFetchResponse(ErrorCode.UNKNOWN_LEADER_EPOCH)
    assert state.on_fetch_response(request, unknown, log) == [
        BackoffFetch(ErrorCode.UNKNOWN_LEADER_EPOCH)]
    fenced = LeaderFetchResponse(ErrorCode.FENCED_LEADER_EPOCH)
    assert state.on_fetch_response(request, fenced, log) == []
    assert state.fetch_request(log) is None  # until new metadata
    state.become_follower(leader_id=2, leader_epoch=6, partition_epoch=4, replicas=(1, 2, 3),
                          isr=(1, 2, 3))
    assert state.fetch_request(log) == FollowerFetch(2, 6, 10, 0, 0)


# --- with the real storage ---------------------------------------------------------------------


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    format_data_dir(tmp_path, "c", 1)
    s = Storage.open(tmp_path, cluster_id="c", node_id=1)
    yield s
    s.close()


def append(log: PartitionLog, *, epoch: int, count: int = 2) -> None:
    batch = validate_batch(build_batch([NewRecord(b"k", b"v")] * count, now_ms=NOW))
    log.append_as_leader(batch, leader_epoch=epoch, now_ms=NOW)


def test_a_partition_log_is_a_log_view(storage: Storage) -> None:
    log = storage.get_or_create_log(bytes(16), 0, config=LogConfig())
    append(log, epoch=1)
    append(log, epoch=3)  # epoch 3 starts at 2
    state = PartitionState(ME)
    state.become_leader(leader_epoch=4, partition_epoch=1, replicas=(1, 2), isr=(1, 2),
                        log_end_offset=log.log_end_offset, high_watermark=0, now_ms=NOW)
    decision = state.on_follower_fetch(2, fetch_offset=3, last_fetched_epoch=2,
                                       current_leader_epoch=4, log=log, now_ms=NOW)
    assert decision.diverging_epoch == DivergingEpoch(1, 2)
    decision = state.on_follower_fetch(2, fetch_offset=2, last_fetched_epoch=1,
                                       current_leader_epoch=4, log=log, now_ms=NOW)
    assert decision.should_read and decision.effects == (UpdateHighWatermark(2),)
    follower_state = PartitionState(2)
    follower_state.become_follower(leader_id=ME, leader_epoch=4, partition_epoch=1,
                                   replicas=(1, 2), isr=(1, 2))
    assert follower_state.fetch_request(log) == FollowerFetch(ME, 4, 4, 3, 0)
