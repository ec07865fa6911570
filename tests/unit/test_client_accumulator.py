"""The producer's accumulator and idempotence bookkeeping, as plain data structures.

No broker, no clock: every call takes ``now_ms``. Checks batching per partition up to
``batch_size``; readiness (full, lingered, flush/close/memory waiters, exponential retry backoff
skipped for a new leader, busy leaders, unknown leaders); draining one batch per partition per
ready leader within the request size; re-enqueueing in sequence order; expiry after
``delivery_timeout_ms``; buffer accounting for back-pressure; KIP-480's abort-on-new-batch; and
the idempotence rules: sequences stamped on first drain, at most max_in_flight per partition, a
retried batch only when first and alone, rollback of an unbuilt batch, and the reset of
sequences with a new producer epoch.
"""

from __future__ import annotations

import pytest

from tidelog.client._accumulator import (
    BATCH_OVERHEAD_BYTES,
    ProducerBatch,
    RecordAccumulator,
    estimate_record_bytes,
)
from tidelog.client._idempotence import IdempotenceState
from tidelog.client.records import TopicPartition
from tidelog.record_batch import NewRecord

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
TP2 = TopicPartition("t", 2)
LEADERS = {TP0: 1, TP1: 2, TP2: 1}


def leader_of(tp: TopicPartition) -> int | None:
    return LEADERS.get(tp)


def rec(size: int = 10) -> NewRecord:
    return NewRecord(key=None, value=b"x" * size, timestamp_ms=0)


def make(**kw: int) -> RecordAccumulator[object]:
    args = dict(batch_size=200, linger_ms=10, buffer_memory=10_000, retry_backoff_ms=100,
                delivery_timeout_ms=10_000)
    args.update(kw)
    return RecordAccumulator(new_result=object, **args)


def drain_all(acc: RecordAccumulator[object],
              now: int) -> dict[int, list[ProducerBatch[object]]]:
    return acc.drain({1, 2}, leader_of, now_ms=now, max_request_bytes=10**9,
                     can_send=lambda b: True)


def test_records_share_a_batch_until_batch_size() -> None:
    acc = make()
    size = estimate_record_bytes(rec())
    per_batch = (200 - BATCH_OVERHEAD_BYTES) // size
    appended_to = [acc.append(TP0, rec(), now_ms=0) for _ in range(per_batch + 1)]
    batches = acc.queued(TP0)
    assert [b.record_count for b in batches] == [per_batch, 1]
    # Each append returns the batch the record went into (as its last record).
    assert appended_to == [batches[0]] * per_batch + [batches[1]]
    assert batches[0].result is not batches[1].result  # each batch has its own result
    assert batches[0].size_bytes == BATCH_OVERHEAD_BYTES + size * per_batch
    assert acc.buffer_used_bytes == size * (per_batch + 1)


def test_a_record_larger_than_batch_size_gets_its_own_batch() -> None:
    acc = make(batch_size=50)
    first = acc.append(TP0, rec(5), now_ms=0)
    big = acc.append(TP0, rec(500), now_ms=0)
    assert big is not first and big.record_count == 1 and big.size_bytes >= 50
    assert acc.queued(TP0) == [first, big]


def test_ready_after_linger_and_not_before() -> None:
    acc = make(linger_ms=10)
    acc.append(TP0, rec(), now_ms=100)
    early = acc.ready(105, leader_of)
    assert early.ready_nodes == frozenset() and early.next_check_delay_ms == 5
    assert acc.ready(110, leader_of).ready_nodes == {1}


def test_full_batches_flush_close_and_memory_waiters_make_ready_at_once() -> None:
    acc = make(linger_ms=1_000)
    acc.append(TP0, rec(), now_ms=0)
    assert not acc.ready(0, leader_of).ready_nodes
    acc.begin_flush()
    assert acc.ready(0, leader_of).ready_nodes == {1}
    acc.end_flush()
    acc.set_memory_waiters(1)
    assert acc.ready(0, leader_of).ready_nodes == {1}
    acc.set_memory_waiters(0)
    acc.close()
    assert acc.ready(0, leader_of).ready_nodes == {1}
    with pytest.raises(RuntimeError):
        acc.append(TP0, rec(), now_ms=0)


def test_unknown_leaders_are_reported_and_busy_leaders_skipped() -> None:
    acc = make(linger_ms=0)
    acc.append(TopicPartition("other", 0), rec(), now_ms=0)
    acc.append(TP1, rec(), now_ms=0)
    check = acc.ready(0, leader_of, busy_nodes={2})
    assert check.unknown_leader_topics == {"other"}
    assert check.ready_nodes == frozenset()
    assert check.next_check_delay_ms is None  # a busy leader is woken by its response


