"""The audit log's budget (broker/authz/audit.py): a caller cannot write unbounded lines."""

from __future__ import annotations

from tidelog.broker.authz.audit import LineBudget, shown


def test_lines_past_the_budget_are_counted_and_reported_by_the_next_window() -> None:
    budget = LineBudget(lines=3, window_ms=1_000)
    admitted = [budget.admit(now_ms=t) for t in range(0, 100, 10)]  # ten lines in one window
    assert admitted == [0, 0, 0, None, None, None, None, None, None, None]
    assert budget.suppressed == 7
    assert budget.admit(now_ms=1_000) == 7  # the first line of the next window tells
    assert budget.admit(now_ms=1_001) == 0
    assert budget.suppressed == 0


def test_a_callers_value_is_shown_quoted_and_cut() -> None:
    assert shown("alice") == "'alice'"
    assert shown("x" * 500) == repr("x" * 100 + "...")
    assert shown("evil\nline") == "'evil\\nline'"  # no forged second line
