from tidelog.v1 import common_pb2 as _common_pb2
from tidelog.v1 import controller_pb2 as _controller_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MetadataRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class PartitionMetadata(_message.Message):
    __slots__ = ("partition_id", "error_code", "leader", "leader_epoch", "replicas", "isr", "offline_replicas")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    partition_id: int
    error_code: _common_pb2.ErrorCode
    leader: int
    leader_epoch: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    offline_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition_id: _Optional[int] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., offline_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class TopicMetadata(_message.Message):
    __slots__ = ("name", "topic_id", "error_code", "error_message", "is_internal", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    IS_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: bytes
    error_code: _common_pb2.ErrorCode
    error_message: str
    is_internal: bool
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionMetadata]
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., is_internal: _Optional[bool] = ..., partitions: _Optional[_Iterable[_Union[PartitionMetadata, _Mapping]]] = ...) -> None: ...

class MetadataResponse(_message.Message):
    __slots__ = ("cluster_id", "controller_id", "brokers", "topics", "metadata_offset")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    controller_id: int
    brokers: _containers.RepeatedCompositeFieldContainer[_common_pb2.BrokerInfo]
    topics: _containers.RepeatedCompositeFieldContainer[TopicMetadata]
    metadata_offset: int
    def __init__(self, cluster_id: _Optional[str] = ..., controller_id: _Optional[int] = ..., brokers: _Optional[_Iterable[_Union[_common_pb2.BrokerInfo, _Mapping]]] = ..., topics: _Optional[_Iterable[_Union[TopicMetadata, _Mapping]]] = ..., metadata_offset: _Optional[int] = ...) -> None: ...

