"""A container's node.toml from TIDELOG_* environment variables (tidelog.deploy.container).

Every rendered config is parsed back with tidelog.config (with real files: a controller's 0600
cluster secret, a broker's own 0600 credential, TLS files of a CA), and every mistake in the
environment is checked to be an InvalidConfigError of one line that names the variable at fault.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tidelog.certs import issue, make_ca
from tidelog.cluster_secret import (
    broker_credential,
    generate_secret,
    write_broker_credential_file,
    write_secret_file,
)
from tidelog.config import NodeConfig, parse_config
from tidelog.deploy.container import (
    ENV_VARIABLES,
    node_config_from_env,
    parse_voters,
    pod_ordinal,
    settings_from_env,
)
from tidelog.errors import InvalidConfigError

VOTERS = ("1@tidelog-controller-0.tidelog-controller:9093:9094,"
          "2@tidelog-controller-1.tidelog-controller:9093:9094,"
          "3@tidelog-controller-2.tidelog-controller:9093:9094")
COMMON = {"TIDELOG_CONTROLLER_VOTERS": VOTERS, "TIDELOG_CLUSTER_ID": "0123456789abcdef"}
CONTROLLER = {**COMMON, "TIDELOG_ROLE": "controller", "TIDELOG_NODE_ID_BASE": "1"}
BROKER = {**COMMON, "TIDELOG_ROLE": "broker", "TIDELOG_NODE_ID_BASE": "101"}
CONTROLLER_HOST = "tidelog-controller-1"
BROKER_HOST = "tidelog-broker-2"
#: TLS file variables for the checks that read no file (check_secret=False).
TLS_PATHS = {"TIDELOG_TLS_CA_FILE": "/tls/ca.crt", "TIDELOG_TLS_CERT_FILE": "/tls/node.crt",
             "TIDELOG_TLS_KEY_FILE": "/tls/node.key"}


@pytest.fixture
def secret_file(tmp_path: Path) -> str:
    """The cluster secret, beside a CA, a node certificate and its key (tls/)."""
    path = tmp_path / "cluster.secret"
    write_secret_file(path, generate_secret())
    ca = make_ca()
    tls = tmp_path / "tls"
    tls.mkdir()
    node = issue(ca, "node", hosts=("127.0.0.1",))
    (tls / "ca.crt").write_bytes(ca.cert_pem)
    (tls / "node.crt").write_bytes(node.cert_pem)
    write_secret_file(tls / "node.key", node.key_pem.decode().strip())
    return str(path)


def tls_env(secret_file: str) -> dict[str, str]:
    tls = Path(secret_file).parent / "tls"
    return {"TIDELOG_TLS_CA_FILE": str(tls / "ca.crt"),
            "TIDELOG_TLS_CERT_FILE": str(tls / "node.crt"),
            "TIDELOG_TLS_KEY_FILE": str(tls / "node.key")}


def parsed(env: dict[str, str], hostname: str, secret_file: str) -> NodeConfig:
    """Render with the role's secret file (a broker's own credential, made from the cluster
    secret for its id) and the TLS files, then parse as `tidelog server` will."""
    env = {**tls_env(secret_file), **env}
    if env["TIDELOG_ROLE"] == "broker":
        node_id = settings_from_env(env, hostname).node_id
        credential = Path(secret_file).with_name(f"broker-{node_id}.credential")
        write_broker_credential_file(credential, broker_credential(
            Path(secret_file).read_text().strip(), node_id))
        env["TIDELOG_BROKER_CREDENTIAL_FILE"] = str(credential)
    else:
        env["TIDELOG_CLUSTER_SECRET_FILE"] = secret_file
    return parse_config(node_config_from_env(env, hostname))


# ------------------------------------------------------------------ what the env gives


def test_a_controller_takes_its_id_from_the_pod_ordinal(secret_file: str) -> None:
    cfg = parsed(CONTROLLER, CONTROLLER_HOST, secret_file)
    assert cfg.node_id == 2 and cfg.roles == ("controller",)
    assert cfg.voter().address == "tidelog-controller-1.tidelog-controller:9093"
    assert cfg.voter().raft_address == "tidelog-controller-1.tidelog-controller:9094"
    assert [v.id for v in cfg.controller.voters] == [1, 2, 3]
    assert cfg.controller.listen_host == "0.0.0.0" and cfg.raft_bind_host == "0.0.0.0"
    assert (cfg.metrics.host, cfg.metrics.port) == ("0.0.0.0", 9644)
    assert cfg.data_dir == "/var/lib/tidelog/data"
    assert cfg.cluster_id == "0123456789abcdef"
    assert cfg.cluster_secret_file == secret_file
    assert cfg.log_level == "INFO"


def test_a_broker_advertises_its_hostname_by_default(secret_file: str) -> None:
    cfg = parsed(BROKER, BROKER_HOST, secret_file)
    assert cfg.node_id == 103 and cfg.roles == ("broker",)
    b = cfg.broker
    assert (b.host, b.listen_host, b.port) == (BROKER_HOST, "0.0.0.0", 9092)
    assert (b.inter_broker_host, b.inter_broker_listen_host, b.inter_broker_port) == (
        BROKER_HOST, "0.0.0.0", 9095)
    assert b.rack == ""
    assert len(cfg.controller.voters) == 3


def test_every_variable_of_a_broker(secret_file: str) -> None:
    env = {**BROKER, "TIDELOG_NODE_ID": "7", "TIDELOG_NODE_ID_BASE": "",
           "TIDELOG_ADVERTISED_HOST": "broker.example.com",
           "TIDELOG_INTER_BROKER_HOST": "10.1.2.3", "TIDELOG_LISTEN_HOST": "10.1.2.3",
           "TIDELOG_CLIENT_PORT": "19092", "TIDELOG_INTER_BROKER_PORT": "19095",
           "TIDELOG_METRICS_PORT": "19644", "TIDELOG_DATA_DIR": "/data/tidelog",
           "TIDELOG_RACK": "eu-west-1a", "TIDELOG_LOG_LEVEL": "debug",
           "TIDELOG_RUNTIME_DIR": "/somewhere", "TIDELOG_BROKERS": "x:1"}
    cfg = parsed(env, "ignored-0", secret_file)
    b = cfg.broker
    assert cfg.node_id == 7
    assert (b.host, b.port, b.inter_broker_host, b.inter_broker_port) == (
        "broker.example.com", 19092, "10.1.2.3", 19095)
    assert b.listen_host == b.inter_broker_listen_host == cfg.metrics.host == "10.1.2.3"
    assert cfg.metrics.port == 19644
    assert (cfg.data_dir, b.rack, cfg.log_level) == ("/data/tidelog", "eu-west-1a", "DEBUG")


def test_the_ordinal_is_read_from_the_first_label_of_a_qualified_hostname() -> None:
    s = settings_from_env({**BROKER, **TLS_PATHS},
                          "tidelog-broker-1.tidelog-broker.ns.svc.cluster.local")
    assert s.node_id == 102
    assert s.advertised_host == "tidelog-broker-1.tidelog-broker.ns.svc.cluster.local"
    assert [pod_ordinal(h) for h in ("a-0", "my-set-12", "x-3.svc")] == [0, 12, 3]


def test_voters_ports_default_to_the_port_variables(secret_file: str) -> None:
    env = {**CONTROLLER, "TIDELOG_CONTROLLER_VOTERS": "1@c0,2@c1:7000,3@[fd00::3]:7000:7001",
           "TIDELOG_CONTROLLER_PORT": "8000", "TIDELOG_RAFT_PORT": "8001"}
    cfg = parsed(env, "c-0", secret_file)
    assert [(v.id, v.host, v.port, v.raft_port) for v in cfg.controller.voters] == [
        (1, "c0", 8000, 8001), (2, "c1", 7000, 8001), (3, "[fd00::3]", 7000, 7001)]
    assert parse_voters("5@h")[0].address == "h:9093"


def test_an_empty_value_is_the_default(secret_file: str) -> None:
    env = {**BROKER, "TIDELOG_CLIENT_PORT": "", "TIDELOG_RACK": " ", "TIDELOG_LOG_LEVEL": "",
           "TIDELOG_ADVERTISED_HOST": ""}
    cfg = parsed(env, BROKER_HOST, secret_file)
    assert (cfg.broker.port, cfg.broker.rack, cfg.log_level, cfg.broker.host) == (
        9092, "", "INFO", BROKER_HOST)


def test_without_check_secret_nothing_is_read(tmp_path: Path) -> None:
    env = {**BROKER, "TIDELOG_BROKER_CREDENTIAL_FILE": str(tmp_path / "absent"),
           "TIDELOG_LISTEN_HOST": "127.0.0.1"}
    text = node_config_from_env(env, BROKER_HOST, check_secret=False)
    assert f'broker_credential_file = "{tmp_path / "absent"}"' in text
    with pytest.raises(InvalidConfigError, match="TIDELOG_BROKER_CREDENTIAL_FILE: cannot read"):
        node_config_from_env(env, BROKER_HOST)


def test_a_broker_gets_its_own_credential_and_a_certificate_not_the_cluster_secret(
        secret_file: str) -> None:
    cfg = parsed(BROKER, BROKER_HOST, secret_file)
    assert cfg.cluster_secret() is None
    assert cfg.broker_credential() == broker_credential(
        Path(secret_file).read_text().strip(), 103)
    assert cfg.tls.enabled and cfg.tls.client_listener == "tls"
    plaintext_clients = parsed({**BROKER, "TIDELOG_TLS_CLIENT_LISTENER": "plaintext"},
                               BROKER_HOST, secret_file)
    assert plaintext_clients.tls.client_listener == "plaintext"


def test_strings_are_quoted_for_toml(secret_file: str) -> None:
    env = {**BROKER, "TIDELOG_DATA_DIR": '/data/"quoted"\\dir', "TIDELOG_RACK": 'r"1'}
    cfg = parsed(env, BROKER_HOST, secret_file)
    assert (cfg.data_dir, cfg.broker.rack) == ('/data/"quoted"\\dir', 'r"1')


def test_the_contract_documents_every_variable_it_reads() -> None:
    source = Path(__file__).resolve().parents[2] / "tidelog/deploy/container.py"
    read = set(re.findall(r'"(TIDELOG_[A-Z_]+)"', source.read_text()))
    assert read - {"TIDELOG_BROKERS", "TIDELOG_CLUSTER_DIR", "TIDELOG_CHAOS_NETNS"} == set(
        ENV_VARIABLES)


# ------------------------------------------------------------------ mistakes

Change = dict[str, str | None]

ERRORS: list[tuple[str, dict[str, str], Change, str, str]] = [
    # (id, base env, changes (None deletes), hostname, expected substring)
    ("role missing", CONTROLLER, {"TIDELOG_ROLE": None}, CONTROLLER_HOST,
     "TIDELOG_ROLE is not set: give controller or broker"),
    ("role unknown", CONTROLLER, {"TIDELOG_ROLE": "combined"}, CONTROLLER_HOST,
     "TIDELOG_ROLE='combined' is not controller or broker"),
    ("no node id", CONTROLLER, {"TIDELOG_NODE_ID_BASE": None}, CONTROLLER_HOST,
     "TIDELOG_NODE_ID is not set: give it, or TIDELOG_NODE_ID_BASE"),
    ("id and base", CONTROLLER, {"TIDELOG_NODE_ID": "1"}, CONTROLLER_HOST,
     "TIDELOG_NODE_ID and TIDELOG_NODE_ID_BASE are both set"),
    ("id not a number", BROKER, {"TIDELOG_NODE_ID_BASE": None, "TIDELOG_NODE_ID": "x1"},
     BROKER_HOST, "TIDELOG_NODE_ID='x1' is not a non-negative integer"),
    ("negative id", BROKER, {"TIDELOG_NODE_ID_BASE": None, "TIDELOG_NODE_ID": "-4"},
     BROKER_HOST, "TIDELOG_NODE_ID='-4' is not a non-negative integer"),
    ("base not a number", BROKER, {"TIDELOG_NODE_ID_BASE": "1o1"}, BROKER_HOST,
     "TIDELOG_NODE_ID_BASE='1o1' is not a non-negative integer"),
    ("no ordinal", BROKER, {}, "tidelog-broker",
     "TIDELOG_NODE_ID_BASE needs a StatefulSet pod's hostname, ending in -<ordinal>, but the "
     "hostname is 'tidelog-broker'"),
    ("ordinal not a number", BROKER, {}, "tidelog-broker-x2",
     "TIDELOG_NODE_ID_BASE needs a StatefulSet pod's hostname"),
    ("voters missing", BROKER, {"TIDELOG_CONTROLLER_VOTERS": None}, BROKER_HOST,
     "TIDELOG_CONTROLLER_VOTERS is not set: list the controller quorum"),
    ("voters malformed", BROKER, {"TIDELOG_CONTROLLER_VOTERS": "1:c0:9093:9094"}, BROKER_HOST,
     "TIDELOG_CONTROLLER_VOTERS entry '1:c0:9093:9094' is not id@host:port:raft_port"),
    ("voters too many ports", BROKER, {"TIDELOG_CONTROLLER_VOTERS": "1@c0:1:2:3"}, BROKER_HOST,
     "TIDELOG_CONTROLLER_VOTERS entry '1@c0:1:2:3' is not id@host:port:raft_port"),
    ("voters id not a number", BROKER, {"TIDELOG_CONTROLLER_VOTERS": "one@c0:1:2"},
     BROKER_HOST, "TIDELOG_CONTROLLER_VOTERS entry 'one@c0:1:2' is not"),
    ("voters stray comma", BROKER, {"TIDELOG_CONTROLLER_VOTERS": "1@c0:1:2,"}, BROKER_HOST,
     "TIDELOG_CONTROLLER_VOTERS has an empty entry (a stray comma?)"),
    ("voters port out of range", BROKER, {"TIDELOG_CONTROLLER_VOTERS": "1@c0:99999:9094"},
     BROKER_HOST, "TIDELOG_CONTROLLER_VOTERS entry '1@c0:99999:9094': port '99999' is not"),
    ("voters port not a number", BROKER, {"TIDELOG_CONTROLLER_VOTERS": "1@c0:x"},
     BROKER_HOST, "TIDELOG_CONTROLLER_VOTERS entry '1@c0:x': port 'x' is not a number"),
    ("voters wildcard", BROKER, {"TIDELOG_CONTROLLER_VOTERS": "1@0.0.0.0:9093:9094"},
     BROKER_HOST, "TIDELOG_CONTROLLER_VOTERS entry '1@0.0.0.0:9093:9094': 0.0.0.0 is a wildcard"),
    ("voters same ports", BROKER, {"TIDELOG_CONTROLLER_VOTERS": "1@c0:9093:9093"}, BROKER_HOST,
     "TIDELOG_CONTROLLER_VOTERS entry '1@c0:9093:9093': the port and the Raft port must differ"),
    ("voters duplicate id", BROKER, {"TIDELOG_CONTROLLER_VOTERS": "1@c0:1:2,1@c1:1:2"},
     BROKER_HOST, "TIDELOG_CONTROLLER_VOTERS names controller id 1 twice"),
    ("voters shared address", BROKER, {"TIDELOG_CONTROLLER_VOTERS": "1@c0:1:2,2@c0:2:3"},
     BROKER_HOST, "TIDELOG_CONTROLLER_VOTERS: controllers 1 and 2 share an address"),
    ("controller not a voter", CONTROLLER, {"TIDELOG_NODE_ID_BASE": "11"}, CONTROLLER_HOST,
     "TIDELOG_NODE_ID_BASE + pod ordinal 1 gives controller node id 12, which is not among the "
     "ids of TIDELOG_CONTROLLER_VOTERS (1, 2, 3)"),
    ("broker id of a controller", BROKER,
     {"TIDELOG_NODE_ID_BASE": None, "TIDELOG_NODE_ID": "2"}, BROKER_HOST,
     "TIDELOG_NODE_ID gives broker node id 2, a controller's id in TIDELOG_CONTROLLER_VOTERS"),
    ("controller port disagrees", CONTROLLER, {"TIDELOG_CONTROLLER_PORT": "9999"},
     CONTROLLER_HOST, "TIDELOG_CONTROLLER_PORT=9999 but this controller's entry in "
     "TIDELOG_CONTROLLER_VOTERS says 9093"),
    ("raft port disagrees", CONTROLLER, {"TIDELOG_RAFT_PORT": "9999"}, CONTROLLER_HOST,
     "TIDELOG_RAFT_PORT=9999 but this controller's entry in TIDELOG_CONTROLLER_VOTERS says 9094"),
    ("port not a number", BROKER, {"TIDELOG_CLIENT_PORT": "http"}, BROKER_HOST,
     "TIDELOG_CLIENT_PORT='http' is not a port (1..65535)"),
    ("port zero", BROKER, {"TIDELOG_METRICS_PORT": "0"}, BROKER_HOST,
     "TIDELOG_METRICS_PORT='0' is not a port (1..65535)"),
    ("port too large", BROKER, {"TIDELOG_INTER_BROKER_PORT": "65536"}, BROKER_HOST,
     "TIDELOG_INTER_BROKER_PORT='65536' is not a port (1..65535)"),
    ("service link", BROKER, {"TIDELOG_CLIENT_PORT": "tcp://10.0.0.7:9092"}, BROKER_HOST,
     "TIDELOG_CLIENT_PORT='tcp://10.0.0.7:9092' is not a port (1..65535); a Kubernetes "
     "Service link? set enableServiceLinks: false"),
    ("bad raft port on a broker", BROKER, {"TIDELOG_RAFT_PORT": "x"}, BROKER_HOST,
     "TIDELOG_RAFT_PORT='x' is not a port"),
    ("broker ports collide", BROKER, {"TIDELOG_METRICS_PORT": "9092"}, BROKER_HOST,
     "TIDELOG_METRICS_PORT and TIDELOG_CLIENT_PORT are both 9092"),
    ("broker listeners collide", BROKER, {"TIDELOG_INTER_BROKER_PORT": "9092"}, BROKER_HOST,
     "TIDELOG_INTER_BROKER_PORT and TIDELOG_CLIENT_PORT are both 9092"),
    ("controller ports collide", CONTROLLER, {"TIDELOG_METRICS_PORT": "9094"}, CONTROLLER_HOST,
     "TIDELOG_METRICS_PORT and TIDELOG_RAFT_PORT are both 9094"),
    ("cluster id missing", BROKER, {"TIDELOG_CLUSTER_ID": None}, BROKER_HOST,
     "TIDELOG_CLUSTER_ID is not set: make one with `tidelog storage random-uuid`"),
    ("cluster id with =", BROKER, {"TIDELOG_CLUSTER_ID": "a=b"}, BROKER_HOST,
     "TIDELOG_CLUSTER_ID='a=b' has '=', a space or a control character"),
    ("cluster id with a space", BROKER, {"TIDELOG_CLUSTER_ID": "a b"}, BROKER_HOST,
     "TIDELOG_CLUSTER_ID='a b' has '='"),
    ("advertised wildcard", BROKER, {"TIDELOG_ADVERTISED_HOST": "0.0.0.0"}, BROKER_HOST,
     "TIDELOG_ADVERTISED_HOST='0.0.0.0' is a wildcard: give a name or address others can reach"),
    ("advertised not a host", BROKER, {"TIDELOG_ADVERTISED_HOST": "a b"}, BROKER_HOST,
     "TIDELOG_ADVERTISED_HOST='a b' is not a host name or address"),
    ("advertised with a port", BROKER, {"TIDELOG_ADVERTISED_HOST": "b0:9092"}, BROKER_HOST,
     "TIDELOG_ADVERTISED_HOST='b0:9092' is not a host name or address"),
    ("no hostname", BROKER, {"TIDELOG_NODE_ID_BASE": None, "TIDELOG_NODE_ID": "101"}, "",
     "TIDELOG_ADVERTISED_HOST is not set and there is no hostname to default to"),
    ("inter-broker wildcard", BROKER, {"TIDELOG_INTER_BROKER_HOST": "[::]"}, BROKER_HOST,
     "TIDELOG_INTER_BROKER_HOST='[::]' is a wildcard"),
    ("listen host", BROKER, {"TIDELOG_LISTEN_HOST": "all interfaces"}, BROKER_HOST,
     "TIDELOG_LISTEN_HOST='all interfaces' is not a host name or address"),
    ("data dir relative", BROKER, {"TIDELOG_DATA_DIR": "data"}, BROKER_HOST,
     "TIDELOG_DATA_DIR='data' is not an absolute path"),
    ("data dir control character", BROKER, {"TIDELOG_DATA_DIR": "/data\x00"}, BROKER_HOST,
     "TIDELOG_DATA_DIR has a control character"),
    ("secret file relative", CONTROLLER, {"TIDELOG_CLUSTER_SECRET_FILE": "cluster.secret"},
     CONTROLLER_HOST, "TIDELOG_CLUSTER_SECRET_FILE='cluster.secret' is not an absolute path"),
    ("a broker given the cluster secret", BROKER,
     {"TIDELOG_CLUSTER_SECRET_FILE": "/etc/tidelog/secret/cluster.secret"}, BROKER_HOST,
     "TIDELOG_CLUSTER_SECRET_FILE is set on a broker: the cluster secret is the root of every "
     "broker's credential"),
    ("a controller given a credential", CONTROLLER,
     {"TIDELOG_BROKER_CREDENTIAL_FILE": "/etc/tidelog/secret/broker.credential"},
     CONTROLLER_HOST, "TIDELOG_BROKER_CREDENTIAL_FILE is set on a controller"),
    ("no TLS off loopback", BROKER, {"TIDELOG_TLS_CA_FILE": None, "TIDELOG_TLS_CERT_FILE": None,
                                     "TIDELOG_TLS_KEY_FILE": None}, BROKER_HOST,
     "TIDELOG_LISTEN_HOST='0.0.0.0' is not loopback and TIDELOG_TLS_* are not set"),
    ("half of TLS", CONTROLLER, {"TIDELOG_TLS_KEY_FILE": None}, CONTROLLER_HOST,
     "TIDELOG_TLS_KEY_FILE is not set: TLS needs TIDELOG_TLS_CA_FILE"),
    ("client listener", BROKER, {"TIDELOG_TLS_CLIENT_LISTENER": "ssl"}, BROKER_HOST,
     "TIDELOG_TLS_CLIENT_LISTENER='ssl' is not tls or plaintext"),
    ("rack with a space", BROKER, {"TIDELOG_RACK": "rack 1"}, BROKER_HOST,
     "TIDELOG_RACK='rack 1' has a space or a control character"),
    ("log level", BROKER, {"TIDELOG_LOG_LEVEL": "verbose"}, BROKER_HOST,
     "TIDELOG_LOG_LEVEL='verbose' is not one of DEBUG, INFO, WARNING, ERROR"),
    ("unknown variable", BROKER, {"TIDELOG_RACKK": "r1"}, BROKER_HOST,
     "unknown environment variable TIDELOG_RACKK (known: TIDELOG_ROLE, "),
    ("a typo", BROKER, {"TIDELOG_RACKK": "r1"}, BROKER_HOST, "TIDELOG_RUNTIME_DIR); a typo?"),
    ("a service link's name", BROKER, {"TIDELOG_BOOTSTRAP_SERVICE_HOST": "10.0.0.7"},
     BROKER_HOST, "unknown environment variable TIDELOG_BOOTSTRAP_SERVICE_HOST (known: "),
    ("a service link", BROKER, {"TIDELOG_BOOTSTRAP_PORT_9092_TCP_ADDR": "10.0.0.7"},
     BROKER_HOST, "; a Kubernetes Service link? set enableServiceLinks: false in the pod spec"),
    ("a service link's value", BROKER, {"TIDELOG_BOOTSTRAP_PORT": "tcp://10.0.0.7:9092"},
     BROKER_HOST, "; a Kubernetes Service link? set enableServiceLinks: false in the pod spec"),
]


@pytest.mark.parametrize(("base", "changes", "hostname", "expected"),
                         [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_a_mistake_is_one_line_naming_the_variable(base: dict[str, str], changes: Change,
                                                   hostname: str, expected: str) -> None:
    with_tls = {**TLS_PATHS, **base, **changes}
    env = {k: v for k, v in with_tls.items() if v is not None}
    with pytest.raises(InvalidConfigError) as e:
        node_config_from_env(env, hostname, check_secret=False)
    message = e.value.message
    assert expected in message
    assert "\n" not in message
    assert "TIDELOG_" in message


@pytest.mark.parametrize(("mode", "content", "expected"), [
    (0o640, generate_secret(), "is readable by others (mode -rw-r-----); chmod 600 it"),
    (0o600, "short", "a cluster secret must be one line of at least 32 characters"),
])
def test_a_bad_secret_file_names_the_variable(tmp_path: Path, mode: int, content: str,
                                              expected: str) -> None:
    path = tmp_path / "cluster.secret"
    path.write_text(content + "\n")
    os.chmod(path, mode)
    env = {**CONTROLLER, "TIDELOG_CLUSTER_SECRET_FILE": str(path),
           "TIDELOG_LISTEN_HOST": "127.0.0.1"}
    with pytest.raises(InvalidConfigError) as e:
        node_config_from_env(env, CONTROLLER_HOST)
    assert e.value.message.startswith("TIDELOG_CLUSTER_SECRET_FILE: cluster_secret_file ")
    assert expected in e.value.message and "\n" not in e.value.message