def test_drain_takes_one_batch_per_partition_grouped_by_leader() -> None:
    acc = make(batch_size=100, linger_ms=0)
    for _ in range(6):
        acc.append(TP0, rec(30), now_ms=0)
    acc.append(TP1, rec(), now_ms=0)
    acc.append(TP2, rec(), now_ms=0)
    drained = drain_all(acc, 0)
    assert sorted(b.tp for b in drained[1]) == [TP0, TP2]
    assert [b.tp for b in drained[2]] == [TP1]
    assert all(b.closed and b.attempts == 1 for bs in drained.values() for b in bs)
    assert len(acc.queued(TP0)) >= 1  # the rest of TP0 waits for the next drain


def test_a_partition_in_flight_holds_its_next_batch_until_full_or_answered() -> None:
    """Nagle's rule per partition: with linger 0 a record goes at once when nothing of its
    partition is in flight, but behind an in-flight batch it waits (and gathers company)."""
    acc = make(batch_size=300, linger_ms=0)
    acc.append(TP0, rec(), now_ms=0)
    acc.append(TP2, rec(), now_ms=0)
    in_flight = {TP0}
    check = acc.ready(50, leader_of, in_flight=in_flight)
    assert check.ready_nodes == {1}  # TP2 (same leader) is not held
    assert check.next_check_delay_ms is None  # TP0 waits for the response, not the clock
    drained = acc.drain({1}, leader_of, now_ms=50, max_request_bytes=10**9,
                        can_send=lambda b: True, in_flight=in_flight)
    assert [b.tp for b in drained[1]] == [TP2]
    assert acc.ready(50, leader_of, in_flight=in_flight).ready_nodes == frozenset()
    # More records join the held batch; once it is full it goes, in flight or not.
    for _ in range(10):
        acc.append(TP0, rec(), now_ms=60)
    assert acc.ready(60, leader_of, in_flight=in_flight).ready_nodes == {1}
    [full] = acc.drain({1}, leader_of, now_ms=60, max_request_bytes=10**9,
                       can_send=lambda b: True, in_flight=in_flight)[1]
    assert full.tp == TP0 and full.record_count > 1
    # The answer came: the rest goes at once again.
    assert acc.ready(60, leader_of, in_flight=set()).ready_nodes == {1}


def test_a_held_batch_goes_when_flushing_closing_or_retried() -> None:
    acc = make(batch_size=1_000, linger_ms=0)
    acc.append(TP0, rec(), now_ms=0)
    in_flight = {TP0}
    assert not acc.ready(0, leader_of, in_flight=in_flight).ready_nodes
    acc.begin_flush()
    assert acc.ready(0, leader_of, in_flight=in_flight).ready_nodes == {1}
    acc.end_flush()
    acc.set_memory_waiters(1)
    assert acc.ready(0, leader_of, in_flight=in_flight).ready_nodes == {1}
    acc.set_memory_waiters(0)
    [batch] = drain_all(acc, 0)[1]
    acc.reenqueue(batch, now_ms=0)  # a retry is never held (it is behind nothing)
    assert acc.ready(1_000, leader_of, in_flight=in_flight).ready_nodes == {1}
    acc.close()
    assert acc.ready(1_000, leader_of, in_flight=in_flight).ready_nodes == {1}


def test_drain_respects_the_request_size_but_always_sends_one() -> None:
    acc = make(batch_size=10_000, linger_ms=0)
    acc.append(TP0, rec(3_000), now_ms=0)
    acc.append(TP2, rec(3_000), now_ms=0)
    drained = acc.drain({1}, leader_of, now_ms=0, max_request_bytes=1_000,
                        can_send=lambda b: True)
    assert len(drained[1]) == 1


def test_drain_keeps_a_request_within_the_brokers_record_bound() -> None:
    acc = make(batch_size=10_000, linger_ms=0)
    for tp in (TP0, TP2):
        for _ in range(3):
            acc.append(tp, rec(1), now_ms=0)
    drained = acc.drain({1}, leader_of, now_ms=0, max_request_bytes=10**9,
                        can_send=lambda b: True, max_request_records=5)
    assert [b.record_count for b in drained[1]] == [3]  # 3 + 3 records would pass 5
    drained = acc.drain({1}, leader_of, now_ms=0, max_request_bytes=10**9,
                        can_send=lambda b: True, max_request_records=5)
    assert [b.record_count for b in drained[1]] == [3]


