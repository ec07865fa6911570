"""SCRAM users on a TLS cluster (docs/security.md, "SCRAM users"): SASL_SSL clients, the
credentials in the metadata log, ACLs on their principals.

One controller and one broker with ``[tls]`` (no client certificates), ``[sasl]`` both
mechanisms and ``required = true``, and ``[authorization] enabled`` (super user ``User:admin``).
The controller's data dir is formatted with ``tidelog storage format --add-scram`` for admin, so
the cluster starts with its first user. What must hold:

* a user created with ``Admin.alter_user_scram_credentials`` produces and consumes as
  ``User:<name>`` with SASL_SSL, within its ACLs;
* a wrong password, an unknown user, and a client with neither a password nor a certificate
  are refused with SaslAuthenticationFailedError, audited and counted;
* a password change and a deletion take effect on the next call;
* ``ScramSalt`` does not tell who exists;
* describe shows mechanisms and iterations, and the credentials survive a restart.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_harness import ClusterHarness, certificate_name

from tidelog.acl import AclBinding
from tidelog.certs import issue, make_ca
from tidelog.client import (
    Admin,
    Consumer,
    NewTopic,
    Producer,
    TopicPartition,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from tidelog.errors import SaslAuthenticationFailedError, TopicAuthorizationFailedError
from tidelog.v1 import broker_pb2, broker_pb2_grpc
from tidelog.v1.common_pb2 import ScramMechanism

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pki = tmp_path_factory.mktemp("scram-pki")
    ca = make_ca()
    (pki / "ca.crt").write_bytes(ca.cert_pem)
    for name in ("controller-1", "broker-1"):
        cert = issue(ca, certificate_name(name), hosts=("127.0.0.1",))
        (pki / f"{name}.crt").write_bytes(cert.cert_pem)
        (pki / f"{name}.key").write_bytes(cert.key_pem)
        (pki / f"{name}.key").chmod(0o600)
    return pki


@pytest.fixture(scope="module")
def cluster(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    overrides: dict[str, dict[str, Any]] = {
        "tls": {"ca_file": str(pki / "ca.crt"), "cert_file": f"{pki}/{{name}}.crt",
                "key_file": f"{pki}/{{name}}.key"},
        "sasl": {"enabled_mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"], "required": True},
        "authorization": {"enabled": True, "super_users": ["User:admin"]}}
    cluster = ClusterHarness.create(tmp_path_factory.mktemp("scram") / "cluster", controllers=1,
                                    brokers=1, overrides=overrides)
    formatted = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "storage", "format", "--ignore-formatted",
         "--dir", str(cluster.local.data_dir("controller-1")), "--node-id",
         str(cluster.node("controller-1").node_id), "--cluster-id", cluster.cluster_id,
         "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]"],
        capture_output=True, text=True, timeout=60)
    assert formatted.returncode == 0, formatted.stderr
    assert "bootstrap SCRAM users: admin (SCRAM-SHA-512)" in formatted.stdout
    try:
        cluster.start_controllers()
        cluster.start_brokers()
        yield cluster
    finally:
        cluster.close()


def admin_user(pki: Path) -> dict[str, Any]:
    return scram_user(pki, "admin", "admin-secret", "SCRAM-SHA-512")


def scram_user(pki: Path, name: str, password: str,
               mechanism: str = "SCRAM-SHA-256") -> dict[str, Any]:
    return {"security_protocol": "SASL_SSL", "ssl_cafile": str(pki / "ca.crt"),
            "sasl_mechanism": mechanism, "sasl_username": name, "sasl_password": password}


@pytest.fixture(scope="module")
def servers(cluster: ClusterHarness, pki: Path) -> str:
    servers = f"127.0.0.1:{cluster.node('broker-1').broker_port}"
    with Admin(servers, **admin_user(pki)) as admin:
        admin.create_topics([NewTopic("orders", 1, 1)]).all()
        admin.alter_user_scram_credentials(upsertions=[
            UserScramCredentialUpsertion("alice", "SCRAM-SHA-256", "alice-secret"),
            UserScramCredentialUpsertion("bob", "SCRAM-SHA-512", "bob-secret", iterations=8192),
            UserScramCredentialUpsertion("jürgen", "SCRAM-SHA-256", "ü-secret"),
        ]).all()
        admin.create_acls([
            AclBinding("User:alice", "*", "topic", "orders", "literal", op, "allow")
            for op in ("Write", "Read")] + [
            AclBinding("User:jürgen", "*", "topic", "orders", "literal", "Read", "allow")]).all()
    return servers


def read_all(servers: str, options: dict[str, Any]) -> list[bytes | None]:
    with Consumer(servers, auto_offset_reset="earliest", **options) as consumer:
        consumer.assign([TopicPartition("orders", 0)])
        got: list[bytes | None] = []
        deadline = time.monotonic() + 15
        while not got and time.monotonic() < deadline:
            got = [r.value for r in consumer.poll(timeout_ms=500)]
    return got


def test_a_scram_user_produces_and_consumes_within_its_acls(servers: str, pki: Path) -> None:
    alice = scram_user(pki, "alice", "alice-secret")
    with Producer(servers, **alice) as producer:
        producer.send("orders", b"by alice").result(timeout=30)
    assert read_all(servers, alice) == [b"by alice"]
    # A non-ASCII name works (it travels as binary metadata) and is its own principal.
    assert read_all(servers, scram_user(pki, "jürgen", "ü-secret")) == [b"by alice"]
    # bob authenticates (SCRAM-SHA-512) but has no ACL: the refusal names User:bob.
    with Producer(servers, **scram_user(pki, "bob", "bob-secret", "SCRAM-SHA-512")) as producer, \
            pytest.raises(TopicAuthorizationFailedError, match="User:bob may not"):
        producer.send("orders", b"by bob").result(timeout=30)


@pytest.mark.parametrize("options", [
    pytest.param(("alice", "wrong"), id="wrong-password"),
    pytest.param(("mallory", "x"), id="unknown-user"),
    pytest.param(("bob", "bob-secret"), id="wrong-mechanism"),  # bob has SCRAM-SHA-512 only
])
def test_wrong_credentials_are_refused(servers: str, pki: Path,
                                       options: tuple[str, str]) -> None:
    with Producer(servers, **scram_user(pki, *options)) as producer, \
            pytest.raises(SaslAuthenticationFailedError, match="unknown user or wrong password"):
        producer.send("orders", b"never").result(timeout=30)


def test_a_client_without_credentials_is_refused_where_required(servers: str,
                                                                pki: Path) -> None:
    no_cert = {"security_protocol": "SSL", "ssl_cafile": str(pki / "ca.crt")}
    with Admin(servers, **no_cert) as admin, \
            pytest.raises(SaslAuthenticationFailedError, match="requires authentication"):
        admin.list_topics()


def test_salts_do_not_tell_who_exists(servers: str, pki: Path) -> None:
    credentials = grpc.ssl_channel_credentials((pki / "ca.crt").read_bytes())
    with grpc.secure_channel(servers, credentials) as channel:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)

        def salt(user: str) -> broker_pb2.ScramSaltResponse:
            return stub.ScramSalt(broker_pb2.ScramSaltRequest(
                user=user, mechanism=ScramMechanism.SCRAM_SHA_256), timeout=10)
        real, made_up = salt("alice"), salt("nobody")
        assert made_up.salt == salt("nobody").salt  # stable, as a real one is
        assert len(made_up.salt) == len(real.salt) and made_up.salt != real.salt
        assert made_up.iterations == real.iterations == 4096


def test_describe_shows_mechanisms_and_iterations_only(servers: str, pki: Path) -> None:
    with Admin(servers, **admin_user(pki)) as admin:
        described = admin.describe_user_scram_credentials().all()
    assert described["alice"] == [("SCRAM-SHA-256", 4096)]
    assert described["bob"] == [("SCRAM-SHA-512", 8192)]
    assert described["admin"] == [("SCRAM-SHA-512", 4096)]  # from --add-scram
    # Describing users needs Describe on the cluster: alice has no such ACL.
    with Admin(servers, **scram_user(pki, "alice", "alice-secret")) as admin, \
            pytest.raises(Exception, match="may not Describe"):
        admin.describe_user_scram_credentials().all()


def test_refusals_are_audited_and_counted(cluster: ClusterHarness, servers: str,
                                          pki: Path) -> None:
    with Admin(servers, **scram_user(pki, "alice", "not-it")) as admin, \
            pytest.raises(SaslAuthenticationFailedError):
        admin.list_topics()
    log = cluster.log_tail("broker-1", 400)
    assert "authentication failed for 'alice' (SCRAM-SHA-256)" in log
    assert "wrong password" in log and "not-it" not in log
    port = cluster.node("broker-1").metrics_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        metrics = r.read().decode()
    assert 'tidelog_broker_authentication_failures_total{mechanism="SCRAM-SHA-256"}' in metrics


def test_a_password_change_and_a_deletion_apply_to_the_next_call(
        cluster: ClusterHarness, servers: str, pki: Path) -> None:
    with Admin(servers, **admin_user(pki)) as admin:
        admin.alter_user_scram_credentials(upsertions=[
            UserScramCredentialUpsertion("carol", "SCRAM-SHA-256", "first")]).all()
        carol = Admin(servers, **scram_user(pki, "carol", "first"))
        try:
            carol.list_topics()  # authenticated (sees no topic: no ACL, but not refused)
            admin.alter_user_scram_credentials(upsertions=[
                UserScramCredentialUpsertion("carol", "SCRAM-SHA-256", "second")]).all()
            with pytest.raises(SaslAuthenticationFailedError):
                carol.list_topics()
        finally:
            carol.close()
        with Admin(servers, **scram_user(pki, "carol", "second")) as carol2:
            carol2.list_topics()
            admin.alter_user_scram_credentials(deletions=[
                UserScramCredentialDeletion("carol", "SCRAM-SHA-256")]).all()
            with pytest.raises(SaslAuthenticationFailedError):
                carol2.list_topics()


def test_credentials_survive_a_whole_cluster_restart(cluster: ClusterHarness, servers: str,
                                                     pki: Path) -> None:
    for name in ("broker-1", "controller-1"):
        cluster.stop(name, timeout_s=30)
    cluster.start("controller-1")
    cluster.start("broker-1")
    alice = scram_user(pki, "alice", "alice-secret")
    with Producer(servers, **alice) as producer:
        producer.send("orders", b"after restart").result(timeout=30)
    with Admin(servers, **scram_user(pki, "alice", "wrong")) as admin, \
            pytest.raises(SaslAuthenticationFailedError):
        admin.list_topics()
