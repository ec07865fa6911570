"""Peer authentication on gRPC: how a broker proves who it is to other brokers and controllers.

A broker sends two gRPC metadata entries on every call to the inter-broker listener
(ReplicaService) and to the controllers (ControllerService): :data:`PEER_ID_METADATA` = its
broker id and :data:`PEER_AUTH_METADATA` = its credential as presented to that audience
(tidelog.cluster_secret.BrokerCredential: one key for the controllers, another for brokers).

Servers check it in :class:`PeerAuthInterceptor`, a grpc.aio server interceptor:

* **Once, from one value.** A call that repeats either key is refused: the identity is parsed
  once, checked once, and that one value is what the handler sees (:func:`authenticated_broker_id`
  reads it from a context variable the interceptor's wrapper sets), never the metadata again.
  (Issue 25: the check read the last ``tidelog-peer-id`` and the handlers the first, so broker
  101's credential with ``[id=102, id=101]`` acted as broker 102.)
* **Before the request is read.** A call without a valid credential is answered
  UNAUTHENTICATED by a streaming-request handler that never reads the request: gRPC reads a
  unary request whole before its handler runs, so a refused 100 MiB request would have cost
  the server 100 MiB and more. An accepted call is served through a streaming-request wrapper
  too, which checks the TLS certificate (below) before it reads the one request message.
* **Credential.** The controllers check it against the cluster secret they hold
  (:class:`RootVerifier`); a broker-only node, which holds only its own credential, against the
  verifier the caller's registration carries in its metadata image (:class:`RegisteredVerifier`).
* **Certificate.** With ``[tls]``, the caller's certificate must name the broker id it claims:
  common name ``broker-<id>``, and subject alternative names (a node certificate lists the
  addresses it is dialled at; a user's client certificate has none). So a broker's
  certificate for another id, or a user's certificate of the same CA, is refused even with a
  valid credential, and a credential captured or learnt (a leader sees its followers' keys on
  every fetch) does not make its holder another broker.

Handlers then compare the authenticated id with the broker id the request names: broker 101
cannot fetch or heartbeat as 102 (PERMISSION_DENIED).

Without any secret (a development node whose listeners all bind loopback; tidelog.config refuses
anything else) the interceptor lets every call through; the node logs that once at start.
Methods listed as ``open_methods`` (ControllerService.DescribeQuorum, which the CLI's ``cluster
quorum`` calls) need no credential.

Client side: :func:`peer_metadata` for explicit ``metadata=`` arguments (the fetcher's hot path)
and :func:`peer_interceptors` for every call of an aio channel (the controller client).
"""

from __future__ import annotations

import contextvars
import hmac
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from tidelog.cluster_secret import (
    PEER_AUTH_METADATA,
    PEER_ID_METADATA,
    BrokerCredential,
    broker_certificate_name,
    broker_credential,
    credential_verifier,
)
from tidelog.rpc_guard import checked_before_read, refusing_handler

__all__ = [
    "PeerAuthInterceptor",
    "PeerVerifier",
    "RegisteredVerifier",
    "RootVerifier",
    "authenticated_broker_id",
    "certificate_problem",
    "parse_claim",
    "peer_interceptors",
    "peer_metadata",
]

Metadata = tuple[tuple[str, str], ...]
#: A broker id in metadata longer than this is not a broker id (bounds the parsing work).
_PEER_ID_CHARS_MAX = 11
#: A credential is 64 hex characters; anything much longer is not one (bounds the hashing).
_CREDENTIAL_CHARS_MAX = 128

#: The broker id the interceptor authenticated for the call being handled (None: no secret,
#: nothing was authenticated). Set in the call's own task by the wrapped handler.
_AUTHENTICATED: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "tidelog_peer_broker_id", default=None)


