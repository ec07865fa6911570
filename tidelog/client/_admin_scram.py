"""The Admin's SCRAM user operations (Kafka's alterUserScramCredentials and
describeUserScramCredentials, KIP-554): the public value types, the local checks, the salting,
and the per-user retries.

A password never leaves the client: an upsertion is salted here (a random 32-byte salt from
``secrets``, PBKDF2-HMAC with the credential's iterations: ``tidelog.scram.salted_password``) and
only the salt, the iterations and the salted password are sent; the controller keeps what RFC
5802 lets a server keep (tidelog/scram.py). The salting runs on the caller's thread, before the
request goes to the client's I/O loop, so a slow PBKDF2 stalls no other client.

AlterUserScramCredentials goes to any broker, which forwards it to the active controller. Its
response has no request-level code and one result per user named (proto/tidelog/v1/
controller.proto), so its retriable answers (NOT_CONTROLLER) are retried per user, as the ACL
writes are (``_admin_acls.py``): setting a credential again sets the same value, so a user with
upsertions only is sent again on every retriable code and after a transport timeout; a deletion
that timed out may have been applied (sent again it would be RESOURCE_NOT_FOUND), so a user with
a deletion is sent again only on ``WRITE_RETRY_CODES``.

Checked here first, per user (one bad alteration fails its user, whose other alterations are not
sent either, as Kafka's client does): the name (``scram.user_name_problem``), the mechanism, the
iterations (Kafka's 4096..16384), the password (not empty) and a given salt's length: refused as
UNACCEPTABLE_CREDENTIAL or UNSUPPORTED_SASL_MECHANISM without a request. The same (user,
mechanism) twice, or a user both deleted and set, is DUPLICATE_RESOURCE, as the controller would
answer.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tidelog import scram
from tidelog.client._admin_types import WRITE_RETRY_CODES
from tidelog.client._io import monotonic_ms
from tidelog.client._metadata import Backoff
from tidelog.errors import (
    DuplicateResourceError,
    ErrorCode,
    TidelogError,
    UnacceptableCredentialError,
    UnknownServerError,
    UnsupportedSaslMechanismError,
    error_for_code,
)
from tidelog.v1 import broker_pb2, controller_pb2
from tidelog.v1.common_pb2 import ScramMechanism

__all__ = [
    "SALT_BYTES",
    "ScramAdmin",
    "ScramCredentialInfo",
    "UserScramCredentialAlteration",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "alteration_error",
    "mechanism_name",
    "prepare_alterations",
]

#: Bytes of a new credential's salt (Kafka's ScramFormatter makes 32).
SALT_BYTES = 32

#: ``Admin._call``: (method, request, wait_ms, *, write) -> the response.
Call = Callable[..., Awaitable[Any]]

_rng = random.Random()


# ---------------------------------------------------------------------------- the value types
@dataclass(frozen=True)
class UserScramCredentialUpsertion:
    """Set ``user``'s credential for ``mechanism`` (SCRAM-SHA-256 or SCRAM-SHA-512) to
    ``password``, salted with ``iterations`` (4096..16384) and a random salt (``salt``, 16..64
    bytes, only to reproduce a credential). The password is salted here and never sent; it is
    left out of ``repr()``."""

    user: str
    mechanism: str
    password: str = field(repr=False)
    iterations: int = scram.ITERATIONS_DEFAULT
    salt: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class UserScramCredentialDeletion:
    """Delete ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: str


UserScramCredentialAlteration = UserScramCredentialUpsertion | UserScramCredentialDeletion


class ScramCredentialInfo(NamedTuple):
    """One credential of a user, as DescribeUserScramCredentials shows it (never the salt nor
    the keys)."""

    mechanism: str
    iterations: int


