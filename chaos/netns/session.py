"""``tidelog chaos run --network netns``: the namespaces made outside, the run made inside.

The runner, its workload and its checkers must reach the nodes, and the nodes live in
namespaces only the run's bridge joins; the root namespace gets no route to them (the mode
never touches its routing). So the command runs twice:

1. *outside* (:func:`run_outside`, in the caller's namespace): checks the machine can
   (:func:`~chaos.netns.shell.unavailable`: exit 2 with its one line when not), plans and
   creates the namespaces, then runs the same ``tidelog chaos run`` again with ``ip netns
   exec <client namespace>`` in front of it and the plan in :data:`ENV_VAR`, waits for it and
   returns its exit code; the namespaces are removed when it ends, whatever happened (a
   Ctrl-C, a SIGTERM, an error), with any process still inside them;
2. *inside* (:func:`plan_from_env` returns the plan): the ordinary runner, whose nodes start
   in their namespaces (``NodeSpec.netns``) and whose network faults are tc's.

The whole runner goes inside, not only its workload: the readiness checks, the topic set-up,
the fault lookups (leaders, the active controller), the drain and the replica checks all talk
to the nodes too, and one process in one namespace keeps them as they are in the proxy mode.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from tidelog.chaos.netns import shell
from tidelog.chaos.netns.plan import NetnsPlan

__all__ = ["ENV_VAR", "cluster_nodes", "plan_from_env", "run_outside"]

#: Carries the plan from the outside run to the inside one.
ENV_VAR = "TIDELOG_CHAOS_NETNS"
#: After a Ctrl-C, how long the inside run may take to heal and stop its nodes.
INTERRUPT_WAIT_S = 60.0
SIGTERM_NOTE = "SIGTERM"


def cluster_nodes(controllers: int, brokers: int) -> list[str]:
    """The node names tidelog.local_cluster gives a cluster of separate controllers and
    brokers (its naming: ``controller-<i>``, ``broker-<i>``)."""
    return [f"controller-{i}" for i in range(1, controllers + 1)] + \
        [f"broker-{i}" for i in range(1, brokers + 1)]


def plan_from_env() -> NetnsPlan | None:
    """The plan the outside run passed (None outside); ValueError when it is not valid."""
    text = os.environ.get(ENV_VAR)
    if not text:
        return None
    try:
        data = json.loads(text)
        return NetnsPlan(str(data["run_id"]), str(data["subnet"]),
                         tuple(str(n) for n in data["nodes"]))
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{ENV_VAR} does not hold a netns plan: {e}") from None


def run_outside(nodes: Sequence[str], argv: Sequence[str], *, netem: bool,
                module: str = "tidelog.cli") -> int | str:
    """Create the namespaces for ``nodes`` and run ``python -m <module> <argv>`` (``tidelog
    <argv>`` by default) inside the client one; its exit code, or the one line saying why the
    machine cannot (the caller exits 2)."""
    reason = shell.unavailable(netem=netem)
    if reason is not None:
        return reason
    plan = shell.new_plan(nodes)
    env = {**os.environ, ENV_VAR: json.dumps({"run_id": plan.run_id, "subnet": plan.subnet,
                                              "nodes": list(plan.nodes)})}
    with shell.namespaces(plan), _sigterm_as_interrupt():
        proc = subprocess.Popen([*plan.exec_prefix("client"), sys.executable, "-m",
                                 module, *argv], env=env)
        try:
            return proc.wait()
        except KeyboardInterrupt as e:
            # A terminal's Ctrl-C reached the inside run too; a SIGTERM did not: pass it on.
            if e.args == (SIGTERM_NOTE,):
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=INTERRUPT_WAIT_S)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            raise


class _sigterm_as_interrupt:  # a context manager, named like contextlib's
    """SIGTERM raises KeyboardInterrupt while inside (so the namespaces are removed)."""

    def __enter__(self) -> None:
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, _interrupt)

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(SIGTERM_NOTE)
