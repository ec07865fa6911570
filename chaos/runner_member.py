"""The consumer-group member a chaos run crashes: its own OS process, so kill -9 is real.

The workload's consumers are threads of the runner, which a kill -9 cannot take alone. So the
``kill-member`` fault uses an extra member: ``python -m tidelog.chaos.runner_member BOOTSTRAP GROUP
TOPIC`` subscribes to TOPIC in the workload's GROUP, takes its share of the partitions (a
rebalance the workload's recorded group consumers follow), polls, and commits after every
poll that returned records (commit-after-process). Its reads are not recorded: what the
checkers judge is what the workload's members read after the crash, when the survivors take
its partitions over from its last committed offsets. SIGTERM stops it cleanly (it leaves the
group); SIGKILL is the crash.

:class:`MemberProcess` starts and kills such a process (by pid; every wait bounded), and
:class:`KillMember` is the Fault: start = kill -9 of the running member; heal = a new member
process joins. The runner starts the first member before the workload and stops whatever
member runs at the end, even on failure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tidelog.chaos.nemesis.fault import FaultBase

__all__ = ["KillMember", "MemberProcess", "main"]

POLL_MS = 200
STOP_TIMEOUT_S = 10.0


class MemberProcess:
    """One member process at a time, logging to ``log_path``."""

    def __init__(self, bootstrap: str, group: str, topic: str, log_path: Path) -> None:
        self.args = [bootstrap, group, topic]
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self) -> int:
        if self.proc is not None and self.proc.poll() is None:
            return self.proc.pid
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tidelog.chaos.runner_member", *self.args], stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.started += 1
        return self.proc.pid

    def kill(self) -> int:
        """kill -9 the running member and reap it; its pid."""
        if self.proc is None or self.proc.poll() is not None:
            raise ProcessLookupError("no member process is running")
        self.proc.kill()
        self.proc.wait(STOP_TIMEOUT_S)
        return self.proc.pid

    def stop(self) -> None:
        """SIGTERM (it leaves the group), SIGKILL after STOP_TIMEOUT_S; no-op when none runs."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)


class KillMember(FaultBase):
    """kill -9 the extra group member; heal: a new one joins."""

    def __init__(self, member: MemberProcess, *, duration_s: float = 5.0) -> None:
        super().__init__("kill-member", "kill -9 a consumer-group member process; a new one "
                         "joins", duration_s=duration_s)
        self.member = member

    def _start(self) -> tuple[str, ...]:
        return (f"member-pid-{self.member.kill()}",)

    def _heal(self) -> None:
        self.member.start()


def main(bootstrap: str, group: str, topic: str) -> None:
    from tidelog.client import Consumer
    from tidelog.errors import TidelogError

    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    config = {"request_timeout_ms": 5_000, "retry_backoff_ms": 50, "retry_backoff_max_ms": 500,
              "fetch_max_wait_ms": 200, "auto_offset_reset": "earliest",
              "enable_auto_commit": False, "client_id": f"chaos-member-{os.getpid()}"}
    with Consumer(bootstrap, group_id=group, **config) as consumer:  # type: ignore[arg-type]
        consumer.subscribe([topic])
        # Bounded by the runner: SIGTERM at the end of the run, or SIGKILL (the fault).
        while not stopping:
            try:
                records = consumer.poll(timeout_ms=POLL_MS)
                if records:
                    consumer.commit()
            except TidelogError as error:  # the cluster is broken on purpose: go on
                print(f"{time.strftime('%H:%M:%S')} {error!r}", file=sys.stderr, flush=True)
                time.sleep(POLL_MS / 1000)


if __name__ == "__main__":
    main(*sys.argv[1:4])
