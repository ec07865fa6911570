from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONE: _ClassVar[ErrorCode]
    UNKNOWN_SERVER_ERROR: _ClassVar[ErrorCode]
    OFFSET_OUT_OF_RANGE: _ClassVar[ErrorCode]
    CORRUPT_MESSAGE: _ClassVar[ErrorCode]
    UNKNOWN_TOPIC_OR_PARTITION: _ClassVar[ErrorCode]
    INVALID_FETCH_SIZE: _ClassVar[ErrorCode]
    LEADER_NOT_AVAILABLE: _ClassVar[ErrorCode]
    NOT_LEADER_OR_FOLLOWER: _ClassVar[ErrorCode]
    REQUEST_TIMED_OUT: _ClassVar[ErrorCode]
    BROKER_NOT_AVAILABLE: _ClassVar[ErrorCode]
    REPLICA_NOT_AVAILABLE: _ClassVar[ErrorCode]
    MESSAGE_TOO_LARGE: _ClassVar[ErrorCode]
    STALE_CONTROLLER_EPOCH: _ClassVar[ErrorCode]
    OFFSET_METADATA_TOO_LARGE: _ClassVar[ErrorCode]
    NETWORK_EXCEPTION: _ClassVar[ErrorCode]
    COORDINATOR_LOAD_IN_PROGRESS: _ClassVar[ErrorCode]
    COORDINATOR_NOT_AVAILABLE: _ClassVar[ErrorCode]
    NOT_COORDINATOR: _ClassVar[ErrorCode]
    INVALID_TOPIC_EXCEPTION: _ClassVar[ErrorCode]
    RECORD_LIST_TOO_LARGE: _ClassVar[ErrorCode]
    NOT_ENOUGH_REPLICAS: _ClassVar[ErrorCode]
    NOT_ENOUGH_REPLICAS_AFTER_APPEND: _ClassVar[ErrorCode]
    INVALID_REQUIRED_ACKS: _ClassVar[ErrorCode]
    ILLEGAL_GENERATION: _ClassVar[ErrorCode]
    INVALID_GROUP_ID: _ClassVar[ErrorCode]
    UNKNOWN_MEMBER_ID: _ClassVar[ErrorCode]
    INVALID_SESSION_TIMEOUT: _ClassVar[ErrorCode]
    REBALANCE_IN_PROGRESS: _ClassVar[ErrorCode]
    INVALID_COMMIT_OFFSET_SIZE: _ClassVar[ErrorCode]
    TOPIC_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    GROUP_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    CLUSTER_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    INVALID_TIMESTAMP: _ClassVar[ErrorCode]
    UNSUPPORTED_SASL_MECHANISM: _ClassVar[ErrorCode]
    UNSUPPORTED_VERSION: _ClassVar[ErrorCode]
    TOPIC_ALREADY_EXISTS: _ClassVar[ErrorCode]
    INVALID_PARTITIONS: _ClassVar[ErrorCode]
    INVALID_REPLICATION_FACTOR: _ClassVar[ErrorCode]
    INVALID_REPLICA_ASSIGNMENT: _ClassVar[ErrorCode]
    INVALID_CONFIG: _ClassVar[ErrorCode]
    NOT_CONTROLLER: _ClassVar[ErrorCode]
    INVALID_REQUEST: _ClassVar[ErrorCode]
    POLICY_VIOLATION: _ClassVar[ErrorCode]
    OUT_OF_ORDER_SEQUENCE_NUMBER: _ClassVar[ErrorCode]
    DUPLICATE_SEQUENCE_NUMBER: _ClassVar[ErrorCode]
    INVALID_PRODUCER_EPOCH: _ClassVar[ErrorCode]
    KAFKA_STORAGE_ERROR: _ClassVar[ErrorCode]
    SASL_AUTHENTICATION_FAILED: _ClassVar[ErrorCode]
    UNKNOWN_PRODUCER_ID: _ClassVar[ErrorCode]
    NON_EMPTY_GROUP: _ClassVar[ErrorCode]
    GROUP_ID_NOT_FOUND: _ClassVar[ErrorCode]
    INVALID_FETCH_SESSION_EPOCH: _ClassVar[ErrorCode]
    FENCED_LEADER_EPOCH: _ClassVar[ErrorCode]
    UNKNOWN_LEADER_EPOCH: _ClassVar[ErrorCode]
    UNSUPPORTED_COMPRESSION_TYPE: _ClassVar[ErrorCode]
    STALE_BROKER_EPOCH: _ClassVar[ErrorCode]
    OFFSET_NOT_AVAILABLE: _ClassVar[ErrorCode]
    GROUP_MAX_SIZE_REACHED: _ClassVar[ErrorCode]
    FENCED_INSTANCE_ID: _ClassVar[ErrorCode]
    ELIGIBLE_LEADERS_NOT_AVAILABLE: _ClassVar[ErrorCode]
    ELECTION_NOT_NEEDED: _ClassVar[ErrorCode]
    GROUP_SUBSCRIBED_TO_TOPIC: _ClassVar[ErrorCode]
    INVALID_RECORD: _ClassVar[ErrorCode]
    PRODUCER_FENCED: _ClassVar[ErrorCode]
    RESOURCE_NOT_FOUND: _ClassVar[ErrorCode]
    DUPLICATE_RESOURCE: _ClassVar[ErrorCode]
    UNACCEPTABLE_CREDENTIAL: _ClassVar[ErrorCode]
    INVALID_UPDATE_VERSION: _ClassVar[ErrorCode]
    UNKNOWN_TOPIC_ID: _ClassVar[ErrorCode]
    DUPLICATE_BROKER_REGISTRATION: _ClassVar[ErrorCode]
    BROKER_ID_NOT_REGISTERED: _ClassVar[ErrorCode]
    INCONSISTENT_TOPIC_ID: _ClassVar[ErrorCode]
    INCONSISTENT_CLUSTER_ID: _ClassVar[ErrorCode]
    INELIGIBLE_REPLICA: _ClassVar[ErrorCode]
    NEW_LEADER_ELECTED: _ClassVar[ErrorCode]
    FENCED_MEMBER_EPOCH: _ClassVar[ErrorCode]
    UNRELEASED_INSTANCE_ID: _ClassVar[ErrorCode]
    UNSUPPORTED_ASSIGNOR: _ClassVar[ErrorCode]
    STALE_MEMBER_EPOCH: _ClassVar[ErrorCode]
    INVALID_REGULAR_EXPRESSION: _ClassVar[ErrorCode]

class CompressionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPRESSION_NONE: _ClassVar[CompressionType]
    COMPRESSION_GZIP: _ClassVar[CompressionType]
    COMPRESSION_SNAPPY: _ClassVar[CompressionType]
    COMPRESSION_LZ4: _ClassVar[CompressionType]
    COMPRESSION_ZSTD: _ClassVar[CompressionType]

class TimestampType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CREATE_TIME: _ClassVar[TimestampType]
    LOG_APPEND_TIME: _ClassVar[TimestampType]

class IsolationLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    READ_UNCOMMITTED: _ClassVar[IsolationLevel]

class ScramMechanism(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCRAM_MECHANISM_UNKNOWN: _ClassVar[ScramMechanism]
    SCRAM_SHA_256: _ClassVar[ScramMechanism]
    SCRAM_SHA_512: _ClassVar[ScramMechanism]
NONE: ErrorCode
UNKNOWN_SERVER_ERROR: ErrorCode
OFFSET_OUT_OF_RANGE: ErrorCode
CORRUPT_MESSAGE: ErrorCode
UNKNOWN_TOPIC_OR_PARTITION: ErrorCode
INVALID_FETCH_SIZE: ErrorCode
LEADER_NOT_AVAILABLE: ErrorCode
NOT_LEADER_OR_FOLLOWER: ErrorCode
REQUEST_TIMED_OUT: ErrorCode
BROKER_NOT_AVAILABLE: ErrorCode
REPLICA_NOT_AVAILABLE: ErrorCode
MESSAGE_TOO_LARGE: ErrorCode
STALE_CONTROLLER_EPOCH: ErrorCode
OFFSET_METADATA_TOO_LARGE: ErrorCode
NETWORK_EXCEPTION: ErrorCode
COORDINATOR_LOAD_IN_PROGRESS: ErrorCode
COORDINATOR_NOT_AVAILABLE: ErrorCode
NOT_COORDINATOR: ErrorCode
INVALID_TOPIC_EXCEPTION: ErrorCode
RECORD_LIST_TOO_LARGE: ErrorCode
NOT_ENOUGH_REPLICAS: ErrorCode
NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode
INVALID_REQUIRED_ACKS: ErrorCode
ILLEGAL_GENERATION: ErrorCode
INVALID_GROUP_ID: ErrorCode
UNKNOWN_MEMBER_ID: ErrorCode
INVALID_SESSION_TIMEOUT: ErrorCode
REBALANCE_IN_PROGRESS: ErrorCode
INVALID_COMMIT_OFFSET_SIZE: ErrorCode
TOPIC_AUTHORIZATION_FAILED: ErrorCode
GROUP_AUTHORIZATION_FAILED: ErrorCode
CLUSTER_AUTHORIZATION_FAILED: ErrorCode
INVALID_TIMESTAMP: ErrorCode
UNSUPPORTED_SASL_MECHANISM: ErrorCode
UNSUPPORTED_VERSION: ErrorCode
TOPIC_ALREADY_EXISTS: ErrorCode
INVALID_PARTITIONS: ErrorCode
INVALID_REPLICATION_FACTOR: ErrorCode
INVALID_REPLICA_ASSIGNMENT: ErrorCode
INVALID_CONFIG: ErrorCode
NOT_CONTROLLER: ErrorCode
INVALID_REQUEST: ErrorCode
POLICY_VIOLATION: ErrorCode
OUT_OF_ORDER_SEQUENCE_NUMBER: ErrorCode
DUPLICATE_SEQUENCE_NUMBER: ErrorCode
INVALID_PRODUCER_EPOCH: ErrorCode
KAFKA_STORAGE_ERROR: ErrorCode
SASL_AUTHENTICATION_FAILED: ErrorCode
UNKNOWN_PRODUCER_ID: ErrorCode
NON_EMPTY_GROUP: ErrorCode
GROUP_ID_NOT_FOUND: ErrorCode
INVALID_FETCH_SESSION_EPOCH: ErrorCode
FENCED_LEADER_EPOCH: ErrorCode
UNKNOWN_LEADER_EPOCH: ErrorCode
UNSUPPORTED_COMPRESSION_TYPE: ErrorCode
STALE_BROKER_EPOCH: ErrorCode
OFFSET_NOT_AVAILABLE: ErrorCode
GROUP_MAX_SIZE_REACHED: ErrorCode
FENCED_INSTANCE_ID: ErrorCode
ELIGIBLE_LEADERS_NOT_AVAILABLE: ErrorCode
ELECTION_NOT_NEEDED: ErrorCode
GROUP_SUBSCRIBED_TO_TOPIC: ErrorCode
INVALID_RECORD: ErrorCode
PRODUCER_FENCED: ErrorCode
RESOURCE_NOT_FOUND: ErrorCode
DUPLICATE_RESOURCE: ErrorCode
UNACCEPTABLE_CREDENTIAL: ErrorCode
INVALID_UPDATE_VERSION: ErrorCode
UNKNOWN_TOPIC_ID: ErrorCode
DUPLICATE_BROKER_REGISTRATION: ErrorCode
BROKER_ID_NOT_REGISTERED: ErrorCode
INCONSISTENT_TOPIC_ID: ErrorCode
INCONSISTENT_CLUSTER_ID: ErrorCode
INELIGIBLE_REPLICA: ErrorCode
NEW_LEADER_ELECTED: ErrorCode
FENCED_MEMBER_EPOCH: ErrorCode
UNRELEASED_INSTANCE_ID: ErrorCode
UNSUPPORTED_ASSIGNOR: ErrorCode
STALE_MEMBER_EPOCH: ErrorCode
INVALID_REGULAR_EXPRESSION: ErrorCode
COMPRESSION_NONE: CompressionType
COMPRESSION_GZIP: CompressionType
COMPRESSION_SNAPPY: CompressionType
COMPRESSION_LZ4: CompressionType
COMPRESSION_ZSTD: CompressionType
CREATE_TIME: TimestampType
LOG_APPEND_TIME: TimestampType
READ_UNCOMMITTED: IsolationLevel
SCRAM_MECHANISM_UNKNOWN: ScramMechanism
SCRAM_SHA_256: ScramMechanism
SCRAM_SHA_512: ScramMechanism

class Header(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("offset_delta", "timestamp_delta", "key", "value", "headers")
    OFFSET_DELTA_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_DELTA_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    offset_delta: int
    timestamp_delta: int
    key: bytes
    value: bytes
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    def __init__(self, offset_delta: _Optional[int] = ..., timestamp_delta: _Optional[int] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ...) -> None: ...

class Records(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Record]
    def __init__(self, records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ...) -> None: ...

class RecordBatch(_message.Message):
    __slots__ = ("base_offset", "partition_leader_epoch", "producer_id", "producer_epoch", "base_sequence", "record_count", "first_timestamp", "max_timestamp", "compression", "timestamp_type", "crc", "uncompressed_size", "records", "log_append_time_ms")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PARTITION_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BASE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_TYPE_FIELD_NUMBER: _ClassVar[int]
    CRC_FIELD_NUMBER: _ClassVar[int]
    UNCOMPRESSED_SIZE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    LOG_APPEND_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    partition_leader_epoch: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    first_timestamp: int
    max_timestamp: int
    compression: CompressionType
    timestamp_type: TimestampType
    crc: int
    uncompressed_size: int
    records: bytes
    log_append_time_ms: int
    def __init__(self, base_offset: _Optional[int] = ..., partition_leader_epoch: _Optional[int] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., base_sequence: _Optional[int] = ..., record_count: _Optional[int] = ..., first_timestamp: _Optional[int] = ..., max_timestamp: _Optional[int] = ..., compression: _Optional[_Union[CompressionType, str]] = ..., timestamp_type: _Optional[_Union[TimestampType, str]] = ..., crc: _Optional[int] = ..., uncompressed_size: _Optional[int] = ..., records: _Optional[bytes] = ..., log_append_time_ms: _Optional[int] = ...) -> None: ...

class Endpoint(_message.Message):
    __slots__ = ("host", "port")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    host: str
    port: int
    def __init__(self, host: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class BrokerInfo(_message.Message):
    __slots__ = ("broker_id", "endpoint", "rack", "fenced")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    endpoint: Endpoint
    rack: str
    fenced: bool
    def __init__(self, broker_id: _Optional[int] = ..., endpoint: _Optional[_Union[Endpoint, _Mapping]] = ..., rack: _Optional[str] = ..., fenced: _Optional[bool] = ...) -> None: ...

class LeaderHint(_message.Message):
    __slots__ = ("leader_id", "leader_epoch", "endpoint")
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    leader_id: int
    leader_epoch: int
    endpoint: Endpoint
    def __init__(self, leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., endpoint: _Optional[_Union[Endpoint, _Mapping]] = ...) -> None: ...

class ControllerHint(_message.Message):
    __slots__ = ("controller_id", "endpoint")
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    controller_id: int
    endpoint: Endpoint
    def __init__(self, controller_id: _Optional[int] = ..., endpoint: _Optional[_Union[Endpoint, _Mapping]] = ...) -> None: ...

class ReplicaList(_message.Message):
    __slots__ = ("broker_ids",)
    BROKER_IDS_FIELD_NUMBER: _ClassVar[int]
    broker_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, broker_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class AclBinding(_message.Message):
    __slots__ = ("principal", "host", "resource_type", "resource_name", "pattern_type", "operation", "permission")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    principal: str
    host: str
    resource_type: str
    resource_name: str
    pattern_type: str
    operation: str
    permission: str
    def __init__(self, principal: _Optional[str] = ..., host: _Optional[str] = ..., resource_type: _Optional[str] = ..., resource_name: _Optional[str] = ..., pattern_type: _Optional[str] = ..., operation: _Optional[str] = ..., permission: _Optional[str] = ...) -> None: ...

class AclFilter(_message.Message):
    __slots__ = ("principal", "host", "resource_type", "resource_name", "pattern_type", "operation", "permission")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    principal: str
    host: str
    resource_type: str
    resource_name: str
    pattern_type: str
    operation: str
    permission: str
    def __init__(self, principal: _Optional[str] = ..., host: _Optional[str] = ..., resource_type: _Optional[str] = ..., resource_name: _Optional[str] = ..., pattern_type: _Optional[str] = ..., operation: _Optional[str] = ..., permission: _Optional[str] = ...) -> None: ...