def peer_metadata(broker_id: int, credential: BrokerCredential | None, *,
                  audience: str) -> Metadata:
    """The metadata broker ``broker_id`` sends on every call to ``audience`` (the id alone
    without a credential: development clusters, where nothing checks it)."""
    if credential is None:
        return ((PEER_ID_METADATA, str(broker_id)),)
    if credential.broker_id != broker_id:
        raise ValueError(f"broker {credential.broker_id}'s credential is not broker {broker_id}'s")
    return ((PEER_ID_METADATA, str(broker_id)),
            (PEER_AUTH_METADATA, credential.presented_to(audience)))


def authenticated_broker_id() -> int | None:
    """The broker id the caller of the call being handled proved (the one the interceptor
    checked), or None on a listener without a secret, where nothing is authenticated."""
    return _AUTHENTICATED.get()


# ----------------------------------------------------------------------------- the pure checks
@dataclass(frozen=True)
class Claim:
    """Who a call says it is: one broker id and one credential, each given exactly once."""

    broker_id: int
    credential: str


def parse_claim(metadata: Sequence[tuple[str, Any]] | None) -> Claim | str:
    """The call's claim, or what is wrong with it (a repeated key, a missing one, a malformed
    id)."""
    ids: list[Any] = []
    credentials: list[Any] = []
    for key, value in metadata or ():
        if key == PEER_ID_METADATA:
            ids.append(value)
        elif key == PEER_AUTH_METADATA:
            credentials.append(value)
    for key, values in ((PEER_ID_METADATA, ids), (PEER_AUTH_METADATA, credentials)):
        if len(values) > 1:
            return f"the call repeats {key} ({len(values)} values): one identity per call"
    if not ids:
        return (f"no {PEER_ID_METADATA} metadata: only brokers of this cluster may call this "
                f"listener")
    broker_id = _parse_id(ids[0])
    if broker_id is None:
        return f"{PEER_ID_METADATA} {str(ids[0])[:20]!r} is not a broker id"
    credential = credentials[0] if credentials else None
    if not isinstance(credential, str) or not 0 < len(credential) <= _CREDENTIAL_CHARS_MAX:
        return f"no {PEER_AUTH_METADATA} credential for broker {broker_id}"
    return Claim(broker_id, credential)


def _parse_id(value: Any) -> int | None:
    if not isinstance(value, str) or not 0 < len(value) <= _PEER_ID_CHARS_MAX \
            or not value.isascii() or not value.isdigit():
        return None
    return int(value)


def certificate_problem(auth_context: Mapping[str, Sequence[bytes]],
                        broker_id: int) -> str | None:
    """What is wrong with the caller's TLS certificate as broker ``broker_id``'s (see the
    module doc), or None when it names that broker."""
    expected = broker_certificate_name(broker_id)
    if auth_context.get("transport_security_type") != [b"ssl"]:
        return "the call did not come over TLS"
    names = [n.decode(errors="replace") for n in auth_context.get("x509_common_name", ())]
    if names != [expected]:
        shown = ", ".join(repr(n) for n in names) or "no common name"
        return (f"the TLS certificate names {shown}, not {expected!r}: broker {broker_id}'s "
                f"certificate must be issued for {expected} (tidelog security init --node "
                f"{expected}=<its addresses>)")
    if not auth_context.get("x509_subject_alternative_name"):
        return (f"the TLS certificate for {expected!r} lists no addresses (a user's client "
                f"certificate?): a node's certificate names the addresses it is dialled at")
    return None


class PeerVerifier(Protocol):
    """Checks a claimed broker id's credential."""

    def problem(self, claim: Claim) -> str | None:
        """What is wrong with ``claim``'s credential, or None when it is that broker's."""
        ...


class RootVerifier:
    """Checks credentials against the cluster secret (controllers, combined nodes): the key
    broker ``id`` presents to ``audience`` is recomputed."""

    def __init__(self, secret: str, *, audience: str) -> None:
        self._secret = secret
        self._audience = audience

    def problem(self, claim: Claim) -> str | None:
        expected = broker_credential(self._secret, claim.broker_id).presented_to(self._audience)
        if not hmac.compare_digest(expected.encode(), claim.credential.encode()):
            return (f"the {PEER_AUTH_METADATA} credential is not broker {claim.broker_id}'s "
                    f"(another cluster's, another broker's, or not a broker)")
        return None


