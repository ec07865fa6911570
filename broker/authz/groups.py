"""The group RPCs' checks (the table in broker/authz/rpcs.py): refused groups and topics get
GROUP/TOPIC_AUTHORIZATION_FAILED in their own entries; the rest is served."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tidelog.broker.authz.principal import Who
from tidelog.broker.authz.rpcs import (
    GROUP_DENIED,
    TOPIC_DENIED,
    Checks,
    Refusal,
    serve_allowed,
    why_refused,
)
from tidelog.v1 import broker_pb2 as pb

__all__ = ["GroupChecks"]


class GroupChecks:
    def __init__(self, checks: Checks) -> None:
        self.checks = checks

    @property
    def enabled(self) -> bool:
        return self.checks.gate.enabled

    async def find_coordinator(self, who: Who, request: pb.FindCoordinatorRequest,
                               handle: Callable[[pb.FindCoordinatorRequest],
                                                Awaitable[pb.FindCoordinatorResponse]]
                               ) -> pb.FindCoordinatorResponse:
        denied = self.checks.groups_denied(who, "Describe", request.group_ids)
        if not denied:
            return await handle(request)
        kept = pb.FindCoordinatorRequest(group_ids=[g for g in request.group_ids
                                                    if g not in denied])
        response = await handle(kept) if kept.group_ids else pb.FindCoordinatorResponse()
        for g in sorted(denied):
            response.coordinators.add(group_id=g, error_code=GROUP_DENIED, node_id=-1,
                                      error_message=why_refused(who, "Describe", f"group {g!r}"))
        return response

    def heartbeat(self, who: Who, request: pb.ConsumerGroupHeartbeatRequest
                  ) -> pb.ConsumerGroupHeartbeatResponse | None:
        """Read on the group, and Describe on every topic it subscribes to by name (Kafka 4's
        check: a member must not learn of topics by subscribing to them; TOPIC_AUTHORIZATION_
        FAILED names them). A regex subscription matches only the topics the member may
        describe; the coordinator resolves it so (broker.group.topic_regex)."""
        if not self.enabled:
            return None
        why = self.checks.group(who, "Read", request.group_id)
        if why is not None:
            return pb.ConsumerGroupHeartbeatResponse(error_code=GROUP_DENIED, error_message=why)
        denied = self.checks.topics_denied(who, "Describe", request.subscribed_topic_names)
        if not denied:
            return None
        return pb.ConsumerGroupHeartbeatResponse(
            error_code=TOPIC_DENIED, error_message=why_refused(
                who, "Describe", "topics " + ", ".join(repr(n) for n in sorted(denied))
                + " (subscribed to by name)"))

    async def offset_commit(self, who: Who, request: pb.OffsetCommitRequest,
                            handle: Callable[[pb.OffsetCommitRequest],
                                             Awaitable[pb.OffsetCommitResponse]]
                            ) -> pb.OffsetCommitResponse:
        if not self.enabled:
            return await handle(request)
        why = self.checks.group(who, "Read", request.group_id)
        if why is not None:
            return pb.OffsetCommitResponse(error_code=GROUP_DENIED, error_message=why)

        def answer(response: pb.OffsetCommitResponse, t: Any, refusal: Refusal) -> None:
            entry = response.topics.add(name=t.name)
            for p in t.partitions:
                entry.partitions.add(partition_id=p.partition_id, error_code=refusal.code,
                                     error_message=refusal.why)

        refused = self.checks.topic_entries_refused(who, "Read", request.topics)
        return await serve_allowed(request, refused, handle, answer, pb.OffsetCommitResponse)

    async def offset_fetch(self, who: Who, request: pb.OffsetFetchRequest,
                           handle: Callable[[pb.OffsetFetchRequest],
                                            Awaitable[pb.OffsetFetchResponse]]
                           ) -> pb.OffsetFetchResponse:
        if not self.enabled:
            return await handle(request)
        why = self.checks.group(who, "Describe", request.group_id)
        if why is not None:
            return pb.OffsetFetchResponse(error_code=GROUP_DENIED, error_message=why)
        response = await handle(request)
        # A topic asked for that it may not describe: TOPIC_AUTHORIZATION_FAILED and no
        # offsets. Asked for all: the topics it may not describe are left out (Kafka's
        # OffsetFetch), so their names do not show either.
        denied = self.checks.topics_denied(who, "Describe", (t.name for t in response.topics))
        if not denied:
            return response
        if not request.topics:
            kept = [t for t in response.topics if t.name not in denied]
            del response.topics[:]
            response.topics.extend(kept)
            return response
        for t in response.topics:
            if t.name in denied:
                for p in t.partitions:
                    p.committed_offset, p.committed_leader_epoch, p.lag = -1, -1, -1
                    p.metadata = ""
                    p.error_code = TOPIC_DENIED
        return response

    async def list_groups(self, who: Who, request: pb.ListGroupsRequest,
                          handle: Callable[[pb.ListGroupsRequest],
                                           Awaitable[pb.ListGroupsResponse]]
                          ) -> pb.ListGroupsResponse:
        response = await handle(request)
        if not self.enabled or self.checks.cluster(who, "Describe"):
            return response
        denied = self.checks.groups_denied(who, "Describe", (g.group_id for g in response.groups))
        kept = [g for g in response.groups if g.group_id not in denied]
        del response.groups[:]
        response.groups.extend(kept)
        return response

    async def describe_groups(self, who: Who, request: pb.DescribeGroupsRequest,
                              handle: Callable[[pb.DescribeGroupsRequest],
                                               Awaitable[pb.DescribeGroupsResponse]]
                              ) -> pb.DescribeGroupsResponse:
        denied = self.checks.groups_denied(who, "Describe", request.group_ids)
        kept = pb.DescribeGroupsRequest(group_ids=[g for g in request.group_ids
                                                   if g not in denied])
        response = await handle(kept) if kept.group_ids else pb.DescribeGroupsResponse()
        if self.enabled:
            for group in response.groups:
                self._hide_undescribable_topics(who, group)
        for g in sorted(denied):
            response.groups.add(group_id=g, error_code=GROUP_DENIED,
                                error_message=why_refused(who, "Describe", f"group {g!r}"))
        return response

    def _hide_undescribable_topics(self, who: Who, group: pb.DescribeGroupsResponse.Group
                                   ) -> None:
        """A group whose members subscribe to, or are assigned, a topic the caller may not
        describe is answered TOPIC_AUTHORIZATION_FAILED without its members (Kafka 4's
        ConsumerGroupDescribe): its members' subscriptions and assignments would name it."""
        names = {name for m in group.members for name in m.subscribed_topic_names}
        names |= {tp.topic for m in group.members
                  for tp in (*m.assignment, *m.target_assignment)}
        if not self.checks.topics_denied(who, "Describe", names):
            return
        group_id = group.group_id
        group.Clear()
        group.group_id = group_id
        group.error_code = TOPIC_DENIED
        group.error_message = (f"group {group_id!r} uses topics that {who.principal} may not "
                               f"describe")

    async def delete_groups(self, who: Who, request: pb.DeleteGroupsRequest,
                            handle: Callable[[pb.DeleteGroupsRequest],
                                             Awaitable[pb.DeleteGroupsResponse]]
                            ) -> pb.DeleteGroupsResponse:
        denied = self.checks.groups_denied(who, "Delete", request.group_ids)
        if not denied:
            return await handle(request)
        kept = pb.DeleteGroupsRequest(group_ids=[g for g in request.group_ids
                                                 if g not in denied])
        response = await handle(kept) if kept.group_ids else pb.DeleteGroupsResponse()
        for g in sorted(denied):
            response.results.add(group_id=g, error_code=GROUP_DENIED,
                                 error_message=why_refused(who, "Delete", f"group {g!r}"))
        return response

    async def offset_delete(self, who: Who, request: pb.OffsetDeleteRequest,
                            handle: Callable[[pb.OffsetDeleteRequest],
                                             Awaitable[pb.OffsetDeleteResponse]]
                            ) -> pb.OffsetDeleteResponse:
        if not self.enabled:
            return await handle(request)
        why = self.checks.group(who, "Delete", request.group_id)
        if why is not None:
            return pb.OffsetDeleteResponse(error_code=GROUP_DENIED, error_message=why)

        def answer(response: pb.OffsetDeleteResponse, t: Any, refusal: Refusal) -> None:
            entry = response.topics.add(name=t.name)
            for pid in t.partitions:
                entry.partitions.add(partition_id=pid, error_code=refusal.code,
                                     error_message=refusal.why)

        refused = self.checks.topic_entries_refused(who, "Read", request.topics)
        return await serve_allowed(request, refused, handle, answer, pb.OffsetDeleteResponse)
