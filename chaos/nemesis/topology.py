"""What a fault needs to know about a running cluster: its nodes and its active controller.

Read from :class:`tidelog.local_cluster.LocalCluster` (names, roles, ports) and, for the
active controller, from DescribeQuorum answers of the running controllers over gRPC (each call
bounded by ``timeout_s``). These are the only reads of the cluster the nemeses make.
"""

from __future__ import annotations

import collections

import grpc

from tidelog.chaos.nemesis.plan import Node, Role
from tidelog.local_cluster import LocalCluster
from tidelog.v1 import controller_pb2, controller_pb2_grpc

__all__ = ["active_controller", "nodes_of"]

DESCRIBE_TIMEOUT_S = 1.0


def nodes_of(cluster: LocalCluster) -> list[Node]:
    """Every node of the cluster, for the planner."""
    nodes = []
    for spec in cluster.nodes.values():
        roles: set[Role] = set()
        if spec.is_controller:
            roles.add("controller")
        if spec.is_broker:
            roles.add("broker")
        nodes.append(Node(spec.name, frozenset(roles)))
    return nodes


def active_controller(cluster: LocalCluster, *, timeout_s: float = DESCRIBE_TIMEOUT_S) -> str:
    """The name of the controller most running controllers name as leader (LookupError when
    none answers with a leader)."""
    votes: collections.Counter[int] = collections.Counter()
    for spec in cluster.controllers():
        if not cluster.is_running(spec.name):
            continue
        with cluster.peer_channel(f"{spec.host}:{spec.controller_port}") as channel:
            stub = controller_pb2_grpc.ControllerServiceStub(channel)
            try:
                answer = stub.DescribeQuorum(controller_pb2.DescribeQuorumRequest(),
                                             timeout=timeout_s)
            except grpc.RpcError:
                continue
        if answer.leader_id >= 0:
            votes[int(answer.leader_id)] += 1
    for node_id, _ in votes.most_common():
        for spec in cluster.controllers():
            if spec.node_id == node_id:
                return spec.name
    raise LookupError("no running controller names a leader")
