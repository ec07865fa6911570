from tidelog.v1 import common_pb2 as _common_pb2
from tidelog.v1 import metadata_pb2 as _metadata_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AlterConfigOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ALTER_CONFIG_SET: _ClassVar[AlterConfigOp]
    ALTER_CONFIG_DELETE: _ClassVar[AlterConfigOp]
    ALTER_CONFIG_APPEND: _ClassVar[AlterConfigOp]
    ALTER_CONFIG_SUBTRACT: _ClassVar[AlterConfigOp]

class ConfigSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONFIG_SOURCE_DEFAULT: _ClassVar[ConfigSource]
    CONFIG_SOURCE_TOPIC: _ClassVar[ConfigSource]
    CONFIG_SOURCE_CLUSTER: _ClassVar[ConfigSource]
    CONFIG_SOURCE_BROKER: _ClassVar[ConfigSource]
ALTER_CONFIG_SET: AlterConfigOp
ALTER_CONFIG_DELETE: AlterConfigOp
ALTER_CONFIG_APPEND: AlterConfigOp
ALTER_CONFIG_SUBTRACT: AlterConfigOp
CONFIG_SOURCE_DEFAULT: ConfigSource
CONFIG_SOURCE_TOPIC: ConfigSource
CONFIG_SOURCE_CLUSTER: ConfigSource
CONFIG_SOURCE_BROKER: ConfigSource

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_id", "broker_id", "incarnation_id", "endpoint", "rack", "inter_broker_endpoint")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    INTER_BROKER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    broker_id: int
    incarnation_id: bytes
    endpoint: _common_pb2.Endpoint
    rack: str
    inter_broker_endpoint: _common_pb2.Endpoint
    def __init__(self, cluster_id: _Optional[str] = ..., broker_id: _Optional[int] = ..., incarnation_id: _Optional[bytes] = ..., endpoint: _Optional[_Union[_common_pb2.Endpoint, _Mapping]] = ..., rack: _Optional[str] = ..., inter_broker_endpoint: _Optional[_Union[_common_pb2.Endpoint, _Mapping]] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "broker_epoch", "controller")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    broker_epoch: int
    controller: _common_pb2.ControllerHint
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., broker_epoch: _Optional[int] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ...) -> None: ...

class BrokerHeartbeatRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "current_metadata_offset", "want_fence", "want_shutdown", "unreachable_brokers")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURRENT_METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WANT_FENCE_FIELD_NUMBER: _ClassVar[int]
    WANT_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    UNREACHABLE_BROKERS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool
    want_shutdown: bool
    unreachable_brokers: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., current_metadata_offset: _Optional[int] = ..., want_fence: _Optional[bool] = ..., want_shutdown: _Optional[bool] = ..., unreachable_brokers: _Optional[_Iterable[int]] = ...) -> None: ...

class BrokerHeartbeatResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "is_caught_up", "is_fenced", "should_shut_down", "controller")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    IS_CAUGHT_UP_FIELD_NUMBER: _ClassVar[int]
    IS_FENCED_FIELD_NUMBER: _ClassVar[int]
    SHOULD_SHUT_DOWN_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool
    controller: _common_pb2.ControllerHint
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., is_caught_up: _Optional[bool] = ..., is_fenced: _Optional[bool] = ..., should_shut_down: _Optional[bool] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ...) -> None: ...

class AlterPartitionRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "topics")
    class PartitionData(_message.Message):
        __slots__ = ("partition_id", "leader_epoch", "new_isr", "partition_epoch", "new_isr_with_epochs")
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        NEW_ISR_FIELD_NUMBER: _ClassVar[int]
        PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
        NEW_ISR_WITH_EPOCHS_FIELD_NUMBER: _ClassVar[int]
        partition_id: int
        leader_epoch: int
        new_isr: _containers.RepeatedScalarFieldContainer[int]
        partition_epoch: int
        new_isr_with_epochs: _containers.RepeatedCompositeFieldContainer[AlterPartitionRequest.BrokerState]
        def __init__(self, partition_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., new_isr: _Optional[_Iterable[int]] = ..., partition_epoch: _Optional[int] = ..., new_isr_with_epochs: _Optional[_Iterable[_Union[AlterPartitionRequest.BrokerState, _Mapping]]] = ...) -> None: ...
    class BrokerState(_message.Message):
        __slots__ = ("broker_id", "broker_epoch")
        BROKER_ID_FIELD_NUMBER: _ClassVar[int]
        BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        broker_id: int
        broker_epoch: int
        def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...
    class TopicData(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[AlterPartitionRequest.PartitionData]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[AlterPartitionRequest.PartitionData, _Mapping]]] = ...) -> None: ...
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    topics: _containers.RepeatedCompositeFieldContainer[AlterPartitionRequest.TopicData]
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[AlterPartitionRequest.TopicData, _Mapping]]] = ...) -> None: ...

class AlterPartitionResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "topics", "controller")
    class PartitionResult(_message.Message):
        __slots__ = ("partition_id", "error_code", "error_message", "leader", "leader_epoch", "isr", "partition_epoch")
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        LEADER_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        ISR_FIELD_NUMBER: _ClassVar[int]
        PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
        partition_id: int
        error_code: _common_pb2.ErrorCode
        error_message: str
        leader: int
        leader_epoch: int
        isr: _containers.RepeatedScalarFieldContainer[int]
        partition_epoch: int
        def __init__(self, partition_id: _Optional[int] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., isr: _Optional[_Iterable[int]] = ..., partition_epoch: _Optional[int] = ...) -> None: ...
    class TopicResult(_message.Message):
        __slots__ = ("topic_id", "partitions")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[AlterPartitionResponse.PartitionResult]
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[AlterPartitionResponse.PartitionResult, _Mapping]]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    topics: _containers.RepeatedCompositeFieldContainer[AlterPartitionResponse.TopicResult]
    controller: _common_pb2.ControllerHint
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[AlterPartitionResponse.TopicResult, _Mapping]]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ...) -> None: ...

class ConfigEntry(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class CreateTopicsRequest(_message.Message):
    __slots__ = ("topics", "validate_only", "timeout_ms")
    class Assignment(_message.Message):
        __slots__ = ("partition_id", "broker_ids")
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        BROKER_IDS_FIELD_NUMBER: _ClassVar[int]
        partition_id: int
        broker_ids: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, partition_id: _Optional[int] = ..., broker_ids: _Optional[_Iterable[int]] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("name", "num_partitions", "replication_factor", "assignments", "configs")
        NAME_FIELD_NUMBER: _ClassVar[int]
        NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
        ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
        CONFIGS_FIELD_NUMBER: _ClassVar[int]
        name: str
        num_partitions: int
        replication_factor: int
        assignments: _containers.RepeatedCompositeFieldContainer[CreateTopicsRequest.Assignment]
        configs: _containers.RepeatedCompositeFieldContainer[ConfigEntry]
        def __init__(self, name: _Optional[str] = ..., num_partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., assignments: _Optional[_Iterable[_Union[CreateTopicsRequest.Assignment, _Mapping]]] = ..., configs: _Optional[_Iterable[_Union[ConfigEntry, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[CreateTopicsRequest.Topic]
    validate_only: bool
    timeout_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[CreateTopicsRequest.Topic, _Mapping]]] = ..., validate_only: _Optional[bool] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class CreateTopicsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "topics", "controller")
    class TopicResult(_message.Message):
        __slots__ = ("name", "topic_id", "error_code", "error_message", "num_partitions", "replication_factor", "configs")
        NAME_FIELD_NUMBER: _ClassVar[int]
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
        CONFIGS_FIELD_NUMBER: _ClassVar[int]
        name: str
        topic_id: bytes
        error_code: _common_pb2.ErrorCode
        error_message: str
        num_partitions: int
        replication_factor: int
        configs: _containers.RepeatedCompositeFieldContainer[ConfigEntry]
        def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., num_partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., configs: _Optional[_Iterable[_Union[ConfigEntry, _Mapping]]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    topics: _containers.RepeatedCompositeFieldContainer[CreateTopicsResponse.TopicResult]
    controller: _common_pb2.ControllerHint
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[CreateTopicsResponse.TopicResult, _Mapping]]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ...) -> None: ...

class DeleteTopicsRequest(_message.Message):
    __slots__ = ("names", "topic_ids", "timeout_ms")
    NAMES_FIELD_NUMBER: _ClassVar[int]
    TOPIC_IDS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    topic_ids: _containers.RepeatedScalarFieldContainer[bytes]
    timeout_ms: int
    def __init__(self, names: _Optional[_Iterable[str]] = ..., topic_ids: _Optional[_Iterable[bytes]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class DeleteTopicsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "topics", "controller")
    class TopicResult(_message.Message):
        __slots__ = ("name", "topic_id", "error_code", "error_message")
        NAME_FIELD_NUMBER: _ClassVar[int]
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        name: str
        topic_id: bytes
        error_code: _common_pb2.ErrorCode
        error_message: str
        def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    topics: _containers.RepeatedCompositeFieldContainer[DeleteTopicsResponse.TopicResult]
    controller: _common_pb2.ControllerHint
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[DeleteTopicsResponse.TopicResult, _Mapping]]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ...) -> None: ...

