"""The inventory checks and the renderer (tidelog/deploy/): pure, no processes.

Each refused mistake is one line naming it; every rendered node config is one tidelog.config
accepts, binding exactly the addresses the inventory gives; re-rendering keeps the cluster.
"""

from __future__ import annotations

import dataclasses
import shutil
import stat
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from tidelog.cli import cli
from tidelog.cluster_secret import broker_credential, read_secret_file
from tidelog.config import load_config
from tidelog.deploy.inventory import InventoryError, parse_inventory
from tidelog.deploy.render import render
from tidelog.deploy.writer import render_to

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "inventory.example.toml"


def host(name: str, address: str, *nodes: tuple[int, list[str]], extra: str = "") -> str:
    text = f'[[hosts]]\nname = "{name}"\naddress = "{address}"\n{extra}'
    for node_id, roles in nodes:
        text += f"[[hosts.nodes]]\nid = {node_id}\nroles = {roles!r}\n".replace("'", '"')
    return text


def three_and_three() -> str:
    return "\n".join([host(f"c{i}", f"10.0.0.{i}", (i, ["controller"])) for i in (1, 2, 3)]
                     + [host(f"b{i}", f"10.0.0.{10 + i}", (100 + i, ["broker"]))
                        for i in (1, 2, 3)])


def problems(text: str) -> list[str]:
    with pytest.raises(InventoryError) as e:
        parse_inventory(text)
    return e.value.problems


def test_the_example_inventory_parses() -> None:
    inv = parse_inventory(EXAMPLE.read_text())
    assert [n.id for n in inv.controllers] == [1, 2, 3]
    assert [n.id for n in inv.brokers] == [101, 102, 103]
    assert inv.host("ctl-1").private_address == "10.1.0.11"


def test_duplicate_node_ids_are_refused() -> None:
    text = three_and_three().replace("id = 102", "id = 101")
    assert problems(text) == ["node id 101 is used more than once"]


@pytest.mark.parametrize("controllers", [0, 2, 4])
def test_an_even_or_empty_quorum_is_refused(controllers: int) -> None:
    text = "\n".join([host(f"c{i}", f"10.0.0.{i}", (i, ["controller"]))
                      for i in range(1, controllers + 1)]
                     + [host("b1", "10.0.0.11", (101, ["broker"]))])
    [line] = problems(text)
    if controllers == 0:
        assert line.startswith("no controllers: brokers need a controller quorum")
    else:
        assert line.startswith(f"{controllers} controllers: an even quorum")


def test_a_controller_on_loopback_is_unreachable_from_other_hosts() -> None:
    text = three_and_three().replace('address = "10.0.0.1"', 'address = "127.0.0.1"')
    assert problems(text) == ["host c1: address 127.0.0.1 is loopback, which no other host "
                              "can reach; give its network address",
                              "host c1: private_address 127.0.0.1 is loopback, which no other "
                              "host can reach; give its network address"]


def test_a_port_used_twice_on_one_host_is_refused() -> None:
    text = three_and_three() + '[[hosts.nodes]]\nid = 104\nroles = ["broker"]\n'
    found = problems(text)
    assert "host b3: port 9092 is used twice (node 103 client port and node 104 client port)" \
        in found
    assert all(line.startswith("host b3: port") for line in found)


def test_two_nodes_of_a_host_may_not_share_a_data_dir() -> None:
    text = three_and_three() + ('[[hosts.nodes]]\nid = 104\nroles = ["broker"]\n'
                                'data_dir = "/var/lib/tidelog/node-103"\n'
                                '[hosts.nodes.ports]\nclient = 19092\ninter_broker = 19095\n'
                                'metrics = 19644\n')
    assert problems(text) == ["host b3: data_dir /var/lib/tidelog/node-103 is used more than once"]


def test_ports_of_two_nodes_on_one_host_may_differ() -> None:
    text = three_and_three() + ('[[hosts.nodes]]\nid = 104\nroles = ["broker"]\n'
                                '[hosts.nodes.ports]\nclient = 19092\ninter_broker = 19095\n'
                                'metrics = 19644\n')
    inv = parse_inventory(text)
    assert [n.id for n in inv.host("b3").nodes] == [103, 104]


