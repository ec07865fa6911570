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
