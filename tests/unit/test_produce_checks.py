"""What one produce request may cost the leader, and the order its batches are appended in
(broker/produce_checks.py).

Pure: ``plan_checks`` refuses a request past its records or uncompressed bytes, and checks
batches on the event loop while the request's inline budget lasts, in request order.

In-process (the cluster of tests/unit/test_replica_manager.py: real ControllerLogic, real
RocksDB, in-memory replication): the order guarantee the ProduceStream doc states ("appends
keep the stream's order") holds when a large batch is checked on the record-check threads and
a small one after it could be checked at once. An idempotent producer's large batch (sequence
0) then small batch (the next sequence) to one partition, in two requests served as
ProduceStream serves them (``serve_bounded``: each request in its own task, started in arrival
order), both land, in order -- appended the other way round, the second would be refused
OUT_OF_ORDER_SEQUENCE_NUMBER. Through ``start_produce`` directly: the small batch waits its
turn, while the same request's batch for another partition is appended at once. A batch that
is refused after its check still ends its turn; one whose records do not decode is refused with
nothing appended; a compacted topic's keyless record is INVALID_RECORD whether the loop or a
thread checked it; a request past the record bound is refused whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from test_replica_manager import Cluster, batch, scenario, values

from tidelog import limits
from tidelog.broker.handlers import handle_init_producer_id, handle_produce
from tidelog.broker.partition_writer import TopicIdPartition
from tidelog.broker.produce_checks import Produced, plan_checks
from tidelog.broker.stream_limits import StreamLimits, serve_bounded
from tidelog.record_batch import NewRecord, batch_crc, build_batch, parse_batch
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import CompressionType, ErrorCode

LARGE = limits.PRODUCE_INLINE_CHECK_RECORDS_MAX + 1  # records: checked off the loop


# --- plan_checks: pure -------------------------------------------------------------------------

def produced(records: int, uncompressed: int) -> Produced:
    header = parse_batch(build_batch([NewRecord(b"k", b"v")], now_ms=1))
    header.record_count, header.uncompressed_size = records, uncompressed
    return Produced(TopicIdPartition(b"t" * 16, 0), None, header, 10, False)  # type: ignore[arg-type]


def test_a_request_past_either_bound_is_refused_whole() -> None:
    within = [produced(40, 100), produced(60, 100)]
    assert plan_checks(within, records_max=100, bytes_max=200).refusal is None
    for request in ([produced(40, 100), produced(61, 100)], [produced(1, 150), produced(1, 51)]):
        plan = plan_checks(request, records_max=100, bytes_max=200)
        assert plan.refusal is not None and plan.refusal.code == ErrorCode.RECORD_LIST_TOO_LARGE
        assert "100 records and 200 bytes per request" in plan.refusal.message
        assert plan.inline == plan.threads == ()


def test_batches_are_checked_inline_while_the_requests_budget_lasts() -> None:
    a, b, c, d = produced(60, 10), produced(50, 10), produced(30, 10), produced(5, 500)
    plan = plan_checks([a, b, c, d], inline_records_max=100, inline_bytes_max=100)
    assert plan.inline == (a, c) and plan.threads == (b, d)  # in request order, first fit


# --- the order of appends, in-process ----------------------------------------------------------

async def init_producer(c: Cluster) -> tuple[int, int]:
    answer = await handle_init_producer_id(c.managers[1], pb.InitProducerIdRequest(
        producer_id=-1))
    assert answer.error_code == ErrorCode.NONE, answer
    return answer.producer_id, answer.producer_epoch


def request(topic: str, batches: dict[int, bytes], correlation_id: int = 0
            ) -> pb.ProduceRequest:
    out = pb.ProduceRequest(acks=1, timeout_ms=5_000, correlation_id=correlation_id)
    out.topics.add(name=topic, partitions=[
        pb.ProduceRequest.PartitionData(partition_id=p, batch=b) for p, b in batches.items()])
    return out


def test_a_streams_appends_keep_their_order_when_a_large_check_comes_first(
        tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3]])
        pid, epoch = await init_producer(c)
        large = batch(*[b"L"] * LARGE, producer_id=pid, producer_epoch=epoch, base_sequence=0)
        small = batch(b"s", producer_id=pid, producer_epoch=epoch, base_sequence=LARGE)

        async def stream() -> AsyncIterator[pb.ProduceRequest]:
            yield request("t", {0: large}, correlation_id=1)
            yield request("t", {0: small}, correlation_id=2)

        async def answer(r: pb.ProduceRequest) -> pb.ProduceResponse:  # as ProduceStream's
            response = await handle_produce(c.managers[1], r)
            response.correlation_id = r.correlation_id
            return response

        answers = {}
        async for response in serve_bounded(
                stream(), answer,
                StreamLimits(limits.PRODUCE_STREAM_IN_FLIGHT_MAX, limits.STREAM_HELD_BYTES_MAX),
                ordered=False):
            answers[response.correlation_id] = response.topics[0].partitions[0]
        assert answers[1].error_code == answers[2].error_code == ErrorCode.NONE, answers
        assert (answers[1].base_offset, answers[2].base_offset) == (0, LARGE)
        assert values(c.log_batches(1, "t")) == [b"L"] * LARGE + [b"s"]
    scenario(tmp_path, body)


def test_a_batch_behind_a_check_waits_its_turn_and_other_partitions_do_not(
        tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        topic_id = c.create_topic("t", [[1, 2, 3], [1, 2, 3]])
        p0, p1 = TopicIdPartition(topic_id, 0), TopicIdPartition(topic_id, 1)
        leader = c.managers[1]
        [first] = leader.start_produce([(p0, batch(*[b"L"] * LARGE))], acks=1, now_ms=0,
                                       monotonic_ms=0)
        # Refused after its check (off the loop): its turn still ends, and the next goes on.
        refused, after = leader.start_produce([(p0, corrupted(batch(*[b"x"] * LARGE))),
                                               (p0, batch(b"after"))], acks=1, now_ms=0,
                                              monotonic_ms=0)
        second, other = leader.start_produce([(p0, batch(b"s")), (p1, batch(b"o"))], acks=1,
                                             now_ms=0, monotonic_ms=0)
        assert not first.done() and not second.done(), "checked off the loop, or behind it"
        assert other.done() and other.result().outcome.base_offset == 0, "appended at once"
        await asyncio.wait((first, refused, after, second))
        assert refused.result().outcome.error.code == ErrorCode.CORRUPT_MESSAGE  # type: ignore[union-attr]
        assert [f.result().outcome.base_offset for f in (first, after, second)] == [
            0, LARGE, LARGE + 1]
        assert values(c.log_batches(1, "t")) == [b"L"] * LARGE + [b"after", b"s"]
    scenario(tmp_path, body)


def corrupted(data: bytes) -> bytes:
    """``data``'s batch with its payload cut short and a CRC that matches it again."""
    header = parse_batch(data)
    header.records = header.records[:-3]
    header.uncompressed_size = len(header.records)
    header.crc = batch_crc(header)
    out: bytes = header.SerializeToString()
    return out


