"""The broker process: controller client, metadata listener, lifecycle, data plane, gRPC server.

Start order (each step needs the one before): open storage; build the ControllerClient from the
voter list; subscribe the data plane (replica manager), then the group coordinator's runtime
(broker.group.runtime: it loads the __consumer_offsets partitions this broker leads), to the
MetadataListener and start it;
register and heartbeat (BrokerLifecycleManager, reporting the listener's offset, and
registering both listeners: the client endpoint and the inter-broker endpoint followers fetch
from); serve gRPC. Every call to the controllers and to other brokers' inter-broker listeners
carries this broker's peer credential (tidelog.peer_auth).
Stop order on SIGTERM (Kafka's controlled shutdown): ask the controllers to move leadership away
and wait until they say so (bounded), stop serving, stop the lifecycle, the listener and the data
plane, close storage.

A fatal control-plane error (INCONSISTENT_CLUSTER_ID from the quorum, an unusable metadata
stream) stops the broker: ``failure`` says why and the node exits non-zero.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from pathlib import Path

from prometheus_client import CollectorRegistry

from tidelog.broker.authz.authn import Authenticator
from tidelog.broker.authz.gate import Gate
from tidelog.broker.controller_client import ControllerClient
from tidelog.broker.group.coordinator import GroupCoordinatorConfig
from tidelog.broker.group.metrics import GroupMetricsCollector
from tidelog.broker.group.runtime import GroupCoordinatorRuntime
from tidelog.broker.handlers import DataPlaneHandlers, GroupHandlers
from tidelog.broker.heap_freezer import HeapFreezer
from tidelog.broker.lifecycle import BrokerLifecycleManager
from tidelog.broker.metadata_listener import MetadataListener
from tidelog.broker.metrics import BrokerMetrics
from tidelog.broker.replica_manager import ReplicaManager, ReplicaManagerConfig
from tidelog.cluster_secret import BROKERS, CONTROLLERS, BrokerCredential
from tidelog.config import NodeConfig
from tidelog.errors import TidelogError
from tidelog.metadata.topic_names import OFFSETS_TOPIC
from tidelog.peer_auth import PeerVerifier, RegisteredVerifier, RootVerifier, peer_metadata
from tidelog.tls import PLAINTEXT, ChannelFactory
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode

log = logging.getLogger("tidelog.broker")

#: How long a controlled shutdown may wait for the controllers to move leadership away.
CONTROLLED_SHUTDOWN_TIMEOUT_MS = 15_000
#: Registration must succeed within this (the quorum may still be electing at cluster start).
REGISTRATION_TIMEOUT_MS = 60_000


class BrokerRuntime:
    """One broker node's components and their start/stop order."""

    def __init__(self, config: NodeConfig, *, cluster_id: str, registry: object) -> None:
        b = config.broker
        self.config = config
        self.broker_id = config.node_id
        self.cluster_id = cluster_id
        self.registry = registry
        self.failure: TidelogError | None = None
        self.stopping = asyncio.Event()
        # Our own credential: one key for the controllers, another for the other brokers'
        # inter-broker listeners (tidelog.cluster_secret). None: a loopback-only dev node.
        self.credential = config.broker_credential()
        self._secret = config.cluster_secret()  # a combined node's; None on a broker-only one
        # With [tls], every connection to a controller or a leader is mutual TLS.
        channels = ChannelFactory.for_files(config.tls.files(), "tls") if config.tls.enabled \
            else PLAINTEXT
        self.client = ControllerClient(
            config.controller.voters, name=f"broker-{config.node_id}", channels=channels,
            peer_metadata=peer_metadata(config.node_id, self.credential, audience=CONTROLLERS))
        self.listener = MetadataListener(broker_id=config.node_id, cluster_id=cluster_id,
                                         client=self.client, on_fatal=self._on_fatal)
        self.lifecycle = BrokerLifecycleManager(
            broker_id=config.node_id, cluster_id=cluster_id, host=b.host, port=b.port,
            rack=b.rack, client=self.client, metadata_offset=lambda: self.listener.offset,
            heartbeat_interval_ms=b.heartbeat_interval_ms, on_fatal=self._on_fatal,
            inter_broker_host=config.inter_broker_advertised_host,
            inter_broker_port=b.inter_broker_port)
        self.data_dir = Path(config.data_dir)
        metrics = BrokerMetrics(registry) if isinstance(registry, CollectorRegistry) else None
        #: The replica manager: storage, partitions, the typed append, replication, timers.
        self.replica_manager = ReplicaManager(
            broker_id=config.node_id, data_dir=self.data_dir, cluster_id=cluster_id,
            controller=self.client, broker_epoch=lambda: self.lifecycle.broker_epoch,
            config=ReplicaManagerConfig.from_broker_config(b), metrics=metrics,
            metadata_caught_up=self._metadata_confirmed, channels=channels,
            peer_metadata=peer_metadata(config.node_id, self.credential, audience=BROKERS),
            on_leader_unreachable=self.lifecycle.report_unreachable)
        #: The data plane's request handlers (broker.handlers), what the servicers call.
        self.data_plane = DataPlaneHandlers(self.replica_manager)
        #: ACL decisions for the client listener (broker.authz; off unless configured).
        self.authz = Gate(config.authorization, lambda: self.listener.image,
                          metrics.authorization_failures if metrics is not None else None)
        #: The group coordinator's shards (one per __consumer_offsets partition led here).
        self.group_coordinator = GroupCoordinatorRuntime(
            may_describe=self.authz.topic_describer(),
            broker_id=config.node_id, partitions=self.replica_manager,
            image=lambda: self.listener.image, create_topic=self._create_offsets_topic,
            config=GroupCoordinatorConfig(
                session_timeout_ms=b.group_consumer_session_timeout_ms,
                heartbeat_interval_ms=b.group_consumer_heartbeat_interval_ms))
        #: Freezes the heap after large metadata changes (no full GC pass over the partitions).
        self.heap_freezer = HeapFreezer(config.node_id)
        #: The group RPCs (broker.handlers.groups).
        self.groups = GroupHandlers(self.group_coordinator, lambda: self.listener.image)
        #: SCRAM users and required authentication on the client listener (broker.authz.authn).
        self.authn = Authenticator(
            config.sasl, lambda: self.listener.image,
            certificates_verified=config.tls.enabled and config.tls.client_auth != "none",
            decoy_key=_decoy_key(self.credential, cluster_id),
            failures=metrics.authentication_failures if metrics is not None else None)
        if isinstance(registry, CollectorRegistry):  # read at scrape time (broker.group.metrics)
            registry.register(GroupMetricsCollector(self.group_coordinator))

    async def _create_offsets_topic(self) -> None:
        """Ask the controller for __consumer_offsets (Kafka's auto-creation of the internal
        topic): offsets_topic_num_partitions partitions, replication min(3, live brokers),
        compacted, min.insync.replicas 2 where RF >= 3. TOPIC_ALREADY_EXISTS is success."""
        live = len(self.listener.image.cluster.active_brokers())
        rf = max(1, min(3, live))
        configs = [cpb.ConfigEntry(name="cleanup.policy", value="compact")]
        if rf >= 3:
            configs.append(cpb.ConfigEntry(name="min.insync.replicas", value="2"))
        request = cpb.CreateTopicsRequest(topics=[cpb.CreateTopicsRequest.Topic(
            name=OFFSETS_TOPIC, num_partitions=self.config.broker.offsets_topic_num_partitions,
            replication_factor=rf, configs=configs)])
        response = await self.client.forward("CreateTopics", request)
        results = list(response.topics)
        code = results[0].error_code if results else response.error_code
        message = results[0].error_message if results else response.error_message
        if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.info("broker %d: %s created (or existed) with RF %d", self.broker_id,
                     OFFSETS_TOPIC, rf)
        else:
            log.warning("broker %d: creating %s failed: %s", self.broker_id, OFFSETS_TOPIC,
                        message)

    def _metadata_confirmed(self) -> bool:
        # The data plane deletes stray logs and takes produce only once this holds. Deleting a
        # log is the one irreversible thing the metadata makes a broker do, so it waits for the
        # *active* controller's word that this broker's image reached its registration (the
        # heartbeat's is_caught_up), as Kafka waits for the quorum's high watermark (KIP-858).
        # The listener's own check is not enough: the controller it streams from may be a
        # restarting one that has replayed only a prefix of the log and reports that prefix's end
        # as committed; a broker that trusted it deleted every partition created later.
        # And a fenced broker leads nothing: a new incarnation stays fenced while its old
        # incarnation's leaderships move away in parts (controller/managers/cluster_control.py),
        # and must not serve them meanwhile at their old epochs from a log that may have lost
        # appends (a power loss).
        # The listener's part is a start-up gate (has_caught_up, latched): checked at every
        # request, it turned false each time a new batch was being applied, and under a burst
        # of metadata (10,000-partition creations, a fencing in parts) leaders refused their
        # followers' fetches for seconds. The active controller's word (registration reached,
        # unfenced) is what a restarted broker cannot have from a stale image.
        return (self.lifecycle.is_caught_up and self.listener.has_caught_up
                and not self.lifecycle.is_fenced)

    def peer_verifier(self) -> PeerVerifier | None:
        """How the inter-broker listener checks a follower's credential: against the cluster
        secret on a combined node; on a broker-only node, which holds only its own credential,
        against the verifier the follower's registration carries in this broker's image. None
        on a development node without credentials (everyone is let through)."""
        if self._secret is not None:
            return RootVerifier(self._secret, audience=BROKERS)
        if self.credential is None:
            return None
        return RegisteredVerifier(self._registered_verifier)

    def _registered_verifier(self, broker_id: int) -> bytes | None:
        registration = self.listener.image.cluster.broker(broker_id)
        return registration.credential_verifier if registration is not None else None

    def _on_fatal(self, error: TidelogError) -> None:
        log.error("broker %d: fatal: %s", self.broker_id, error)
        if self.failure is None:
            self.failure = error
        self.stopping.set()

    async def start(self) -> None:
        await self.replica_manager.start()
        await self.listener.subscribe(self.replica_manager)
        # After the replica manager: a partition is hosted before its shard loads from it.
        await self.listener.subscribe(self.group_coordinator)
        # Last: after a large change, the objects the others made are frozen (heap_freezer).
        await self.listener.subscribe(self.heap_freezer)
        await self.group_coordinator.start()
        await self.listener.start()
        await self.lifecycle.start(registration_timeout_ms=REGISTRATION_TIMEOUT_MS)
        log.info("broker %d registered with epoch %d", self.broker_id,
                 self.lifecycle.broker_epoch)

    async def stop(self) -> None:
        """Controlled shutdown (bounded), then stop every component in reverse order."""
        if self.failure is None:
            moved = await self.lifecycle.controlled_shutdown(CONTROLLED_SHUTDOWN_TIMEOUT_MS)
            log.info("broker %d controlled shutdown %s", self.broker_id,
                     "complete" if moved else "timed out; stopping anyway")
        await self.lifecycle.stop()
        await self.listener.stop()
        await self.group_coordinator.stop()
        await self.replica_manager.stop()
        await self.client.close()

    def readiness(self) -> str | None:
        if self.failure is not None:
            return f"failed: {self.failure}"
        if self.lifecycle.broker_epoch < 0:
            return "not registered with the controllers yet"
        if self.lifecycle.is_fenced:
            return "fenced by the controllers (catching up with the metadata log)"
        if not self.listener.has_caught_up:
            return "catching up with the metadata log"
        return None


def _decoy_key(credential: BrokerCredential | None, cluster_id: str) -> bytes:
    """The key of the made-up salts ScramSalt gives for unknown users: the same on every broker
    (derived from the cluster secret; each broker's credential file carries it), and secret
    where the cluster has one (else anyone could compute the made-up salts and tell them from
    real ones)."""
    return credential.scram_decoy_key if credential is not None \
        else hashlib.sha256(f"tidelog-scram-decoy-salts\0{cluster_id}".encode()).digest()
