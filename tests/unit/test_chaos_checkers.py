"""The chaos checkers (chaos/checkers) on crafted histories: a clean history shows nothing;
each anomaly planted on its own is found, naming the operations (by line) that show it; the
promise decides which anomalies break the run; reports stay bounded on huge histories.

How: histories are built with chaos_testkit.Builder (each helper returns the line of the
completion it wrote, which is what an anomaly must name) and parsed through the real format.
A seeded property test simulates clients against a correct log (no anomaly may show) and then
plants one anomaly of each kind in it (each must be found).
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from chaos_testkit import Builder, Simulation, simulate

from tidelog.chaos.checkers import (
    ANOMALY_EXAMPLES_MAX,
    EVIDENCE_OPS_MAX,
    KINDS,
    HistoryCheck,
    Promise,
    check_history,
)
from tidelog.chaos.history import Poll, PolledRecord, Send

DURABLE = Promise(replication_factor=3, min_insync_replicas=2)
UNCLEAN = Promise(replication_factor=3, min_insync_replicas=2, unclean_leader_election=True)


def check(b: Builder, promise: Promise = DURABLE) -> HistoryCheck:
    return check_history(b.history(), promise)


def found(result: HistoryCheck) -> dict[str, int]:
    return {r.kind: r.count for r in result.results if r.count}


def lines_named(result: HistoryCheck, kind: str) -> list[tuple[int, ...]]:
    return [tuple(e.line for e in a.evidence) for a in result.result(kind).examples]


def two_sends_read_in_order(b: Builder) -> tuple[int, int]:
    return b.send(0, 1, offset=0), b.send(0, 2, offset=1)


# ================================================================================ clean
def test_a_clean_history_shows_no_anomaly_and_keeps_the_promise() -> None:
    b = Builder()
    b.fault("pause", start=True, targets=("broker-1",))
    two_sends_read_in_order(b)
    b.send(1, 3, partition=1, offset=0, acks="1", idempotent=False)
    b.poll(3, 0, [(0, 0, 1)])
    b.poll(3, 0, [(0, 1, 2), (1, 0, 3)])
    b.fault("pause", start=False, targets=("broker-1",))
    b.poll(9, 1, [(0, 0, 1), (0, 1, 2), (1, 0, 3)], drain=True)
    result = check(b)
    assert found(result) == {}
    assert result.valid and result.forbidden_kinds == ()
    assert result.op_counts["send"] == {"invoke": 3, "ok": 3, "fail": 0, "info": 0}
    assert [r.kind for r in result.results] == list(KINDS)


# ========================================================================= lost / unseen
def test_an_acknowledged_write_read_past_but_never_read_is_lost() -> None:
    b = Builder()
    lost, _ = two_sends_read_in_order(b)
    poll = b.poll(3, 0, [(0, 1, 2)])
    result = check(b)
    assert found(result) == {"lost-write": 1}
    assert lines_named(result, "lost-write") == [(lost, poll)]
    assert result.result("lost-write").examples[0].details["value"] == 1
    assert not result.valid and result.forbidden_kinds == ("lost-write",)


def test_an_acks_1_loss_is_reported_but_keeps_the_promise() -> None:
    b = Builder()
    lost = b.send(0, 1, offset=0, acks="1", idempotent=False)
    b.send(0, 2, offset=1)
    b.poll(3, 0, [(0, 1, 2)])
    result = check(b)
    assert found(result) == {"lost-write": 1}
    assert lines_named(result, "lost-write")[0][0] == lost
    assert result.result("lost-write").forbidden_count == 0 and result.valid


def test_an_acks_all_loss_under_an_unclean_promise_is_reported_only() -> None:
    b = Builder()
    two_sends_read_in_order(b)
    b.poll(3, 0, [(0, 1, 2)])
    assert not check(b).valid
    assert check(b, UNCLEAN).valid and found(check(b, UNCLEAN)) == {"lost-write": 1}


@pytest.mark.parametrize("outcome", ["info", None])
def test_a_send_with_an_unknown_outcome_is_never_a_loss(outcome: str | None) -> None:
    b = Builder()
    b.send(0, 1, outcome=outcome)  # type: ignore[arg-type]  # info, or never completed
    b.send(1, 2, offset=1)
    b.poll(9, 0, [(0, 1, 2)], drain=True)
    assert found(check(b)) == {}


def test_an_unread_write_past_every_read_is_unseen_and_breaks_the_promise_once_drained() -> None:
    b = Builder()
    b.send(0, 1, offset=0)
    unseen = b.send(0, 2, offset=1)
    b.poll(3, 0, [(0, 0, 1)])
    result = check(b)
    assert found(result) == {"unseen": 1} and result.valid  # no drain: maybe just not polled
    assert lines_named(result, "unseen") == [(unseen,)]
    b.poll(9, 1, [(0, 0, 1)], drain=True)
    assert found(check(b)) == {"unseen": 1} and not check(b).valid
    b.poll(9, 1, [], outcome="info", drain=True)  # the drain did not finish
    assert check(b).valid


def test_an_acks_0_send_has_no_offset_and_can_only_be_unseen() -> None:
    b = Builder()
    b.send(0, 1, acks="0", idempotent=False, offset=None)
    b.send(0, 2, offset=5)
    b.poll(9, 0, [(0, 5, 2)], drain=True)
    result = check(b)
    assert found(result) == {"unseen": 1} and result.valid


# ==================================================================== what reads disagree on
def test_a_value_at_two_offsets_is_a_duplicate_forbidden_with_idempotence() -> None:
    b = Builder()
    send = b.send(0, 1, offset=0)
    poll = b.poll(3, 0, [(0, 0, 1), (0, 1, 1)])
    result = check(b)
    assert found(result) == {"duplicate": 1}
    assert lines_named(result, "duplicate") == [(send, poll)]
    assert result.result("duplicate").examples[0].details["positions"] == [["t", 0, 0],
                                                                          ["t", 0, 1]]
    assert not result.valid
    b2 = Builder()
    b2.send(0, 1, offset=0, acks="1", idempotent=False)
    b2.poll(3, 0, [(0, 0, 1), (0, 1, 1)])
    assert found(check(b2)) == {"duplicate": 1} and check(b2).valid


def test_two_reads_disagreeing_on_an_offset_are_inconsistent() -> None:
    b = Builder()
    b.send(0, 1, offset=5)
    b.send(0, 2, offset=6)
    first = b.poll(3, 0, [(0, 0, 1)])
    second = b.poll(4, 1, [(0, 0, 2)])
    result = check(b)
    assert "inconsistent-offsets" in found(result)
    assert lines_named(result, "inconsistent-offsets") == [(first, second)]
    assert result.result("inconsistent-offsets").examples[0].details["offset"] == 0
    assert result.result("inconsistent-offsets").examples[0].details["values"] == [1, 2]
    assert result.result("inconsistent-offsets").forbidden_count == 1


def test_an_acks_1_ack_overwritten_after_a_failover_is_reported_only() -> None:
    b = Builder()
    ack = b.send(0, 1, offset=0, acks="1", idempotent=False)
    b.send(0, 2, offset=0)  # the new leader gave offset 0 to another value
    read = b.poll(3, 0, [(0, 0, 2)])
    result = check(b)
    assert lines_named(result, "inconsistent-offsets") == [(ack, read - 2, read)]
    assert result.result("inconsistent-offsets").forbidden_count == 0
    assert result.valid  # the acks=1 write is lost (reported), nothing committed disagrees


def test_reading_a_failed_send_is_g1a() -> None:
    b = Builder()
    failed = b.send(0, 1, outcome="fail")
    poll = b.poll(3, 0, [(0, 0, 1)])
    result = check(b)
    assert found(result) == {"G1a": 1}
    assert lines_named(result, "G1a") == [(failed, poll)]
    assert not check(b, UNCLEAN).valid  # no promise allows it


def test_reading_a_value_nobody_sent_or_sent_elsewhere_is_unexpected() -> None:
    b = Builder()
    poll = b.poll(3, 0, [(0, 0, 42)])
    assert lines_named(check(b), "unexpected-value") == [(poll,)]
    b2 = Builder()
    send = b2.send(0, 1, topic="a", outcome="info")
    poll2 = b2.poll(3, 0, [(0, 0, 1)], topic="b")
    result = check(b2)
    assert found(result) == {"unexpected-value": 1} and not result.valid
    assert lines_named(result, "unexpected-value") == [(send, poll2)]


# ======================================================================== polls in order
def sends(b: Builder, count: int) -> None:
    for value in range(count):
        b.send(0, 100 + value, offset=value)


@pytest.mark.parametrize(("records", "kind"), [
    ([(0, 1, 101), (0, 0, 100)], "int-nonmonotonic-poll"),
    ([(0, 1, 101), (0, 1, 101)], "int-nonmonotonic-poll"),
    ([(0, 0, 100), (0, 2, 102)], "int-poll-skip"),
])
def test_a_poll_that_steps_back_or_skips_within_itself(records: list[tuple[int, int, int]],
                                                       kind: str) -> None:
    b = Builder()
    sends(b, 3)
    b.poll(4, 0, [(0, 0, 100), (0, 1, 101), (0, 2, 102)])  # every value read somewhere
    poll = b.poll(3, 1, records)
    result = check(b)
    assert kind in found(result)
    assert lines_named(result, kind) == [(poll,)]
    assert result.result(kind).forbidden_count == 1


@pytest.mark.parametrize(("second", "kind"), [
    ([(0, 1, 101)], "nonmonotonic-poll"),
    ([(0, 0, 100)], "nonmonotonic-poll"),
    ([(0, 3, 103)], "poll-skip"),
])
def test_polls_of_one_session_that_step_back_or_skip(second: list[tuple[int, int, int]],
                                                     kind: str) -> None:
    b = Builder()
    sends(b, 4)
    b.poll(4, 0, [(0, o, 100 + o) for o in range(4)])
    first = b.poll(3, 1, [(0, 0, 100), (0, 1, 101)])
    b.poll(3, 1, [], outcome="info")  # moves nothing
    then = b.poll(3, 1, second)
    result = check(b)
    assert set(found(result)) == {kind}
    assert lines_named(result, kind) == [(first, then)]
    if kind == "poll-skip":
        assert result.result(kind).examples[0].details["skipped"] == [2]


def test_a_new_session_may_start_anywhere_and_a_gap_nobody_saw_is_no_skip() -> None:
    b = Builder()
    sends(b, 2)
    b.send(0, 200, offset=9)
    b.poll(3, 0, [(0, 0, 100), (0, 1, 101)])
    b.poll(3, 1, [(0, 0, 100)])                # a seek back: a new session
    b.poll(4, 2, [(0, 0, 100), (0, 1, 101), (0, 9, 200)])  # 2..8 hold nothing anyone saw
    assert found(check(b)) == {}


# ================================================================== replicas and bounds
def test_replicas_that_differ_below_the_hw_diverge() -> None:
    same = [(0, "a"), (3, "b")]
    dumps = {("t", 0): {1: same, 2: list(same), 3: [*same, (7, "tail")]},
             ("t", 1): {1: [(0, "x")], 2: [(0, "y")]},
             ("t", 2): {1: [(0, "x"), (5, "y")], 2: [(0, "x")]}}
    hws = {("t", 0): 7, ("t", 1): 5, ("t", 2): 9}
    result = check_history(Builder().history(), DURABLE, replicas=dumps, high_watermarks=hws)
    divergence = result.result("replica-divergence")
    assert divergence.count == 2 and not result.valid
    first, second = divergence.examples
    assert (first.details["partition"], first.details["replicas"]) == (1, {"1": [0, "x"],
                                                                          "2": [0, "y"]})
    assert second.details["replicas"] == {"1": [5, "y"], "2": None}
    assert check_history(Builder().history(), DURABLE, replicas={("t", 0): dumps[("t", 0)]},
                         high_watermarks=hws).valid  # the tail above the HW is not compared


def test_a_huge_history_gives_a_bounded_report_that_still_counts_everything() -> None:
    b = Builder()
    for value in range(200):
        b.send(0, value, offset=value)
    b.poll(3, 0, [(0, 200, 999)])
    b.send(0, 999, offset=200)
    result = check(b)
    lost = result.result("lost-write")
    assert lost.count == lost.forbidden_count == 200
    assert len(lost.examples) == ANOMALY_EXAMPLES_MAX
    assert all(len(a.evidence) <= EVIDENCE_OPS_MAX for a in lost.examples)


def test_forbidden_anomalies_are_never_crowded_out_of_the_examples() -> None:
    b = Builder()
    for value in range(ANOMALY_EXAMPLES_MAX + 5):  # allowed (acks=1) losses first
        b.send(0, value, offset=value, acks="1", idempotent=False)
    forbidden = b.send(0, 500, offset=100)
    b.poll(3, 0, [(0, 101, 501)])
    b.send(0, 501, offset=101)
    lost = check(b).result("lost-write")
    assert lost.forbidden_count == 1
    assert lost.examples[0].forbidden and lost.examples[0].evidence[0].line == forbidden


# ============================================================ property: simulated clusters
def run_checks(sim: Simulation) -> HistoryCheck:
    return check_history(sim.builder.history(), DURABLE)


@pytest.mark.parametrize("seed", range(30))
def test_a_correct_log_never_shows_an_anomaly(seed: int) -> None:
    assert found(run_checks(simulate(seed))) == {}


PLANTS = ("lost-write", "unseen", "duplicate", "inconsistent-offsets", "G1a",
          "unexpected-value", "int-nonmonotonic-poll", "int-poll-skip", "nonmonotonic-poll",
          "poll-skip")


@pytest.mark.parametrize("kind", PLANTS)
def test_an_anomaly_planted_in_a_correct_history_is_always_found(kind: str) -> None:
    planted = 0
    for seed in range(30):
        sim = simulate(seed)
        lines = plant(kind, sim, random.Random(seed))
        if lines is None:
            continue  # this history offers no place for it (e.g. no failed send)
        planted += 1
        result = run_checks(sim)
        assert kind in found(result), (seed, found(result))
        named = {line for e in lines_named(result, kind) for line in e}
        assert named & lines, (seed, lines, lines_named(result, kind))
        assert not result.valid
    assert planted >= 10, f"{kind} was planted in only {planted} of 30 histories"


def plant(kind: str, sim: Simulation, rng: random.Random) -> set[int] | None:
    """Change ``sim`` so it shows one ``kind`` (others may follow from it, as a lost write
    also makes the polls around it skip); return lines the anomaly must name, or None when
    this history has no place for it."""
    ops = sim.builder.ops
    acked = [(i, op) for i, op in enumerate(ops) if isinstance(op, Send) and op.type == "ok"
             and op.offset is not None and op.acks == "all"]
    drain = [i for i, op in enumerate(ops) if isinstance(op, Poll) and op.drain
             and op.type == "ok"]
    if kind in ("lost-write", "unseen"):
        # unseen: the last of its partition, so nothing read reaches past it
        candidates = [(i, op) for i, op in acked
                      if (op.offset == len(sim.logs[op.partition]) - 1) == (kind == "unseen")]
        if not candidates:
            return None
        index, send = rng.choice(candidates)
        _rewrite_polls(ops, lambda r: r if r.value != send.value else None)
        return {index + 1}
    if kind == "inconsistent-offsets":
        if not acked:
            return None
        index, send = rng.choice(acked)
        _rewrite_polls(ops, lambda r: r._replace(value=FRESH) if r.value == send.value else r)
        return {index + 1}
    if kind in ("duplicate", "G1a", "unexpected-value"):
        return _plant_extra_read(kind, sim, acked, drain[-1], rng)
    return _plant_out_of_order(kind, ops, drain, rng)


FRESH = 10**9  # a value no simulated producer sends


def _plant_extra_read(kind: str, sim: Simulation, acked: list, last: int,
                      rng: random.Random) -> set[int] | None:
    """The drain's last poll reads one more record, at the end of its partition."""
    ops = sim.builder.ops
    failed = [(i, op) for i, op in enumerate(ops) if isinstance(op, Send) and op.type == "fail"]
    if kind == "duplicate" and acked:
        index, value = rng.choice(acked)[0], None
        value = ops[index].value
    elif kind == "G1a" and failed:
        index, value = failed[0][0], failed[0][1].value
    elif kind == "unexpected-value":
        index, value = -1, FRESH
    else:
        return None
    p = ops[last].records[-1].partition
    extra = PolledRecord(p, len(sim.logs[p]), value)
    ops[last] = replace(ops[last], records=(*ops[last].records, extra))
    return {index + 1, last + 1} - {0}


