"""Invariant checks that guard data stay on under ``python -O`` (issue 9, item 5).

A bare ``assert`` vanishes under ``-O``; the checks on offsets, epochs, ISRs, replay order and
storage consistency call ``tidelog.invariants`` instead. This file runs a few of their unit
tests again in a ``python -O`` subprocess and requires them to pass there too: each of them
expects an ``InvariantViolation`` (or the storage error recovery makes of one), so each would
fail under ``-O`` if its check were still a bare assert.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidelog.broker.replication import PartitionState
from tidelog.invariants import InvariantViolation

#: The -O run imports the broker, controller and storage code afresh; bounded all the same.
O_RUN_TIMEOUT_S = 180

#: Unit tests whose pytest.raises(InvariantViolation) (or KafkaStorageErrorError) covers a check
#: converted from a bare assert: storage recovery, metadata replay, the controller's committed
#: log, the epoch cache, image invariants, placement preconditions, the partition state machine.
UNDER_O = (
    "tests/unit/test_storage_tail_repair.py::test_a_hole_in_the_segment_index_is_refused",
    "tests/unit/test_metadata_replay.py::test_offsets_must_increase",
    "tests/unit/test_managers_control.py::test_committed_batches_must_be_contiguous",
    "tests/unit/test_storage_epoch_cache.py::test_non_monotonic_entries_are_refused",
    "tests/unit/test_metadata_image.py::test_broker_registration_invariants",
    "tests/unit/test_placement.py::test_preconditions_are_asserted",
    "tests/unit/test_invariants_under_optimize.py::test_a_leader_hw_above_its_leo_is_refused",
)


def test_a_leader_hw_above_its_leo_is_refused() -> None:
    state = PartitionState(1)
    with pytest.raises(InvariantViolation, match=r"HW 11 outside 0\.\.LEO 10"):
        state.become_leader(leader_epoch=1, partition_epoch=1, replicas=(1, 2), isr=(1, 2),
                            log_end_offset=10, high_watermark=11, now_ms=0)


@pytest.mark.skipif(sys.flags.optimize > 0, reason="already the -O run")
def test_the_checks_still_raise_under_python_O() -> None:
    root = Path(__file__).parents[2]
    proc = subprocess.run(
        [sys.executable, "-O", "-m", "pytest", "-q", "-p", "no:cacheprovider", *UNDER_O],
        cwd=root, env=dict(os.environ), capture_output=True, text=True,
        timeout=O_RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # Every listed test ran (a parametrized one counts once per case) and none was skipped.
    assert "skipped" not in proc.stdout and "deselected" not in proc.stdout, proc.stdout[-2000:]
    assert f"{len(UNDER_O) + 2} passed" in proc.stdout, proc.stdout[-2000:]
