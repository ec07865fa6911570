"""Topic configs: Kafka's names, types, defaults, validators and one-line docs.

Shared by the controller (which validates AlterConfigs/CreateTopics and stores the canonical
strings in ``ConfigRecord``s), the brokers (which enforce the values: retention, segment roll,
flush, min.insync.replicas...) and the CLI (which documents them). It imports nothing from
``controller`` or ``broker``.

Every topic config has a cluster-wide default under Kafka's broker-level name (``retention.ms``
defaults from ``log.retention.ms``, ``segment.ms`` from ``log.roll.ms``...). The effective value
of a topic config is, in order: the topic's override, the cluster default set as a ``BROKER``
config resource named ``""``, the built-in default below. :meth:`TopicConfig.resolve` does that.

Values are kept as canonical strings (what :func:`validate_topic_config` returns): booleans as
``true``/``false``, numbers in plain decimal, lists without spaces. Every controller stores the
same bytes for the same intent, so images and their digests agree.

Defaults are Kafka's, with these differences (docs/decisions.md, "Controller metadata"):
``segment.bytes`` has Kafka 4.0's minimum (1 MiB) rather than 3.x's 14 bytes;
``max.message.bytes`` is capped at ``limits.MESSAGE_BYTES_MAX_CONFIGURABLE`` and
``min.insync.replicas`` at ``limits.REPLICATION_FACTOR_MAX`` (higher can never be met);
``compression.type`` has no ``snappy`` (not supported, see common.proto). ``flush.messages`` and
``flush.ms`` keep Kafka's names and defaults (never fsync): the broker's node-level
``log.flush.policy`` is the same knob for the whole node (``every_batch`` = flush.messages 1,
``interval`` = flush.ms).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from tidelog import limits
from tidelog.errors import InvalidConfigError
from tidelog.invariants import InvariantViolation, check

__all__ = [
    "BROKER_DEFAULT_CONFIGS",
    "TOPIC_CONFIGS",
    "ConfigDef",
    "ConfigType",
    "TopicConfig",
    "canonical_value",
    "join_list",
    "split_list",
    "validate_broker_default_config",
    "validate_topic_config",
]

LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
#: A config value longer than this is refused before parsing (no config needs more).
CONFIG_VALUE_LENGTH_MAX = 1024

_INTEGER = re.compile(r"[+-]?[0-9]+")


class ConfigType(enum.Enum):
    """Kafka's ConfigDef.Type, for the types topic configs use."""

    BOOLEAN = "boolean"
    INT = "int"  # 32-bit signed
    LONG = "long"  # 64-bit signed
    DOUBLE = "double"  # a finite number (min.cleanable.dirty.ratio)
    STRING = "string"
    LIST = "list"  # comma-separated strings


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One topic config: its names, type, default and what values it accepts."""

    name: str  # topic-level name (retention.ms)
    broker_name: str  # Kafka's broker-level name for the cluster default (log.retention.ms)
    type: ConfigType
    default: str  # canonical string form
    doc: str  # one line: what it does and its unit
    min_value: int | None = None  # for INT/LONG/DOUBLE, inclusive
    max_value: int | None = None  # for INT/LONG/DOUBLE, inclusive
    choices: tuple[str, ...] = ()  # for STRING and LIST items; empty = any

    def __post_init__(self) -> None:
        if not (self.name and self.broker_name and self.doc):
            raise InvariantViolation(f"config {self.name!r} needs a name, a broker name and a doc")
        # The default must satisfy the definition's own validator.
        if canonical_value(self, self.default) != self.default:
            raise InvariantViolation(f"{self.name}: the default fails its own validator")


def split_list(value: str) -> list[str]:
    """The items of a LIST value: comma-separated, blanks around items ignored."""
    return [item.strip() for item in value.split(",") if item.strip()]


def join_list(items: list[str]) -> str:
    """The canonical string of a LIST value."""
    return ",".join(items)


def _canonical_integer(definition: ConfigDef, text: str) -> str:
    if not _INTEGER.fullmatch(text):
        raise InvalidConfigError(
            f"{definition.name}: value {text!r} is not an integer ({definition.type.value})"
        )
    number = int(text)
    lo, hi = (INT_MIN, INT_MAX) if definition.type is ConfigType.INT else (LONG_MIN, LONG_MAX)
    if definition.min_value is not None:
        lo = max(lo, definition.min_value)
    if definition.max_value is not None:
        hi = min(hi, definition.max_value)
    if not lo <= number <= hi:
        raise InvalidConfigError(
            f"{definition.name}: value {number} is outside the allowed range [{lo}, {hi}]"
        )
    return str(number)


def _canonical_double(definition: ConfigDef, text: str) -> str:
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise InvalidConfigError(f"{definition.name}: value {text!r} is not a finite number")
    lo, hi = definition.min_value, definition.max_value
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        raise InvalidConfigError(
            f"{definition.name}: value {number} is outside the allowed range [{lo}, {hi}]"
        )
    return repr(number)


def _check_choice(definition: ConfigDef, item: str) -> None:
    if definition.choices and item not in definition.choices:
        hint = " (snappy is not supported)" if item == "snappy" else ""
        raise InvalidConfigError(
            f"{definition.name}: value {item!r} is not one of {', '.join(definition.choices)}"
            f"{hint}"
        )


def canonical_value(definition: ConfigDef, value: str) -> str:
    """``value`` checked against ``definition`` and put in canonical form.

    Raises InvalidConfigError naming the config and why the value is refused.
    """
    if len(value) > CONFIG_VALUE_LENGTH_MAX:
        raise InvalidConfigError(
            f"{definition.name}: value is longer than {CONFIG_VALUE_LENGTH_MAX} characters"
        )
    text = value.strip()
    if definition.type is ConfigType.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise InvalidConfigError(f"{definition.name}: value {text!r} is not true or false")
        return text.lower()
    if definition.type in (ConfigType.INT, ConfigType.LONG):
        return _canonical_integer(definition, text)
    if definition.type is ConfigType.DOUBLE:
        return _canonical_double(definition, text)
    if definition.type is ConfigType.STRING:
        _check_choice(definition, text)
        return text
    if definition.type is not ConfigType.LIST:
        raise InvariantViolation(f"{definition.name} is not a list config")
    items = split_list(text)
    if not items:
        raise InvalidConfigError(f"{definition.name}: value must name at least one item")
    for item in items:
        _check_choice(definition, item)
    if len(set(items)) != len(items):
        raise InvalidConfigError(f"{definition.name}: value {text!r} repeats an item")
    return join_list(items)


def _long(
    name: str, broker_name: str, default: int, doc: str, *, lo: int, hi: int = LONG_MAX
) -> ConfigDef:
    return ConfigDef(name, broker_name, ConfigType.LONG, str(default), doc, lo, hi)


def _int(
    name: str, broker_name: str, default: int, doc: str, *, lo: int, hi: int = INT_MAX
) -> ConfigDef:
    return ConfigDef(name, broker_name, ConfigType.INT, str(default), doc, lo, hi)


_DEFS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "cleanup.policy", "log.cleanup.policy", ConfigType.LIST, "delete",
        "delete: drop old data by retention.ms/retention.bytes; compact: keep the latest record "
        "per key (the log cleaner; tombstones go after delete.retention.ms); compact,delete: both",
        choices=("delete", "compact"),
    ),
    ConfigDef(
        "compression.type", "compression.type", ConfigType.STRING, "producer",
        "codec for stored batches; only producer (keep the producer's codec) is applied so "
        "far: other values are accepted and stored, and batches are still kept as produced",
        choices=("uncompressed", "gzip", "lz4", "zstd", "producer"),
    ),
    _long(
        "delete.retention.ms", "log.cleaner.delete.retention.ms", 86_400_000,
        "compacted topics: how long a tombstone (null value) stays after its append, ms",
        lo=0,
    ),
    _long(
        "flush.messages", "log.flush.interval.messages", LONG_MAX,
        "fsync after this many batches appended (1 = every batch); the default never forces one",
        lo=1,
    ),
    _long(
        "flush.ms", "log.flush.interval.ms", LONG_MAX,
        "fsync when the oldest unflushed batch is this old, ms; the default never forces one",
        lo=0,
    ),
    _int(
        "max.message.bytes", "message.max.bytes", limits.MESSAGE_BYTES_MAX,
        "largest record batch the leader accepts, bytes (after compression)",
        lo=0, hi=limits.MESSAGE_BYTES_MAX_CONFIGURABLE,
    ),
    ConfigDef(
        "message.timestamp.type", "log.message.timestamp.type", ConfigType.STRING, "CreateTime",
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps the leader's clock",
        choices=("CreateTime", "LogAppendTime"),
    ),
    _long(
        "max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", LONG_MAX,
        "compacted topics: dirty data older than this is cleaned whatever the dirty ratio, ms",
        lo=1,
    ),
    ConfigDef(
        "min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", ConfigType.DOUBLE, "0.5",
        "compacted topics: clean when uncleaned bytes are at least this share of the cleanable log",
        min_value=0, max_value=1,
    ),
    _long(
        "min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", 0,
        "compacted topics: a record stays uncompacted at least this long after its timestamp, ms",
        lo=0,
    ),
    _int(
        "min.insync.replicas", "min.insync.replicas", 1,
        "fewest in-sync replicas for an acks=all produce to succeed (else NOT_ENOUGH_REPLICAS)",
        lo=1, hi=limits.REPLICATION_FACTOR_MAX,
    ),
    _long(
        "retention.bytes", "log.retention.bytes", -1,
        "per-partition size above which the oldest data is deleted, bytes; -1 = no limit",
        lo=-1,
    ),
    _long(
        "retention.ms", "log.retention.ms", 7 * 24 * 3600 * 1000,
        "age after which data is deleted, ms; -1 = keep forever",
        lo=-1,
    ),
    _int(
        "segment.bytes", "log.segment.bytes", 1024 * 1024 * 1024,
        "size of the unit retention deletes (and the cleaner's active tail) at once, bytes",
        lo=1024 * 1024,
    ),
    _long(
        "segment.ms", "log.roll.ms", 7 * 24 * 3600 * 1000,
        "age after which a new retention unit starts even if not full, ms",
        lo=1,
    ),
    ConfigDef(
        "unclean.leader.election.enable", "unclean.leader.election.enable", ConfigType.BOOLEAN,
        "false",
        "elect an out-of-sync replica when no in-sync one is alive (may lose committed data)",
    ),
)

#: Topic configs by their topic-level name, in name order.
TOPIC_CONFIGS: Mapping[str, ConfigDef] = {d.name: d for d in sorted(_DEFS, key=lambda d: d.name)}
#: The same definitions by Kafka's broker-level (cluster default) name.
BROKER_DEFAULT_CONFIGS: Mapping[str, ConfigDef] = {
    d.broker_name: d for d in sorted(_DEFS, key=lambda d: d.broker_name)
}
check(
    len(TOPIC_CONFIGS) == len(BROKER_DEFAULT_CONFIGS) == len(_DEFS),
    "every config has a topic name and a broker default",
)


def validate_topic_config(name: str, value: str) -> str:
    """The canonical form of topic config ``name`` = ``value``, or InvalidConfigError."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise InvalidConfigError(f"unknown topic config {name!r}")
    return canonical_value(definition, value)


