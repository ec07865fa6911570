"""The data plane's answers to what clients send, and its housekeeping, in-process.

What it checks: idempotent producers (InitProducerId from controller blocks, a retried batch
answered with its original offset on the leader and on a new leader after failover, gaps and
older producer epochs refused, producer state rebuilt from the log after a restart with a stale
snapshot); bad input answered with per-partition codes while the broker keeps serving
(CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_REQUIRED_ACKS,
OFFSET_OUT_OF_RANGE, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH, INVALID_FETCH_SIZE, follower
fetches from a stale broker epoch); LogAppendTime topics; DescribeLogs; a deleted topic's data
removed on every broker, and a log left on a broker that was down during the delete removed
once it is back; retention run by the timer job; metrics.

How: the in-process cluster of tests/unit/test_replica_manager.py (real ControllerLogic, real
RocksDB per broker, in-memory replica fetches), one scenario per test under ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from test_replica_manager import Cluster, batch, scenario, until, values

from tidelog.broker.delayed import FetchWaiters
from tidelog.broker.handlers import (
    handle_describe_logs,
    handle_fetch,
    handle_init_producer_id,
    handle_list_offsets,
    handle_produce,
    handle_replica_fetch,
)
from tidelog.broker.producer_ids import ProducerIdManager
from tidelog.broker.replica_manager import ReplicaManagerConfig
from tidelog.broker.replication import ProducerStateTable
from tidelog.broker.storage import Storage
from tidelog.record_batch import decode_records, parse_batch
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode, TimestampType

# --- idempotent producers ------------------------------------------------------------------------


async def init_producer(c: Cluster, broker: int, producer_id: int = -1,
                        producer_epoch: int = -1) -> tuple[int, int]:
    answer = await handle_init_producer_id(c.managers[broker],
        pb.InitProducerIdRequest(producer_id=producer_id, producer_epoch=producer_epoch))
    assert answer.error_code == ErrorCode.NONE, answer
    return answer.producer_id, answer.producer_epoch


def test_init_producer_id_hands_out_ids_from_controller_blocks(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        first = await init_producer(c, 1)
        second = await init_producer(c, 1)
        other = await init_producer(c, 2)
        assert first[1] == second[1] == other[1] == 0
        assert second[0] == first[0] + 1
        assert other[0] not in (first[0], second[0]), "brokers get disjoint blocks"
        assert await init_producer(c, 1, first[0], 0) == (first[0], 1), "epoch bump"
        bumped = await init_producer(c, 1, first[0], 32767)
        assert bumped[0] != first[0] and bumped[1] == 0, "a new id once the epoch is exhausted"
        refused = await handle_init_producer_id(c.managers[1],
            pb.InitProducerIdRequest(transactional_id="tx", producer_id=-1))
        assert refused.error_code == ErrorCode.INVALID_REQUEST
    scenario(tmp_path, body)


def test_a_producers_second_batch_arriving_first_is_refused_not_written(tmp_path: Path
                                                                         ) -> None:
    """gRPC runs a client's concurrent Produce calls concurrently, so an idempotent producer's
    second in-flight batch can reach the leader before its first. It must be refused
    (OUT_OF_ORDER_SEQUENCE_NUMBER, which the client retries once the first lands), not written at
    the log's end: that made the first batch a DUPLICATE_SEQUENCE_NUMBER of nothing, which the
    client completes as written (records acknowledged, never stored)."""
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]])
        pid, epoch = await init_producer(c, 1)
        first = batch(b"a", b"b", b"c", producer_id=pid, producer_epoch=epoch, base_sequence=0)
        second = batch(b"d", b"e", producer_id=pid, producer_epoch=epoch, base_sequence=3)
        early = await c.produce("t", second)
        assert early.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, early
        assert c.leo(1, "t") == 0, "nothing written"
        assert (await c.produce("t", first)).base_offset == 0
        assert (await c.produce("t", second)).base_offset == 3, "the retry lands after it"
        assert values(c.log_batches(1, "t")) == [b"a", b"b", b"c", b"d", b"e"]
    scenario(tmp_path, body)


def test_duplicates_gaps_and_fenced_producer_epochs(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]], {"min.insync.replicas": "2"})
        pid, epoch = await init_producer(c, 1)
        first = batch(b"a", b"b", producer_id=pid, producer_epoch=epoch, base_sequence=0)
        assert (await c.produce("t", first)).base_offset == 0
        assert (await c.produce("t", batch(b"other"))).base_offset == 2
        retry = await c.produce("t", first)
        assert (retry.error_code, retry.base_offset) == (ErrorCode.NONE, 0), \
            "a retried batch is answered with its original offset"
        assert c.leo(1, "t") == 3, "and not appended again"
        gap = await c.produce("t", batch(b"c", producer_id=pid, producer_epoch=epoch,
                                         base_sequence=5))
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        nxt = await c.produce("t", batch(b"c", producer_id=pid, producer_epoch=epoch,
                                         base_sequence=2))
        assert nxt.base_offset == 3
        _, new_epoch = await init_producer(c, 1, pid, epoch)
        assert (await c.produce("t", batch(b"d", producer_id=pid, producer_epoch=new_epoch,
                                           base_sequence=0))).error_code == ErrorCode.NONE
        zombie = await c.produce("t", batch(b"z", producer_id=pid, producer_epoch=epoch,
                                            base_sequence=3))
        assert zombie.error_code == ErrorCode.INVALID_PRODUCER_EPOCH

        # Every follower applied the headers: a new leader knows the producer too.
        await c.converged("t", (1, 2, 3))
        await c.crash_and_fence(1)
        again = await c.produce("t", batch(b"d", producer_id=pid, producer_epoch=new_epoch,
                                           base_sequence=0))
        assert (again.error_code, again.base_offset) == (ErrorCode.NONE, 4)
        assert values(c.log_batches(c.leader_of("t"), "t")) == [b"a", b"b", b"other", b"c",
                                                                b"d"]
    scenario(tmp_path, body)


def test_producer_state_is_rebuilt_from_the_log_after_a_restart(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1]])
        pid, epoch = await init_producer(c, 1)
        batches = [batch(b"v%d" % i, producer_id=pid, producer_epoch=epoch, base_sequence=i)
                   for i in range(3)]
        for data in batches:
            assert (await c.produce("t", data)).error_code == ErrorCode.NONE
        topic_id = c.controller.topic_id("t")
        await c.stop(1)
        # A crash before the periodic save: the stored snapshot is older than the log.
        with Storage.open(c.data_dir(1), cluster_id="test-cluster", node_id=1) as storage:
            storage.log(topic_id, 0).put_producer_state(ProducerStateTable().encode())
        await c.start(1)
        retry = await c.produce("t", batches[1])
        assert (retry.error_code, retry.base_offset) == (ErrorCode.NONE, 1)
        gap = await c.produce("t", batch(b"x", producer_id=pid, producer_epoch=epoch,
                                         base_sequence=7))
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert c.leo(1, "t") == 3
    scenario(tmp_path, body, broker_ids=(1,))


# --- bad input -----------------------------------------------------------------------------------


def test_bad_produce_input_is_answered_per_partition(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2]], {"max.message.bytes": str(4 << 20),
                                       "segment.bytes": str(1 << 20)})
        c.create_topic("small", [[1]], {"max.message.bytes": "1000"})
        good = batch(b"ok")
        flipped = bytearray(good)
        flipped[-3] ^= 0xFF
        cases = {
            "corrupt": (await c.produce("t", bytes(flipped))).error_code,
            "garbage": (await c.produce("t", b"\xff\x00 not a batch")).error_code,
            "empty": (await c.produce("t", b"")).error_code,
            "too large": (await c.produce("small", batch(b"x" * 2000))).error_code,
            "above segment.bytes": (await c.produce(
                "t", batch(b"y" * (1 << 20), b"y" * (1 << 19)))).error_code,
            "acks 2": (await c.produce("t", good, acks=2)).error_code,
        }
        assert cases == {
            "corrupt": ErrorCode.CORRUPT_MESSAGE, "garbage": ErrorCode.CORRUPT_MESSAGE,
            "empty": ErrorCode.CORRUPT_MESSAGE, "too large": ErrorCode.MESSAGE_TOO_LARGE,
            "above segment.bytes": ErrorCode.RECORD_LIST_TOO_LARGE,
            "acks 2": ErrorCode.INVALID_REQUIRED_ACKS}
        assert c.leo(1, "t") == 0
        ok = await c.produce("t", good)
        assert (ok.error_code, ok.base_offset) == (ErrorCode.NONE, 0), "still serving"
    scenario(tmp_path, body)


def test_oversize_request_is_record_list_too_large(tmp_path: Path) -> None:
    config = ReplicaManagerConfig(produce_request_bytes_max=10_000,
                                  replica_fetch_wait_max_ms=100)

    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1]])
        request = pb.ProduceRequest(acks=1)
        topic = request.topics.add(name="t")
        for _ in range(3):
            topic.partitions.add(partition_id=0, batch=batch(b"z" * 4_000))
        response = await handle_produce(c.managers[1], request)
        assert [p.error_code for p in response.topics[0].partitions] == \
            [ErrorCode.RECORD_LIST_TOO_LARGE] * 3
        assert c.leo(1, "t") == 0
    scenario(tmp_path, body, broker_ids=(1,), config=config)


def test_bad_fetch_input_is_answered_per_partition(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2]])
        await c.produce("t", batch(b"a", b"b"))
        assert (await c.fetch("t", -1)).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert (await c.fetch("t", 3)).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert (await c.fetch("t", 2)).error_code == ErrorCode.NONE, "the LEO is in range"
        assert (await c.fetch("t", 0, leader_epoch=0)).error_code == ErrorCode.NONE
        assert (await c.fetch("t", 0, leader_epoch=3)).error_code == \
            ErrorCode.UNKNOWN_LEADER_EPOCH
        follower = await c.fetch("t", 0, broker=2)
        assert follower.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, "consumers read leaders"
        assert follower.current_leader.leader_id == 1
        assert (await c.fetch("t", 0, partition_max_bytes=-1)).error_code == \
            ErrorCode.INVALID_FETCH_SIZE
        assert (await c.fetch("nope", 0, broker=1)).error_code == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        negative = await handle_fetch(c.managers[1], pb.FetchRequest(max_bytes=-1))
        assert negative.error_code == ErrorCode.INVALID_FETCH_SIZE
        got = await c.fetch("t", 0)
        assert values(list(got.batches)) == [b"a", b"b"], "still serving"
    scenario(tmp_path, body)


def test_fenced_leader_epoch_after_a_leader_change(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]])
        await c.produce("t", batch(b"a"))
        await c.converged("t", (1, 2, 3))
        await c.crash_and_fence(1)
        leader = c.leader_of("t")
        stale = await c.fetch("t", 0, leader_epoch=0)
        assert stale.error_code == ErrorCode.FENCED_LEADER_EPOCH
        assert stale.current_leader.leader_id == leader
        assert stale.current_leader.leader_epoch == 1
        request = pb.ListOffsetsRequest()
        request.topics.add(name="t").partitions.add(partition_id=0, timestamp=-1,
                                                    current_leader_epoch=0)
        listed = await handle_list_offsets(c.managers[leader], request)
        assert listed.topics[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    scenario(tmp_path, body)


def test_replica_fetch_from_an_old_incarnation_is_stale_broker_epoch(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2]])
        request = pb.FetchRequest(replica_id=2, replica_broker_epoch=0)
        request.topics.add(topic_id=c.controller.topic_id("t")).partitions.add(
            partition_id=0, fetch_offset=0)
        answer = await handle_replica_fetch(c.managers[1], request)
        assert answer.error_code == ErrorCode.STALE_BROKER_EPOCH
        nobody = await handle_replica_fetch(c.managers[1], pb.FetchRequest(replica_id=-1))
        assert nobody.error_code == ErrorCode.INVALID_REQUEST
    scenario(tmp_path, body)


def _replica_fetch(c: Cluster, replica_id: int, broker_epoch: int) -> pb.FetchRequest:
    request = pb.FetchRequest(replica_id=replica_id, replica_broker_epoch=broker_epoch)
    request.topics.add(topic_id=c.controller.topic_id("t")).partitions.add(
        partition_id=0, fetch_offset=0, current_leader_epoch=0)
    return request


def test_replica_fetch_needs_the_exact_registered_broker_epoch(tmp_path: Path) -> None:
    # A follower is its id AND the exact epoch of its registration (KIP-903): a newer epoch is
    # not "at least as new", it is a registration the leader has not seen (or a forgery).
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2]])
        epoch = c.controller.broker_epoch(2)
        for wrong in (epoch + 1, epoch - 1, 10**12):
            answer = await handle_replica_fetch(c.managers[1], _replica_fetch(c, 2, wrong))
            assert answer.error_code == ErrorCode.STALE_BROKER_EPOCH, (wrong, answer)
            assert f"broker epoch {wrong}, not its registration's {epoch}" \
                in answer.error_message
        unknown = await handle_replica_fetch(c.managers[1], _replica_fetch(c, 9, epoch))
        assert unknown.error_code == ErrorCode.STALE_BROKER_EPOCH
        right = await handle_replica_fetch(c.managers[1], _replica_fetch(c, 2, epoch))
        assert right.error_code == ErrorCode.NONE
        assert right.topics[0].partitions[0].error_code == ErrorCode.NONE
    scenario(tmp_path, body)


def test_a_broker_answers_no_follower_before_its_metadata_caught_up(tmp_path: Path) -> None:
    # A restarted broker may still believe in a leadership it lost while it was down: until the
    # active controller says its metadata caught up, no follower fetch is served (retriable).
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2]])
        c.caught_up[1] = False
        request = _replica_fetch(c, 2, c.controller.broker_epoch(2))
        answer = await handle_replica_fetch(c.managers[1], request)
        assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, answer
        assert "caught up with the metadata" in answer.error_message
        c.caught_up[1] = True
        answer = await handle_replica_fetch(c.managers[1], request)
        assert answer.error_code == ErrorCode.NONE, answer
    scenario(tmp_path, body)


def test_alter_partition_carries_the_broker_epochs_of_the_isr(tmp_path: Path) -> None:
    # KIP-903 on the sending side: an ISR expansion names each member's broker epoch as its
    # fetches carried it (the leader's own is the request's), so the controller can refuse a
    # member that re-registered since.
    config = ReplicaManagerConfig(replica_lag_time_max_ms=300, replica_fetch_wait_max_ms=50,
                                  replica_fetch_backoff_ms=20)

    async def body(c: Cluster) -> None:
        sent: list[cpb.AlterPartitionRequest] = []
        call = c.call

        async def spy(method: str, request: Any) -> Any:
            if method == "AlterPartition":
                sent.append(cpb.AlterPartitionRequest.FromString(request.SerializeToString()))
            return await call(method, request)

        c.call = spy  # type: ignore[method-assign]
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]], {"min.insync.replicas": "2"})
        c.network.cut = {3}
        assert (await c.produce("t", batch(b"x"))).error_code == ErrorCode.NONE
        assert c.isr("t") == (1, 2)
        c.network.cut = set()
        await until(lambda: c.isr("t") == (1, 2, 3), "broker 3 back in the ISR")
        expand = sent[-1].topics[0].partitions[0]
        assert list(expand.new_isr) == [1, 2, 3]
        assert [(s.broker_id, s.broker_epoch) for s in expand.new_isr_with_epochs] == [
            (b, c.controller.broker_epoch(b)) for b in (1, 2, 3)]
    scenario(tmp_path, body, config=config)


# --- topic configs, describe -------------------------------------------------------------------


def test_log_append_time_topics_stamp_the_leaders_clock(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2]], {"message.timestamp.type": "LogAppendTime"})
        before = int(time.time() * 1000)
        answer = await c.produce("t", batch(b"a", timestamp_ms=5))
        assert answer.log_append_time_ms >= before
        await c.converged("t", (1, 2))
        stored = parse_batch(c.log_batches(2, "t")[0])
        assert stored.timestamp_type == TimestampType.LOG_APPEND_TIME
        assert stored.log_append_time_ms == answer.log_append_time_ms
        got = await c.fetch("t", 0)
        record = decode_records(parse_batch(got.batches[0]))[0]
        assert record.timestamp_ms == answer.log_append_time_ms, "CRC still valid"
    scenario(tmp_path, body)


def test_describe_logs(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2], [2, 1]])
        await c.produce("t", batch(b"a", b"b"))
        described = await handle_describe_logs(c.managers[1], pb.DescribeLogsRequest())
        rows = {(p.topic, p.partition_id): p for p in described.partitions}
        assert described.broker_id == 1 and set(rows) == {("t", 0), ("t", 1)}
        assert rows[("t", 0)].is_leader and rows[("t", 0)].log_end_offset == 2
        assert rows[("t", 0)].size_bytes > 0 and not rows[("t", 1)].is_leader
        request = pb.DescribeLogsRequest()
        request.topics.add(name="t", partitions=[1, 9])
        some = await handle_describe_logs(c.managers[1], request)
        assert [(p.partition_id, p.error_code) for p in some.partitions] == [
            (1, ErrorCode.NONE), (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    scenario(tmp_path, body)


# --- deletion, strays, retention, metrics --------------------------------------------------------


def test_deleted_topic_data_goes_from_every_broker_and_from_one_that_was_down(tmp_path: Path
                                                                             ) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        topic_id = c.create_topic("t", [[1, 2, 3]])
        await c.produce("t", batch(b"a"))
        await c.converged("t", (1, 2, 3))
        await c.crash_and_fence(3)
        response = c.controller.submit(c.controller.logic.handle_delete_topics(
            cpb.DeleteTopicsRequest(names=["t"]), c.controller.now_ms)).response
        assert response.error_code == ErrorCode.NONE, response
        c.publish()
        for broker in (1, 2):
            assert c.managers[broker].partition(topic_id, 0) is None
            assert c.managers[broker].storage.partitions() == []
        manager = await c.restart(3)
        assert manager.partition(topic_id, 0) is None
        manager.run_job("gauges")  # the periodic stray check, once caught up
        assert manager.storage.partitions() == []
    scenario(tmp_path, body)


def test_a_broker_not_yet_caught_up_takes_no_writes_and_deletes_no_strays(tmp_path: Path
                                                                          ) -> None:
    """Until the active controller confirms the broker's metadata reached its registration, the
    image may be a prefix of the log (a restart that streamed from a controller still replaying
    its journal): logs it does not name are kept, and produce is refused (retriable)."""
    async def body(c: Cluster) -> None:
        await c.start_all()
        before_topic = len(c.controller.log)
        topic_id = c.create_topic("t", [[1, 2, 3]])
        await c.produce("t", batch(b"a"))
        await c.converged("t", (1, 2, 3))
        await c.crash_and_fence(3)
        # Broker 3 comes back and first sees only the log's prefix from before topic t.
        c.caught_up[3] = False
        c.generation[3] += 1
        c.controller.register(3, generation=c.generation[3])
        full = c.controller.log
        c.controller.log = full[:before_topic]
        manager = await c.start(3)
        c.controller.log = full
        manager.run_job("gauges")
        assert [tp.topic_id for tp in manager.storage.partitions()] == [topic_id], \
            "a log is not deleted on metadata that is not known to be complete"
        c.controller.heartbeat(3)
        c.publish()
        c.create_topic("u", [[3]])
        assert c.leader_of("u") == 3
        refused = await c.produce("u", batch(b"x"), acks=1)
        assert refused.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, refused
        assert "catching up" in refused.error_message
        c.caught_up[3] = True
        assert (await c.produce("u", batch(b"x"), acks=1)).error_code == ErrorCode.NONE
        manager.run_job("gauges")
        assert manager.partition(topic_id, 0) is not None, "t is alive: a follower here again"
    scenario(tmp_path, body)


def test_retention_job_deletes_old_data_on_leader_and_followers(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2]], {"retention.ms": "60000"})
        for i in range(3):
            await c.produce("t", batch(b"old-%d" % i, timestamp_ms=1_000))
        await c.converged("t", (1, 2))
        for broker in (1, 2):
            c.managers[broker].run_job("retention")
        request = pb.ListOffsetsRequest()
        request.topics.add(name="t").partitions.add(partition_id=0, timestamp=-2)
        earliest = await handle_list_offsets(c.managers[1], request)
        assert earliest.topics[0].partitions[0].offset == 3
        assert (await c.produce("t", batch(b"new"))).base_offset == 3
        got = await c.fetch("t", 3)
        assert values(list(got.batches)) == [b"new"]
        registry = c.registries[1]
        assert (registry.get_sample_value("tidelog_broker_retention_bytes_deleted_total") or 0) > 0
    scenario(tmp_path, body)


def test_metrics(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]])
        await c.produce("t", batch(b"a", b"b"))
        await c.fetch("t", 0)
        c.network.cut = {3}
        await c.produce("t", batch(b"c"), acks=1)
        await until(lambda: c.leo(2, "t") == 3, "follower 2 caught up")
        c.managers[1].run_job("gauges")
        registry = c.registries[1]

        def sample(name: str, **labels: str) -> float:
            value = registry.get_sample_value(f"tidelog_broker_{name}", labels)
            assert value is not None, name
            return value

        assert sample("bytes_in_total", topic="t") > 0
        assert sample("messages_in_total", topic="t") == 3
        assert sample("messages_out_total", topic="t") == 2
        assert sample("request_latency_seconds_count", api="produce", outcome="ok") == 2
        assert sample("leader_count") == 1 and sample("partition_count") == 1
        assert sample("follower_lag_messages", topic="t", partition="0", follower="2") == 0
        assert sample("follower_lag_messages", topic="t", partition="0", follower="3") > 0
        assert sample("under_replicated_partitions") == 0, "the ISR has not shrunk yet"
        assert (c.registries[2].get_sample_value("tidelog_broker_replication_bytes_in_total",
                                                 {"topic": "t"}) or 0) > 0
    scenario(tmp_path, body)


# --- building blocks -------------------------------------------------------------------------


def test_fetch_waiters_are_bounded_and_woken_by_their_partition() -> None:
    async def body() -> None:
        waiters = FetchWaiters(waiters_max=1)
        first = waiters.watch(["a", "b"])
        assert first is not None and waiters.watch(["c"]) is None, "full: answer at once"
        assert not await waiters.wait(["c"], 1.0), "no room to wait"
        assert waiters.wake("c") == 0 and waiters.wake("b") == 1 and first.done()
        waiters.unwatch(first, ["a", "b"])
        assert len(waiters) == 0
        started = time.monotonic()
        assert not await waiters.wait(["a"], 0.05) and time.monotonic() - started >= 0.04
    asyncio.run(body())


def test_producer_id_blocks_are_prefetched() -> None:
    class Controller:
        def __init__(self) -> None:
            self.calls = 0

        async def call(self, method: str, request: Any) -> Any:
            assert method == "AllocateProducerIds"
            self.calls += 1
            start = 1000 * self.calls
            return cpb.AllocateProducerIdsResponse(producer_id_start=start, producer_id_len=10)

    async def body() -> None:
        controller = Controller()
        manager = ProducerIdManager(broker_id=1, broker_epoch=lambda: 5, controller=controller)
        ids = [await manager.next_producer_id() for _ in range(9)]
        assert ids == list(range(1000, 1009))
        await asyncio.sleep(0)  # the prefetch at 90% runs meanwhile
        assert controller.calls == 2
        ids = [await manager.next_producer_id() for _ in range(3)]
        assert ids == [1009, 2000, 2001] and controller.calls == 2
        await manager.close()
    asyncio.run(body())


# --- the follower's gRPC transport: one fetch stream per leader ---------------------------------


class _EchoPlane:
    """A data plane whose follower fetch answers with the request's replica_id (as the log end
    offset), after ``delay_s`` when the request's max_wait_ms asks for it."""

    def __init__(self) -> None:
        self.calls = 0

    def open_replica_fetch_session(self) -> Any:
        class NoSession:
            def close(self) -> None:
                pass

            def request_read(self) -> None:
                pass

            def answer_now(self) -> None:
                pass
        return NoSession()

    async def handle_replica_fetch(self, request: pb.FetchRequest,
                                   session: Any = None) -> pb.FetchResponse:
        self.calls += 1
        if request.max_wait_ms:
            await asyncio.sleep(request.max_wait_ms / 1000)
        return pb.FetchResponse(error_message=str(request.replica_id))


