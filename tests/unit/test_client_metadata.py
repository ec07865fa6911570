"""The client's cluster view and its pure helpers: snapshots, leader hints, backoff, bootstrap.

Builds MetadataResponses by hand and checks what the snapshot answers (leaders only for brokers
whose address is known, partition counts, available partitions), that a leader hint moves a
leader only when its epoch is newer, that backoff grows exponentially within its jitter and cap,
and that bootstrap strings parse (ports, IPv6, defaults) or fail with ValueError at construction.
"""

from __future__ import annotations

import random

import pytest

from tidelog.client._metadata import Backoff, ClusterSnapshot
from tidelog.client.bootstrap import parse_bootstrap
from tidelog.client.records import TopicPartition
from tidelog.errors import ErrorCode
from tidelog.v1 import broker_pb2, common_pb2


def response() -> broker_pb2.MetadataResponse:
    resp = broker_pb2.MetadataResponse(cluster_id="c1", controller_id=1, metadata_offset=9)
    resp.brokers.add(broker_id=1, endpoint=common_pb2.Endpoint(host="h1", port=1))
    resp.brokers.add(broker_id=2, endpoint=common_pb2.Endpoint(host="h2", port=2))
    t = resp.topics.add(name="t", topic_id=b"\x01" * 16)
    t.partitions.add(partition_id=1, leader=2, leader_epoch=4, replicas=[2, 1], isr=[2])
    t.partitions.add(partition_id=0, leader=1, leader_epoch=3, replicas=[1, 2], isr=[1, 2])
    t.partitions.add(partition_id=2, leader=9, leader_epoch=1)  # leader not among brokers
    resp.topics.add(name="gone", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return resp


def snapshot() -> ClusterSnapshot:
    return ClusterSnapshot.from_response(response(), now_ms=0, previous=None, all_topics=True)


def test_snapshot_answers_leaders_counts_and_availability() -> None:
    snap = snapshot()
    assert snap.leader_of(TopicPartition("t", 0)) == 1
    assert snap.leader_of(TopicPartition("t", 1)) == 2
    assert snap.leader_of(TopicPartition("t", 2)) is None  # no address for broker 9
    assert snap.leader_of(TopicPartition("t", 3)) is None
    assert snap.address_of(2) == "h2:2"
    assert snap.num_partitions("t") == 3 and snap.num_partitions("gone") is None
    assert snap.available_partitions("t") == [0, 1]
    assert snap.partition(TopicPartition("t", 0)).isr == (1, 2)  # type: ignore[union-attr]


def test_a_partial_response_keeps_other_topics() -> None:
    snap = snapshot()
    resp = broker_pb2.MetadataResponse(cluster_id="c1")
    resp.brokers.add(broker_id=1, endpoint=common_pb2.Endpoint(host="h1", port=1))
    resp.topics.add(name="u").partitions.add(partition_id=0, leader=1)
    merged = ClusterSnapshot.from_response(resp, now_ms=5, previous=snap, all_topics=False)
    assert set(merged.topics) == {"t", "gone", "u"}
    replaced = ClusterSnapshot.from_response(resp, now_ms=5, previous=snap, all_topics=True)
    assert set(replaced.topics) == {"u"}


def test_leader_hint_applies_only_when_newer() -> None:
    snap = snapshot()
    tp = TopicPartition("t", 0)
    assert snap.leader_of(tp) == 1  # remembered by this snapshot, not by the ones made from it
    stale = common_pb2.LeaderHint(leader_id=2, leader_epoch=3)
    assert snap.with_leader_hint(tp, stale) is snap
    newer = common_pb2.LeaderHint(leader_id=2, leader_epoch=5)
    moved = snap.with_leader_hint(tp, newer)
    assert moved.leader_of(tp) == 2 and moved.leader_epoch(tp) == 5
    assert snap.leader_of(tp) == 1  # snapshots are immutable


def test_leader_hint_to_a_new_broker_needs_its_endpoint() -> None:
    snap = snapshot()
    tp = TopicPartition("t", 1)
    no_address = common_pb2.LeaderHint(leader_id=7, leader_epoch=9)
    assert snap.with_leader_hint(tp, no_address) is snap
    with_address = common_pb2.LeaderHint(
        leader_id=7, leader_epoch=9, endpoint=common_pb2.Endpoint(host="h7", port=7))
    moved = snap.with_leader_hint(tp, with_address)
    assert moved.leader_of(tp) == 7 and moved.address_of(7) == "h7:7"


def test_backoff_grows_exponentially_within_jitter_and_cap() -> None:
    backoff = Backoff(100, 1_000)
    rng = random.Random(0)
    assert backoff.delay_ms(0, rng) == 0
    for attempts, base in ((1, 100), (2, 200), (3, 400), (4, 800), (5, 1_000), (40, 1_000)):
        for _ in range(20):
            assert base * 0.8 <= backoff.delay_ms(attempts, rng) <= base * 1.2


@pytest.mark.parametrize(
    ("servers", "expected"),
    [
        ("a:1,b:2", ["a:1", "b:2"]),
        (" a:1 , a:1 ,", ["a:1"]),
        (["h"], ["h:9092"]),
        ("[::1]:7,[::1]", ["[::1]:7", "[::1]:9092"]),
    ],
)
def test_bootstrap_parses(servers: str | list[str], expected: list[str]) -> None:
    assert parse_bootstrap(servers) == expected


@pytest.mark.parametrize("servers", ["", " , ", "a:b", "a:0", "a:70000", "::1:9", "[::1", ":9"])
def test_bad_bootstrap_is_refused_at_once(servers: str) -> None:
    with pytest.raises(ValueError):
        parse_bootstrap(servers)
