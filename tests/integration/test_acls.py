"""ACLs enforced on a TLS cluster (docs/security.md): principals from client certificates, the
bindings in the metadata log, Kafka's checks per RPC.

One controller and one broker with ``[tls]`` (client certificates required) and
``[authorization] enabled`` (super user ``User:admin``); users alice, bob and carol. What must
hold:

* a principal without Write cannot produce; without Read cannot fetch, nor commit offsets for a
  group; without Describe does not see the topic in metadata;
* a prefixed ACL covers the names under its prefix; a DENY wins over an ALLOW;
* refusals are logged (``tidelog.audit``) and counted (``tidelog_broker_authorization_
  failures_total``);
* ACLs survive a whole-cluster restart.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_harness import ClusterHarness, certificate_name

from tidelog.acl import AclBinding
from tidelog.certs import issue, make_ca
from tidelog.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from tidelog.errors import (
    GroupAuthorizationFailedError,
    TidelogError,
    TopicAuthorizationFailedError,
)

pytestmark = pytest.mark.integration

USERS = ("admin", "alice", "bob", "carol")


def allow(user: str, operation: str, name: str, *, kind: str = "topic",
          pattern: str = "literal", permission: str = "allow") -> AclBinding:
    return AclBinding(f"User:{user}", "*", kind, name, pattern, operation, permission)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pki = tmp_path_factory.mktemp("acl-pki")
    ca = make_ca()
    (pki / "ca.crt").write_bytes(ca.cert_pem)
    for name in ("controller-1", "broker-1", *USERS):
        cert = issue(ca, certificate_name(name), hosts=("127.0.0.1",))
        (pki / f"{name}.crt").write_bytes(cert.cert_pem)
        (pki / f"{name}.key").write_bytes(cert.key_pem)
        (pki / f"{name}.key").chmod(0o600)
    return pki


@pytest.fixture(scope="module")
def cluster(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    tls = {"ca_file": str(pki / "ca.crt"), "cert_file": f"{pki}/{{name}}.crt",
           "key_file": f"{pki}/{{name}}.key", "client_auth": "required"}
    overrides: dict[str, dict[str, Any]] = {
        "tls": tls, "authorization": {"enabled": True, "super_users": ["User:admin"]}}
    cluster = ClusterHarness.create(tmp_path_factory.mktemp("acls") / "cluster", controllers=1,
                                    brokers=1, overrides=overrides)
    try:
        cluster.start_controllers()
        cluster.start_brokers()
        yield cluster
    finally:
        cluster.close()


def user(pki: Path, name: str) -> dict[str, Any]:
    return {"security_protocol": "SSL", "ssl_cafile": str(pki / "ca.crt"),
            "ssl_certfile": str(pki / f"{name}.crt"), "ssl_keyfile": str(pki / f"{name}.key")}


def bootstrap(cluster: ClusterHarness) -> str:
    return f"127.0.0.1:{cluster.node('broker-1').broker_port}"


@pytest.fixture(scope="module")
def setup(cluster: ClusterHarness, pki: Path) -> str:
    servers = bootstrap(cluster)
    with Admin(servers, **user(pki, "admin")) as admin:
        admin.create_topics([NewTopic(n, 1, 1) for n in
                             ("orders", "billing.invoices", "billing.secret", "hidden")]).all()
        admin.create_acls([
            allow("alice", "Write", "orders"), allow("alice", "Read", "orders"),
            allow("alice", "Read", "g-alice", kind="group"),
            allow("bob", "Read", "billing.", pattern="prefixed"),
            allow("bob", "Read", "billing.secret", permission="deny"),
            allow("carol", "Read", "orders"), allow("carol", "Write", "carol-drafts"),
        ]).all()
        with Producer(servers, **user(pki, "admin")) as producer:
            for topic in ("orders", "billing.invoices", "billing.secret"):
                producer.send(topic, b"x").result(timeout=30)
    return servers


def read_one(servers: str, pki: Path, who: str, topic: str) -> list[bytes | None]:
    with Consumer(servers, auto_offset_reset="earliest", request_timeout_ms=5000,
                  **user(pki, who)) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            records = consumer.poll(timeout_ms=500)
            if records:
                return [r.value for r in records]
    return []


def test_without_write_a_principal_cannot_produce(setup: str, pki: Path) -> None:
    with Producer(setup, **user(pki, "alice")) as producer:
        producer.send("orders", b"by alice").result(timeout=30)
    # bob may not even describe the topic: the producer's metadata lookup is refused.
    with Producer(setup, **user(pki, "bob")) as producer, \
            pytest.raises(TopicAuthorizationFailedError, match="User:bob may not Describe"):
        producer.send("orders", b"by bob").result(timeout=30)
    # carol may read it (which implies Describe) and write another topic (so her idempotent
    # producer gets an id, KIP-679), but not write this one: the produce is refused.
    with Producer(setup, **user(pki, "carol")) as producer, \
            pytest.raises(TopicAuthorizationFailedError, match="User:carol may not Write"):
        producer.send("orders", b"by carol").result(timeout=30)


def test_without_read_a_principal_cannot_fetch(setup: str, pki: Path) -> None:
    assert read_one(setup, pki, "alice", "orders")
    with pytest.raises(TidelogError, match=r"(?i)authoriz|may not"):
        read_one(setup, pki, "bob", "orders")


def test_prefixed_acls_and_deny_precedence(setup: str, pki: Path) -> None:
    assert read_one(setup, pki, "bob", "billing.invoices") == [b"x"]
    with pytest.raises(TidelogError, match=r"(?i)authoriz|may not"):
        read_one(setup, pki, "bob", "billing.secret")


def test_without_describe_a_topic_is_not_in_metadata(setup: str, pki: Path) -> None:
    with Admin(setup, **user(pki, "alice")) as admin:
        assert set(admin.list_topics()) == {"orders"}
    with Admin(setup, **user(pki, "admin")) as admin:
        assert {"orders", "billing.invoices", "billing.secret", "hidden"} <= set(
            admin.list_topics())


def test_committing_offsets_needs_read_on_the_group(setup: str, pki: Path) -> None:
    with Admin(setup, **user(pki, "carol")) as admin, \
            pytest.raises(GroupAuthorizationFailedError, match="User:carol may not"):
        admin.alter_group_offsets("g-alice", {TopicPartition("orders", 0): 0})
    with Admin(setup, **user(pki, "alice")) as admin:
        admin.alter_group_offsets("g-alice", {TopicPartition("orders", 0): 1})
        assert admin.list_group_offsets("g-alice")[TopicPartition("orders", 0)].offset == 1


def test_only_super_users_manage_acls(setup: str, pki: Path) -> None:
    with Admin(setup, **user(pki, "alice")) as admin:
        result = admin.create_acls([allow("alice", "All", "*")])
        assert not result.ok
        with pytest.raises(TidelogError, match=r"(?i)authoriz|may not"):
            admin.describe_acls()


def test_refusals_are_audited_and_counted(cluster: ClusterHarness, setup: str,
                                          pki: Path) -> None:
    with Producer(setup, **user(pki, "carol")) as producer, pytest.raises(TidelogError):
        producer.send("orders", b"by carol").result(timeout=30)
    log = cluster.log_tail("broker-1", 400)
    assert "denied User:carol Write on topic 'orders'" in log
    port = cluster.node("broker-1").metrics_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        metrics = r.read().decode()
    assert 'tidelog_broker_authorization_failures_total{operation="Write",' \
           'resource_type="topic"}' in metrics


def test_acls_survive_a_whole_cluster_restart(cluster: ClusterHarness, setup: str,
                                              pki: Path) -> None:
    for name in ("broker-1", "controller-1"):
        cluster.stop(name, timeout_s=30)
    cluster.start("controller-1")
    cluster.start("broker-1")
    with Admin(setup, **user(pki, "admin")) as admin:
        assert allow("bob", "Read", "billing.secret", permission="deny") in admin.describe_acls()
    assert read_one(setup, pki, "bob", "billing.invoices") == [b"x"]
    with Producer(setup, **user(pki, "bob")) as producer, \
            pytest.raises(TopicAuthorizationFailedError):
        producer.send("orders", b"by bob").result(timeout=30)


def test_a_group_member_needs_read_on_its_group(setup: str, pki: Path) -> None:
    with Consumer(setup, group_id="g-alice", auto_offset_reset="earliest",
                  **user(pki, "alice")) as consumer:
        consumer.subscribe(["orders"])
        got: list[Any] = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got = consumer.poll(timeout_ms=500)
        assert got, "alice's group member read nothing"
    with Consumer(setup, group_id="g-carol", auto_offset_reset="earliest",
                  **user(pki, "carol")) as consumer:
        consumer.subscribe(["orders"])
        with pytest.raises(GroupAuthorizationFailedError, match="User:carol may not"):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=500)
