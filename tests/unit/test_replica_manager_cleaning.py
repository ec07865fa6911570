"""The broker's log cleaner job (ReplicaManager.clean_logs) with a poisoned compacted partition.

A batch whose records do not decode, stored before the leader checked records at produce (put
here straight into storage, as an older broker stored it), failed every cleaner pass over its
partition; the cleaner picks the partition most in need first, so that one partition stopped
compaction for the whole broker. What must hold: the pass over it fails once, the partition is
marked uncleanable (one ERROR line naming it, ``log_cleaner_uncleanable_partitions`` = 1), and
the next pass cleans the other compacted partition; the poisoned one is never tried again while
the broker runs, and it is still served as stored.

How: the in-process cluster of tests/unit/test_replica_manager.py, one broker, real RocksDB;
passes are awaited through ``clean_logs`` (the timer starts the same coroutine), their decoding on
the broker's cleaner thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from test_replica_manager import Cluster, scenario

from tidelog.broker.partition_writer import TopicIdPartition
from tidelog.record_batch import (
    NewRecord,
    batch_crc,
    build_batch,
    parse_batch,
    validate_header,
)
from tidelog.v1.common_pb2 import ErrorCode

#: Every batch rolls a segment (segment.ms), every pass is due (ratio), the poisoned topic is
#: overdue (max.compaction.lag.ms) so that it is chosen first.
COMPACTED = {"cleanup.policy": "compact", "segment.ms": "1", "min.cleanable.dirty.ratio": "0.01"}


def keyed(*pairs: tuple[bytes, bytes]) -> bytes:
    return build_batch([NewRecord(k, v) for k, v in pairs], now_ms=int(time.time() * 1000))


def poisoned() -> bytes:
    """A batch with a valid header and CRC over records that do not decode."""
    batch = parse_batch(keyed((b"a", b"1"), (b"b", b"2")))
    batch.records = batch.records[:-2]
    batch.uncompressed_size = len(batch.records)
    batch.crc = batch_crc(batch)
    data: bytes = batch.SerializeToString()
    return data


def test_a_poisoned_partition_is_skipped_and_the_others_are_cleaned(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def body(c: Cluster) -> None:
        await c.start_all()
        manager = c.managers[1]
        bad_id = c.create_topic("old", [[1]], {**COMPACTED, "max.compaction.lag.ms": "1"})
        c.create_topic("good", [[1]], COMPACTED)
        bad = manager.partition(bad_id, 0)
        assert bad is not None
        for topic in ("old", "good"):
            for value in (b"1", b"2", b"3"):
                await asyncio.sleep(0.005)  # segment.ms: each batch in its own segment
                answer = await c.produce(topic, keyed((b"k", value)), acks=1)
                assert answer.error_code == ErrorCode.NONE, answer
        # As an older broker stored it: straight into storage, then committed like the rest.
        bad.log.append_as_leader(validate_header(poisoned()), leader_epoch=bad.state.leader_epoch,
                                 now_ms=int(time.time() * 1000))
        await asyncio.sleep(0.005)
        assert (await c.produce("old", keyed((b"k", b"4")), acks=1)).error_code == ErrorCode.NONE
        await c.produce("good", keyed((b"z", b"z")), acks=1)  # rolls good's last keyed segment
        caplog.set_level(logging.ERROR, logger="tidelog.broker.replica_manager")

        assert await manager.clean_logs() is None, "the poisoned partition's pass fails"
        stats = await manager.clean_logs()
        assert stats is not None and stats.records_removed == 2, "the other is cleaned"
        assert await manager.clean_logs() is None, "and nothing else is tried"
        lines = [r.getMessage() for r in caplog.records
                 if "skipped by the log cleaner" in r.getMessage()]
        assert len(lines) == 1 and "old-0" in lines[0] and "does not decode" in lines[0], lines
        gauge = c.registries[1].get_sample_value(
            "tidelog_broker_log_cleaner_uncleanable_partitions")
        assert gauge == 1
        # Still served as stored (consumers meet the bad batch as they did).
        read = manager.read(TopicIdPartition(bad_id, 0), 0, 1 << 20)
        assert len(read.batches) == 5
    scenario(tmp_path, body, broker_ids=(1,))