async def _serve(plane: _EchoPlane, *, stream: bool) -> tuple[Any, int]:
    import grpc

    from tidelog.broker.service import ReplicaService, add_replica_service

    class Runtime:
        data_plane = plane

    server = grpc.aio.server()
    if stream:
        add_replica_service(server, Runtime())  # type: ignore[arg-type]
    else:  # an older leader: ReplicaService with the unary Fetch only
        unary = ReplicaService(Runtime())  # type: ignore[arg-type]
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "tidelog.v1.ReplicaService", {"Fetch": grpc.unary_unary_rpc_method_handler(
                unary.Fetch, request_deserializer=pb.FetchRequest.FromString,
                response_serializer=pb.FetchResponse.SerializeToString)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


def test_grpc_transport_fetches_over_one_stream_and_recovers_from_a_lost_exchange() -> None:
    from tidelog.broker.fetcher import GrpcReplicaTransport
    from tidelog.errors import NetworkError

    async def body() -> None:
        plane = _EchoPlane()
        server, port = await _serve(plane, stream=True)
        transport = GrpcReplicaTransport(lambda _id: ("127.0.0.1", port))
        try:
            first_call = None
            for i in range(5):
                answer = await transport.fetch(7, pb.FetchRequest(replica_id=i), timeout_s=5)
                assert answer.error_message == str(i)
                first_call = first_call or transport._leaders[7].call
            call = transport._leaders[7].call
            assert call is not None and transport._leaders[7].stream_supported
            assert call is first_call, "the five fetches went over one stream"
            # A timed-out exchange closes the stream: its late answer is never read as the
            # answer of the next fetch.
            try:
                await transport.fetch(7, pb.FetchRequest(replica_id=100, max_wait_ms=300),
                                      timeout_s=0.05)
                raise AssertionError("expected a timeout")
            except NetworkError:
                pass
            assert transport._leaders[7].call is None
            answer = await transport.fetch(7, pb.FetchRequest(replica_id=8), timeout_s=5)
            assert answer.error_message == "8"
            # So does a cancelled one (the fetcher cancels its long-poll to re-target).
            task = asyncio.get_running_loop().create_task(transport.fetch(
                7, pb.FetchRequest(replica_id=200, max_wait_ms=300), timeout_s=5))
            await asyncio.sleep(0.05)
            task.cancel()
            try:
                await task
                raise AssertionError("expected a cancellation")
            except asyncio.CancelledError:
                pass
            answer = await transport.fetch(7, pb.FetchRequest(replica_id=9), timeout_s=5)
            assert answer.error_message == "9"
            await asyncio.sleep(0.4)  # the abandoned exchanges ended on the server
            answer = await transport.fetch(7, pb.FetchRequest(replica_id=10), timeout_s=5)
            assert answer.error_message == "10"
        finally:
            await transport.close()
            await server.stop(None)

    asyncio.run(body())


def test_grpc_transport_falls_back_to_unary_fetches_for_a_leader_without_the_stream() -> None:
    from tidelog.broker.fetcher import GrpcReplicaTransport

    async def body() -> None:
        plane = _EchoPlane()
        server, port = await _serve(plane, stream=False)
        transport = GrpcReplicaTransport(lambda _id: ("127.0.0.1", port))
        try:
            for i in range(3):
                answer = await transport.fetch(7, pb.FetchRequest(replica_id=i), timeout_s=5)
                assert answer.error_message == str(i)
            assert not transport._leaders[7].stream_supported
            assert plane.calls == 3
        finally:
            await transport.close()
            await server.stop(None)

    asyncio.run(body())
