"""Error fields of the group coordinator's responses (per response and per item)."""

from __future__ import annotations

from typing import Protocol, cast

from tidelog.errors import TidelogError
from tidelog.invariants import check
from tidelog.v1 import common_pb2

__all__ = ["ErrorFields", "error_code", "set_error"]


class ErrorFields(Protocol):
    error_code: common_pb2.ErrorCode
    error_message: str


def error_code(code: int) -> common_pb2.ErrorCode:
    check(code in common_pb2.ErrorCode.values(), f"unknown error code {code}")
    return cast(common_pb2.ErrorCode, code)


def set_error(result: ErrorFields, error: TidelogError) -> None:
    result.error_code = error_code(error.code)
    result.error_message = error.message
