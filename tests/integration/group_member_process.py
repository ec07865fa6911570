"""One consumer-group member as its own OS process, for tests/integration/test_group_processes.py.

``python group_member_process.py BOOTSTRAP GROUP TOPIC OUT`` subscribes to TOPIC as a member of
GROUP and, for every poll, *processes* its records (appends ``partition offset value`` lines to
OUT and flushes them to the OS, so a kill -9 loses none of them) and *then* commits the
positions with a synchronous ``commit()``: commit-after-process, so every committed record was
processed and a member that dies re-processes at most what it did since its last commit
(at-least-once). Auto-commit is off, so the commit happens exactly there.

A failed commit (the coordinator is moving, the member was fenced) is logged on stderr and
the loop goes on: the next commit covers the same records. Any other error ends the process
with exit code 1 and a traceback, for the test to see. SIGTERM stops the loop after the current
poll; the member then leaves the group in close() and exits 0. A test kills it with SIGKILL to
crash it.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

from tidelog.client import Consumer
from tidelog.errors import TidelogError

POLL_MS = 200
#: Short client timeouts, so a commit to a dead coordinator fails (and is retried by the next
#: one) within seconds instead of the library's default 30 s.
CONFIG: dict[str, Any] = {"request_timeout_ms": 5_000, "retry_backoff_ms": 50,
                          "retry_backoff_max_ms": 500, "fetch_max_wait_ms": 200,
                          "auto_offset_reset": "earliest", "enable_auto_commit": False,
                          "client_id": "group-member-process"}


def main(bootstrap: str, group: str, topic: str, out_path: str) -> None:
    stopping = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    with Path(out_path).open("a", encoding="utf-8") as out, \
            Consumer(bootstrap, group_id=group, **CONFIG) as consumer:
        consumer.subscribe([topic])
        # Bounded by the test: it sends SIGTERM (or SIGKILL) when it is done with this member.
        while not stopping:
            records = consumer.poll(timeout_ms=POLL_MS)
            if not records:
                continue
            out.write("".join(f"{r.partition} {r.offset} {(r.value or b'').decode()}\n"
                              for r in records))
            out.flush()
            try:
                consumer.commit()
            except TidelogError as error:
                print(f"commit failed (the next one covers it): {error!r}", file=sys.stderr,
                      flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:5])
