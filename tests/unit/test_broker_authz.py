"""broker/authz without a cluster: the principal's host, and how refused parts of a request are
answered while the rest is served (the Gate over a real metadata image's ACLs)."""

from __future__ import annotations

import asyncio
import dataclasses
from types import MappingProxyType

from broker.authz.gate import Gate
from broker.authz.principal import Who, peer_host
from broker.authz.rpcs import Checks, Refusal
from tidelog.acl import AclBinding
from tidelog.config import AuthorizationConfig
from tidelog.metadata.image import AclsImage, MetadataImage
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode

ALICE = Who("User:alice", "10.0.0.5")


def checks(*bindings: AclBinding) -> Checks:
    acls = AclsImage.of(MappingProxyType({bytes([i + 1]) * 16: b
                                          for i, b in enumerate(bindings)}))
    image = dataclasses.replace(MetadataImage.empty(), acls=acls)
    return Checks(Gate(AuthorizationConfig(enabled=True), lambda: image))


def test_peer_hosts() -> None:
    assert peer_host("ipv4:10.0.0.5:51234") == "10.0.0.5"
    assert peer_host("ipv6:[::1]:51234") == "::1"
    assert peer_host("unix:/tmp/x") == "unix:/tmp/x"


def test_a_produce_is_served_for_the_topics_it_may_write_and_refused_for_the_others() -> None:
    c = checks(AclBinding("User:alice", "*", "topic", "orders", "literal", "Write", "allow"))
    request = pb.ProduceRequest(acks=-1)
    request.topics.add(name="orders").partitions.add(partition_id=0)
    request.topics.add(name="payments").partitions.add(partition_id=3)
    served: list[list[str]] = []

    async def handle(r: pb.ProduceRequest) -> pb.ProduceResponse:
        served.append([t.name for t in r.topics])
        response = pb.ProduceResponse()
        response.topics.add(name="orders").partitions.add(partition_id=0, base_offset=7)
        return response

    response = asyncio.run(c.produce(ALICE, request, handle))
    assert served == [["orders"]]
    by_name = {t.name: t.partitions[0] for t in response.topics}
    assert by_name["orders"].base_offset == 7
    assert by_name["payments"].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert "User:alice may not Write topic 'payments'" in by_name["payments"].error_message


def test_metadata_leaves_out_what_may_not_be_described() -> None:
    c = checks(AclBinding("User:alice", "*", "topic", "orders", "literal", "Read", "allow"))
    response = pb.MetadataResponse(topics=[pb.TopicMetadata(name="orders"),
                                           pb.TopicMetadata(name="secret")])
    listed = c.metadata(ALICE, pb.MetadataRequest(), response)
    assert [t.name for t in listed.topics] == ["orders"]
    named = pb.MetadataResponse(topics=[pb.TopicMetadata(name="secret")])
    [refused] = c.metadata(ALICE, pb.MetadataRequest(topics=["secret"]), named).topics
    assert refused.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_admin_requests_are_all_or_nothing_and_name_what_is_refused() -> None:
    from tidelog.v1 import controller_pb2 as cpb

    c = checks(AclBinding("User:alice", "*", "topic", "a", "literal", "Create", "allow"))
    request = cpb.CreateTopicsRequest(topics=[cpb.CreateTopicsRequest.Topic(name="a"),
                                              cpb.CreateTopicsRequest.Topic(name="b")])
    assert c.admin(ALICE, "CreateTopics", request) == Refusal(
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        "User:alice may not Create topics 'b' (no ACL allows it; see tidelog acl list)")
    cluster = checks(AclBinding("User:alice", "*", "cluster", "kafka-cluster", "literal",
                                "Create", "allow"))
    assert cluster.admin(ALICE, "CreateTopics", request) is None


def test_off_means_every_request_passes() -> None:
    gate = Gate(AuthorizationConfig(), MetadataImage.empty)
    assert gate.allows(ALICE, "Write", "topic", "anything")
    assert Checks(gate).init_producer_id(ALICE) is None
