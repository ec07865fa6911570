"""Errors: one class per ErrorCode with Kafka's names and numbers, and the retriable flags.

Checks the error module against the proto (every code has a class, flags match the "(retriable)"
comments in common.proto) and that codes round-trip to exceptions.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tidelog import errors
from tidelog.v1.common_pb2 import ErrorCode

PROTO = Path(__file__).resolve().parents[2] / "proto" / "tidelog" / "v1" / "common.proto"


def test_every_code_has_a_class_and_the_flags_match_the_proto() -> None:
    text = PROTO.read_text()
    retriable = set(re.findall(r"^\s+([A-Z_]+) = -?\d+;.*\(retriable\)", text, re.M))
    for value in ErrorCode.DESCRIPTOR.values:
        if value.number == 0:
            continue
        cls = errors.ERROR_CLASSES[value.number]
        assert cls.retriable == (value.name in retriable), value.name


@pytest.mark.parametrize(
    ("code", "number"),
    [
        ("NOT_LEADER_OR_FOLLOWER", 6),
        ("NOT_ENOUGH_REPLICAS", 19),
        ("NOT_CONTROLLER", 41),
        ("CORRUPT_MESSAGE", 2),
        ("OFFSET_OUT_OF_RANGE", 1),
        ("FENCED_LEADER_EPOCH", 74),
    ],
)
def test_kafka_numbers(code: str, number: int) -> None:
    assert ErrorCode.Value(code) == number


def test_codes_round_trip_to_exceptions() -> None:
    err = errors.error_for_code(ErrorCode.NOT_LEADER_OR_FOLLOWER, "broker 2 leads p0")
    assert isinstance(err, errors.NotLeaderOrFollowerError)
    assert err.retriable and err.code_name == "NOT_LEADER_OR_FOLLOWER"
    assert str(err) == "NOT_LEADER_OR_FOLLOWER: broker 2 leads p0"
    with pytest.raises(errors.InvalidConfigError):
        errors.raise_for_code(ErrorCode.INVALID_CONFIG, "retention.ms must be a number")
    errors.raise_for_code(ErrorCode.NONE)  # no exception
    unknown = errors.error_for_code(9999, "??")
    assert isinstance(unknown, errors.UnknownServerError)