class RegisteredVerifier:
    """Checks inter-broker credentials against the verifier each broker's registration
    carries (``verifier_of``: from this broker's metadata image): a broker-only node holds no
    other broker's credential, only these one-way images of them."""

    def __init__(self, verifier_of: Callable[[int], bytes | None]) -> None:
        self._verifier_of = verifier_of

    def problem(self, claim: Claim) -> str | None:
        verifier = self._verifier_of(claim.broker_id)
        if verifier is None:
            return (f"broker {claim.broker_id} is not registered in this broker's metadata "
                    f"(yet), so its credential cannot be checked")
        if not verifier:
            return (f"broker {claim.broker_id}'s registration carries no credential verifier "
                    f"(its controllers have no cluster secret, or ran a version without them)")
        if not hmac.compare_digest(verifier, credential_verifier(claim.credential)):
            return (f"the {PEER_AUTH_METADATA} credential is not broker {claim.broker_id}'s "
                    f"(another cluster's, another broker's, or not a broker)")
        return None


# ----------------------------------------------------------------------------- the interceptor
class PeerAuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses (UNAUTHENTICATED, before the request is read) every call but ``open_methods``
    that lacks a valid broker credential, or, with ``tls``, a certificate naming the claimed
    broker; hands the one authenticated id to the handler. With ``verifier`` None, refuses
    nothing. ``listener`` names the server in the refusal ("the inter-broker listener")."""

    def __init__(self, verifier: PeerVerifier | None, *, listener: str, tls: bool,
                 open_methods: frozenset[str] = frozenset()) -> None:
        self._verifier = verifier
        self._listener = listener
        self._tls = tls
        self._open_methods = open_methods

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails],
                                     Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if (handler is None or self._verifier is None
                or handler_call_details.method in self._open_methods):
            return handler
        claim = parse_claim(handler_call_details.invocation_metadata)
        problem = claim if isinstance(claim, str) else self._verifier.problem(claim)
        if problem is not None:
            # Refused before the request is read (tidelog.rpc_guard says why it matters).
            return refusing_handler(handler, grpc.StatusCode.UNAUTHENTICATED,
                                    f"{self._listener}: {problem}")
        assert isinstance(claim, Claim)
        return checked_before_read(handler, self._guard(claim.broker_id))

    def _guard(self, broker_id: int) -> Callable[[Any], Awaitable[None]]:
        async def guard(context: Any) -> None:
            if self._tls:
                problem = certificate_problem(context.auth_context(), broker_id)
                if problem is not None:
                    await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                        f"{self._listener}: {problem}")
            _AUTHENTICATED.set(broker_id)  # in the call's own task: what its handler reads
        return guard


# ------------------------------------------------------------------------------ client side
class _AddMetadata:
    def __init__(self, metadata: Metadata) -> None:
        self._metadata = metadata

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()), *self._metadata)
        return details._replace(metadata=metadata)


class _UnaryUnaryMetadata(_AddMetadata, grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any,
                                    request: Any) -> Any:
        return await continuation(self._details(client_call_details), request)


class _UnaryStreamMetadata(_AddMetadata, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any,
                                     request: Any) -> Any:
        return await continuation(self._details(client_call_details), request)


def peer_interceptors(metadata: Metadata) -> list[Any]:
    """Client interceptors adding ``metadata`` to every unary and server-streaming call of an
    aio channel (``grpc.aio.insecure_channel(..., interceptors=...)``). Two objects: grpc.aio
    files an interceptor under the first call kind it implements only."""
    return [_UnaryUnaryMetadata(metadata), _UnaryStreamMetadata(metadata)]
