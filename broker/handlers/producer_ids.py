"""BrokerService.InitProducerId: a producer id from the broker's block (broker.producer_ids,
which asks the controller for blocks)."""

from __future__ import annotations

import time

from tidelog.broker.handlers.common import HandlerRegistry
from tidelog.broker.metrics import outcome_of
from tidelog.v1 import broker_pb2 as pb

__all__ = ["handle_init_producer_id"]


async def handle_init_producer_id(registry: HandlerRegistry, request: pb.InitProducerIdRequest
                                  ) -> pb.InitProducerIdResponse:
    started = time.perf_counter()
    response = await registry.producer_ids.handle_init_producer_id(request)
    if registry.metrics is not None:
        registry.metrics.latency["init_producer_id", outcome_of(response.error_code)].observe(
            time.perf_counter() - started)
    return response
