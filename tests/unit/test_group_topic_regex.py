"""broker/group/topic_regex.py: a subscription regex is compiled with RE2 (linear-time
matching, bounded pattern and program), fully matched against topic names, never matches an
internal topic, and a bad one is INVALID_REGULAR_EXPRESSION naming it. Pure: no broker."""

from __future__ import annotations

import pytest
from group_testkit import topic_metadata

from tidelog.broker.group.topic_regex import (
    REGEX_LENGTH_MAX,
    RegexTopics,
    compile_regex,
    matching_topics,
)
from tidelog.errors import InvalidRegularExpressionError

TOPICS = {name: topic_metadata(name, 1) for name in (
    "orders.eu", "orders.us", "old.orders.eu", "audit", "__consumer_offsets")}


def test_full_match_and_internal_topics_left_out() -> None:
    assert matching_topics(r"orders\..*", TOPICS) == {"orders.eu", "orders.us"}
    assert matching_topics(".*", TOPICS) == {"orders.eu", "orders.us", "old.orders.eu", "audit"}
    assert matching_topics("__consumer_offsets", TOPICS) == frozenset()
    assert matching_topics("aud", TOPICS) == frozenset()  # a full match, not a search


@pytest.mark.parametrize(("pattern", "reason"), [
    ("(orders", "missing )"),
    (r"(o)\1", "invalid escape sequence"),      # back-references need backtracking
    ("(?=orders)o.*", "invalid perl operator"),  # so does look-ahead
    ("a{1000}{1000}", "bad repetition operator"),
])
def test_what_re2_refuses_is_invalid_regular_expression(pattern: str, reason: str) -> None:
    with pytest.raises(InvalidRegularExpressionError) as raised:
        compile_regex(pattern)
    assert reason in raised.value.message and repr(pattern) in raised.value.message


def test_a_pattern_past_the_length_cap_is_refused() -> None:
    with pytest.raises(InvalidRegularExpressionError, match=f"more than {REGEX_LENGTH_MAX}"):
        compile_regex("a" * (REGEX_LENGTH_MAX + 1))
    compile_regex("a" * REGEX_LENGTH_MAX)


def test_a_catastrophic_backtracking_pattern_runs_in_linear_time() -> None:
    # With Python's re, (a+)+$ against 'a' * 60 + 'b' backtracks 2**60 times (the test would
    # hang until pytest's timeout); RE2 answers at once.
    topics = {"a" * 60 + "b": topic_metadata("x", 1)}
    assert matching_topics("(a+)+$", topics) == frozenset()


class _Topics(RegexTopics):
    def __init__(self) -> None:
        super().__init__()
        self.scans = 0

    def __getitem__(self, name: str):  # type: ignore[no-untyped-def]
        return TOPICS[name]

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.scans += 1
        return iter(TOPICS)

    def __len__(self) -> int:
        return len(TOPICS)


def test_regex_topics_scans_the_names_once_per_pattern() -> None:
    topics = _Topics()
    assert matching_topics(r"orders\..*", topics) == {"orders.eu", "orders.us"}
    assert matching_topics(r"orders\..*", topics) == {"orders.eu", "orders.us"}
    assert topics.scans == 1