def test_undecodable_and_keyless_batches_are_refused_on_either_side(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("plain", [[1, 2, 3]])
        c.create_topic("compacted", [[1, 2, 3]], {"cleanup.policy": "compact"})
        for count in (3, LARGE):  # checked on the loop, then on a check thread
            bad = await c.produce("plain", corrupted(batch(*[b"v"] * count)), acks=1)
            assert bad.error_code == ErrorCode.CORRUPT_MESSAGE and "record" in bad.error_message
            keyless = build_batch([NewRecord(b"k", b"v")] * (count - 1) + [NewRecord(None, b"v")],
                                  now_ms=1)
            answer = await c.produce("compacted", keyless, acks=1)
            assert answer.error_code == ErrorCode.INVALID_RECORD, answer
            assert f"record {count - 1} of the batch has none" in answer.error_message
        assert c.leo(1, "plain") == c.leo(1, "compacted") == 0, "nothing appended"
        assert (await c.produce("compacted", batch(*[b"v"] * LARGE), acks=1)).base_offset == 0
    scenario(tmp_path, body)


def test_a_request_past_the_record_bound_is_refused_whole_in_process(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1, 2, 3], [1, 2, 3]])
        half = limits.PRODUCE_REQUEST_RECORDS_MAX // 2 + 1
        big = build_batch([NewRecord(None, None)] * half, now_ms=1,
                          compression=CompressionType.COMPRESSION_ZSTD)
        response = await handle_produce(c.managers[1], request("t", {0: big, 1: big}))
        codes = [p.error_code for p in response.topics[0].partitions]
        assert codes == [ErrorCode.RECORD_LIST_TOO_LARGE] * 2, response
        assert c.leo(1, "t", 0) == c.leo(1, "t", 1) == 0
    scenario(tmp_path, body)