class ProduceRequest(_message.Message):
    __slots__ = ("acks", "timeout_ms", "topics", "correlation_id")
    class PartitionData(_message.Message):
        __slots__ = ("partition_id", "batch")
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        BATCH_FIELD_NUMBER: _ClassVar[int]
        partition_id: int
        batch: bytes
        def __init__(self, partition_id: _Optional[int] = ..., batch: _Optional[bytes] = ...) -> None: ...
    class TopicData(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedCompositeFieldContainer[ProduceRequest.PartitionData]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[ProduceRequest.PartitionData, _Mapping]]] = ...) -> None: ...
    ACKS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    acks: int
    timeout_ms: int
    topics: _containers.RepeatedCompositeFieldContainer[ProduceRequest.TopicData]
    correlation_id: int
    def __init__(self, acks: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[ProduceRequest.TopicData, _Mapping]]] = ..., correlation_id: _Optional[int] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("topics", "throttle_time_ms", "correlation_id")
    class PartitionResponse(_message.Message):
        __slots__ = ("partition_id", "error_code", "error_message", "base_offset", "log_append_time_ms", "log_start_offset", "current_leader", "appended")
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LOG_APPEND_TIME_MS_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        CURRENT_LEADER_FIELD_NUMBER: _ClassVar[int]
        APPENDED_FIELD_NUMBER: _ClassVar[int]
        partition_id: int
        error_code: _common_pb2.ErrorCode
        error_message: str
        base_offset: int
        log_append_time_ms: int
        log_start_offset: int
        current_leader: _common_pb2.LeaderHint
        appended: bool
        def __init__(self, partition_id: _Optional[int] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., base_offset: _Optional[int] = ..., log_append_time_ms: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., current_leader: _Optional[_Union[_common_pb2.LeaderHint, _Mapping]] = ..., appended: _Optional[bool] = ...) -> None: ...
    class TopicResponse(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedCompositeFieldContainer[ProduceResponse.PartitionResponse]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[ProduceResponse.PartitionResponse, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[ProduceResponse.TopicResponse]
    throttle_time_ms: int
    correlation_id: int
    def __init__(self, topics: _Optional[_Iterable[_Union[ProduceResponse.TopicResponse, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ..., correlation_id: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("replica_id", "replica_broker_epoch", "max_wait_ms", "min_bytes", "max_bytes", "isolation_level", "topics", "session_epoch", "forgotten", "answer_now", "open_session")
    class PartitionData(_message.Message):
        __slots__ = ("partition_id", "fetch_offset", "current_leader_epoch", "last_fetched_epoch", "log_start_offset", "partition_max_bytes")
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
        CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        PARTITION_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
        partition_id: int
        fetch_offset: int
        current_leader_epoch: int
        last_fetched_epoch: int
        log_start_offset: int
        partition_max_bytes: int
        def __init__(self, partition_id: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., partition_max_bytes: _Optional[int] = ...) -> None: ...
    class TopicData(_message.Message):
        __slots__ = ("name", "topic_id", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[FetchRequest.PartitionData]
        def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[FetchRequest.PartitionData, _Mapping]]] = ...) -> None: ...
    class ForgottenTopic(_message.Message):
        __slots__ = ("topic_id", "partitions", "name")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        NAME_FIELD_NUMBER: _ClassVar[int]
        topic_id: bytes
        partitions: _containers.RepeatedScalarFieldContainer[int]
        name: str
        def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[int]] = ..., name: _Optional[str] = ...) -> None: ...
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SESSION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    ANSWER_NOW_FIELD_NUMBER: _ClassVar[int]
    OPEN_SESSION_FIELD_NUMBER: _ClassVar[int]
    replica_id: int
    replica_broker_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: _common_pb2.IsolationLevel
    topics: _containers.RepeatedCompositeFieldContainer[FetchRequest.TopicData]
    session_epoch: int
    forgotten: _containers.RepeatedCompositeFieldContainer[FetchRequest.ForgottenTopic]
    answer_now: bool
    open_session: bool
    def __init__(self, replica_id: _Optional[int] = ..., replica_broker_epoch: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., min_bytes: _Optional[int] = ..., max_bytes: _Optional[int] = ..., isolation_level: _Optional[_Union[_common_pb2.IsolationLevel, str]] = ..., topics: _Optional[_Iterable[_Union[FetchRequest.TopicData, _Mapping]]] = ..., session_epoch: _Optional[int] = ..., forgotten: _Optional[_Iterable[_Union[FetchRequest.ForgottenTopic, _Mapping]]] = ..., answer_now: _Optional[bool] = ..., open_session: _Optional[bool] = ...) -> None: ...

class EpochEndOffset(_message.Message):
    __slots__ = ("epoch", "end_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    end_offset: int
    def __init__(self, epoch: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "topics", "throttle_time_ms", "next_session_epoch")
    class PartitionData(_message.Message):
        __slots__ = ("partition_id", "error_code", "error_message", "high_watermark", "last_stable_offset", "log_start_offset", "diverging_epoch", "current_leader", "batches", "log_end_offset")
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
        LAST_STABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        DIVERGING_EPOCH_FIELD_NUMBER: _ClassVar[int]
        CURRENT_LEADER_FIELD_NUMBER: _ClassVar[int]
        BATCHES_FIELD_NUMBER: _ClassVar[int]
        LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
        partition_id: int
        error_code: _common_pb2.ErrorCode
        error_message: str
        high_watermark: int
        last_stable_offset: int
        log_start_offset: int
        diverging_epoch: EpochEndOffset
        current_leader: _common_pb2.LeaderHint
        batches: _containers.RepeatedScalarFieldContainer[bytes]
        log_end_offset: int
        def __init__(self, partition_id: _Optional[int] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., high_watermark: _Optional[int] = ..., last_stable_offset: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., diverging_epoch: _Optional[_Union[EpochEndOffset, _Mapping]] = ..., current_leader: _Optional[_Union[_common_pb2.LeaderHint, _Mapping]] = ..., batches: _Optional[_Iterable[bytes]] = ..., log_end_offset: _Optional[int] = ...) -> None: ...
    class TopicData(_message.Message):
        __slots__ = ("name", "topic_id", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        topic_id: bytes
        partitions: _containers.RepeatedCompositeFieldContainer[FetchResponse.PartitionData]
        def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[_Union[FetchResponse.PartitionData, _Mapping]]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    NEXT_SESSION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    topics: _containers.RepeatedCompositeFieldContainer[FetchResponse.TopicData]
    throttle_time_ms: int
    next_session_epoch: int
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[FetchResponse.TopicData, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ..., next_session_epoch: _Optional[int] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("isolation_level", "topics")
    class PartitionData(_message.Message):
        __slots__ = ("partition_id", "timestamp", "current_leader_epoch")
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        partition_id: int
        timestamp: int
        current_leader_epoch: int
        def __init__(self, partition_id: _Optional[int] = ..., timestamp: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ...) -> None: ...
    class TopicData(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedCompositeFieldContainer[ListOffsetsRequest.PartitionData]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[ListOffsetsRequest.PartitionData, _Mapping]]] = ...) -> None: ...
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    isolation_level: _common_pb2.IsolationLevel
    topics: _containers.RepeatedCompositeFieldContainer[ListOffsetsRequest.TopicData]
    def __init__(self, isolation_level: _Optional[_Union[_common_pb2.IsolationLevel, str]] = ..., topics: _Optional[_Iterable[_Union[ListOffsetsRequest.TopicData, _Mapping]]] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("topics",)
    class PartitionData(_message.Message):
        __slots__ = ("partition_id", "error_code", "error_message", "timestamp", "offset", "leader_epoch", "current_leader")
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        CURRENT_LEADER_FIELD_NUMBER: _ClassVar[int]
        partition_id: int
        error_code: _common_pb2.ErrorCode
        error_message: str
        timestamp: int
        offset: int
        leader_epoch: int
        current_leader: _common_pb2.LeaderHint
        def __init__(self, partition_id: _Optional[int] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., timestamp: _Optional[int] = ..., offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., current_leader: _Optional[_Union[_common_pb2.LeaderHint, _Mapping]] = ...) -> None: ...
    class TopicData(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedCompositeFieldContainer[ListOffsetsResponse.PartitionData]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[ListOffsetsResponse.PartitionData, _Mapping]]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[ListOffsetsResponse.TopicData]
    def __init__(self, topics: _Optional[_Iterable[_Union[ListOffsetsResponse.TopicData, _Mapping]]] = ...) -> None: ...

class InitProducerIdRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class InitProducerIdResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "producer_id", "producer_epoch")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    producer_id: int
    producer_epoch: int
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class DescribeClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeClusterResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "cluster_id", "controller_id", "brokers", "metadata_offset")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    cluster_id: str
    controller_id: int
    brokers: _containers.RepeatedCompositeFieldContainer[_common_pb2.BrokerInfo]
    metadata_offset: int
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., cluster_id: _Optional[str] = ..., controller_id: _Optional[int] = ..., brokers: _Optional[_Iterable[_Union[_common_pb2.BrokerInfo, _Mapping]]] = ..., metadata_offset: _Optional[int] = ...) -> None: ...

class DescribeLogsRequest(_message.Message):
    __slots__ = ("topics",)
    class TopicData(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[DescribeLogsRequest.TopicData]
    def __init__(self, topics: _Optional[_Iterable[_Union[DescribeLogsRequest.TopicData, _Mapping]]] = ...) -> None: ...

class DescribeLogsResponse(_message.Message):
    __slots__ = ("broker_id", "partitions")
    class PartitionLog(_message.Message):
        __slots__ = ("topic", "partition_id", "error_code", "is_leader", "leader_epoch", "log_start_offset", "log_end_offset", "high_watermark", "size_bytes")
        TOPIC_FIELD_NUMBER: _ClassVar[int]
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        IS_LEADER_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
        LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
        HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
        SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
        topic: str
        partition_id: int
        error_code: _common_pb2.ErrorCode
        is_leader: bool
        leader_epoch: int
        log_start_offset: int
        log_end_offset: int
        high_watermark: int
        size_bytes: int
        def __init__(self, topic: _Optional[str] = ..., partition_id: _Optional[int] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., is_leader: _Optional[bool] = ..., leader_epoch: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., high_watermark: _Optional[int] = ..., size_bytes: _Optional[int] = ...) -> None: ...
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    partitions: _containers.RepeatedCompositeFieldContainer[DescribeLogsResponse.PartitionLog]
    def __init__(self, broker_id: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[DescribeLogsResponse.PartitionLog, _Mapping]]] = ...) -> None: ...

class FindCoordinatorRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class FindCoordinatorResponse(_message.Message):
    __slots__ = ("coordinators",)
    class Coordinator(_message.Message):
        __slots__ = ("group_id", "error_code", "error_message", "node_id", "endpoint")
        GROUP_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        NODE_ID_FIELD_NUMBER: _ClassVar[int]
        ENDPOINT_FIELD_NUMBER: _ClassVar[int]
        group_id: str
        error_code: _common_pb2.ErrorCode
        error_message: str
        node_id: int
        endpoint: _common_pb2.Endpoint
        def __init__(self, group_id: _Optional[str] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., node_id: _Optional[int] = ..., endpoint: _Optional[_Union[_common_pb2.Endpoint, _Mapping]] = ...) -> None: ...
    COORDINATORS_FIELD_NUMBER: _ClassVar[int]
    coordinators: _containers.RepeatedCompositeFieldContainer[FindCoordinatorResponse.Coordinator]
    def __init__(self, coordinators: _Optional[_Iterable[_Union[FindCoordinatorResponse.Coordinator, _Mapping]]] = ...) -> None: ...

class TopicPartitions(_message.Message):
    __slots__ = ("topic_id", "topic", "partitions")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic_id: _Optional[bytes] = ..., topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class ConsumerGroupHeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch", "instance_id", "rack_id", "rebalance_timeout_ms", "subscribed_topic_names", "subscription_changed", "server_assignor", "owned_partitions", "subscribed_topic_regex")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    RACK_ID_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_TOPIC_NAMES_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_CHANGED_FIELD_NUMBER: _ClassVar[int]
    SERVER_ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    OWNED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_TOPIC_REGEX_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str
    rack_id: str
    rebalance_timeout_ms: int
    subscribed_topic_names: _containers.RepeatedScalarFieldContainer[str]
    subscription_changed: bool
    server_assignor: str
    owned_partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    subscribed_topic_regex: str
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., instance_id: _Optional[str] = ..., rack_id: _Optional[str] = ..., rebalance_timeout_ms: _Optional[int] = ..., subscribed_topic_names: _Optional[_Iterable[str]] = ..., subscription_changed: _Optional[bool] = ..., server_assignor: _Optional[str] = ..., owned_partitions: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., subscribed_topic_regex: _Optional[str] = ...) -> None: ...

class ConsumerGroupHeartbeatResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "member_id", "member_epoch", "heartbeat_interval_ms", "assignment", "assignment_changed")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_CHANGED_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    assignment_changed: bool
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., assignment: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., assignment_changed: _Optional[bool] = ...) -> None: ...

class OffsetCommitRequest(_message.Message):
    __slots__ = ("group_id", "member_id", "member_epoch", "topics")
    class Partition(_message.Message):
        __slots__ = ("partition_id", "committed_offset", "committed_leader_epoch", "metadata")
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
        COMMITTED_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        METADATA_FIELD_NUMBER: _ClassVar[int]
        partition_id: int
        committed_offset: int
        committed_leader_epoch: int
        metadata: str
        def __init__(self, partition_id: _Optional[int] = ..., committed_offset: _Optional[int] = ..., committed_leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitRequest.Partition]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetCommitRequest.Partition, _Mapping]]] = ...) -> None: ...
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    member_epoch: int
    topics: _containers.RepeatedCompositeFieldContainer[OffsetCommitRequest.Topic]
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ..., member_epoch: _Optional[int] = ..., topics: _Optional[_Iterable[_Union[OffsetCommitRequest.Topic, _Mapping]]] = ...) -> None: ...

class OffsetCommitResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "topics")
    class Partition(_message.Message):
        __slots__ = ("partition_id", "error_code", "error_message")
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        partition_id: int
        error_code: _common_pb2.ErrorCode
        error_message: str
        def __init__(self, partition_id: _Optional[int] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitResponse.Partition]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetCommitResponse.Partition, _Mapping]]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetCommitResponse.Topic]
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetCommitResponse.Topic, _Mapping]]] = ...) -> None: ...

