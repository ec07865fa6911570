"""The broker's replication core: pure decisions about ISR, HW, leader epochs, acks and
idempotent producers (DESIGN §7, §9). No I/O, no clocks, no asyncio/grpc/rocksdict: the replica
manager (the I/O shell) feeds it events with ``now_ms`` and carries out the effects it returns,
in order -- persist, then send, then acknowledge. See ``partition_state`` for the driving loop
and ``producer_state`` for producer-state durability.
"""

from tidelog.broker.replication.effects import (
    AppendFetchedBatches,
    BackoffFetch,
    CheckProduceWaiters,
    Effect,
    MaybeIncrementLogStartOffset,
    ProposeIsr,
    TruncateFullyAndStartAt,
    TruncateTo,
    UpdateHighWatermark,
)
from tidelog.broker.replication.fetch import (
    DivergingEpoch,
    FollowerFetch,
    FollowerFetchDecision,
    LeaderFetchResponse,
    LogView,
)
from tidelog.broker.replication.partition_state import (
    NO_LEADER,
    REPLICA_LAG_TIME_MAX_MS_DEFAULT,
    AcksDone,
    PartitionState,
    Role,
)
from tidelog.broker.replication.producer_state import (
    NO_PRODUCER_ID,
    PRODUCER_ID_EXPIRATION_MS_DEFAULT,
    Accept,
    BatchHeader,
    Duplicate,
    ProducerCheck,
    ProducerStateTable,
    Reject,
)
from tidelog.broker.replication.replica_state import ReplicaState

__all__ = [
    "NO_LEADER",
    "NO_PRODUCER_ID",
    "PRODUCER_ID_EXPIRATION_MS_DEFAULT",
    "REPLICA_LAG_TIME_MAX_MS_DEFAULT",
    "Accept",
    "AcksDone",
    "AppendFetchedBatches",
    "BackoffFetch",
    "BatchHeader",
    "CheckProduceWaiters",
    "DivergingEpoch",
    "Duplicate",
    "Effect",
    "FollowerFetch",
    "FollowerFetchDecision",
    "LeaderFetchResponse",
    "LogView",
    "MaybeIncrementLogStartOffset",
    "PartitionState",
    "ProducerCheck",
    "ProducerStateTable",
    "ProposeIsr",
    "Reject",
    "ReplicaState",
    "Role",
    "TruncateFullyAndStartAt",
    "TruncateTo",
    "UpdateHighWatermark",
]
