"""Test hook: step a node process's wall clock (``time.time``) from outside.

Python imports ``sitecustomize`` at start-up from sys.path; an integration test puts this
directory first on a node's PYTHONPATH and sets TIDELOG_TEST_CLOCK_OFFSET_FILE. From then on
``time.time()`` in that process is the real wall clock plus the offset (seconds, a float) written
in that file, re-read at most every 50 ms. ``time.monotonic()`` is untouched: that is the point,
a wall-clock step (NTP, an operator, a VM resume) must not change what durations measure.
Without the variable this module does nothing.
"""

from __future__ import annotations

import os
import time

_PATH = os.environ.get("TIDELOG_TEST_CLOCK_OFFSET_FILE")
_REREAD_S = 0.05

if _PATH:
    _real_time = time.time
    _real_monotonic = time.monotonic
    _offset_s = 0.0
    _checked_at = -_REREAD_S

    def _stepped_time() -> float:
        global _offset_s, _checked_at
        now = _real_monotonic()
        if now - _checked_at >= _REREAD_S:
            _checked_at = now
            try:
                with open(_PATH) as offset_file:
                    _offset_s = float(offset_file.read().strip() or 0)
            except (OSError, ValueError):
                pass  # keep the last offset: the test is rewriting the file
        return _real_time() + _offset_s

    time.time = _stepped_time
