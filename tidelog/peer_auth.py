"""Peer authentication on gRPC: how a broker proves who it is to other brokers and controllers.

A broker sends two gRPC metadata entries on every call to the inter-broker listener
(ReplicaService) and to the controllers (ControllerService): :data:`PEER_ID_METADATA` = its
broker id and :data:`PEER_AUTH_METADATA` = ``broker_credential(secret, id)``, a key derived from
the cluster secret for that id (tidelog.cluster_secret). Clients never have the secret, so they
cannot make one, and one broker's credential does not work for another id.

Servers check it in :class:`PeerAuthInterceptor`, a grpc.aio server interceptor, before the
handler runs: a call without a valid credential gets the status UNAUTHENTICATED with a message
naming what is missing or wrong, and its request bytes are never deserialised (the refusing
handler has no deserializer). Handlers then compare the authenticated id with the broker id the
request names (:func:`authenticated_broker_id`): broker 101 cannot fetch or heartbeat as 102.

Without a cluster secret (a development node whose listeners all bind loopback; tidelog.config
refuses anything else) the interceptor lets every call through; the node logs that once at
start. Methods listed as ``open_methods`` (ControllerService.DescribeQuorum, which the CLI's
``cluster quorum`` calls) need no credential.

Client side: :func:`peer_metadata` for explicit ``metadata=`` arguments (the fetcher's hot path),
:func:`peer_interceptors` for every call of an aio channel (the controller client), and
:func:`peer_channel` for a blocking channel (tools and tests).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc

from tidelog.cluster_secret import (
    PEER_AUTH_METADATA,
    PEER_ID_METADATA,
    broker_credential,
    verify_broker_credential,
)

__all__ = [
    "PeerAuthInterceptor",
    "authenticated_broker_id",
    "peer_channel",
    "peer_interceptors",
    "peer_metadata",
]

log = logging.getLogger("tidelog.peer_auth")

Metadata = tuple[tuple[str, str], ...]
#: A broker id in metadata longer than this is not a broker id (bounds the parsing work).
_PEER_ID_CHARS_MAX = 11


def peer_metadata(secret: str | None, broker_id: int) -> Metadata:
    """The metadata broker ``broker_id`` sends on every peer call (the id alone without a
    secret: development clusters, where nothing checks it)."""
    if secret is None:
        return ((PEER_ID_METADATA, str(broker_id)),)
    return ((PEER_ID_METADATA, str(broker_id)),
            (PEER_AUTH_METADATA, broker_credential(secret, broker_id)))


def authenticated_broker_id(context: Any) -> int | None:
    """The broker id the caller proved (the interceptor let the call through), or None when
    it sent none (only possible on a node without a secret)."""
    for key, value in context.invocation_metadata() or ():
        if key == PEER_ID_METADATA:
            return _parse_id(value)
    return None


def _parse_id(value: Any) -> int | None:
    if not isinstance(value, str) or not 0 < len(value) <= _PEER_ID_CHARS_MAX:
        return None
    try:
        broker_id = int(value)
    except ValueError:
        return None
    return broker_id if broker_id >= 0 else None


class PeerAuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses (UNAUTHENTICATED) every call but ``open_methods`` that lacks a valid broker
    credential; with ``secret`` None, refuses nothing. ``listener`` names the server in the
    refusal ("the inter-broker listener")."""

    def __init__(self, secret: str | None, *, listener: str,
                 open_methods: frozenset[str] = frozenset()) -> None:
        self._secret = secret
        self._listener = listener
        self._open_methods = open_methods

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails],
                                     Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if (handler is None or self._secret is None
                or handler_call_details.method in self._open_methods):
            return handler
        problem = self.problem(handler_call_details.invocation_metadata)
        if problem is None:
            return handler
        return _refusing_handler(handler, f"{self._listener}: {problem}")

    def problem(self, metadata: Sequence[tuple[str, Any]] | None) -> str | None:
        """What is wrong with the caller's credential, or None when it is valid."""
        assert self._secret is not None
        values = dict(metadata or ())
        raw_id = values.get(PEER_ID_METADATA)
        if raw_id is None:
            return (f"no {PEER_ID_METADATA} metadata: only brokers of this cluster may call "
                    f"this listener")
        broker_id = _parse_id(raw_id)
        if broker_id is None:
            return f"{PEER_ID_METADATA} {str(raw_id)[:20]!r} is not a broker id"
        credential = values.get(PEER_AUTH_METADATA)
        if not isinstance(credential, str) or not credential:
            return f"no {PEER_AUTH_METADATA} credential for broker {broker_id}"
        if not verify_broker_credential(self._secret, broker_id, credential):
            return (f"the {PEER_AUTH_METADATA} credential is not broker {broker_id}'s "
                    f"(another cluster's secret, or not a broker)")
        return None


def _refusing_handler(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same kind as ``handler`` that aborts with UNAUTHENTICATED; it has no
    request deserializer, so the refused request is never parsed."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def refuse_stream(request: Any,
                            context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # pragma: no cover - abort raises; this makes it an async generator

    serializer = handler.response_serializer
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(refuse, response_serializer=serializer)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(refuse_stream,
                                                    response_serializer=serializer)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(refuse, response_serializer=serializer)
    return grpc.stream_stream_rpc_method_handler(refuse_stream, response_serializer=serializer)


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


class _BlockingPeerMetadata(grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
                            grpc.UnaryStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, metadata: Metadata) -> None:
        self._metadata = metadata

    def _details(self, details: Any) -> Any:
        return _Details(details.method, details.timeout,
                        [*(details.metadata or ()), *self._metadata], details.credentials,
                        details.wait_for_ready, details.compression)

    def intercept_unary_unary(self, continuation: Any, client_call_details: Any,
                              request: Any) -> Any:
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation: Any, client_call_details: Any,
                               request: Any) -> Any:
        return continuation(self._details(client_call_details), request)


class _Details(grpc.ClientCallDetails):  # type: ignore[misc]
    def __init__(self, method: str, timeout: float | None, metadata: Any, credentials: Any,
                 wait_for_ready: bool | None, compression: Any) -> None:
        self.method = method
        self.timeout = timeout
        self.metadata = metadata
        self.credentials = credentials
        self.wait_for_ready = wait_for_ready
        self.compression = compression


def peer_channel(address: str, secret: str | None, broker_id: int) -> grpc.Channel:
    """A blocking channel to ``address`` whose unary calls carry broker ``broker_id``'s
    credential (tools and tests that talk to controllers as a broker would)."""
    channel = grpc.insecure_channel(address)
    return grpc.intercept_channel(channel, _BlockingPeerMetadata(peer_metadata(secret,
                                                                               broker_id)))