# ---------------------------------------------------------------------------- local checks
def alteration_error(alteration: object) -> TidelogError | None:
    """What is wrong with one alteration (see the module doc), or None; TypeError for
    something that is not one."""
    if not isinstance(alteration, UserScramCredentialUpsertion | UserScramCredentialDeletion):
        raise TypeError(f"expected UserScramCredentialUpsertion or UserScramCredentialDeletion, "
                        f"got {type(alteration).__name__}")
    user, mechanism = alteration.user, alteration.mechanism
    if not isinstance(user, str):
        return UnacceptableCredentialError(f"the user name must be a str, got {user!r}")
    problem = scram.user_name_problem(user)
    if problem is not None:
        return UnacceptableCredentialError(problem)
    if not isinstance(mechanism, str) or scram.mechanism_named(mechanism) is None:
        return UnsupportedSaslMechanismError(
            f"user {user!r}: unknown SCRAM mechanism {mechanism!r}; one of "
            f"{', '.join(scram.MECHANISMS)}")
    if isinstance(alteration, UserScramCredentialDeletion):
        return None
    iterations = alteration.iterations
    if not isinstance(iterations, int) or isinstance(iterations, bool) or not (
            scram.ITERATIONS_MIN <= iterations <= scram.ITERATIONS_MAX):
        return UnacceptableCredentialError(
            f"user {user!r}: iterations {iterations!r} are outside "
            f"{scram.ITERATIONS_MIN}..{scram.ITERATIONS_MAX}")
    if not isinstance(alteration.password, str) or not alteration.password:
        return UnacceptableCredentialError(f"user {user!r}: the password is empty")
    try:
        alteration.password.encode()
    except UnicodeEncodeError:  # its text would quote the password: not raised as is
        return UnacceptableCredentialError(f"user {user!r}: the password is not valid Unicode "
                                           "text (a lone surrogate)")
    salt = alteration.salt
    if salt is not None and not (isinstance(salt, bytes)
                                 and scram.SALT_BYTES_MIN <= len(salt) <= scram.SALT_BYTES_MAX):
        return UnacceptableCredentialError(
            f"user {user!r}: a salt must be {scram.SALT_BYTES_MIN}..{scram.SALT_BYTES_MAX} bytes")
    return None


def prepare_alterations(alterations: Iterable[UserScramCredentialAlteration]
                        ) -> tuple[list[str], dict[str, list[Any]], dict[str, TidelogError]]:
    """(every user in first-seen order, the messages to send per valid user, the local error
    per refused user). Upsertions are salted here: this is the slow part (PBKDF2)."""
    items = list(alterations)
    users: list[str] = []
    by_user: dict[str, list[UserScramCredentialAlteration]] = {}
    errors: dict[str, TidelogError] = {}
    for a in items:
        error = alteration_error(a)
        key = a.user if isinstance(a.user, str) else repr(a.user)
        if key not in by_user:
            users.append(key)
            by_user[key] = []
        by_user[key].append(a)
        if error is not None and key not in errors:
            errors[key] = error
    messages: dict[str, list[Any]] = {}
    for user in users:
        if user in errors:
            continue
        error = _duplicate_error(user, by_user[user])
        if error is not None:
            errors[user] = error
            continue
        messages[user] = [_message(a) for a in by_user[user]]
    return users, messages, errors


def _duplicate_error(user: str, alterations: list[UserScramCredentialAlteration]
                     ) -> TidelogError | None:
    mechanisms = [_mechanism(a.mechanism) for a in alterations]
    if len(set(mechanisms)) != len(mechanisms):
        return DuplicateResourceError(f"user {user!r}: a mechanism is altered twice in one "
                                      "request")
    kinds = {type(a) for a in alterations}
    if len(kinds) > 1:
        return DuplicateResourceError(f"user {user!r} is both deleted and set in one request")
    return None


def _mechanism(name: str) -> scram.Mechanism:
    mechanism = scram.mechanism_named(name)
    assert mechanism is not None  # alteration_error checked it
    return mechanism


