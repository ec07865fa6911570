"""Configuration, request limits and small helpers shared by the control managers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from tidelog import limits
from tidelog.errors import BrokerIdNotRegisteredError, StaleBrokerEpochError, TidelogError
from tidelog.invariants import InvariantViolation, check
from tidelog.metadata.image import BrokerRegistration, MetadataImage
from tidelog.scram import request_users
from tidelog.v1 import common_pb2

__all__ = [
    "ACL_CREATIONS_PER_REQUEST_MAX",
    "ACL_FILTERS_PER_REQUEST_MAX",
    "CONFIG_OPS_PER_RESOURCE_MAX",
    "CONFIG_RESOURCES_PER_REQUEST_MAX",
    "ENDPOINT_TEXT_LENGTH_MAX",
    "FENCE_BATCH_RECORDS_SOFT_MAX",
    "FENCE_CHANGES_PER_BATCH_MAX",
    "TOPICS_PER_REQUEST_MAX",
    "ErrorFields",
    "LogicConfig",
    "check_broker_epoch",
    "error_code",
    "error_response",
    "raise_unless",
    "response_error_code",
    "set_controller_hint",
    "set_error",
]

#: Topics named in one CreateTopics / DeleteTopics / CreatePartitions request. Kafka has no such
#: bound; with PARTITIONS_PER_REQUEST_MAX it bounds a batch (records.RECORDS_PER_BATCH_MAX).
TOPICS_PER_REQUEST_MAX = 1000
#: Resources in one AlterConfigs / DescribeConfigs request, and ops on one resource.
CONFIG_RESOURCES_PER_REQUEST_MAX = 1000
CONFIG_OPS_PER_RESOURCE_MAX = 100
#: Creations in one CreateAcls request, and filters in one DeleteAcls request (Kafka has no such
#: bound; the records of one request are one batch, limits.METADATA_BATCH_BYTES_MAX).
ACL_CREATIONS_PER_REQUEST_MAX = 1000
ACL_FILTERS_PER_REQUEST_MAX = 1000
#: Host names and rack labels longer than this are refused at registration.
ENDPOINT_TEXT_LENGTH_MAX = 255
#: A fencing tick stops adding brokers to its batch past this many records; the rest are fenced
#: on the next tick (Kafka fences one broker per event for the same reason: bounded batches).
FENCE_BATCH_RECORDS_SOFT_MAX = 2_000
#: Partition changes of one broker's fencing (or controlled-shutdown step) in one batch; beyond
#: it the work is split over several batches (ClusterControlManager.fence_records). Not the
#: 1 MiB batch limit decides, but replay time: every controller replays a batch on its Raft
#: thread (~43 µs a change, measured), and a 15,000-change batch (0.65 s) stalled the Raft
#: heartbeats past the election timeout, so each fencing at 30,000 partitions set off
#: elections (measured: kill -9 to leaderships moved 17 s). 2,000 changes replay in ~0.1 s.
FENCE_CHANGES_PER_BATCH_MAX = 2_000

check(
    TOPICS_PER_REQUEST_MAX <= limits.PARTITIONS_PER_REQUEST_MAX,
    "a request's topics must fit its partitions limit",
)
check(CONFIG_OPS_PER_RESOURCE_MAX >= 12, "at least every topic config once")


@dataclass(frozen=True, slots=True)
class LogicConfig:
    """The settings of ControllerLogic and its managers; defaults are Kafka's. (The node
    config's [controller] table is tidelog.config.ControllerConfig; the runtime maps one onto
    the other.)"""

    #: broker.session.timeout.ms: a broker without a heartbeat for longer is fenced.
    broker_session_timeout_ms: int = 9000
    #: num.partitions: partitions of a topic created with num_partitions = -1.
    num_partitions: int = 1
    #: default.replication.factor: replication factor of a topic created with -1.
    default_replication_factor: int = 1
    #: Producer ids per AllocateProducerIds block (Kafka's ProducerIdsBlock size).
    producer_id_block_size: int = 1000
    #: leader.imbalance.check.interval.seconds, in ms: how often the active controller moves
    #: leaderships back to their preferred replica (auto.leader.rebalance.enable); 0 = never.
    leader_imbalance_check_interval_ms: int = 300_000

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
        if self.leader_imbalance_check_interval_ms < 0:
            raise InvariantViolation(
                "leader imbalance check interval "
                f"{self.leader_imbalance_check_interval_ms} ms is negative")
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


#: Responses without an error of their own (CreateAcls and DeleteAcls, as in Kafka): an error
#: for the whole request goes into one ``results`` entry per item of this request field.
_PER_ITEM_ERRORS = {"CreateAclsResponse": "creations", "DeleteAclsResponse": "filters",
                    "AlterUserScramCredentialsResponse": "users"}
M = TypeVar("M")


def error_response(response_type: type[M], request: Any, error: TidelogError) -> M:
    """A response of ``response_type`` refusing all of ``request`` with ``error``."""
    response = response_type()
    items = _PER_ITEM_ERRORS.get(response_type.__name__)
    if items is None:
        set_error(cast(ErrorFields, response), error)
    else:
        untyped: Any = response
        if items == "users":  # one result per user named, as Kafka's
            for user in request_users(request):
                set_error(untyped.results.add(user=user), error)
        else:
            for _ in getattr(request, items):
                set_error(untyped.results.add(), error)
    return response


def response_error_code(response: Any) -> int:
    """A response's error code: its own, or for one that has none (see error_response), the
    first of its results' that is not NONE."""
    if type(response).__name__ not in _PER_ITEM_ERRORS:
        return int(response.error_code)
    return next((int(r.error_code) for r in response.results if r.error_code), 0)


def set_controller_hint(response: Any, hint: common_pb2.ControllerHint) -> None:
    """Put the active controller's hint into a response (its field is ``controller``, or
    ``controller_hint`` in the responses without an error of their own)."""
    field = "controller_hint" if type(response).__name__ in _PER_ITEM_ERRORS else "controller"
    getattr(response, field).CopyFrom(hint)


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
