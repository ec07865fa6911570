"""A TLS cluster (docs/security.md): every listener encrypted, peers and clients authenticated
by certificates of the cluster's CA.

One controller and two brokers with ``[tls]`` (client_auth = required, so the client listener
is mutual TLS too), certificates from tidelog.certs as ``tidelog security init`` makes them.
What must hold:

* a client with the CA and a certificate of it produces and consumes, and replication (the
  inter-broker listener, mutual TLS) keeps the ISR full;
* refused: a plaintext client, a client without a certificate, a client whose certificate comes
  from another CA, a client that trusts another CA (the brokers' certificates fail to verify);
* a broker whose certificate comes from another CA never registers (the controller listener's
  handshake fails) and so never joins replication;
* a certificate renewed on disk is served to the next connection, without a restart.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_harness import ClusterHarness, certificate_name

from tidelog.certs import Issued, issue, make_ca
from tidelog.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from tidelog.errors import TidelogError

pytestmark = pytest.mark.integration

NODES = ("controller-1", "broker-1", "broker-2", "broker-3")
ROGUE = "broker-3"  # its certificate comes from another CA


def write(pki: Path, name: str, issued: Issued) -> None:
    (pki / f"{name}.crt").write_bytes(issued.cert_pem)
    key = pki / f"{name}.key"
    key.write_bytes(issued.key_pem)
    key.chmod(0o600)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pki = tmp_path_factory.mktemp("pki")
    ca, other_ca = make_ca(), make_ca("Another CA")
    (pki / "ca.crt").write_bytes(ca.cert_pem)
    (pki / "ca.key").write_bytes(ca.key_pem)
    (pki / "other-ca.crt").write_bytes(other_ca.cert_pem)
    for name in NODES:
        write(pki, name, issue(other_ca if name == ROGUE else ca, certificate_name(name),
                               hosts=("127.0.0.1",)))
    write(pki, "alice", issue(ca, "alice"))
    write(pki, "mallory", issue(other_ca, "mallory"))
    return pki


@pytest.fixture(scope="module")
def cluster(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    tls = {"ca_file": str(pki / "ca.crt"), "cert_file": f"{pki}/{{name}}.crt",
           "key_file": f"{pki}/{{name}}.key", "client_auth": "required"}
    cluster = ClusterHarness.create(tmp_path_factory.mktemp("tls") / "cluster", controllers=1,
                                    brokers=3, overrides={"tls": tls})
    try:
        cluster.start_controllers()  # waits for /readyz: the quorum has a leader
        cluster.start("broker-1", "broker-2")
        cluster.start(ROGUE, wait=False)
        yield cluster
    finally:
        cluster.close()


def bootstrap(cluster: ClusterHarness) -> str:
    return ",".join(f"127.0.0.1:{cluster.node(b).broker_port}" for b in ("broker-1", "broker-2"))


def ssl_options(pki: Path, user: str | None = "alice", ca: str = "ca.crt") -> dict[str, str]:
    options = {"security_protocol": "SSL", "ssl_cafile": str(pki / ca)}
    if user:
        options |= {"ssl_certfile": str(pki / f"{user}.crt"),
                    "ssl_keyfile": str(pki / f"{user}.key")}
    return options


def test_a_client_with_a_certificate_produces_and_consumes(cluster: ClusterHarness,
                                                          pki: Path) -> None:
    servers = bootstrap(cluster)
    with Admin(servers, **ssl_options(pki)) as admin:
        admin.create_topics([NewTopic("secure", 2, 2)]).all()
        with Producer(servers, **ssl_options(pki)) as producer:
            for i in range(200):
                producer.send("secure", b"v-%d" % i, key=b"k-%d" % i)
            producer.flush()
        deadline = time.monotonic() + 20
        while True:  # the followers fetch over mutual TLS: the ISR fills
            parts = admin.describe_topics(["secure"]).all()["secure"].partitions
            if all(len(p.isr) == 2 for p in parts) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert all(sorted(p.isr) == [101, 102] for p in parts)
    seen: set[bytes] = set()
    with Consumer(servers, auto_offset_reset="earliest", **ssl_options(pki)) as consumer:
        consumer.assign([TopicPartition("secure", p) for p in range(2)])
        deadline = time.monotonic() + 20
        while len(seen) < 200 and time.monotonic() < deadline:
            seen.update(r.value for r in consumer.poll(timeout_ms=500) if r.value is not None)
    assert seen == {b"v-%d" % i for i in range(200)}


@pytest.mark.parametrize("who", ["plaintext", "no certificate", "another CA's certificate",
                                 "trusting another CA"])
def test_clients_without_the_right_credentials_are_refused(cluster: ClusterHarness, pki: Path,
                                                           who: str) -> None:
    options = {"plaintext": {}, "no certificate": ssl_options(pki, None),
               "another CA's certificate": ssl_options(pki, "mallory"),
               "trusting another CA": ssl_options(pki, "alice", ca="other-ca.crt")}[who]
    with Admin(bootstrap(cluster), default_api_timeout_ms=3000, request_timeout_ms=1000,
               **options) as admin, pytest.raises(TidelogError):
        admin.list_topics()


def test_a_broker_with_another_cas_certificate_never_registers(cluster: ClusterHarness,
                                                               pki: Path) -> None:
    time.sleep(3)  # it had the brokers' whole start-up to try
    assert cluster.local.readiness(ROGUE) is not None
    with Admin(bootstrap(cluster), **ssl_options(pki)) as admin:
        assert sorted(b.broker_id for b in admin.describe_cluster().brokers) == [101, 102]
    assert "handshake" in cluster.log_tail(ROGUE, 200).lower() or \
        "unavailable" in cluster.log_tail(ROGUE, 200).lower()


def served_certificate(port: int, pki: Path) -> bytes:
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "alice.crt"), str(pki / "alice.key"))
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_a_renewed_certificate_is_served_without_a_restart(cluster: ClusterHarness,
                                                           pki: Path) -> None:
    port = cluster.node("broker-1").broker_port
    before = served_certificate(port, pki)
    ca = Issued((pki / "ca.key").read_bytes(), (pki / "ca.crt").read_bytes())
    renewed = issue(ca, certificate_name("broker-1"), hosts=("127.0.0.1",))
    time.sleep(0.05)  # a new mtime even on coarse clocks
    write(pki, "broker-1", renewed)
    after = served_certificate(port, pki)
    assert after != before
    assert ssl.DER_cert_to_PEM_cert(after).strip() == renewed.cert_pem.decode().strip()
    # Clients keep working across the renewal.
    with Admin(bootstrap(cluster), **ssl_options(pki)) as admin:
        admin.create_topics([NewTopic("after-renewal", 1, 1)]).all()
        assert "after-renewal" in admin.list_topics()


def test_the_cli_reads_brokers_and_tls_settings_from_a_profile(
        cluster: ClusterHarness, pki: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tidelog.cli import cli

    profile = tmp_path / "profile.toml"
    profile.write_text(f'brokers = "{bootstrap(cluster)}"\nsecurity_protocol = "SSL"\n'
                       f'ssl_cafile = "{pki / "ca.crt"}"\nssl_certfile = "{pki / "alice.crt"}"\n'
                       f'ssl_keyfile = "{pki / "alice.key"}"\n')
    runner = CliRunner(env={"TIDELOG_PROFILE": str(profile), "TIDELOG_BROKERS": None})
    created = runner.invoke(cli, ["topic", "create", "via-cli", "-p", "1", "-r", "2"])
    assert created.exit_code == 0, created.output
    produced = runner.invoke(cli, ["topic", "produce", "via-cli"], input="hello\nworld\n")
    assert produced.exit_code == 0, produced.output
    consumed = runner.invoke(cli, ["topic", "consume", "via-cli", "--from-beginning", "-n", "2"])
    assert consumed.exit_code == 0 and consumed.output.split() == ["hello", "world"]
    profile.write_text(profile.read_text().replace("alice.crt", "nobody.crt"))
    broken = runner.invoke(cli, ["topic", "list"])
    assert broken.exit_code == 2
    assert "profile: INVALID_CONFIG: cannot read ssl certificate file" in broken.stderr


def test_cluster_quorum_reaches_a_tls_controller_with_the_profile(
        cluster: ClusterHarness, pki: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tidelog.cli import cli

    profile = tmp_path / "profile.toml"
    profile.write_text(f'security_protocol = "SSL"\nssl_cafile = "{pki / "ca.crt"}"\n'
                       f'ssl_certfile = "{pki / "alice.crt"}"\n'
                       f'ssl_keyfile = "{pki / "alice.key"}"\n')
    address = f"127.0.0.1:{cluster.node('controller-1').controller_port}"
    runner = CliRunner(env={"TIDELOG_PROFILE": str(profile)})
    result = runner.invoke(cli, ["cluster", "quorum", "--controller", address, "--format",
                                 "json"])
    assert result.exit_code == 0, result.output
    assert '"leader_id": 1' in result.output
    plaintext = CliRunner(env={"TIDELOG_PROFILE": None}).invoke(
        cli, ["cluster", "quorum", "--controller", address, "--wait", "1"])
    assert plaintext.exit_code != 0
