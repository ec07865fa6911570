"""ControllerService over gRPC: maps each RPC onto the runtime's write or read path.

Writes (everything that changes metadata) go through ``ControllerRuntime.write``: only the
active controller serves them and answers after commit; others answer NOT_CONTROLLER with a hint.
Reads are answered from this controller's own committed view. Only brokers may call it: the
server's tidelog.peer_auth interceptor refuses (UNAUTHENTICATED) every RPC but DescribeQuorum
without a broker credential (and, with [tls], a certificate naming that broker), and the one
id it authenticated acts for itself only. A handler never
lets an exception escape as a gRPC error for a client mistake: malformed input gets
INVALID_REQUEST in the response.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from tidelog.cluster_secret import CONTROLLERS
from tidelog.controller.managers.common import error_response
from tidelog.controller.runtime import ControllerRuntime
from tidelog.errors import TidelogError, UnknownServerError
from tidelog.peer_auth import PeerAuthInterceptor, RootVerifier, authenticated_broker_id
from tidelog.v1 import controller_pb2 as pb
from tidelog.v1 import controller_pb2_grpc

log = logging.getLogger("tidelog.controller")


class ControllerService(controller_pb2_grpc.ControllerServiceServicer):
    def __init__(self, runtime: ControllerRuntime) -> None:
        self.rt = runtime
        self.logic = runtime.logic

    async def _write(self, handler: Any, request: Any, response_type: type[Any]) -> Any:
        rpc = response_type.__name__.removesuffix("Response")
        try:
            return await self.rt.write(rpc, handler, request, response_type)
        except TidelogError as e:
            return error_response(response_type, request, e)
        except Exception:
            log.exception("controller %d: unexpected error in %s", self.rt.node_id,
                          response_type.__name__)
            return error_response(response_type, request,
                                  UnknownServerError("unexpected controller error; see its log"))

    async def _check_broker_id(self, broker_id: int, context: Any) -> None:
        """A broker's credential acts for its own id only: broker 1 cannot heartbeat, register
        or change ISRs as broker 2 (PERMISSION_DENIED)."""
        peer = authenticated_broker_id()
        if peer is not None and broker_id >= 0 and peer != broker_id:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"broker {peer}'s credential cannot act as broker {broker_id}")

    async def RegisterBroker(self, request: pb.RegisterBrokerRequest, context: Any) -> Any:
        await self._check_broker_id(request.broker_id, context)
        return await self._write(self.logic.handle_register_broker, request,
                                 pb.RegisterBrokerResponse)

    async def BrokerHeartbeat(self, request: pb.BrokerHeartbeatRequest, context: Any) -> Any:
        await self._check_broker_id(request.broker_id, context)
        if request.unreachable_brokers:
            self.rt.prober.on_unreachable_reported(request.broker_id,
                                                   list(request.unreachable_brokers))
        return await self._write(self.logic.handle_broker_heartbeat, request,
                                 pb.BrokerHeartbeatResponse)

    async def AlterPartition(self, request: pb.AlterPartitionRequest, context: Any) -> Any:
        await self._check_broker_id(request.broker_id, context)
        return await self._write(self.logic.handle_alter_partition, request,
                                 pb.AlterPartitionResponse)

    async def CreateTopics(self, request: pb.CreateTopicsRequest, context: Any) -> Any:
        return await self._write(self.logic.handle_create_topics, request,
                                 pb.CreateTopicsResponse)

    async def DeleteTopics(self, request: pb.DeleteTopicsRequest, context: Any) -> Any:
        return await self._write(self.logic.handle_delete_topics, request,
                                 pb.DeleteTopicsResponse)

    async def CreatePartitions(self, request: pb.CreatePartitionsRequest, context: Any) -> Any:
        return await self._write(self.logic.handle_create_partitions, request,
                                 pb.CreatePartitionsResponse)

    async def AlterConfigs(self, request: pb.AlterConfigsRequest, context: Any) -> Any:
        return await self._write(self.logic.handle_alter_configs, request,
                                 pb.AlterConfigsResponse)

    async def AllocateProducerIds(self, request: pb.AllocateProducerIdsRequest,
                                  context: Any) -> Any:
        await self._check_broker_id(request.broker_id, context)
        return await self._write(self.logic.handle_allocate_producer_ids, request,
                                 pb.AllocateProducerIdsResponse)

    async def CreateAcls(self, request: pb.CreateAclsRequest, context: Any) -> Any:
        return await self._write(self.logic.handle_create_acls, request, pb.CreateAclsResponse)

    async def DeleteAcls(self, request: pb.DeleteAclsRequest, context: Any) -> Any:
        return await self._write(self.logic.handle_delete_acls, request, pb.DeleteAclsResponse)

    async def AlterUserScramCredentials(self, request: pb.AlterUserScramCredentialsRequest,
                                        context: Any) -> Any:
        return await self._write(self.logic.handle_alter_user_scram_credentials, request,
                                 pb.AlterUserScramCredentialsResponse)

    async def DescribeConfigs(self, request: pb.DescribeConfigsRequest, context: Any) -> Any:
        try:
            return self.rt.read(self.logic.handle_describe_configs, request)
        except TidelogError as e:
            return pb.DescribeConfigsResponse(error_code=e.code,  # type: ignore[arg-type]
                                              error_message=e.message)

    async def DescribeQuorum(self, request: pb.DescribeQuorumRequest, context: Any) -> Any:
        return self.rt.describe_quorum()

    async def FetchMetadata(self, request: pb.FetchMetadataRequest, context: Any) -> Any:
        await self._check_broker_id(request.broker_id, context)
        async for response in self.rt.streamer.stream(request, context.cancelled):
            yield response


#: The one RPC open to anyone who can reach the controller port: the CLI's `cluster quorum`.
OPEN_METHODS = frozenset({"/tidelog.v1.ControllerService/DescribeQuorum"})


def peer_auth_interceptor(secret: str | None, *, tls: bool) -> PeerAuthInterceptor:
    """The controller listener's gate: every RPC but DescribeQuorum needs a broker credential,
    checked against the cluster secret, and with ``tls`` a certificate naming that broker
    (brokers forward clients' admin requests, so clients never call controllers directly)."""
    verifier = RootVerifier(secret, audience=CONTROLLERS) if secret is not None else None
    return PeerAuthInterceptor(verifier, listener="the controller listener", tls=tls,
                               open_methods=OPEN_METHODS)


def add_to_server(server: grpc.aio.Server, runtime: ControllerRuntime) -> None:
    controller_pb2_grpc.add_ControllerServiceServicer_to_server(ControllerService(runtime), server)
