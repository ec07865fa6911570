"""TLS files, the node's [tls] table, the clients' security options, and the certificates
tidelog.certs makes: every mistake is one line naming the file or key."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from tidelog.certs import issue, make_ca
from tidelog.cli import cli
from tidelog.config import parse_config
from tidelog.errors import InvalidConfigError
from tidelog.tls import ClientSecurity, TlsFiles, server_credentials


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    ca = make_ca()
    node = issue(ca, "broker-101", hosts=("10.0.0.21", "broker-101.example"))
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "node.crt").write_bytes(node.cert_pem)
    (tmp_path / "node.key").write_bytes(node.key_pem)
    (tmp_path / "node.key").chmod(0o600)
    return tmp_path


def config(pki: Path, **tls: str) -> str:
    table = {"ca_file": str(pki / "ca.crt"), "cert_file": str(pki / "node.crt"),
             "key_file": str(pki / "node.key")} | tls
    lines = "\n".join(f'{k} = "{v}"' for k, v in table.items())
    return ("node_id = 101\nroles = [\"broker\"]\ndata_dir = \"/tmp/x\"\n"
            "[[controller.voters]]\nid = 1\nhost = \"127.0.0.1\"\n[tls]\n" + lines + "\n")


def test_a_tls_config_loads(pki: Path) -> None:
    cfg = parse_config(config(pki, client_auth="required"))
    assert cfg.tls.enabled and cfg.tls.client_auth == "required"
    assert server_credentials(cfg.tls.files(), client_auth="required", where="x") is not None


@pytest.mark.parametrize(("change", "message"), [
    ({"cert_file": ""}, "tls.cert_file is empty: TLS needs ca_file, cert_file and key_file"),
    ({"ca_file": "/nope/ca.crt"}, "cannot read tls CA file /nope/ca.crt: No such file"),
    ({"client_auth": "sometimes"}, "tls.client_auth must be one of none, required"),
    ({"client_auth": "requested"}, "cannot ask for a client certificate without requiring one"),
])
def test_tls_mistakes_are_one_line(pki: Path, change: dict[str, str], message: str) -> None:
    text = config(pki, **change)
    with pytest.raises(InvalidConfigError, match=message.replace("(", r"\(")):
        parse_config(text)


def test_clients_may_stay_plaintext_while_the_peer_listeners_run_tls(pki: Path) -> None:
    """Kafka's PLAINTEXT client listener beside an SSL inter-broker one: off loopback the peer
    listeners need [tls], so this is how a cluster keeps plaintext clients."""
    from tidelog.cluster_secret import (
        broker_credential,
        generate_secret,
        write_broker_credential_file,
    )

    credential = pki / "broker-101.credential"
    write_broker_credential_file(credential, broker_credential(generate_secret(), 101))
    text = config(pki, client_listener="plaintext").replace(
        "[tls]", '[broker]\nlisten_host = "10.0.0.21"\ninter_broker_listen_host = "10.0.0.21"'
        "\n[tls]").replace("data_dir", f'broker_credential_file = "{credential}"\ndata_dir')
    cfg = parse_config(text)
    assert cfg.tls.client_listener == "plaintext" and cfg.tls.enabled
    with pytest.raises(InvalidConfigError, match="needs the client listener on TLS"):
        parse_config(text + '[sasl]\nenabled_mechanisms = ["SCRAM-SHA-256"]\n')


def test_a_key_others_can_read_and_a_file_without_pem_are_refused(pki: Path) -> None:
    (pki / "node.key").chmod(0o644)
    with pytest.raises(InvalidConfigError, match=r"is readable by others .* chmod 600 it"):
        TlsFiles(str(pki / "ca.crt"), str(pki / "node.crt"), str(pki / "node.key")).check("tls")
    (pki / "junk.crt").write_text("hello")
    with pytest.raises(InvalidConfigError, match="holds no PEM certificate"):
        TlsFiles(str(pki / "junk.crt")).check("tls")


def test_client_security_options(pki: Path) -> None:
    assert not ClientSecurity().channel_factory().secure
    secure = ClientSecurity("SSL", str(pki / "ca.crt"), str(pki / "node.crt"),
                            str(pki / "node.key"))
    assert secure.channel_factory().secure
    with pytest.raises(ValueError, match="security_protocol must be one of"):
        ClientSecurity("SASL_PLAINTEXT")
    with pytest.raises(ValueError, match="set security_protocol='SSL'"):
        ClientSecurity("PLAINTEXT", ssl_cafile=str(pki / "ca.crt"))
    with pytest.raises(InvalidConfigError, match="give both a certificate and its key"):
        ClientSecurity("SSL", str(pki / "ca.crt"), str(pki / "node.crt"))


def test_certificates_name_their_hosts_and_chain_to_the_ca(pki: Path) -> None:
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    cert = x509.load_pem_x509_certificate((pki / "node.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["10.0.0.21"]
    assert sans.get_values_for_type(x509.DNSName) == ["broker-101.example"]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}


def test_security_init_makes_a_ca_once_and_reuses_it(tmp_path: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(cli, ["security", "init", "--out", str(tmp_path), "--node",
                                "broker-101=127.0.0.1", "--client", "alice"])
    assert first.exit_code == 0, first.output
    ca = (tmp_path / "ca.crt").read_bytes()
    assert (tmp_path / "alice.key").stat().st_mode & 0o077 == 0
    again = runner.invoke(cli, ["security", "init", "--out", str(tmp_path), "--client", "bob"])
    assert again.exit_code == 0 and "reusing the CA" in again.output
    assert (tmp_path / "ca.crt").read_bytes() == ca
    bob = x509.load_pem_x509_certificate((tmp_path / "bob.crt").read_bytes())
    bob.verify_directly_issued_by(x509.load_pem_x509_certificate(ca))
    bad = runner.invoke(cli, ["security", "init", "--out", str(tmp_path), "--node", "x"])
    assert bad.exit_code == 2 and "give NAME=HOST[,HOST...]" in bad.stderr


def test_a_channel_factory_reloads_renewed_files_and_bumps_its_generation(
        pki: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import tidelog.tls as tls

    monkeypatch.setattr(tls, "RELOAD_CHECK_S", 0.0)
    files = TlsFiles(str(pki / "ca.crt"), str(pki / "node.crt"), str(pki / "node.key"))
    factory = tls.ChannelFactory.for_files(files, "tls")
    first = factory.credentials
    assert factory.refresh() == 0 and factory.credentials is first  # nothing changed
    key = pki / "node.key"
    os.utime(key, ns=(key.stat().st_atime_ns, key.stat().st_mtime_ns + 10**9))
    assert factory.refresh() == 1 and factory.credentials is not first
    # A renewal that cannot be read keeps what works.
    (pki / "node.crt").write_text("half written")
    assert factory.refresh() == 1


def test_the_controller_client_reopens_channels_after_a_renewal(
        pki: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import os

    import tidelog.tls as tls
    from tidelog.broker.controller_client import ControllerClient
    from tidelog.config import VoterConfig

    monkeypatch.setattr(tls, "RELOAD_CHECK_S", 0.0)
    files = TlsFiles(str(pki / "ca.crt"), str(pki / "node.crt"), str(pki / "node.key"))

    async def run() -> None:
        client = ControllerClient([VoterConfig(1, "127.0.0.1", 1, 2)],
                                  channels=tls.ChannelFactory.for_files(files, "tls"))
        first = client.stub(1)
        assert client.stub(1) is first
        cert = pki / "node.crt"
        os.utime(cert, ns=(cert.stat().st_atime_ns, cert.stat().st_mtime_ns + 10**9))
        assert client.stub(1) is not first
        await client.close()

    asyncio.run(run())


def test_a_local_tls_cluster_is_laid_out_with_certificates_and_a_profile(tmp_path: Path) -> None:
    import tomllib

    from tidelog.config import load_config
    from tidelog.local_cluster import LocalCluster

    cluster = LocalCluster.create(tmp_path / "c", controllers=1, brokers=1, tls=True)
    for name in cluster.nodes:
        cfg = load_config(cluster.config_path(name))
        assert cfg.tls.enabled and cfg.tls.cert_file.endswith(f"pki/{name}.crt")
        assert (tmp_path / "c/pki" / f"{name}.key").stat().st_mode & 0o077 == 0
    profile = tomllib.loads((tmp_path / "c/profile.toml").read_text())
    assert profile["brokers"] == cluster.bootstrap and profile["security_protocol"] == "SSL"
    ClientSecurity(**{k: v for k, v in profile.items() if k != "brokers"})  # usable as is
