"""Consumer fetch sessions, in-process (broker/handlers/consumer_session.py, the
ConsumerFetchWaiters of broker/delayed.py, the replica manager's wake-ups), through the real
shell on real RocksDB storage, with the test_replica_manager cluster (controller logic + brokers
in one event loop).

What it checks:

* a full request answers every partition and opens the session; then an idle consumer's
  incremental rounds list, evaluate and answer nothing;
* a produce wakes a parked round, which evaluates and answers only that partition (records and
  the new high watermark), at the consumer's cached offset;
* a forgotten partition leaves the session (no wake-ups, no answers); listing it again brings it
  back at its new offset;
* the partition's leadership moving away answers NOT_LEADER_OR_FOLLOWER for it at once;
* a topic created again under the same name replaces the old partition in the session;
* refusals forget the session (INVALID_FETCH_SESSION_EPOCH): a wrong epoch, an incremental
  request after the ACLs changed, a second session request in flight; a full request works
  after each; a name that does not exist is answered and kept out of the session;
* the unary Fetch keeps no session (a session epoch is refused);
* a closed session is untracked from every partition.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_replica_manager import Cluster, batch, scenario

from tidelog.broker.handlers.consumer_session import ConsumerFetchSession
from tidelog.broker.handlers.fetch import handle_fetch, handle_session_fetch
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import controller_pb2
from tidelog.v1.common_pb2 import ErrorCode

PARTITIONS = 20


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return tmp_path


def request(epoch: int, listed: dict[tuple[str, int], int] | None = None, *,
            forgotten: list[tuple[str, int]] = (), max_wait_ms: int = 0) -> pb.FetchRequest:  # type: ignore[assignment]
    r = pb.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1,
                        open_session=True, session_epoch=epoch)
    topics: dict[str, pb.FetchRequest.TopicData] = {}
    for (name, partition), offset in (listed or {}).items():
        if name not in topics:
            topics[name] = r.topics.add(name=name)
        topics[name].partitions.add(partition_id=partition, fetch_offset=offset,
                                    current_leader_epoch=-1, partition_max_bytes=1 << 20)
    for name, partition in forgotten:
        r.forgotten.add(name=name, partitions=[partition])
    return r


def answered(response: pb.FetchResponse) -> dict[tuple[str, int], pb.FetchResponse.PartitionData]:
    return {(t.name, p.partition_id): p for t in response.topics for p in t.partitions}


def every(name: str = "t", offset: int = 0) -> dict[tuple[str, int], int]:
    return {(name, p): offset for p in range(PARTITIONS)}


async def opened(c: Cluster) -> tuple[ReplicaManager, ConsumerFetchSession, pb.FetchResponse]:
    """Broker 1 leading the topic "t" (PARTITIONS partitions), a session on it, and the
    session's full request answered."""
    await c.start_all()
    manager = c.managers[1]
    session = ConsumerFetchSession(manager)
    c.create_topic("t", [[1]] * PARTITIONS)
    full = await handle_session_fetch(manager, request(0, every()), session)
    assert full.error_code == ErrorCode.NONE and full.next_session_epoch == 1
    assert len(answered(full)) == PARTITIONS, "a full round answers every partition"
    return manager, session, full


def test_an_idle_session_lists_evaluates_and_answers_nothing(base: Path) -> None:
    async def body(c: Cluster) -> None:
        _, session, full = await opened(c)
        assert session.stats.last == (PARTITIONS,) * 3
        epoch = full.next_session_epoch
        for _ in range(3):
            idle = await handle_session_fetch(c.managers[1], request(epoch, max_wait_ms=20),
                                              session)
            assert idle.error_code == ErrorCode.NONE and answered(idle) == {}
            assert session.stats.last == (0, 0, 0), "an idle round costs no partition"
            assert idle.next_session_epoch == epoch + 1
            epoch = idle.next_session_epoch
        assert len(session) == PARTITIONS
        session.close()
    scenario(base, body)


def test_a_produce_wakes_the_parked_round_which_answers_only_that_partition(base: Path) -> None:
    async def body(c: Cluster) -> None:
        _, session, full = await opened(c)
        parked = asyncio.ensure_future(handle_session_fetch(
            c.managers[1], request(full.next_session_epoch, max_wait_ms=10_000), session))
        await asyncio.sleep(0.05)
        assert not parked.done() and session.parked
        assert (await c.produce("t", batch(b"a", b"b"), acks=1, partition=7)).error_code == 0
        woken = await asyncio.wait_for(parked, 5)
        got = answered(woken)
        assert list(got) == [("t", 7)]
        assert got[("t", 7)].high_watermark == 2 and len(got[("t", 7)].batches) == 1
        assert session.stats.last == (0, 1, 1), "only the woken partition was evaluated"
        # The consumer moves on: partition 7 listed at its new offset; nothing else changes.
        after = await handle_session_fetch(
            c.managers[1], request(woken.next_session_epoch, {("t", 7): 2}, max_wait_ms=20),
            session)
        assert answered(after) == {} and session.stats.last == (1, 1, 0)
        session.close()
    scenario(base, body)