def test_every_mistake_is_listed_at_once() -> None:
    text = ('cluster_id = "nope"\nbogus = 1\n' + three_and_three()
            .replace('address = "10.0.0.12"', 'address = "broker.example"')
            .replace('roles = ["broker"]\n', 'roles = ["router"]\n', 1))
    found = problems(text)
    assert any(p.startswith("unknown key 'bogus'") for p in found)
    assert "host b2: address 'broker.example' is not an IP address (names can resolve " \
           "anywhere; listeners bind addresses)" in found
    assert any(p.startswith('node 101 on b1: roles must be ["controller"]') for p in found)


def test_a_bad_cluster_id_and_bad_toml_are_named() -> None:
    assert problems('cluster_id = "xyz"\n' + three_and_three())[0].startswith(
        "cluster_id 'xyz': use \"generate\" or 32 hex digits")
    assert problems("[[hosts]\n")[0].startswith("<inventory> is not valid TOML")


def test_rendered_configs_load_and_bind_where_the_inventory_says(tmp_path: Path) -> None:
    inv_file = tmp_path / "inventory.toml"
    inv_file.write_text(f'config_dir = "{tmp_path}/etc"\n' + EXAMPLE.read_text()
                        .replace('config_dir = "/etc/tidelog"', ""))
    done = render_to(inv_file, tmp_path / "out")
    inv = done.inventory
    # "Install" every host's files into config_dir, as rsync to / would.
    (tmp_path / "etc").mkdir()
    for h in inv.hosts:
        shutil.copytree(tmp_path / "out/hosts" / h.name / str(tmp_path / "etc").lstrip("/"),
                        tmp_path / "etc", dirs_exist_ok=True)
    for node in inv.nodes:
        h = inv.host(node.host)
        cfg = load_config(tmp_path / "etc" / f"{node.name}.toml")
        assert (cfg.node_id, cfg.roles, cfg.cluster_id) == (node.id, node.roles, done.cluster_id)
        assert [v.host for v in cfg.controller.voters] == ["10.1.0.11", "10.1.0.12",
                                                           "10.1.0.13"]
        expected = {"controller.listen_host": h.private_address,
                    "controller.raft_listen_host": h.private_address} if node.is_controller \
            else {"broker.listen_host": h.address,
                  "broker.inter_broker_listen_host": h.private_address}
        assert cfg.listen_hosts() == expected
        assert cfg.metrics.host == h.private_address
        if node.is_broker:
            assert (cfg.broker.host, cfg.broker.rack) == (h.address, h.rack)
        # The root on controllers only; a broker holds its own credential, made from it.
        root = read_secret_file(tmp_path / "out/cluster.secret")
        assert (cfg.cluster_secret() == root) is node.is_controller
        assert cfg.broker_credential() == (broker_credential(root, node.id)
                                           if node.is_broker else None)
    etc = str(tmp_path / "etc").lstrip("/")
    secret = tmp_path / "out/hosts/ctl-1" / etc / "cluster.secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    for h in inv.hosts:  # no broker-only host gets the cluster secret
        controls = any(n.is_controller for n in h.nodes)
        assert (tmp_path / "out/hosts" / h.name / etc / "cluster.secret").exists() is controls
    credential = tmp_path / "out/hosts/broker-a" / etc / "broker-101.credential"
    assert stat.S_IMODE(credential.stat().st_mode) == 0o600


def test_an_inventory_without_tls_is_refused_off_loopback() -> None:
    [line] = problems(three_and_three().replace("[[hosts]]", "tls = false\n[[hosts]]", 1))
    assert line.startswith("tls = false, but the controller and inter-broker listeners of c1, "
                           "c2, c3, b1, b2, b3 bind a network address") and "tls = true" in line


def test_rerendering_keeps_the_cluster_id_and_secret(tmp_path: Path) -> None:
    inv_file = tmp_path / "inventory.toml"
    inv_file.write_text(three_and_three())
    first = render_to(inv_file, tmp_path / "out")
    secret = (tmp_path / "out/cluster.secret").read_text()
    again = render_to(inv_file, tmp_path / "out")
    assert again.cluster_id == first.cluster_id
    assert (tmp_path / "out/cluster.secret").read_text() == secret
    other = render_to(inv_file, tmp_path / "other")
    assert other.cluster_id != first.cluster_id


