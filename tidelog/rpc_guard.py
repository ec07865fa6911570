"""Requests that do not parse get INVALID_ARGUMENT, quietly, instead of a traceback per call.

grpcio parses a request with the handler's ``request_deserializer`` before any of our code runs.
When the bytes are not the message (truncated, random, another message's), the protobuf parser
raises, and grpcio logs "Exception deserializing request!" at ERROR with a full traceback and
answers UNKNOWN. Anyone who can reach a port could fill the node's log that way (the RPC fuzzer
made ~9,000 tracebacks in four minutes), and the caller learns nothing useful.

:class:`DecodeGuardInterceptor` wraps every handler's deserializer: a request that fails to parse
becomes an :class:`_Undecodable` marker, and the wrapped behaviour answers it with
INVALID_ARGUMENT naming the method and the parser's complaint, logged at DEBUG. Streaming
requests are checked message by message: the handler sees the stream end before the first bad
one, answers what came before it, and the call then ends with INVALID_ARGUMENT.
Handlers without a deserializer (the peer-auth refusal, which never parses) are left alone, so
put this interceptor first in the server's list: it then wraps whatever the others return.

The same wrapper answers an RPC that the contract declares but the node does not implement yet
(the generated servicer base raises NotImplementedError) with a plain UNIMPLEMENTED, again
without grpcio's traceback per call.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

__all__ = ["DecodeGuardInterceptor", "checked_before_read", "maybe_await", "refusing_handler",
           "responses_of"]

log = logging.getLogger("tidelog.rpc_guard")

#: The parser's complaint is cut to this many characters in the answer.
_COMPLAINT_CHARS_MAX = 200


class _Undecodable:
    """What a request that did not parse becomes; the behaviour answers it."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem


class DecodeGuardInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Answers unparseable requests with INVALID_ARGUMENT instead of grpcio's logged UNKNOWN."""

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails],
                                     Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        return _guarded(handler, str(handler_call_details.method))


def _guarded(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    deserialize = _safe_deserializer(handler.request_deserializer)
    serialize = handler.response_serializer

    async def refuse(request: _Undecodable, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        log.debug("%s: request does not parse: %s", method, request.problem)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"{method}: the request is not a valid message: {request.problem}")

    async def not_implemented(context: grpc.aio.ServicerContext[Any, Any]) -> None:
        # The generated servicer base of an RPC declared in the contract but not built yet
        # (the consumer-group RPCs until that issue lands) raises NotImplementedError, which
        # grpcio would log with a traceback per call.
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented")

    def checked_stream(requests: AsyncIterator[Any], bad: list[_Undecodable]
                       ) -> AsyncIterator[Any]:
        """The requests up to the first that does not parse, which is kept in ``bad``. The
        handler sees the stream end there (as if the client had half-closed); the wrapper
        answers INVALID_ARGUMENT once the handler is done. Aborting from inside the iterator
        instead would race the handler's own ending of the call (grpcio: "too many
        operations")."""
        async def each() -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, _Undecodable):
                    bad.append(request)
                    return
                yield request
        return each()

    if handler.unary_unary is not None:
        inner_uu = handler.unary_unary

        async def unary_unary(request: Any, context: Any) -> Any:
            if isinstance(request, _Undecodable):
                await refuse(request, context)
            try:
                return await maybe_await(inner_uu(request, context))
            except NotImplementedError:
                await not_implemented(context)
        return grpc.unary_unary_rpc_method_handler(
            unary_unary, request_deserializer=deserialize, response_serializer=serialize)
    if handler.unary_stream is not None:
        inner_us = handler.unary_stream

        async def unary_stream(request: Any, context: Any) -> AsyncIterator[Any]:
            if isinstance(request, _Undecodable):
                await refuse(request, context)
            try:
                responses = inner_us(request, context)
            except NotImplementedError:
                await not_implemented(context)
            async for response in responses_of(responses):
                yield response
        return grpc.unary_stream_rpc_method_handler(
            unary_stream, request_deserializer=deserialize, response_serializer=serialize)
    if handler.stream_unary is not None:
        inner_su = handler.stream_unary

        async def stream_unary(requests: Any, context: Any) -> Any:
            bad: list[_Undecodable] = []
            try:
                response = await maybe_await(inner_su(checked_stream(requests, bad), context))
            except NotImplementedError:
                await not_implemented(context)
            if bad:
                await refuse(bad[0], context)
            return response
        return grpc.stream_unary_rpc_method_handler(
            stream_unary, request_deserializer=deserialize, response_serializer=serialize)
    inner_ss = handler.stream_stream

    async def stream_stream(requests: Any, context: Any) -> AsyncIterator[Any]:
        bad: list[_Undecodable] = []
        try:
            responses = inner_ss(checked_stream(requests, bad), context)
        except NotImplementedError:
            await not_implemented(context)
        async for response in responses_of(responses):
            yield response
        if bad:
            await refuse(bad[0], context)
    return grpc.stream_stream_rpc_method_handler(
        stream_stream, request_deserializer=deserialize, response_serializer=serialize)


