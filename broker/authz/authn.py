"""Who a call on the client listener is: SCRAM users ([sasl]) and client certificates.

A SASL_SSL client sends its mechanism, user name and SCRAM ClientKey in every call's metadata
(tidelog/scram.py says why this shape). :class:`AuthenticationInterceptor` checks them before
the request is even read: a wrong or unknown credential, or an unenabled mechanism, is answered
UNAUTHENTICATED with ``SASL_AUTHENTICATION_FAILED: ...`` (the same words for an unknown user and
a wrong password, as Kafka's), audited and counted. With ``[sasl] required``, a call with neither
a valid credential nor a verified client certificate is refused the same way. ``ScramSalt`` is
exempt: it is how a client starts.

:meth:`Authenticator.who` then names the principal for the ACLs: ``User:<name>`` of the SCRAM
user, else ``User:<CN>`` of the verified certificate, else ``User:ANONYMOUS``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from tidelog import scram
from tidelog.broker.authz.audit import AuditLog, shown
from tidelog.broker.authz.principal import Who, peer_host, who_is
from tidelog.config import SaslConfig
from tidelog.metadata.image import MetadataImage, ScramImage
from tidelog.rpc_guard import checked_before_read

__all__ = ["AuthenticationInterceptor", "Authenticator"]

audit = logging.getLogger("tidelog.audit")
#: Callable before authenticating: a client asks it for its salt.
EXEMPT_METHODS = frozenset({"/tidelog.v1.BrokerService/ScramSalt"})
FAILED = "SASL_AUTHENTICATION_FAILED"
#: The metric labels of refusals that name no enabled mechanism.
NO_MECHANISM = "none"
UNKNOWN_MECHANISM = "unknown"
_KEYS = (scram.METADATA_MECHANISM, scram.METADATA_USER, scram.METADATA_PROOF)


@dataclass(frozen=True, slots=True)
class Failure:
    """A refused call: the status details the client sees, and what the audit log says."""

    details: str
    user: str
    mechanism: str
    audit_reason: str


class Authenticator:
    """Checks the SCRAM metadata of calls against the credentials of the current image."""

    def __init__(self, config: SaslConfig, image: Callable[[], MetadataImage], *,
                 certificates_verified: bool, decoy_key: bytes, failures: Any = None) -> None:
        self.mechanisms = {name: scram.MECHANISMS[name] for name in config.enabled_mechanisms}
        self.required = config.required
        #: Whether the listener verifies client certificates (client_auth = required): only
        #: then does a certificate name a principal.
        self.certificates_verified = certificates_verified
        self._image = image
        self._decoy_key = decoy_key
        self._failures = failures  # Counter labelled (mechanism)
        self._audit = AuditLog(audit)
        self._in_use_of: ScramImage | None = None
        self._in_use: dict[int, list[int]] = {}

    @property
    def active(self) -> bool:
        """Whether calls need checking at all (else the interceptor is not installed)."""
        return bool(self.mechanisms) or self.required

    # --- ScramSalt --------------------------------------------------------------------------

    def salt(self, user: str, mechanism_value: int) -> tuple[str, bytes, int]:
        """(problem, salt, iterations) for a client deriving its key: the user's, or a made-up
        stable one for a user without a credential (this must not say who exists)."""
        mechanism = scram.mechanism_named(mechanism_value)
        if mechanism is None or mechanism.name not in self.mechanisms:
            return (f"{mechanism.name if mechanism else mechanism_value} is not enabled on this "
                    f"listener (enabled: {', '.join(self.mechanisms) or 'none'})", b"", 0)
        image = self._image().scram
        credential = image.get(user, mechanism.value)
        if credential is None:
            return "", scram.decoy_salt(self._decoy_key, user, mechanism), \
                scram.decoy_iterations(self._decoy_key, user, mechanism,
                                       self._iterations_in_use(image, mechanism.value))
        return "", credential.salt, credential.iterations

    def _iterations_in_use(self, image: ScramImage, mechanism: int) -> Sequence[int]:
        """The real credentials' iterations for ``mechanism``, sorted (kept per image)."""
        if self._in_use_of is not image:
            self._in_use_of, self._in_use = image, {}
        found = self._in_use.get(mechanism)
        if found is None:
            found = self._in_use[mechanism] = sorted(
                c.iterations for (_, m), c in image.credentials.items() if m == mechanism)
        return found

    # --- per call ---------------------------------------------------------------------------

    def check(self, metadata: Sequence[tuple[str, Any]] | None) -> Failure | None:
        """Why a call with this metadata is refused (the status details), or None. A call
        without SCRAM metadata passes here; ``required`` is checked with the call's context."""
        found = _scram_metadata(metadata)
        if found is None:
            return None
        if found is _REPEATED:
            message = "the call repeats a SCRAM metadata key: one credential per call"
            return Failure(f"{FAILED}: {message}", "", UNKNOWN_MECHANISM, message)
        mechanism_name, user, proof = found
        mechanism = self.mechanisms.get(mechanism_name)
        if mechanism is None:
            message = (f"{shown(mechanism_name)} is not enabled on this listener (enabled: "
                       f"{', '.join(self.mechanisms) or 'none'})")
            return Failure(f"UNSUPPORTED_SASL_MECHANISM: {message}", user, mechanism_name,
                           message)
        credential = self._image().scram.get(user, mechanism.value)
        if credential is None or not isinstance(proof, bytes) or \
                not scram.verify(credential, proof):
            return Failure(f"{FAILED}: authentication of {user!r} with {mechanism_name} "
                           f"failed: unknown user or wrong password", user, mechanism_name,
                           "unknown user" if credential is None else "wrong password")
        return None

    def unauthenticated(self, context: Any) -> Failure | None:
        """With ``required``: why a call without SCRAM metadata is refused, or None when its
        client certificate was verified."""
        if not self.required or _scram_metadata(context.invocation_metadata()) is not None:
            return None
        if self.certificates_verified and (context.auth_context() or {}).get("x509_common_name"):
            return None
        return Failure(f"{FAILED}: this listener requires authentication: a SCRAM user "
                       f"(security_protocol SASL_SSL) or a client certificate", "", NO_MECHANISM,
                       "no credentials")

    def who(self, context: Any) -> Who:
        """The principal of a call that passed :meth:`check`."""
        found = _scram_metadata(context.invocation_metadata())
        if found is not None and found is not _REPEATED and found[0] in self.mechanisms:
            return Who(f"User:{found[1]}", peer_host(context.peer() or ""))
        return who_is(context)

    def report(self, failure: Failure, peer: str) -> None:
        label = self.mechanism_label(failure.mechanism)
        mechanism = failure.mechanism if label == failure.mechanism else shown(failure.mechanism)
        self._audit.refusal("authentication failed for %s (%s) from %s: %s",
                            shown(failure.user), mechanism, peer_host(peer),
                            failure.audit_reason)
        if self._failures is not None:
            self._failures.labels(label).inc()

    def mechanism_label(self, mechanism: str) -> str:
        """The metric's label for a refused call's mechanism: an enabled mechanism, ``none``
        (no credentials), or ``unknown`` for anything else the caller wrote, so a caller
        cannot make a series per string it sends."""
        if mechanism in self.mechanisms or mechanism == NO_MECHANISM:
            return mechanism
        return UNKNOWN_MECHANISM