def test_a_forgotten_partition_leaves_the_session_and_comes_back_when_listed(
        base: Path) -> None:
    async def body(c: Cluster) -> None:
        manager, session, full = await opened(c)
        key = (c.controller.topic_id("t"), 3)
        assert manager.consumer_waiters.holders(key) == 1
        forgot = await handle_session_fetch(
            manager, request(full.next_session_epoch, forgotten=[("t", 3)], max_wait_ms=20),
            session)
        assert manager.consumer_waiters.holders(key) == 0 and len(session) == PARTITIONS - 1
        await c.produce("t", batch(b"x"), acks=1, partition=3)
        quiet = await handle_session_fetch(
            manager, request(forgot.next_session_epoch, max_wait_ms=50), session)
        assert answered(quiet) == {}, "a forgotten partition is not answered"
        back = await handle_session_fetch(
            manager, request(quiet.next_session_epoch, {("t", 3): 0}), session)
        assert [len(p.batches) for p in answered(back).values()] == [1]
        assert manager.consumer_waiters.holders(key) == 1
        session.close()
        assert manager.consumer_waiters.holders(key) == 0
        assert session not in manager.consumer_waiters.sessions
    scenario(base, body)


def test_leadership_moving_away_answers_not_leader_at_once(base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        manager = c.managers[1]
        session = ConsumerFetchSession(manager)
        c.create_topic("m", [[1, 2]])
        full = await handle_session_fetch(manager, request(0, {("m", 0): 0}), session)
        parked = asyncio.ensure_future(handle_session_fetch(
            manager, request(full.next_session_epoch, max_wait_ms=10_000), session))
        await asyncio.sleep(0.05)
        c.controller.heartbeat(1, want_fence=True)  # broker 1 fenced: broker 2 leads
        c.publish()
        got = answered(await asyncio.wait_for(parked, 5))
        assert got[("m", 0)].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert got[("m", 0)].current_leader.leader_id == 2
        session.close()
    scenario(base, body)


def test_refusals_forget_the_session_and_a_full_request_works_after_each(base: Path) -> None:
    async def body(c: Cluster) -> None:
        manager, session, full = await opened(c)
        wrong = await handle_session_fetch(manager, request(full.next_session_epoch + 5),
                                           session)
        assert wrong.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert len(session) == 0
        again = await handle_session_fetch(manager, request(full.next_session_epoch), session)
        assert again.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH, "forgotten"
        # The ACLs: the first version seen goes; the same again goes; a new one refuses an
        # incremental request (the session's partitions were checked against the old one).
        acls_v1, acls_v2 = object(), object()
        assert session.refusal_for_acls(acls_v1) is None
        full = await handle_session_fetch(manager, request(0, every()), session)
        assert session.refusal_for_acls(acls_v1) is None
        refused = session.refusal_for_acls(acls_v2)
        assert refused is not None
        assert refused.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert "ACLs changed" in refused.error_message and len(session) == 0
        assert session.refusal_for_acls(acls_v2) is None, "a full request is checked anew"
        full = await handle_session_fetch(manager, request(0, every()), session)
        # A second session request while one is parked: refused, and the session forgotten.
        parked = asyncio.ensure_future(handle_session_fetch(
            manager, request(full.next_session_epoch, max_wait_ms=10_000), session))
        await asyncio.sleep(0.05)
        second = await handle_session_fetch(manager, request(full.next_session_epoch + 1),
                                            session)
        assert second.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert "one fetch session request at a time" in second.error_message
        await asyncio.wait_for(parked, 5)
        ok = await handle_session_fetch(manager, request(0, every()), session)
        assert ok.error_code == ErrorCode.NONE and len(answered(ok)) == PARTITIONS
        session.close()
    scenario(base, body)


def test_unknown_names_are_answered_and_kept_out_a_recreated_topic_replaces_the_old(
        base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        manager = c.managers[1]
        session = ConsumerFetchSession(manager)
        c.create_topic("t", [[1]])
        full = await handle_session_fetch(
            manager, request(0, {("t", 0): 0, ("nope", 0): 0, ("t", 9): 0}), session)
        got = answered(full)
        assert got[("nope", 0)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert got[("t", 9)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert got[("t", 0)].error_code == ErrorCode.NONE and len(session) == 1
        old = (c.controller.topic_id("t"), 0)
        assert manager.consumer_waiters.holders(old) == 1
        # "t" deleted: the parked round answers the partition's end at once.
        parked = asyncio.ensure_future(handle_session_fetch(
            manager, request(full.next_session_epoch, max_wait_ms=10_000), session))
        await asyncio.sleep(0.05)
        c.controller.submit(c.controller.logic.handle_delete_topics(
            controller_pb2.DeleteTopicsRequest(names=["t"]), c.controller.now_ms))
        c.publish()
        gone = answered(await asyncio.wait_for(parked, 5))
        assert gone[("t", 0)].error_code == ErrorCode.UNKNOWN_TOPIC_ID
        # ... and created again: listing "t" resolves to the new topic, the old partition
        # leaves the session (no wake-ups of it reach the session any more).
        c.create_topic("t", [[1]])
        new = (c.controller.topic_id("t"), 0)
        assert new != old
        await c.produce("t", batch(b"new"), acks=1)
        again = await handle_session_fetch(
            manager, request(full.next_session_epoch + 1, {("t", 0): 0}), session)
        assert again.error_code == ErrorCode.NONE
        assert [len(p.batches) for p in answered(again).values()] == [1]
        assert manager.consumer_waiters.holders(old) == 0
        assert manager.consumer_waiters.holders(new) == 1 and len(session) == 1
        session.close()
    scenario(base, body)


def test_the_unary_fetch_keeps_no_session(base: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1]])
        full = await handle_fetch(c.managers[1], request(0, {("t", 0): 0}))
        assert full.error_code == ErrorCode.NONE and full.next_session_epoch == 0
        incremental = await handle_fetch(c.managers[1], request(1, {("t", 0): 0}))
        assert incremental.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    scenario(base, body)
