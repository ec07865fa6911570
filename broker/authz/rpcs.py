"""What each client RPC requires, and how refused parts are answered (Kafka's checks per API).

| RPC | requires |
|---|---|
| Metadata | Describe on each topic (others left out; TOPIC_AUTHORIZATION_FAILED if named) |
| Produce | Write on each topic |
| Fetch, OffsetCommit (per topic) | Read on each topic |
| ListOffsets, DescribeLogs, OffsetFetch (per topic) | Describe on each topic |
| InitProducerId | IdempotentWrite on the cluster, or Write on some topic (KIP-679) |
| CreateTopics | Create on the cluster or on each topic |
| DeleteTopics | Delete on each topic |
| CreatePartitions | Alter on each topic |
| AlterConfigs, DescribeConfigs | the same operation on each topic (broker configs: cluster) |
| DescribeQuorum, DescribeAcls, DescribeUserScramCredentials | Describe on the cluster |
| CreateAcls, DeleteAcls, AlterUserScramCredentials | Alter on the cluster |
| ScramSalt | nothing (a client calls it to authenticate) |
| FindCoordinator, DescribeGroups, OffsetFetch | Describe on each group |
| ConsumerGroupHeartbeat, OffsetCommit | Read on the group |
| DeleteGroups, OffsetDelete | Delete on the group (OffsetDelete: Read on each topic too) |
| ListGroups | Describe on the cluster, else only the groups it may describe |
| DescribeCluster | nothing (what Metadata shows anyway) |

Topic-level refusals are per topic: the refused topics' partitions carry
TOPIC_AUTHORIZATION_FAILED and the rest is served. The admin writes forwarded to the controller
(CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, DescribeConfigs) are all or nothing:
one refused item refuses the request, its message naming each refused item.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from broker.authz.gate import Gate
from broker.authz.principal import Who
from tidelog.acl import CLUSTER_NAME
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode

__all__ = ["Checks", "Refusal", "refused_admin_response", "serve_allowed", "why_refused"]

Q = TypeVar("Q", bound=Any)
A = TypeVar("A", bound=Any)
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
#: ConfigResourceType values (metadata.proto): 2 topic, 4 broker.
_CONFIG_TOPIC = 2


def why_refused(who: Who, operation: str, what: str) -> str:
    return f"{who.principal} may not {operation} {what} (no ACL allows it; see tidelog acl list)"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refused admin request: its error code (topic or cluster) and the reason."""

    code: ErrorCode
    why: str


async def serve_allowed(request: Q, denied: set[str], handle: Callable[[Q], Awaitable[A]],
                        answer_denied: Callable[[A, Any], None],
                        empty: Callable[[], A] | None = None) -> A:
    """Serve the topics of ``request`` (a message with ``topics``, each with a ``name``) that are
    not in ``denied`` through ``handle``, then let ``answer_denied(response, topic)`` add each
    denied topic's entries. Nothing left to serve: ``empty()`` is the response (without
    ``empty``, ``handle`` is still called, with no topics)."""
    if not denied:
        return await handle(request)
    kept = type(request)()
    kept.CopyFrom(request)
    del kept.topics[:]
    kept.topics.extend(t for t in request.topics if t.name not in denied)
    response = empty() if empty is not None and not kept.topics else await handle(kept)
    for topic in request.topics:
        if topic.name in denied:
            answer_denied(response, topic)
    return response


