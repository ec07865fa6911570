"""Producer ids for idempotent producers: blocks from the controller, InitProducerId (DESIGN §9).

Kafka's RPCProducerIdManager: the active controller hands each broker a block of ids
(AllocateProducerIds, a committed ProducerIdsRecord, so no id is ever given twice across
brokers or controller failovers); the broker gives them out one by one and asks for the next
block once 90% of the current one is used, so InitProducerId rarely waits for the controller.
One request for a block is in flight at a time; concurrent InitProducerIds wait for it.

InitProducerId (no transactions): ``producer_id = -1`` gets a new id with epoch 0;
``producer_id`` set with ``producer_epoch`` bumps the epoch (the client resets its sequences,
e.g. after OUT_OF_ORDER_SEQUENCE_NUMBER), and a new id once the epoch would pass int16's
maximum, as Kafka does. A transactional id is INVALID_REQUEST (reserved in broker.proto).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol, cast

from tidelog.broker.replication.producer_state import PRODUCER_EPOCH_MAX
from tidelog.errors import (
    CoordinatorNotAvailableError,
    InvalidRequestError,
    RequestTimedOutError,
    TidelogError,
    error_for_code,
)
from tidelog.invariants import InvariantViolation
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode

__all__ = ["BLOCK_PREFETCH_RATIO", "ControllerChannel", "ProducerIdManager"]

log = logging.getLogger("tidelog.broker.producer_ids")

#: Ask for the next block once this share of the current one is given out (Kafka: 0.9).
BLOCK_PREFETCH_RATIO = 0.9
#: How long an InitProducerId waits for a block before answering REQUEST_TIMED_OUT.
ALLOCATION_TIMEOUT_MS = 20_000


class ControllerChannel(Protocol):
    """What the data plane needs of the controller client (ControllerClient has it)."""

    async def call(self, method_name: str, request: Any) -> Any: ...


class ProducerIdManager:
    """Gives out producer ids from controller-allocated blocks (see the module doc)."""

    def __init__(self, *, broker_id: int, broker_epoch: Callable[[], int],
                 controller: ControllerChannel) -> None:
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._controller = controller
        self._next = 0
        self._end = 0  # exclusive; _next == _end: the current block is used up
        self._prefetched: tuple[int, int] | None = None  # (start, length) of the next block
        self._allocation: asyncio.Task[None] | None = None
        self._prefetch_at = 0
        self._last_error: TidelogError | None = None

    async def next_producer_id(self) -> int:
        """A producer id never given before in this cluster (RequestTimedOutError or the
        controller's error when no block can be had)."""
        if self._next >= self._end:
            if self._prefetched is None:
                await self._wait_for_block()
            assert self._prefetched is not None
            self._use_block(*self._prefetched)
            self._prefetched = None
        producer_id = self._next
        self._next += 1
        if self._next >= self._prefetch_at and self._prefetched is None:
            self._start_allocation()
        return producer_id

    async def _wait_for_block(self) -> None:
        self._start_allocation()
        task = self._allocation
        assert task is not None
        done, _ = await asyncio.wait((task,), timeout=ALLOCATION_TIMEOUT_MS / 1000)
        if self._prefetched is not None:
            return
        if not done:
            raise RequestTimedOutError("no producer id block from the controller in time")
        raise self._last_error or RequestTimedOutError("the controller gave no producer ids")

    def _use_block(self, start: int, length: int) -> None:
        self._next, self._end = start, start + length
        self._prefetch_at = start + max(1, int(length * BLOCK_PREFETCH_RATIO))

    def _start_allocation(self) -> None:
        if self._allocation is None or self._allocation.done():
            self._allocation = asyncio.get_running_loop().create_task(self._allocate())

    async def _allocate(self) -> None:
        """Ask for a block; never raises (a prefetch nobody awaits must not lose its error)."""
        request = cpb.AllocateProducerIdsRequest(broker_id=self._broker_id,
                                                 broker_epoch=self._broker_epoch())
        try:
            response = await self._controller.call("AllocateProducerIds", request)
            if response.error_code != ErrorCode.NONE:
                raise error_for_code(response.error_code, response.error_message)
        except TidelogError as error:
            log.warning("broker %d: AllocateProducerIds failed: %s", self._broker_id, error)
            # The client may always retry InitProducerId (e.g. this broker is not registered
            # yet, or no controller is active): Kafka says COORDINATOR_NOT_AVAILABLE too.
            self._last_error = CoordinatorNotAvailableError(
                f"no producer id block from the controller: {error}")
            return
        start, length = int(response.producer_id_start), int(response.producer_id_len)
        if not (start >= self._end and length > 0):
            raise InvariantViolation(
                f"producer id block {start}+{length} does not follow the end {self._end}")
        self._prefetched = (start, length)
        self._last_error = None

    async def handle_init_producer_id(
        self, request: pb.InitProducerIdRequest
    ) -> pb.InitProducerIdResponse:
        if request.transactional_id:
            return _error(InvalidRequestError("transactional ids are not supported yet"))
        producer_id, epoch = request.producer_id, request.producer_epoch
        try:
            if producer_id >= 0:
                if not 0 <= epoch <= PRODUCER_EPOCH_MAX:
                    raise InvalidRequestError(
                        f"producer_epoch {epoch} outside [0, {PRODUCER_EPOCH_MAX}]")
                if epoch < PRODUCER_EPOCH_MAX:
                    return pb.InitProducerIdResponse(producer_id=producer_id,
                                                     producer_epoch=epoch + 1)
            elif producer_id != -1:
                raise InvalidRequestError(f"producer_id {producer_id} is neither -1 nor an id")
            new_id = await self.next_producer_id()
        except TidelogError as error:
            return _error(error)
        return pb.InitProducerIdResponse(producer_id=new_id, producer_epoch=0)

    async def close(self) -> None:
        if self._allocation is not None and not self._allocation.done():
            self._allocation.cancel()


def _error(error: TidelogError) -> pb.InitProducerIdResponse:
    return pb.InitProducerIdResponse(error_code=cast(ErrorCode, error.code),
                                     error_message=error.message, producer_id=-1,
                                     producer_epoch=-1)
