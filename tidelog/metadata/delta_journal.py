"""What every aggregate's delta shares (tidelog/metadata/delta.py composes them): the undo
journal that makes a batch all or nothing, and the one way a record is refused.

A delta keeps its changes in flat tables (key -> new value), changed only through
:meth:`UndoJournal.set` and :meth:`UndoJournal.delete`, which remember the old value: a batch
with an invalid record is undone key by key (:meth:`UndoJournal.rollback`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["MISSING", "Ignored", "UndoJournal", "overlaid", "require"]

K = TypeVar("K")
V = TypeVar("V")

#: "No change recorded" in a delta's table (None means "removed").
MISSING: Any = object()


class Ignored(Exception):
    """A record that no longer applies: replay makes it (and its batch) a no-op."""


def require(condition: bool, reason: str | Callable[[], str]) -> None:
    """Refuse the record unless ``condition`` (``reason`` may be a callable, so hot paths build
    their message only when a check fails)."""
    if not condition:
        raise Ignored(reason() if callable(reason) else reason)


class UndoJournal:
    """The old value of every table entry the current batch changed."""

    def __init__(self) -> None:
        self._entries: list[tuple[dict[Any, Any], Any, Any]] = []

    def __bool__(self) -> bool:
        return bool(self._entries)

    def set(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        self._entries.append((table, key, table.get(key, MISSING)))
        table[key] = value

    def delete(self, table: dict[Any, Any], key: Any) -> None:
        if key in table:
            self._entries.append((table, key, table[key]))
            del table[key]

    def rollback(self) -> None:
        for table, key, old in reversed(self._entries):
            if old is MISSING:
                table.pop(key, None)
            else:
                table[key] = old
        self._entries.clear()

    def clear(self) -> None:
        """The batch applied: its changes stay."""
        self._entries.clear()


def overlaid(base: Mapping[K, V], changes: Mapping[K, V | None]) -> dict[K, V]:
    """``base`` with a delta's table laid over it: a value replaces, None removes."""
    merged = dict(base)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged
