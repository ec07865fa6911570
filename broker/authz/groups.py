"""The group RPCs' checks (the table in broker/authz/rpcs.py): refused groups and topics get
GROUP/TOPIC_AUTHORIZATION_FAILED in their own entries; the rest is served."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from broker.authz.principal import Who
from broker.authz.rpcs import GROUP_DENIED, TOPIC_DENIED, Checks, serve_allowed, why_refused
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
        why = self.checks.group(who, "Read", request.group_id) if self.enabled else None
        if why is None:
            return None
        return pb.ConsumerGroupHeartbeatResponse(error_code=GROUP_DENIED, error_message=why)

    async def offset_commit(self, who: Who, request: pb.OffsetCommitRequest,
                            handle: Callable[[pb.OffsetCommitRequest],
                                             Awaitable[pb.OffsetCommitResponse]]
                            ) -> pb.OffsetCommitResponse:
        if not self.enabled:
            return await handle(request)
        why = self.checks.group(who, "Read", request.group_id)
        if why is not None:
            return pb.OffsetCommitResponse(error_code=GROUP_DENIED, error_message=why)

        def answer(response: pb.OffsetCommitResponse, t: Any) -> None:
            entry = response.topics.add(name=t.name)
            for p in t.partitions:
                entry.partitions.add(partition_id=p.partition_id, error_code=TOPIC_DENIED,
                                     error_message=why_refused(who, "Read", f"topic {t.name!r}"))

        denied = self.checks.topics_denied(who, "Read", (t.name for t in request.topics))
        return await serve_allowed(request, denied, handle, answer, pb.OffsetCommitResponse)

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
        # Every committed topic (or those asked for) the principal may not describe: no offsets.
        denied = self.checks.topics_denied(who, "Describe", (t.name for t in response.topics))
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
        if not denied:
            return await handle(request)
        kept = pb.DescribeGroupsRequest(group_ids=[g for g in request.group_ids
                                                   if g not in denied])
        response = await handle(kept) if kept.group_ids else pb.DescribeGroupsResponse()
        for g in sorted(denied):
            response.groups.add(group_id=g, error_code=GROUP_DENIED,
                                error_message=why_refused(who, "Describe", f"group {g!r}"))
        return response

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

        def answer(response: pb.OffsetDeleteResponse, t: Any) -> None:
            entry = response.topics.add(name=t.name)
            for pid in t.partitions:
                entry.partitions.add(partition_id=pid, error_code=TOPIC_DENIED,
                                     error_message=why_refused(who, "Read", f"topic {t.name!r}"))

        denied = self.checks.topics_denied(who, "Read", (t.name for t in request.topics))
        return await serve_allowed(request, denied, handle, answer, pb.OffsetDeleteResponse)
