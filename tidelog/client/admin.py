"""The Admin client: topics, partitions, configs, consumer groups, and the cluster and its
controller quorum.

Every call goes to any reachable broker (the bootstrap list, then brokers learned from it); the
broker answers reads itself and forwards writes to the active controller, answering only after
the change is committed. A request-level error that is retriable (NOT_CONTROLLER while the
quorum elects a leader, a broker that cannot be reached) is retried with backoff until the call's
``timeout_ms`` (default ``default_api_timeout_ms``); others raise their typed error. Group calls
go to the group's coordinator instead (``_admin_groups.py``, with the lookup and retry policy
the consumer uses: ``_coordinator_lookup.py``); this class keeps their public face and hands
them over.

ACL calls (``_admin_acls.py``) go to any broker too; creations and deletions answer per item
without a request-level code, so their retriable answers (NOT_CONTROLLER) are retried per item.
So are SCRAM credential changes (``_admin_scram.py``), per user; passwords are salted on the
client and never sent.

Calls that name several items (topics, resources, ACL bindings and filters) report per item,
as Kafka's Admin does: they return an ``AdminResult`` whose ``values`` hold what succeeded and
``errors`` the typed error of each item that failed. ``result.all()`` returns the values or
raises the first error (in request order); ``result[name]`` returns one value or raises that
item's error. Nothing per item is raised by the call itself, so one bad topic does not hide what
happened to the others. The value types live in ``_admin_types.py`` and ``_admin_groups.py``
(ACL bindings and filters: ``tidelog.acl``) and are exported from here.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from tidelog import scram
from tidelog.acl import AclBinding, AclFilter
from tidelog.client._admin_acls import AclAdmin, binding_error, filter_error
from tidelog.client._admin_groups import (
    GroupAdmin,
    GroupDescription,
    GroupListing,
    GroupMemberDescription,
    GroupOffset,
    alter_offsets_request,
    offset_delete_request,
    offset_fetch_request,
)
from tidelog.client._admin_scram import (
    ScramAdmin,
    ScramCredentialInfo,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
    prepare_alterations,
)
from tidelog.client._admin_types import (
    ALTER_OPS,
    CONFIG_SOURCES,
    RESOURCE_TYPES,
    WRITE_RETRY_CODES,
    AdminResult,
    AlterConfigOp,
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    CreatedTopic,
    NewTopic,
    PartitionDescription,
    QuorumDescription,
    TopicDescription,
    TopicListing,
    VoterDescription,
    no_duplicates,
    ordered,
    topic_id_text,
)
from tidelog.client._fetcher import list_offsets
from tidelog.client._io import Connections, io_thread, monotonic_ms
from tidelog.client._metadata import Backoff, ClusterSnapshot, MetadataManager
from tidelog.client.bootstrap import parse_bootstrap
from tidelog.client.records import EARLIEST, LATEST, TopicPartition
from tidelog.errors import ErrorCode, TidelogError, UnacceptableCredentialError, error_for_code
from tidelog.metadata.topic_names import validate_topic_name
from tidelog.tls import ClientSecurity
from tidelog.v1 import broker_pb2, controller_pb2, metadata_pb2

__all__ = [
    "AclBinding",
    "AclFilter",
    "Admin",
    "AdminResult",
    "AlterConfigOp",
    "BrokerDescription",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "CreatedTopic",
    "GroupDescription",
    "GroupListing",
    "GroupMemberDescription",
    "GroupOffset",
    "NewTopic",
    "PartitionDescription",
    "QuorumDescription",
    "ScramCredentialInfo",
    "TopicDescription",
    "TopicListing",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "VoterDescription",
]

# ---------------------------------------------------------------------------------- client
class Admin:
    """Administers a Tidelog cluster. Thread-safe.

    >>> with Admin("127.0.0.1:9092") as admin:
    ...     admin.create_topics([NewTopic("orders", num_partitions=3)]).all()
    ...     print(admin.describe_topics(["orders"])["orders"].partitions)

    Security, with Kafka's names (docs/security.md): ``security_protocol`` is PLAINTEXT, SSL
    (TLS: ``ssl_cafile`` verifies the brokers; ``ssl_certfile``/``ssl_keyfile`` for a listener
    that asks for a client certificate) or SASL_SSL (TLS as SSL, the certificate optional, and a
    SCRAM user: ``sasl_username``, ``sasl_password``, ``sasl_mechanism`` SCRAM-SHA-256 (default)
    or SCRAM-SHA-512). Credentials the brokers refuse make every call raise
    SaslAuthenticationFailedError (or UnsupportedSaslMechanismError), never retried.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "tidelog-admin",
        request_timeout_ms: int = 30_000,
        default_api_timeout_ms: int = 60_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        security_protocol: str = "PLAINTEXT",
        ssl_cafile: str = "",
        ssl_certfile: str = "",
        ssl_keyfile: str = "",
        sasl_mechanism: str = "SCRAM-SHA-256",
        sasl_username: str = "",
        sasl_password: str = "",
    ) -> None:
        if request_timeout_ms <= 0 or default_api_timeout_ms <= 0:
            raise ValueError("timeouts must be positive")
        self.client_id = client_id
        self._request_timeout_ms = request_timeout_ms
        self._default_timeout_ms = default_api_timeout_ms
        self._backoff = Backoff(retry_backoff_ms, max(retry_backoff_ms, retry_backoff_max_ms))
        self._io = io_thread()
        security = ClientSecurity(security_protocol, ssl_cafile, ssl_certfile, ssl_keyfile,
                                  sasl_mechanism, sasl_username, sasl_password)
        self._conns = Connections(client_id, security.channel_factory())
        self._metadata = MetadataManager(
            parse_bootstrap(bootstrap_servers), self._conns, loop=self._io.loop,
            request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms, metadata_max_age_ms=300_000,
        )
        self._groups = GroupAdmin(metadata=self._metadata, conns=self._conns,
                                  request_timeout_ms=request_timeout_ms, backoff=self._backoff)
        self._acls = AclAdmin(self._call, self._backoff)
        self._scram = ScramAdmin(self._call, self._backoff)
        self._closed = False

    # ------------------------------------------------------------------ topics
    def create_topics(self, new_topics: Iterable[NewTopic], *, validate_only: bool = False,
                      timeout_ms: int | None = None) -> AdminResult[str, CreatedTopic]:
        """Create topics. Per-topic errors: InvalidTopicError, TopicAlreadyExistsError,
        InvalidPartitionsError, InvalidReplicationFactorError, InvalidReplicaAssignmentError,
        InvalidConfigError, PolicyViolationError."""
        topics = list(new_topics)
        no_duplicates(t.name for t in topics)
        result: AdminResult[str, CreatedTopic] = AdminResult()
        request = controller_pb2.CreateTopicsRequest(validate_only=validate_only)
        for t in topics:
            error = _name_error(t.name)
            if error is not None:
                result.errors[t.name] = error
                continue
            item = request.topics.add(name=t.name, num_partitions=t.num_partitions,
                                      replication_factor=t.replication_factor)
            for name, value in t.configs.items():
                item.configs.add(name=name, value=str(value))
            for pid, brokers in sorted((t.replica_assignment or {}).items()):
                item.assignments.add(partition_id=pid, broker_ids=list(brokers))
        if request.topics:
            wait = self._timeout(timeout_ms)
            request.timeout_ms = wait
            resp = self._run(self._write("CreateTopics", request, wait), wait)
            for r in resp.topics:
                if r.error_code:
                    result.errors[r.name] = error_for_code(r.error_code, r.error_message)
                else:
                    result.values[r.name] = CreatedTopic(
                        r.name, topic_id_text(r.topic_id), r.num_partitions, r.replication_factor,
                        {c.name: c.value for c in r.configs})
        return ordered(result, [t.name for t in topics])

    def delete_topics(self, names: Iterable[str], *,
                      timeout_ms: int | None = None) -> AdminResult[str, None]:
        """Delete topics. Per-topic errors: UnknownTopicOrPartitionError, InvalidTopicError."""
        wanted = list(names)
        no_duplicates(wanted)
        result: AdminResult[str, None] = AdminResult()
        request = controller_pb2.DeleteTopicsRequest()
        for name in wanted:
            error = _name_error(name)
            if error is not None:
                result.errors[name] = error
            else:
                request.names.append(name)
        if request.names:
            wait = self._timeout(timeout_ms)
            request.timeout_ms = wait
            resp = self._run(self._write("DeleteTopics", request, wait), wait)
            for r in resp.topics:
                if r.error_code:
                    result.errors[r.name] = error_for_code(r.error_code, r.error_message)
                else:
                    result.values[r.name] = None
        return ordered(result, wanted)

    def list_topics(self, *, include_internal: bool = False,
                    timeout_ms: int | None = None) -> dict[str, TopicListing]:
        """Every topic the cluster has, by name (internal ones such as __consumer_offsets only
        with ``include_internal``)."""
        wait = self._timeout(timeout_ms)
        resp = self._run(self._read("Metadata", broker_pb2.MetadataRequest(), wait), wait)
        return {
            t.name: TopicListing(t.name, topic_id_text(t.topic_id), t.is_internal,
                                 len(t.partitions))
            for t in sorted(resp.topics, key=lambda t: t.name)
            if t.error_code == ErrorCode.NONE and (include_internal or not t.is_internal)
        }

    def describe_topics(self, names: Iterable[str], *, include_offsets: bool = True,
                        timeout_ms: int | None = None) -> AdminResult[str, TopicDescription]:
        """Partitions of each topic (leader, epoch, replicas, ISR) and, with
        ``include_offsets``, each partition's log start offset, HW, log end offset and size as
        its leader reports them (DescribeLogs, else ListOffsets; -1 where it did not answer).
        Per-topic error: UnknownTopicOrPartitionError."""
        wanted = list(names)
        no_duplicates(wanted)
        result: AdminResult[str, TopicDescription] = AdminResult()
        valid = []
        for name in wanted:
            error = _name_error(name)
            if error is not None:
                result.errors[name] = error
            else:
                valid.append(name)
        if valid:
            wait = self._timeout(timeout_ms)
            found = self._run(self._describe_topics(valid, include_offsets, wait), wait)
            result.values.update(found.values)
            result.errors.update(found.errors)
        return ordered(result, wanted)

    async def _describe_topics(self, names: list[str], include_offsets: bool,
                               wait_ms: int) -> AdminResult[str, TopicDescription]:
        deadline = monotonic_ms() + wait_ms
        resp = await self._read("Metadata", broker_pb2.MetadataRequest(topics=names), wait_ms)
        snap = ClusterSnapshot.from_response(resp, now_ms=monotonic_ms(), previous=None,
                                             all_topics=True)
        offsets: dict[TopicPartition, tuple[int, int, int, int]] = {}
        if include_offsets:
            offsets = await self._log_offsets(snap, deadline)
        result: AdminResult[str, TopicDescription] = AdminResult()
        for t in resp.topics:
            if t.error_code:
                result.errors[t.name] = error_for_code(t.error_code, t.error_message)
                continue
            parts = tuple(
                PartitionDescription(
                    p.partition, p.leader, p.leader_epoch, p.replicas, p.isr, p.offline_replicas,
                    *offsets.get(TopicPartition(t.name, p.partition), (-1, -1, -1, -1)),
                )
                for p in snap.topics[t.name].partitions
            )
            result.values[t.name] = TopicDescription(t.name, topic_id_text(t.topic_id),
                                                     t.is_internal, parts)
        return result

    async def _log_offsets(self, snap: ClusterSnapshot, deadline_ms: int
                           ) -> dict[TopicPartition, tuple[int, int, int, int]]:
        """(log start, HW, LEO, size) per partition from its leader; best effort, one round."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic in snap.topics.values():
            for p in topic.partitions:
                if p.leader >= 0 and snap.address_of(p.leader) is not None:
                    by_leader.setdefault(p.leader, []).append(TopicPartition(topic.name,
                                                                             p.partition))
        found: dict[TopicPartition, tuple[int, int, int, int]] = {}
        outcomes = await asyncio.gather(*(
            self._leader_log_offsets(snap, node, tps, deadline_ms)
            for node, tps in by_leader.items()
        ))
        for outcome in outcomes:
            found.update(outcome)
        return found

    async def _leader_log_offsets(
        self, snap: ClusterSnapshot, node: int, tps: list[TopicPartition], deadline_ms: int
    ) -> dict[TopicPartition, tuple[int, int, int, int]]:
        address = snap.address_of(node)
        assert address is not None
        timeout = max(1, min(self._request_timeout_ms, deadline_ms - monotonic_ms()))
        found: dict[TopicPartition, tuple[int, int, int, int]] = {}
        request = broker_pb2.DescribeLogsRequest()
        for topic in sorted({tp.topic for tp in tps}):
            request.topics.add(name=topic, partitions=[tp.partition for tp in tps
                                                       if tp.topic == topic])
        try:
            logs = await self._conns.call(address, "DescribeLogs", request, timeout_ms=timeout)
            for p in logs.partitions:
                tp = TopicPartition(p.topic, p.partition_id)
                if p.error_code == ErrorCode.NONE and p.is_leader and tp in tps:
                    found[tp] = (p.log_start_offset, p.high_watermark, p.log_end_offset,
                                 p.size_bytes)
        except TidelogError:
            pass  # fall back to ListOffsets below
        missing = [tp for tp in tps if tp not in found]
        if missing:
            request2 = broker_pb2.ListOffsetsRequest()
            for ts in (EARLIEST, LATEST):
                for topic in sorted({tp.topic for tp in missing}):
                    item = request2.topics.add(name=topic)
                    for tp in missing:
                        if tp.topic == topic:
                            item.partitions.add(partition_id=tp.partition, timestamp=ts,
                                                current_leader_epoch=-1)
            try:
                resp = await self._conns.call(address, "ListOffsets", request2,
                                              timeout_ms=timeout)
            except TidelogError:
                return found
            starts: dict[TopicPartition, int] = {}
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_id)
                    if p.error_code != ErrorCode.NONE or tp not in missing:
                        continue
                    if tp not in starts:
                        starts[tp] = p.offset  # EARLIEST comes first in the request
                    else:
                        found[tp] = (starts[tp], p.offset, -1, -1)
        return found

    def create_partitions(self, new_counts: Mapping[str, int], *, validate_only: bool = False,
                          timeout_ms: int | None = None) -> AdminResult[str, None]:
        """Grow topics to the given total partition counts. Per-topic errors:
        InvalidPartitionsError (not above the current count), UnknownTopicOrPartitionError."""
        result: AdminResult[str, None] = AdminResult()
        request = controller_pb2.CreatePartitionsRequest(validate_only=validate_only)
        for name, count in new_counts.items():
            error = _name_error(name)
            if error is not None:
                result.errors[name] = error
            else:
                request.topics.add(name=name, count=count)
        if request.topics:
            wait = self._timeout(timeout_ms)
            request.timeout_ms = wait
            resp = self._run(self._write("CreatePartitions", request, wait), wait)
            for r in resp.topics:
                if r.error_code:
                    result.errors[r.name] = error_for_code(r.error_code, r.error_message)
                else:
                    result.values[r.name] = None
        return ordered(result, list(new_counts))

    # ------------------------------------------------------------------ configs
    def describe_configs(self, resources: Iterable[ConfigResource], *,
                         timeout_ms: int | None = None
                         ) -> AdminResult[ConfigResource, dict[str, ConfigEntry]]:
        """Every config of each resource with its value and source. Per-resource errors:
        UnknownTopicOrPartitionError / ResourceNotFoundError."""
        wanted = list(resources)
        no_duplicates(wanted)
        request = controller_pb2.DescribeConfigsRequest()
        for r in wanted:
            request.resources.add(resource_type=RESOURCE_TYPES[r.resource_type],
                                  resource_name=r.name)
        wait = self._timeout(timeout_ms)
        resp = self._run(self._read("DescribeConfigs", request, wait), wait)
        result: AdminResult[ConfigResource, dict[str, ConfigEntry]] = AdminResult()
        for rr in resp.resources:
            key = _resource_key(rr.resource_type, rr.resource_name)
            if rr.error_code:
                result.errors[key] = error_for_code(rr.error_code, rr.error_message)
            else:
                result.values[key] = {
                    c.name: ConfigEntry(c.name, c.value, CONFIG_SOURCES.get(c.source, "default"),
                                        c.read_only, c.sensitive, c.documentation)
                    for c in rr.configs
                }
        return ordered(result, wanted)

    def alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[AlterConfigOp] | Mapping[str, str | None]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> AdminResult[ConfigResource, None]:
        """Change configs incrementally (Kafka's incrementalAlterConfigs). Each resource maps to
        AlterConfigOps, or to ``{name: value}`` where None deletes the key. Per-resource errors:
        InvalidConfigError, UnknownTopicOrPartitionError, InvalidRequestError."""
        request = controller_pb2.AlterConfigsRequest(validate_only=validate_only)
        for resource, ops in changes.items():
            item = request.resources.add(resource_type=RESOURCE_TYPES[resource.resource_type],
                                         resource_name=resource.name)
            for op in _as_ops(ops):
                item.ops.add(name=op.name, value=op.value or "", op=ALTER_OPS[op.op])
        wait = self._timeout(timeout_ms)
        resp = self._run(self._write("AlterConfigs", request, wait), wait)
        result: AdminResult[ConfigResource, None] = AdminResult()
        for rr in resp.resources:
            key = _resource_key(rr.resource_type, rr.resource_name)
            if rr.error_code:
                result.errors[key] = error_for_code(rr.error_code, rr.error_message)
            else:
                result.values[key] = None
        return ordered(result, list(changes))

    # ------------------------------------------------------------------ ACLs
    def create_acls(self, bindings: Sequence[AclBinding], *,
                    timeout_ms: int | None = None) -> AdminResult[AclBinding, None]:
        """Create ACL bindings (one metadata batch); a binding that exists already succeeds
        without a second copy. Per-binding errors: InvalidRequestError (checked here first with
        ``AclBinding.problem()``: an invalid binding is not sent), ClusterAuthorizationFailedError,
        NotControllerError or RequestTimedOutError once the retries ran out of time."""
        wanted = list(bindings)
        no_duplicates(wanted)
        result: AdminResult[AclBinding, None] = AdminResult()
        valid = []
        for b in wanted:
            error = binding_error(b)
            if error is not None:
                result.errors[b] = error
            else:
                valid.append(b)
        if valid:
            wait = self._timeout(timeout_ms)
            outcomes: list[TidelogError | None] = self._run(
                self._acls.create(valid, monotonic_ms() + wait), wait)
            for b, outcome in zip(valid, outcomes, strict=True):
                if outcome is None:
                    result.values[b] = None
                else:
                    result.errors[b] = outcome
        return ordered(result, wanted)

    # A shared default is safe: AclFilter is frozen.
    def describe_acls(self, acl_filter: AclFilter = AclFilter(), *,  # noqa: B008
                      timeout_ms: int | None = None) -> list[AclBinding]:
        """The ACL bindings matching ``acl_filter`` (default: every binding), as the broker's
        metadata image holds them (a creation shows a moment after it is acknowledged). Raises
        InvalidRequestError for a filter field outside its values (without a request),
        ClusterAuthorizationFailedError when the principal may not describe the cluster."""
        error = filter_error(acl_filter)
        if error is not None:
            raise error
        wait = self._timeout(timeout_ms)
        found: list[AclBinding] = self._run(self._acls.describe(acl_filter, wait), wait)
        return found

    def delete_acls(self, filters: Sequence[AclFilter], *, timeout_ms: int | None = None
                    ) -> AdminResult[AclFilter, list[AclBinding]]:
        """Delete every ACL binding matching any of ``filters`` (``AclFilter()`` matches all).
        Per filter: the bindings it deleted (none matching: an empty list), or
        InvalidRequestError (a field outside its values; not sent),
        ClusterAuthorizationFailedError, RequestTimedOutError (it may have been applied: not
        sent again)."""
        wanted = list(filters)
        no_duplicates(wanted)
        result: AdminResult[AclFilter, list[AclBinding]] = AdminResult()
        valid = []
        for f in wanted:
            error = filter_error(f)
            if error is not None:
                result.errors[f] = error
            else:
                valid.append(f)
        if valid:
            wait = self._timeout(timeout_ms)
            outcomes: list[TidelogError | list[AclBinding]] = self._run(
                self._acls.delete(valid, monotonic_ms() + wait), wait)
            for f, outcome in zip(valid, outcomes, strict=True):
                if isinstance(outcome, TidelogError):
                    result.errors[f] = outcome
                else:
                    result.values[f] = outcome
        return ordered(result, wanted)

    # ------------------------------------------------------------------ SCRAM users
    def alter_user_scram_credentials(
        self, alterations: Sequence[UserScramCredentialAlteration] = (), *,
        upsertions: Sequence[UserScramCredentialUpsertion] = (),
        deletions: Sequence[UserScramCredentialDeletion] = (),
        timeout_ms: int | None = None,
    ) -> AdminResult[str, None]:
        """Set or delete SCRAM users' credentials (Kafka's alterUserScramCredentials): the
        alterations, in a list or as ``upsertions``/``deletions``. Passwords are salted here
        (a random salt, PBKDF2) and never sent. Per user, in first-seen order: done, or
        UnacceptableCredentialError (a bad name, iterations outside 4096..16384, an empty
        password), UnsupportedSaslMechanismError, DuplicateResourceError (the same mechanism
        twice, or a user both deleted and set) -- these checked here first and not sent --
        ResourceNotFoundError (deleting a credential that does not exist),
        ClusterAuthorizationFailedError, NotControllerError or RequestTimedOutError once the
        retries ran out of time."""
        users, messages, errors = prepare_alterations(
            [*alterations, *upsertions, *deletions])
        result: AdminResult[str, None] = AdminResult(errors=dict(errors))
        if messages:
            wait = self._timeout(timeout_ms)
            outcomes: dict[str, TidelogError | None] = self._run(
                self._scram.alter(messages, monotonic_ms() + wait), wait)
            for user, outcome in outcomes.items():
                if outcome is None:
                    result.values[user] = None
                else:
                    result.errors[user] = outcome
        return ordered(result, users)

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, timeout_ms: int | None = None,
    ) -> AdminResult[str, list[ScramCredentialInfo]]:
        """Each user's SCRAM credentials as (mechanism, iterations) pairs, never a salt or a key
        (Kafka's describeUserScramCredentials). ``users`` None (or empty): every user that has
        one, in ``values``; named users come in request order, one without credentials with
        ResourceNotFoundError, an invalid name with UnacceptableCredentialError (not sent).
        Raises ClusterAuthorizationFailedError when the principal may not describe the
        cluster."""
        wanted = list(users or ())
        no_duplicates(wanted)
        result: AdminResult[str, list[ScramCredentialInfo]] = AdminResult()
        valid = []
        for user in wanted:
            problem = scram.user_name_problem(user) if isinstance(user, str) else (
                f"the user name must be a str, got {user!r}")
            if problem is not None:
                result.errors[user] = UnacceptableCredentialError(problem)
            else:
                valid.append(user)
        if valid or not wanted:
            wait = self._timeout(timeout_ms)
            values, errors = self._run(self._scram.describe(valid, wait), wait)
            result.values.update(values)
            result.errors.update(errors)
        if not wanted:
            result.values = dict(sorted(result.values.items()))
            return result
        return ordered(result, wanted)

    # ------------------------------------------------------------------ cluster
    def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        """The cluster id, the active controller and every registered broker (fenced marked)."""
        wait = self._timeout(timeout_ms)
        resp = self._run(self._read("DescribeCluster", broker_pb2.DescribeClusterRequest(),
                                    wait), wait)
        brokers = tuple(
            BrokerDescription(b.broker_id, b.endpoint.host, b.endpoint.port, b.rack, b.fenced)
            for b in sorted(resp.brokers, key=lambda b: b.broker_id)
        )
        return ClusterDescription(resp.cluster_id, resp.controller_id, brokers,
                                  resp.metadata_offset)

    def describe_quorum(self, *, timeout_ms: int | None = None) -> QuorumDescription:
        """The controller quorum: leader, its epoch, commit index and each voter's progress."""
        wait = self._timeout(timeout_ms)
        resp = self._run(self._read("DescribeQuorum", controller_pb2.DescribeQuorumRequest(),
                                    wait), wait)
        voters = tuple(
            VoterDescription(v.node_id, v.raft_address, v.endpoint.host, v.endpoint.port,
                             v.commit_index, v.applied_index, v.metadata_offset, v.lag,
                             v.connected, v.is_leader)
            for v in sorted(resp.voters, key=lambda v: v.node_id)
        )
        return QuorumDescription(resp.cluster_id, resp.leader_id, resp.leader_epoch,
                                 resp.high_watermark, resp.responder_id, resp.metadata_offset,
                                 voters)

    # ------------------------------------------------------------------ groups
    def list_groups(self, *, timeout_ms: int | None = None) -> dict[str, GroupListing]:
        """Every consumer group of the cluster, by id: ListGroups to every live broker (each
        lists the groups it coordinates), merged. A broker that does not answer by the
        deadline raises its error."""
        wait = self._timeout(timeout_ms)
        found = self._run(self._groups.list_groups(monotonic_ms() + wait), wait)
        return dict(sorted(found.items()))

    def describe_groups(self, group_ids: Iterable[str], *, timeout_ms: int | None = None
                        ) -> AdminResult[str, GroupDescription]:
        """Each group's state, epochs, assignor and members, from its coordinator. Per-group
        errors: GroupIdNotFoundError, InvalidGroupIdError, a coordinator error past the
        deadline."""
        wanted = list(group_ids)
        no_duplicates(wanted)
        wait = self._timeout(timeout_ms)
        result: AdminResult[str, GroupDescription] = self._run(
            self._groups.describe_groups(wanted, monotonic_ms() + wait), wait)
        return ordered(result, wanted)

    def delete_groups(self, group_ids: Iterable[str], *, timeout_ms: int | None = None
                      ) -> AdminResult[str, None]:
        """Delete groups and their committed offsets. Per-group errors: NonEmptyGroupError
        (members are in it), GroupIdNotFoundError, InvalidGroupIdError."""
        wanted = list(group_ids)
        no_duplicates(wanted)
        wait = self._timeout(timeout_ms)
        result: AdminResult[str, None] = self._run(
            self._groups.delete_groups(wanted, monotonic_ms() + wait), wait)
        return ordered(result, wanted)

    def list_group_offsets(self, group_id: str,
                           partitions: Iterable[TopicPartition] | None = None, *,
                           timeout_ms: int | None = None) -> dict[TopicPartition, GroupOffset]:
        """The group's committed offsets (all of them, or those of ``partitions``; a partition
        without a commit has offset -1), with metadata and lag. Raises the group's error
        (InvalidGroupIdError, a coordinator error past the deadline) or a partition's."""
        request = offset_fetch_request(group_id, partitions)
        wait = self._timeout(timeout_ms)
        found: dict[TopicPartition, GroupOffset] = self._run(
            self._groups.list_offsets(group_id, request, monotonic_ms() + wait), wait)
        return found

    def delete_group_offsets(self, group_id: str,
                             partitions: Iterable[TopicPartition | str], *,
                             timeout_ms: int | None = None) -> AdminResult[TopicPartition, None]:
        """Delete the group's committed offsets of ``partitions`` (Kafka's
        deleteConsumerGroupOffsets); a topic name instead of a partition means every committed
        partition of it. Per partition: deleted (a partition without a commit counts as
        deleted, as Kafka answers), or GroupSubscribedToTopicError while a member of the group
        subscribes to its topic. Raises the group's error (GroupIdNotFoundError,
        InvalidGroupIdError, a coordinator error past the deadline)."""
        request = offset_delete_request(group_id, partitions)
        if not request.topics:
            return AdminResult()
        wait = self._timeout(timeout_ms)
        result: AdminResult[TopicPartition, None] = self._run(
            self._groups.delete_offsets(group_id, request, monotonic_ms() + wait), wait)
        return result

    def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int], *,
                            timeout_ms: int | None = None) -> None:
        """Set the group's committed offsets (Kafka's alterConsumerGroupOffsets): an
        OffsetCommit as a simple consumer (member id "", epoch -1), which the coordinator
        accepts only while the group has no members. Raises UnknownMemberIdError saying the
        group has active members, the group's error, or the first partition's error (naming
        the group and the partition)."""
        if not offsets:
            return
        request = alter_offsets_request(group_id, offsets)
        wait = self._timeout(timeout_ms)
        self._run(self._groups.alter_offsets(group_id, request, monotonic_ms() + wait), wait)

    def list_offsets(self, timestamps: Mapping[TopicPartition, int], *,
                     timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """The offset of each partition at a timestamp (ms), or at EARLIEST (-2, the log start
        offset) / LATEST (-1, the high watermark), asked of each partition's leader (ListOffsets,
        retried on leader changes until the deadline). -1 for a timestamp after every record.
        Raises the first partition's non-retriable error (UnknownTopicOrPartitionError)."""
        wait = self._timeout(timeout_ms)
        found: dict[TopicPartition, tuple[int, int]] = self._run(list_offsets(
            self._metadata, self._conns, timestamps, deadline_ms=monotonic_ms() + wait,
            request_timeout_ms=self._request_timeout_ms, backoff=self._backoff), wait)
        return {tp: found[tp][0] for tp in sorted(found)}

    # ------------------------------------------------------------------ plumbing
    def _timeout(self, timeout_ms: int | None) -> int:
        if timeout_ms is not None and timeout_ms <= 0:
            raise ValueError("timeout_ms must be positive")
        return self._default_timeout_ms if timeout_ms is None else timeout_ms

    def _run(self, coro: Any, wait_ms: int) -> Any:
        if self._closed:
            coro.close()
            raise RuntimeError("the admin client is closed")
        return self._io.run(coro, wait_ms / 1000)

    async def _read(self, method: str, request: Any, wait_ms: int) -> Any:
        return await self._call(method, request, wait_ms, write=False)

    async def _write(self, method: str, request: Any, wait_ms: int) -> Any:
        return await self._call(method, request, wait_ms, write=True)

    async def _call(self, method: str, request: Any, wait_ms: int, *, write: bool) -> Any:
        """Call until a response without a retriable request-level error, or the deadline."""
        deadline = monotonic_ms() + wait_ms
        attempts = 0
        # Bounded by the deadline: every failed round sleeps a backoff step first.
        while True:
            resp = await self._metadata.call_any(method, request, deadline_ms=deadline,
                                                 idempotent=not write)
            code = getattr(resp, "error_code", ErrorCode.NONE)
            if code == ErrorCode.NONE:
                return resp
            error = error_for_code(code, getattr(resp, "error_message", ""))
            retry = code in WRITE_RETRY_CODES if write else error.retriable
            attempts += 1
            delay = self._backoff.delay_ms(attempts, _rng)
            if not retry or monotonic_ms() + delay >= deadline:
                raise error
            await asyncio.sleep(delay / 1000)

    def close(self) -> None:
        """Release the connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._io.run(self._close(), None)

    async def _close(self) -> None:
        await self._metadata.close()
        await self._conns.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


_rng = random.Random()


def _name_error(name: str) -> TidelogError | None:
    try:
        validate_topic_name(name)
    except TidelogError as e:
        return e
    return None


def _resource_key(resource_type: int, name: str) -> ConfigResource:
    if resource_type == metadata_pb2.CONFIG_RESOURCE_TOPIC:
        return ConfigResource("topic", name)
    return ConfigResource("broker", name)


def _as_ops(ops: Iterable[AlterConfigOp] | Mapping[str, str | None]) -> list[AlterConfigOp]:
    if isinstance(ops, Mapping):
        return [AlterConfigOp(k, None, "delete") if v is None else AlterConfigOp(k, str(v))
                for k, v in ops.items()]
    out = list(ops)
    for op in out:
        if not isinstance(op, AlterConfigOp):
            raise TypeError(f"expected AlterConfigOp, got {op!r}")
    return out