def validate_broker_default_config(name: str, value: str) -> str:
    """The canonical form of a cluster/broker default (broker-level name), or InvalidConfigError."""
    definition = BROKER_DEFAULT_CONFIGS.get(name)
    if definition is None:
        raise InvalidConfigError(f"unknown broker config {name!r} (not a topic config default)")
    return canonical_value(definition, value)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """The effective, typed configuration of one topic, as brokers enforce it."""

    cleanup_policy: frozenset[str]
    compression_type: str
    delete_retention_ms: int
    flush_messages: int
    flush_ms: int
    max_compaction_lag_ms: int
    max_message_bytes: int
    message_timestamp_type: str
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    min_insync_replicas: int
    retention_bytes: int
    retention_ms: int
    segment_bytes: int
    segment_ms: int
    unclean_leader_election_enable: bool

    @classmethod
    def resolve(
        cls,
        topic_overrides: Mapping[str, str] | None = None,
        cluster_defaults: Mapping[str, str] | None = None,
    ) -> TopicConfig:
        """Topic override, else cluster default (broker-level name), else built-in default.

        Raises InvalidConfigError if a given value is invalid (values from the metadata image
        never are: the controller validated them).
        """
        topic_overrides = topic_overrides or {}
        cluster_defaults = cluster_defaults or {}
        values: dict[str, str] = {}
        for definition in _DEFS:
            raw = topic_overrides.get(definition.name)
            if raw is None:
                raw = cluster_defaults.get(definition.broker_name, definition.default)
            values[definition.name] = canonical_value(definition, raw)
        return cls(
            cleanup_policy=frozenset(split_list(values["cleanup.policy"])),
            compression_type=values["compression.type"],
            delete_retention_ms=int(values["delete.retention.ms"]),
            flush_messages=int(values["flush.messages"]),
            flush_ms=int(values["flush.ms"]),
            max_compaction_lag_ms=int(values["max.compaction.lag.ms"]),
            max_message_bytes=int(values["max.message.bytes"]),
            message_timestamp_type=values["message.timestamp.type"],
            min_cleanable_dirty_ratio=float(values["min.cleanable.dirty.ratio"]),
            min_compaction_lag_ms=int(values["min.compaction.lag.ms"]),
            min_insync_replicas=int(values["min.insync.replicas"]),
            retention_bytes=int(values["retention.bytes"]),
            retention_ms=int(values["retention.ms"]),
            segment_bytes=int(values["segment.bytes"]),
            segment_ms=int(values["segment.ms"]),
            unclean_leader_election_enable=values["unclean.leader.election.enable"] == "true",
        )
