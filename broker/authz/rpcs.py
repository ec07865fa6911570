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
| DescribeQuorum, DescribeAcls | Describe on the cluster |
| CreateAcls, DeleteAcls | Alter on the cluster |
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
from typing import Any, TypeVar

from broker.authz.gate import Gate
from broker.authz.principal import Who
from tidelog.acl import CLUSTER_NAME
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode

__all__ = ["Checks"]

R = TypeVar("R")
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
#: ConfigResourceType values (metadata.proto): 2 topic, 4 broker.
_CONFIG_TOPIC = 2


def _why(who: Who, operation: str, what: str) -> str:
    return f"{who.principal} may not {operation} {what} (no ACL allows it; see tidelog acl list)"


class Checks:
    """The per-RPC checks of one broker, over its Gate."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def _denied(self, who: Who, operation: str, kind: str, names: Iterable[str]) -> set[str]:
        return {n for n in set(names) if not self.gate.allows(who, operation, kind, n)}

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
                    error_message=_why(who, "Describe", f"topic {topic.name!r}")))
        del response.topics[:]
        response.topics.extend(kept)
        return response

    # --- data plane ---------------------------------------------------------------------------
    async def produce(self, who: Who, request: pb.ProduceRequest,
                      handle: Callable[[pb.ProduceRequest], Awaitable[pb.ProduceResponse]]
                      ) -> pb.ProduceResponse:
        denied = self._denied(who, "Write", "topic", (t.name for t in request.topics))
        if not denied:
            return await handle(request)
        kept = pb.ProduceRequest()
        kept.CopyFrom(request)
        del kept.topics[:]
        kept.topics.extend(t for t in request.topics if t.name not in denied)
        response = await handle(kept) if kept.topics else pb.ProduceResponse(
            correlation_id=request.correlation_id)
        for t in request.topics:
            if t.name in denied:
                answer = response.topics.add(name=t.name)
                for p in t.partitions:
                    answer.partitions.add(partition_id=p.partition_id, base_offset=-1,
                                          log_append_time_ms=-1, log_start_offset=-1,
                                          error_code=TOPIC_DENIED,
                                          error_message=_why(who, "Write", f"topic {t.name!r}"))
        return response

    async def fetch(self, who: Who, request: pb.FetchRequest,
                    handle: Callable[[pb.FetchRequest], Awaitable[pb.FetchResponse]]
                    ) -> pb.FetchResponse:
        denied = self._denied(who, "Read", "topic", (t.name for t in request.topics))
        if not denied:
            return await handle(request)
        kept = pb.FetchRequest()
        kept.CopyFrom(request)
        del kept.topics[:]
        kept.topics.extend(t for t in request.topics if t.name not in denied)
        response = await handle(kept) if kept.topics else pb.FetchResponse()
        for t in request.topics:
            if t.name in denied:
                answer = response.topics.add(name=t.name, topic_id=t.topic_id)
                for p in t.partitions:
                    answer.partitions.add(partition_id=p.partition_id, high_watermark=-1,
                                          last_stable_offset=-1, log_start_offset=-1,
                                          log_end_offset=-1, error_code=TOPIC_DENIED,
                                          error_message=_why(who, "Read", f"topic {t.name!r}"))
        return response

    async def list_offsets(self, who: Who, request: pb.ListOffsetsRequest,
                           handle: Callable[[pb.ListOffsetsRequest],
                                            Awaitable[pb.ListOffsetsResponse]]
                           ) -> pb.ListOffsetsResponse:
        denied = self._denied(who, "Describe", "topic", (t.name for t in request.topics))
        if not denied:
            return await handle(request)
        kept = pb.ListOffsetsRequest(isolation_level=request.isolation_level)
        kept.topics.extend(t for t in request.topics if t.name not in denied)
        response = await handle(kept) if kept.topics else pb.ListOffsetsResponse()
        for t in request.topics:
            if t.name in denied:
                answer = response.topics.add(name=t.name)
                for p in t.partitions:
                    answer.partitions.add(partition_id=p.partition_id, timestamp=-1, offset=-1,
                                          leader_epoch=-1, error_code=TOPIC_DENIED,
                                          error_message=_why(who, "Describe",
                                                             f"topic {t.name!r}"))
        return response

    async def describe_logs(self, who: Who, request: pb.DescribeLogsRequest,
                            handle: Callable[[pb.DescribeLogsRequest],
                                             Awaitable[pb.DescribeLogsResponse]]
                            ) -> pb.DescribeLogsResponse:
        denied = self._denied(who, "Describe", "topic", (t.name for t in request.topics))
        if not denied:
            return await handle(request)
        kept = pb.DescribeLogsRequest()
        kept.topics.extend(t for t in request.topics if t.name not in denied)
        response = await handle(kept)
        for t in request.topics:
            if t.name in denied:
                for pid in t.partitions:
                    response.partitions.add(topic=t.name, partition_id=pid,
                                            error_code=TOPIC_DENIED)
        return response

    def init_producer_id(self, who: Who) -> pb.InitProducerIdResponse | None:
        """None when allowed, else the refusal."""
        if not self.gate.enabled or self.cluster(who, "IdempotentWrite") or \
                self.gate.allows_any_topic(who, "Write"):
            return None
        return pb.InitProducerIdResponse(
            error_code=CLUSTER_DENIED, producer_id=-1, producer_epoch=-1,
            error_message=f"{who.principal} may not write idempotently: it needs Write on a "
                          f"topic or IdempotentWrite on the cluster")

    # --- admin (forwarded to the controller: all or nothing) ---------------------------------
    def admin(self, who: Who, method: str, request: Any,
              topic_names_by_id: Callable[[bytes], str | None] = lambda _: None) -> str | None:
        """Why ``request`` is refused (one line naming each refused item), or None.
        ``topic_names_by_id``: DeleteTopics may name topics by id."""
        if not self.gate.enabled:
            return None
        if method == "CreateTopics":
            if self.cluster(who, "Create"):
                return None
            return self._refused(who, "Create", "topic", (t.name for t in request.topics))
        if method == "DeleteTopics":
            by_id = [n for n in map(topic_names_by_id, request.topic_ids) if n is not None]
            return self._refused(who, "Delete", "topic", [*request.names, *by_id])
        if method == "CreatePartitions":
            return self._refused(who, "Alter", "topic", (t.name for t in request.topics))
        if method in ("AlterConfigs", "DescribeConfigs"):
            op = method
            topics = [r.resource_name for r in request.resources
                      if r.resource_type == _CONFIG_TOPIC]
            if len(topics) < len(request.resources) and not self.cluster(who, op):
                return _why(who, op, "the cluster's (broker) configs")
            return self._refused(who, op, "topic", topics)
        if method in ("DescribeQuorum", "DescribeAcls"):
            return None if self.cluster(who, "Describe") else _why(who, "Describe",
                                                                    "the cluster")
        if method in ("CreateAcls", "DeleteAcls"):
            return None if self.cluster(who, "Alter") else _why(who, "Alter", "the cluster "
                                                                 "(its ACLs)")
        return None

    def _refused(self, who: Who, operation: str, kind: str, names: Iterable[str]) -> str | None:
        denied = sorted(self._denied(who, operation, kind, names))
        if not denied:
            return None
        return _why(who, operation, f"{kind}s {', '.join(repr(d) for d in denied)}")

    # --- groups ---------------------------------------------------------------------------------
    def group(self, who: Who, operation: str, group_id: str) -> str | None:
        if self.gate.allows(who, operation, "group", group_id):
            return None
        return _why(who, operation, f"group {group_id!r}")

    def topics_denied(self, who: Who, operation: str, names: Iterable[str]) -> set[str]:
        return self._denied(who, operation, "topic", names) if self.gate.enabled else set()

    def groups_denied(self, who: Who, operation: str, names: Iterable[str]) -> set[str]:
        return self._denied(who, operation, "group", names) if self.gate.enabled else set()


def refused_admin_response(method: str, why: str) -> Any:
    """The answer to a refused admin request: the request's response type with a top-level
    CLUSTER/TOPIC_AUTHORIZATION_FAILED and the reason."""
    code = TOPIC_DENIED if method in ("CreateTopics", "DeleteTopics", "CreatePartitions") or \
        "topic" in why else CLUSTER_DENIED
    if method == "DescribeAcls":
        return pb.DescribeAclsResponse(error_code=CLUSTER_DENIED, error_message=why)
    response = getattr(cpb, f"{method}Response")()
    if method in ("CreateAcls", "DeleteAcls"):
        return response  # filled per item by the caller
    response.error_code = code
    response.error_message = why
    return response