def _plant_out_of_order(kind: str, ops: list, drain: list[int],
                        rng: random.Random) -> set[int] | None:
    if kind == "nonmonotonic-poll":  # the drain reads its first poll again at the end
        again = ops[drain[0]]
        ops.extend([replace(again, type="invoke", records=()), again])
        return {len(ops)}
    # A drain poll whose records are known from elsewhere (acknowledged, or read by another
    # poll): changed, the offsets it no longer reads are still known to exist.
    known = [i for i in drain if len(ops[i].records) >= 3
             and all(_known_elsewhere(ops, i, r) for r in ops[i].records)]
    if not known:
        return None
    i = rng.choice(known)
    records = list(ops[i].records)
    if kind == "int-nonmonotonic-poll":
        records[0], records[1] = records[1], records[0]
    elif kind == "int-poll-skip":
        del records[1]
    else:  # poll-skip: this poll reads nothing, so the next one jumps over its records
        same = [j for j in drain if ops[j].records[0].partition == records[0].partition]
        following = [j for j in same if j > i]
        if not following or same[0] == i:
            return None
        ops[i] = replace(ops[i], records=())
        return {following[0] + 1}
    ops[i] = replace(ops[i], records=tuple(records))
    return {i + 1}


def _known_elsewhere(ops: list, index: int, record: PolledRecord) -> bool:
    for j, op in enumerate(ops):
        if isinstance(op, Send) and op.type == "ok" and op.offset is not None and \
                (op.partition, op.offset) == (record.partition, record.offset):
            return True
        if isinstance(op, Poll) and j != index and record in op.records:
            return True
    return False


def _rewrite_polls(ops: list, change) -> None:  # change: a record -> a record or None
    for i, op in enumerate(ops):
        if isinstance(op, Poll) and op.type == "ok":
            kept = (change(r) for r in op.records)
            ops[i] = replace(op, records=tuple(r for r in kept if r is not None))
