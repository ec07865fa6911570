"""What every ``tidelog`` command module shares: exit codes and the one-line error, the common
options (``--brokers`` / ``$TIDELOG_BROKERS``, ``--timeout-ms``, ``--format``), the Admin
context, and the table and JSON output.

Errors end in one line on stderr, ``error: <what failed>: <why> (<CODE>); <what to do>``, and a
non-zero exit code: 2 for a mistake of the user (an unknown topic, an invalid config, bad
syntax), 1 when the cluster could not do it (unreachable, timed out, records not delivered).
A command raises :class:`CliError` (or :func:`fail` builds one from a ``TidelogError``);
whatever else escapes a command body is turned into such a line by :func:`run_main`, the
handler the console script runs every command under.

The command modules import from here and never from each other, so each can be read (and
grown) on its own.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import click

from tidelog.errors import TidelogError

if TYPE_CHECKING:
    from tidelog.client import Admin

__all__ = [
    "BROKERS_ENV",
    "EXIT_FAILURE",
    "EXIT_USER_ERROR",
    "REQUEST_TIMEOUT_MS_MAX",
    "TIMEOUT_MS_DEFAULT",
    "CliError",
    "OneLineCommand",
    "OneLineGroup",
    "admin_client",
    "brokers_option",
    "client_options",
    "echo_json",
    "error_line",
    "exit_code_for",
    "fail",
    "format_option",
    "ids",
    "parse_brokers",
    "parse_pairs",
    "raise_item_errors",
    "run_main",
    "table",
    "timeout_option",
]

BROKERS_ENV = "TIDELOG_BROKERS"
DEFAULT_BROKERS = "127.0.0.1:9092"
#: The cluster could not do it (unreachable, timed out, not delivered): retrying may help.
EXIT_FAILURE = 1
#: The user must change the command (bad syntax, unknown topic, invalid config).
EXIT_USER_ERROR = 2
#: Ctrl-C, as a shell reports a process ended by SIGINT.
EXIT_INTERRUPTED = 130
#: Default bound on a command's wait for the cluster; a CLI call should fail within seconds, not
#: the minute the client library allows a long-lived application.
TIMEOUT_MS_DEFAULT = 30_000
#: The client's own request timeout is capped at this (a single request; retries fit inside the
#: command's timeout).
REQUEST_TIMEOUT_MS_MAX = 30_000
#: The reachability probe: one TCP connect per bootstrap address, at most this many, this long.
PROBE_ADDRESSES_MAX = 8
PROBE_TIMEOUT_S = 1.0


# ======================================================================= errors and exit codes
class CliError(click.ClickException):
    """A failed command: printed as one ``error: …`` line (never a traceback), with an exit code.
    """

    def __init__(self, message: str, exit_code: int = EXIT_USER_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click reads it per instance

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class OneLineCommand(click.Command):
    """A command whose usage mistakes (a missing argument, a bad option value) are one error
    line too, like every other failure, instead of click's usage block."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            raise CliError(f"{e.format_message()} (`{ctx.command_path} -h` lists the "
                           f"options)") from None


class OneLineGroup(click.Group):
    command_class = OneLineCommand


def run_main(group: click.Group, argv: list[str] | None) -> None:
    """Run ``group`` as the ``tidelog`` program; exits with the command's code.

    What a command body lets escape ends here as one line on stderr: a ``TidelogError`` (2 when
    the user must change something, 1 when retrying may help) or an ``OSError`` (1), never a
    traceback."""
    try:
        rc = group.main(args=argv, prog_name="tidelog", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_FAILURE)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except TidelogError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_USER_ERROR if not e.retriable else EXIT_FAILURE)
    except OSError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_FAILURE)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    if isinstance(rc, int):
        sys.exit(rc)


def exit_code_for(error: TidelogError) -> int:
    """2 when the user must change the request, 1 when the cluster could not serve it."""
    from tidelog.errors import UnknownTopicOrPartitionError

    # UNKNOWN_TOPIC_OR_PARTITION is retriable for clients (metadata may trail a creation), but
    # at the command line it almost always means a typo.
    if isinstance(error, UnknownTopicOrPartitionError):
        return EXIT_USER_ERROR
    return EXIT_FAILURE if error.retriable else EXIT_USER_ERROR


