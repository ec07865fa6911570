"""The cluster issue 25's review attacked, for the tests that replay its findings.

One controller and one broker, TLS on every listener with client certificates required,
SCRAM users on the client listener, ACLs on (``[authorization] enabled``), ``User:admin`` a super
user (its client certificate). Two more principals, each with a client certificate of the CA (the
listener wants one) and a SCRAM user on top, which names the principal:

* ``User:mallory`` may Read topic ``public`` and group ``g``, nothing else;
* ``User:nobody`` has no ACLs at all.

Topic ``secret`` holds :data:`SECRET_RECORDS` records whose values carry :data:`SECRET_MARKER`,
so a test can look for any trace of it (its name, its id, its data, its offsets, its size) in
whatever an unauthorized principal gets back.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_harness import ClusterHarness, certificate_name

from tidelog.acl import AclBinding
from tidelog.certs import issue, make_ca
from tidelog.client import Admin, NewTopic, Producer, UserScramCredentialUpsertion
from tidelog.tls import ClientSecurity
from tidelog.v1 import broker_pb2, broker_pb2_grpc

PUBLIC, SECRET, GROUP = "public", "secret", "g"
#: Records in ``secret``: its log end offset, a number nothing else in a response is (more than
#: any port, far fewer than any timestamp).
SECRET_RECORDS = 70_001
SECRET_MARKER = b"SECRET-PAYLOAD"
PASSWORDS = {"mallory": "mallory-secret", "nobody": "nobody-secret"}


@dataclass(frozen=True)
class SecuredCluster:
    cluster: ClusterHarness
    pki: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.cluster.node('broker-1').broker_port}"

    def security(self, user: str) -> dict[str, Any]:
        """Client settings of ``user``: admin by certificate, the others as SCRAM users (with
        their own client certificate, or nobody's: the SCRAM user names the principal)."""
        holder = user if (self.pki / f"{user}.crt").exists() else "nobody"
        tls = {"ssl_cafile": str(self.pki / "ca.crt"),
               "ssl_certfile": str(self.pki / f"{holder}.crt"),
               "ssl_keyfile": str(self.pki / f"{holder}.key")}
        if user == "admin":
            return {"security_protocol": "SSL", **tls}
        return {"security_protocol": "SASL_SSL", **tls, "sasl_mechanism": "SCRAM-SHA-256",
                "sasl_username": user, "sasl_password": PASSWORDS[user]}

    def channel(self, user: str, *, password: str | None = None) -> grpc.Channel:
        """A blocking channel to the broker's client listener as ``user`` (``password``: a
        SCRAM user's, to send a wrong one)."""
        options = self.security(user)
        if password is not None:
            options["sasl_password"] = password
        return ClientSecurity(**options).channel_factory().blocking(self.bootstrap)

    def stub(self, user: str, **kwargs: Any) -> broker_pb2_grpc.BrokerServiceStub:
        return broker_pb2_grpc.BrokerServiceStub(self.channel(user, **kwargs))

    def topic_id(self, name: str) -> bytes:
        answer = self.stub("admin").Metadata(broker_pb2.MetadataRequest(topics=[name]),
                                             timeout=10)
        assert answer.topics[0].topic_id, answer
        return bytes(answer.topics[0].topic_id)


def allow(user: str, kind: str, name: str, operation: str) -> AclBinding:
    return AclBinding(f"User:{user}", "*", kind, name, "literal", operation, "allow")


def make_pki(directory: Path) -> Path:
    ca = make_ca()
    (directory / "ca.crt").write_bytes(ca.cert_pem)
    for name in ("controller-1", "broker-1", "admin", "mallory", "nobody"):
        cert = issue(ca, certificate_name(name), hosts=("127.0.0.1",))
        (directory / f"{name}.crt").write_bytes(cert.cert_pem)
        (directory / f"{name}.key").write_bytes(cert.key_pem)
        (directory / f"{name}.key").chmod(0o600)
    return directory


def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    """The cluster, populated (a test module's fixture yields from this)."""
    pki = make_pki(tmp_path_factory.mktemp("secured-pki"))
    overrides: dict[str, dict[str, Any]] = {
        "tls": {"ca_file": str(pki / "ca.crt"), "cert_file": f"{pki}/{{name}}.crt",
                "key_file": f"{pki}/{{name}}.key", "client_auth": "required"},
        "sasl": {"enabled_mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"]},
        "authorization": {"enabled": True, "super_users": ["User:admin"]}}
    cluster = ClusterHarness.create(tmp_path_factory.mktemp("secured") / "cluster",
                                    controllers=1, brokers=1, overrides=overrides)
    try:
        cluster.start_controllers()
        cluster.start_brokers()
        secured = SecuredCluster(cluster, pki)
        _populate(secured)
        yield secured
    finally:
        cluster.close()


def _populate(secured: SecuredCluster) -> None:
    with Admin(secured.bootstrap, **secured.security("admin")) as admin:
        admin.create_topics([NewTopic(PUBLIC, 2, 1), NewTopic(SECRET, 3, 1)]).all()
        admin.alter_user_scram_credentials(upsertions=[
            UserScramCredentialUpsertion(user, "SCRAM-SHA-256", password)
            for user, password in PASSWORDS.items()]).all()
        admin.create_acls([allow("mallory", "topic", PUBLIC, "Read"),
                           allow("mallory", "group", GROUP, "Read")]).all()
    with Producer(secured.bootstrap, **secured.security("admin")) as producer:
        futures = [producer.send(SECRET, SECRET_MARKER + b"-%d" % i, partition=0)
                   for i in range(SECRET_RECORDS)]
        futures.append(producer.send(PUBLIC, b"public-0", partition=0))
        for future in futures:
            future.result(timeout=60)