class CreatePartitionsRequest(_message.Message):
    __slots__ = ("topics", "validate_only", "timeout_ms")
    class Topic(_message.Message):
        __slots__ = ("name", "count", "assignments")
        NAME_FIELD_NUMBER: _ClassVar[int]
        COUNT_FIELD_NUMBER: _ClassVar[int]
        ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
        name: str
        count: int
        assignments: _containers.RepeatedCompositeFieldContainer[CreateTopicsRequest.Assignment]
        def __init__(self, name: _Optional[str] = ..., count: _Optional[int] = ..., assignments: _Optional[_Iterable[_Union[CreateTopicsRequest.Assignment, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[CreatePartitionsRequest.Topic]
    validate_only: bool
    timeout_ms: int
    def __init__(self, topics: _Optional[_Iterable[_Union[CreatePartitionsRequest.Topic, _Mapping]]] = ..., validate_only: _Optional[bool] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class CreatePartitionsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "topics", "controller")
    class TopicResult(_message.Message):
        __slots__ = ("name", "error_code", "error_message")
        NAME_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        name: str
        error_code: _common_pb2.ErrorCode
        error_message: str
        def __init__(self, name: _Optional[str] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    topics: _containers.RepeatedCompositeFieldContainer[CreatePartitionsResponse.TopicResult]
    controller: _common_pb2.ControllerHint
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[CreatePartitionsResponse.TopicResult, _Mapping]]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ...) -> None: ...

class AlterConfigsRequest(_message.Message):
    __slots__ = ("resources", "validate_only")
    class Op(_message.Message):
        __slots__ = ("name", "value", "op")
        NAME_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        OP_FIELD_NUMBER: _ClassVar[int]
        name: str
        value: str
        op: AlterConfigOp
        def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., op: _Optional[_Union[AlterConfigOp, str]] = ...) -> None: ...
    class Resource(_message.Message):
        __slots__ = ("resource_type", "resource_name", "ops")
        RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
        RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
        OPS_FIELD_NUMBER: _ClassVar[int]
        resource_type: _metadata_pb2.ConfigResourceType
        resource_name: str
        ops: _containers.RepeatedCompositeFieldContainer[AlterConfigsRequest.Op]
        def __init__(self, resource_type: _Optional[_Union[_metadata_pb2.ConfigResourceType, str]] = ..., resource_name: _Optional[str] = ..., ops: _Optional[_Iterable[_Union[AlterConfigsRequest.Op, _Mapping]]] = ...) -> None: ...
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[AlterConfigsRequest.Resource]
    validate_only: bool
    def __init__(self, resources: _Optional[_Iterable[_Union[AlterConfigsRequest.Resource, _Mapping]]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class AlterConfigsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "resources", "controller")
    class ResourceResult(_message.Message):
        __slots__ = ("resource_type", "resource_name", "error_code", "error_message")
        RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
        RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        resource_type: _metadata_pb2.ConfigResourceType
        resource_name: str
        error_code: _common_pb2.ErrorCode
        error_message: str
        def __init__(self, resource_type: _Optional[_Union[_metadata_pb2.ConfigResourceType, str]] = ..., resource_name: _Optional[str] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    resources: _containers.RepeatedCompositeFieldContainer[AlterConfigsResponse.ResourceResult]
    controller: _common_pb2.ControllerHint
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., resources: _Optional[_Iterable[_Union[AlterConfigsResponse.ResourceResult, _Mapping]]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ...) -> None: ...

class DescribeConfigsRequest(_message.Message):
    __slots__ = ("resources",)
    class Resource(_message.Message):
        __slots__ = ("resource_type", "resource_name", "names")
        RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
        RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
        NAMES_FIELD_NUMBER: _ClassVar[int]
        resource_type: _metadata_pb2.ConfigResourceType
        resource_name: str
        names: _containers.RepeatedScalarFieldContainer[str]
        def __init__(self, resource_type: _Optional[_Union[_metadata_pb2.ConfigResourceType, str]] = ..., resource_name: _Optional[str] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[DescribeConfigsRequest.Resource]
    def __init__(self, resources: _Optional[_Iterable[_Union[DescribeConfigsRequest.Resource, _Mapping]]] = ...) -> None: ...

class DescribeConfigsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "resources", "controller")
    class ConfigValue(_message.Message):
        __slots__ = ("name", "value", "source", "read_only", "sensitive", "documentation")
        NAME_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        SOURCE_FIELD_NUMBER: _ClassVar[int]
        READ_ONLY_FIELD_NUMBER: _ClassVar[int]
        SENSITIVE_FIELD_NUMBER: _ClassVar[int]
        DOCUMENTATION_FIELD_NUMBER: _ClassVar[int]
        name: str
        value: str
        source: ConfigSource
        read_only: bool
        sensitive: bool
        documentation: str
        def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., source: _Optional[_Union[ConfigSource, str]] = ..., read_only: _Optional[bool] = ..., sensitive: _Optional[bool] = ..., documentation: _Optional[str] = ...) -> None: ...
    class ResourceResult(_message.Message):
        __slots__ = ("resource_type", "resource_name", "error_code", "error_message", "configs")
        RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
        RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        CONFIGS_FIELD_NUMBER: _ClassVar[int]
        resource_type: _metadata_pb2.ConfigResourceType
        resource_name: str
        error_code: _common_pb2.ErrorCode
        error_message: str
        configs: _containers.RepeatedCompositeFieldContainer[DescribeConfigsResponse.ConfigValue]
        def __init__(self, resource_type: _Optional[_Union[_metadata_pb2.ConfigResourceType, str]] = ..., resource_name: _Optional[str] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., configs: _Optional[_Iterable[_Union[DescribeConfigsResponse.ConfigValue, _Mapping]]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    resources: _containers.RepeatedCompositeFieldContainer[DescribeConfigsResponse.ResourceResult]
    controller: _common_pb2.ControllerHint
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., resources: _Optional[_Iterable[_Union[DescribeConfigsResponse.ResourceResult, _Mapping]]] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ...) -> None: ...

class AllocateProducerIdsRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class AllocateProducerIdsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "producer_id_start", "producer_id_len", "controller")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_START_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_LEN_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    producer_id_start: int
    producer_id_len: int
    controller: _common_pb2.ControllerHint
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., producer_id_start: _Optional[int] = ..., producer_id_len: _Optional[int] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ...) -> None: ...

class DescribeQuorumRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeQuorumResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "leader_id", "leader_epoch", "high_watermark", "voters", "responder_id", "cluster_id", "metadata_offset")
    class VoterState(_message.Message):
        __slots__ = ("node_id", "raft_address", "endpoint", "commit_index", "applied_index", "metadata_offset", "lag", "connected", "is_leader")
        NODE_ID_FIELD_NUMBER: _ClassVar[int]
        RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
        ENDPOINT_FIELD_NUMBER: _ClassVar[int]
        COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
        APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
        METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LAG_FIELD_NUMBER: _ClassVar[int]
        CONNECTED_FIELD_NUMBER: _ClassVar[int]
        IS_LEADER_FIELD_NUMBER: _ClassVar[int]
        node_id: int
        raft_address: str
        endpoint: _common_pb2.Endpoint
        commit_index: int
        applied_index: int
        metadata_offset: int
        lag: int
        connected: bool
        is_leader: bool
        def __init__(self, node_id: _Optional[int] = ..., raft_address: _Optional[str] = ..., endpoint: _Optional[_Union[_common_pb2.Endpoint, _Mapping]] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., metadata_offset: _Optional[int] = ..., lag: _Optional[int] = ..., connected: _Optional[bool] = ..., is_leader: _Optional[bool] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    VOTERS_FIELD_NUMBER: _ClassVar[int]
    RESPONDER_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: _containers.RepeatedCompositeFieldContainer[DescribeQuorumResponse.VoterState]
    responder_id: int
    cluster_id: str
    metadata_offset: int
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., high_watermark: _Optional[int] = ..., voters: _Optional[_Iterable[_Union[DescribeQuorumResponse.VoterState, _Mapping]]] = ..., responder_id: _Optional[int] = ..., cluster_id: _Optional[str] = ..., metadata_offset: _Optional[int] = ...) -> None: ...

class FetchMetadataRequest(_message.Message):
    __slots__ = ("cluster_id", "broker_id", "from_offset")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    broker_id: int
    from_offset: int
    def __init__(self, cluster_id: _Optional[str] = ..., broker_id: _Optional[int] = ..., from_offset: _Optional[int] = ...) -> None: ...

class FetchMetadataResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "snapshot", "records", "base_offset", "committed_offset", "controller", "batch_record_counts")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    BATCH_RECORD_COUNTS_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    snapshot: _metadata_pb2.MetadataSnapshot
    records: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.MetadataRecord]
    base_offset: int
    committed_offset: int
    controller: _common_pb2.ControllerHint
    batch_record_counts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., snapshot: _Optional[_Union[_metadata_pb2.MetadataSnapshot, _Mapping]] = ..., records: _Optional[_Iterable[_Union[_metadata_pb2.MetadataRecord, _Mapping]]] = ..., base_offset: _Optional[int] = ..., committed_offset: _Optional[int] = ..., controller: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ..., batch_record_counts: _Optional[_Iterable[int]] = ...) -> None: ...

