"""Issue 25's reproduced findings on the client listener, each replayed on the cluster of
secured_cluster.py (TLS, client certificates required, SCRAM users, ACLs on):

* a regex subscription (``.*``) with Read on the group only is never assigned ``secret``;
* a Fetch naming ``public`` with ``secret``'s topic id is INCONSISTENT_TOPIC_ID, and
  DescribeLogs naming ``secret`` is TOPIC_AUTHORIZATION_FAILED with nothing of it;
* a refused 100 MiB Produce (a wrong SCRAM key) does not cost the broker 100 MiB: it is refused
  before it is read (peak RSS grows by less than 32 MiB);
* 300 refused calls naming 300 made-up mechanisms make no new metric series and a bounded
  number of audit lines, with a count of the rest;
* a deleted user's, or a changed password's, open FetchStream ends within seconds; so does
  what a removed ACL allowed;
* an ACL's host is compared as an address (a DENY for ``::ffff:127.0.0.1`` denies a client
  seen as ``127.0.0.1``);
* ScramSalt's made-up answers for unknown users use the iterations real users have;
* a call repeating a SCRAM metadata key is refused.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from secured_cluster import GROUP, PASSWORDS, PUBLIC, SECRET, SecuredCluster, allow, running

from tidelog import scram
from tidelog.acl import AclBinding, AclFilter
from tidelog.client import (
    Admin,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from tidelog.tls import ClientSecurity
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import broker_pb2_grpc
from tidelog.v1.common_pb2 import ErrorCode, ScramMechanism

pytestmark = pytest.mark.integration

CALL_TIMEOUT_S = 10.0
#: Answers of a coordinator still coming up (the offsets topic is created on first use).
COORDINATOR_STARTING = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    yield from running(tmp_path_factory)


def admin(secured: SecuredCluster) -> Admin:
    return Admin(secured.bootstrap, **secured.security("admin"))


def fetch(*topics: tuple[str, bytes], max_wait_ms: int = 0) -> pb.FetchRequest:
    request = pb.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, max_bytes=1 << 20)
    for name, topic_id in topics:
        request.topics.add(name=name, topic_id=topic_id).partitions.add(
            partition_id=0, fetch_offset=0, current_leader_epoch=-1, last_fetched_epoch=-1,
            partition_max_bytes=1 << 20)
    return request


# --- 1 and 2: what is acted on is what is authorized -------------------------------------------


def test_a_regex_subscription_is_assigned_only_what_the_member_may_describe(
        secured: SecuredCluster) -> None:
    stub = secured.stub("mallory")
    public_id, secret_id = secured.topic_id(PUBLIC), secured.topic_id(SECRET)
    request = pb.ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_epoch=0, rebalance_timeout_ms=30_000,
        subscribed_topic_regex=".*", subscription_changed=True)
    assigned: set[bytes] = set()
    deadline = time.monotonic() + 30
    while public_id not in assigned:  # the member's target: both partitions of public
        assert time.monotonic() < deadline, f"never assigned public, only {assigned}"
        answer = stub.ConsumerGroupHeartbeat(request, timeout=CALL_TIMEOUT_S)
        if answer.error_code in COORDINATOR_STARTING:
            time.sleep(0.2)
            continue
        assert answer.error_code == 0, answer
        assert SECRET.encode() not in answer.SerializeToString()
        assert secret_id not in answer.SerializeToString()
        if answer.assignment_changed:
            assigned = {bytes(tp.topic_id) for tp in answer.assignment}
        request = pb.ConsumerGroupHeartbeatRequest(group_id=GROUP, member_id=answer.member_id,
                                                   member_epoch=answer.member_epoch)
        time.sleep(0.2)
    assert assigned == {public_id}
    # And subscribing to it by name is refused, naming it (Kafka 4's answer).
    named = pb.ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_id=answer.member_id, member_epoch=answer.member_epoch,
        subscribed_topic_names=[SECRET], subscription_changed=True)
    refused = stub.ConsumerGroupHeartbeat(named, timeout=CALL_TIMEOUT_S)
    assert refused.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED, refused
    assert f"'{SECRET}'" in refused.error_message
    stub.ConsumerGroupHeartbeat(pb.ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_id=answer.member_id, member_epoch=-1), timeout=CALL_TIMEOUT_S)


def test_a_fetch_whose_name_and_id_disagree_is_refused(secured: SecuredCluster) -> None:
    stub = secured.stub("mallory")
    secret_id = secured.topic_id(SECRET)
    answer = stub.Fetch(fetch((PUBLIC, secret_id)), timeout=CALL_TIMEOUT_S)
    (partition,) = [p for t in answer.topics for p in t.partitions]
    assert partition.error_code == ErrorCode.INCONSISTENT_TOPIC_ID, answer
    assert not partition.batches
    by_id = stub.Fetch(fetch(("", secret_id)), timeout=CALL_TIMEOUT_S)
    (partition,) = [p for t in by_id.topics for p in t.partitions]
    assert partition.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED, by_id
    assert not partition.batches and by_id.topics[0].name == ""


def test_describe_logs_of_a_topic_it_may_not_describe_is_refused(
        secured: SecuredCluster) -> None:
    stub = secured.stub("mallory")
    answer = stub.DescribeLogs(pb.DescribeLogsRequest(topics=[
        pb.DescribeLogsRequest.TopicData(name=SECRET)]), timeout=CALL_TIMEOUT_S)
    assert [(p.topic, p.partition_id, p.error_code) for p in answer.partitions] == [
        (SECRET, -1, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    everything = stub.DescribeLogs(pb.DescribeLogsRequest(), timeout=CALL_TIMEOUT_S)
    assert {p.topic for p in everything.partitions} == {PUBLIC}


# --- 4: nobody costs the broker before they authenticate --------------------------------------


def _memory(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


def test_a_refused_100_mib_produce_is_not_read(secured: SecuredCluster) -> None:
    pid = secured.cluster.node("broker-1").pid
    options = secured.security("mallory") | {"sasl_password": "not-her-password"}
    channel = ClientSecurity(**options).channel_factory().blocking(
        secured.bootstrap, [("grpc.max_send_message_length", 200 * MIB)])
    stub = broker_pb2_grpc.BrokerServiceStub(channel)
    request = pb.ProduceRequest(acks=1, timeout_ms=5_000)
    request.topics.add(name=PUBLIC).partitions.add(partition_id=0, batch=b"\0" * (100 * MIB))
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak RSS starts again from now
    before = _memory(pid)["VmRSS"]
    with pytest.raises(grpc.RpcError) as refused:
        stub.Produce(request, timeout=30)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "SASL_AUTHENTICATION_FAILED" in (refused.value.details() or "")
    grown = _memory(pid)["VmHWM"] - before
    assert grown < 32 * MIB, f"a refused 100 MiB request grew the broker by {grown // MIB} MiB"


def _metric_lines(secured: SecuredCluster, name: str) -> list[str]:
    port = secured.cluster.node("broker-1").metrics_port
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    return [line for line in text.decode().splitlines() if line.startswith(name + "{")]


def test_made_up_mechanisms_make_no_series_and_few_audit_lines(secured: SecuredCluster) -> None:
    channel = secured.channel("admin")  # TLS with a certificate: the call gets to the check
    stub = broker_pb2_grpc.BrokerServiceStub(channel)
    log = Path(secured.cluster.local.log_path("broker-1"))
    log_before = log.read_text().count("authentication failed for")
    for i in range(300):
        metadata = ((scram.METADATA_MECHANISM, f"MADE-UP-{i}"),
                    (scram.METADATA_USER, b"mallory"), (scram.METADATA_PROOF, b"x"))
        with pytest.raises(grpc.RpcError):
            stub.DescribeCluster(pb.DescribeClusterRequest(), metadata=metadata,
                                 timeout=CALL_TIMEOUT_S)
    series = _metric_lines(secured, "tidelog_broker_authentication_failures_total")
    assert not [s for s in series if "MADE-UP" in s], series
    assert len(series) <= 4, series  # the two enabled mechanisms, none, unknown
    time.sleep(1.5)  # a new audit window: the next refusal says what was left out
    with pytest.raises(grpc.RpcError):
        stub.DescribeCluster(pb.DescribeClusterRequest(), timeout=CALL_TIMEOUT_S, metadata=(
            (scram.METADATA_MECHANISM, "MADE-UP-LAST"), (scram.METADATA_USER, b"m"),
            (scram.METADATA_PROOF, b"x")))
    deadline = time.monotonic() + 10
    while "similar lines suppressed" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    text = log.read_text()
    assert "similar lines suppressed" in text
    assert text.count("authentication failed for") - log_before <= 2 * 20 + 1


def test_a_call_repeating_a_scram_key_is_refused(secured: SecuredCluster) -> None:
    stub = broker_pb2_grpc.BrokerServiceStub(secured.channel("admin"))
    mallory = scram.MECHANISMS["SCRAM-SHA-256"]
    with pytest.raises(grpc.RpcError) as refused:
        stub.DescribeCluster(pb.DescribeClusterRequest(), timeout=CALL_TIMEOUT_S, metadata=(
            (scram.METADATA_MECHANISM, mallory.name), (scram.METADATA_USER, b"mallory"),
            (scram.METADATA_USER, b"admin"), (scram.METADATA_PROOF, b"x" * 32)))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "repeats a SCRAM metadata key" in (refused.value.details() or "")


# --- 5: revocation takes effect on open streams -----------------------------------------------


class FetchLoop:
    """A consumer's FetchStream on ``public`` in a thread: the next fetch goes after each
    answer, as a consumer's does; what ended the stream, and when, is kept."""

    def __init__(self, stub: broker_pb2_grpc.BrokerServiceStub) -> None:
        self._queue: list[pb.FetchRequest] = [fetch((PUBLIC, b""), max_wait_ms=200)]
        self._ready = threading.Condition()
        self._stopped = False
        self.answers: list[pb.FetchResponse] = []
        self.ended: grpc.RpcError | None = None
        self.ended_at = 0.0
        self._thread = threading.Thread(target=self._run, args=(stub,), daemon=True)
        self._thread.start()

    def _requests(self) -> Iterator[pb.FetchRequest]:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._queue or self._stopped)
                if self._stopped:
                    return
                request = self._queue.pop()
            yield request

    def _run(self, stub: broker_pb2_grpc.BrokerServiceStub) -> None:
        try:
            for answer in stub.FetchStream(self._requests(), timeout=60):
                self.answers.append(answer)
                with self._ready:
                    self._queue.append(fetch((PUBLIC, b""), max_wait_ms=200))
                    self._ready.notify()
        except grpc.RpcError as e:
            self.ended, self.ended_at = e, time.monotonic()

    def wait_answers(self, count: int) -> None:
        deadline = time.monotonic() + 15
        while len(self.answers) < count and self.ended is None:
            assert time.monotonic() < deadline, "the stream answers nothing"
            time.sleep(0.05)
        assert self.ended is None, self.ended

    def stop(self) -> None:
        with self._ready:
            self._stopped = True
            self._ready.notify()
        self._thread.join(timeout=15)


