"""A Raft leader always becomes the active controller again (controller/runtime.py: the
activation, ``_resign``, ``_resign_after_failure`` and the periodic tick's check).

Found in a 30,000-partition run: a write of the previous leader epoch failed late, after the
controller had won the next election and started activating; its ``_resign`` cancelled that
activation, and ``_maybe_reactivate`` saw the cancelled task as still running, so none was
started. The controller stayed Raft leader, healthy to its quorum, and inactive (every write
answered NOT_CONTROLLER) for 2.5 minutes, until another election.

On a real one-voter quorum, each test reproduces one way to lose the activation and checks
that the controller is active again within a few ticks.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from controller_testkit import RuntimeDriver, one_voter_runtime, register_request

from tidelog.controller.runtime import ControllerRuntime

WAIT_S = 20.0


async def _with_active_runtime(tmp_path: Path, body: Any) -> None:
    runtime: ControllerRuntime = one_voter_runtime(tmp_path, fence_check_interval_ms=50)
    driver = RuntimeDriver(runtime)
    await runtime.start()
    try:
        await driver.wait_active(WAIT_S)
        await body(runtime, driver)
    finally:
        await runtime.stop()


def test_a_late_resignation_during_activation_does_not_leave_the_leader_inactive(
        tmp_path: Path) -> None:
    async def body(runtime: ControllerRuntime, driver: RuntimeDriver) -> None:
        epoch = runtime._leader_epoch
        # Leadership won again: a new activation starts...
        runtime._on_leadership_change(True, epoch)
        assert not runtime.active
        # ...and, in the same turn, an older write's proposal fails, as the write path
        # handled it before the fix: resign, then reactivate.
        runtime._resign("a proposal of the previous epoch failed")
        runtime._maybe_reactivate()
        await driver.wait_active(WAIT_S)
        await driver.write("register_broker", register_request(1, cluster_id="c"))
    asyncio.run(_with_active_runtime(tmp_path, body))


def test_a_failure_of_an_earlier_epoch_does_not_resign_the_current_one(tmp_path: Path) -> None:
    async def body(runtime: ControllerRuntime, driver: RuntimeDriver) -> None:
        epoch = runtime._leader_epoch
        runtime._resign_after_failure(epoch - 1, "a write of the previous epoch timed out")
        assert runtime.active
        runtime._resign_after_failure(epoch, "a write of this epoch timed out")
        assert not runtime.active  # its speculative state is dropped, then it activates again
        await driver.wait_active(WAIT_S)
    asyncio.run(_with_active_runtime(tmp_path, body))


def test_an_activation_that_fails_is_started_again_and_said(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def body(runtime: ControllerRuntime, driver: RuntimeDriver) -> None:
        real = runtime.logic.on_become_active
        calls = []

        def fails_once(now_ms: int) -> Any:
            calls.append(now_ms)
            if len(calls) == 1:
                raise RuntimeError("a bug in on_become_active")
            return real(now_ms)
        runtime.logic.on_become_active = fails_once  # type: ignore[method-assign]
        runtime._on_leadership_change(True, runtime._leader_epoch)
        await driver.wait_active(WAIT_S)
        assert len(calls) == 2, calls
    with caplog.at_level(logging.ERROR, logger="tidelog.controller"):
        asyncio.run(_with_active_runtime(tmp_path, body))
    assert any("activation failed" in r.getMessage() for r in caplog.records)
