"""Replication over incremental fetch sessions, in-process (broker/fetcher.py,
broker/handlers/fetch.py's ReplicaFetchSession, broker/delayed.py, the replica manager's
wake-ups), through the real shell on real RocksDB storage.

What it checks:

* the replication scenarios of tests/unit/test_replica_manager.py (acks, failover, divergence,
  ISR shrink and expand, long-polls, sizes) pass again with every follower fetching over a
  session (they are imported and run here with the session transport);
* an idle cluster: once converged, fetch rounds list, evaluate and answer no partition;
  a produce to one partition lists, evaluates and answers a handful, replicates, and the
  followers learn the new HW;
* an append to a partition idle for longer than replica.lag.time.max.ms, with the ISR check
  running right after it (before any fetch), shrinks no ISR (the session's repeated fetches);
* a caught-up follower fenced out of the ISR rejoins it when unfenced, with no new data (the
  eligibility wake-up);
* a follower restart (new session: a full request) and a session the leader lost (the
  follower's incremental request is refused INVALID_FETCH_SESSION_EPOCH, then full) recover.

How: ``SessionTransport`` replaces test_replica_manager's in-memory transport. It keeps one
:class:`~broker.handlers.fetch.ReplicaFetchSession` per (follower, leader) as a FetchStream
does, and ends it (``close``) whenever an exchange fails, times out or is cancelled -- as the
gRPC transport closes its stream -- or the leader's replica manager is a new one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_replica_manager as suite
from test_replica_manager import (  # noqa: F401 - collected here again, over sessions
    Cluster,
    batch,
    scenario,
    test_a_diverged_follower_truncates_to_the_new_leader,
    test_acks_1_and_0_answer_after_the_local_append,
    test_acks_all_times_out_when_an_isr_member_does_not_fetch,
    test_acks_all_waits_for_the_isr_and_every_replica_ends_identical,
    test_consumer_long_poll_is_woken_by_the_high_watermark,
    test_fetch_sizes_per_partition_and_per_request,
    test_isr_shrinks_for_a_lagging_follower_and_expands_when_it_catches_up,
    test_leader_failover_keeps_acknowledged_records_and_the_old_leader_rejoins,
    test_many_partitions_in_one_request_answer_each,
    test_min_insync_replicas_refuses_acks_all_but_not_acks_1,
    until,
)

from tidelog.broker.fetcher import ReplicaFetcher
from tidelog.broker.handlers.fetch import ReplicaFetchSession, handle_replica_fetch
from tidelog.broker.partition_writer import TopicIdPartition
from tidelog.broker.replica_manager import ReplicaManager, ReplicaManagerConfig
from tidelog.errors import NetworkError
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode

WAIT_MS = 50  # replica.fetch.wait.max.ms: rounds of an idle session
FAST = ReplicaManagerConfig(replica_fetch_wait_max_ms=WAIT_MS, replica_fetch_backoff_ms=20)


class SessionTransport:
    """One fetch session per leader, as over a FetchStream (see the module doc)."""

    def __init__(self, network: suite.Network, source: int) -> None:
        self.network = network
        self.source = source
        self.sessions: dict[int, tuple[ReplicaManager, ReplicaFetchSession]] = {}
        self.opened = 0
        self.nudges = 0

    async def fetch(self, leader_id: int, request: pb.FetchRequest, *,
                    timeout_s: float) -> pb.FetchResponse:
        network = self.network
        leader = network.managers.get(leader_id)
        if leader is None or {self.source, leader_id} & network.cut:
            self._close(leader_id)
            await asyncio.sleep(0.01)
            raise NetworkError(f"broker {leader_id} unreachable from {self.source}")
        known = self.sessions.get(leader_id)
        if known is None or known[0] is not leader:
            # A new stream (the leader restarted, or the last exchange failed).
            self._close(leader_id)
            known = self.sessions[leader_id] = (leader, ReplicaFetchSession(leader))
            self.opened += 1
        known[1].request_read()
        ok = False
        try:
            wire = pb.FetchRequest.FromString(request.SerializeToString())
            answer = await asyncio.wait_for(handle_replica_fetch(leader, wire, known[1]),
                                            timeout_s)
            if {self.source, leader_id} & network.cut:
                raise NetworkError("cut while the fetch was in flight")
            ok = True
            return pb.FetchResponse.FromString(answer.SerializeToString())
        finally:
            if not ok:
                self._close(leader_id)

    def answer_now(self, leader_id: int) -> bool:
        """FetchRequest.answer_now on the open stream (as GrpcReplicaTransport writes it)."""
        known = self.sessions.get(leader_id)
        if known is None:
            return False
        self.nudges += 1
        known[1].answer_now()
        return True

    def _close(self, leader_id: int) -> None:
        known = self.sessions.pop(leader_id, None)
        if known is not None:
            known[1].close()

    async def close(self) -> None:
        for leader_id in list(self.sessions):
            self._close(leader_id)


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


@pytest.fixture(autouse=True)
def over_sessions(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(suite.Network, "transport",
                        lambda self, source: SessionTransport(self, source))
    yield


# --- helpers ---------------------------------------------------------------------------------


def fetchers(c: Cluster) -> list[ReplicaFetcher]:
    found = []
    for manager in c.managers.values():
        assert manager._fetchers is not None
        found.extend(manager._fetchers.fetchers.values())
    return found


def sessions(c: Cluster) -> list[ReplicaFetchSession]:
    found = []
    for manager in c.managers.values():
        for session in manager.follower_waiters.sessions:
            assert isinstance(session, ReplicaFetchSession)
            found.append(session)
    return found


def transport_of(c: Cluster, broker_id: int) -> SessionTransport:
    fetchers = c.managers[broker_id]._fetchers
    assert fetchers is not None and isinstance(fetchers.transport, SessionTransport)
    return fetchers.transport


def totals(c: Cluster) -> tuple[int, int, int, int, int]:
    """(requests answered, partitions listed by followers, evaluated, answered by leaders,
    full requests)."""
    stats = [s.stats for s in sessions(c)]
    return (sum(f.fetches for f in fetchers(c)), sum(f.partitions_listed for f in fetchers(c)),
            sum(s.evaluated for s in stats), sum(s.answered for s in stats),
            sum(f.full_requests for f in fetchers(c)))


def create_many(c: Cluster, name: str, count: int) -> list[list[int]]:
    """``count`` partitions, RF 3, leaders spread over brokers 1..3."""
    assignments = [[1 + (p + i) % 3 for i in range(3)] for p in range(count)]
    c.create_topic(name, assignments)
    return assignments


async def all_caught_up(c: Cluster, name: str, count: int) -> None:
    topic_id = c.controller.topic_id(name)

    def done() -> bool:
        for p in range(count):
            leader = c.managers[c.leader_of(name, p)].partition(topic_id, p)
            if leader is None or leader.log.high_watermark != leader.log.log_end_offset:
                return False
            for manager in c.managers.values():
                replica = manager.partition(topic_id, p)
                if replica is None or replica.log.high_watermark != leader.log.high_watermark:
                    return False
        return True
    await until(done, f"{name}: every replica at the leader's HW")


async def idle_rounds(c: Cluster, rounds: int) -> None:
    """Wait until every session answered ``rounds`` more requests."""
    before = {id(s): s.stats.rounds for s in sessions(c)}
    await until(lambda: all(s.stats.rounds >= before.get(id(s), 0) + rounds
                            for s in sessions(c)), f"{rounds} rounds of every session")


# --- sessions ----------------------------------------------------------------------------------


def test_idle_rounds_carry_nothing_and_a_produce_carries_only_its_partition(base: Path
                                                                            ) -> None:
    count = 60

    async def body(c: Cluster) -> None:
        await c.start_all()
        create_many(c, "t", count)
        for p in range(count):  # data everywhere, so that the HW moved at least once
            assert (await c.produce("t", batch(b"x%d" % p), partition=p)).error_code == 0
        await all_caught_up(c, "t", count)
        await idle_rounds(c, 3)
        assert len(sessions(c)) == 6, "one session per follower per leader"
        answered0, listed0, evaluated0, sent0, full0 = totals(c)
        await idle_rounds(c, 5)
        answered1, listed1, evaluated1, sent1, full1 = totals(c)
        assert answered1 - answered0 >= 6 * 5, "the sessions keep polling"
        assert (listed1, evaluated1, sent1, full1) == (listed0, evaluated0, sent0, full0), \
            "idle rounds list, evaluate and answer no partition"
        for session in sessions(c):
            assert session.stats.last == (0, 0, 0)
        # One produce: its partition only, on both followers' sessions.
        answer = await c.produce("t", batch(b"new"), partition=7)
        assert answer.error_code == ErrorCode.NONE, answer
        await all_caught_up(c, "t", count)
        _, listed2, evaluated2, sent2, full2 = totals(c)
        assert full2 == full1
        assert 0 < listed2 - listed1 <= 4, listed2 - listed1
        assert 0 < evaluated2 - evaluated1 <= 8, evaluated2 - evaluated1
        assert 0 < sent2 - sent1 <= 8, sent2 - sent1
    scenario(base, body, config=FAST)


def test_partitions_added_while_a_poll_waits_join_the_session_without_a_full_round(
        base: Path) -> None:
    # The leader holds an idle poll for replica.fetch.wait.max.ms (30 s here, the most). A follower
    # given new partitions of that leader asks it to answer now (answer_now) and lists them in
    # its next, incremental request: the session goes on, no partition is listed again.
    config = ReplicaManagerConfig(replica_fetch_wait_max_ms=30_000, replica_fetch_backoff_ms=20)

    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("a", [[1, 2, 3]] * 20)
        for p in range(20):
            assert (await c.produce("a", batch(b"a"), partition=p)).error_code == 0
        # acks=all: the followers have every record (they learn the HW on a later round).
        await until(lambda: len(sessions(c)) == 2 and all(s.parked for s in sessions(c)),
                    "both followers' polls wait at leader 1")
        transports = [transport_of(c, b) for b in (2, 3)]
        opened = [t.opened for t in transports]
        _, listed0, _, _, full0 = totals(c)
        c.create_topic("b", [[1, 2, 3]] * 3)
        for p in range(3):
            answer = await c.produce("b", batch(b"b%d" % p), partition=p, timeout_ms=20_000)
            assert answer.error_code == ErrorCode.NONE, answer  # in both followers' logs
        _, listed1, _, _, full1 = totals(c)
        assert [t.opened for t in transports] == opened, "the same sessions"
        assert full1 == full0, "no full request"
        assert all(t.nudges >= 1 for t in transports)
        # The 3 new partitions (and those the produces moved) are listed, not the 20 others.
        assert listed1 - listed0 < 2 * 20, listed1 - listed0
    scenario(base, body, config=config)


def test_an_append_after_a_long_idle_finds_the_followers_caught_up(base: Path) -> None:
    lag_ms = 300
    config = ReplicaManagerConfig(replica_lag_time_max_ms=lag_ms, replica_fetch_wait_max_ms=50,
                                  replica_fetch_backoff_ms=20)

    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]], {"min.insync.replicas": "2"})
        assert (await c.produce("t", batch(b"a"))).error_code == ErrorCode.NONE
        await all_caught_up(c, "t", 1)
        await asyncio.sleep(4 * lag_ms / 1000)  # idle: the followers' last evaluation is old
        leader = c.managers[1]
        partition = leader.partition(c.controller.topic_id("t"), 0)
        assert partition is not None
        for replica in (2, 3):
            follower = partition.state.follower_state(replica)
            assert follower is not None and follower.last_fetch_time_ms is not None
        # Append and run the ISR check at once, before any fetch can reach the leader.
        tp = TopicIdPartition(c.controller.topic_id("t"), 0)
        pending = leader.start_append(tp, batch(b"b"), acks=-1,
                                      now_ms=int(time.time() * 1000),
                                      monotonic_ms=int(time.monotonic() * 1000))
        leader.run_job("isr")
        assert partition.state.pending_isr_change is None, "no ISR shrink proposed"
        outcome = (await leader.await_acks([pending], 5_000))[0]
        assert outcome.error is None, outcome
        assert c.isr("t") == (1, 2, 3)
        assert c.registries[1].get_sample_value("tidelog_broker_isr_shrinks_total") == 0
    scenario(base, body, config=config)


def test_a_caught_up_follower_rejoins_the_isr_when_it_is_eligible_again(base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]])
        assert (await c.produce("t", batch(b"a"))).error_code == ErrorCode.NONE
        await all_caught_up(c, "t", 1)
        c.controller.heartbeat(3, want_fence=True)  # fenced, but still running and fetching
        c.publish()
        await until(lambda: c.isr("t") == (1, 2), "3 out of the ISR while fenced")
        await idle_rounds(c, 3)
        c.controller.heartbeat(3)
        c.publish()
        await until(lambda: c.isr("t") == (1, 2, 3), "3 back in the ISR with no new data")
    scenario(base, body, config=FAST)


def test_a_follower_restart_starts_a_full_session_and_catches_up(base: Path) -> None:
    count = 30

    async def body(c: Cluster) -> None:
        await c.start_all()
        create_many(c, "t", count)
        await all_caught_up(c, "t", count)
        await c.crash_and_fence(3)
        for p in range(count):
            answer = await c.produce("t", batch(b"while-3-was-down-%d" % p), partition=p)
            assert answer.error_code == ErrorCode.NONE, answer
        await c.restart(3)
        await all_caught_up(c, "t", count)
        restarted = c.managers[3]
        assert restarted._fetchers is not None
        for fetcher in restarted._fetchers.fetchers.values():
            assert fetcher.full_requests >= 1, "a new session starts full"
        await until(lambda: all(len(c.isr("t", p)) == 3 for p in range(count)),
                    "3 back in every ISR")
        for p in range(count):
            await c.converged("t", (1, 2, 3), partition=p)
    scenario(base, body, config=FAST)


def test_a_session_the_leader_lost_is_refused_and_the_follower_starts_over(base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]], {"min.insync.replicas": "2"})
        assert (await c.produce("t", batch(b"a"))).error_code == ErrorCode.NONE
        await all_caught_up(c, "t", 1)
        # A leader that lost the session (as after INVALID_FETCH_SESSION_EPOCH): the next
        # incremental request is refused and the follower sends a full one.
        follower = c.managers[2]
        assert follower._fetchers is not None
        fetcher = follower._fetchers.fetchers[1]
        transport = fetcher.manager.transport
        assert isinstance(transport, SessionTransport)
        _, session = transport.sessions[1]
        full_before = fetcher.full_requests
        session.reset()
        await until(lambda: fetcher.full_requests > full_before, "a full request again")
        assert session.stats.refused >= 1
        assert (await c.produce("t", batch(b"b"))).error_code == ErrorCode.NONE
        await all_caught_up(c, "t", 1)
        await c.converged("t", (1, 2, 3))
    scenario(base, body, config=FAST)



def test_retries_to_an_unreachable_leader_list_nothing_and_the_session_resumes(
        base: Path) -> None:
    # A follower of a dead leader retries with requests that list no partition (it used to
    # list every partition it followed from it at each retry: at 100,000 partitions that
    # took a sixth of a broker's event loop during a kill -9); once the leader answers, the
    # partitions join the new session incrementally and replication goes on.
    count = 12

    async def body(c: Cluster) -> None:
        await c.start_all()
        create_many(c, "t", count)
        for p in range(count):
            answer = await c.produce("t", batch(b"before-%d" % p), partition=p)
            assert answer.error_code == ErrorCode.NONE, answer
        await all_caught_up(c, "t", count)
        follower = c.managers[2]
        assert follower._fetchers is not None
        fetcher = follower._fetchers.fetchers[1]
        followed = len(fetcher.partitions)
        assert followed >= 2 and len(fetcher.session) == followed
        c.network.cut = {1}
        await until(lambda: fetcher.failures >= 1, "a failed fetch")
        listed = fetcher.partitions_listed
        await until(lambda: fetcher.failures >= 4, "three retries")
        assert fetcher.partitions_listed == listed, "the retries listed partitions"
        full_before, fetches_before = fetcher.full_requests, fetcher.fetches
        c.network.cut = set()
        await until(lambda: len(fetcher.session) == followed and not fetcher.session.full,
                    "every partition back in an incremental session")
        assert fetcher.full_requests > full_before
        assert fetcher.partitions_listed >= listed + followed
        await until(lambda: fetcher.fetches >= fetches_before + 2,
                    "the empty full request answered, then the one listing the rest")
        for p in range(count):
            answer = await c.produce("t", batch(b"after-%d" % p), partition=p)
            assert answer.error_code == ErrorCode.NONE, (p, answer)
        await all_caught_up(c, "t", count)
        for p in range(count):
            await c.converged("t", (1, 2, 3), partition=p)
    scenario(base, body, config=FAST)


def test_a_nudge_read_before_its_request_is_served_still_answers_it(base: Path) -> None:
    # The leader's stream handler reads ahead: a follower's request and the answer_now nudge
    # right behind it may both be read before the request's round begins. The nudge is about
    # that request; one that crossed its answer is stale and changes nothing.
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]])
        leader = c.managers[1]
        topic_id = c.controller.topic_id("t")
        epoch = c.controller.broker_epoch(2)

        def request(session_epoch: int, max_wait_ms: int = 30_000) -> pb.FetchRequest:
            r = pb.FetchRequest(replica_id=2, replica_broker_epoch=epoch, max_wait_ms=max_wait_ms,
                                min_bytes=1, max_bytes=1 << 20, session_epoch=session_epoch)
            r.topics.add(topic_id=topic_id).partitions.add(
                partition_id=0, fetch_offset=0, current_leader_epoch=0, last_fetched_epoch=-1,
                log_start_offset=0, partition_max_bytes=1 << 20)
            return r

        await until(lambda: leader.partition(topic_id, 0) is not None, "t-0 hosted")
        session = ReplicaFetchSession(leader)
        try:
            session.request_read()  # the full request, asking for no wait
            first = await handle_replica_fetch(leader, request(0, max_wait_ms=0), session)
            assert first.error_code == ErrorCode.NONE and first.next_session_epoch == 1
            session.answer_now()  # stale: about the request just answered
            session.request_read()
            session.answer_now()  # about this one, read before its round begins
            answered = await asyncio.wait_for(
                handle_replica_fetch(leader, request(1), session), suite.WAIT_S)
            assert answered.error_code == ErrorCode.NONE, answered
            session.answer_now()  # crossed that answer: stale
            session.request_read()
            parked = asyncio.ensure_future(handle_replica_fetch(leader, request(2), session))
            await until(lambda: session.parked, "the next round waits for data")
            assert not parked.done()
            parked.cancel()
        finally:
            session.close()
    scenario(base, body, config=FAST)
