"""broker/authz without a cluster: the principal's host, and how refused parts of a request are
answered while the rest is served (the Gate over a real metadata image's ACLs)."""

from __future__ import annotations

import asyncio
import dataclasses
from types import MappingProxyType

from tidelog.acl import AclBinding
from tidelog.broker.authz.gate import Gate
from tidelog.broker.authz.principal import Who, peer_host
from tidelog.broker.authz.rpcs import Checks, Refusal
from tidelog.config import AuthorizationConfig
from tidelog.metadata.image import AclsImage, MetadataImage, TopicImage, TopicsImage
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1.common_pb2 import ErrorCode

ALICE = Who("User:alice", "10.0.0.5")


ORDERS_ID, SECRET_ID = b"\x01" * 16, b"\x02" * 16


def checks(*bindings: AclBinding) -> Checks:
    """Checks over an image with topics ``orders`` and ``secret`` (no partitions: the checks
    resolve topics, they never read partitions) and the given bindings."""
    acls = AclsImage.of(MappingProxyType({bytes([i + 1]) * 16: b
                                          for i, b in enumerate(bindings)}))
    topics = {name: TopicImage(name, topic_id, MappingProxyType({}))
              for name, topic_id in (("orders", ORDERS_ID), ("secret", SECRET_ID))}
    image = dataclasses.replace(MetadataImage.empty(), acls=acls, topics=TopicsImage(
        MappingProxyType({t.topic_id: t for t in topics.values()}), MappingProxyType(topics)))
    return Checks(Gate(AuthorizationConfig(enabled=True), lambda: image))


def read(name: str) -> AclBinding:
    return AclBinding("User:alice", "*", "topic", name, "literal", "Read", "allow")


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


def _fetch(*entries: tuple[str, bytes]) -> pb.FetchRequest:
    request = pb.FetchRequest()
    for name, topic_id in entries:
        request.topics.add(name=name, topic_id=topic_id).partitions.add(partition_id=0)
    return request


def _served_fetch(c: Checks, request: pb.FetchRequest
                  ) -> tuple[list[tuple[str, bytes]], dict[tuple[str, bytes], int]]:
    """(the entries the handler got, each answered entry's error code)."""
    served: list[tuple[str, bytes]] = []

    async def handle(r: pb.FetchRequest) -> pb.FetchResponse:
        served.extend((t.name, t.topic_id) for t in r.topics)
        response = pb.FetchResponse()
        for t in r.topics:
            response.topics.add(name=t.name, topic_id=t.topic_id).partitions.add(partition_id=0)
        return response

    response = asyncio.run(c.fetch(ALICE, request, handle))
    return served, {(t.name, t.topic_id): t.partitions[0].error_code for t in response.topics}


def test_a_fetch_is_authorized_for_the_topic_its_id_names_not_the_name_beside_it() -> None:
    c = checks(read("orders"))
    served, codes = _served_fetch(c, _fetch(("orders", SECRET_ID), ("", SECRET_ID),
                                            ("orders", ORDERS_ID), ("", b"\x09" * 16)))
    assert served == [("orders", ORDERS_ID)]
    assert codes == {("orders", SECRET_ID): ErrorCode.INCONSISTENT_TOPIC_ID,
                     ("", SECRET_ID): ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                     ("orders", ORDERS_ID): ErrorCode.NONE,
                     ("", b"\x09" * 16): ErrorCode.UNKNOWN_TOPIC_ID}


def test_describe_logs_never_widens_a_refused_request_to_everything() -> None:
    c = checks(read("orders"))
    requests: list[list[str]] = []

    async def handle(r: pb.DescribeLogsRequest) -> pb.DescribeLogsResponse:
        requests.append([t.name for t in r.topics])
        response = pb.DescribeLogsResponse(broker_id=1)
        for name in [t.name for t in r.topics] or ["orders", "secret"]:
            response.partitions.add(topic=name, partition_id=0, log_end_offset=42)
        return response

    def logs(*names: str) -> list[tuple[str, int, int]]:
        request = pb.DescribeLogsRequest(topics=[pb.DescribeLogsRequest.TopicData(name=n)
                                                 for n in names])
        response = asyncio.run(c.describe_logs(
            ALICE, request, handle, lambda: pb.DescribeLogsResponse(broker_id=1)))
        return [(p.topic, p.partition_id, p.error_code) for p in response.partitions]

    assert logs("secret") == [("secret", -1, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    assert logs() == [("orders", 0, ErrorCode.NONE)]
    assert requests == [[]]  # only the request naming nothing reached the handler


def test_delete_topics_by_an_id_the_broker_does_not_know_is_refused() -> None:
    from tidelog.v1 import controller_pb2 as cpb

    c = checks(AclBinding("User:alice", "*", "topic", "*", "literal", "Delete", "allow"))
    unknown = c.admin(ALICE, "DeleteTopics", cpb.DeleteTopicsRequest(topic_ids=[b"\x09" * 16]))
    assert unknown is not None and unknown.code == ErrorCode.UNKNOWN_TOPIC_ID
    assert c.admin(ALICE, "DeleteTopics", cpb.DeleteTopicsRequest(topic_ids=[SECRET_ID])) is None
    only_orders = checks(AclBinding("User:alice", "*", "topic", "orders", "literal", "Delete",
                                    "allow"))
    refused = only_orders.admin(ALICE, "DeleteTopics",
                                cpb.DeleteTopicsRequest(topic_ids=[SECRET_ID]))
    assert refused is not None and refused.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert "secret" not in refused.why and SECRET_ID.hex() in refused.why
