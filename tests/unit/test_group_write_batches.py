"""How the coordinator runtime cuts a write's records into batches (its AppendAccumulator at
``WRITE_BATCH_BYTES``, each closed batch built as the runtime's ``_append_batch`` builds it),
and the heartbeat limit that keeps a member's record inside one batch.

A batch is appended and replicated as a unit, so a write that fits one batch is atomic. What it
checks: a write of about 0.8 MiB (more than the old 512 KiB cut, less than a batch) is one batch;
a larger one is split into batches that each fit ``MESSAGE_BYTES_MAX`` (framing counted: many
small tombstones add ~7 bytes each), keeping every record in order; a heartbeat whose subscribed
topic names would not fit is INVALID_REQUEST naming the limit, before any record. Pure: no
broker.
"""

from __future__ import annotations

import random

from tidelog import limits
from tidelog.broker.group.append_accumulator import AppendAccumulator, sized
from tidelog.broker.group.coordinator import GroupCoordinatorConfig, GroupCoordinatorShard
from tidelog.broker.group.heartbeat_checks import SUBSCRIBED_TOPIC_NAMES_BYTES_MAX
from tidelog.broker.group.records import GroupRecord, decode, offset_commit_tombstone
from tidelog.broker.group.runtime import WRITE_BATCH_BYTES
from tidelog.record_batch import build_batch, decode_records, parse_batch
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode


def tombstones(count: int) -> list[GroupRecord]:
    return [offset_commit_tombstone("group-with-a-longish-name", "orders.eu.v2", p)
            for p in range(count)]


def write_batches(records: list[GroupRecord]) -> list[bytes]:
    """One write's records through a fresh open batch, as the runtime appends them."""
    accumulator = AppendAccumulator(WRITE_BATCH_BYTES)
    _, closed = accumulator.add(sized(records))
    last = accumulator.drain()
    return [build_batch(b.records, now_ms=0, max_bytes=limits.MESSAGE_BYTES_MAX)
            for b in [*closed, *([last] if last is not None else [])]]


def unbatched(batches: list[bytes]) -> list[GroupRecord]:
    return [decode(r.key or b"", r.value) for data in batches
            for r in decode_records(parse_batch(data))]


def test_a_write_under_one_batch_is_one_batch() -> None:
    records = tombstones(15_000)  # ~0.8 MiB of keys
    size = sum(len(r.encode()[0]) for r in records)
    assert 512 * 1024 < size < limits.MESSAGE_BYTES_MAX
    batches = write_batches(records)
    assert len(batches) == 1
    assert unbatched(batches) == records


def test_a_larger_write_is_split_into_batches_that_each_fit() -> None:
    records = tombstones(60_000)
    batches = write_batches(records)
    assert len(batches) > 1
    assert all(len(b) <= limits.MESSAGE_BYTES_MAX for b in batches)
    assert unbatched(batches) == records


def test_subscribed_names_too_large_for_one_record_are_invalid_request() -> None:
    shard = GroupCoordinatorShard(GroupCoordinatorConfig(), rng=random.Random(1))
    names = [f"{i:05d}".ljust(200, "t") for i in range(SUBSCRIBED_TOPIC_NAMES_BYTES_MAX // 200 + 1)]
    records, response = shard.consumer_group_heartbeat(pb.ConsumerGroupHeartbeatRequest(
        group_id="g", member_epoch=0, rebalance_timeout_ms=1000, subscribed_topic_names=names),
        now_ms=0, topics={})
    assert records == []
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert str(SUBSCRIBED_TOPIC_NAMES_BYTES_MAX) in response.error_message
