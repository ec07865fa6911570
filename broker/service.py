"""BrokerService over gRPC: what clients call.

Metadata and DescribeCluster are answered from this broker's metadata image; admin writes are
forwarded to the active controller (through the ControllerClient, which follows NOT_CONTROLLER
and never lets a controller's hint reach the client); produce, fetch, offsets, logs and producer
ids go to the data plane's handlers (``runtime.data_plane``: broker.handlers, one module per
API); the group RPCs to ``runtime.groups`` (broker.handlers.groups, over the group
coordinator's runtime). No handler lets an exception escape as a gRPC error for a
client's mistake: those are error codes in the response.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypeVar

import grpc

from tidelog import limits, scram
from tidelog.acl import binding_to_proto, filter_from_proto
from tidelog.broker.authz.authn import Failure
from tidelog.broker.authz.groups import GroupChecks
from tidelog.broker.authz.principal import ANONYMOUS, Who
from tidelog.broker.authz.rpcs import Checks, refused_admin_response
from tidelog.broker.handlers import DataPlaneHandlers
from tidelog.broker.handlers.consumer_session import ConsumerFetchSession
from tidelog.broker.handlers.groups import client_identity
from tidelog.broker.handlers.metadata import TopicMetadataCache, metadata_response
from tidelog.broker.runtime import BrokerRuntime
from tidelog.broker.stream_limits import ByteSized, StreamLimits, serve_bounded
from tidelog.metadata.image import MetadataImage
from tidelog.peer_auth import authenticated_broker_id
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import broker_pb2_grpc, common_pb2
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode

log = logging.getLogger("tidelog.broker")
Q = TypeVar("Q", bound=ByteSized)
A = TypeVar("A", bound=ByteSized)
#: Who a call is when authorisation is off (never looked at then).
NOBODY = Who(ANONYMOUS, "")

#: What one ProduceStream / FetchStream may hold (see broker.stream_limits).
PRODUCE_STREAM_LIMITS = StreamLimits(limits.PRODUCE_STREAM_IN_FLIGHT_MAX,
                                     limits.STREAM_HELD_BYTES_MAX)
FETCH_STREAM_LIMITS = StreamLimits(limits.FETCH_STREAM_IN_FLIGHT_MAX,
                                   limits.STREAM_HELD_BYTES_MAX)


def describe_scram_users(image: MetadataImage,
                         users: list[str]) -> pb.DescribeUserScramCredentialsResponse:
    """Mechanisms and iterations of the named users (all when none is named), never salts or
    keys; a named user without credentials gets RESOURCE_NOT_FOUND (Kafka's answer)."""
    by_user = image.scram.users()
    response = pb.DescribeUserScramCredentialsResponse()
    for user in dict.fromkeys(users) if users else by_user:
        result = response.results.add(user=user)
        credentials = by_user.get(user)
        if not credentials:
            result.error_code = ErrorCode.RESOURCE_NOT_FOUND
            result.error_message = f"user {user!r} has no SCRAM credentials"
            continue
        for c in credentials:
            result.credential_infos.add(mechanism=c.mechanism,
                                        iterations=c.iterations)
    return response


def produce_error_response(request: pb.ProduceRequest, error: Exception) -> pb.ProduceResponse:
    """UNKNOWN_SERVER_ERROR for every partition of ``request`` (a handler bug, not the
    client's input)."""
    response = pb.ProduceResponse()
    for topic in request.topics:
        answer = response.topics.add(name=topic.name)
        for data in topic.partitions:
            answer.partitions.add(partition_id=data.partition_id, base_offset=-1,
                                  log_append_time_ms=-1, log_start_offset=-1,
                                  error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                                  error_message=f"{type(error).__name__}: {error}")
    return response


class BrokerService(broker_pb2_grpc.BrokerServiceServicer):
    def __init__(self, runtime: BrokerRuntime) -> None:
        self.rt = runtime
        #: ACL checks (broker.authz), a no-op unless [authorization] enabled = true.
        self.checks = Checks(runtime.authz)
        self.group_checks = GroupChecks(self.checks)
        #: Encoded topic entries of Metadata answers, rebuilt only for topics that changed.
        self.topic_metadata = TopicMetadataCache()

    def _who(self, context: Any) -> Who:
        return self.rt.authn.who(context) if self.checks.gate.enabled else NOBODY

    # --- metadata and cluster ------------------------------------------------------------------
    async def Metadata(self, request: pb.MetadataRequest, context: Any) -> pb.MetadataResponse:
        response = metadata_response(self.rt.listener.image, list(request.topics),
                                     cluster_id=self.rt.cluster_id,
                                     controller_id=self.rt.client.active_id or -1,
                                     cache=self.topic_metadata)
        return self.checks.metadata(self._who(context), request, response)

    async def DescribeCluster(self, request: pb.DescribeClusterRequest,
                              context: Any) -> pb.DescribeClusterResponse:
        image = self.rt.listener.image
        response = pb.DescribeClusterResponse(
            cluster_id=self.rt.cluster_id, controller_id=self.rt.client.active_id or -1,
            metadata_offset=image.offset)
        for b in sorted(image.cluster.brokers.values(), key=lambda b: b.broker_id):
            response.brokers.add(broker_id=b.broker_id, rack=b.rack, fenced=b.fenced,
                                 endpoint=common_pb2.Endpoint(host=b.host, port=b.port))
        return response

    # --- admin: forwarded to the active controller ---------------------------------------------
    async def _forward(self, method: str, request: Any, context: Any) -> Any:
        refusal = self.checks.admin(self._who(context), method, request)
        if refusal is not None:
            return refused_admin_response(method, refusal)
        return await self.rt.client.forward(method, request)

    async def CreateTopics(self, request: cpb.CreateTopicsRequest, context: Any) -> Any:
        return await self._forward("CreateTopics", request, context)

    async def DeleteTopics(self, request: cpb.DeleteTopicsRequest, context: Any) -> Any:
        return await self._forward("DeleteTopics", request, context)

    async def CreatePartitions(self, request: cpb.CreatePartitionsRequest, context: Any) -> Any:
        return await self._forward("CreatePartitions", request, context)

    async def AlterConfigs(self, request: cpb.AlterConfigsRequest, context: Any) -> Any:
        return await self._forward("AlterConfigs", request, context)

    async def DescribeConfigs(self, request: cpb.DescribeConfigsRequest, context: Any) -> Any:
        return await self._forward("DescribeConfigs", request, context)

    async def DescribeQuorum(self, request: cpb.DescribeQuorumRequest, context: Any) -> Any:
        return await self._forward("DescribeQuorum", request, context)

    # --- ACLs: writes forwarded to the controller, reads from this broker's image -------------
    async def CreateAcls(self, request: cpb.CreateAclsRequest, context: Any) -> Any:
        refusal = self.checks.admin(self._who(context), "CreateAcls", request)
        if refusal is not None:
            return cpb.CreateAclsResponse(results=[
                cpb.CreateAclResult(error_code=refusal.code, error_message=refusal.why)
                for _ in request.creations])
        return await self.rt.client.forward("CreateAcls", request)

    async def DeleteAcls(self, request: cpb.DeleteAclsRequest, context: Any) -> Any:
        refusal = self.checks.admin(self._who(context), "DeleteAcls", request)
        if refusal is not None:
            return cpb.DeleteAclsResponse(results=[
                cpb.DeleteAclsFilterResult(error_code=refusal.code, error_message=refusal.why)
                for _ in request.filters])
        return await self.rt.client.forward("DeleteAcls", request)

    # --- SCRAM users: changes forwarded to the controller, the rest from this broker's image ---
    async def AlterUserScramCredentials(self, request: cpb.AlterUserScramCredentialsRequest,
                                        context: Any) -> Any:
        refusal = self.checks.admin(self._who(context), "AlterUserScramCredentials", request)
        if refusal is not None:
            return cpb.AlterUserScramCredentialsResponse(results=[
                cpb.AlterUserScramCredentialsResult(user=user, error_code=refusal.code,
                                                    error_message=refusal.why)
                for user in scram.request_users(request)])
        return await self.rt.client.forward("AlterUserScramCredentials", request)

    async def DescribeUserScramCredentials(
            self, request: pb.DescribeUserScramCredentialsRequest,
            context: Any) -> pb.DescribeUserScramCredentialsResponse:
        refusal = self.checks.admin(self._who(context), "DescribeUserScramCredentials", request)
        if refusal is not None:
            return pb.DescribeUserScramCredentialsResponse(error_code=refusal.code,
                                                           error_message=refusal.why)
        return describe_scram_users(self.rt.listener.image, list(request.users))

    async def ScramSalt(self, request: pb.ScramSaltRequest,
                        context: Any) -> pb.ScramSaltResponse:
        problem, salt, iterations = self.rt.authn.salt(request.user, request.mechanism)
        if problem:
            return pb.ScramSaltResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                        error_message=problem)
        return pb.ScramSaltResponse(salt=salt, iterations=iterations)

    async def DescribeAcls(self, request: pb.DescribeAclsRequest,
                           context: Any) -> pb.DescribeAclsResponse:
        refusal = self.checks.admin(self._who(context), "DescribeAcls", request)
        if refusal is not None:
            refused: pb.DescribeAclsResponse = refused_admin_response("DescribeAcls", refusal)
            return refused
        wanted = filter_from_proto(request.filter)
        return pb.DescribeAclsResponse(bindings=[
            binding_to_proto(b) for b in self.rt.listener.image.acls.bindings()
            if wanted.matches(b)])

    # --- data plane: broker.handlers, through runtime.data_plane ------------------------------
    async def Produce(self, request: pb.ProduceRequest, context: Any) -> pb.ProduceResponse:
        return await self.checks.produce(self._who(context), request,
                                         self.rt.data_plane.handle_produce)

    async def ProduceStream(self, requests: AsyncIterator[pb.ProduceRequest],
                            context: Any) -> AsyncIterator[pb.ProduceResponse]:
        """Produce over one stream (see broker.proto): each request is handled as it arrives,
        in its own task (tasks start in arrival order, and a produce appends before its first
        wait, so appends keep the stream's order); answers go out as they complete, with the
        request's correlation_id. When the client ends its side, the answers still owed are
        sent before the stream ends. What the stream holds is bounded (broker.stream_limits):
        past PRODUCE_STREAM_IN_FLIGHT_MAX unanswered requests or STREAM_HELD_BYTES_MAX of
        requests and unsent answers, the broker stops reading it and gRPC pushes back."""
        plane = self.rt.data_plane
        who = self._who(context)

        async def answer(request: pb.ProduceRequest) -> pb.ProduceResponse:
            try:
                response = await self.checks.produce(who, request, plane.handle_produce)
            except Exception as e:  # a bug: answer every partition, keep the stream
                log.exception("broker: a streamed produce failed")
                response = produce_error_response(request, e)
            response.correlation_id = request.correlation_id
            return response

        async for response in self._serve_stream(requests, answer, context,
                                                 PRODUCE_STREAM_LIMITS, ordered=False):
            yield response

    async def Fetch(self, request: pb.FetchRequest, context: Any) -> pb.FetchResponse:
        return await self.checks.fetch(self._who(context), request,
                                       self.rt.data_plane.handle_fetch)

    async def FetchStream(self, requests: AsyncIterator[pb.FetchRequest],
                          context: Any) -> AsyncIterator[pb.FetchResponse]:
        """Consumer fetches over one stream: one answer per request, in order, through the same
        handler as the unary call; at most FETCH_STREAM_IN_FLIGHT_MAX requests read and not
        answered (broker.stream_limits), so a client that never reads is pushed back. A request
        that asks for a fetch session (open_session, or a session epoch) goes to the stream's
        session (broker.handlers.consumer_session), opened with its first such request and
        ended with the stream, however it ends."""

        plane = self.rt.data_plane
        who = self._who(context)
        session: ConsumerFetchSession | None = None

        async def answer(request: pb.FetchRequest) -> pb.FetchResponse:
            nonlocal session
            if not (request.open_session or request.session_epoch):
                return await self.checks.fetch(who, request, plane.handle_fetch)
            if session is None:
                session = plane.open_consumer_fetch_session()
            held = session
            refused = held.refusal_for_acls(self.checks.acl_version())
            if refused is not None:
                return refused
            return await self.checks.fetch(
                who, request, lambda allowed: plane.handle_session_fetch(allowed, held))

        try:
            async for response in self._serve_stream(requests, answer, context,
                                                     FETCH_STREAM_LIMITS, ordered=True):
                yield response
        finally:
            if session is not None:
                session.close()

    async def _serve_stream(self, requests: AsyncIterator[Q], answer: Callable[[Q], Awaitable[A]],
                            context: Any, bounds: StreamLimits, *, ordered: bool
                            ) -> AsyncIterator[A]:
        """A stream's answers (broker.stream_limits.serve_bounded), while its caller's
        credential stands: the SCRAM credential the call was authenticated with is checked
        again at every request read and every answer sent, so a deleted user or a changed
        password ends an open stream at its next message (UNAUTHENTICATED), not when the
        client closes it. ACLs are checked per request already (Checks)."""
        failure: Failure | None = None

        def stands() -> bool:
            nonlocal failure
            if failure is None and self.rt.authn.active:
                failure = self.rt.authn.check(context.invocation_metadata())
            return failure is None

        async def while_standing() -> AsyncIterator[Q]:
            async for request in requests:
                if not stands():
                    return  # as if the client had half-closed: serve_bounded winds down
                yield request

        # aclosing: a stream the client cancels stops the helper's tasks at once, not at GC.
        async with aclosing(serve_bounded(while_standing(), answer, bounds,
                                          ordered=ordered)) as answers:
            async for response in answers:
                if not stands():
                    break
                yield response
        if failure is not None:
            self.rt.authn.report(failure, context.peer() or "")
            await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                f"{failure.details} (checked again while the stream was open)")

    async def ListOffsets(self, request: pb.ListOffsetsRequest,
                          context: Any) -> pb.ListOffsetsResponse:
        return await self.checks.list_offsets(self._who(context), request,
                                              self.rt.data_plane.handle_list_offsets)

    async def InitProducerId(self, request: pb.InitProducerIdRequest,
                             context: Any) -> pb.InitProducerIdResponse:
        refused = self.checks.init_producer_id(self._who(context))
        if refused is not None:
            return refused
        return await self.rt.data_plane.handle_init_producer_id(request)

    async def DescribeLogs(self, request: pb.DescribeLogsRequest,
                           context: Any) -> pb.DescribeLogsResponse:
        return await self.checks.describe_logs(
            self._who(context), request, self.rt.data_plane.handle_describe_logs,
            lambda: pb.DescribeLogsResponse(broker_id=self.rt.broker_id))

    # --- groups: broker.handlers.groups, through runtime.groups -------------------------------
    async def FindCoordinator(self, request: pb.FindCoordinatorRequest,
                              context: Any) -> pb.FindCoordinatorResponse:
        return await self.group_checks.find_coordinator(self._who(context), request,
                                                        self.rt.groups.find_coordinator)

    async def ConsumerGroupHeartbeat(self, request: pb.ConsumerGroupHeartbeatRequest,
                                     context: Any) -> pb.ConsumerGroupHeartbeatResponse:
        who = self._who(context)
        refused = self.group_checks.heartbeat(who, request)
        if refused is not None:
            return refused
        # The principal goes with the member: its subscriptions match only what it may see.
        client = client_identity(context.peer(), context.invocation_metadata() or (),
                                 principal=who.principal if self.checks.gate.enabled else "")
        return await self.rt.groups.consumer_group_heartbeat(request, client)

    async def OffsetCommit(self, request: pb.OffsetCommitRequest,
                           context: Any) -> pb.OffsetCommitResponse:
        return await self.group_checks.offset_commit(self._who(context), request,
                                                     self.rt.groups.offset_commit)

    async def OffsetFetch(self, request: pb.OffsetFetchRequest,
                          context: Any) -> pb.OffsetFetchResponse:
        return await self.group_checks.offset_fetch(self._who(context), request,
                                                    self.rt.groups.offset_fetch)

    async def ListGroups(self, request: pb.ListGroupsRequest,
                         context: Any) -> pb.ListGroupsResponse:
        return await self.group_checks.list_groups(self._who(context), request,
                                                   self.rt.groups.list_groups)

    async def DescribeGroups(self, request: pb.DescribeGroupsRequest,
                             context: Any) -> pb.DescribeGroupsResponse:
        return await self.group_checks.describe_groups(self._who(context), request,
                                                       self.rt.groups.describe_groups)

    async def DeleteGroups(self, request: pb.DeleteGroupsRequest,
                           context: Any) -> pb.DeleteGroupsResponse:
        return await self.group_checks.delete_groups(self._who(context), request,
                                                     self.rt.groups.delete_groups)

    async def OffsetDelete(self, request: pb.OffsetDeleteRequest,
                           context: Any) -> pb.OffsetDeleteResponse:
        return await self.group_checks.offset_delete(self._who(context), request,
                                                     self.rt.groups.offset_delete)


