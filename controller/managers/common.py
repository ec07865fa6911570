"""Configuration, request limits and small helpers shared by the control managers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, cast

from tidelog import limits
from tidelog.errors import BrokerIdNotRegisteredError, StaleBrokerEpochError, TidelogError
from tidelog.invariants import InvariantViolation, check
from tidelog.metadata.image import BrokerRegistration, MetadataImage
from tidelog.v1 import common_pb2

__all__ = [
    "CONFIG_OPS_PER_RESOURCE_MAX",
    "CONFIG_RESOURCES_PER_REQUEST_MAX",
    "ENDPOINT_TEXT_LENGTH_MAX",
    "FENCE_BATCH_RECORDS_SOFT_MAX",
    "TOPICS_PER_REQUEST_MAX",
    "ControllerConfig",
    "ErrorFields",
    "check_broker_epoch",
    "error_code",
    "raise_unless",
    "set_error",
]

#: Topics named in one CreateTopics / DeleteTopics / CreatePartitions request. Kafka has no such
#: bound; with PARTITIONS_PER_REQUEST_MAX it bounds a batch (records.RECORDS_PER_BATCH_MAX).
TOPICS_PER_REQUEST_MAX = 1000
#: Resources in one AlterConfigs / DescribeConfigs request, and ops on one resource.
CONFIG_RESOURCES_PER_REQUEST_MAX = 1000
CONFIG_OPS_PER_RESOURCE_MAX = 100
#: Host names and rack labels longer than this are refused at registration.
ENDPOINT_TEXT_LENGTH_MAX = 255
#: A fencing tick stops adding brokers to its batch past this many records; the rest are fenced
#: on the next tick (Kafka fences one broker per event for the same reason: bounded batches).
FENCE_BATCH_RECORDS_SOFT_MAX = 10_000

check(
    TOPICS_PER_REQUEST_MAX <= limits.PARTITIONS_PER_REQUEST_MAX,
    "a request's topics must fit its partitions limit",
)
check(CONFIG_OPS_PER_RESOURCE_MAX >= 12, "at least every topic config once")


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The controller settings the managers use; defaults are Kafka's."""

    #: broker.session.timeout.ms: a broker without a heartbeat for longer is fenced.
    broker_session_timeout_ms: int = 9000
    #: num.partitions: partitions of a topic created with num_partitions = -1.
    num_partitions: int = 1
    #: default.replication.factor: replication factor of a topic created with -1.
    default_replication_factor: int = 1
    #: Producer ids per AllocateProducerIds block (Kafka's ProducerIdsBlock size).
    producer_id_block_size: int = 1000

    def __post_init__(self) -> None:
        if self.broker_session_timeout_ms <= 0:
            raise InvariantViolation(
                f"broker session timeout {self.broker_session_timeout_ms} ms is not positive")
        if not 1 <= self.num_partitions <= limits.PARTITIONS_PER_TOPIC_MAX:
            raise InvariantViolation(
                f"num.partitions {self.num_partitions} outside "
                f"1..{limits.PARTITIONS_PER_TOPIC_MAX}")
        if not 1 <= self.default_replication_factor <= limits.REPLICATION_FACTOR_MAX:
            raise InvariantViolation(
                f"default.replication.factor {self.default_replication_factor} outside "
                f"1..{limits.REPLICATION_FACTOR_MAX}")
        if not 1 <= self.producer_id_block_size <= 1_000_000:
            raise InvariantViolation(
                f"producer id block size {self.producer_id_block_size} outside 1..1000000")


def error_code(code: int) -> common_pb2.ErrorCode:
    """An ``ErrorCode`` for a response field from a TidelogError's code (an int)."""
    if code not in common_pb2.ErrorCode.values():
        raise InvariantViolation(f"unknown error code {code}")
    return cast(common_pb2.ErrorCode, code)


class ErrorFields(Protocol):
    """Any response or per-item result: they all carry an error code and message."""

    error_code: common_pb2.ErrorCode
    error_message: str


def set_error(result: ErrorFields, error: TidelogError) -> None:
    """Put ``error``'s code and message into a response (or per-item result) message."""
    result.error_code = error_code(error.code)
    result.error_message = error.message


def check_broker_epoch(
    image: MetadataImage, broker_id: int, broker_epoch: int
) -> BrokerRegistration:
    """The broker's registration, if ``broker_epoch`` is its current one; else the error."""
    registration = image.cluster.broker(broker_id)
    if registration is None:
        raise BrokerIdNotRegisteredError(f"broker {broker_id} is not registered")
    if registration.broker_epoch != broker_epoch:
        raise StaleBrokerEpochError(
            f"broker {broker_id} epoch {broker_epoch} is not the registered epoch "
            f"{registration.broker_epoch}"
        )
    return registration


def raise_unless(condition: bool, error: TidelogError) -> None:
    """Raise ``error`` unless ``condition`` holds (validation reads as a list of rules)."""
    if not condition:
        raise error