class OffsetFetchRequest(_message.Message):
    __slots__ = ("group_id", "topics")
    class Topic(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetFetchRequest.Topic]
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetFetchRequest.Topic, _Mapping]]] = ...) -> None: ...

class OffsetFetchResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "topics")
    class Partition(_message.Message):
        __slots__ = ("partition_id", "committed_offset", "committed_leader_epoch", "metadata", "error_code", "lag")
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
        COMMITTED_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        METADATA_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        LAG_FIELD_NUMBER: _ClassVar[int]
        partition_id: int
        committed_offset: int
        committed_leader_epoch: int
        metadata: str
        error_code: _common_pb2.ErrorCode
        lag: int
        def __init__(self, partition_id: _Optional[int] = ..., committed_offset: _Optional[int] = ..., committed_leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., lag: _Optional[int] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedCompositeFieldContainer[OffsetFetchResponse.Partition]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetFetchResponse.Partition, _Mapping]]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetFetchResponse.Topic]
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetFetchResponse.Topic, _Mapping]]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "groups")
    class Group(_message.Message):
        __slots__ = ("group_id", "state")
        GROUP_ID_FIELD_NUMBER: _ClassVar[int]
        STATE_FIELD_NUMBER: _ClassVar[int]
        group_id: str
        state: str
        def __init__(self, group_id: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    groups: _containers.RepeatedCompositeFieldContainer[ListGroupsResponse.Group]
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., groups: _Optional[_Iterable[_Union[ListGroupsResponse.Group, _Mapping]]] = ...) -> None: ...

class DescribeGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    class Member(_message.Message):
        __slots__ = ("member_id", "instance_id", "client_host", "member_epoch", "assignment", "subscribed_topic_names", "subscribed_topic_regex", "client_id", "target_assignment")
        MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
        INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
        CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
        MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
        SUBSCRIBED_TOPIC_NAMES_FIELD_NUMBER: _ClassVar[int]
        SUBSCRIBED_TOPIC_REGEX_FIELD_NUMBER: _ClassVar[int]
        CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
        TARGET_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
        member_id: str
        instance_id: str
        client_host: str
        member_epoch: int
        assignment: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
        subscribed_topic_names: _containers.RepeatedScalarFieldContainer[str]
        subscribed_topic_regex: str
        client_id: str
        target_assignment: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
        def __init__(self, member_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., client_host: _Optional[str] = ..., member_epoch: _Optional[int] = ..., assignment: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., subscribed_topic_names: _Optional[_Iterable[str]] = ..., subscribed_topic_regex: _Optional[str] = ..., client_id: _Optional[str] = ..., target_assignment: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ...) -> None: ...
    class Group(_message.Message):
        __slots__ = ("group_id", "error_code", "error_message", "state", "group_epoch", "assignment_epoch", "assignor_name", "members")
        GROUP_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        STATE_FIELD_NUMBER: _ClassVar[int]
        GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
        ASSIGNMENT_EPOCH_FIELD_NUMBER: _ClassVar[int]
        ASSIGNOR_NAME_FIELD_NUMBER: _ClassVar[int]
        MEMBERS_FIELD_NUMBER: _ClassVar[int]
        group_id: str
        error_code: _common_pb2.ErrorCode
        error_message: str
        state: str
        group_epoch: int
        assignment_epoch: int
        assignor_name: str
        members: _containers.RepeatedCompositeFieldContainer[DescribeGroupsResponse.Member]
        def __init__(self, group_id: _Optional[str] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., state: _Optional[str] = ..., group_epoch: _Optional[int] = ..., assignment_epoch: _Optional[int] = ..., assignor_name: _Optional[str] = ..., members: _Optional[_Iterable[_Union[DescribeGroupsResponse.Member, _Mapping]]] = ...) -> None: ...
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[DescribeGroupsResponse.Group]
    def __init__(self, groups: _Optional[_Iterable[_Union[DescribeGroupsResponse.Group, _Mapping]]] = ...) -> None: ...

class DeleteGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class OffsetDeleteRequest(_message.Message):
    __slots__ = ("group_id", "topics")
    class Topic(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetDeleteRequest.Topic]
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetDeleteRequest.Topic, _Mapping]]] = ...) -> None: ...

class OffsetDeleteResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "topics")
    class Partition(_message.Message):
        __slots__ = ("partition_id", "error_code", "error_message")
        PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        partition_id: int
        error_code: _common_pb2.ErrorCode
        error_message: str
        def __init__(self, partition_id: _Optional[int] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    class Topic(_message.Message):
        __slots__ = ("name", "partitions")
        NAME_FIELD_NUMBER: _ClassVar[int]
        PARTITIONS_FIELD_NUMBER: _ClassVar[int]
        name: str
        partitions: _containers.RepeatedCompositeFieldContainer[OffsetDeleteResponse.Partition]
        def __init__(self, name: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetDeleteResponse.Partition, _Mapping]]] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    topics: _containers.RepeatedCompositeFieldContainer[OffsetDeleteResponse.Topic]
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[OffsetDeleteResponse.Topic, _Mapping]]] = ...) -> None: ...

class DeleteGroupsResponse(_message.Message):
    __slots__ = ("results",)
    class Result(_message.Message):
        __slots__ = ("group_id", "error_code", "error_message")
        GROUP_ID_FIELD_NUMBER: _ClassVar[int]
        ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
        ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
        group_id: str
        error_code: _common_pb2.ErrorCode
        error_message: str
        def __init__(self, group_id: _Optional[str] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeleteGroupsResponse.Result]
    def __init__(self, results: _Optional[_Iterable[_Union[DeleteGroupsResponse.Result, _Mapping]]] = ...) -> None: ...

class DescribeAclsRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: _common_pb2.AclFilter
    def __init__(self, filter: _Optional[_Union[_common_pb2.AclFilter, _Mapping]] = ...) -> None: ...

class DescribeAclsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "bindings")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BINDINGS_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    bindings: _containers.RepeatedCompositeFieldContainer[_common_pb2.AclBinding]
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., bindings: _Optional[_Iterable[_Union[_common_pb2.AclBinding, _Mapping]]] = ...) -> None: ...

class DescribeUserScramCredentialsRequest(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, users: _Optional[_Iterable[str]] = ...) -> None: ...

class ScramCredentialInfo(_message.Message):
    __slots__ = ("mechanism", "iterations")
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    mechanism: _common_pb2.ScramMechanism
    iterations: int
    def __init__(self, mechanism: _Optional[_Union[_common_pb2.ScramMechanism, str]] = ..., iterations: _Optional[int] = ...) -> None: ...

class DescribeUserScramCredentialsResult(_message.Message):
    __slots__ = ("user", "error_code", "error_message", "credential_infos")
    USER_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_INFOS_FIELD_NUMBER: _ClassVar[int]
    user: str
    error_code: _common_pb2.ErrorCode
    error_message: str
    credential_infos: _containers.RepeatedCompositeFieldContainer[ScramCredentialInfo]
    def __init__(self, user: _Optional[str] = ..., error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., credential_infos: _Optional[_Iterable[_Union[ScramCredentialInfo, _Mapping]]] = ...) -> None: ...

class DescribeUserScramCredentialsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[DescribeUserScramCredentialsResult]
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[DescribeUserScramCredentialsResult, _Mapping]]] = ...) -> None: ...

class ScramSaltRequest(_message.Message):
    __slots__ = ("user", "mechanism")
    USER_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    user: str
    mechanism: _common_pb2.ScramMechanism
    def __init__(self, user: _Optional[str] = ..., mechanism: _Optional[_Union[_common_pb2.ScramMechanism, str]] = ...) -> None: ...

class ScramSaltResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "salt", "iterations")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    salt: bytes
    iterations: int
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., salt: _Optional[bytes] = ..., iterations: _Optional[int] = ...) -> None: ...