def error_line(what: str, error: TidelogError, brokers: str) -> str:
    """``<what>: <why> (<CODE>)[; <what to do>]`` for one failure."""
    hint = _hint(error, brokers)
    return f"{what}: {error.message} ({error.code_name})" + (f"; {hint}" if hint else "")


def _hint(error: TidelogError, brokers: str) -> str:
    from tidelog import errors as e

    hints: list[tuple[type[TidelogError], str]] = [
        (e.NetworkError, f"is the cluster running? --brokers / ${BROKERS_ENV} is {brokers}"),
        (e.RequestTimedOutError, "the cluster did not answer in time; check `tidelog cluster "
                                 "health`, then retry or raise --timeout-ms"),
        (e.UnknownTopicOrPartitionError, "`tidelog topic list` shows the topics"),
        (e.TopicAlreadyExistsError, "pick another name, or delete the topic first"),
        (e.InvalidConfigError, "`tidelog topic describe-config TOPIC --docs` lists the topic "
                               "configs (docs/configuration.md)"),
        (e.InvalidReplicationFactorError, "use -r at most the number of live brokers "
                                          "(`tidelog cluster info`)"),
        (e.InvalidPartitionsError, "a topic has at least 1 partition and can only grow"),
        (e.InvalidTopicError, "topic names use [a-zA-Z0-9._-], at most 249 characters"),
        (e.NotEnoughReplicasError, "fewer replicas are in sync than min.insync.replicas; "
                                   "`tidelog cluster health` says which"),
        (e.NotEnoughReplicasAfterAppendError, "fewer replicas are in sync than "
                                              "min.insync.replicas; see `tidelog cluster health`"),
        (e.MessageTooLargeError, "the record is above the topic's max.message.bytes"),
        (e.SaslAuthenticationFailedError, f"check sasl_username and sasl_password in the "
                                          f"profile (${PROFILE_ENV}); `tidelog user list` "
                                          f"shows the users"),
        (e.UnsupportedSaslMechanismError, "sasl_mechanism is SCRAM-SHA-256 or SCRAM-SHA-512, "
                                          "and the listener must take SCRAM users "
                                          "(docs/security.md)"),
    ]
    return next((hint for cls, hint in hints if isinstance(error, cls)), "")


def fail(what: str, error: TidelogError, brokers: str) -> CliError:
    return CliError(error_line(what, error, brokers), exit_code_for(error))


def raise_item_errors(errors: Mapping[Any, TidelogError], what: Callable[[Any], str],
                      brokers: str) -> None:
    """Per-item failures of a call about several items: one line each; the last one ends the
    command with the first failure's exit code (the successes were printed already)."""
    if not errors:
        return
    lines = [error_line(what(key), error, brokers) for key, error in errors.items()]
    for line in lines[:-1]:
        click.echo(f"error: {line}", err=True)
    raise CliError(lines[-1], exit_code_for(next(iter(errors.values()))))


# ======================================================================= options
def brokers_option(f: Any) -> Any:
    return click.option(
        "--brokers", envvar=BROKERS_ENV, default=lambda: profile().get("brokers", DEFAULT_BROKERS),
        show_default=f"the profile's brokers, else {DEFAULT_BROKERS}",
        show_envvar=True, metavar="HOST:PORT,…", help="brokers to bootstrap from")(f)


# ======================================================================= the profile
#: A TOML file of connection settings, as rpk's profiles: ``brokers`` and the client's security
#: options (Kafka's names in snake_case), a SCRAM user's among them. ``$TIDELOG_PROFILE`` names
#: it; else this path is read when it exists. A profile holding ``sasl_password`` must be
#: readable by its owner only (0600), as a node's key file must: it is refused otherwise.
PROFILE_ENV = "TIDELOG_PROFILE"
PROFILE_DEFAULT = "~/.config/tidelog/profile.toml"
PROFILE_KEYS = ("brokers", "security_protocol", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
                "sasl_mechanism", "sasl_username", "sasl_password")


