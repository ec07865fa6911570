"""Produces the broker refuses whole, and a timer failure it counts -- on real partitions and real
RocksDB, in-process.

What it checks:

* a batch holding a record without a key, produced to a topic whose ``cleanup.policy`` contains
  ``compact``, is INVALID_RECORD naming the topic, and nothing of it is appended; keyed batches
  to that topic, and keyless ones to a ``delete`` topic, are written;
* a client's produce to the internal ``__consumer_offsets`` is INVALID_TOPIC_EXCEPTION and
  nothing is appended, while the typed ``ReplicaManager.append`` (the group coordinator's path)
  still writes to it;
* a failing node-level interval fsync run by the replica manager's timer is counted in
  ``log_flush_failures`` (and the timer keeps running).

How: the in-process cluster of tests/unit/test_replica_manager.py; the storage fault is injected
at the storage seam (``Storage.maybe_flush`` of the broker replaced by one that raises).
"""

from __future__ import annotations

import time
from pathlib import Path

from test_replica_manager import Cluster, batch, scenario, until, values

from tidelog.broker.partition_writer import TopicIdPartition
from tidelog.errors import KafkaStorageErrorError
from tidelog.metadata.topic_names import OFFSETS_TOPIC
from tidelog.record_batch import NewRecord, build_batch
from tidelog.v1.common_pb2 import ErrorCode


def keyed(*records: tuple[bytes | None, bytes]) -> bytes:
    return build_batch([NewRecord(key, value) for key, value in records],
                       now_ms=int(time.time() * 1000))


def metric(c: Cluster, broker: int, name: str) -> float:
    value = c.registries[broker].get_sample_value(name)
    return 0.0 if value is None else value


# --- compacted topics need keys ------------------------------------------------------------------


def test_a_keyless_record_to_a_compacted_topic_is_refused_and_nothing_appended(tmp_path: Path
                                                                               ) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        c.create_topic("compacted", [[1]], {"cleanup.policy": "compact"})
        c.create_topic("both", [[1]], {"cleanup.policy": "compact,delete"})
        c.create_topic("plain", [[1]])

        accepted = await c.produce("compacted", keyed((b"k1", b"v1"), (b"k2", b"v2")))
        assert (accepted.error_code, accepted.base_offset) == (ErrorCode.NONE, 0), accepted

        for topic in ("compacted", "both"):
            before = c.leo(1, topic)
            refused = await c.produce(topic, keyed((b"k3", b"v3"), (None, b"no key")))
            assert refused.error_code == ErrorCode.INVALID_RECORD, refused
            assert topic in refused.error_message and "key" in refused.error_message
            assert not refused.appended and refused.base_offset == -1
            assert c.leo(1, topic) == before, "nothing of a refused batch is appended"
            refused = await c.produce(topic, keyed((None, b"alone")), acks=1)
            assert refused.error_code == ErrorCode.INVALID_RECORD, refused
            assert c.leo(1, topic) == before

        assert values(c.log_batches(1, "compacted")) == [b"v1", b"v2"]
        plain = await c.produce("plain", keyed((None, b"no key")))
        assert (plain.error_code, plain.base_offset) == (ErrorCode.NONE, 0), \
            "a delete-only topic takes keyless records"
        assert values(c.log_batches(1, "plain")) == [b"no key"]
        assert c.registries[1].get_sample_value(
            "tidelog_broker_request_errors_total",
            {"api": "produce", "error": "INVALID_RECORD"}) == 4, "each refusal counted"
    scenario(tmp_path, body, broker_ids=(1,))


# --- internal topics ------------------------------------------------------------------------------


def test_a_client_produce_to_the_offsets_topic_is_refused(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        topic_id = c.create_topic(OFFSETS_TOPIC, [[1]])
        refused = await c.produce(OFFSETS_TOPIC, batch(b"forged"))
        assert refused.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION, refused
        assert refused.error_message == f"cannot append to internal topic {OFFSETS_TOPIC}"
        assert not refused.appended and c.leo(1, OFFSETS_TOPIC) == 0

        # The coordinator's own appends go through the typed append, not the handler.
        outcome = await c.managers[1].append(TopicIdPartition(topic_id, 0), batch(b"group"),
                                             acks=-1, timeout_ms=5_000)
        assert (outcome.error, outcome.appended, outcome.base_offset) == (None, True, 0)
        assert values(c.log_batches(1, OFFSETS_TOPIC)) == [b"group"]
    scenario(tmp_path, body, broker_ids=(1,))


# --- the timer's node flush ----------------------------------------------------------------------


def test_a_failing_timer_flush_is_counted(tmp_path: Path) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        storage = c.managers[1].storage
        calls: list[int] = []

        def maybe_flush(now_ms: int) -> bool:
            calls.append(now_ms)
            raise KafkaStorageErrorError("injected: WAL fsync failed (EIO)")
        storage.maybe_flush = maybe_flush  # type: ignore[method-assign]
        name = "tidelog_broker_log_flush_failures_total"
        await until(lambda: metric(c, 1, name) >= 2, "two timer flush failures counted")
        assert metric(c, 1, name) <= len(calls), "one count per failed flush"
    scenario(tmp_path, body, broker_ids=(1,))
