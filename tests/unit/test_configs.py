"""Topic config definitions (tidelog/configs.py): Kafka's names and defaults, validation with
messages naming the config and the reason, canonical forms, and resolution of the effective
config from topic overrides, cluster defaults and built-in defaults."""

from __future__ import annotations

import pytest

from tidelog import configs, limits
from tidelog.errors import InvalidConfigError

KAFKA_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "delete.retention.ms": "86400000",
    "flush.messages": str(2**63 - 1),
    "flush.ms": str(2**63 - 1),
    "max.compaction.lag.ms": str(2**63 - 1),
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}


def test_topic_configs_have_kafka_names_and_defaults() -> None:
    assert {name: d.default for name, d in configs.TOPIC_CONFIGS.items()} == KAFKA_DEFAULTS
    for definition in configs.TOPIC_CONFIGS.values():
        assert definition.doc and "\n" not in definition.doc


def test_broker_level_names_map_to_the_same_definitions() -> None:
    assert configs.BROKER_DEFAULT_CONFIGS["log.retention.ms"].name == "retention.ms"
    assert configs.BROKER_DEFAULT_CONFIGS["log.roll.ms"].name == "segment.ms"
    assert configs.BROKER_DEFAULT_CONFIGS["message.max.bytes"].name == "max.message.bytes"
    assert len(configs.BROKER_DEFAULT_CONFIGS) == len(configs.TOPIC_CONFIGS)


@pytest.mark.parametrize(
    ("name", "value", "canonical"),
    [
        ("retention.ms", " 3600000 ", "3600000"),
        ("retention.ms", "+5", "5"),
        ("retention.ms", "-1", "-1"),
        ("retention.bytes", "-1", "-1"),
        ("unclean.leader.election.enable", "TRUE", "true"),
        ("unclean.leader.election.enable", "False", "false"),
        ("cleanup.policy", "compact, delete", "compact,delete"),
        ("compression.type", "zstd", "zstd"),
        ("message.timestamp.type", "LogAppendTime", "LogAppendTime"),
        ("min.insync.replicas", "2", "2"),
        ("max.message.bytes", str(limits.MESSAGE_BYTES_MAX_CONFIGURABLE),
         str(limits.MESSAGE_BYTES_MAX_CONFIGURABLE)),
        ("segment.bytes", str(1024 * 1024), str(1024 * 1024)),
        ("flush.messages", "1", "1"),
        ("flush.ms", "0", "0"),
    ],
)
def test_valid_values_are_canonicalized(name: str, value: str, canonical: str) -> None:
    assert configs.validate_topic_config(name, value) == canonical


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("no.such", "1", "unknown topic config 'no.such'"),
        ("retention.ms", "1h", "retention.ms: value '1h' is not an integer"),
        ("retention.ms", "1_000", "is not an integer"),
        ("retention.ms", "", "is not an integer"),
        ("retention.ms", "-2", "outside the allowed range [-1,"),
        ("retention.ms", str(2**63), "outside the allowed range"),
        ("segment.bytes", "1000", "segment.bytes: value 1000 is outside the allowed range"),
        ("segment.bytes", str(2**31), "outside the allowed range"),
        ("min.insync.replicas", "0", "min.insync.replicas: value 0"),
        ("min.insync.replicas", "17", "outside the allowed range [1, 16]"),
        ("max.message.bytes", "67108865", "outside the allowed range [0, 67108864]"),
        ("flush.messages", "0", "flush.messages: value 0"),
        ("unclean.leader.election.enable", "yes", "is not true or false"),
        ("cleanup.policy", "", "must name at least one item"),
        ("cleanup.policy", "delete,delete", "repeats an item"),
        ("cleanup.policy", "shred", "'shred' is not one of delete, compact"),
        ("compression.type", "snappy", "(snappy is not supported)"),
        ("message.timestamp.type", "createtime", "is not one of CreateTime, LogAppendTime"),
        ("retention.ms", "9" * 2000, "longer than"),
    ],
)
def test_invalid_values_are_refused_with_a_reason(name: str, value: str, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=None) as raised:
        configs.validate_topic_config(name, value)
    assert message in raised.value.message


def test_broker_default_validation_uses_broker_names() -> None:
    assert configs.validate_broker_default_config("log.retention.ms", "10") == "10"
    with pytest.raises(InvalidConfigError, match=r"unknown broker config 'retention\.ms'"):
        configs.validate_broker_default_config("retention.ms", "10")


def test_resolve_prefers_topic_then_cluster_then_default() -> None:
    resolved = configs.TopicConfig.resolve(
        {"retention.ms": "5"},
        {"log.retention.ms": "7", "log.retention.bytes": "100", "min.insync.replicas": "2"},
    )
    assert resolved.retention_ms == 5
    assert resolved.retention_bytes == 100
    assert resolved.min_insync_replicas == 2
    assert resolved.cleanup_policy == frozenset({"delete"})
    assert resolved.unclean_leader_election_enable is False


def test_resolve_defaults_are_kafkas() -> None:
    resolved = configs.TopicConfig.resolve()
    assert resolved.retention_ms == 7 * 24 * 3600 * 1000
    assert resolved.max_message_bytes == limits.MESSAGE_BYTES_MAX
    assert resolved.flush_messages == resolved.flush_ms == 2**63 - 1
    assert resolved.compression_type == "producer"


def test_resolve_refuses_invalid_values() -> None:
    with pytest.raises(InvalidConfigError):
        configs.TopicConfig.resolve({"retention.ms": "soon"})


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "-0.1", "1.5"])
def test_min_cleanable_dirty_ratio_is_a_number_in_0_1(value: str) -> None:
    with pytest.raises(InvalidConfigError, match=r"min\.cleanable\.dirty\.ratio"):
        configs.validate_topic_config("min.cleanable.dirty.ratio", value)


def test_compaction_configs_resolve() -> None:
    assert configs.validate_topic_config("min.cleanable.dirty.ratio", " 0.25 ") == "0.25"
    assert configs.validate_topic_config("cleanup.policy", "compact, delete") == "compact,delete"
    resolved = configs.TopicConfig.resolve({"min.cleanable.dirty.ratio": "1",
                                            "cleanup.policy": "compact"})
    assert resolved.min_cleanable_dirty_ratio == 1.0 and resolved.cleanup_policy == {"compact"}
    assert (resolved.delete_retention_ms, resolved.min_compaction_lag_ms) == (86_400_000, 0)
