"""The pure parts of the chaos queue workload (chaos/workload/), without a cluster.

- values: each producer's values are unique and disjoint from every other producer's; their
  bytes decode back; bytes the workload never writes decode to a foreign value above them all;
- pacing: sends at the rate, and after a stall one send owed, not a burst;
- outcomes: which delivery errors prove a send was not appended (fail) and which leave it
  unknown (info); errors named by their Kafka name, bounded;
- group sessions: a new session after every rebalance and only then; a poll inside which a
  partition the session had read came back is not judged as continuing it;
- configuration: each bad value refused with its name;
- the run context: process and session numbers unique across threads; an operation the
  history refuses is kept as the workload's bug, stops the run, and writes nothing.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tidelog.chaos.history import HistoryError, HistoryWriter, Poll, Send, read_history
from tidelog.chaos.workload import ClientSettings, ProducerSpec, QueueWorkloadConfig, RunContext
from tidelog.chaos.workload.outcomes import ERROR_CHARS_MAX, delivery_error_type, describe_error
from tidelog.chaos.workload.pacing import Pacer
from tidelog.chaos.workload.sessions import GroupSessions
from tidelog.chaos.workload.values import (
    FOREIGN_VALUE_BASE,
    VALUES_PER_PRODUCER,
    ValueSequence,
    decode_value,
    encode_value,
)
from tidelog.errors import (
    InvalidRecordError,
    MessageTooLargeError,
    NetworkError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    ProducerFencedError,
    RecordListTooLargeError,
    RequestTimedOutError,
)


# ================================================================================ values
def test_each_producer_sends_its_own_unique_values() -> None:
    seen: set[int] = set()
    for index in (0, 1, 3, 999):
        values = ValueSequence(index)
        mine = [values.next() for _ in range(1_000)]
        assert mine[0] == index * VALUES_PER_PRODUCER and mine == sorted(set(mine))
        assert not seen & set(mine)
        seen |= set(mine)
    assert ValueSequence(3).next() == 3_000_000_000  # "p3-000000"


def test_a_producer_past_its_values_or_index_is_refused() -> None:
    with pytest.raises(ValueError, match="producer index"):
        ValueSequence(-1)
    values = ValueSequence(0)
    values._next = VALUES_PER_PRODUCER
    with pytest.raises(OverflowError, match="at most"):
        values.next()


@pytest.mark.parametrize("value", [0, 7, 3_000_000_123, 10**18 - 1])
def test_a_sent_value_decodes_from_its_bytes(value: int) -> None:
    assert encode_value(value) == str(value).encode()
    assert decode_value(encode_value(value)) == value


@pytest.mark.parametrize("data", [None, b"", b"abc", b"007", b"-1", b"1.5", b" 1",
                                  b"1" * 19, "١٢".encode(), b"\xff"])
def test_bytes_the_workload_never_writes_decode_to_a_foreign_value(data: bytes | None) -> None:
    assert decode_value(data) >= FOREIGN_VALUE_BASE
    assert decode_value(data) == decode_value(data)  # the same bytes, the same value


def test_encode_refuses_a_value_outside_the_sent_range() -> None:
    for value in (-1, FOREIGN_VALUE_BASE):
        with pytest.raises(ValueError, match="sent value"):
            encode_value(value)


# ================================================================================ pacing
def test_the_pacer_spaces_sends_at_the_rate() -> None:
    pacer = Pacer(10.0, now_s=100.0)
    assert pacer.delay_s(100.0) == 0.0
    pacer.taken(100.0)
    assert pacer.delay_s(100.0) == pytest.approx(0.1)
    assert pacer.delay_s(100.25) == 0.0


def test_after_a_stall_the_pacer_owes_one_send_not_a_burst() -> None:
    pacer = Pacer(10.0, now_s=0.0)
    pacer.taken(0.0)
    pacer.taken(5.0)                    # stalled for 5 s: 50 sends missed
    assert pacer.delay_s(5.0) == 0.0    # one owed
    pacer.taken(5.0)
    assert pacer.delay_s(5.0) == pytest.approx(0.1)


@pytest.mark.parametrize("rate", [0.0, -1.0, 1e9])
def test_the_pacer_refuses_a_rate_out_of_range(rate: float) -> None:
    with pytest.raises(ValueError, match="rate_per_s"):
        Pacer(rate, now_s=0.0)


# ================================================================================ outcomes
@pytest.mark.parametrize("error", [MessageTooLargeError("big"), RecordListTooLargeError("big"),
                                   InvalidRecordError("bad")])
def test_a_validation_refusal_is_a_fail(error: Exception) -> None:
    assert delivery_error_type(error, retries=5) == "fail"


@pytest.mark.parametrize("error", [RequestTimedOutError("t"), NetworkError("n"),
                                   NotEnoughReplicasAfterAppendError("a"),
                                   ProducerFencedError("f"), RuntimeError("bug")])
def test_an_unknown_outcome_is_info(error: Exception) -> None:
    assert delivery_error_type(error, retries=0) == "info"


def test_not_enough_replicas_is_a_fail_only_without_retries() -> None:
    # With retries an earlier attempt may have timed out after appending.
    assert delivery_error_type(NotEnoughReplicasError("isr"), retries=0) == "fail"
    assert delivery_error_type(NotEnoughReplicasError("isr"), retries=3) == "info"


def test_errors_are_named_by_kafka_name_and_bounded() -> None:
    assert describe_error(NetworkError("down")) == "NETWORK_EXCEPTION: down"
    assert describe_error(ValueError("x")) == "ValueError: x"
    long = describe_error(RequestTimedOutError("x" * 1_000))
    assert len(long) == ERROR_CHARS_MAX and long.endswith("...")


# ================================================================================ sessions
def sessions() -> GroupSessions:
    numbers = iter(range(100))
    return GroupSessions(lambda: next(numbers))


def test_a_session_lasts_until_partitions_move() -> None:
    s = sessions()
    assert s.begin_poll() == 0
    assert s.end_poll([0, 1])
    s.on_assigned([])                   # an empty assignment moves nothing
    s.on_revoked(set())
    assert s.begin_poll() == 0
    assert s.end_poll([0])


@pytest.mark.parametrize("event", ["on_assigned", "on_revoked", "on_lost"])
def test_each_rebalance_starts_a_new_session_at_the_next_poll(event: str) -> None:
    s = sessions()
    assert s.begin_poll() == 0
    getattr(s, event)([2])
    assert s.end_poll([0])              # the poll in progress keeps its session
    assert s.begin_poll() == 1
    assert s.begin_poll() == 1


def test_a_partition_assigned_during_the_poll_that_first_reads_it_continues() -> None:
    s = sessions()
    s.begin_poll()
    s.on_assigned([0])
    assert s.end_poll([0])


def test_a_partition_read_then_revoked_and_assigned_inside_one_poll_is_not_judged() -> None:
    s = sessions()
    assert s.begin_poll() == 0
    assert s.end_poll([0, 1])
    assert s.begin_poll() == 0
    s.on_revoked([0])
    s.on_assigned([0])                  # back from the committed offset: may step back
    assert not s.end_poll([0, 1])
    assert s.begin_poll() == 1          # and the next poll starts afresh


# ================================================================================ config
def test_bad_producer_specs_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="idempotent producer needs acks=all"):
        ProducerSpec("1", True)
    with pytest.raises(ValueError, match="acks"):
        ProducerSpec("2", False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="in_flight"):
        ProducerSpec("all", True, in_flight=0)
    with pytest.raises(ValueError, match="retries"):
        ProducerSpec("all", True, retries=0)
    assert ProducerSpec("0", False, retries=0).describe() == "acks=0 idempotent=false"


def test_bad_workload_configs_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="duration_s"):
        QueueWorkloadConfig("127.0.0.1:1", "t", duration_s=0)
    with pytest.raises(ValueError, match="group_consumers"):
        QueueWorkloadConfig("127.0.0.1:1", "t", duration_s=1, group_consumers=-1)
    with pytest.raises(ValueError, match="rate_per_s"):
        QueueWorkloadConfig("127.0.0.1:1", "t", duration_s=1, rate_per_s=0)
    with pytest.raises(ValueError, match="non-empty"):
        QueueWorkloadConfig("127.0.0.1:1", "", duration_s=1)
    with pytest.raises(ValueError, match="poll_timeout_ms"):
        ClientSettings(poll_timeout_ms=-1)
    with pytest.raises(ValueError, match="delivery_timeout_ms"):
        ClientSettings(request_timeout_ms=10_000, delivery_timeout_ms=5_000)


# ================================================================================ context
def test_process_and_session_numbers_are_unique_across_threads(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "h.jsonl") as writer:
        ctx = RunContext(writer)
        got: list[int] = []
        lock = threading.Lock()

        def take() -> None:
            mine = [ctx.new_process() for _ in range(500)]
            with lock:
                got.extend(mine)
        threads = [threading.Thread(target=take) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert sorted(got) == list(range(2_000))
        assert [ctx.new_session(), ctx.new_session()] == [0, 1]


def test_a_refused_operation_is_the_workloads_bug_and_stops_the_run(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as writer:
        ctx = RunContext(writer)
        ctx.write(Send("invoke", 0, ctx.now_ns(), "t", 1, "all", True))
        with pytest.raises(HistoryError, match="is open"):
            ctx.write(Poll("invoke", 0, ctx.now_ns(), "t", 0))
        assert ctx.stop.is_set()
        assert ctx.bug is not None and ctx.bug.line == 2
    assert len(read_history(path)) == 1  # nothing written for the refused one
