"""Every client RPC, asked about a topic the caller may not see: nothing of it comes back.

On the cluster of secured_cluster.py (TLS, client certificates, SCRAM users, ACLs), two
principals call **every** method of BrokerService, as its descriptor lists them (a method added
to the contract without probes here fails the test): ``User:nobody`` (no ACLs) and
``User:mallory`` (Read on topic ``public`` and group ``g`` only). Each method gets the requests an
attacker would try: naming ``secret``, naming ``public`` with ``secret``'s topic id, ``secret``'s
id alone, asking for everything (empty lists, the regex ``.*``), and group requests on the group
the super user filled with ``secret``'s offsets and subscriptions.

What must hold, for every answer and every error message: no ``secret`` data (its records'
marker), no size or offset of it (its log end offset and size are numbers nothing else
is), and no name or id of it beyond what the request itself carried (an error may echo what the
caller wrote, never add to it); and no call fails with the broker's own error (UNKNOWN,
INTERNAL): a refusal is an answer. Before the walk the super user's own view shows each of those
things, so the test cannot pass because the data was not there.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from secured_cluster import (
    GROUP,
    PUBLIC,
    SECRET,
    SECRET_MARKER,
    SECRET_RECORDS,
    SecuredCluster,
    running,
)

from tidelog.record_batch import NewRecord, build_batch
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import common_pb2
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode

pytestmark = pytest.mark.integration

#: The super user's group, whose member subscribes to ``secret`` and commits offsets on it.
ADMIN_GROUP = "admins"
CALL_TIMEOUT_S = 10.0
#: Answers of a coordinator still coming up (the offsets topic is created on first use).
COORDINATOR_STARTING = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    yield from running(tmp_path_factory)


@dataclass(frozen=True)
class Secrets:
    topic_id: bytes
    log_end_offset: int
    size_bytes: int

    def leaks(self, request: bytes, answer: bytes, numbers: set[int]) -> list[str]:
        """What of ``secret`` the answer carries that the request did not."""
        found = []
        if SECRET_MARKER in answer:
            found.append("its records")
        for number, what in ((self.log_end_offset, "its log end offset"),
                             (self.log_end_offset - 1, "its last offset"),
                             (self.size_bytes, "its size")):
            if number in numbers:
                found.append(what)
        if SECRET.encode() in answer and SECRET.encode() not in request:
            found.append("its name")
        if self.topic_id not in request and (
                self.topic_id in answer or self.topic_id.hex().encode() in answer):
            found.append("its id")
        return found


def _numbers(message: Message) -> Iterator[int]:
    for field, value in message.ListFields():
        values = value if field.is_repeated else [value]
        for v in values:
            if isinstance(v, Message):
                yield from _numbers(v)
            elif isinstance(v, int) and not isinstance(v, bool):
                yield v


def _batch() -> bytes:
    return build_batch([NewRecord(key=b"k", value=b"attacker")],
                       now_ms=int(time.time() * 1000))


# --- the probes: method name -> requests (a streaming method: each entry is one stream) -------


def _fetch(*topics: tuple[str, bytes], **fields: Any) -> pb.FetchRequest:
    request = pb.FetchRequest(replica_id=-1, max_wait_ms=0, max_bytes=1 << 20, **fields)
    for name, topic_id in topics:
        request.topics.add(name=name, topic_id=topic_id).partitions.add(
            partition_id=0, fetch_offset=0, current_leader_epoch=-1, last_fetched_epoch=-1,
            partition_max_bytes=1 << 20)
    return request


def _produce(name: str) -> pb.ProduceRequest:
    request = pb.ProduceRequest(acks=1, timeout_ms=5_000)
    request.topics.add(name=name).partitions.add(partition_id=0, batch=_batch())
    return request


def _offsets(name: str, timestamp: int) -> pb.ListOffsetsRequest:
    request = pb.ListOffsetsRequest()
    request.topics.add(name=name).partitions.add(partition_id=0, timestamp=timestamp,
                                                 current_leader_epoch=-1)
    return request


def _heartbeat(group: str, *, names: Iterable[str] = (), regex: str = "",
               owned: bytes = b"") -> pb.ConsumerGroupHeartbeatRequest:
    request = pb.ConsumerGroupHeartbeatRequest(
        group_id=group, member_epoch=0, rebalance_timeout_ms=30_000,
        subscribed_topic_names=list(names), subscribed_topic_regex=regex,
        subscription_changed=True)
    if owned:
        request.owned_partitions.add(topic_id=owned, partitions=[0])
    return request


def _commit(group: str, name: str) -> pb.OffsetCommitRequest:
    request = pb.OffsetCommitRequest(group_id=group, member_epoch=-1)
    request.topics.add(name=name).partitions.add(partition_id=0, committed_offset=1,
                                                 committed_leader_epoch=-1)
    return request


def _logs(*names: str) -> pb.DescribeLogsRequest:
    return pb.DescribeLogsRequest(topics=[pb.DescribeLogsRequest.TopicData(name=n)
                                          for n in names])


def _acl_request(name: str) -> cpb.CreateAclsRequest:
    """A binding that would let the caller read ``name``: a self-grant."""
    return cpb.CreateAclsRequest(creations=[common_pb2.AclBinding(
        principal="User:*", host="*", resource_type="topic", resource_name=name,
        pattern_type="literal", operation="Read", permission="allow")])


def probes(secret_id: bytes) -> dict[str, list[Any]]:
    """What each BrokerService method is asked (see the module doc)."""
    unknown_id = bytes(range(16))
    fetches = [_fetch((SECRET, b"")), _fetch((PUBLIC, secret_id)), _fetch(("", secret_id)),
               _fetch((PUBLIC, b""), ("", secret_id))]
    return {
        "Metadata": [pb.MetadataRequest(), pb.MetadataRequest(topics=[SECRET]),
                     pb.MetadataRequest(topics=[PUBLIC, SECRET])],
        "Produce": [_produce(SECRET), _produce(PUBLIC)],
        "ProduceStream": [[_produce(SECRET), _produce(PUBLIC)]],
        "Fetch": fetches,
        "FetchStream": [fetches, [_fetch((PUBLIC, b""), open_session=True),
                                  _fetch((SECRET, b""), ("", secret_id), open_session=True)]],
        "ListOffsets": [_offsets(SECRET, -1), _offsets(SECRET, -2), _offsets(SECRET, 0)],
        "InitProducerId": [pb.InitProducerIdRequest(producer_id=-1, producer_epoch=-1)],
        "CreateTopics": [cpb.CreateTopicsRequest(topics=[
            cpb.CreateTopicsRequest.Topic(name=SECRET, num_partitions=1,
                                          replication_factor=1)])],
        "DeleteTopics": [cpb.DeleteTopicsRequest(names=[SECRET]),
                         cpb.DeleteTopicsRequest(topic_ids=[secret_id]),
                         cpb.DeleteTopicsRequest(topic_ids=[unknown_id])],
        "CreatePartitions": [cpb.CreatePartitionsRequest(topics=[
            cpb.CreatePartitionsRequest.Topic(name=SECRET, count=9)])],
        "AlterConfigs": [cpb.AlterConfigsRequest(resources=[
            cpb.AlterConfigsRequest.Resource(resource_type=2, resource_name=SECRET, ops=[
                cpb.AlterConfigsRequest.Op(name="retention.ms", value="1")])])],
        "DescribeConfigs": [cpb.DescribeConfigsRequest(resources=[
            cpb.DescribeConfigsRequest.Resource(resource_type=2, resource_name=SECRET)]),
            cpb.DescribeConfigsRequest(resources=[
                cpb.DescribeConfigsRequest.Resource(resource_type=4, resource_name="")])],
        "DescribeQuorum": [cpb.DescribeQuorumRequest()],
        "DescribeCluster": [pb.DescribeClusterRequest()],
        "DescribeLogs": [_logs(), _logs(SECRET), _logs(PUBLIC), _logs(PUBLIC, SECRET)],
        "CreateAcls": [_acl_request(SECRET)],
        "DeleteAcls": [cpb.DeleteAclsRequest(filters=[common_pb2.AclFilter()])],
        "DescribeAcls": [pb.DescribeAclsRequest()],
        "AlterUserScramCredentials": [cpb.AlterUserScramCredentialsRequest(deletions=[
            cpb.ScramCredentialDeletion(name="admin", mechanism=1)])],
        "DescribeUserScramCredentials": [pb.DescribeUserScramCredentialsRequest()],
        "ScramSalt": [pb.ScramSaltRequest(user="admin", mechanism=1)],
        "FindCoordinator": [pb.FindCoordinatorRequest(group_ids=[GROUP, ADMIN_GROUP])],
        "ConsumerGroupHeartbeat": [_heartbeat(GROUP, regex=".*"),
                                   _heartbeat(GROUP, names=[SECRET]),
                                   _heartbeat(GROUP, names=[PUBLIC], owned=secret_id),
                                   _heartbeat(ADMIN_GROUP, regex=".*")],
        "OffsetCommit": [_commit(GROUP, SECRET), _commit(ADMIN_GROUP, SECRET)],
        "OffsetFetch": [pb.OffsetFetchRequest(group_id=GROUP),
                        pb.OffsetFetchRequest(group_id=GROUP, topics=[
                            pb.OffsetFetchRequest.Topic(name=SECRET)]),
                        pb.OffsetFetchRequest(group_id=ADMIN_GROUP)],
        "ListGroups": [pb.ListGroupsRequest()],
        "DescribeGroups": [pb.DescribeGroupsRequest(group_ids=[GROUP, ADMIN_GROUP])],
        "DeleteGroups": [pb.DeleteGroupsRequest(group_ids=[ADMIN_GROUP])],
        "OffsetDelete": [pb.OffsetDeleteRequest(group_id=GROUP, topics=[
            pb.OffsetDeleteRequest.Topic(name=SECRET)])],
    }


# --- the walk ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    request: bytes             # what the caller sent (all of a stream's requests)
    messages: list[Message]    # what came back
    error: str                 # the call's status details, if it failed


def call(stub: Any, method: Any, requests: Any) -> Answer:
    sent = b"".join(r.SerializeToString() for r in
                    (requests if isinstance(requests, list) else [requests]))
    rpc = getattr(stub, method.name)
    messages: list[Message] = []
    try:
        if method.client_streaming:
            messages.extend(rpc(iter(requests), timeout=CALL_TIMEOUT_S))
        else:
            messages.append(rpc(requests, timeout=CALL_TIMEOUT_S))
    except grpc.RpcError as e:
        return Answer(sent, messages, f"{e.code()}: {e.details()}")
    return Answer(sent, messages, "")


def leaks_of(answer: Answer, secrets: Secrets) -> list[str]:
    body = b"".join(m.SerializeToString() for m in answer.messages) + answer.error.encode()
    numbers = {n for m in answer.messages for n in _numbers(m)}
    return secrets.leaks(answer.request, body, numbers)


def _join_as_admin(secured: SecuredCluster) -> None:
    """The super user's member of group ``g`` subscribes to ``secret``, is assigned it, and
    commits an offset on it: what mallory must not learn through the group."""
    stub = secured.stub("admin")
    request = _heartbeat(GROUP, names=[SECRET])
    deadline = time.monotonic() + 30
    while True:
        assert time.monotonic() < deadline, "the admin's member was never assigned secret"
        answer = stub.ConsumerGroupHeartbeat(request, timeout=CALL_TIMEOUT_S)
        if answer.error_code in COORDINATOR_STARTING:
            time.sleep(0.2)
            continue
        assert answer.error_code == 0, answer
        if answer.assignment:
            break
        request = pb.ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id=answer.member_id,
                                                   member_epoch=answer.member_epoch)
        time.sleep(0.2)
    commit = _commit(GROUP, SECRET)
    commit.member_id, commit.member_epoch = answer.member_id, answer.member_epoch
    committed = stub.OffsetCommit(commit, timeout=CALL_TIMEOUT_S)
    assert all(p.error_code == 0 for t in committed.topics for p in t.partitions), committed


def _secrets_seen_by_admin(secured: SecuredCluster) -> Secrets:
    """What there is to leak, as the super user sees it (so the walk cannot pass because it
    was not there)."""
    stub = secured.stub("admin")
    secret_id = secured.topic_id(SECRET)
    logs = stub.DescribeLogs(_logs(SECRET), timeout=CALL_TIMEOUT_S)
    first = next(p for p in logs.partitions if p.partition_id == 0)
    assert first.log_end_offset == SECRET_RECORDS, first
    fetched = stub.Fetch(_fetch((SECRET, b"")), timeout=CALL_TIMEOUT_S)
    assert SECRET_MARKER in fetched.SerializeToString()
    groups = stub.DescribeGroups(pb.DescribeGroupsRequest(group_ids=[GROUP]),
                                 timeout=CALL_TIMEOUT_S)
    assert SECRET.encode() in groups.SerializeToString(), groups
    offsets = stub.OffsetFetch(pb.OffsetFetchRequest(group_id=GROUP), timeout=CALL_TIMEOUT_S)
    assert any(t.name == SECRET for t in offsets.topics), offsets
    return Secrets(secret_id, first.log_end_offset, first.size_bytes)


@pytest.fixture(scope="module")
def secrets(secured: SecuredCluster) -> Secrets:
    _join_as_admin(secured)
    return _secrets_seen_by_admin(secured)


@pytest.mark.parametrize("user", ["nobody", "mallory"])
def test_no_rpc_tells_an_unauthorized_principal_anything_of_a_topic(
        secured: SecuredCluster, secrets: Secrets, user: str) -> None:
    table = probes(secrets.topic_id)
    methods = {m.name: m for m in pb.DESCRIPTOR.services_by_name["BrokerService"].methods}
    assert set(table) == set(methods), (
        f"methods without probes: {sorted(set(methods) - set(table))}; "
        f"probes of no method: {sorted(set(table) - set(methods))}")
    stub = secured.stub(user)
    found: list[str] = []
    for name, requests in table.items():
        for i, request in enumerate(requests):
            answer = call(stub, methods[name], request)
            found += [f"{name} #{i}: {what}" for what in leaks_of(answer, secrets)]
            # A refusal is an answer, never a failure of the broker's own.
            if answer.error.startswith(("StatusCode.UNKNOWN", "StatusCode.INTERNAL")):
                found.append(f"{name} #{i}: the call failed: {answer.error}")
    assert not found, f"{user} learnt of {SECRET}:\n" + "\n".join(found)
    # It was refused, not merely unlucky: the secret is still there for the super user, and
    # the principal's own reads of what it may read still work.
    assert _secrets_seen_by_admin(secured).log_end_offset == SECRET_RECORDS
    if user == "mallory":
        own = stub.Fetch(_fetch((PUBLIC, b"")), timeout=CALL_TIMEOUT_S)
        assert own.topics[0].partitions[0].error_code == 0, own
        assert b"public-0" in own.SerializeToString()
