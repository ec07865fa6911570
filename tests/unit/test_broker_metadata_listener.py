"""The broker's metadata listener without a network.

What it checks: the pure core (``MetadataLoader``) turns FetchMetadataResponse messages into
images and this broker's local changes -- records in order, split over messages, overlapping
messages skipped, gaps refused (``MetadataGapError``) without touching the image, progress
messages, snapshots replacing the image with local changes computed against the previous one,
stale snapshots ignored, no-op records reported, error messages raised as their TidelogError, and
``local_changes_between`` agreeing with ``MetadataDelta.local_changes`` on every step of a log.
Then the stream shell (``MetadataListener``) against a fake controller client whose streams are
scripted lists of messages: publishing in order, late subscribers, ``wait_for_offset``,
re-requesting after a gap from the right offset (and leaving a controller that keeps skipping),
failing over when a stream ends, errs or falls silent, and stopping on INCONSISTENT_CLUSTER_ID.

How: records are built by hand (a broker never imports controller code), messages are the
protobufs the controller sends; the shell tests run each scenario under ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import grpc
import pytest

from tidelog.broker.metadata_listener import (
    MetadataGapError,
    MetadataListener,
    MetadataLoader,
    MetadataUpdate,
    local_changes_between,
)
from tidelog.errors import InconsistentClusterIdError, InvalidRecordError, NotControllerError
from tidelog.metadata.delta import LocalPartition, LocalReplicaChanges, MetadataDelta
from tidelog.metadata.image import MetadataImage
from tidelog.metadata.records import image_to_snapshot, metadata_record
from tidelog.v1 import common_pb2, controller_pb2, metadata_pb2
from tidelog.v1.common_pb2 import ErrorCode

CLUSTER_ID = "unit-cluster"
ORDERS = uuid.UUID(int=1).bytes
EVENTS = uuid.UUID(int=2).bytes
Record = metadata_pb2.MetadataRecord


# --- record and message builders ----------------------------------------------------------------


def register(broker_id: int, epoch: int) -> Record:
    return metadata_record(metadata_pb2.RegisterBrokerRecord(
        broker_id=broker_id, incarnation_id=uuid.UUID(int=broker_id).bytes, broker_epoch=epoch,
        endpoint=common_pb2.Endpoint(host="127.0.0.1", port=9000 + broker_id), fenced=True))


def unfence(broker_id: int, epoch: int) -> Record:
    return metadata_record(metadata_pb2.UnfenceBrokerRecord(broker_id=broker_id,
                                                            broker_epoch=epoch))


def fence(broker_id: int, epoch: int) -> Record:
    return metadata_record(metadata_pb2.FenceBrokerRecord(broker_id=broker_id,
                                                          broker_epoch=epoch))


def topic(name: str, topic_id: bytes) -> Record:
    return metadata_record(metadata_pb2.TopicRecord(name=name, topic_id=topic_id))


def partition(topic_id: bytes, partition_id: int, replicas: Sequence[int]) -> Record:
    return metadata_record(metadata_pb2.PartitionRecord(
        topic_id=topic_id, partition_id=partition_id, replicas=replicas, isr=replicas,
        leader=replicas[0], leader_epoch=0, partition_epoch=0))


def change_leader(topic_id: bytes, partition_id: int, *, leader: int, isr: Sequence[int],
                  partition_epoch: int) -> Record:
    return metadata_record(metadata_pb2.PartitionChangeRecord(
        topic_id=topic_id, partition_id=partition_id, leader=leader,
        isr=common_pb2.ReplicaList(broker_ids=isr), expected_partition_epoch=partition_epoch))


def remove_topic(topic_id: bytes) -> Record:
    return metadata_record(metadata_pb2.RemoveTopicRecord(topic_id=topic_id))


def cluster_log() -> list[Record]:
    """Offsets 0..9: three brokers registered and unfenced, topic "orders" with 3 partitions."""
    return [
        register(1, 0), register(2, 1), register(3, 2),
        unfence(1, 0), unfence(2, 1), unfence(3, 2),
        topic("orders", ORDERS),
        partition(ORDERS, 0, [1, 2, 3]),
        partition(ORDERS, 1, [2, 3, 1]),
        partition(ORDERS, 2, [3, 1, 2]),
    ]


def records_message(base_offset: int, records: Iterable[Record], *,
                    committed_offset: int | None = None,
                    batch_record_counts: list[int] | None = None
                    ) -> controller_pb2.FetchMetadataResponse:
    """A stream message; each record its own committed batch unless counts say otherwise."""
    listed = list(records)
    last = base_offset + len(listed) - 1
    return controller_pb2.FetchMetadataResponse(
        records=listed, base_offset=base_offset,
        committed_offset=last if committed_offset is None else committed_offset,
        batch_record_counts=batch_record_counts or [1] * len(listed))


def progress_message(next_offset: int, committed_offset: int
                     ) -> controller_pb2.FetchMetadataResponse:
    return controller_pb2.FetchMetadataResponse(base_offset=next_offset,
                                                committed_offset=committed_offset)


def snapshot_message(image: MetadataImage, *, cluster_id: str = CLUSTER_ID
                     ) -> controller_pb2.FetchMetadataResponse:
    return controller_pb2.FetchMetadataResponse(
        snapshot=image_to_snapshot(image, cluster_id=cluster_id), base_offset=image.offset + 1,
        committed_offset=image.offset)


def replay(image: MetadataImage, records: Sequence[Record]) -> MetadataImage:
    delta = MetadataDelta(image)
    for index, record in enumerate(records):
        assert delta.replay(record, image.offset + 1 + index) is None
    return delta.apply()


def summary(changes: LocalReplicaChanges) -> dict[str, list[tuple[str, int, int, int]]]:
    """(topic, partition, leader, leader epoch) per kind: compact to compare."""
    def rows(parts: Sequence[LocalPartition]) -> list[tuple[str, int, int, int]]:
        return [(p.topic_name, p.partition_id, p.registration.leader,
                 p.registration.leader_epoch) for p in parts]
    return {"deletes": rows(changes.deletes), "leaders": rows(changes.leaders),
            "followers": rows(changes.followers)}


def loaded(broker_id: int = 1) -> MetadataLoader:
    loader = MetadataLoader(broker_id=broker_id, cluster_id=CLUSTER_ID)
    assert loader.load(records_message(0, cluster_log())) is not None
    return loader


# --- the pure core ------------------------------------------------------------------------------


def test_records_in_order_give_the_image_and_local_changes() -> None:
    loader = MetadataLoader(broker_id=1, cluster_id=CLUSTER_ID)
    update = loader.load(records_message(0, cluster_log()))
    assert update is not None and not update.is_snapshot and update.delta is not None
    assert update.previous_image.offset == -1 and update.image.offset == 9
    assert loader.offset == 9 and loader.next_offset == 10 and loader.is_caught_up
    assert summary(update.local_changes) == {
        "deletes": [],
        "leaders": [("orders", 0, 1, 0)],
        "followers": [("orders", 1, 2, 0), ("orders", 2, 3, 0)],
    }
    registration = update.local_changes.leaders[0].registration
    assert registration.replicas == (1, 2, 3) and registration.isr == (1, 2, 3)
    assert registration.partition_epoch == 0
    assert update.image.digest() == replay(MetadataImage.empty(), cluster_log()).digest()


def test_records_split_over_messages_apply_in_order() -> None:
    log = cluster_log()
    loader = MetadataLoader(broker_id=2, cluster_id=CLUSTER_ID)
    first = loader.load(records_message(0, log[:8], committed_offset=9))
    assert first is not None and first.image.offset == 7 and not loader.is_caught_up
    assert summary(first.local_changes)["followers"] == [("orders", 0, 1, 0)]
    second = loader.load(records_message(8, log[8:]))
    assert second is not None and second.previous_image is first.image
    assert summary(second.local_changes) == {
        "deletes": [], "leaders": [("orders", 1, 2, 0)], "followers": [("orders", 2, 3, 0)]}
    assert loader.image.digest() == replay(MetadataImage.empty(), log).digest()


def test_a_gap_is_refused_and_leaves_the_image_alone() -> None:
    log = cluster_log()
    loader = MetadataLoader(broker_id=1, cluster_id=CLUSTER_ID)
    loader.load(records_message(0, log[:3]))
    before = loader.image
    with pytest.raises(MetadataGapError) as gap:
        loader.load(records_message(5, log[5:]))
    assert (gap.value.expected_offset, gap.value.base_offset) == (3, 5)
    assert loader.image is before and loader.next_offset == 3
    update = loader.load(records_message(3, log[3:]))  # re-requested from the right offset
    assert update is not None and loader.offset == 9


def test_overlapping_records_are_skipped() -> None:
    log = cluster_log()
    loader = MetadataLoader(broker_id=3, cluster_id=CLUSTER_ID)
    loader.load(records_message(0, log[:6]))
    assert loader.load(records_message(0, log[:6])) is None  # all known already
    update = loader.load(records_message(2, log[2:]))  # a new stream starting earlier
    assert update is not None and update.previous_image.offset == 5
    assert not update.ignored, "skipped records are not replayed twice"
    assert loader.image.digest() == replay(MetadataImage.empty(), log).digest()


def test_progress_messages_track_the_committed_offset() -> None:
    loader = loaded()
    assert loader.load(progress_message(10, 9)) is None and loader.is_caught_up
    assert loader.load(progress_message(10, 15)) is None
    assert loader.committed_offset == 15 and not loader.is_caught_up
    with pytest.raises(MetadataGapError):
        loader.load(progress_message(12, 15))  # the stream's cursor went past us


def test_leader_change_and_topic_deletion_reach_every_replica() -> None:
    loaders = {b: loaded(b) for b in (1, 2, 3)}
    move = change_leader(ORDERS, 0, leader=2, isr=[2, 3], partition_epoch=0)
    for broker_id, loader in loaders.items():
        update = loader.load(records_message(10, [move]))
        assert update is not None
        kind = "leaders" if broker_id == 2 else "followers"
        assert summary(update.local_changes)[kind] == [("orders", 0, 2, 1)], broker_id
    for broker_id, loader in loaders.items():
        update = loader.load(records_message(11, [remove_topic(ORDERS)]))
        assert update is not None
        changes = update.local_changes
        assert not changes.leaders and not changes.followers
        assert [(p.topic_name, p.partition_id) for p in changes.deletes] == [
            ("orders", 0), ("orders", 1), ("orders", 2)], broker_id
        # A delete carries the last registration, e.g. to know the last leader epoch.
        assert changes.deletes[0].registration.leader_epoch == 1


def test_a_record_that_does_not_apply_is_reported_and_the_offset_moves_on() -> None:
    loader = loaded()
    update = loader.load(records_message(10, [unfence(1, 0), topic("events", EVENTS)]))
    assert update is not None and len(update.ignored) == 1
    assert "offset 10" in update.ignored[0] and loader.offset == 11
    assert update.image.topics.get("events") is not None


def test_a_batch_applies_all_or_nothing_as_on_the_controllers() -> None:
    loader = loaded()
    # One committed batch: the unfence is invalid (broker 1 is not fenced), so the topic in the
    # same batch must not apply either, as the controllers' replay decided.
    update = loader.load(records_message(10, [unfence(1, 0), topic("events", EVENTS)],
                                         batch_record_counts=[2]))
    assert update is not None and len(update.ignored) == 1 and loader.offset == 11
    assert update.image.topics.get("events") is None


def test_a_stream_starting_inside_a_batch_is_a_gap() -> None:
    loader = loaded()
    with pytest.raises(MetadataGapError):
        loader.load(records_message(9, [topic("a", EVENTS), topic("b", ORDERS)],
                                    batch_record_counts=[2]))
    with pytest.raises(InvalidRecordError):
        loader.load(records_message(10, [topic("a", EVENTS)], batch_record_counts=[2]))


def test_a_snapshot_replaces_the_image_and_local_changes_compare_images() -> None:
    loader = loaded(broker_id=1)
    previous = loader.image
    # Meanwhile on the controllers: orders deleted, events created, broker 3 fenced.
    later = replay(previous, [
        remove_topic(ORDERS), topic("events", EVENTS),
        partition(EVENTS, 0, [2, 1]), partition(EVENTS, 1, [1, 3]), partition(EVENTS, 2, [2, 3]),
        fence(3, 2),
    ])
    update = loader.load(snapshot_message(later))
    assert update is not None and update.is_snapshot and update.delta is None
    assert update.image.digest() == later.digest() and loader.next_offset == later.offset + 1
    assert summary(update.local_changes) == {
        "deletes": [("orders", 0, 1, 0), ("orders", 1, 2, 0), ("orders", 2, 3, 0)],
        "leaders": [("events", 1, 1, 0)],
        "followers": [("events", 0, 2, 0)],
    }
    # The log continues right after the snapshot.
    update = loader.load(records_message(later.offset + 1, [
        change_leader(EVENTS, 0, leader=1, isr=[1], partition_epoch=0)]))
    assert update is not None and summary(update.local_changes)["leaders"] == [("events", 0, 1, 1)]


def test_a_snapshot_lists_only_partitions_that_changed() -> None:
    loader = loaded(broker_id=3)
    later = replay(loader.image, [change_leader(ORDERS, 1, leader=3, isr=[3, 1],
                                                partition_epoch=0)])
    update = loader.load(snapshot_message(later))
    assert update is not None and summary(update.local_changes) == {
        "deletes": [], "leaders": [("orders", 1, 3, 1)], "followers": []}


def test_a_snapshot_older_than_the_image_is_ignored() -> None:
    loader = MetadataLoader(broker_id=1, cluster_id=CLUSTER_ID)
    old = replay(MetadataImage.empty(), cluster_log()[:4])
    loader.load(records_message(0, cluster_log()))
    assert loader.load(snapshot_message(old)) is None
    assert loader.offset == 9


def test_a_snapshot_of_another_cluster_is_refused() -> None:
    loader = MetadataLoader(broker_id=1, cluster_id=CLUSTER_ID)
    image = replay(MetadataImage.empty(), cluster_log())
    with pytest.raises(InconsistentClusterIdError):
        loader.load(snapshot_message(image, cluster_id="another-cluster"))
    assert loader.offset == -1


def test_error_messages_raise_their_error() -> None:
    loader = loaded()
    with pytest.raises(InconsistentClusterIdError):
        loader.load(controller_pb2.FetchMetadataResponse(
            error_code=ErrorCode.INCONSISTENT_CLUSTER_ID, error_message="other cluster"))
    with pytest.raises(NotControllerError):
        loader.load(controller_pb2.FetchMetadataResponse(error_code=ErrorCode.NOT_CONTROLLER))
    assert loader.offset == 9


def test_local_changes_between_images_agree_with_the_delta() -> None:
    log = [
        *cluster_log(),
        change_leader(ORDERS, 0, leader=2, isr=[2, 3], partition_epoch=0),
        topic("events", EVENTS), partition(EVENTS, 0, [3, 2]),
        metadata_record(metadata_pb2.PartitionChangeRecord(
            topic_id=ORDERS, partition_id=2, replicas=common_pb2.ReplicaList(broker_ids=[3, 2]),
            isr=common_pb2.ReplicaList(broker_ids=[3, 2]), expected_partition_epoch=0)),
        remove_topic(ORDERS),
        topic("orders", uuid.UUID(int=3).bytes), partition(uuid.UUID(int=3).bytes, 0, [1, 2]),
    ]
    for step in (1, 3, 5):
        image = MetadataImage.empty()
        for start in range(0, len(log), step):
            delta = MetadataDelta(image)
            for index, record in enumerate(log[start : start + step]):
                assert delta.replay(record, image.offset + 1 + index) is None
            after = delta.apply()
            for broker_id in (1, 2, 3):
                assert local_changes_between(image, after, broker_id) == delta.local_changes(
                    broker_id), (step, start, broker_id)
            image = after


# --- the stream shell, against a fake controller client -----------------------------------------


class FakeCall:
    """A FetchMetadata call: scripted messages, then EOF (or a hang, or an error)."""

    def __init__(self, messages: Sequence[Any], *, then: str = "eof") -> None:
        self._messages = list(messages)
        self._then = then
        self.cancelled = False

    async def read(self) -> Any:
        await asyncio.sleep(0)
        if self._messages:
            item = self._messages.pop(0)
            if isinstance(item, Exception):
                raise item
            return item
        if self._then == "hang":
            await asyncio.sleep(3600)
        return grpc.aio.EOF

    def cancel(self) -> None:
        self.cancelled = True


class FakeClient:
    """What the listener uses of ControllerClient; each voter has a queue of scripted calls."""

    def __init__(self, scripts: dict[int, list[FakeCall]]) -> None:
        self.scripts = scripts
        self.requests: list[tuple[int, int]] = []  # (voter, from_offset)
        self.active_id: int | None = None
        self.voter_ids = sorted(scripts)

    def preferred_voter(self) -> int:
        return self.active_id if self.active_id is not None else self.voter_ids[0]

    def next_voter(self, after: int, *, avoid: Any = frozenset()) -> int:
        return self.voter_ids[(self.voter_ids.index(after) + 1) % len(self.voter_ids)]

    def forget_active(self, voter_id: int, *, why: str) -> None:
        if self.active_id == voter_id:
            self.active_id = None

    def stub(self, voter_id: int) -> Any:
        client = self

        class Stub:
            def FetchMetadata(self, request: controller_pb2.FetchMetadataRequest) -> FakeCall:
                assert request.cluster_id == CLUSTER_ID and request.broker_id == 1
                client.requests.append((voter_id, request.from_offset))
                calls = client.scripts[voter_id]
                return calls.pop(0) if calls else FakeCall([], then="hang")

        return Stub()


class Recorder:
    def __init__(self) -> None:
        self.updates: list[MetadataUpdate] = []

    async def on_metadata_update(self, update: MetadataUpdate, image: MetadataImage) -> None:
        assert image is update.image
        await asyncio.sleep(0)
        self.updates.append(update)


def listener_for(client: FakeClient, *publishers: Recorder) -> MetadataListener:
    return MetadataListener(broker_id=1, cluster_id=CLUSTER_ID, client=client,  # type: ignore[arg-type]
                            publishers=publishers, idle_timeout_ms=500)


def test_caught_up_once_it_stays_so_while_later_batches_are_applied() -> None:
    # The broker serves (follower fetches, produce) once its metadata first caught up; its
    # publishers apply each later batch while the controller already reports it committed,
    # and that moment is not "behind" (under a burst of batches it was, for seconds).
    log = cluster_log()
    client = FakeClient({1: [FakeCall([records_message(0, log[:4], committed_offset=5),
                                       records_message(4, log[4:6]), progress_message(6, 9),
                                       records_message(6, log[6:])], then="hang")]})
    seen: list[tuple[int, bool, bool]] = []

    class Watcher(Recorder):
        async def on_metadata_update(self, update: MetadataUpdate, image: MetadataImage) -> None:
            seen.append((update.image.offset, listener.is_caught_up, listener.has_caught_up))
            await super().on_metadata_update(update, image)

    async def scenario() -> None:
        await listener.start()
        try:
            assert await listener.wait_for_offset(9, 2_000)
            assert listener.is_caught_up and listener.has_caught_up
        finally:
            await listener.stop()

    listener = listener_for(client, Watcher())
    asyncio.run(scenario())
    # Offset 3 applied while 5 was committed: not caught up yet. Offset 5 caught up; applying
    # 9 while 9 is committed, it is not "caught up" now but has been.
    assert seen == [(3, False, False), (5, False, False), (9, False, True)]


def test_the_listener_publishes_in_order_and_waits_for_offsets() -> None:
    log = cluster_log()
    client = FakeClient({1: [FakeCall([records_message(0, log[:4]), progress_message(4, 9),
                                       records_message(4, log[4:])], then="hang")]})
    recorder = Recorder()

    async def scenario() -> None:
        listener = listener_for(client, recorder)
        await listener.start()
        try:
            assert await listener.wait_for_offset(9, 2_000)
            assert listener.offset == 9 and listener.is_caught_up
            assert [u.image.offset for u in recorder.updates] == [3, 9]
            assert recorder.updates[1].previous_image is recorder.updates[0].image
            late = Recorder()
            await listener.subscribe(late)  # gets everything so far as one update
            assert len(late.updates) == 1 and late.updates[0].is_snapshot
            assert summary(late.updates[0].local_changes)["leaders"] == [("orders", 0, 1, 0)]
            assert not await listener.wait_for_offset(10, 50)
        finally:
            await listener.stop()

    asyncio.run(scenario())
    assert client.requests == [(1, 0)]


def test_the_listener_re_requests_after_a_gap_and_fails_over_when_a_stream_ends() -> None:
    log = cluster_log()
    client = FakeClient({
        1: [FakeCall([records_message(0, log[:3]), records_message(5, log[5:])]),
            FakeCall([records_message(3, log[3:6])])],  # then EOF: go to voter 2
        2: [FakeCall([records_message(6, log[6:])], then="hang")],
    })
    recorder = Recorder()

    async def scenario() -> None:
        listener = listener_for(client, recorder)
        await listener.start()
        try:
            assert await listener.wait_for_offset(9, 5_000)
            assert listener.stats.gaps == 1
        finally:
            await listener.stop()

    asyncio.run(scenario())
    assert client.requests == [(1, 0), (1, 3), (2, 6)]
    assert [u.image.offset for u in recorder.updates] == [2, 5, 9]


def test_the_listener_leaves_a_controller_that_keeps_skipping_offsets() -> None:
    log = cluster_log()
    client = FakeClient({
        1: [FakeCall([records_message(5, log[5:])]) for _ in range(3)],
        2: [FakeCall([records_message(0, log)], then="hang")],
    })

    async def scenario() -> None:
        listener = listener_for(client)
        await listener.start()
        try:
            assert await listener.wait_for_offset(9, 5_000)
            assert listener.stats.gaps == 3
        finally:
            await listener.stop()

    asyncio.run(scenario())
    assert client.requests == [(1, 0), (1, 0), (1, 0), (2, 0)]


def test_the_listener_fails_over_on_a_transport_error_and_on_silence() -> None:
    log = cluster_log()
    error = grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(),
                                 grpc.aio.Metadata(), details="connection reset")
    client = FakeClient({
        1: [FakeCall([records_message(0, log[:2]), error])],
        2: [FakeCall([records_message(2, log[2:4])], then="hang")],  # silent: idle timeout
        3: [FakeCall([records_message(4, log[4:])], then="hang")],
    })

    async def scenario() -> None:
        listener = listener_for(client)
        await listener.start()
        try:
            assert await listener.wait_for_offset(9, 5_000)
        finally:
            await listener.stop()

    asyncio.run(scenario())
    assert client.requests == [(1, 0), (2, 2), (3, 4)]


def test_the_listener_stops_on_another_cluster_id() -> None:
    client = FakeClient({1: [FakeCall([controller_pb2.FetchMetadataResponse(
        error_code=ErrorCode.INCONSISTENT_CLUSTER_ID, error_message="cluster x, not y")])]})
    fatal: list[Exception] = []

    async def scenario() -> None:
        listener = MetadataListener(broker_id=1, cluster_id=CLUSTER_ID,
                                    client=client, on_fatal=fatal.append)  # type: ignore[arg-type]
        await listener.start()
        try:
            with pytest.raises(InconsistentClusterIdError):
                await listener.wait_for_offset(0, 2_000)
            assert isinstance(listener.failure, InconsistentClusterIdError)
        finally:
            await listener.stop()

    asyncio.run(scenario())
    assert len(fatal) == 1 and client.requests == [(1, 0)]
