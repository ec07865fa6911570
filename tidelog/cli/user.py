"""``tidelog user create|delete|list``: SCRAM users (Kafka's ``kafka-configs --entity-type
users``, rpk's ``security user``), for clients that connect with ``security_protocol =
"SASL_SSL"`` (docs/security.md).

A user's password is salted on this machine (``Admin.alter_user_scram_credentials``): only the
salt, the iterations and the salted password reach the cluster, which stores keys derived from
them. The password is never a command-line argument, where ``ps`` and the shell history would
show it: ``create`` prompts for it twice on a terminal, or reads it from standard input
(``--password-stdin``, one line) or from a file (``--password-file``).

``create`` sets the password of each mechanism given (SCRAM-SHA-256 unless ``--mechanism``
says otherwise; a user that exists gets the new password); ``delete`` removes a user's
credentials (every mechanism it has, or those given); ``list`` shows users and their
mechanisms and iterations, never a salt or a key.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from tidelog import scram
from tidelog.cli.common import (
    CliError,
    OneLineCommand,
    OneLineGroup,
    admin_client,
    brokers_option,
    echo_json,
    format_option,
    raise_item_errors,
    table,
    timeout_option,
)

__all__ = ["create", "delete", "list_cmd", "read_password", "user"]

MECHANISMS = tuple(scram.MECHANISMS)
DEFAULT_MECHANISM = "SCRAM-SHA-256"


# ====================================================================== the password
def read_password(stdin: bool, file: str | None, *, tty: bool) -> str:
    """The new password: the one line of standard input (``stdin``, read to its end) or of
    ``file``, or, on a terminal (``tty``), typed twice without echo. A trailing newline is not
    part of it; more than one line, or an empty password, is an error."""
    if stdin and file is not None:
        raise CliError("give at most one of --password-stdin and --password-file")
    if stdin:
        try:
            text = sys.stdin.read()
        except UnicodeDecodeError:
            raise CliError("standard input is not UTF-8 text") from None
        password = _first_line(text, "standard input")
    elif file is not None:
        try:
            text = Path(file).read_text(encoding="utf-8")
        except OSError as e:
            raise CliError(f"cannot read --password-file {file}: {e.strerror}") from None
        except UnicodeDecodeError:
            raise CliError(f"--password-file {file} is not UTF-8 text") from None
        password = _first_line(text, f"--password-file {file}")
    elif tty:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True,
                                err=True)
    else:
        raise CliError("no terminal to ask for the password on: give --password-stdin or "
                       "--password-file FILE")
    if not password:
        raise CliError("the password is empty")
    try:
        password.encode()
    except UnicodeEncodeError:  # undecodable bytes smuggled in as surrogates
        raise CliError("the password is not UTF-8 text") from None
    return password


def _first_line(text: str, where: str) -> str:
    line, newline, rest = text.partition("\n")
    if newline and rest.strip():
        raise CliError(f"{where} holds more than one line; the password is one line")
    return line.removesuffix("\r")


# ====================================================================== output
def _show(found: Mapping[str, Sequence[tuple[str, int]]], status: str | None,
          fmt: str) -> None:
    """(mechanism, iterations) per user as rows of user, mechanism, iterations (the JSON field
    names are part of the interface), and ``status`` when given."""
    extra = {} if status is None else {"status": status}
    rows = [{"user": user, "mechanism": mechanism, "iterations": iterations} | extra
            for user, infos in found.items() for mechanism, iterations in infos]
    if fmt == "json":
        echo_json(rows)
    else:
        table(rows)


def _mechanisms(ctx: click.Context, param: click.Parameter,
                values: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for v in values:
        mechanism = scram.mechanism_named(v)
        if mechanism is None:
            raise click.BadParameter(f"{v!r}: one of {', '.join(MECHANISMS)}")
        out.append(mechanism.name)
    return tuple(dict.fromkeys(out))


def _mechanism_option(help_text: str) -> Callable[[Any], Any]:
    return click.option("--mechanism", "mechanisms", multiple=True, metavar="MECHANISM",
                        callback=_mechanisms,
                        help=f"{help_text} (repeatable): {' or '.join(MECHANISMS)}")


# ====================================================================== commands
@click.group(cls=OneLineGroup)
def user() -> None:
    """Create, delete and list SCRAM users (SASL_SSL clients)."""


@user.command("create", cls=OneLineCommand)
@click.argument("name")
@click.option("--password-stdin", is_flag=True,
              help="read the password from standard input (one line)")
@click.option("--password-file", metavar="FILE",
              help="read the password from FILE (one line)")
@_mechanism_option(f"the mechanism to set; default {DEFAULT_MECHANISM}")
@click.option("--iterations", type=click.IntRange(scram.ITERATIONS_MIN, scram.ITERATIONS_MAX),
              default=scram.ITERATIONS_DEFAULT, show_default=True,
              help="PBKDF2 iterations of the salted password")
@brokers_option
@timeout_option
@format_option
def create(name: str, password_stdin: bool, password_file: str | None,
           mechanisms: tuple[str, ...], iterations: int, brokers: str, timeout_ms: int,
           fmt: str) -> None:
    """Create a SCRAM user, or set a user's new password.

    The password is never an argument (ps and the shell history would show it): typed twice
    on a terminal, or read with --password-stdin or --password-file. It is salted here; the
    cluster never sees it."""
    from tidelog.client import UserScramCredentialUpsertion

    problem = scram.user_name_problem(name)
    if problem is not None:
        raise CliError(f"cannot create user: {problem}")
    password = read_password(password_stdin, password_file, tty=sys.stdin.isatty())
    wanted = mechanisms or (DEFAULT_MECHANISM,)
    with admin_client(brokers, timeout_ms, f"cannot create user {name!r}") as admin:
        result = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(name, m, password, iterations) for m in wanted])
    if name in result.values or fmt == "json":
        done = {name: [(m, iterations) for m in wanted]} if name in result.values else {}
        _show(done, "set", fmt)
    raise_item_errors(result.errors, lambda u: f"cannot create user {u!r}", brokers)


@user.command("delete", cls=OneLineCommand)
@click.argument("names", nargs=-1, required=True)
@_mechanism_option("only this mechanism's credential; default every one the user has")
@brokers_option
@timeout_option
@format_option
def delete(names: tuple[str, ...], mechanisms: tuple[str, ...], brokers: str, timeout_ms: int,
           fmt: str) -> None:
    """Delete SCRAM users (their credentials of every mechanism, or of --mechanism)."""
    from tidelog.client import UserScramCredentialDeletion
    from tidelog.errors import ResourceNotFoundError, TidelogError

    wanted = list(dict.fromkeys(names))
    errors: dict[str, TidelogError] = {}
    with admin_client(brokers, timeout_ms, "cannot delete users") as admin:
        targets: dict[str, Sequence[str]] = dict.fromkeys(wanted, mechanisms)
        if not mechanisms:
            described = admin.describe_user_scram_credentials(wanted)
            errors.update(described.errors)
            targets = {u: [m for m, _ in infos] for u, infos in described.values.items()}
            for u in wanted:
                if u not in errors and not targets.get(u):
                    errors[u] = ResourceNotFoundError(f"user {u!r} has no SCRAM credentials")
        deletions = [UserScramCredentialDeletion(u, m) for u, ms in targets.items() for m in ms]
        result = admin.alter_user_scram_credentials(deletions=deletions)
    errors.update(result.errors)
    rows = [{"user": u, "mechanism": m, "status": "deleted"}
            for u in wanted if u in result.values for m in targets[u]]
    if fmt == "json":
        echo_json(rows)
    elif rows:
        table(rows)
    ordered = {u: errors[u] for u in wanted if u in errors}
    raise_item_errors(ordered, lambda u: f"cannot delete user {u!r}", brokers)


@user.command("list", cls=OneLineCommand)
@click.argument("names", nargs=-1)
@brokers_option
@timeout_option
@format_option
def list_cmd(names: tuple[str, ...], brokers: str, timeout_ms: int, fmt: str) -> None:
    """List SCRAM users (all, or those named) with their mechanisms and iterations."""
    wanted = list(dict.fromkeys(names))
    with admin_client(brokers, timeout_ms, "cannot list users") as admin:
        result = admin.describe_user_scram_credentials(wanted or None)
    _show(result.values, None, fmt)
    raise_item_errors(result.errors, lambda u: f"cannot list user {u!r}", brokers)
