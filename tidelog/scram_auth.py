"""A SASL_SSL client's call credentials: the SCRAM proof sent with every call (tidelog/scram.py
explains the protocol).

:class:`ScramAuth` is a ``grpc.AuthMetadataPlugin``. On the first call it asks the broker that
call goes to for the user's salt and iterations (``ScramSalt``, callable unauthenticated) over a
channel of its own (TLS, no call credentials: ``ChannelFactory.blocking_tls``), derives
``ClientKey`` from the password (PBKDF2, then HMAC), and keeps it; every call then carries three
metadata entries: the mechanism, the user and the ClientKey (binary). The password stays in this
object only (Python cannot wipe it from memory); it is never sent, logged, or shown by ``repr``.

Threads: gRPC runs a Python metadata plugin on a thread of its own, one per call, never on the
asyncio loop that awaits the call (the clients' channels are grpc.aio ones on the client I/O
thread), so the blocking ``ScramSalt`` call and the key derivation here stall nothing else. A
lock makes the first calls wait for one fetch; calls that were waiting while it failed get its
error instead of each trying again in turn.

Failures: a plugin that calls back with an error fails the call with status UNAVAILABLE and the
details ``Getting metadata from plugin failed with error: <str(error)>`` (gRPC's wording, whatever
the error). The error given is a TidelogError, whose text is ``CODE: message``, so
the client's ``error_from_rpc`` turns it back into its type: a broker that cannot be reached stays a
NetworkError (retried), UNSUPPORTED_SASL_MECHANISM and SASL_AUTHENTICATION_FAILED do not.

A refused call (the broker's UNAUTHENTICATED) may mean the credential was set again with the same
password and a new salt (``tidelog user create`` run twice): :meth:`ScramAuth.recheck` asks for
the salt again (at most once per :data:`RECHECK_INTERVAL_S`) and, when it changed, derives the new
key, so the caller can send the call again; a wrong password keeps failing fast.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from tidelog import scram
from tidelog.errors import (
    ErrorCode,
    NetworkError,
    RequestTimedOutError,
    SaslAuthenticationFailedError,
    TidelogError,
    UnsupportedSaslMechanismError,
    error_for_code,
)
from tidelog.v1 import broker_pb2
from tidelog.v1.broker_pb2_grpc import BrokerServiceStub
from tidelog.v1.common_pb2 import ScramMechanism

__all__ = ["RECHECK_INTERVAL_S", "SALT_TIMEOUT_S", "ScramAuth", "address_of"]

log = logging.getLogger(__name__)

#: How long the plugin waits for a broker's ScramSalt answer.
SALT_TIMEOUT_S = 10.0
#: A refused call asks for the salt again at most this often.
RECHECK_INTERVAL_S = 1.0
#: Options of the plugin's own channel (brokers are dialled directly, as the clients' are).
_DIAL_OPTIONS = (("grpc.enable_http_proxy", 0),)

#: Opens a blocking TLS channel without call credentials to ``host:port``.
Dial = Callable[[str, Sequence[tuple[str, Any]]], grpc.Channel]


@dataclass(frozen=True)
class _Key:
    salt: bytes
    iterations: int
    client_key: bytes


def address_of(service_url: str) -> str:
    """``host:port`` of a call from gRPC's ``AuthMetadataContext.service_url``
    (``https://host:port/package.Service``; gRPC leaves out a port of 443)."""
    rest = service_url.split("://", 1)[-1]
    authority = rest.split("/", 1)[0]
    host_end = authority.rfind("]")  # an IPv6 literal: [::1]:9092
    if ":" not in authority[host_end + 1:]:
        authority += ":443"
    return authority


class ScramAuth:
    """The SCRAM call-credentials plugin (see the module doc). Thread-safe."""

    def __init__(self, mechanism: scram.Mechanism, username: str, password: str, *,
                 dial: Dial, timeout_s: float = SALT_TIMEOUT_S) -> None:
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self._dial = dial
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._key: _Key | None = None
        self._fetched_at = float("-inf")
        #: Finished fetch attempts, and the error of the last one that failed (with its number).
        self._attempts = 0
        self._failure: tuple[int, TidelogError] | None = None
        #: Bumped when a key in use is replaced by another (a new salt), not by the first one.
        self.generation = 0
        #: ScramSalt requests sent (for tests and the curious).
        self.salt_requests = 0
        # Binary metadata: a user name need not be ASCII (gRPC refuses other text values).
        self._static_metadata: tuple[tuple[str, str | bytes], ...] = (
            (scram.METADATA_MECHANISM, mechanism.name),
            (scram.METADATA_USER, username.encode()))

    def __repr__(self) -> str:
        return f"ScramAuth({self.mechanism.name}, user={self.username!r})"

    # ------------------------------------------------------------------ grpc.AuthMetadataPlugin
    def __call__(self, context: Any, callback: Any) -> None:
        """gRPC's hook, on a thread of its own for each call: answer with the metadata, or
        with an error that fails the call (its text ``CODE: message``)."""
        try:
            key = self.client_key(address_of(context.service_url))
        except TidelogError as e:
            callback((), e)
            return
        except Exception as e:  # a bug: the call fails with it rather than hang
            # Its type only: an exception's text could quote the password (UnicodeEncodeError).
            log.error("the SCRAM call credentials failed: %s", type(e).__name__)
            callback((), SaslAuthenticationFailedError(
                f"deriving the SCRAM client key failed ({type(e).__name__})"))
            return
        callback((*self._static_metadata, (scram.METADATA_PROOF, key)), None)

    # ------------------------------------------------------------------ the key
    def client_key(self, address: str) -> bytes:
        """The ClientKey, fetching the salt from ``address`` the first time (blocking)."""
        key = self._key
        if key is not None:
            return key.client_key
        arrived = self._attempts
        with self._lock:
            if self._key is not None:
                return self._key.client_key
            failure = self._failure
            if failure is not None and failure[0] > arrived:
                raise failure[1]  # the fetch we waited for failed: its error, not another wait
            try:
                salt, iterations = self._fetch(address)
            except TidelogError as e:
                self._attempts += 1
                self._failure = (self._attempts, e)
                raise
            self._attempts += 1
            self._failure = None
            self._key = self._derive(salt, iterations)
            return self._key.client_key

    def recheck(self, address: str, generation: int) -> bool:
        """After a call sent with key ``generation`` was refused: True when the key has changed
        since (the salt changed: the credential was set again), so the call is worth sending
        again. Asks ``address`` at most once per RECHECK_INTERVAL_S. Blocking."""
        with self._lock:
            if self.generation != generation:
                return True
            current = self._key
            if current is None or time.monotonic() - self._fetched_at < RECHECK_INTERVAL_S:
                return False
            try:
                salt, iterations = self._fetch(address)
            except TidelogError as e:
                log.debug("rechecking the SCRAM salt at %s failed: %s", address, e)
                return False
            if (salt, iterations) == (current.salt, current.iterations):
                return False
            self._key = self._derive(salt, iterations)
            self.generation += 1
            log.info("the SCRAM credential of user %r has a new salt; using it", self.username)
            return True

    def _derive(self, salt: bytes, iterations: int) -> _Key:
        salted = scram.salted_password(self.mechanism, self._password, salt, iterations)
        return _Key(salt, iterations, scram.client_key(self.mechanism, salted))

    def _fetch(self, address: str) -> tuple[bytes, int]:
        """(salt, iterations) from the broker at ``address``, checked; typed errors."""
        self.salt_requests += 1
        request = broker_pb2.ScramSaltRequest(
            user=self.username, mechanism=ScramMechanism.Name(self.mechanism.value))
        try:
            with self._dial(address, _DIAL_OPTIONS) as channel:
                response = BrokerServiceStub(channel).ScramSalt(
                    request, timeout=self._timeout_s)
        except grpc.RpcError as e:
            raise _salt_rpc_error(e, self._timeout_s) from None
        finally:
            self._fetched_at = time.monotonic()
        if response.error_code != ErrorCode.NONE:
            raise error_for_code(response.error_code,
                                 f"ScramSalt: {response.error_message or 'refused'}")
        salt, iterations = bytes(response.salt), response.iterations
        # A broker's answer sets how much work PBKDF2 does here: keep it within Kafka's bounds.
        if not scram.ITERATIONS_MIN <= iterations <= scram.ITERATIONS_MAX:
            raise SaslAuthenticationFailedError(
                f"ScramSalt answered {iterations} iterations, outside "
                f"{scram.ITERATIONS_MIN}..{scram.ITERATIONS_MAX}")
        if not 0 < len(salt) <= scram.SALT_BYTES_MAX:
            raise SaslAuthenticationFailedError(
                f"ScramSalt answered a salt of {len(salt)} bytes")
        log.debug("SCRAM salt of user %r (%s) from %s", self.username, self.mechanism.name,
                  address)
        return salt, iterations


def _salt_rpc_error(e: Any, timeout_s: float) -> TidelogError:
    code, details = e.code(), e.details() or e.code().name
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return UnsupportedSaslMechanismError("the broker has no ScramSalt (a build without SCRAM "
                                             "users): use security_protocol='SSL'")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return RequestTimedOutError(f"no answer to ScramSalt within {timeout_s:.0f}s")
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return SaslAuthenticationFailedError(f"ScramSalt: {details}")
    return NetworkError(f"ScramSalt failed: {details} ({code.name})")
