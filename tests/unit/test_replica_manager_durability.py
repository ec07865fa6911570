"""The data plane after the append: failures answered as appended, fsync on every replica, and
idempotent sequences that wrap at int32 max -- on real partitions and real RocksDB, in-process.

What it checks:

* a topic flush (``flush.messages=1``) that fails after the batch is in the leader's log is
  answered KAFKA_STORAGE_ERROR with ``appended=true`` and the batch's offsets (never an error
  that lets an idempotent producer re-sequence it), a retry of the batch is not written again,
  and the producer that bumps its epoch instead of resending it leaves the record in the log
  once; the failure is counted in ``log_flush_failures``;
* a follower of a ``flush.messages=1`` topic fsyncs what it fetched before it fetches again, so
  every offset an acks=all produce was acknowledged for is on disk on the follower;
* sequences wrap as Kafka's do: a batch that continues at 0 after SEQUENCE_MAX, and one whose
  sequences run across SEQUENCE_MAX inside it, are accepted by the leader (and replicated), a
  retry across the wrap is answered with the original offset, and a gap across it is
  OUT_OF_ORDER_SEQUENCE_NUMBER.

How: the in-process cluster of tests/unit/test_replica_manager.py. Storage faults are injected at
the storage seam (``Storage.flush`` of one broker replaced by one that raises, or wrapped to
record the LEO at each real fsync); the RocksDB underneath stays real. Producer states near the
wrap are written into a stopped broker's storage, as the restart test does.
"""

from __future__ import annotations

from pathlib import Path

from test_replica_manager import Cluster, batch, scenario, values

from tidelog.broker.handlers import handle_init_producer_id
from tidelog.broker.replication import BatchHeader, ProducerStateTable
from tidelog.broker.replication.producer_state import SEQUENCE_MAX
from tidelog.broker.storage import Storage
from tidelog.errors import KafkaStorageErrorError
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode


async def init_producer(c: Cluster, broker: int, producer_id: int = -1,
                        producer_epoch: int = -1) -> tuple[int, int]:
    answer = await handle_init_producer_id(c.managers[broker],
        pb.InitProducerIdRequest(producer_id=producer_id, producer_epoch=producer_epoch))
    assert answer.error_code == ErrorCode.NONE, answer
    return answer.producer_id, answer.producer_epoch


def metric(c: Cluster, broker: int, name: str) -> float:
    value = c.registries[broker].get_sample_value(name)
    return 0.0 if value is None else value


# --- a failure after the append ------------------------------------------------------------------


def test_a_flush_failing_after_the_append_is_answered_as_appended(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1]], {"flush.messages": "1"})
        storage = c.managers[1].storage
        real_flush = storage.flush
        failing = [True]

        def flush() -> None:
            if failing[0]:
                raise KafkaStorageErrorError("injected: WAL fsync failed (EIO)")
            real_flush()
        storage.flush = flush  # type: ignore[method-assign]
        pid, epoch = await init_producer(c, 1)
        once = batch(b"once", producer_id=pid, producer_epoch=epoch, base_sequence=0)

        answer = await c.produce("t", once, acks=-1)
        assert answer.error_code == ErrorCode.KAFKA_STORAGE_ERROR, answer
        assert answer.appended, "in the log: a producer must not re-sequence it"
        assert answer.base_offset == 0, "the offsets are known and given"
        assert c.leo(1, "t") == 1
        assert metric(c, 1, "tidelog_broker_log_flush_failures_total") == 1

        retry = await c.produce("t", once, acks=1)
        assert (retry.error_code, retry.appended) == (ErrorCode.KAFKA_STORAGE_ERROR, True), \
            "a retry is not answered 'written' while the flush it is owed still fails"
        assert c.leo(1, "t") == 1, "and it is not written again"

        # What tidelog/client/_sender.py does with an appended batch it gives up on: it never
        # resends it under the new epoch, it goes on at sequence 0 with the next records.
        failing[0] = False
        _, new_epoch = await init_producer(c, 1, pid, epoch)
        assert new_epoch == epoch + 1
        after = await c.produce("t", batch(b"next", producer_id=pid, producer_epoch=new_epoch,
                                           base_sequence=0), acks=-1)
        assert (after.error_code, after.base_offset, after.appended) == (ErrorCode.NONE, 1, False)
        assert values(c.log_batches(1, "t")) == [b"once", b"next"], "each record once"
        assert metric(c, 1, "tidelog_broker_log_flushes_total") >= 1
    scenario(tmp_path, body, broker_ids=(1,))


