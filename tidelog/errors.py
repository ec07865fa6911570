"""Errors with Kafka's names and codes.

Every error the system reports is a ``TidelogError`` subclass carrying an ``ErrorCode`` (the
protobuf enum, Kafka's numbers) and a message that names the problem. ``retriable`` tells a client
whether the same request may succeed if sent again (perhaps elsewhere, after a metadata refresh).

Servers raise these in validation code and turn them into per-partition ``error_code`` /
``error_message`` pairs in responses; clients turn response codes back into exceptions with
:func:`error_for_code`. The classes below are one per code, generated once from
``proto/tidelog/v1/common.proto`` (``(retriable)`` in a code's comment sets the flag); a unit test
checks that the two agree.
"""

from __future__ import annotations

from typing import ClassVar

from tidelog.v1.common_pb2 import ErrorCode

__all__ = ["ERROR_CLASSES", "ErrorCode", "TidelogError", "error_for_code", "raise_for_code"]


class TidelogError(Exception):
    """Base of all Tidelog errors: an error code plus a human-readable message."""

    code: ClassVar[int] = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: ClassVar[bool] = False

    def __init__(self, message: str = "") -> None:
        self.message = message or ErrorCode.Name(self.code)
        super().__init__(self.message)

    @property
    def code_name(self) -> str:
        return str(ErrorCode.Name(self.code))

    def __str__(self) -> str:
        return f"{self.code_name}: {self.message}"


class UnknownServerError(TidelogError):
    code = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable = False