#: What :func:`_scram_metadata` returns for a call that repeats one of its keys.
_REPEATED: tuple[str, str, Any] = ("", "", b"")


def _scram_metadata(metadata: Sequence[tuple[str, Any]] | None
                    ) -> tuple[str, str, Any] | None:
    """(mechanism, user, proof) when the call carries SCRAM metadata; a call that carries some
    of the keys but not all gets empty strings for the rest (and then fails the check). A
    key given twice is :data:`_REPEATED`, refused: which of the two would name the principal
    must never be a question (the check and the principal read the same value)."""
    if not metadata:
        return None
    values: dict[str, Any] = {}
    for key, value in metadata:
        if key in _KEYS:
            if key in values:
                return _REPEATED
            values[key] = value
    if not values:
        return None
    mechanism, user = values.get(_KEYS[0], ""), values.get(_KEYS[1], b"")
    try:
        name = user.decode() if isinstance(user, bytes) else ""
    except UnicodeDecodeError:
        name = ""  # no such user: refused as unknown
    return (mechanism if isinstance(mechanism, str) else "", name, values.get(_KEYS[2], b""))


class AuthenticationInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses unauthenticated calls before their request is read (see the module doc): the
    check runs before the handler reads anything (tidelog.rpc_guard.checked_before_read), so a
    refused 100 MiB request costs the broker what gRPC's flow-control window holds, not 100
    MiB."""

    def __init__(self, authenticator: Authenticator) -> None:
        self._authn = authenticator

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails],
                                     Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method in EXEMPT_METHODS:
            return handler
        failure = self._authn.check(details.invocation_metadata)
        if failure is not None:
            return self._checked(handler, lambda _context: failure)
        if self._authn.required:
            return self._checked(handler, self._authn.unauthenticated)
        return handler

    def _checked(self, handler: grpc.RpcMethodHandler,
                 failure_of: Callable[[Any], Failure | None]) -> grpc.RpcMethodHandler:
        async def guard(context: Any) -> None:
            failure = failure_of(context)
            if failure is not None:
                self._authn.report(failure, context.peer() or "")
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, failure.details)
        return checked_before_read(handler, guard)