class Checks:
    """The per-RPC checks of one broker, over its Gate."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def _denied(self, who: Who, operation: str, kind: str, names: Iterable[str]) -> set[str]:
        if not self.gate.enabled:  # the hot path of every produce and fetch: nothing to do
            return set()
        return {n for n in set(names) if not self.gate.allows(who, operation, kind, n)}

    def acl_version(self) -> object:
        return self.gate.acl_version()

    def cluster(self, who: Who, operation: str) -> bool:
        return self.gate.allows(who, operation, "cluster", CLUSTER_NAME)

    # --- metadata -----------------------------------------------------------------------------
    def metadata(self, who: Who, request: pb.MetadataRequest, response: pb.MetadataResponse
                 ) -> pb.MetadataResponse:
        if not self.gate.enabled:
            return response
        named = set(request.topics)
        kept = []
        for topic in response.topics:
            if self.gate.allows(who, "Describe", "topic", topic.name):
                kept.append(topic)
            elif topic.name in named:
                kept.append(pb.TopicMetadata(
                    name=topic.name, error_code=TOPIC_DENIED,
                    error_message=why_refused(who, "Describe", f"topic {topic.name!r}")))
        del response.topics[:]
        response.topics.extend(kept)
        return response

    # --- data plane ---------------------------------------------------------------------------
    async def produce(self, who: Who, request: pb.ProduceRequest,
                      handle: Callable[[pb.ProduceRequest], Awaitable[pb.ProduceResponse]]
                      ) -> pb.ProduceResponse:
        def answer(response: pb.ProduceResponse, t: Any) -> None:
            entry = response.topics.add(name=t.name)
            for p in t.partitions:
                entry.partitions.add(partition_id=p.partition_id, base_offset=-1,
                                     log_append_time_ms=-1, log_start_offset=-1,
                                     error_code=TOPIC_DENIED,
                                     error_message=why_refused(who, "Write", f"topic {t.name!r}"))

        denied = self._denied(who, "Write", "topic", (t.name for t in request.topics))
        return await serve_allowed(
            request, denied, handle, answer,
            lambda: pb.ProduceResponse(correlation_id=request.correlation_id))

    async def fetch(self, who: Who, request: pb.FetchRequest,
                    handle: Callable[[pb.FetchRequest], Awaitable[pb.FetchResponse]]
                    ) -> pb.FetchResponse:
        def answer(response: pb.FetchResponse, t: Any) -> None:
            entry = response.topics.add(name=t.name, topic_id=t.topic_id)
            for p in t.partitions:
                entry.partitions.add(partition_id=p.partition_id, high_watermark=-1,
                                     last_stable_offset=-1, log_start_offset=-1,
                                     log_end_offset=-1, error_code=TOPIC_DENIED,
                                     error_message=why_refused(who, "Read", f"topic {t.name!r}"))

        denied = self._denied(who, "Read", "topic", (t.name for t in request.topics))
        return await serve_allowed(request, denied, handle, answer, pb.FetchResponse)

    async def list_offsets(self, who: Who, request: pb.ListOffsetsRequest,
                           handle: Callable[[pb.ListOffsetsRequest],
                                            Awaitable[pb.ListOffsetsResponse]]
                           ) -> pb.ListOffsetsResponse:
        def answer(response: pb.ListOffsetsResponse, t: Any) -> None:
            entry = response.topics.add(name=t.name)
            for p in t.partitions:
                entry.partitions.add(partition_id=p.partition_id, timestamp=-1, offset=-1,
                                     leader_epoch=-1, error_code=TOPIC_DENIED,
                                     error_message=why_refused(who, "Describe",
                                                               f"topic {t.name!r}"))

        denied = self._denied(who, "Describe", "topic", (t.name for t in request.topics))
        return await serve_allowed(request, denied, handle, answer, pb.ListOffsetsResponse)

    async def describe_logs(self, who: Who, request: pb.DescribeLogsRequest,
                            handle: Callable[[pb.DescribeLogsRequest],
                                             Awaitable[pb.DescribeLogsResponse]]
                            ) -> pb.DescribeLogsResponse:
        def answer(response: pb.DescribeLogsResponse, t: Any) -> None:
            for pid in t.partitions:
                response.partitions.add(topic=t.name, partition_id=pid, error_code=TOPIC_DENIED)

        denied = self._denied(who, "Describe", "topic", (t.name for t in request.topics))
        return await serve_allowed(request, denied, handle, answer)  # the answer's broker id

    def init_producer_id(self, who: Who) -> pb.InitProducerIdResponse | None:
        """None when allowed, else the refusal."""
        if not self.gate.enabled or self.cluster(who, "IdempotentWrite") or \
                self.gate.allows_some(who, "Write", "topic"):
            return None
        return pb.InitProducerIdResponse(
            error_code=CLUSTER_DENIED, producer_id=-1, producer_epoch=-1,
            error_message=f"{who.principal} may not write idempotently: it needs Write on a "
                          f"topic or IdempotentWrite on the cluster")

    # --- admin (forwarded to the controller: all or nothing) ---------------------------------
    def admin(self, who: Who, method: str, request: Any,
              topic_names_by_id: Callable[[bytes], str | None] = lambda _: None
              ) -> Refusal | None:
        """Why ``request`` is refused (one line naming each refused item), or None.
        ``topic_names_by_id``: DeleteTopics may name topics by id."""
        if not self.gate.enabled:
            return None
        if method == "CreateTopics":
            if self.cluster(who, "Create"):
                return None
            return self._refused(who, "Create", (t.name for t in request.topics))
        if method == "DeleteTopics":
            by_id = [n for n in map(topic_names_by_id, request.topic_ids) if n is not None]
            return self._refused(who, "Delete", [*request.names, *by_id])
        if method == "CreatePartitions":
            return self._refused(who, "Alter", (t.name for t in request.topics))
        if method in ("AlterConfigs", "DescribeConfigs"):
            topics = [r.resource_name for r in request.resources
                      if r.resource_type == _CONFIG_TOPIC]
            if len(topics) < len(request.resources) and not self.cluster(who, method):
                return Refusal(CLUSTER_DENIED,
                               why_refused(who, method, "the cluster's (broker) configs"))
            return self._refused(who, method, topics)
        if method in ("DescribeQuorum", "DescribeAcls", "DescribeUserScramCredentials"):
            return self._cluster_refusal(who, "Describe", "the cluster")
        if method in ("CreateAcls", "DeleteAcls"):
            return self._cluster_refusal(who, "Alter", "the cluster (its ACLs)")
        if method == "AlterUserScramCredentials":
            return self._cluster_refusal(who, "Alter", "the cluster (its SCRAM users)")
        return None

    def _refused(self, who: Who, operation: str, topics: Iterable[str]) -> Refusal | None:
        denied = sorted(self._denied(who, operation, "topic", topics))
        if not denied:
            return None
        return Refusal(TOPIC_DENIED, why_refused(who, operation, "topics " + ", ".join(
            repr(d) for d in denied)))

    def _cluster_refusal(self, who: Who, operation: str, what: str) -> Refusal | None:
        if self.cluster(who, operation):
            return None
        return Refusal(CLUSTER_DENIED, why_refused(who, operation, what))

    # --- groups ---------------------------------------------------------------------------------
    def group(self, who: Who, operation: str, group_id: str) -> str | None:
        if self.gate.allows(who, operation, "group", group_id):
            return None
        return why_refused(who, operation, f"group {group_id!r}")

    def topics_denied(self, who: Who, operation: str, names: Iterable[str]) -> set[str]:
        return self._denied(who, operation, "topic", names)

    def groups_denied(self, who: Who, operation: str, names: Iterable[str]) -> set[str]:
        return self._denied(who, operation, "group", names)


def refused_admin_response(method: str, refusal: Refusal) -> Any:
    """A refused admin request's answer: its response type with the refusal at the top."""
    if method == "DescribeAcls":
        return pb.DescribeAclsResponse(error_code=refusal.code, error_message=refusal.why)
    response = getattr(cpb, f"{method}Response")()
    response.error_code = refusal.code
    response.error_message = refusal.why
    return response
