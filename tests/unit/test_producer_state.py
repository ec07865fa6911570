"""ProducerStateTable (broker/replication/producer_state.py): idempotent-producer rules.

Explicit cases check each answer of ``check`` (accept, duplicate with the original offsets,
OUT_OF_ORDER_SEQUENCE_NUMBER, DUPLICATE_SEQUENCE_NUMBER beyond the five cached batches,
INVALID_PRODUCER_EPOCH, a new epoch at sequence 0, unknown producers, wrap-around at int32 max,
malformed headers), then truncation, expiry, the LRU bound and the byte format (round trip and
damage). Hypothesis properties check that a table built append by append equals one rebuilt
from the same batch headers, and that encode/decode is lossless, for random histories of
several producers with epoch bumps and wrapping sequences.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.broker.replication.producer_state import (
    PRODUCER_BATCHES_CACHED,
    SEQUENCE_MAX,
    Accept,
    BatchHeader,
    BatchMetadata,
    Duplicate,
    ProducerCheck,
    ProducerStateTable,
    Reject,
    next_sequence,
)
from tidelog.invariants import InvariantViolation
from tidelog.v1.common_pb2 import ErrorCode

PID = 42
NOW = 1_000_000


class Log:
    """Appends batches of one table at increasing offsets, as a leader would."""

    def __init__(self, table: ProducerStateTable | None = None) -> None:
        self.table = table if table is not None else ProducerStateTable()
        self.offset = self.table.end_offset

    def check(self, sequence: int, count: int = 1, *, epoch: int = 0, pid: int = PID
              ) -> ProducerCheck:
        return self.table.check(producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                                record_count=count)

    def append(self, sequence: int, count: int = 1, *, epoch: int = 0, pid: int = PID,
               now_ms: int = NOW) -> int:
        """Check (must accept), append; returns the base offset."""
        assert self.check(sequence, count, epoch=epoch, pid=pid) == Accept()
        base = self.offset
        self.table.on_append(BatchHeader(pid, epoch, sequence, count, base, now_ms))
        self.offset += count
        return base


def error_of(result: ProducerCheck) -> int:
    assert isinstance(result, Reject), result
    return result.error.code


def test_non_idempotent_batches_bypass_every_check() -> None:
    log = Log()
    assert log.check(-1, pid=-1, epoch=-1) == Accept()
    log.table.on_append(BatchHeader(-1, -1, -1, 3, 0, NOW))
    assert (len(log.table), log.table.end_offset) == (0, 3)


def test_an_unknown_producer_must_start_at_sequence_zero() -> None:
    """Unlike Kafka 2.5+, which relies on one connection delivering in order: a producer's
    later in-flight batch that overtakes its first is refused (retriable), not written at the
    log's end ahead of it; a producer whose state was lost gets the same answer and bumps its
    epoch (KIP-360)."""
    log = Log()
    assert log.check(0) == Accept()
    assert log.check(0, epoch=7) == Accept()
    overtaking = log.check(1234)
    assert error_of(overtaking) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert isinstance(overtaking, Reject) and "not known" in overtaking.error.message
    log.append(0, 3)
    assert log.check(3) == Accept(), "known from its first batch on"


def test_sequences_must_follow_on() -> None:
    log = Log()
    log.append(0, 3)  # sequences 0..2
    assert log.check(3) == Accept()
    assert error_of(log.check(4)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert error_of(log.check(1, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # overlaps


def test_a_retry_of_a_cached_batch_is_a_duplicate_with_its_offsets() -> None:
    log = Log()
    bases = [log.append(s * 2, 2) for s in range(PRODUCER_BATCHES_CACHED + 2)]
    for i in range(2, PRODUCER_BATCHES_CACHED + 2):  # the last five are remembered
        assert log.check(i * 2, 2) == Duplicate(bases[i], bases[i] + 1)
    # Older ones are duplicates whose offsets are forgotten.
    assert error_of(log.check(0, 2)) == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    assert error_of(log.check(2, 2)) == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    # The same sequences in other batch boundaries are not the same batch.
    assert error_of(log.check(4, 1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_producer_epochs() -> None:
    log = Log()
    log.append(0, 2, epoch=3)
    assert error_of(log.check(2, epoch=2)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert error_of(log.check(0, 2, epoch=2)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert error_of(log.check(2, epoch=4)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.check(0, 2, epoch=3) == Duplicate(0, 1)
    base = log.append(0, epoch=4)  # a new epoch starts at 0 and forgets the old batches
    entry = log.table.entry(PID)
    assert entry is not None and entry.producer_epoch == 4
    assert list(entry.batches) == [BatchMetadata(0, 0, base, base)]
    assert error_of(log.check(0, 2, epoch=3)) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_sequences_wrap_at_int32_max() -> None:
    log = Log()
    # A producer already known at SEQUENCE_MAX - 5 (as rebuilt from the log).
    log.table.on_append(BatchHeader(PID, 0, SEQUENCE_MAX - 5, 5, log.offset, NOW))
    log.offset += 5  # ..., SEQUENCE_MAX - 1
    base = log.append(SEQUENCE_MAX - 0, 3)  # SEQUENCE_MAX, 0, 1
    entry = log.table.entry(PID)
    assert entry is not None and entry.last_seq == 1
    assert log.check(2) == Accept()
    assert log.check(SEQUENCE_MAX, 3) == Duplicate(base, base + 2)
    assert error_of(log.check(SEQUENCE_MAX - 20, 2)) == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    assert next_sequence(SEQUENCE_MAX) == 0 and next_sequence(SEQUENCE_MAX - 1, 3) == 1


def test_across_the_wrap_a_batch_boundary_continues_at_0_and_gaps_are_out_of_order() -> None:
    """Kafka's rule (ProducerStateManager.inSequence): after SEQUENCE_MAX comes 0, so a batch
    ending at SEQUENCE_MAX is followed by one starting at 0; anything else is a gap."""
    log = Log()
    log.table.on_append(BatchHeader(PID, 0, SEQUENCE_MAX - 3, 1, log.offset, NOW))
    log.offset += 1
    ending = log.append(SEQUENCE_MAX - 2, 3)  # SEQUENCE_MAX - 2 .. SEQUENCE_MAX
    assert error_of(log.check(1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "0 was skipped"
    starting = log.append(0, 2)  # 0, 1
    assert log.check(SEQUENCE_MAX - 2, 3) == Duplicate(ending, ending + 2)
    assert log.check(0, 2) == Duplicate(starting, starting + 1)
    assert error_of(log.check(3)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "2 was skipped"
    assert error_of(log.check(SEQUENCE_MAX - 1, 3)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, \
        "other boundaries than the appended batches' are not a duplicate"
    assert log.check(2) == Accept()


def test_a_header_that_breaks_the_tables_invariants_raises_even_under_python_O() -> None:
    """on_append is fed stored batches; one below the table's end, or with a bad sequence, is a
    bug that must raise (InvariantViolation), not be skipped as a bare assert is under -O."""
    log = Log()
    log.append(0, 2)
    for header in (BatchHeader(PID, 0, 2, 1, 0, NOW),  # below the end offset
                   BatchHeader(PID, 0, SEQUENCE_MAX + 1, 1, 2, NOW),
                   BatchHeader(PID, 0, 2, 0, 2, NOW)):
        with pytest.raises(InvariantViolation):
            log.table.on_append(header)
    assert log.table.end_offset == 2, "a refused header changes nothing"
    with pytest.raises(InvariantViolation):
        log.table.truncate_to(-1)


def test_malformed_headers_are_invalid_records() -> None:
    log = Log()
    for kwargs in ({"sequence": -1}, {"sequence": SEQUENCE_MAX + 1}, {"sequence": 0, "epoch": -1},
                   {"sequence": 0, "epoch": 2**15}, {"sequence": 0, "pid": -5},
                   {"sequence": 0, "count": 0}):
        assert error_of(log.check(**kwargs)) == ErrorCode.INVALID_RECORD, kwargs


def test_truncate_to_forgets_cut_batches_and_emptied_producers() -> None:
    log = Log()
    log.append(0, 2)  # offsets 0-1
    log.append(0, 2, pid=7)  # 2-3
    log.append(2, 2)  # 4-5
    log.append(2, 2, pid=7)  # 6-7
    log.table.truncate_to(5)  # the batch holding offset 5 goes whole, as in the log
    assert log.table.end_offset == 5
    assert log.table.check(producer_id=PID, producer_epoch=0, base_sequence=2,
                           record_count=2) == Accept()
    seven = log.table.entry(7)
    assert seven is not None and [b.last_seq for b in seven.batches] == [1]
    log.table.truncate_to(2)
    assert log.table.entry(7) is None  # nothing of it left that the cache can prove
    assert log.table.entry(PID) is not None
    log.table.truncate_to(9)  # past the end: nothing to do
    assert log.table.end_offset == 2
    log.table.truncate_fully_and_start_at(100)
    assert (len(log.table), log.table.end_offset) == (0, 100)


def test_idle_producers_expire() -> None:
    table = ProducerStateTable(producer_id_expiration_ms=1_000)
    log = Log(table)
    log.append(0, pid=1, now_ms=NOW)
    log.append(0, pid=2, now_ms=NOW + 500)
    assert table.maybe_expire(NOW + 999) == 0
    assert table.maybe_expire(NOW + 1_000) == 1
    assert (table.entry(1), table.entry(2) is not None) == (None, True)


def test_the_least_recently_appended_producer_is_evicted_beyond_the_bound() -> None:
    table = ProducerStateTable(producers_max=2)
    log = Log(table)
    log.append(0, pid=1)
    log.append(0, pid=2)
    log.append(1, pid=1)  # 1 is now the most recent
    log.append(0, pid=3)
    assert [p for p in (1, 2, 3) if table.entry(p) is not None] == [1, 3]


def test_encode_decode_and_damage() -> None:
    log = Log()
    log.append(0, 3)
    # A second producer, known from the log mid-sequence (its first batches were removed).
    log.table.on_append(BatchHeader(9, 2, 5, 1, log.offset, NOW))
    log.offset += 1
    data = log.table.encode()
    again = ProducerStateTable.decode(data)
    assert again.encode() == data and again.end_offset == log.table.end_offset
    assert again.check(producer_id=PID, producer_epoch=0, base_sequence=0,
                       record_count=3) == Duplicate(0, 2)
    for broken in (data[:-1], data[:10], b"", bytes([data[0] ^ 1]) + data[1:],
                   data[:-5] + bytes([data[-5] ^ 1]) + data[-4:]):
        try:
            ProducerStateTable.decode(broken)
        except ValueError:
            continue
        raise AssertionError(f"decoded damaged state {broken!r}")
    assert len(ProducerStateTable.decode(data, producers_max=1)) == 1


# --- properties --------------------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[BatchHeader]:
    """Batches of up to four producers at increasing offsets, with epoch bumps, sequence
    jumps (a producer that restarted on another replica) and wrap-around."""
    headers: list[BatchHeader] = []
    offset = draw(st.integers(0, 1_000))
    state: dict[int, tuple[int, int]] = {}
    for _ in range(draw(st.integers(0, 40))):
        pid = draw(st.sampled_from([-1, 1, 2, 3, 4]))
        count = draw(st.integers(1, 4))
        time_ms = NOW + offset
        if pid == -1:
            headers.append(BatchHeader(-1, -1, -1, count, offset, time_ms))
        else:
            epoch, sequence = state.get(pid, (0, draw(st.sampled_from([0, SEQUENCE_MAX - 2]))))
            if draw(st.integers(0, 9)) == 0:
                epoch, sequence = epoch + 1, 0
            headers.append(BatchHeader(pid, epoch, sequence, count, offset, time_ms))
            state[pid] = (epoch, next_sequence(sequence, count))
        offset += count + draw(st.integers(0, 2))
    return headers


@settings(max_examples=200, deadline=None)
@given(histories())
def test_incremental_state_equals_a_rebuild_and_survives_encoding(headers: list[BatchHeader]
                                                                  ) -> None:
    start = headers[0].base_offset if headers else 0
    incremental = ProducerStateTable.rebuild([], start_offset=start)
    for header in headers:
        incremental.on_append(header)
    rebuilt = ProducerStateTable.rebuild(headers, start_offset=start)
    assert incremental.encode() == rebuilt.encode()
    assert ProducerStateTable.decode(incremental.encode()).encode() == incremental.encode()


@settings(max_examples=200, deadline=None)
@given(histories(), st.data())
def test_truncation_keeps_only_what_a_rebuild_of_the_prefix_has(
        headers: list[BatchHeader], data: st.DataObject) -> None:
    if not headers:
        return
    start = headers[0].base_offset
    table = ProducerStateTable.rebuild(headers, start_offset=start)
    cut = data.draw(st.integers(start, table.end_offset))
    table.truncate_to(cut)
    kept = [h for h in headers if h.base_offset + h.record_count <= cut]
    prefix = ProducerStateTable.rebuild(kept, start_offset=start)
    for pid in (1, 2, 3, 4):
        entry, expected = table.entry(pid), prefix.entry(pid)
        if entry is None:
            continue  # forgotten: an unknown producer again (sequence 0 or an epoch bump)
        assert expected is not None
        assert entry.producer_epoch == expected.producer_epoch
        assert list(entry.batches) == list(expected.batches)[-len(entry.batches):]
