"""The brokers' part of a metadata delta (ClusterImage's), and the producer-id counter's.

:class:`ClusterDelta` replays RegisterBroker, UnregisterBroker, FenceBroker, UnfenceBroker and
BrokerRegistrationChange records; :class:`ProducerIdsDelta` ProducerIds records. Both check each
record's preconditions again at replay (DESIGN §6), and change their tables only through the
batch's undo journal.
"""

from __future__ import annotations

from dataclasses import replace

from tidelog.metadata.delta_journal import UndoJournal, overlaid, require
from tidelog.metadata.image import (
    CREDENTIAL_VERIFIER_BYTES,
    TOPIC_ID_BYTES,
    BrokerRegistration,
    ClusterImage,
    ProducerIdsImage,
    frozen_mapping,
)
from tidelog.v1 import metadata_pb2

__all__ = ["PORT_MAX", "ClusterDelta", "ProducerIdsDelta"]

PORT_MAX = 65535


class ClusterDelta:
    """Broker registrations changed by replayed records (None: unregistered)."""

    def __init__(self, image: ClusterImage, journal: UndoJournal, *,
                 from_snapshot: bool) -> None:
        self._image = image
        self._journal = journal
        self._from_snapshot = from_snapshot
        self._brokers: dict[int, BrokerRegistration | None] = {}

    def __bool__(self) -> bool:
        return bool(self._brokers)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self._image.broker(broker_id)

    def registered(self, broker_id: int, broker_epoch: int) -> BrokerRegistration:
        """The broker's registration, refusing the record unless it is of ``broker_epoch``."""
        registration = self.broker(broker_id)
        require(registration is not None, f"broker {broker_id} is not registered")
        assert registration is not None
        require(
            registration.broker_epoch == broker_epoch,
            lambda: f"broker {broker_id} epoch {broker_epoch} is stale "
            f"(registered with {registration.broker_epoch})",
        )
        return registration

    def is_active(self, broker_id: int) -> bool:
        registration = self.broker(broker_id)
        return registration is not None and registration.is_active

    # --- replay ----------------------------------------------------------------------------

    def replay_register_broker(self, r: metadata_pb2.RegisterBrokerRecord, offset: int) -> None:
        require(r.broker_id >= 0, f"broker id {r.broker_id} is negative")
        require(len(r.incarnation_id) == TOPIC_ID_BYTES, "incarnation id is not 16 bytes")
        require(0 < r.endpoint.port <= PORT_MAX and bool(r.endpoint.host), "invalid endpoint")
        inter = r.inter_broker_endpoint
        require(not r.HasField("inter_broker_endpoint")
                or (0 < inter.port <= PORT_MAX and bool(inter.host)),
                "invalid inter-broker endpoint")
        require(len(r.credential_verifier) in (0, CREDENTIAL_VERIFIER_BYTES),
                f"broker {r.broker_id}: a credential verifier of {len(r.credential_verifier)} "
                f"bytes")
        if self._from_snapshot:
            require(0 <= r.broker_epoch <= offset, f"broker epoch {r.broker_epoch} > {offset}")
        else:
            require(
                r.broker_epoch == offset,
                f"broker {r.broker_id} epoch {r.broker_epoch} is not the record's offset {offset}",
            )
        existing = self.broker(r.broker_id)
        require(
            existing is None or existing.broker_epoch < r.broker_epoch,
            f"broker {r.broker_id} is registered with a newer epoch",
        )
        self._journal.set(self._brokers, r.broker_id, BrokerRegistration(
            broker_id=r.broker_id, incarnation_id=r.incarnation_id, broker_epoch=r.broker_epoch,
            host=r.endpoint.host, port=r.endpoint.port, rack=r.rack, fenced=r.fenced,
            inter_broker_host=inter.host, inter_broker_port=inter.port,
            credential_verifier=r.credential_verifier,
        ))

    def replay_unregister_broker(self, r: metadata_pb2.UnregisterBrokerRecord, _: int) -> None:
        self.registered(r.broker_id, r.broker_epoch)
        self._journal.set(self._brokers, r.broker_id, None)

    def replay_fence_broker(self, r: metadata_pb2.FenceBrokerRecord, _: int) -> None:
        registration = self.registered(r.broker_id, r.broker_epoch)
        require(not registration.fenced, f"broker {r.broker_id} is already fenced")
        changed = replace(registration, fenced=True, in_controlled_shutdown=False)
        self._journal.set(self._brokers, r.broker_id, changed)

    def replay_unfence_broker(self, r: metadata_pb2.UnfenceBrokerRecord, _: int) -> None:
        registration = self.registered(r.broker_id, r.broker_epoch)
        require(registration.fenced, f"broker {r.broker_id} is not fenced")
        self._journal.set(self._brokers, r.broker_id, replace(registration, fenced=False))

    def replay_broker_registration_change(
        self, r: metadata_pb2.BrokerRegistrationChangeRecord, _: int
    ) -> None:
        registration = self.registered(r.broker_id, r.broker_epoch)
        require(
            not (r.in_controlled_shutdown and registration.fenced),
            f"broker {r.broker_id} is fenced and cannot enter controlled shutdown",
        )
        changed = replace(registration, in_controlled_shutdown=r.in_controlled_shutdown)
        self._journal.set(self._brokers, r.broker_id, changed)

    # --- the next image --------------------------------------------------------------------

    def apply(self) -> ClusterImage:
        if not self._brokers:
            return self._image
        return ClusterImage(frozen_mapping(overlaid(self._image.brokers, self._brokers)))


class ProducerIdsDelta:
    """The next producer id to hand out, as replayed ProducerIds records moved it."""

    def __init__(self, image: ProducerIdsImage, journal: UndoJournal, cluster: ClusterDelta,
                 *, from_snapshot: bool) -> None:
        self._image = image
        self._journal = journal
        self._cluster = cluster
        self._from_snapshot = from_snapshot
        self._scalars: dict[str, int] = {}

    def next_producer_id(self) -> int:
        return self._scalars.get("next_producer_id", self._image.next_producer_id)

    def replay_producer_ids(self, r: metadata_pb2.ProducerIdsRecord, _: int) -> None:
        if r.broker_id != -1 and not self._from_snapshot:
            self._cluster.registered(r.broker_id, r.broker_epoch)
        current = self.next_producer_id()
        require(
            r.next_producer_id > current,
            f"next producer id {r.next_producer_id} does not advance past {current}",
        )
        self._journal.set(self._scalars, "next_producer_id", r.next_producer_id)

    def apply(self) -> ProducerIdsImage:
        if not self._scalars:
            return self._image
        return ProducerIdsImage(self._scalars["next_producer_id"])