def test_drain_skips_what_can_send_refuses_and_backing_off_retries() -> None:
    acc = make(linger_ms=0, retry_backoff_ms=100)
    acc.append(TP0, rec(), now_ms=0)
    assert drain_all(acc, 0).get(1)
    acc.append(TP2, rec(), now_ms=0)
    assert acc.drain({1}, leader_of, now_ms=0, max_request_bytes=10**9,
                     can_send=lambda b: False) == {}
    [batch] = drain_all(acc, 0)[1]
    acc.reenqueue(batch, now_ms=10)
    assert drain_all(acc, 50) == {}
    check = acc.ready(50, leader_of)
    assert check.ready_nodes == frozenset() and check.next_check_delay_ms == 60
    assert drain_all(acc, 110)[1] == [batch]
    assert batch.attempts == 2


def test_retry_backoff_doubles_up_to_its_cap() -> None:
    acc = make(linger_ms=0, retry_backoff_ms=100, retry_backoff_max_ms=350)
    acc.append(TP0, rec(), now_ms=0)
    now = 0
    waits = []
    for _ in range(4):
        [batch] = drain_all(acc, now)[1]
        acc.reenqueue(batch, now_ms=now)
        waits.append(acc.ready(now, leader_of).next_check_delay_ms)
        now += 1_000
    assert waits == [100, 200, 350, 350]


def test_a_new_leader_is_tried_without_backoff() -> None:
    leaders = dict(LEADERS)
    acc = make(linger_ms=0, retry_backoff_ms=1_000)
    acc.append(TP0, rec(), now_ms=0)
    [batch] = acc.drain({1}, leaders.get, now_ms=0, max_request_bytes=10**9,
                        can_send=lambda b: True)[1]
    acc.reenqueue(batch, now_ms=0)  # NOT_LEADER_OR_FOLLOWER from broker 1
    assert acc.ready(1, leaders.get).ready_nodes == frozenset()
    leaders[TP0] = 2  # the metadata now names broker 2
    assert acc.ready(1, leaders.get).ready_nodes == {2}
    assert acc.drain({2}, leaders.get, now_ms=1, max_request_bytes=10**9,
                     can_send=lambda b: True)[2] == [batch]
    assert batch.last_leader == 2


def test_reenqueue_keeps_sequence_order_ahead_of_new_batches() -> None:
    acc = make(linger_ms=0)
    batches = []
    for seq in (0, 10, 20):
        b: ProducerBatch[object] = ProducerBatch(tp=TP0, created_ms=0, result=None,
                                                 records=[rec()] * 10)
        b.stamp(producer_id=1, producer_epoch=0, base_sequence=seq)
        batches.append(b)
    new = acc.append(TP0, rec(), now_ms=0)  # a new, unsequenced batch
    for b in (batches[2], batches[0], batches[1]):
        acc.reenqueue(b, now_ms=0)
    queued = acc.queued(TP0)
    assert [b.base_sequence for b in queued[:3]] == [0, 10, 20]
    assert queued[3] is new and not new.has_sequence
    # A new record joins the open batch behind them, not a retried one.
    assert acc.append(TP0, rec(), now_ms=0) is new and new.record_count == 2


def test_expire_removes_old_batches_only() -> None:
    acc = make(delivery_timeout_ms=1_000)
    acc.append(TP0, rec(), now_ms=0)
    acc.append(TP1, rec(), now_ms=500)
    expired = acc.expire(1_000)
    assert [b.tp for b in expired] == [TP0]
    assert acc.queued(TP0) == [] and len(acc.queued(TP1)) == 1


def test_buffer_memory_bounds_appends_and_deallocate_returns_it() -> None:
    acc = make(buffer_memory=100, linger_ms=0)
    size = estimate_record_bytes(rec(30))
    assert acc.has_room(size)
    acc.append(TP0, rec(30), now_ms=0)
    acc.append(TP0, rec(30), now_ms=0)
    assert not acc.has_room(size)
    [batch] = drain_all(acc, 0)[1]
    assert not acc.has_room(size)  # in flight still holds its memory
    batch.payload = b"built"
    acc.deallocate(batch)
    assert acc.buffer_used_bytes == 0 and acc.has_room(size)
    assert batch.payload is None and batch.record_count == 0  # records freed too


def test_append_to_never_opens_a_batch_so_the_sticky_partitioner_can_move() -> None:
    acc = make(batch_size=300)
    size = estimate_record_bytes(rec())
    assert acc.open_batch(TP0) is None  # no batch yet
    batch = acc.append(TP0, rec(), now_ms=0)
    assert acc.open_batch(TP0) is batch
    for _ in range(10):
        if not acc.append_to(batch, None, b"x" * 10, (), 0, size):
            break  # full: nothing appended, no new batch
    else:
        pytest.fail("the batch never filled")
    assert acc.queued(TP0) == [batch] and batch.size_bytes + size > 300
    assert acc.buffer_used_bytes == size * batch.record_count
    assert acc.open_batch(TP0) is batch  # still open to smaller records
    [drained] = drain_all(acc, 0)[1]
    assert drained is batch and acc.open_batch(TP0) is None
    assert not acc.append_to(batch, None, b"x", (), 0, size)  # drained: closed


