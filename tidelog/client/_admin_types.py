"""The Admin client's value types: per-item results (:class:`AdminResult`), topics, configs,
the cluster and its quorum (the group types are in ``_admin_groups.py``), and the small helpers
the Admin's modules share. ``tidelog.client.admin`` re-exports every public name here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from tidelog.errors import DuplicateResourceError, ErrorCode, InvalidRequestError, TidelogError
from tidelog.v1 import controller_pb2, metadata_pb2

__all__ = [
    "ALTER_OPS",
    "CONFIG_SOURCES",
    "RESOURCE_TYPES",
    "WRITE_RETRY_CODES",
    "AdminResult",
    "AlterConfigOp",
    "BrokerDescription",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "CreatedTopic",
    "NewTopic",
    "PartitionDescription",
    "QuorumDescription",
    "TopicDescription",
    "TopicListing",
    "VoterDescription",
    "no_duplicates",
    "ordered",
    "topic_id_text",
]

K = TypeVar("K")
V = TypeVar("V")

CONFIG_SOURCES = {
    controller_pb2.CONFIG_SOURCE_DEFAULT: "default",
    controller_pb2.CONFIG_SOURCE_TOPIC: "topic",
    controller_pb2.CONFIG_SOURCE_CLUSTER: "cluster",
    controller_pb2.CONFIG_SOURCE_BROKER: "broker",
}
ALTER_OPS = {
    "set": controller_pb2.ALTER_CONFIG_SET,
    "delete": controller_pb2.ALTER_CONFIG_DELETE,
    "append": controller_pb2.ALTER_CONFIG_APPEND,
    "subtract": controller_pb2.ALTER_CONFIG_SUBTRACT,
}
RESOURCE_TYPES = {
    "topic": metadata_pb2.CONFIG_RESOURCE_TOPIC,
    "broker": metadata_pb2.CONFIG_RESOURCE_BROKER,
}
#: Codes that say "the same write may succeed if sent again" without the risk that the first one
#: was applied; REQUEST_TIMED_OUT is not among them (its outcome is unknown).
WRITE_RETRY_CODES = frozenset({
    ErrorCode.NOT_CONTROLLER, ErrorCode.BROKER_NOT_AVAILABLE, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION,
})



# ---------------------------------------------------------------------------------- results
@dataclass
class AdminResult(Generic[K, V]):
    """Per-item outcome of a call that names several items."""

    values: dict[K, V] = field(default_factory=dict)
    errors: dict[K, TidelogError] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def __getitem__(self, key: K) -> V:
        """The item's value, or raise its error (KeyError for an item not in the request)."""
        if key in self.errors:
            raise self.errors[key]
        return self.values[key]

    def all(self) -> dict[K, V]:
        """Every value, or raise the first item's error."""
        for error in self.errors.values():
            raise error
        return dict(self.values)


@dataclass(frozen=True)
class NewTopic:
    """A topic to create. -1 means the cluster default (num.partitions,
    default.replication.factor). ``replica_assignment`` maps partition -> broker ids (preferred
    leader first) and then requires num_partitions and replication_factor to be -1."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)
    replica_assignment: Mapping[int, Sequence[int]] | None = None


@dataclass(frozen=True)
class CreatedTopic:
    name: str
    topic_id: str
    num_partitions: int
    replication_factor: int
    configs: dict[str, str]


@dataclass(frozen=True)
class TopicListing:
    name: str
    topic_id: str
    is_internal: bool
    num_partitions: int


@dataclass(frozen=True)
class PartitionDescription:
    """A partition's placement and, where the leader answered, its log offsets (-1: unknown)."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    log_start_offset: int = -1
    high_watermark: int = -1
    log_end_offset: int = -1
    size_bytes: int = -1


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: str
    is_internal: bool
    partitions: tuple[PartitionDescription, ...]


@dataclass(frozen=True)
class ConfigResource:
    """What a config belongs to: ``ConfigResource("topic", "orders")`` or
    ``ConfigResource("broker", "101")`` (``"broker", ""`` is the cluster-wide default)."""

    resource_type: Literal["topic", "broker"]
    name: str

    def __post_init__(self) -> None:
        if self.resource_type not in RESOURCE_TYPES:
            raise ValueError(f"resource_type must be 'topic' or 'broker', got "
                             f"{self.resource_type!r}")


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str
    source: str  # "default", "topic", "cluster" or "broker"
    read_only: bool = False
    sensitive: bool = False
    documentation: str = ""


@dataclass(frozen=True)
class AlterConfigOp:
    """One incremental change: set (the default), delete (back to the default), append to or
    subtract from a list-valued config."""

    name: str
    value: str | None = None
    op: Literal["set", "delete", "append", "subtract"] = "set"

    def __post_init__(self) -> None:
        if self.op not in ALTER_OPS:
            raise ValueError(f"op must be one of {sorted(ALTER_OPS)}, got {self.op!r}")
        if self.op != "delete" and self.value is None:
            raise ValueError(f"config {self.name!r}: op {self.op!r} needs a value")


@dataclass(frozen=True)
class BrokerDescription:
    broker_id: int
    host: str
    port: int
    rack: str
    fenced: bool


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerDescription, ...]
    metadata_offset: int


@dataclass(frozen=True)
class VoterDescription:
    node_id: int
    raft_address: str
    host: str
    port: int
    commit_index: int
    applied_index: int
    metadata_offset: int
    lag: int
    connected: bool
    is_leader: bool


@dataclass(frozen=True)
class QuorumDescription:
    cluster_id: str
    leader_id: int
    leader_epoch: int
    high_watermark: int
    responder_id: int
    metadata_offset: int
    voters: tuple[VoterDescription, ...]


# ---------------------------------------------------------------------------------- helpers
def no_duplicates(items: Iterable[Any]) -> None:
    seen: set[Any] = set()
    for item in items:
        if item in seen:
            raise DuplicateResourceError(f"{item!r} appears more than once in the request")
        seen.add(item)



def topic_id_text(raw: bytes) -> str:
    return str(uuid.UUID(bytes=bytes(raw))) if len(raw) == 16 else ""



def ordered(result: AdminResult[K, V], order: list[K]) -> AdminResult[K, V]:
    """Values and errors in request order; an item the response left out is an error."""
    out: AdminResult[K, V] = AdminResult()
    for key in order:
        if key in result.errors:
            out.errors[key] = result.errors[key]
        elif key in result.values:
            out.values[key] = result.values[key]
        else:
            out.errors[key] = InvalidRequestError(f"the response did not mention {key!r}")
    return out
