"""Regular-expression subscriptions (KIP-848's SubscribedTopicRegex): compile a member's regex
and resolve it to the topic names it matches.

A regex comes from a client, and the coordinator evaluates it against every topic name on the
request path, so it must not be able to cost unbounded CPU. Kafka compiles these with RE2/J for
that reason; we use RE2 too (the ``google-re2`` package, imported here and nowhere else): RE2
matches in time linear in the input and refuses what would need backtracking (back-references,
look-around). The pattern itself is bounded (:data:`REGEX_LENGTH_MAX` characters) and so is the
memory of its compiled program (:data:`REGEX_PROGRAM_BYTES_MAX`); a pattern that breaks either,
or does not parse, is INVALID_REGULAR_EXPRESSION with RE2's reason and the pattern (shortened).

Matching is a full match over the topic name (``orders\\..*`` matches ``orders.eu`` and not
``old.orders.eu``), as Kafka's ``Pattern.matcher(topic).matches()``. Internal topics
(``__consumer_offsets``) never match, as Kafka leaves them out of regex subscriptions.

Compiled patterns are kept in a small LRU cache (a group's members heartbeat with the same
pattern); the names a pattern matches are cached per set of topics by :class:`RegexTopics`
(the runtime's view of one metadata image), so a heartbeat does not scan every topic name again
until the metadata changes.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import re2

from tidelog.broker.group.assignment import TopicMetadata
from tidelog.errors import InvalidRegularExpressionError
from tidelog.metadata.topic_names import INTERNAL_TOPICS

__all__ = [
    "REGEX_LENGTH_MAX",
    "REGEX_PROGRAM_BYTES_MAX",
    "RegexTopics",
    "compile_regex",
    "matching_topics",
]

#: Characters of one subscription regex (Kafka bounds it by the request size only).
REGEX_LENGTH_MAX = 1_000
#: Memory RE2 may use for one compiled pattern (its max_mem option); larger patterns (e.g.
#: nested counted repetitions) fail to compile instead of growing.
REGEX_PROGRAM_BYTES_MAX = 1 << 20
#: Compiled patterns kept.
COMPILED_CACHE_MAX = 256
#: Patterns whose matches one RegexTopics remembers (one metadata image's worth).
MATCHES_CACHE_MAX = 1_024


def _options() -> Any:
    options = re2.Options()
    options.max_mem = REGEX_PROGRAM_BYTES_MAX
    options.log_errors = False  # RE2 would print every client's bad pattern to stderr
    options.never_capture = True
    return options


@functools.lru_cache(maxsize=COMPILED_CACHE_MAX)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, _options())


def compile_regex(pattern: str) -> Any:
    """The compiled ``pattern``, or InvalidRegularExpressionError naming it and the reason."""
    shown = pattern if len(pattern) <= 100 else pattern[:100] + "..."
    if len(pattern) > REGEX_LENGTH_MAX:
        raise InvalidRegularExpressionError(
            f"subscribed topic regex {shown!r} is {len(pattern)} characters, more than "
            f"{REGEX_LENGTH_MAX}")
    try:
        return _compiled(pattern)
    except re2.error as error:
        reason = error.args[0] if error.args else error
        if isinstance(reason, bytes):
            reason = reason.decode(errors="replace")
        raise InvalidRegularExpressionError(
            f"subscribed topic regex {shown!r} is invalid: {reason}") from None


def matching_topics(pattern: str, topics: Mapping[str, TopicMetadata]) -> frozenset[str]:
    """The names of ``topics`` that ``pattern`` fully matches, internal topics left out.
    Raises InvalidRegularExpressionError for a pattern that does not compile."""
    if isinstance(topics, RegexTopics):
        return topics.matching(pattern)
    return _match(pattern, topics)


def _match(pattern: str, topics: Mapping[str, TopicMetadata]) -> frozenset[str]:
    compiled = compile_regex(pattern)
    return frozenset(name for name in topics
                     if name not in INTERNAL_TOPICS and compiled.fullmatch(name) is not None)


class RegexTopics(Mapping[str, TopicMetadata]):
    """A mapping of topics that remembers which names each pattern matched, and says which
    names a member's principal may describe. Subclasses give the mapping (the runtime's view of
    a metadata image, which never changes, so the answers stay right for the view's lifetime)
    and, with authorization on, :meth:`may_describe`."""

    def __init__(self) -> None:
        self._matches: dict[str, frozenset[str]] = {}

    def describable(self, principal: str, host: str, names: set[str]) -> set[str]:
        """The ``names`` that ``principal`` connecting from ``host`` may describe."""
        return names


    def matching(self, pattern: str) -> frozenset[str]:
        found = self._matches.get(pattern)
        if found is None:
            found = _match(pattern, self)
            if len(self._matches) >= MATCHES_CACHE_MAX:
                self._matches.clear()
            self._matches[pattern] = found
        return found
