"""``tidelog user create|delete|list`` through click's CliRunner against a fake broker
(tests/unit/fake_scram_broker.py): the password only from a prompt, standard input or a file,
never an argument nor in the output; one error line per failure; and the profile's SCRAM user,
refused when others can read the file that holds its password.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from fake_scram_broker import FakeScramBroker, Pki, credential

from tidelog import scram
from tidelog.cli import cli
from tidelog.cli.common import CliError
from tidelog.cli.user import read_password

SHA256, SHA512 = scram.MECHANISMS["SCRAM-SHA-256"], scram.MECHANISMS["SCRAM-SHA-512"]


@pytest.fixture()
def broker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeScramBroker]:
    monkeypatch.setenv("TIDELOG_PROFILE", str(tmp_path / "no-profile.toml"))
    (tmp_path / "no-profile.toml").write_text("")
    with FakeScramBroker() as fake:
        monkeypatch.setenv("TIDELOG_BROKERS", fake.bootstrap)
        yield fake


def run(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["user", *args], input=input)


def logs_in(broker: FakeScramBroker, user: str, password: str, mechanism: Any = SHA256) -> bool:
    stored = broker.credentials.get((user, mechanism.value))
    if stored is None:
        return False
    salted = scram.salted_password(mechanism, password, stored.salt, stored.iterations)
    return scram.verify(stored, scram.client_key(mechanism, salted))


def one_error_line(result: Result, says: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines


# ====================================================================== create
def test_create_reads_the_password_from_stdin(broker: FakeScramBroker) -> None:
    result = run("create", "alice", "--password-stdin", input="hunter2\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.split() == ["USER", "MECHANISM", "ITERATIONS", "STATUS",
                                     "alice", "SCRAM-SHA-256", "4096", "set"]
    assert logs_in(broker, "alice", "hunter2") and not logs_in(broker, "alice", "hunter2\n")
    assert "hunter2" not in result.output


def test_create_both_mechanisms_from_a_file_as_json(broker: FakeScramBroker,
                                                     tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\r\n")
    result = run("create", "bob", "--password-file", str(secret), "--mechanism", "scram-sha-512",
                 "--mechanism", "SCRAM-SHA-256", "--iterations", "8192", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {"user": "bob", "mechanism": "SCRAM-SHA-512", "iterations": 8192, "status": "set"},
        {"user": "bob", "mechanism": "SCRAM-SHA-256", "iterations": 8192, "status": "set"}]
    assert logs_in(broker, "bob", "s3cret", SHA512) and logs_in(broker, "bob", "s3cret")


@pytest.mark.parametrize(("args", "stdin", "says"), [
    (["create", "alice"], None, "no terminal to ask for the password on: give "
                                "--password-stdin or --password-file FILE"),
    (["create", "alice", "--password", "hunter2"], None, "No such option '--password'"),
    (["create", "alice", "--password-stdin"], "\n", "the password is empty"),
    (["create", "alice", "--password-stdin"], "a\nb\n", "more than one line"),
    (["create", "alice", "--password-stdin", "--password-file", "x"], "pw\n", "at most one of"),
    (["create", "alice", "--password-file", "/nope/pw"], None,
     "cannot read --password-file /nope/pw: No such file"),
    (["create", "alice", "--password-stdin", "--mechanism", "PLAIN"], "pw\n",
     "'PLAIN': one of SCRAM-SHA-256, SCRAM-SHA-512"),
    (["create", "alice", "--password-stdin", "--iterations", "10"], "pw\n",
     "10 is not in the range 4096<=x<=16384"),
    (["create", " alice", "--password-stdin"], "pw\n", "leading or trailing whitespace"),
    (["create", "a\tb", "--password-stdin"], "pw\n", "contains a control character"),
])
def test_create_mistakes_are_one_line(broker: FakeScramBroker, args: list[str],
                                      stdin: str | None, says: str) -> None:
    result = run(*args, input=stdin)
    assert result.exit_code == 2, result.output
    one_error_line(result, says)
    assert broker.requests == []


def test_a_password_file_that_is_not_utf8(broker: FakeScramBroker, tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_bytes(b"caf\xe9\n")
    result = run("create", "alice", "--password-file", str(secret))
    assert result.exit_code == 2
    one_error_line(result, f"--password-file {secret} is not UTF-8 text")


def test_on_a_terminal_the_password_is_typed_twice_unechoed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: dict[str, Any] = {}

    def prompt(text: str, **kwargs: Any) -> str:
        asked.update(kwargs, text=text)
        return "typed"

    monkeypatch.setattr(click, "prompt", prompt)
    assert read_password(False, None, tty=True) == "typed"
    assert asked["hide_input"] and asked["confirmation_prompt"]
    with pytest.raises(CliError, match="no terminal"):
        read_password(False, None, tty=False)


def test_the_help_says_why_there_is_no_password_argument(broker: FakeScramBroker) -> None:
    result = run("create", "--help")
    assert "never an argument" in result.output and "--password-stdin" in result.output


# ====================================================================== list and delete
def test_list_every_user_or_named_ones(broker: FakeScramBroker) -> None:
    broker.add(credential("bob", "pw", "SCRAM-SHA-512", iterations=8192))
    broker.add(credential("alice", "pw"))
    listed = run("list")
    assert listed.exit_code == 0, listed.output
    assert [line.split() for line in listed.stdout.splitlines()] == [
        ["USER", "MECHANISM", "ITERATIONS"], ["alice", "SCRAM-SHA-256", "4096"],
        ["bob", "SCRAM-SHA-512", "8192"]]
    named = run("list", "bob", "carol", "--format", "json")
    assert named.exit_code == 2
    assert json.loads(named.stdout) == [{"user": "bob", "mechanism": "SCRAM-SHA-512",
                                         "iterations": 8192}]
    one_error_line(named, "cannot list user 'carol': user 'carol' has no credentials "
                          "(RESOURCE_NOT_FOUND)")
    broker.credentials.clear()
    assert run("list").stdout.strip() == "(none)"


def test_delete_every_mechanism_of_a_user_or_one(broker: FakeScramBroker) -> None:
    broker.add(credential("alice", "pw"))
    broker.add(credential("alice", "pw", "SCRAM-SHA-512"))
    broker.add(credential("bob", "pw"))
    broker.add(credential("bob", "pw", "SCRAM-SHA-512"))
    one = run("delete", "bob", "--mechanism", "SCRAM-SHA-512")
    assert one.exit_code == 0, one.output
    assert set(broker.credentials) == {("alice", 1), ("alice", 2), ("bob", 1)}
    every = run("delete", "alice", "carol")
    assert every.exit_code == 2
    assert [line.split() for line in every.stdout.splitlines()] == [
        ["USER", "MECHANISM", "STATUS"], ["alice", "SCRAM-SHA-256", "deleted"],
        ["alice", "SCRAM-SHA-512", "deleted"]]
    one_error_line(every, "cannot delete user 'carol'")
    assert set(broker.credentials) == {("bob", 1)}


# ====================================================================== the profile's user
@pytest.fixture()
def tls_broker(tmp_path: Path) -> Iterator[tuple[FakeScramBroker, Pki]]:
    pki = Pki.make(tmp_path)
    with FakeScramBroker(pki, require_auth=True) as fake:
        fake.add(credential("admin", "admin-secret"))
        yield fake, pki


def write_profile(path: Path, broker: FakeScramBroker, pki: Pki, password: str,
                  mode: int) -> None:
    path.write_text(f'brokers = "{broker.bootstrap}"\nsecurity_protocol = "SASL_SSL"\n'
                    f'ssl_cafile = "{pki.ca_file}"\nsasl_username = "admin"\n'
                    f'sasl_password = "{password}"\n')
    path.chmod(mode)


def test_the_profiles_scram_user_is_used(tls_broker: tuple[FakeScramBroker, Pki],
                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    broker, pki = tls_broker
    profile = tmp_path / "profile.toml"
    monkeypatch.setenv("TIDELOG_PROFILE", str(profile))
    monkeypatch.delenv("TIDELOG_BROKERS", raising=False)
    write_profile(profile, broker, pki, "admin-secret", 0o600)
    listed = run("list")
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.split()[3:] == ["admin", "SCRAM-SHA-256", "4096"]
    assert broker.auth_metadata[-1][scram.METADATA_USER] == b"admin"

    write_profile(profile, broker, pki, "wrong", 0o600)
    refused = run("list")
    assert refused.exit_code == 2
    one_error_line(refused, "cannot list users: broker 127.0.0.1")
    assert "(SASL_AUTHENTICATION_FAILED); check sasl_username and sasl_password" in (
        refused.stderr)
    assert "wrong" not in refused.output


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_profile_with_a_password_others_can_read_is_refused(
        tls_broker: tuple[FakeScramBroker, Pki], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, mode: int) -> None:
    broker, pki = tls_broker
    profile = tmp_path / "profile.toml"
    monkeypatch.setenv("TIDELOG_PROFILE", str(profile))
    write_profile(profile, broker, pki, "admin-secret", mode)
    result = run("list")
    assert result.exit_code == 2
    one_error_line(result, f"profile {profile} holds sasl_password and others can read it "
                           "(mode -rw-")
    assert "chmod 600 it" in result.stderr and "admin-secret" not in result.output
    assert broker.calls == []