def profile() -> dict[str, str]:
    """The profile's settings ({} without one); a broken profile is one error line."""
    import os
    import stat
    import tomllib
    from pathlib import Path

    named = os.environ.get(PROFILE_ENV)
    path = Path(named or PROFILE_DEFAULT).expanduser()
    if not named and not path.exists():
        return {}
    try:
        mode = path.stat().st_mode
        table = tomllib.loads(path.read_text())
    except OSError as e:
        raise CliError(f"cannot read profile {path} (${PROFILE_ENV}): {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise CliError(f"profile {path} is not valid TOML: {e}") from None
    unknown = sorted(set(table) - set(PROFILE_KEYS))
    if unknown or not all(isinstance(v, str) for v in table.values()):
        raise CliError(f"profile {path}: keys are strings among {', '.join(PROFILE_KEYS)}"
                       + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    if "sasl_password" in table and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CliError(f"profile {path} holds sasl_password and others can read it (mode "
                       f"{stat.filemode(mode)}): chmod 600 it")
    return dict(table)


def client_options() -> dict[str, Any]:
    """The profile's security options, for Producer, Consumer and Admin."""
    from tidelog.errors import InvalidConfigError
    from tidelog.tls import ClientSecurity

    options = {k: v for k, v in profile().items() if k != "brokers"}
    try:
        ClientSecurity(**options)  # one line now for a missing file or a bad protocol
    except (ValueError, InvalidConfigError) as e:
        raise CliError(f"profile: {e}") from None
    return options


def timeout_option(f: Any) -> Any:
    return click.option(
        "--timeout-ms", type=click.IntRange(min=1), default=TIMEOUT_MS_DEFAULT,
        show_default=True, help="how long to wait for the cluster before giving up")(f)


def format_option(f: Any) -> Any:
    return click.option("--format", "fmt", type=click.Choice(["table", "json"]),
                        default="table", show_default=True, help="output format")(f)


def parse_pairs(values: Iterable[str], option: str, example: str) -> dict[str, str]:
    """``key=value`` strings (split at the first ``=``) -> dict; a malformed one is an error."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"invalid {option} {item!r}: write KEY=VALUE, e.g. {option} {example}")
        out[key.strip()] = value
    return out


# ======================================================================= the cluster
def parse_brokers(brokers: str) -> list[str]:
    # The clients' own parser (private to the client package), so the CLI accepts exactly the
    # bootstrap lists the library does and can probe the same addresses.
    from tidelog.client.bootstrap import parse_bootstrap

    try:
        return parse_bootstrap(brokers)
    except (ValueError, TypeError) as e:
        raise CliError(f"invalid --brokers / ${BROKERS_ENV} {brokers!r}: {e}") from None


def check_reachable(bootstrap: list[str], brokers: str) -> None:
    """Fail at once when no bootstrap address accepts a TCP connection.

    The client library retries an unreachable bootstrap list until its timeout, which is right
    for a long-lived application waiting out a restart but makes a CLI call with a typo in
    --brokers (or a stopped cluster) hang for the whole --timeout-ms. A refused connection is
    certain, so say so now; anything that does accept a connection goes to the client.
    """
    problems = []
    for address in bootstrap[:PROBE_ADDRESSES_MAX]:
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)),
                                          timeout=PROBE_TIMEOUT_S):
                return
        except OSError as e:
            problems.append(f"{address}: {e.strerror or e}")
    raise CliError(f"cannot reach any broker ({'; '.join(problems)}); is the cluster running? "
                   f"--brokers / ${BROKERS_ENV} is {brokers}", EXIT_FAILURE)


@contextlib.contextmanager
def admin_client(brokers: str, timeout_ms: int, what: str) -> Iterator[Admin]:
    """An Admin for the command; a request-level error becomes one ``what: why`` line."""
    from tidelog.client import Admin

    bootstrap = parse_brokers(brokers)
    check_reachable(bootstrap, brokers)
    try:
        with Admin(bootstrap, request_timeout_ms=min(timeout_ms, REQUEST_TIMEOUT_MS_MAX),
                   default_api_timeout_ms=timeout_ms, client_id="tidelog-cli",
                   **client_options()) as admin:
            yield admin
    except TidelogError as e:
        raise fail(what, e, brokers) from None


# ======================================================================= output
def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2))


def table(rows: list[dict[str, Any]]) -> None:
    """Rows as aligned columns under upper-case headers (the first row's keys); ``(none)`` for
    no rows."""
    if not rows:
        click.echo("(none)")
        return
    cols = list(rows[0])
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in cols}
    click.echo("  ".join(k.upper().ljust(widths[k]) for k in cols))
    for r in rows:
        click.echo("  ".join(str(r[k]).ljust(widths[k]) for k in cols))


def ids(values: Iterable[int]) -> str:
    """Broker ids as ``1,2,3``, or ``-`` for none."""
    return ",".join(map(str, values)) or "-"
