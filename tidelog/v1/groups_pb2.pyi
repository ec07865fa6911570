from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MemberState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMBER_STATE_STABLE: _ClassVar[MemberState]
    MEMBER_STATE_UNREVOKED_PARTITIONS: _ClassVar[MemberState]
    MEMBER_STATE_UNRELEASED_PARTITIONS: _ClassVar[MemberState]
MEMBER_STATE_STABLE: MemberState
MEMBER_STATE_UNREVOKED_PARTITIONS: MemberState
MEMBER_STATE_UNRELEASED_PARTITIONS: MemberState

class TopicIdPartitions(_message.Message):
    __slots__ = ("topic_id", "partitions")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic_id: _Optional[bytes] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class ConsumerGroupMetadataKey(_message.Message):
    __slots__ = ("group_id",)
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    def __init__(self, group_id: _Optional[str] = ...) -> None: ...

class ConsumerGroupMetadataValue(_message.Message):
    __slots__ = ("epoch", "metadata_hash")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_HASH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    metadata_hash: int
    def __init__(self, epoch: _Optional[int] = ..., metadata_hash: _Optional[int] = ...) -> None: ...

class ConsumerGroupMemberMetadataKey(_message.Message):
    __slots__ = ("group_id", "member_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ...) -> None: ...

class ConsumerGroupMemberMetadataValue(_message.Message):
    __slots__ = ("instance_id", "rack_id", "client_id", "client_host", "subscribed_topic_names", "server_assignor", "rebalance_timeout_ms", "subscribed_topic_regex", "principal")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    RACK_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_TOPIC_NAMES_FIELD_NUMBER: _ClassVar[int]
    SERVER_ASSIGNOR_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_TOPIC_REGEX_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    rack_id: str
    client_id: str
    client_host: str
    subscribed_topic_names: _containers.RepeatedScalarFieldContainer[str]
    server_assignor: str
    rebalance_timeout_ms: int
    subscribed_topic_regex: str
    principal: str
    def __init__(self, instance_id: _Optional[str] = ..., rack_id: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., subscribed_topic_names: _Optional[_Iterable[str]] = ..., server_assignor: _Optional[str] = ..., rebalance_timeout_ms: _Optional[int] = ..., subscribed_topic_regex: _Optional[str] = ..., principal: _Optional[str] = ...) -> None: ...

class ConsumerGroupTargetAssignmentMetadataKey(_message.Message):
    __slots__ = ("group_id",)
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    def __init__(self, group_id: _Optional[str] = ...) -> None: ...

class ConsumerGroupTargetAssignmentMetadataValue(_message.Message):
    __slots__ = ("assignment_epoch",)
    ASSIGNMENT_EPOCH_FIELD_NUMBER: _ClassVar[int]
    assignment_epoch: int
    def __init__(self, assignment_epoch: _Optional[int] = ...) -> None: ...

class ConsumerGroupTargetAssignmentMemberKey(_message.Message):
    __slots__ = ("group_id", "member_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ...) -> None: ...

class ConsumerGroupTargetAssignmentMemberValue(_message.Message):
    __slots__ = ("topic_partitions",)
    TOPIC_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic_partitions: _containers.RepeatedCompositeFieldContainer[TopicIdPartitions]
    def __init__(self, topic_partitions: _Optional[_Iterable[_Union[TopicIdPartitions, _Mapping]]] = ...) -> None: ...

class ConsumerGroupCurrentMemberAssignmentKey(_message.Message):
    __slots__ = ("group_id", "member_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    member_id: str
    def __init__(self, group_id: _Optional[str] = ..., member_id: _Optional[str] = ...) -> None: ...

class ConsumerGroupCurrentMemberAssignmentValue(_message.Message):
    __slots__ = ("member_epoch", "previous_member_epoch", "state", "assigned_partitions", "partitions_pending_revocation")
    MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_MEMBER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_PENDING_REVOCATION_FIELD_NUMBER: _ClassVar[int]
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned_partitions: _containers.RepeatedCompositeFieldContainer[TopicIdPartitions]
    partitions_pending_revocation: _containers.RepeatedCompositeFieldContainer[TopicIdPartitions]
    def __init__(self, member_epoch: _Optional[int] = ..., previous_member_epoch: _Optional[int] = ..., state: _Optional[_Union[MemberState, str]] = ..., assigned_partitions: _Optional[_Iterable[_Union[TopicIdPartitions, _Mapping]]] = ..., partitions_pending_revocation: _Optional[_Iterable[_Union[TopicIdPartitions, _Mapping]]] = ...) -> None: ...

class OffsetCommitKey(_message.Message):
    __slots__ = ("group_id", "topic", "partition")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topic: str
    partition: int
    def __init__(self, group_id: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class OffsetCommitValue(_message.Message):
    __slots__ = ("offset", "leader_epoch", "metadata", "commit_timestamp_ms", "expire_timestamp_ms")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int
    def __init__(self, offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ..., commit_timestamp_ms: _Optional[int] = ..., expire_timestamp_ms: _Optional[int] = ...) -> None: ...