class CreateAclsRequest(_message.Message):
    __slots__ = ("creations",)
    CREATIONS_FIELD_NUMBER: _ClassVar[int]
    creations: _containers.RepeatedCompositeFieldContainer[_common_pb2.AclBinding]
    def __init__(self, creations: _Optional[_Iterable[_Union[_common_pb2.AclBinding, _Mapping]]] = ...) -> None: ...

class CreateAclResult(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class CreateAclsResponse(_message.Message):
    __slots__ = ("results", "controller_hint")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_HINT_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CreateAclResult]
    controller_hint: _common_pb2.ControllerHint
    def __init__(self, results: _Optional[_Iterable[_Union[CreateAclResult, _Mapping]]] = ..., controller_hint: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ...) -> None: ...

class DeleteAclsRequest(_message.Message):
    __slots__ = ("filters",)
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedCompositeFieldContainer[_common_pb2.AclFilter]
    def __init__(self, filters: _Optional[_Iterable[_Union[_common_pb2.AclFilter, _Mapping]]] = ...) -> None: ...

class DeleteAclsFilterResult(_message.Message):
    __slots__ = ("error_code", "error_message", "deleted")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    deleted: _containers.RepeatedCompositeFieldContainer[_common_pb2.AclBinding]
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., deleted: _Optional[_Iterable[_Union[_common_pb2.AclBinding, _Mapping]]] = ...) -> None: ...

