"""The audit log of refusals (``tidelog.audit``), rate-limited.

Every refused authentication and every ACL refusal is worth a line, but a caller decides how
many refusals it causes: 300 calls naming 300 made-up SASL mechanisms made 300 lines (and, before
labels were restricted to the configured set, 300 metric series). So each kind of line
(authentication, authorization) may write :data:`~tidelog.limits.AUDIT_LINES_PER_WINDOW` lines
per :data:`~tidelog.limits.AUDIT_WINDOW_MS`; the rest are counted, and the next line written
says how many were left out (``... [37 similar lines suppressed]``). The counters of refusals
(tidelog_broker_authentication_failures_total, ..._authorization_failures_total) still count
every one.

:class:`LineBudget` is the pure part (it takes ``now_ms``); :class:`AuditLog` is the logger over
it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tidelog import limits

__all__ = ["AuditLog", "LineBudget", "shown"]

#: Characters of a caller-supplied value (a user name, a mechanism, a resource name) in a line.
SHOWN_CHARS_MAX = 100


def shown(value: str) -> str:
    """A caller's value as an audit line shows it: repr'd, cut to SHOWN_CHARS_MAX."""
    return repr(value if len(value) <= SHOWN_CHARS_MAX else value[:SHOWN_CHARS_MAX] + "...")


class LineBudget:
    """At most ``lines`` per ``window_ms``; counts what it refuses."""

    def __init__(self, *, lines: int = limits.AUDIT_LINES_PER_WINDOW,
                 window_ms: int = limits.AUDIT_WINDOW_MS) -> None:
        self._lines = lines
        self._window_ms = window_ms
        self._window_start_ms: int | None = None
        self._used = 0
        self.suppressed = 0

    def admit(self, now_ms: int) -> int | None:
        """None: leave this line out (counted). Else the line is written, and the number
        says how many were left out since the last one written (to say in it)."""
        if self._window_start_ms is None or now_ms - self._window_start_ms >= self._window_ms:
            self._window_start_ms, self._used = now_ms, 0
        if self._used >= self._lines:
            self.suppressed += 1
            return None
        self._used += 1
        left_out, self.suppressed = self.suppressed, 0
        return left_out


class AuditLog:
    """One kind of audit line, with its own budget."""

    def __init__(self, logger: logging.Logger, budget: LineBudget | None = None) -> None:
        self._log = logger
        self._budget = budget or LineBudget()

    def refusal(self, message: str, *args: Any) -> None:
        left_out = self._budget.admit(time.monotonic_ns() // 1_000_000)
        if left_out is None:
            return
        if left_out:
            message += " [%d similar lines suppressed]"
            args = (*args, left_out)
        self._log.warning(message, *args)
