"""How a send's outcome is recorded: ``ok``, ``fail`` (it certainly was not appended) or
``info`` (unknown), from what the Producer told us.

docs/chaos.md's rule: ``fail`` only when the error proves the record was not appended,
otherwise ``info``; the checkers never count an ``info`` send as lost, while reading a
``fail`` send is an anomaly (G1a). So the classification errs towards ``info``:

- an exception raised by ``Producer.send()`` itself is a ``fail``: send() raises before the
  record joins a batch (a bad topic, no metadata within ``max_block_ms``, a full buffer, a
  closed or failed producer), so nothing was sent;
- a delivery error (the future's) is a ``fail`` only when its code is a validation refusal
  (:data:`REFUSED_CODES`: the leader checks the batch's bytes before appending, and the same
  bytes are refused by every attempt), or NOT_ENOUGH_REPLICAS from a producer that never
  retries (``retries=0``: the one attempt was refused before the append; with retries an
  earlier attempt may have timed out after appending). Everything else is ``info``: timeouts,
  lost connections, NOT_ENOUGH_REPLICAS_AFTER_APPEND, a fenced or failed producer, a batch
  expired after a retry;
- an acknowledged send with offset -1 and acks 1/all (the leader answered
  DUPLICATE_SEQUENCE_NUMBER: written earlier, it no longer knows where) is ``info``: written,
  but an ``ok`` send must name its offset.

Errors are recorded as their Kafka name and message (:func:`describe_error`), cut to
:data:`ERROR_CHARS_MAX` characters. Pure.
"""

from __future__ import annotations

from typing import Final, Literal

from tidelog.errors import ErrorCode, TidelogError

__all__ = ["ERROR_CHARS_MAX", "REFUSED_CODES", "delivery_error_type", "describe_error"]

#: A history line names an error in at most this many characters.
ERROR_CHARS_MAX: Final = 300
#: Produce error codes that refuse a batch before the append, for what its bytes are.
REFUSED_CODES: Final = frozenset({
    ErrorCode.MESSAGE_TOO_LARGE,
    ErrorCode.RECORD_LIST_TOO_LARGE,
    ErrorCode.INVALID_RECORD,
    ErrorCode.INVALID_TOPIC_EXCEPTION,
    ErrorCode.INVALID_REQUIRED_ACKS,
})


def delivery_error_type(error: BaseException, *, retries: int) -> Literal["fail", "info"]:
    """The completion of a send whose future failed with ``error`` (see the module doc)."""
    if not isinstance(error, TidelogError):
        return "info"
    if error.code in REFUSED_CODES:
        return "fail"
    if error.code == ErrorCode.NOT_ENOUGH_REPLICAS and retries == 0:
        return "fail"
    return "info"


def describe_error(error: BaseException) -> str:
    """``CODE_NAME: message`` for a Tidelog error, ``TypeName: message`` otherwise; bounded."""
    text = str(error) if isinstance(error, TidelogError) else f"{type(error).__name__}: {error}"
    if len(text) > ERROR_CHARS_MAX:
        text = text[:ERROR_CHARS_MAX - 3] + "..."
    return text
