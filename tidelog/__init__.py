"""Tidelog: a distributed, replicated event log (shared library, client and CLI).

The client library is importable from here::

    from tidelog import Producer, Consumer, Admin, NewTopic, TopicPartition

Names are imported lazily (PEP 562), so servers and tools that only need ``tidelog.errors`` or
``tidelog.record_batch`` do not load the client. ``tidelog.client`` exports the full client API.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tidelog import errors
    from tidelog.client import (
        AclBinding,
        AclFilter,
        Admin,
        Consumer,
        ConsumerRecord,
        NewTopic,
        Producer,
        RecordMetadata,
        TopicPartition,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )
    from tidelog.errors import TidelogError

__all__ = [
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

_LAZY = {
    "AclBinding": "tidelog.client",
    "AclFilter": "tidelog.client",
    "Admin": "tidelog.client",
    "Consumer": "tidelog.client",
    "ConsumerRecord": "tidelog.client",
    "NewTopic": "tidelog.client",
    "Producer": "tidelog.client",
    "RecordMetadata": "tidelog.client",
    "TopicPartition": "tidelog.client",
    "UserScramCredentialDeletion": "tidelog.client",
    "UserScramCredentialUpsertion": "tidelog.client",
    "TidelogError": "tidelog.errors",
}


def __getattr__(name: str) -> Any:
    if name == "errors":
        return importlib.import_module("tidelog.errors")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tidelog' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
