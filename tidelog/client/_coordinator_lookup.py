"""Finding a group's coordinator and calling it: one lookup and one retry policy for the
Admin's group operations (``_admin_groups.py``) and the consumer's group member
(``_group_coordinator.py``), as Kafka's clients share FindCoordinator handling.

- **Lookup** (:class:`CoordinatorLookup`): FindCoordinator to any broker
  (:meth:`MetadataManager.call_any`: the known brokers, then the bootstrap list, an unreachable
  one skipped). The answer is kept until a request to it fails with a code of
  :data:`FIND_AGAIN_CODES` (the coordinator moved, or cannot be reached: find it again);
  COORDINATOR_LOAD_IN_PROGRESS keeps it (the same broker answers once it has loaded the group).
- **Retry policy** (:func:`is_retried`, :func:`retrying`): the coordinator errors
  (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR) and an unreachable
  broker (NetworkError) are retried, and a timeout (REQUEST_TIMED_OUT) too when the request is
  idempotent (a DeleteGroups that timed out may have been applied: not resent). Each retry
  waits a step of the client's exponential backoff (``retry_backoff_ms`` doubling up to
  ``retry_backoff_max_ms``, +-20 % jitter) and none starts past the call's deadline, where the
  last error is raised. Every other error is raised at once.

Everything here runs on the client's I/O loop.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tidelog.client._io import Connections, monotonic_ms
from tidelog.client._metadata import Backoff, MetadataManager
from tidelog.errors import (
    ErrorCode,
    NetworkError,
    RequestTimedOutError,
    TidelogError,
    error_for_code,
)
from tidelog.v1 import broker_pb2 as pb

__all__ = ["COORDINATOR_RETRY_CODES", "FIND_AGAIN_CODES", "CoordinatorLookup", "group_error",
           "is_retried", "retrying"]

T = TypeVar("T")

#: Codes that say "the coordinator cannot answer now; ask again" (Kafka's coordinator errors).
COORDINATOR_RETRY_CODES = frozenset({
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
})
#: Codes after which the coordinator is found again before the next request.
FIND_AGAIN_CODES = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT,
})


def is_retried(error: TidelogError, *, idempotent: bool) -> bool:
    """Whether a request to a coordinator that failed with ``error`` is sent again."""
    if error.code in COORDINATOR_RETRY_CODES or isinstance(error, NetworkError):
        return True
    return idempotent and isinstance(error, RequestTimedOutError)


async def retrying(send: Callable[[], Awaitable[T]], *, deadline_ms: int, idempotent: bool,
                   backoff: Backoff, rng: random.Random) -> T:
    """``send()`` until it succeeds, retrying what :func:`is_retried` says with backoff; the
    last error is raised when the next attempt would start past ``deadline_ms``."""
    attempts = 0
    while True:  # bounded by the deadline: every failed attempt sleeps a backoff step first
        try:
            return await send()
        except TidelogError as error:
            if not is_retried(error, idempotent=idempotent):
                raise
            attempts += 1
            delay = backoff.delay_ms(attempts, rng)
            if monotonic_ms() + delay >= deadline_ms:
                raise
            await asyncio.sleep(delay / 1000)


def group_error(group_id: str, code: int, message: str) -> TidelogError:
    """The typed error of ``code``, its message naming the group."""
    return error_for_code(code, f"group {group_id!r}: {message or ErrorCode.Name(code)}")


class CoordinatorLookup:
    """Where one group's coordinator is, and requests to it (see the module doc)."""

    def __init__(self, group_id: str, *, metadata: MetadataManager, conns: Connections,
                 request_timeout_ms: int, backoff: Backoff, rng: random.Random) -> None:
        self.group_id = group_id
        self._metadata = metadata
        self._conns = conns
        self._request_timeout_ms = request_timeout_ms
        self._backoff = backoff
        self._rng = rng
        self._found: tuple[int, str] | None = None

    @property
    def node_id(self) -> int:
        """The coordinator's broker id as last found (-1 when not known)."""
        return -1 if self._found is None else self._found[0]

    async def coordinator(self, deadline_ms: int) -> tuple[int, str]:
        """(broker id, address) of the coordinator, found with FindCoordinator if not known
        (retried by the policy until ``deadline_ms``)."""
        if self._found is None:
            self._found = await retrying(lambda: self._find(deadline_ms),
                                         deadline_ms=deadline_ms, idempotent=True,
                                         backoff=self._backoff, rng=self._rng)
        return self._found

    async def _find(self, deadline_ms: int) -> tuple[int, str]:
        response = await self._metadata.call_any(
            "FindCoordinator", pb.FindCoordinatorRequest(group_ids=[self.group_id]),
            deadline_ms=deadline_ms)
        if not response.coordinators:
            raise group_error(self.group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                              "FindCoordinator answered nothing")
        found = response.coordinators[0]
        if found.error_code != ErrorCode.NONE:
            raise group_error(self.group_id, found.error_code, found.error_message)
        return found.node_id, f"{found.endpoint.host}:{found.endpoint.port}"

    def on_error(self, code: int) -> None:
        """A request to the coordinator failed with ``code``: forget it if it moved."""
        if code in FIND_AGAIN_CODES:
            self._found = None

    async def send(self, method: str, request: Any, *, deadline_ms: int) -> Any:
        """One request to the coordinator (found first if needed); a transport failure
        forgets the coordinator and is raised. The response's own codes are the caller's."""
        _, address = await self.coordinator(deadline_ms)
        try:
            return await self._conns.call(
                address, method, request,
                timeout_ms=max(1, min(self._request_timeout_ms, deadline_ms - monotonic_ms())))
        except TidelogError as error:
            self.on_error(error.code)
            raise

    async def call(self, method: str, request: Any, *, deadline_ms: int, idempotent: bool,
                   check: Callable[[Any], TidelogError | None]) -> Any:
        """``request`` to the coordinator until an answer that ``check`` finds no error in
        (the error it finds is raised, or retried by the policy), or the deadline."""
        async def attempt() -> Any:
            response = await self.send(method, request, deadline_ms=deadline_ms)
            error = check(response)
            if error is not None:
                self.on_error(error.code)
                raise error
            return response

        return await retrying(attempt, deadline_ms=deadline_ms, idempotent=idempotent,
                              backoff=self._backoff, rng=self._rng)