async def maybe_await(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


async def responses_of(result: Any) -> AsyncIterator[Any]:
    """A streaming behaviour's answers: an async generator's items, or nothing for one that
    writes with ``context.write`` (a coroutine), which is awaited."""
    if inspect.isasyncgen(result):
        async for response in result:
            yield response
    else:
        await result


def _safe_deserializer(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def safe(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as e:  # the parser's error, whatever its class (DecodeError, ...)
            return _Undecodable(f"{type(e).__name__}: {e}"[:_COMPLAINT_CHARS_MAX])
    return safe


# --- refusing before a request is read ----------------------------------------------------------
# gRPC reads a unary request whole, into memory, before its handler runs: a 100 MiB request from
# a caller that is then refused cost the server 100 MiB and more (measured: +300 MB peak RSS).
# A streaming-request handler is given an iterator instead and reads only what it asks for, and
# the client cannot tell the difference (the wire is the same). So a call refused on what its
# metadata or its TLS session says is answered by a streaming-request handler that never reads,
# and a call that must be checked before it is read is served by one that checks, then reads.


def refusing_handler(handler: grpc.RpcMethodHandler, code: grpc.StatusCode,
                     message: str) -> grpc.RpcMethodHandler:
    """A handler for ``handler``'s method that aborts with ``code`` and ``message`` without
    reading the request."""

    async def refuse(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(code, message)

    async def refuse_stream(requests: Any,
                            context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        await context.abort(code, message)
        yield  # pragma: no cover - abort raises; this makes it an async generator

    serializer = handler.response_serializer
    if handler.unary_unary is not None or handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(refuse, response_serializer=serializer)
    return grpc.stream_stream_rpc_method_handler(refuse_stream, response_serializer=serializer)


def checked_before_read(handler: grpc.RpcMethodHandler,
                        guard: Callable[[Any], Awaitable[None]]) -> grpc.RpcMethodHandler:
    """``handler`` with ``guard(context)`` run before any of its request is read (the guard
    aborts to refuse): the same (de)serializers, behind a streaming-request handler whatever
    the method's kind, whose unary request is read after the guard passed."""
    kwargs = {"request_deserializer": handler.request_deserializer,
              "response_serializer": handler.response_serializer}
    if handler.unary_unary is not None:
        inner_uu = handler.unary_unary

        async def unary_unary(requests: Any, context: Any) -> Any:
            await guard(context)
            return await maybe_await(inner_uu(await _one_request(requests, context), context))
        return grpc.stream_unary_rpc_method_handler(unary_unary, **kwargs)
    if handler.unary_stream is not None:
        inner_us = handler.unary_stream

        async def unary_stream(requests: Any, context: Any) -> AsyncIterator[Any]:
            await guard(context)
            request = await _one_request(requests, context)
            async for response in responses_of(inner_us(request, context)):
                yield response
        return grpc.stream_stream_rpc_method_handler(unary_stream, **kwargs)
    if handler.stream_unary is not None:
        inner_su = handler.stream_unary

        async def stream_unary(requests: Any, context: Any) -> Any:
            await guard(context)
            return await maybe_await(inner_su(requests, context))
        return grpc.stream_unary_rpc_method_handler(stream_unary, **kwargs)
    inner_ss = handler.stream_stream

    async def stream_stream(requests: Any, context: Any) -> AsyncIterator[Any]:
        await guard(context)
        async for response in responses_of(inner_ss(requests, context)):
            yield response
    return grpc.stream_stream_rpc_method_handler(stream_stream, **kwargs)


async def _one_request(requests: AsyncIterator[Any], context: Any) -> Any:
    """The one message of a unary call read through a streaming handler."""
    async for request in requests:
        return request
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call carried no request message")
