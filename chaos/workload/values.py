"""The queue workload's values: unique per run, readable back from the records.

A producer ``i`` sends the values ``i * VALUES_PER_PRODUCER + n`` for n = 0, 1, 2, ... (Jepsen's
queue workload sends unique integers the same way): producer 3's 124th value is 3000000123,
which plays the role of a "p3-000123" label while staying the integer ``value`` the history
format wants. A record's bytes are the value's decimal text (``b"3000000123"``), so a consumer
decodes what it reads without any state.

A record the workload did not write (bytes that are not such a decimal, e.g. from another
client writing to the topic) is recorded as ``FOREIGN_VALUE_BASE + crc32(bytes)``: a value no
producer sends (every sent value is below 10**18 < 2**62), so the checkers report it as an
``unexpected-value`` instead of the workload failing on it.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import zlib
from typing import Final

__all__ = [
    "FOREIGN_VALUE_BASE",
    "PRODUCERS_MAX",
    "VALUES_PER_PRODUCER",
    "ValueSequence",
    "decode_value",
    "encode_value",
]

#: Values one producer may send in a run (a million per second for 16 minutes).
VALUES_PER_PRODUCER: Final = 1_000_000_000
#: Producer indexes are below this, so every sent value is below 10**18.
PRODUCERS_MAX: Final = 1_000_000_000
#: Where the values of records nobody in the run sent start (above every sent value).
FOREIGN_VALUE_BASE: Final = 1 << 62
#: A sent value's decimal text is at most this long (10**18 - 1 has 18 digits).
_DIGITS_MAX: Final = 18


class ValueSequence:
    """The values of producer ``producer_index``, in order; not thread-safe (one per producer
    thread)."""

    def __init__(self, producer_index: int) -> None:
        if not 0 <= producer_index < PRODUCERS_MAX:
            raise ValueError(f"producer index must be within 0..{PRODUCERS_MAX - 1}, "
                             f"got {producer_index}")
        self._base = producer_index * VALUES_PER_PRODUCER
        self._next = 0

    def next(self) -> int:
        if self._next >= VALUES_PER_PRODUCER:
            raise OverflowError(f"a producer sends at most {VALUES_PER_PRODUCER} values a run")
        value = self._base + self._next
        self._next += 1
        return value


def encode_value(value: int) -> bytes:
    """The record bytes of a sent value: its decimal text."""
    if not 0 <= value < FOREIGN_VALUE_BASE:
        raise ValueError(f"a sent value is within 0..2**62-1, got {value}")
    return b"%d" % value


def decode_value(data: bytes | None) -> int:
    """The value a record holds: the integer :func:`encode_value` wrote, else (bytes the
    workload never writes: empty, None, not ASCII digits, a leading zero, too long)
    ``FOREIGN_VALUE_BASE + crc32(data)``."""
    if (data and len(data) <= _DIGITS_MAX and data.isdigit()
            and (data == b"0" or not data.startswith(b"0"))):
        return int(data)
    return FOREIGN_VALUE_BASE + zlib.crc32(data or b"")
