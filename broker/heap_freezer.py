"""Keeps the broker's long-lived objects out of the garbage collector's full passes.

CPython's cyclic collector stops the whole process for a full (generation 2) pass over every
tracked object. A broker's partitions are many long-lived objects (partition, replication
state, log, leader-epoch cache, producer state, config, metrics: about 22 tracked objects a
partition), and a full pass over them is a pause of the event loop: measured here, 684 ms at
30,000 hosted partitions (660,000 tracked objects), by proportion about 2 s at 100,000, during
which the broker neither heartbeats nor answers fetches. Full passes come when the objects that
survived younger passes since the last one reach a quarter of the long-lived ones: after each
large metadata change (creation, a fencing, a restart's catch-up), just when the broker is busiest.

``gc.freeze()`` moves every tracked object into a permanent generation that no pass looks at,
in O(1) (Instagram's use for a large, long-lived Python heap). :class:`HeapFreezer`, a metadata
publisher subscribed after the others, freezes the heap after each change that acted on at
least FREEZE_AFTER_PARTITIONS partitions, once their objects exist. Frozen objects are still
freed by reference counting when they are dropped; only those in reference cycles would stay
for good, so after a change that deleted that many partitions it unfreezes and collects once
(one pause, after an administrator's deletion, not at every fencing).
"""

from __future__ import annotations

import gc
import logging
import time

from tidelog.broker.metadata_listener import MetadataUpdate
from tidelog.metadata.image import MetadataImage

__all__ = ["FREEZE_AFTER_PARTITIONS", "HeapFreezer"]

log = logging.getLogger("tidelog.broker")

#: A metadata change acting on at least this many partitions freezes the heap (or, if it
#: deleted that many, unfreezes and collects).
FREEZE_AFTER_PARTITIONS = 1_000


class HeapFreezer:
    """A metadata publisher that freezes the heap after large changes (see the module doc)."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.freezes = 0
        self.collections = 0

    def on_metadata_update(self, update: MetadataUpdate, image: MetadataImage) -> None:
        changes = update.local_changes
        if len(changes.deletes) >= FREEZE_AFTER_PARTITIONS:
            started = time.monotonic()
            gc.unfreeze()
            gc.collect()
            self.collections += 1
            log.info("broker %d: %d partitions deleted: heap collected in %.0f ms",
                     self.broker_id, len(changes.deletes), (time.monotonic() - started) * 1000)
        if len(changes.leaders) + len(changes.followers) >= FREEZE_AFTER_PARTITIONS:
            gc.freeze()
            self.freezes += 1