def test_the_scrape_config_has_a_labelled_target_per_node() -> None:
    inv = dataclasses.replace(parse_inventory(EXAMPLE.read_text()), tls=False)
    files = {f.path: f.content for f in render(inv, cluster_id="0" * 32, secret="s" * 43)}
    scrape = files["prometheus/prometheus.yml"]
    for node in inv.nodes:
        assert f'node_id: "{node.id}"' in scrape
    assert "job_name: tidelog-controller" in scrape and "job_name: tidelog-broker" in scrape
    assert '"10.1.0.21:9644"' in scrape
    readme = files["README.md"]
    assert readme.index("controller-1") < readme.index("broker-101")  # controllers first


def test_the_cli_prints_one_error_line_per_problem(tmp_path: Path) -> None:
    bad = tmp_path / "inventory.toml"
    bad.write_text(three_and_three().replace("id = 102", "id = 101")
                   .replace('address = "10.0.0.3"', 'address = "10.0.0.2"'))
    result = CliRunner().invoke(cli, ["deploy", "render", "--inventory", str(bad), "--out",
                                      str(tmp_path / "out")])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["error: host address 10.0.0.2 is used more than once",
                                          "error: node id 101 is used more than once"]
    assert not (tmp_path / "out").exists()


def test_the_cli_renders(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["deploy", "render", "--inventory", str(EXAMPLE), "--out",
                                      str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "3 controllers, 3 brokers on 6 hosts" in result.output
    unit = tmp_path / "out/hosts/broker-a/etc/systemd/system/tidelog-broker-101.service"
    assert "ExecStart=/opt/tidelog/bin/tidelog server --config /etc/tidelog/broker-101.toml" \
        in unit.read_text()
    cfg = tomllib.loads((tmp_path / "out/hosts/broker-a/etc/tidelog/broker-101.toml")
                        .read_text())
    assert cfg["broker"]["listen_host"] == "10.0.0.21"


def test_a_tls_inventory_renders_certificates_naming_each_host(tmp_path: Path) -> None:
    from cryptography import x509

    inv_file = tmp_path / "inventory.toml"
    inv_file.write_text(f'config_dir = "{tmp_path}/etc"\n' + EXAMPLE.read_text()
                        .replace('config_dir = "/etc/tidelog"', "")
                        .replace('tls_client_auth = "none"', 'tls_client_auth = "required"'))
    done = render_to(inv_file, tmp_path / "out")
    etc = str(tmp_path / "etc").lstrip("/")
    (tmp_path / "etc").mkdir()
    for h in done.inventory.hosts:  # install, as rsync to / would
        shutil.copytree(tmp_path / "out/hosts" / h.name / etc, tmp_path / "etc",
                        dirs_exist_ok=True)
    cfg = load_config(tmp_path / "etc/broker-101.toml")
    assert cfg.tls.enabled and cfg.tls.client_auth == "required"
    cert = x509.load_pem_x509_certificate((tmp_path / "etc/tls/broker-101.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(str(a) for a in sans.get_values_for_type(x509.IPAddress)) == [
        "10.0.0.21", "10.1.0.21"]
    ca = x509.load_pem_x509_certificate((tmp_path / "out/tls/ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    assert stat.S_IMODE((tmp_path / "etc/tls/broker-101.key").stat().st_mode) == 0o600
    profile = tomllib.loads((tmp_path / "out/profile.toml").read_text())
    assert profile["security_protocol"] == "SSL"
    assert profile["brokers"] == "10.0.0.21:9092,10.0.0.22:9092,10.0.0.23:9092"
    # Rendering again keeps the CA (and renews the node certificates from it).
    ca_pem = (tmp_path / "out/tls/ca.crt").read_bytes()
    render_to(inv_file, tmp_path / "out")
    assert (tmp_path / "out/tls/ca.crt").read_bytes() == ca_pem
