"""The broker's heap freezer (broker/heap_freezer.py): after a metadata change that acted on many
partitions, their objects are frozen out of the collector's full passes; after one that deleted
many, the heap is unfrozen and collected once, so cycles among the deleted are not kept."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from tidelog.broker import heap_freezer
from tidelog.broker.heap_freezer import HeapFreezer
from tidelog.broker.metadata_listener import MetadataUpdate
from tidelog.metadata.delta import LocalPartition, LocalReplicaChanges
from tidelog.metadata.image import MetadataImage, PartitionRegistration


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the rest of the suite runs with a normal heap


def _update(*, leaders: int = 0, deletes: int = 0) -> MetadataUpdate:
    registration = PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=0,
                                         partition_epoch=0)

    def parts(n: int) -> tuple[LocalPartition, ...]:
        return tuple(LocalPartition("t", b"\x01" * 16, i, registration) for i in range(n))
    image = MetadataImage.empty()
    return MetadataUpdate(image, image, None,
                          LocalReplicaChanges(deletes=parts(deletes), leaders=parts(leaders),
                                              followers=()))


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_large_change_freezes_the_heap_a_small_one_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap_freezer, "FREEZE_AFTER_PARTITIONS", 3)
    freezer = HeapFreezer(1)
    freezer.on_metadata_update(_update(leaders=2), MetadataImage.empty())
    assert gc.get_freeze_count() == 0 and freezer.freezes == 0
    kept = _Cycle()
    alive = weakref.ref(kept)
    freezer.on_metadata_update(_update(leaders=3), MetadataImage.empty())
    assert freezer.freezes == 1 and gc.get_freeze_count() > 0
    # A full pass no longer looks at it: a cycle dropped now stays until an unfreeze.
    del kept
    gc.collect()
    assert alive() is not None


def test_a_large_deletion_unfreezes_and_collects_what_was_frozen(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap_freezer, "FREEZE_AFTER_PARTITIONS", 3)
    freezer = HeapFreezer(1)
    cycle = _Cycle()
    alive = weakref.ref(cycle)
    freezer.on_metadata_update(_update(leaders=3), MetadataImage.empty())
    assert gc.get_freeze_count() > 0
    del cycle  # garbage now, but frozen: only an unfreeze lets a pass find it
    freezer.on_metadata_update(_update(deletes=2), MetadataImage.empty())
    assert alive() is not None and freezer.collections == 0  # a small deletion: no pause
    freezer.on_metadata_update(_update(deletes=3), MetadataImage.empty())
    assert freezer.collections == 1 and gc.get_freeze_count() == 0
    assert alive() is None