class DeleteAclsResponse(_message.Message):
    __slots__ = ("results", "controller_hint")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_HINT_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeleteAclsFilterResult]
    controller_hint: _common_pb2.ControllerHint
    def __init__(self, results: _Optional[_Iterable[_Union[DeleteAclsFilterResult, _Mapping]]] = ..., controller_hint: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ...) -> None: ...

class ScramCredentialDeletion(_message.Message):
    __slots__ = ("name", "mechanism")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    name: str
    mechanism: _common_pb2.ScramMechanism
    def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[_Union[_common_pb2.ScramMechanism, str]] = ...) -> None: ...

class ScramCredentialUpsertion(_message.Message):
    __slots__ = ("name", "mechanism", "iterations", "salt", "salted_password")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    SALTED_PASSWORD_FIELD_NUMBER: _ClassVar[int]
    name: str
    mechanism: _common_pb2.ScramMechanism
    iterations: int
    salt: bytes
    salted_password: bytes
    def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[_Union[_common_pb2.ScramMechanism, str]] = ..., iterations: _Optional[int] = ..., salt: _Optional[bytes] = ..., salted_password: _Optional[bytes] = ...) -> None: ...

class AlterUserScramCredentialsRequest(_message.Message):
    __slots__ = ("deletions", "upsertions")
    DELETIONS_FIELD_NUMBER: _ClassVar[int]
    UPSERTIONS_FIELD_NUMBER: _ClassVar[int]
    deletions: _containers.RepeatedCompositeFieldContainer[ScramCredentialDeletion]
    upsertions: _containers.RepeatedCompositeFieldContainer[ScramCredentialUpsertion]
    def __init__(self, deletions: _Optional[_Iterable[_Union[ScramCredentialDeletion, _Mapping]]] = ..., upsertions: _Optional[_Iterable[_Union[ScramCredentialUpsertion, _Mapping]]] = ...) -> None: ...

class AlterUserScramCredentialsResult(_message.Message):
    __slots__ = ("user", "error_code", "error_message")
    USER_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    user: str
    error_code: _common_pb2.ErrorCode
    error_message: str
    def __init__(self, user: _Optional[str] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class AlterUserScramCredentialsResponse(_message.Message):
    __slots__ = ("results", "controller_hint")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_HINT_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AlterUserScramCredentialsResult]
    controller_hint: _common_pb2.ControllerHint
    def __init__(self, results: _Optional[_Iterable[_Union[AlterUserScramCredentialsResult, _Mapping]]] = ..., controller_hint: _Optional[_Union[_common_pb2.ControllerHint, _Mapping]] = ...) -> None: ...
