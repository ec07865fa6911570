"""Invariant checks that stay on under ``python -O`` (TigerBeetle's assertions, STYLE.md).

A bare ``assert`` vanishes when Python runs with ``-O``. Checks that guard data -- offsets,
sequences, high watermarks, epochs, what a producer has been told -- must not, so they call
:func:`check`, which raises :class:`InvariantViolation` when the condition is false. An
``InvariantViolation`` is a bug in this program, never a client's mistake: callers do not catch
it to answer a request (bad input gets a TidelogError with a Kafka error code); the code around
a request handler logs it and answers UNKNOWN_SERVER_ERROR, and the failed step does nothing
more. ``assert`` stays fine for type narrowing (``assert x is not None`` before use).
"""

from __future__ import annotations

__all__ = ["InvariantViolation", "check"]


class InvariantViolation(Exception):
    """A condition this program relies on does not hold: a bug, never bad input."""


def check(condition: bool, message: str) -> None:
    """Raise :class:`InvariantViolation` with ``message`` unless ``condition`` holds.

    ``message`` is built on every call, even when the check passes: on a hot path write
    ``if not condition: raise InvariantViolation(...)`` instead.
    """
    if not condition:
        raise InvariantViolation(message)