def _user_reading_public(secured: SecuredCluster, user: str, password: str) -> None:
    with admin(secured) as a:
        a.alter_user_scram_credentials(upsertions=[
            UserScramCredentialUpsertion(user, "SCRAM-SHA-256", password)]).all()
        a.create_acls([allow(user, "topic", PUBLIC, "Read")]).all()
    PASSWORDS[user] = password


@pytest.mark.parametrize("change", ["deleted", "new password"])
def test_an_open_stream_ends_when_its_credential_goes(secured: SecuredCluster,
                                                      change: str) -> None:
    user = "eve" if change == "deleted" else "eva"
    _user_reading_public(secured, user, f"{user}-first")
    loop = FetchLoop(secured.stub(user))
    try:
        loop.wait_answers(3)
        with admin(secured) as a:
            changed_at = time.monotonic()
            if change == "deleted":
                a.alter_user_scram_credentials(deletions=[
                    UserScramCredentialDeletion(user, "SCRAM-SHA-256")]).all()
            else:
                a.alter_user_scram_credentials(upsertions=[
                    UserScramCredentialUpsertion(user, "SCRAM-SHA-256", f"{user}-second")]).all()
        deadline = time.monotonic() + 10
        while loop.ended is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert loop.ended is not None, f"the stream went on after its user was {change}"
        assert loop.ended.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "checked again while the stream was open" in (loop.ended.details() or "")
        assert loop.ended_at - changed_at < 3.0
    finally:
        loop.stop()