class ReplicaService(broker_pb2_grpc.ReplicaServiceServicer):
    """Follower fetches, served on the inter-broker listener only (never the client listener).

    tidelog.peer_auth's interceptor has already refused a caller without a broker credential;
    here the credential's broker id must be the fetch's replica_id (PERMISSION_DENIED
    otherwise), and ``handle_replica_fetch`` checks the broker epoch against the image."""

    def __init__(self, runtime: BrokerRuntime) -> None:
        self.rt = runtime

    async def _check(self, request: pb.FetchRequest, context: Any) -> DataPlaneHandlers:
        peer = authenticated_broker_id()  # the one id the interceptor checked
        if peer is not None and peer != request.replica_id:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"broker {peer}'s credential cannot fetch as replica {request.replica_id}")
        return self.rt.data_plane

    async def Fetch(self, request: pb.FetchRequest, context: Any) -> pb.FetchResponse:
        plane = await self._check(request, context)
        return await plane.handle_replica_fetch(request)

    async def FetchStream(self, requests: AsyncIterator[pb.FetchRequest],
                          context: Any) -> AsyncIterator[pb.FetchResponse]:
        """Fetch over one stream (see ``broker.fetcher``'s module doc): one answer per
        request, in order, through the same handler as the unary call. The stream is the
        follower's fetch session (broker.proto; broker.handlers.fetch.ReplicaFetchSession):
        it opens with the stream and ends with it, however the stream ends."""
        session = self.rt.data_plane.open_replica_fetch_session()
        # The requests are read while one is served, for the follower's answer_now nudges
        # (broker.proto): they wake the round in flight. At most one real request waits.
        waiting: asyncio.Queue[pb.FetchRequest] = asyncio.Queue(maxsize=1)

        async def read() -> None:
            async for request in requests:
                if request.answer_now:
                    session.answer_now()
                else:
                    session.request_read()
                    await waiting.put(request)

        reader = asyncio.ensure_future(read())
        # A failed reader whose failure nobody asked for is not logged as "never retrieved".
        reader.add_done_callback(lambda task: task.cancelled() or task.exception())
        getter: asyncio.Future[pb.FetchRequest] | None = None
        try:
            while True:
                if waiting.empty():
                    if reader.done():
                        reader.result()  # the stream's failure, if it broke, ends this one
                        return
                    getter = asyncio.ensure_future(waiting.get())
                    await asyncio.wait((getter, reader), return_when=asyncio.FIRST_COMPLETED)
                    if not getter.done():
                        getter.cancel()  # the stream ended: look again (one may be waiting)
                        continue
                    request = getter.result()
                else:
                    request = waiting.get_nowait()
                plane = await self._check(request, context)
                yield await plane.handle_replica_fetch(request, session)
        finally:
            # The stream may end (the follower gave up on it) while a getter waits: cancelled
            # here, not left pending for the collector ("Task was destroyed but it is pending").
            if getter is not None:
                getter.cancel()
            reader.cancel()
            session.close()


def add_to_server(server: grpc.aio.Server, runtime: BrokerRuntime) -> None:
    """The client listener: BrokerService only."""
    broker_pb2_grpc.add_BrokerServiceServicer_to_server(BrokerService(runtime), server)


def add_replica_service(server: grpc.aio.Server, runtime: BrokerRuntime) -> None:
    """The inter-broker listener: ReplicaService only (its server carries the peer-auth
    interceptor)."""
    broker_pb2_grpc.add_ReplicaServiceServicer_to_server(ReplicaService(runtime), server)
