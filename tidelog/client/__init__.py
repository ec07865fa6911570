"""Tidelog's client library: Producer, Consumer and Admin, with their value types.

Everything a user needs is exported here (and the most used names from ``tidelog`` itself); the
underscore modules are private and may change. Errors are the typed classes of ``tidelog.errors``
(one per error code, each with ``code`` and ``retriable``), plus the two consumer errors below,
which subclass them and say where the problem is, and ProducerSenderError (an
UNKNOWN_SERVER_ERROR): the producer's sender failed and the producer is done.
"""

from tidelog.client.admin import (
    AclBinding,
    AclFilter,
    Admin,
    AdminResult,
    AlterConfigOp,
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    CreatedTopic,
    GroupDescription,
    GroupListing,
    GroupMemberDescription,
    GroupOffset,
    NewTopic,
    PartitionDescription,
    QuorumDescription,
    ScramCredentialInfo,
    TopicDescription,
    TopicListing,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
    VoterDescription,
)
from tidelog.client.consumer import (
    Consumer,
    ConsumerRebalanceListener,
    CorruptRecordError,
    NoOffsetForPartitionError,
)
from tidelog.client.futures import FutureRecordMetadata
from tidelog.client.producer import Producer, ProducerSenderError
from tidelog.client.records import (
    EARLIEST,
    LATEST,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)

__all__ = [
    "EARLIEST",
    "LATEST",
    "AclBinding",
    "AclFilter",
    "Admin",
    "AdminResult",
    "AlterConfigOp",
    "BrokerDescription",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "CorruptRecordError",
    "CreatedTopic",
    "FutureRecordMetadata",
    "GroupDescription",
    "GroupListing",
    "GroupMemberDescription",
    "GroupOffset",
    "NewTopic",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "PartitionDescription",
    "Producer",
    "ProducerSenderError",
    "QuorumDescription",
    "RecordMetadata",
    "ScramCredentialInfo",
    "TopicDescription",
    "TopicListing",
    "TopicPartition",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "VoterDescription",
]
