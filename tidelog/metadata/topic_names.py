"""Topic name rules, as Kafka's ``org.apache.kafka.common.internals.Topic``.

A legal name is 1..249 characters of ASCII letters, digits, ``.``, ``_`` and ``-``, and is not
``.`` or ``..``. Because ``.`` and ``_`` both map to ``_`` in metric names, two topics whose names
differ only there collide; Kafka refuses to create the second one (INVALID_TOPIC_EXCEPTION), and
so do we. Names starting with ``__`` are legal, as in Kafka: the brokers create the internal
``__consumer_offsets`` topic through CreateTopics like any other.
"""

from __future__ import annotations

import re

from tidelog import limits
from tidelog.errors import InvalidTopicError

__all__ = [
    "INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "has_collision_chars",
    "is_internal",
    "unify_collision_chars",
    "validate_topic_name",
]

#: The group coordinator's topic (Kafka's ``Topic.GROUP_METADATA_TOPIC_NAME``): consumer-group
#: records and committed offsets. Clients may not produce to it (INVALID_TOPIC_EXCEPTION).
OFFSETS_TOPIC = "__consumer_offsets"

#: Topics the brokers create and rely on; they may not be deleted, nor produced to by clients.
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError naming the rule ``name`` breaks; return if it is legal."""
    if not name:
        raise InvalidTopicError("topic name is illegal: it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is illegal: it can't be '.' or '..'")
    if len(name) > limits.TOPIC_NAME_LENGTH_MAX:
        raise InvalidTopicError(
            f"topic name is illegal: it can't be longer than {limits.TOPIC_NAME_LENGTH_MAX} "
            f"characters (it has {len(name)})"
        )
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: it contains characters other than ASCII "
            "alphanumerics, '.', '_' and '-'"
        )


def has_collision_chars(name: str) -> bool:
    """Whether ``name`` contains ``.`` or ``_`` (so it may collide with another name)."""
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    """``name`` with every ``.`` replaced by ``_``: two names collide when these are equal."""
    return name.replace(".", "_")


def is_internal(name: str) -> bool:
    """Whether ``name`` is one of the internal topics the brokers manage."""
    return name in INTERNAL_TOPICS