def _message(a: UserScramCredentialAlteration) -> Any:
    mechanism = _mechanism(a.mechanism)
    if isinstance(a, UserScramCredentialDeletion):
        return controller_pb2.ScramCredentialDeletion(
            name=a.user, mechanism=ScramMechanism.Name(mechanism.value))
    salt = a.salt if a.salt is not None else secrets.token_bytes(SALT_BYTES)
    return controller_pb2.ScramCredentialUpsertion(
        name=a.user, mechanism=ScramMechanism.Name(mechanism.value), iterations=a.iterations,
        salt=salt,
        salted_password=scram.salted_password(mechanism, a.password, salt, a.iterations))


def _request(messages: dict[str, list[Any]], users: list[str]
             ) -> controller_pb2.AlterUserScramCredentialsRequest:
    request = controller_pb2.AlterUserScramCredentialsRequest()
    for user in users:
        for m in messages[user]:
            if isinstance(m, controller_pb2.ScramCredentialDeletion):
                request.deletions.append(m)
            else:
                request.upsertions.append(m)
    return request


def _has_deletion(messages: list[Any]) -> bool:
    return any(isinstance(m, controller_pb2.ScramCredentialDeletion) for m in messages)


def mechanism_name(value: int) -> str:
    mechanism = scram.mechanism_named(value)
    return mechanism.name if mechanism is not None else f"UNKNOWN({value})"


# ---------------------------------------------------------------------------- the requests
class ScramAdmin:
    """AlterUserScramCredentials and DescribeUserScramCredentials through ``call`` (the Admin's
    any-broker call)."""

    def __init__(self, call: Call, backoff: Backoff) -> None:
        self._call = call
        self._backoff = backoff

    async def alter(self, messages: dict[str, list[Any]],
                    deadline_ms: int) -> dict[str, TidelogError | None]:
        """Per user (``messages``' keys): None (done) or its typed error."""
        answers: dict[str, TidelogError | None] = {}
        pending = list(messages)
        attempts = 0
        while True:  # bounded by the deadline: every round that retries sleeps a backoff first
            idempotent = not any(_has_deletion(messages[u]) for u in pending)
            try:
                resp = await self._call("AlterUserScramCredentials", _request(messages, pending),
                                        max(1, deadline_ms - monotonic_ms()),
                                        write=not idempotent)
            except TidelogError as e:
                if attempts == 0:
                    raise
                for user in pending:
                    answers[user] = e
                return answers
            results = {r.user: r for r in resp.results}
            again = []
            for user in pending:
                r = results.get(user)
                if r is None:
                    answers[user] = UnknownServerError(
                        f"AlterUserScramCredentials: the response has no result for user "
                        f"{user!r}")
                    continue
                if r.error_code == ErrorCode.NONE:
                    answers[user] = None
                    continue
                error = error_for_code(r.error_code, r.error_message)
                answers[user] = error
                if (r.error_code in WRITE_RETRY_CODES if _has_deletion(messages[user])
                        else error.retriable):
                    again.append(user)
            attempts += 1
            delay = self._backoff.delay_ms(attempts, _rng)
            if not again or monotonic_ms() + delay >= deadline_ms:
                return answers  # a retried user that ran out of time keeps its last error
            await asyncio.sleep(delay / 1000)
            pending = again

    async def describe(self, users: list[str], wait_ms: int
                       ) -> tuple[dict[str, list[ScramCredentialInfo]], dict[str, TidelogError]]:
        """(credentials per user, error per user); ``users`` empty: every user."""
        request = broker_pb2.DescribeUserScramCredentialsRequest(users=users)
        resp = await self._call("DescribeUserScramCredentials", request, wait_ms, write=False)
        values: dict[str, list[ScramCredentialInfo]] = {}
        errors: dict[str, TidelogError] = {}
        for r in resp.results:
            if r.error_code != ErrorCode.NONE:
                errors[r.user] = error_for_code(r.error_code, r.error_message)
                continue
            values[r.user] = sorted(
                ScramCredentialInfo(mechanism_name(i.mechanism), i.iterations)
                for i in r.credential_infos)
        return values, errors
