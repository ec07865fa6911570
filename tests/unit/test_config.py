"""Node config files: parsing, defaults, and the errors a typo or bad value produces.

Parses TOML text with tidelog.config and checks that every mistake (unknown key, wrong type,
missing key, bad role, invalid timeouts) is an INVALID_CONFIG error naming the key.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.config import load_config, markdown, parse_config
from tidelog.errors import InvalidConfigError

BASE = """
node_id = 1
data_dir = "/tmp/tidelog-test"
roles = ["controller"]
[[controller.voters]]
id = 1
host = "127.0.0.1"
port = 19093
raft_port = 19094
[[controller.voters]]
id = 2
host = "127.0.0.1"
"""


def test_defaults_and_voters() -> None:
    cfg = parse_config(BASE)
    assert cfg.is_controller and not cfg.is_broker
    assert cfg.voter().raft_address == "127.0.0.1:19094"
    assert cfg.controller.voters[1].port == 9093  # the documented default
    assert cfg.controller.broker_session_timeout_ms == 9000
    assert cfg.broker.log_flush_policy == "never"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("[broker]\nprot = 1", "unknown config key 'broker.prot'"),
        ('[broker]\nport = "9092"', "broker.port must be int"),
        ("[broker]\nport = true", "broker.port must be int"),
        ('log_level = "LOUD"', "not a log level"),
        ('[broker]\nlog_flush_policy = "sometimes"', "log_flush_policy"),
        ("[controller]\nelection_timeout_min_ms = 100", "3 * append_entries_period_ms"),
        ("broker = 3", "broker must be a table"),
    ],
)
def test_mistakes_name_the_key(extra: str, message: str) -> None:
    text = BASE.replace("[[controller.voters]]", extra + "\n[[controller.voters]]", 1)
    if extra.startswith("["):  # a table must come after the top-level keys and before voters
        text = BASE + "\n" + extra
    with pytest.raises(InvalidConfigError, match=message.replace("*", r"\*")):
        parse_config(text)


def test_missing_and_invalid_top_level() -> None:
    with pytest.raises(InvalidConfigError, match="missing config key data_dir"):
        parse_config("node_id = 1")
    with pytest.raises(InvalidConfigError, match="roles"):
        parse_config(BASE.replace('roles = ["controller"]', 'roles = ["router"]'))
    with pytest.raises(InvalidConfigError, match=r"not in \[\[controller\.voters\]\]"):
        parse_config(BASE.replace("node_id = 1", "node_id = 7"))
    with pytest.raises(InvalidConfigError, match="not valid TOML"):
        parse_config("node_id = ")


def test_unreadable_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.toml")


def test_reference_lists_every_key_and_the_committed_page_is_current() -> None:
    text = markdown()
    for key in ("broker_session_timeout_ms", "raft_port", "log_flush_policy", "node_id",
                "min.insync.replicas", "retention.ms"):
        assert f"`{key}`" in text
    page = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    assert page.read_text() == text + "\n", "regenerate: python -m tidelog.config --markdown"


# ------------------------------------------------------------------ listeners and the secret
def _secret_file(tmp_path: Path, *, mode: int = 0o600, text: str | None = None) -> Path:
    from tidelog.cluster_secret import generate_secret, write_secret_file

    path = tmp_path / "cluster.secret"
    write_secret_file(path, text if text is not None else generate_secret())
    path.chmod(mode)
    return path


@pytest.mark.parametrize("table", ['[controller]\nlisten_host = "10.0.0.5"',
                                   '[controller]\nraft_listen_host = "0.0.0.0"',
                                   '[controller]\nraft_listen_host = "::"',
                                   '[controller]\nraft_listen_host = "ctrl-1.internal"'])
def test_a_controller_off_loopback_needs_a_secret(table: str) -> None:
    with pytest.raises(InvalidConfigError, match="is not loopback, so this node needs "
                                                 "cluster_secret_file"):
        parse_config(BASE + "\n" + table)


def test_a_broker_inter_broker_listener_off_loopback_needs_a_secret() -> None:
    text = BASE.replace('roles = ["controller"]', 'roles = ["broker"]')
    with pytest.raises(InvalidConfigError, match=r"broker\.inter_broker_listen_host"):
        parse_config(text + '\n[broker]\ninter_broker_listen_host = "0.0.0.0"')


def test_with_a_secret_a_wildcard_bind_is_allowed(tmp_path: Path) -> None:
    path = _secret_file(tmp_path)
    text = BASE.replace('roles = ["controller"]',
                        f'roles = ["controller"]\ncluster_secret_file = "{path}"')
    cfg = parse_config(text + '\n[controller]\nraft_listen_host = "0.0.0.0"')
    assert cfg.raft_bind_host == "0.0.0.0"
    assert cfg.cluster_secret() == path.read_text().strip()


@pytest.mark.parametrize(("mode", "text", "message"), [
    (0o644, None, "readable by others"),
    (0o600, "short", "at least 32 characters"),
])
def test_a_bad_secret_file_is_refused_in_one_line(tmp_path: Path, mode: int, text: str | None,
                                                   message: str) -> None:
    path = _secret_file(tmp_path, mode=mode, text=text)
    with pytest.raises(InvalidConfigError, match=message):
        parse_config(BASE.replace('roles = ["controller"]',
                                  f'roles = ["controller"]\ncluster_secret_file = "{path}"'))


def test_the_inter_broker_port_is_not_the_client_port() -> None:
    text = BASE.replace('roles = ["controller"]', 'roles = ["broker"]')
    with pytest.raises(InvalidConfigError, match="inter_broker_port must differ"):
        parse_config(text + "\n[broker]\nport = 9095\ninter_broker_port = 9095")


# ------------------------------------------------------------------ whose secret (issue 25)
def _broker(extra: str = "") -> str:
    return BASE.replace('roles = ["controller"]', f'roles = ["broker"]\nnode_id = 101{extra}') \
        .replace("node_id = 1\n", "", 1)


def _credential_file(tmp_path: Path, broker_id: int) -> Path:
    from tidelog.cluster_secret import broker_credential, write_broker_credential_file

    path = tmp_path / f"broker-{broker_id}.credential"
    write_broker_credential_file(path, broker_credential(_secret_file(tmp_path).read_text()
                                                         .strip(), broker_id))
    return path


def test_a_broker_only_node_refuses_the_cluster_secret_naming_the_command(
        tmp_path: Path) -> None:
    path = _secret_file(tmp_path)
    with pytest.raises(InvalidConfigError) as refused:
        parse_config(_broker(f'\ncluster_secret_file = "{path}"'))
    line = refused.value.message
    assert "\n" not in line and "broker-only node 101" in line
    assert f"tidelog storage broker-credential --secret-file {path} --broker-id 101" in line


def test_a_broker_holds_its_own_credential_and_nothing_else(tmp_path: Path) -> None:
    from tidelog.cluster_secret import broker_credential, read_secret_file

    path = _credential_file(tmp_path, 101)
    cfg = parse_config(_broker(f'\nbroker_credential_file = "{path}"'))
    root = read_secret_file(tmp_path / "cluster.secret")
    assert cfg.cluster_secret() is None
    assert cfg.broker_credential() == broker_credential(root, 101)
    assert root not in path.read_text()


@pytest.mark.parametrize(("which", "message"), [
    ("another broker's", "is broker 102's credential, and this is node 101"),
    ("the cluster secret", "not a broker credential (it holds a cluster secret"),
])
def test_a_credential_file_of_another_kind_is_refused(tmp_path: Path, which: str,
                                                      message: str) -> None:
    path = _credential_file(tmp_path, 102) if which == "another broker's" \
        else _secret_file(tmp_path)
    with pytest.raises(InvalidConfigError) as refused:
        parse_config(_broker(f'\nbroker_credential_file = "{path}"'))
    assert message in refused.value.message


def test_a_controller_takes_no_broker_credential(tmp_path: Path) -> None:
    path = _credential_file(tmp_path, 1)
    with pytest.raises(InvalidConfigError, match="broker_credential_file is for broker-only"):
        parse_config(BASE.replace('roles = ["controller"]',
                                  f'roles = ["controller"]\nbroker_credential_file = "{path}"'))


@pytest.mark.parametrize(("role", "table", "key"), [
    ("controller", '[controller]\nlisten_host = "10.0.0.5"', "controller.listen_host"),
    ("broker", '[broker]\ninter_broker_listen_host = "0.0.0.0"',
     "broker.inter_broker_listen_host"),
])
def test_a_plaintext_peer_listener_off_loopback_is_refused(tmp_path: Path, role: str,
                                                           table: str, key: str) -> None:
    if role == "controller":
        text = BASE.replace('roles = ["controller"]', 'roles = ["controller"]\n'
                            f'cluster_secret_file = "{_secret_file(tmp_path)}"')
    else:
        text = _broker(f'\nbroker_credential_file = "{_credential_file(tmp_path, 101)}"')
    with pytest.raises(InvalidConfigError) as refused:
        parse_config(text + "\n" + table)
    assert refused.value.message.startswith(f"{key} = ")
    assert "[tls] is not set" in refused.value.message and "replay" in refused.value.message


def test_the_raft_port_may_stay_plaintext_off_loopback(tmp_path: Path) -> None:
    """Its handshake is a challenge-response and every frame is MAC'd: nothing to replay."""
    text = BASE.replace('roles = ["controller"]', 'roles = ["controller"]\n'
                        f'cluster_secret_file = "{_secret_file(tmp_path)}"')
    cfg = parse_config(text + '\n[controller]\nraft_listen_host = "10.0.0.5"')
    assert cfg.raft_bind_host == "10.0.0.5" and not cfg.tls.enabled
