"""The public surface of the client library: curated exports, typed errors, argument checks.

``tidelog.__all__`` and ``tidelog.client.__all__`` must be exactly the curated lists (a new public
name is a decision, not an accident), every exported name must resolve and carry a docstring, and
constructing clients with contradictory or malformed settings must fail at once with ValueError or
TypeError, before any connection is attempted (the bootstrap addresses here are never dialled).
"""

from __future__ import annotations

import pytest

import tidelog
import tidelog.client
from tidelog.client import Admin, AlterConfigOp, ConfigResource, Consumer, Producer
from tidelog.client.admin import AdminResult
from tidelog.errors import InvalidConfigError, TidelogError

UNUSED = "127.0.0.1:1"  # constructors do not connect

TOP_LEVEL = [
    "AclBinding",
    "AclFilter",
    "Admin",
    "Consumer",
    "ConsumerRecord",
    "NewTopic",
    "Producer",
    "RecordMetadata",
    "TidelogError",
    "TopicPartition",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "errors",
]
CLIENT = [
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
    "EARLIEST",
    "FutureRecordMetadata",
    "GroupDescription",
    "GroupListing",
    "GroupMemberDescription",
    "GroupOffset",
    "LATEST",
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


def test_top_level_all_is_the_curated_list() -> None:
    assert sorted(tidelog.__all__) == TOP_LEVEL
    for name in TOP_LEVEL:
        assert getattr(tidelog, name) is not None
    assert tidelog.TidelogError is tidelog.errors.TidelogError
    assert tidelog.Producer is tidelog.client.Producer
    with pytest.raises(AttributeError):
        tidelog.NoSuchThing  # noqa: B018


def test_client_all_is_the_curated_list_with_docstrings() -> None:
    assert sorted(tidelog.client.__all__) == CLIENT
    for name in CLIENT:
        obj = getattr(tidelog.client, name)
        assert obj.__doc__, f"{name} needs a docstring"
    for cls in (Producer, Consumer, Admin):
        for attr, member in vars(cls).items():
            if callable(member) and not attr.startswith("_"):
                assert member.__doc__, f"{cls.__name__}.{attr} needs a docstring"


def test_consumer_errors_are_typed_error_codes() -> None:
    assert issubclass(tidelog.client.CorruptRecordError, tidelog.errors.CorruptMessageError)
    assert issubclass(tidelog.client.NoOffsetForPartitionError,
                      tidelog.errors.OffsetOutOfRangeError)
    # They subclass, so the one-class-per-code table is unchanged.
    assert tidelog.errors.ERROR_CLASSES[2] is tidelog.errors.CorruptMessageError
    assert issubclass(tidelog.client.ProducerSenderError, tidelog.errors.UnknownServerError)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"acks": 2},
        {"acks": "all", "enable_idempotence": True, "max_in_flight": 6},
        {"acks": 1, "enable_idempotence": True},
        {"retries": 0, "enable_idempotence": True},
        {"batch_size": 0},
        {"linger_ms": -1},
        {"delivery_timeout_ms": 1_000, "request_timeout_ms": 30_000},
        {"max_request_size": 2**40},
    ],
)
def test_producer_refuses_bad_settings(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Producer(UNUSED, **kwargs)  # type: ignore[arg-type]


def test_idempotence_defaults_on_and_yields_to_acks() -> None:
    with Producer(UNUSED) as on, Producer(UNUSED, acks=1) as off:
        assert on.idempotent and not off.idempotent


def test_producer_refuses_malformed_records_before_any_io() -> None:
    with Producer(UNUSED, max_block_ms=0) as producer:
        with pytest.raises(TypeError):
            producer.send("t", "a string")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            producer.send("t", b"v", headers=[("k", "v")])  # type: ignore[list-item]
        with pytest.raises(ValueError):
            producer.send("t", b"v", partition=-1)
        with pytest.raises(tidelog.errors.InvalidTopicError):
            producer.send("bad topic!", b"v")
        with pytest.raises(tidelog.errors.MessageTooLargeError):
            producer.send("t", b"x" * 2_000_000)
    with pytest.raises(RuntimeError):
        producer.send("t", b"v")


def test_unknown_compression_is_a_typed_error() -> None:
    with pytest.raises(tidelog.errors.UnsupportedCompressionTypeError):
        Producer(UNUSED, compression_type="snappy")


@pytest.mark.parametrize(
    "kwargs",
    [{"auto_offset_reset": "smallest"}, {"fetch_max_bytes": 0}, {"fetch_max_wait_ms": 10**6}],
)
def test_consumer_refuses_bad_settings(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Consumer(UNUSED, **kwargs)  # type: ignore[arg-type]


def test_consumer_misuse() -> None:
    with Consumer(UNUSED) as consumer:
        with pytest.raises(RuntimeError):
            consumer.poll(0)
        with pytest.raises(tidelog.errors.InvalidTopicError):
            consumer.assign([("bad topic!", 0)])
        consumer.assign([("t", 0)])
        with pytest.raises(ValueError):
            consumer.seek(tidelog.TopicPartition("t", 1), 0)
        with pytest.raises(ValueError):
            consumer.seek(tidelog.TopicPartition("t", 0), -5)
    with pytest.raises(RuntimeError):
        consumer.poll(0)


def test_admin_value_types_check_themselves() -> None:
    with pytest.raises(ValueError):
        ConfigResource("group", "g")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        AlterConfigOp("retention.ms", None, "set")
    with pytest.raises(ValueError):
        AlterConfigOp("retention.ms", "1", "merge")  # type: ignore[arg-type]


def test_admin_result_semantics() -> None:
    error = InvalidConfigError("retention.ms must be a number")
    result: AdminResult[str, int] = AdminResult({"a": 1}, {"b": error})
    assert not result.ok
    assert result["a"] == 1
    with pytest.raises(InvalidConfigError):
        result["b"]
    with pytest.raises(TidelogError) as info:
        result.all()
    assert info.value.code == error.code and not info.value.retriable
    assert AdminResult({"a": 1}).all() == {"a": 1}


@pytest.mark.parametrize("client_id", ["naïve", "tab\there", "x" * 256])
def test_a_client_id_that_cannot_travel_as_grpc_metadata_is_refused(client_id: str) -> None:
    with pytest.raises(ValueError, match="client_id must be printable ASCII"):
        Consumer("127.0.0.1:1", client_id=client_id)