def test_an_open_stream_serves_nothing_once_its_acl_goes(secured: SecuredCluster) -> None:
    _user_reading_public(secured, "ivy", "ivy-secret")
    loop = FetchLoop(secured.stub("ivy"))
    try:
        loop.wait_answers(3)
        with admin(secured) as a:
            a.delete_acls([AclFilter(principal="User:ivy")]).all()
        removed_at = time.monotonic()
        deadline = removed_at + 10
        while time.monotonic() < deadline:
            codes = [p.error_code for t in loop.answers[-1].topics for p in t.partitions]
            if codes == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]:
                break
            time.sleep(0.05)
        assert codes == [ErrorCode.TOPIC_AUTHORIZATION_FAILED], loop.answers[-1]
        assert time.monotonic() - removed_at < 3.0
    finally:
        loop.stop()


# --- 7: the small ones --------------------------------------------------------------------------


def test_an_acl_host_is_compared_as_an_address(secured: SecuredCluster) -> None:
    _user_reading_public(secured, "hal", "hal-secret")
    stub = secured.stub("hal")

    def code() -> int:
        answer = stub.Fetch(fetch((PUBLIC, b"")), timeout=CALL_TIMEOUT_S)
        return answer.topics[0].partitions[0].error_code

    assert code() == ErrorCode.NONE
    deny = AclBinding("User:hal", "::ffff:127.0.0.1", "topic", PUBLIC, "literal", "Read", "deny")
    with admin(secured) as a:
        a.create_acls([deny]).all()
    deadline = time.monotonic() + 10
    while code() != ErrorCode.TOPIC_AUTHORIZATION_FAILED:
        assert time.monotonic() < deadline, "a DENY for ::ffff:127.0.0.1 did not deny 127.0.0.1"
        time.sleep(0.1)


def test_made_up_salts_use_the_iterations_real_users_have(secured: SecuredCluster) -> None:
    with admin(secured) as a:
        a.alter_user_scram_credentials(upsertions=[
            UserScramCredentialUpsertion(f"sha512-user-{i}", "SCRAM-SHA-512", "pw",
                                         iterations=8192) for i in range(3)]).all()
    stub = secured.stub("admin")
    mechanism = ScramMechanism.SCRAM_SHA_512

    def salt(user: str) -> pb.ScramSaltResponse:
        return stub.ScramSalt(pb.ScramSaltRequest(user=user, mechanism=mechanism),
                              timeout=CALL_TIMEOUT_S)

    deadline = time.monotonic() + 10
    while salt("sha512-user-0").iterations != 8192:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    real, made_up = salt("sha512-user-0"), salt("nobody-by-this-name")
    assert made_up.iterations == real.iterations == 8192
    assert len(made_up.salt) == len(real.salt)
    assert salt("nobody-by-this-name").salt == made_up.salt  # stable
