"""The Admin's ACL operations (Kafka's createAcls, describeAcls, deleteAcls): the local checks,
the requests, and the per-item retries their responses need.

CreateAcls and DeleteAcls go to any broker, which forwards them to the active controller. Their
responses carry no request-level error code (proto/tidelog/v1/controller.proto): a broker that
could not reach the active controller, or a controller that is not active, answers each item
with NOT_CONTROLLER (or another retriable code). So the retry that create_topics gets from its
request-level code happens here per item: the items that got a retriable code are sent again,
with backoff, until the call's deadline; the others keep their answer.

Which codes are retried: creating a binding that exists succeeds without a second copy, so
CreateAcls is idempotent and is resent on every retriable code (REQUEST_TIMED_OUT included) and
after a transport timeout. A deletion that timed out may have been applied, and sent again it
would report nothing deleted, so DeleteAcls is resent only on the codes that say it was not
(``WRITE_RETRY_CODES``); a timeout is the filter's error.

DescribeAcls is a read with a request-level code, retried as every read is. ``Admin`` keeps the
public methods and hands the work to :class:`AclAdmin`, on the client's I/O loop.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

from tidelog.acl import (
    AclBinding,
    AclFilter,
    binding_from_proto,
    binding_to_proto,
    filter_to_proto,
)
from tidelog.client._admin_types import WRITE_RETRY_CODES
from tidelog.client._io import monotonic_ms
from tidelog.client._metadata import Backoff
from tidelog.errors import (
    ErrorCode,
    InvalidRequestError,
    TidelogError,
    UnknownServerError,
    error_for_code,
)
from tidelog.v1 import broker_pb2, controller_pb2

__all__ = ["AclAdmin", "binding_error", "filter_error"]

#: ``Admin._call``: (method, request, wait_ms, *, write) -> the response, request-level
#: retriable errors retried until ``wait_ms``.
Call = Callable[..., Awaitable[Any]]

_rng = random.Random()


def binding_error(binding: object) -> TidelogError | None:
    """InvalidRequestError naming what is wrong with ``binding`` (tidelog.acl's rules), or None.
    """
    if not isinstance(binding, AclBinding):
        raise TypeError(f"expected AclBinding, got {binding!r}")
    problem = binding.problem()
    return None if problem is None else InvalidRequestError(problem)


def filter_error(acl_filter: object) -> TidelogError | None:
    """InvalidRequestError for a filter field outside its values (it could match nothing)."""
    if not isinstance(acl_filter, AclFilter):
        raise TypeError(f"expected AclFilter, got {acl_filter!r}")
    problem = acl_filter.problem()
    return None if problem is None else InvalidRequestError(problem)


class AclAdmin:
    """CreateAcls, DescribeAcls and DeleteAcls through ``call`` (the Admin's any-broker call)."""

    def __init__(self, call: Call, backoff: Backoff) -> None:
        self._call = call
        self._backoff = backoff

    async def create(self, bindings: list[AclBinding],
                     deadline_ms: int) -> list[TidelogError | None]:
        """Per binding, in order: None (created, or it existed) or its typed error."""
        answers = await self._per_item(
            "CreateAcls",
            lambda items: controller_pb2.CreateAclsRequest(
                creations=[binding_to_proto(bindings[i]) for i in items]),
            len(bindings), deadline_ms, idempotent=True)
        return [a if isinstance(a, TidelogError) else None for a in answers]

    async def describe(self, acl_filter: AclFilter, wait_ms: int) -> list[AclBinding]:
        request = broker_pb2.DescribeAclsRequest(filter=filter_to_proto(acl_filter))
        resp = await self._call("DescribeAcls", request, wait_ms, write=False)
        return [binding_from_proto(b) for b in resp.bindings]

    async def delete(self, filters: list[AclFilter],
                     deadline_ms: int) -> list[TidelogError | list[AclBinding]]:
        """Per filter, in order: the bindings it deleted, or its typed error."""
        answers = await self._per_item(
            "DeleteAcls",
            lambda items: controller_pb2.DeleteAclsRequest(
                filters=[filter_to_proto(filters[i]) for i in items]),
            len(filters), deadline_ms, idempotent=False)
        return [a if isinstance(a, TidelogError) else [binding_from_proto(b) for b in a.deleted]
                for a in answers]

    async def _per_item(self, method: str, request_for: Callable[[list[int]], Any], count: int,
                        deadline_ms: int, *, idempotent: bool) -> list[Any]:
        """Per item, in order: its result message (error_code NONE) or its typed error.

        A request-level failure (unreachable brokers, UNSUPPORTED_VERSION) raises, as for
        create_topics, unless some items already have their answer: then it is the error of the
        items still waiting, so what was done is not hidden."""
        answers: list[Any] = [None] * count
        pending = list(range(count))
        attempts = 0
        while True:  # bounded by the deadline: every round that retries sleeps a backoff first
            try:
                resp = await self._call(method, request_for(pending),
                                        max(1, deadline_ms - monotonic_ms()),
                                        write=not idempotent)
            except TidelogError as e:
                if attempts == 0:
                    raise
                for i in pending:
                    answers[i] = e
                return answers
            results = list(resp.results)
            again = []
            for n, i in enumerate(pending):
                if n >= len(results):
                    answers[i] = UnknownServerError(
                        f"{method}: the response has {len(results)} results for "
                        f"{len(pending)} items")
                    continue
                r = results[n]
                if r.error_code == ErrorCode.NONE:
                    answers[i] = r
                    continue
                error = error_for_code(r.error_code, r.error_message)
                answers[i] = error
                if error.retriable if idempotent else r.error_code in WRITE_RETRY_CODES:
                    again.append(i)
            attempts += 1
            delay = self._backoff.delay_ms(attempts, _rng)
            if not again or monotonic_ms() + delay >= deadline_ms:
                return answers  # a retried item that ran out of time keeps its last error
            await asyncio.sleep(delay / 1000)
            pending = again
