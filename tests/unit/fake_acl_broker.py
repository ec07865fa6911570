"""An in-process fake of the BrokerService's ACL RPCs (CreateAcls, DeleteAcls, DescribeAcls), for
the Admin's and the CLI's unit tests.

Not a broker: a gRPC server on 127.0.0.1 that keeps bindings in a list and answers as the
contract says (proto/tidelog/v1/controller.proto and broker.proto): one CreateAclResult per
creation in order (INVALID_REQUEST for a binding tidelog.acl refuses, an existing binding
succeeds without a second copy), one DeleteAclsFilterResult per filter with what it removed, and
DescribeAcls' bindings matching the filter. Every other RPC is UNIMPLEMENTED. Knobs:

* ``not_controller_rounds = n``: the next n CreateAcls/DeleteAcls requests answer every item
  NOT_CONTROLLER without applying anything (a broker that found no active controller);
* ``refuse = "..."``: every request is CLUSTER_AUTHORIZATION_FAILED with that message;
* ``requests``: each ACL request received, in order (to check what the client sent).
"""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any

import grpc

from tidelog.acl import (
    AclBinding,
    binding_from_proto,
    binding_to_proto,
    filter_from_proto,
)
from tidelog.errors import ErrorCode
from tidelog.v1 import broker_pb2, broker_pb2_grpc, controller_pb2


class FakeAclBroker(broker_pb2_grpc.BrokerServiceServicer):
    def __init__(self) -> None:
        self.bindings: list[AclBinding] = []
        self.requests: list[Any] = []
        self.not_controller_rounds = 0
        self.refuse = ""
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        broker_pb2_grpc.add_BrokerServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> FakeAclBroker:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)

    def _refused_or_not_controller(self) -> tuple[int, str] | None:
        if self.refuse:
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, self.refuse
        if self.not_controller_rounds > 0:
            self.not_controller_rounds -= 1
            return ErrorCode.NOT_CONTROLLER, "no active controller yet"
        return None

    def CreateAcls(self, request: controller_pb2.CreateAclsRequest,
                   context: Any) -> controller_pb2.CreateAclsResponse:
        with self._lock:
            self.requests.append(request)
            response = controller_pb2.CreateAclsResponse()
            error = self._refused_or_not_controller()
            for p in request.creations:
                binding = binding_from_proto(p)
                problem = binding.problem()
                if error is not None:
                    response.results.add(error_code=error[0], error_message=error[1])
                elif problem is not None:
                    response.results.add(error_code=ErrorCode.INVALID_REQUEST,
                                         error_message=problem)
                else:
                    if binding not in self.bindings:
                        self.bindings.append(binding)
                    response.results.add()
            return response

    def DeleteAcls(self, request: controller_pb2.DeleteAclsRequest,
                   context: Any) -> controller_pb2.DeleteAclsResponse:
        with self._lock:
            self.requests.append(request)
            response = controller_pb2.DeleteAclsResponse()
            error = self._refused_or_not_controller()
            for p in request.filters:
                if error is not None:
                    response.results.add(error_code=error[0], error_message=error[1])
                    continue
                wanted = filter_from_proto(p)
                gone = [b for b in self.bindings if wanted.matches(b)]
                self.bindings = [b for b in self.bindings if b not in gone]
                response.results.add(deleted=[binding_to_proto(b) for b in gone])
            return response

    def DescribeAcls(self, request: broker_pb2.DescribeAclsRequest,
                     context: Any) -> broker_pb2.DescribeAclsResponse:
        with self._lock:
            self.requests.append(request)
            if self.refuse:
                return broker_pb2.DescribeAclsResponse(
                    error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=self.refuse)
            wanted = filter_from_proto(request.filter)
            return broker_pb2.DescribeAclsResponse(
                bindings=[binding_to_proto(b) for b in self.bindings if wanted.matches(b)])
