"""ProducerIdControlManager: blocks of producer ids for brokers (KIP-730).

A broker asks for a block when its idempotent producers have used up the last one. The block is
[next_producer_id, next_producer_id + block size); the ProducerIdsRecord advances the image's
next id past it, and replay refuses a record that does not advance it, so two blocks never
overlap even across controller failovers.
"""

from __future__ import annotations

from tidelog.controller.managers.common import LogicConfig, check_broker_epoch, set_error
from tidelog.errors import TidelogError, UnknownServerError
from tidelog.metadata.image import MetadataImage
from tidelog.metadata.records import metadata_record
from tidelog.v1 import controller_pb2, metadata_pb2

__all__ = ["PRODUCER_ID_MAX", "ProducerIdControlManager"]

#: Producer ids are int64 on the wire; the largest one a block may contain.
PRODUCER_ID_MAX = 2**63 - 1


class ProducerIdControlManager:
    """Hands out producer id blocks."""

    def __init__(self, config: LogicConfig) -> None:
        self._block_size = config.producer_id_block_size

    def allocate_producer_ids(
        self, image: MetadataImage, request: controller_pb2.AllocateProducerIdsRequest
    ) -> tuple[list[metadata_pb2.MetadataRecord], controller_pb2.AllocateProducerIdsResponse]:
        response = controller_pb2.AllocateProducerIdsResponse()
        start = image.producer_ids.next_producer_id
        try:
            check_broker_epoch(image, request.broker_id, request.broker_epoch)
            if start + self._block_size - 1 > PRODUCER_ID_MAX:
                raise UnknownServerError("producer ids are exhausted")
        except TidelogError as error:
            set_error(response, error)
            return [], response
        record = metadata_pb2.ProducerIdsRecord(
            broker_id=request.broker_id,
            broker_epoch=request.broker_epoch,
            next_producer_id=start + self._block_size,
        )
        response.producer_id_start = start
        response.producer_id_len = self._block_size
        return [metadata_record(record)], response