def test_a_new_batch_closes_the_one_before_it() -> None:
    """Only a partition's last batch takes appends, so a record never lands ahead of records
    already in a newer batch (the producer's fast path appends to a batch it remembers)."""
    acc = make(batch_size=100)
    first = acc.append(TP0, rec(30), now_ms=0)
    big = acc.append(TP0, rec(200), now_ms=0)  # does not fit: a batch of its own
    assert first.closed and not big.closed and acc.open_batch(TP0) is big
    assert not acc.append_to(first, None, b"x", (), 0, estimate_record_bytes(rec(1)))
    assert first.record_count == 1


def test_abort_all_and_remove() -> None:
    acc = make()
    acc.append(TP0, rec(), now_ms=0)
    acc.append(TP1, rec(), now_ms=0)
    [b0] = acc.queued(TP0)
    assert acc.remove(b0) and not acc.remove(b0)
    assert [b.tp for b in acc.abort_all()] == [TP1]
    assert not acc.has_undrained()


def test_config_is_checked() -> None:
    with pytest.raises(ValueError):
        make(batch_size=0)
    with pytest.raises(ValueError):
        make(linger_ms=-1)


# ---------------------------------------------------------------------------- idempotence
def batch(tp: TopicPartition = TP0, n: int = 5) -> ProducerBatch[object]:
    return ProducerBatch(tp=tp, created_ms=0, result=None, records=[rec()] * n)


def test_sequences_are_stamped_on_first_drain_per_partition() -> None:
    idem = IdempotenceState(enabled=True, max_in_flight=5)
    assert idem.needs_producer_id
    b = batch()
    assert not idem.can_send(b)  # no producer id yet
    idem.set_producer_id(7, 0)
    b1, b2, c = batch(), batch(), batch(TP1, 3)
    for x in (b1, b2, c):
        assert idem.can_send(x)
        idem.on_drain(x)
    assert (b1.base_sequence, b2.base_sequence, c.base_sequence) == (0, 5, 0)
    assert (b1.producer_id, b1.producer_epoch) == (7, 0)
    assert idem.in_flight(TP0) == 2


def test_in_flight_is_bounded_per_partition() -> None:
    idem = IdempotenceState(enabled=True, max_in_flight=2)
    idem.set_producer_id(1, 0)
    sent = [batch(), batch()]
    for b in sent:
        idem.on_drain(b)
    assert not idem.can_send(batch())
    idem.on_response(sent[0])
    idem.on_acked(sent[0])
    assert idem.can_send(batch())
    with pytest.raises(ValueError):
        IdempotenceState(enabled=True, max_in_flight=6)


def test_a_retry_goes_only_when_it_is_first_and_alone() -> None:
    idem = IdempotenceState(enabled=True, max_in_flight=5)
    idem.set_producer_id(1, 0)
    first, second = batch(), batch()
    idem.on_drain(first)
    idem.on_drain(second)
    idem.on_response(first)  # failed, will be retried
    assert not idem.can_send(first)  # ``second`` is still in flight
    idem.on_response(second)
    assert idem.is_first_unacked(first) and not idem.is_first_unacked(second)
    assert idem.can_send(first) and not idem.can_send(second)
    idem.on_drain(first)
    idem.on_response(first)
    idem.on_acked(first)
    assert idem.can_send(second)


def test_rollback_returns_the_sequence_of_an_unbuilt_batch() -> None:
    idem = IdempotenceState(enabled=True, max_in_flight=5)
    idem.set_producer_id(1, 0)
    bad = batch()
    idem.on_drain(bad)
    idem.on_response(bad)
    idem.rollback(bad)
    assert not bad.has_sequence
    good = batch()
    idem.on_drain(good)
    assert good.base_sequence == 0


def test_epoch_bump_resets_every_sequence() -> None:
    idem = IdempotenceState(enabled=True, max_in_flight=5)
    idem.set_producer_id(1, 0)
    b = batch()
    idem.on_drain(b)
    idem.on_response(b)
    idem.request_epoch_bump()
    assert idem.needs_producer_id and not idem.can_send(batch())
    idem.set_producer_id(1, 1)
    fresh = batch()
    idem.on_drain(fresh)
    assert (fresh.base_sequence, fresh.producer_epoch) == (0, 1)


def test_without_idempotence_nothing_is_stamped() -> None:
    idem = IdempotenceState(enabled=False, max_in_flight=10)
    b = batch()
    assert not idem.needs_producer_id and idem.can_send(b)
    idem.on_drain(b)
    assert not b.has_sequence
