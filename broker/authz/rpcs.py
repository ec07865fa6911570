"""What each client RPC requires, and how refused parts are answered (Kafka's checks per API).

| RPC | requires |
|---|---|
| Metadata | Describe on each topic (others left out; TOPIC_AUTHORIZATION_FAILED if named) |
| Produce | Write on each topic |
| Fetch, OffsetCommit (per topic) | Read on each topic |
| ListOffsets, OffsetFetch (per topic) | Describe on each topic |
| DescribeLogs | Describe on each topic (named: refused; all: the others left out) |
| InitProducerId | IdempotentWrite on the cluster, or Write on some topic (KIP-679) |
| CreateTopics | Create on the cluster or on each topic |
| DeleteTopics | Delete on each topic (an id this broker does not know: refused) |
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

**The resource checked is the one acted on.** A request may name a topic by name, by id, or
both (Fetch); the ACL check resolves each entry exactly as the handler will
(``TopicsImage.resolve``: the id when there is one) and authorizes the topic found, never the
name written beside an id. An entry whose name and id are not one topic is
INCONSISTENT_TOPIC_ID, an unknown id UNKNOWN_TOPIC_ID, before any ACL is read.

Topic-level refusals are per topic entry: the refused entries' partitions carry
TOPIC_AUTHORIZATION_FAILED and the rest is served. The admin writes forwarded to the controller
(CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, DescribeConfigs) are all or nothing:
one refused item refuses the request, its message naming each refused item.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tidelog.acl import CLUSTER_NAME
from tidelog.broker.authz.gate import Gate
from tidelog.broker.authz.principal import Who
from tidelog.metadata.image import TopicMismatch
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


async def serve_allowed(request: Q, refused: Mapping[int, Refusal],
                        handle: Callable[[Q], Awaitable[A]],
                        answer_refused: Callable[[A, Any, Refusal], None],
                        empty: Callable[[], A] | None = None) -> A:
    """Serve the topic entries of ``request`` (a message with ``topics``) whose index is not in
    ``refused`` through ``handle``, then let ``answer_refused(response, topic, refusal)`` add
    each refused entry's answer. Nothing left to serve: ``empty()`` is the response (without
    ``empty``, ``handle`` is still called, with no topics)."""
    if not refused:
        return await handle(request)
    kept = type(request)()
    kept.CopyFrom(request)
    del kept.topics[:]
    kept.topics.extend(t for i, t in enumerate(request.topics) if i not in refused)
    response = empty() if empty is not None and not kept.topics else await handle(kept)
    for i, topic in enumerate(request.topics):
        if i in refused:
            answer_refused(response, topic, refused[i])
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

    def may_describe_topic(self, who: Who, name: str) -> bool:
        return self.gate.allows(who, "Describe", "topic", name)

    def _by_name(self, who: Who, operation: str, topics: Iterable[Any]) -> dict[int, Refusal]:
        """Refusals of the entries of a request that names topics by name (``t.name``, which
        is what its handler acts on)."""
        entries = list(topics)
        denied = self._denied(who, operation, "topic", (t.name for t in entries))
        return {i: Refusal(TOPIC_DENIED, why_refused(who, operation, f"topic {t.name!r}"))
                for i, t in enumerate(entries) if t.name in denied}

    def _resolved(self, who: Who, operation: str, topics: Iterable[Any]) -> dict[int, Refusal]:
        """Refusals of the entries of a request that names topics by name or id (``t.name``,
        ``t.topic_id``): each resolved as its handler will resolve it, the topic found is what
        is authorized (see the module doc)."""
        if not self.gate.enabled:
            return {}
        image = self.gate.image().topics
        refused: dict[int, Refusal] = {}
        decided: dict[str, bool] = {}
        for i, t in enumerate(topics):
            found = image.resolve(t.topic_id or None, t.name)
            if isinstance(found, TopicMismatch):
                refused[i] = Refusal(ErrorCode.INCONSISTENT_TOPIC_ID, found.message)
                continue
            if found is None and t.topic_id:
                refused[i] = Refusal(ErrorCode.UNKNOWN_TOPIC_ID,
                                     f"no topic with id {t.topic_id.hex()}")
                continue
            name = found.name if found is not None else t.name
            allowed = decided.get(name)
            if allowed is None:
                allowed = decided[name] = self.gate.allows(who, operation, "topic", name)
            if not allowed:
                shown = repr(t.name) if t.name else f"id {t.topic_id.hex()}"
                refused[i] = Refusal(TOPIC_DENIED, why_refused(who, operation, f"topic {shown}"))
        return refused

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
        def answer(response: pb.ProduceResponse, t: Any, refusal: Refusal) -> None:
            entry = response.topics.add(name=t.name)
            for p in t.partitions:
                entry.partitions.add(partition_id=p.partition_id, base_offset=-1,
                                     log_append_time_ms=-1, log_start_offset=-1,
                                     error_code=refusal.code, error_message=refusal.why)

        return await serve_allowed(
            request, self._by_name(who, "Write", request.topics) if self.gate.enabled else {},
            handle, answer, lambda: pb.ProduceResponse(correlation_id=request.correlation_id))

    async def fetch(self, who: Who, request: pb.FetchRequest,
                    handle: Callable[[pb.FetchRequest], Awaitable[pb.FetchResponse]]
                    ) -> pb.FetchResponse:
        def answer(response: pb.FetchResponse, t: Any, refusal: Refusal) -> None:
            # The entry as the client wrote it: a refused id is not given a name here.
            entry = response.topics.add(name=t.name, topic_id=t.topic_id)
            for p in t.partitions:
                entry.partitions.add(partition_id=p.partition_id, high_watermark=-1,
                                     last_stable_offset=-1, log_start_offset=-1,
                                     log_end_offset=-1, error_code=refusal.code,
                                     error_message=refusal.why)

        return await serve_allowed(request, self._resolved(who, "Read", request.topics),
                                   handle, answer, pb.FetchResponse)

    async def list_offsets(self, who: Who, request: pb.ListOffsetsRequest,
                           handle: Callable[[pb.ListOffsetsRequest],
                                            Awaitable[pb.ListOffsetsResponse]]
                           ) -> pb.ListOffsetsResponse:
        def answer(response: pb.ListOffsetsResponse, t: Any, refusal: Refusal) -> None:
            entry = response.topics.add(name=t.name)
            for p in t.partitions:
                entry.partitions.add(partition_id=p.partition_id, timestamp=-1, offset=-1,
                                     leader_epoch=-1, error_code=refusal.code,
                                     error_message=refusal.why)

        refused = self._by_name(who, "Describe", request.topics) if self.gate.enabled else {}
        return await serve_allowed(request, refused, handle, answer, pb.ListOffsetsResponse)

    async def describe_logs(self, who: Who, request: pb.DescribeLogsRequest,
                            handle: Callable[[pb.DescribeLogsRequest],
                                             Awaitable[pb.DescribeLogsResponse]],
                            empty: Callable[[], pb.DescribeLogsResponse]
                            ) -> pb.DescribeLogsResponse:
        """Named topics it may not describe are refused; without names (every partition
        hosted here) the answer leaves out the topics it may not describe. ``empty`` answers a
        request whose every named topic was refused (a request naming none means all)."""
        if not self.gate.enabled:
            return await handle(request)

        def answer(response: pb.DescribeLogsResponse, t: Any, refusal: Refusal) -> None:
            # A whole topic (no partitions named) is answered as partition -1, as an unknown
            # one is: nothing says how many partitions it has.
            for pid in t.partitions or (-1,):
                response.partitions.add(topic=t.name, partition_id=pid, error_code=refusal.code)

        refused = self._by_name(who, "Describe", request.topics)
        response = await serve_allowed(request, refused, handle, answer, empty)
        named = {t.name for t in request.topics}
        denied = self._denied(who, "Describe", "topic",
                              {p.topic for p in response.partitions} - named)
        if denied:
            kept = [p for p in response.partitions if p.topic not in denied]
            del response.partitions[:]
            response.partitions.extend(kept)
        return response

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
    def admin(self, who: Who, method: str, request: Any) -> Refusal | None:
        """Why ``request`` is refused (one line naming each refused item), or None."""
        if not self.gate.enabled:
            return None
        if method == "CreateTopics":
            if self.cluster(who, "Create"):
                return None
            return self._refused(who, "Create", (t.name for t in request.topics))
        if method == "DeleteTopics":
            return self._delete_topics(who, request)
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

    def _delete_topics(self, who: Who, request: cpb.DeleteTopicsRequest) -> Refusal | None:
        """Delete on every topic named or given by id. An id this broker's image does not
        know cannot be authorized (the controller may know it: the topic was just created),
        so the request is refused with UNKNOWN_TOPIC_ID, which clients retry."""
        topics = self.gate.image().topics
        # Each topic as the client named it (a name, or an id: the refusal must not tell the
        # name of an id it may not delete), with the name it is authorized by.
        named = [(repr(n), n) for n in request.names]
        for topic_id in request.topic_ids:
            topic = topics.get_by_id(topic_id)
            if topic is None:
                return Refusal(ErrorCode.UNKNOWN_TOPIC_ID,
                               f"no topic with id {topic_id.hex()} on this broker (yet): it "
                               f"cannot be authorized; retry, or delete it by name")
            named.append((f"id {topic_id.hex()}", topic.name))
        denied = self._denied(who, "Delete", "topic", (name for _, name in named))
        shown = sorted({what for what, name in named if name in denied})
        if not shown:
            return None
        return Refusal(TOPIC_DENIED, why_refused(who, "Delete", "topics " + ", ".join(shown)))

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

    def topic_entries_refused(self, who: Who, operation: str,
                              topics: Iterable[Any]) -> dict[int, Refusal]:
        """Refusals of a request's topic entries named by name (see :func:`serve_allowed`)."""
        return self._by_name(who, operation, topics) if self.gate.enabled else {}

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
