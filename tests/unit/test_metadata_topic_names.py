"""Topic name rules (controller/topic_names.py), as Kafka's Topic.validate."""

from __future__ import annotations

import pytest

from tidelog.errors import InvalidTopicError
from tidelog.metadata import topic_names


@pytest.mark.parametrize("name", ["a", "A-b_c.d", "x" * 249, "__consumer_offsets", "123"])
def test_legal_names(name: str) -> None:
    topic_names.validate_topic_name(name)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "can't be empty"),
        (".", "can't be '.' or '..'"),
        ("..", "can't be '.' or '..'"),
        ("x" * 250, "longer than 249 characters"),
        ("a b", "characters other than ASCII alphanumerics"),
        ("tópico", "characters other than ASCII alphanumerics"),
        ("a\n", "characters other than ASCII alphanumerics"),
        ("a/b", "characters other than ASCII alphanumerics"),
    ],
)
def test_illegal_names(name: str, reason: str) -> None:
    with pytest.raises(InvalidTopicError) as raised:
        topic_names.validate_topic_name(name)
    assert reason in raised.value.message


def test_collisions() -> None:
    assert topic_names.has_collision_chars("a.b") and topic_names.has_collision_chars("a_b")
    assert not topic_names.has_collision_chars("ab-c")
    assert topic_names.unify_collision_chars("a.b_c") == "a_b_c"
    assert topic_names.is_internal("__consumer_offsets") and not topic_names.is_internal("__x")