class OffsetOutOfRangeError(TidelogError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE
    retriable = False


class CorruptMessageError(TidelogError):
    code = ErrorCode.CORRUPT_MESSAGE
    retriable = True


class UnknownTopicOrPartitionError(TidelogError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    retriable = True


class InvalidFetchSizeError(TidelogError):
    code = ErrorCode.INVALID_FETCH_SIZE
    retriable = False


class LeaderNotAvailableError(TidelogError):
    code = ErrorCode.LEADER_NOT_AVAILABLE
    retriable = True


class NotLeaderOrFollowerError(TidelogError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    retriable = True


class RequestTimedOutError(TidelogError):
    code = ErrorCode.REQUEST_TIMED_OUT
    retriable = True


class BrokerNotAvailableError(TidelogError):
    code = ErrorCode.BROKER_NOT_AVAILABLE
    retriable = True


class ReplicaNotAvailableError(TidelogError):
    code = ErrorCode.REPLICA_NOT_AVAILABLE
    retriable = True


class MessageTooLargeError(TidelogError):
    code = ErrorCode.MESSAGE_TOO_LARGE
    retriable = False


class StaleControllerEpochError(TidelogError):
    code = ErrorCode.STALE_CONTROLLER_EPOCH
    retriable = False


class OffsetMetadataTooLargeError(TidelogError):
    code = ErrorCode.OFFSET_METADATA_TOO_LARGE
    retriable = False


class NetworkError(TidelogError):
    code = ErrorCode.NETWORK_EXCEPTION
    retriable = True


class CoordinatorLoadInProgressError(TidelogError):
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    retriable = True


class CoordinatorNotAvailableError(TidelogError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    retriable = True


class NotCoordinatorError(TidelogError):
    code = ErrorCode.NOT_COORDINATOR
    retriable = True


class InvalidTopicError(TidelogError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION
    retriable = False


class RecordListTooLargeError(TidelogError):
    code = ErrorCode.RECORD_LIST_TOO_LARGE
    retriable = False


class NotEnoughReplicasError(TidelogError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS
    retriable = True


class NotEnoughReplicasAfterAppendError(TidelogError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    retriable = True


class InvalidRequiredAcksError(TidelogError):
    code = ErrorCode.INVALID_REQUIRED_ACKS
    retriable = False


class IllegalGenerationError(TidelogError):
    code = ErrorCode.ILLEGAL_GENERATION
    retriable = False


class InvalidGroupIdError(TidelogError):
    code = ErrorCode.INVALID_GROUP_ID
    retriable = False


class UnknownMemberIdError(TidelogError):
    code = ErrorCode.UNKNOWN_MEMBER_ID
    retriable = False


class InvalidSessionTimeoutError(TidelogError):
    code = ErrorCode.INVALID_SESSION_TIMEOUT
    retriable = False


class RebalanceInProgressError(TidelogError):
    code = ErrorCode.REBALANCE_IN_PROGRESS
    retriable = False


class InvalidCommitOffsetSizeError(TidelogError):
    code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    retriable = False


class TopicAuthorizationFailedError(TidelogError):
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    retriable = False


class GroupAuthorizationFailedError(TidelogError):
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    retriable = False


class ClusterAuthorizationFailedError(TidelogError):
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    retriable = False


class InvalidTimestampError(TidelogError):
    code = ErrorCode.INVALID_TIMESTAMP
    retriable = False


class UnsupportedSaslMechanismError(TidelogError):
    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM
    retriable = False


class UnsupportedVersionError(TidelogError):
    code = ErrorCode.UNSUPPORTED_VERSION
    retriable = False


class TopicAlreadyExistsError(TidelogError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS
    retriable = False


class InvalidPartitionsError(TidelogError):
    code = ErrorCode.INVALID_PARTITIONS
    retriable = False


class InvalidReplicationFactorError(TidelogError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR
    retriable = False


class InvalidReplicaAssignmentError(TidelogError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    retriable = False


class InvalidConfigError(TidelogError):
    code = ErrorCode.INVALID_CONFIG
    retriable = False


class NotControllerError(TidelogError):
    code = ErrorCode.NOT_CONTROLLER
    retriable = True


class InvalidRequestError(TidelogError):
    code = ErrorCode.INVALID_REQUEST
    retriable = False


class PolicyViolationError(TidelogError):
    code = ErrorCode.POLICY_VIOLATION
    retriable = False


class OutOfOrderSequenceNumberError(TidelogError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    retriable = False


class DuplicateSequenceNumberError(TidelogError):
    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    retriable = False


class InvalidProducerEpochError(TidelogError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH
    retriable = False


class KafkaStorageErrorError(TidelogError):
    code = ErrorCode.KAFKA_STORAGE_ERROR
    retriable = True


class SaslAuthenticationFailedError(TidelogError):
    code = ErrorCode.SASL_AUTHENTICATION_FAILED
    retriable = False


class UnknownProducerIdError(TidelogError):
    code = ErrorCode.UNKNOWN_PRODUCER_ID
    retriable = False


class NonEmptyGroupError(TidelogError):
    code = ErrorCode.NON_EMPTY_GROUP
    retriable = False


class GroupIdNotFoundError(TidelogError):
    code = ErrorCode.GROUP_ID_NOT_FOUND
    retriable = False


class InvalidFetchSessionEpochError(TidelogError):
    code = ErrorCode.INVALID_FETCH_SESSION_EPOCH
    retriable = True


class FencedLeaderEpochError(TidelogError):
    code = ErrorCode.FENCED_LEADER_EPOCH
    retriable = True


class UnknownLeaderEpochError(TidelogError):
    code = ErrorCode.UNKNOWN_LEADER_EPOCH
    retriable = True


class UnsupportedCompressionTypeError(TidelogError):
    code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    retriable = False


class StaleBrokerEpochError(TidelogError):
    code = ErrorCode.STALE_BROKER_EPOCH
    retriable = False


class OffsetNotAvailableError(TidelogError):
    code = ErrorCode.OFFSET_NOT_AVAILABLE
    retriable = True


class GroupMaxSizeReachedError(TidelogError):
    code = ErrorCode.GROUP_MAX_SIZE_REACHED
    retriable = False


class GroupSubscribedToTopicError(TidelogError):
    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    retriable = False


class FencedInstanceIdError(TidelogError):
    code = ErrorCode.FENCED_INSTANCE_ID
    retriable = False


class EligibleLeadersNotAvailableError(TidelogError):
    code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    retriable = True


class ElectionNotNeededError(TidelogError):
    code = ErrorCode.ELECTION_NOT_NEEDED
    retriable = False


class InvalidRecordError(TidelogError):
    code = ErrorCode.INVALID_RECORD
    retriable = False


class ProducerFencedError(TidelogError):
    code = ErrorCode.PRODUCER_FENCED
    retriable = False


class ResourceNotFoundError(TidelogError):
    code = ErrorCode.RESOURCE_NOT_FOUND
    retriable = False


class DuplicateResourceError(TidelogError):
    code = ErrorCode.DUPLICATE_RESOURCE
    retriable = False


class UnacceptableCredentialError(TidelogError):
    code = ErrorCode.UNACCEPTABLE_CREDENTIAL
    retriable = False


class InvalidUpdateVersionError(TidelogError):
    code = ErrorCode.INVALID_UPDATE_VERSION
    retriable = False


class UnknownTopicIdError(TidelogError):
    code = ErrorCode.UNKNOWN_TOPIC_ID
    retriable = True


class DuplicateBrokerRegistrationError(TidelogError):
    code = ErrorCode.DUPLICATE_BROKER_REGISTRATION
    retriable = True


class BrokerIdNotRegisteredError(TidelogError):
    code = ErrorCode.BROKER_ID_NOT_REGISTERED
    retriable = False


class InconsistentTopicIdError(TidelogError):
    code = ErrorCode.INCONSISTENT_TOPIC_ID
    retriable = False


class InconsistentClusterIdError(TidelogError):
    code = ErrorCode.INCONSISTENT_CLUSTER_ID
    retriable = False


class IneligibleReplicaError(TidelogError):
    code = ErrorCode.INELIGIBLE_REPLICA
    retriable = False


class NewLeaderElectedError(TidelogError):
    code = ErrorCode.NEW_LEADER_ELECTED
    retriable = False


class FencedMemberEpochError(TidelogError):
    code = ErrorCode.FENCED_MEMBER_EPOCH
    retriable = False


class UnreleasedInstanceIdError(TidelogError):
    code = ErrorCode.UNRELEASED_INSTANCE_ID
    retriable = False


class UnsupportedAssignorError(TidelogError):
    code = ErrorCode.UNSUPPORTED_ASSIGNOR
    retriable = False


class StaleMemberEpochError(TidelogError):
    code = ErrorCode.STALE_MEMBER_EPOCH
    retriable = False


class InvalidRegularExpressionError(TidelogError):
    code = ErrorCode.INVALID_REGULAR_EXPRESSION
    retriable = False


ERROR_CLASSES: dict[int, type[TidelogError]] = {
    cls.code: cls for cls in TidelogError.__subclasses__()
}


def error_for_code(code: int, message: str = "") -> TidelogError:
    """The exception for a response's error code (UnknownServerError for codes we do not know)."""
    cls = ERROR_CLASSES.get(code)
    if cls is None:
        return UnknownServerError(f"unknown error code {code}: {message}")
    return cls(message)


def raise_for_code(code: int, message: str = "") -> None:
    """Raise the exception for ``code`` unless it is NONE."""
    if code != ErrorCode.NONE:
        raise error_for_code(code, message)
