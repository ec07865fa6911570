"""The Fault protocol: one fault, its start and its heal, and the window it was active.

The scenario runner drives every fault the same way: ``start()``, hold it ``duration_s``
(a hint the fault suggests; a pause longer than the session timeout, say), ``heal()``, and
records ``name`` and ``targets`` as the history's nemesis ``start``/``stop`` operations
(chaos/history.py's Fault). ``description`` is one line for ``tidelog chaos list``.

:class:`FaultBase` does the bookkeeping every fault shares: ``start`` twice, or ``heal``
before ``start``, raises :class:`FaultStateError` (a bug of the schedule, not of the cluster);
``heal`` after a failed ``start`` still runs, so a half-applied fault is undone; the window
is measured on the monotonic clock (``time.monotonic_ns``), which the run's history uses too.
Subclasses implement ``_start`` (returns the targets it hit) and ``_heal``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["Fault", "FaultBase", "FaultStateError", "Window"]


class FaultStateError(RuntimeError):
    """A fault started twice, or healed before it started."""


@dataclass(frozen=True, slots=True)
class Window:
    """When a fault was active, on the monotonic clock; ``healed_ns`` None while it is."""

    started_ns: int
    healed_ns: int | None = None


@runtime_checkable
class Fault(Protocol):
    """What the runner needs of a fault."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def targets(self) -> tuple[str, ...]:
        """The nodes (or links, ``source>target``) the fault hit; empty before it started."""
        ...

    @property
    def window(self) -> Window | None:
        """None until started."""
        ...

    @property
    def duration_s(self) -> float:
        """How long the runner should hold it before healing."""
        ...

    def start(self) -> None: ...

    def heal(self) -> None: ...


class FaultBase:
    """Shared bookkeeping of a fault (see the module docstring)."""

    def __init__(self, name: str, description: str, *, duration_s: float) -> None:
        if duration_s < 0:
            raise ValueError(f"{name}: duration_s must be >= 0, not {duration_s}")
        self._name = name
        self._description = description
        self._duration_s = duration_s
        self._targets: tuple[str, ...] = ()
        self._window: Window | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def targets(self) -> tuple[str, ...]:
        return self._targets

    @property
    def window(self) -> Window | None:
        return self._window

    @property
    def duration_s(self) -> float:
        return self._duration_s

    @property
    def active(self) -> bool:
        return self._window is not None and self._window.healed_ns is None

    def start(self) -> None:
        if self.active:
            raise FaultStateError(f"{self._name} is already active")
        self._window = Window(time.monotonic_ns())
        self._targets = ()
        self._targets = tuple(self._start())

    def heal(self) -> None:
        if not self.active or self._window is None:
            raise FaultStateError(f"{self._name} is not active")
        try:
            self._heal()
        finally:
            self._window = Window(self._window.started_ns, time.monotonic_ns())

    def _start(self) -> tuple[str, ...]:
        raise NotImplementedError

    def _heal(self) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name} targets={self._targets}>"