def test_a_retry_answered_after_the_flush_recovers_is_written_once(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("t", [[1]], {"flush.messages": "1"})
        storage = c.managers[1].storage
        real_flush = storage.flush
        calls: list[bool] = []

        def flush_failing_once() -> None:
            calls.append(True)
            if len(calls) == 1:
                raise KafkaStorageErrorError("injected: WAL fsync failed (EIO)")
            real_flush()
        storage.flush = flush_failing_once  # type: ignore[method-assign]
        pid, epoch = await init_producer(c, 1)
        once = batch(b"once", producer_id=pid, producer_epoch=epoch, base_sequence=0)
        first = await c.produce("t", once, acks=-1)
        assert (first.error_code, first.appended) == (ErrorCode.KAFKA_STORAGE_ERROR, True)
        # The producer retries it unchanged (KAFKA_STORAGE_ERROR is retriable): the flush it
        # was owed happens now, and the answer is the original offset.
        retry = await c.produce("t", once, acks=-1)
        assert (retry.error_code, retry.base_offset) == (ErrorCode.NONE, 0), retry
        assert len(calls) == 2, "the owed flush was made before answering"
        assert values(c.log_batches(1, "t")) == [b"once"]
    scenario(tmp_path, body, broker_ids=(1,))


# --- fsync on followers --------------------------------------------------------------------------


def test_a_follower_fsyncs_its_appends_under_flush_messages_1(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        topic_id = c.create_topic("t", [[1, 2]], {"flush.messages": "1"})
        follower = c.managers[2]
        partition = follower.partition(topic_id, 0)
        assert partition is not None and not partition.state.is_leader
        storage = follower.storage
        real_flush = storage.flush
        flushed_through: list[int] = []  # the follower's LEO at each of its real fsyncs

        def recording_flush() -> None:
            real_flush()
            flushed_through.append(partition.log.log_end_offset)
        storage.flush = recording_flush  # type: ignore[method-assign]
        for i in range(5):
            answer = await c.produce("t", batch(b"v%d" % i), acks=-1)
            assert answer.error_code == ErrorCode.NONE, answer
            # acks=all answered: the follower reported LEO > i in a fetch after it had it,
            # and it fsyncs before that fetch.
            assert flushed_through and max(flushed_through) >= i + 1, \
                (i, flushed_through, "acknowledged, not on the follower's disk")
        await c.converged("t", (1, 2))
        assert max(flushed_through) == c.leo(2, "t") == 5
        assert metric(c, 2, "tidelog_broker_log_flushes_total") >= 1
    scenario(tmp_path, body, broker_ids=(1, 2))


# --- sequences wrap at int32 max -----------------------------------------------------------------


def test_sequences_wrap_at_int32_max_through_the_leader(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        topic_id = c.create_topic("t", [[1, 2]])
        (a, a_epoch), (b, b_epoch) = await init_producer(c, 1), await init_producer(c, 1)
        for pid, epoch, value in ((a, a_epoch, b"a0"), (b, b_epoch, b"b0")):
            answer = await c.produce("t", batch(value, producer_id=pid, producer_epoch=epoch,
                                                base_sequence=0))
            assert answer.error_code == ErrorCode.NONE, answer
        await c.converged("t", (1, 2))
        # Two billion records later (as far as the leader's producer state knows): producer a's
        # batch at offset 0 had sequence SEQUENCE_MAX - 3, producer b's at 1 SEQUENCE_MAX - 2.
        await c.stop(1)
        table = ProducerStateTable()
        table.on_append(BatchHeader(a, a_epoch, SEQUENCE_MAX - 3, 1, 0, 0))
        table.on_append(BatchHeader(b, b_epoch, SEQUENCE_MAX - 2, 1, 1, 0))
        with Storage.open(c.data_dir(1), cluster_id="test-cluster", node_id=1) as storage:
            storage.log(topic_id, 0).put_producer_state(table.encode())
        await c.start(1)

        async def send(pid: int, epoch: int, sequence: int, *vals: bytes
                       ) -> pb.ProduceResponse.PartitionResponse:
            return await c.produce("t", batch(*vals, producer_id=pid, producer_epoch=epoch,
                                              base_sequence=sequence))

        # a: a batch ends at SEQUENCE_MAX; the next starts at 0.
        ends = await send(a, a_epoch, SEQUENCE_MAX - 2, b"a1", b"a2", b"a3")
        assert (ends.error_code, ends.base_offset) == (ErrorCode.NONE, 2), ends
        starts = await send(a, a_epoch, 0, b"a4")
        assert (starts.error_code, starts.base_offset) == (ErrorCode.NONE, 5), starts
        again = await send(a, a_epoch, 0, b"a4")
        assert (again.error_code, again.base_offset) == (ErrorCode.NONE, 5), "duplicate"
        gap = await send(a, a_epoch, 2, b"a5")
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, gap

        # b: one batch's sequences run across the wrap (SEQUENCE_MAX - 1, SEQUENCE_MAX, 0).
        across = await send(b, b_epoch, SEQUENCE_MAX - 1, b"b1", b"b2", b"b3")
        assert (across.error_code, across.base_offset) == (ErrorCode.NONE, 6), across
        retry = await send(b, b_epoch, SEQUENCE_MAX - 1, b"b1", b"b2", b"b3")
        assert (retry.error_code, retry.base_offset) == (ErrorCode.NONE, 6), "duplicate"
        gap = await send(b, b_epoch, 2, b"b5")
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, gap
        follows = await send(b, b_epoch, 1, b"b4")
        assert (follows.error_code, follows.base_offset) == (ErrorCode.NONE, 9), follows

        await c.converged("t", (1, 2))
        assert values(c.log_batches(2, "t")) == [b"a0", b"b0", b"a1", b"a2", b"a3", b"a4",
                                                 b"b1", b"b2", b"b3", b"b4"]
    scenario(tmp_path, body, broker_ids=(1, 2))


# --- flush.ms is a duration ----------------------------------------------------------------------


def test_flush_ms_is_measured_on_the_monotonic_clock(tmp_path: Path) -> None:
    """A wall-clock step must neither force nor postpone a topic's flush.ms fsync: the age of
    the oldest unflushed append is measured with the clock the core runs on, not with the
    append's wall-clock timestamp."""
    async def body(c: Cluster) -> None:
        await c.start_all()
        topic_id = c.create_topic("t", [[1]], {"flush.ms": "1000"})
        partition = c.managers[1].partition(topic_id, 0)
        assert partition is not None
        storage = c.managers[1].storage
        real_flush = storage.flush
        flushes: list[int] = []

        def counting_flush() -> None:
            real_flush()
            flushes.append(1)
        storage.flush = counting_flush  # type: ignore[method-assign]
        wall_ms, monotonic_ms = 4_000_000_000_000, 5_000  # the wall clock far ahead
        partition.append_as_leader(batch(b"x"), acks=1, now_ms=wall_ms, monotonic_ms=monotonic_ms)
        partition.maybe_flush(monotonic_ms + 999)
        assert not flushes, "flush.ms has not passed on the monotonic clock"
        partition.maybe_flush(monotonic_ms + 1000)
        assert flushes == [1], "flush.ms passed: the append is fsynced"
    scenario(tmp_path, body, broker_ids=(1,))
