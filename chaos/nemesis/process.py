"""Process faults, for controllers and brokers alike, through tidelog.local_cluster.

* :class:`Kill`: kill -9 (no shutdown, no flush); heal starts it again from the same data dir
  and ports and waits for its /readyz.
* :class:`Pause`: SIGSTOP (the process keeps its sockets and answers nothing: a hung node, or
  one in a long GC pause); heal is SIGCONT. Its ``duration_s`` is the point: longer than the
  broker session timeout, the node is fenced while it sleeps.
* :class:`GracefulRestart`: SIGTERM (a broker's controlled shutdown, a controller's clean stop),
  bounded by ``stop_timeout_s`` and then SIGKILL (LocalCluster.stop); heal starts it again.
* :class:`KillCluster`: kill -9 of every running node at once (a power cut); heal starts the
  controllers, then the brokers, and waits for all of them.

A target is a node name or a function that picks one when the fault starts (e.g.
``lambda: topology.active_controller(cluster)``), so a schedule can say "the active controller"
before anyone knows which it is. A node started again gets the environment LocalCluster keeps
for it (its link routing, chaos/nemesis/network.py). Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable

from tidelog.chaos.nemesis.fault import FaultBase
from tidelog.local_cluster import LocalCluster

__all__ = ["GracefulRestart", "Kill", "KillCluster", "Pause", "Target"]

#: A node name, or a function that picks one when the fault starts.
Target = str | Callable[[], str]
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
DEFAULT_DURATION_S = 5.0
POLL_S = 0.05


def _resolve(target: Target) -> str:
    return target if isinstance(target, str) else target()


def _target_label(target: Target, label: str | None) -> str:
    return label or (target if isinstance(target, str) else "target")


class _NodeFault(FaultBase):
    """A fault on one node; heal brings it back running and ready."""

    def __init__(self, cluster: LocalCluster, target: Target, name: str, description: str, *,
                 duration_s: float, ready_timeout_s: float) -> None:
        super().__init__(name, description, duration_s=duration_s)
        self.cluster = cluster
        self._target = target
        self._ready_timeout_s = ready_timeout_s
        self._node: str | None = None

    def _pick(self) -> str:
        self._node = _resolve(self._target)
        if self._node not in self.cluster.nodes:
            raise ValueError(f"{self.name}: no node {self._node!r} "
                             f"(nodes: {sorted(self.cluster.nodes)})")
        return self._node

    def _bring_back(self) -> None:
        if self._node is None:
            return  # the target was never picked: nothing was done
        self.cluster.start(self._node)
        self.cluster.wait_ready([self._node], timeout_s=self._ready_timeout_s)


class Kill(_NodeFault):
    """kill -9 a node; heal: start it again."""

    def __init__(self, cluster: LocalCluster, target: Target, *, label: str | None = None,
                 duration_s: float = DEFAULT_DURATION_S,
                 ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        what = _target_label(target, label)
        super().__init__(cluster, target, f"kill-{what}",
                         f"kill -9 {what}, then start it again from its data dir",
                         duration_s=duration_s, ready_timeout_s=ready_timeout_s)

    def _start(self) -> tuple[str, ...]:
        node = self._pick()
        self.cluster.kill(node)
        return (node,)

    def _heal(self) -> None:
        self._bring_back()


class Pause(_NodeFault):
    """SIGSTOP a node; heal: SIGCONT (or start it, if it died meanwhile)."""

    def __init__(self, cluster: LocalCluster, target: Target, *, label: str | None = None,
                 duration_s: float = DEFAULT_DURATION_S,
                 ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        what = _target_label(target, label)
        super().__init__(cluster, target, f"pause-{what}",
                         f"SIGSTOP {what} for {duration_s:g} s, then SIGCONT",
                         duration_s=duration_s, ready_timeout_s=ready_timeout_s)

    def _start(self) -> tuple[str, ...]:
        node = self._pick()
        self.cluster.pause(node)
        return (node,)

    def _heal(self) -> None:
        if self._node is not None and self.cluster.is_running(self._node):
            self.cluster.resume(self._node)
        else:
            self._bring_back()


class GracefulRestart(_NodeFault):
    """SIGTERM a node and wait for it to exit; heal: start it again."""

    def __init__(self, cluster: LocalCluster, target: Target, *, label: str | None = None,
                 duration_s: float = 1.0, stop_timeout_s: float = STOP_TIMEOUT_S,
                 ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        what = _target_label(target, label)
        super().__init__(cluster, target, f"restart-{what}",
                         f"stop {what} gracefully (SIGTERM; SIGKILL after "
                         f"{stop_timeout_s:g} s), then start it again",
                         duration_s=duration_s, ready_timeout_s=ready_timeout_s)
        self._stop_timeout_s = stop_timeout_s

    def _start(self) -> tuple[str, ...]:
        node = self._pick()
        self.cluster.stop(node, timeout_s=self._stop_timeout_s)
        return (node,)

    def _heal(self) -> None:
        self._bring_back()


class KillCluster(FaultBase):
    """kill -9 every running node; heal: controllers first, then brokers, all ready."""

    def __init__(self, cluster: LocalCluster, *, duration_s: float = DEFAULT_DURATION_S,
                 ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        super().__init__("kill-cluster", "kill -9 every node at once, then start them all "
                         "again (controllers first)", duration_s=duration_s)
        self.cluster = cluster
        self._ready_timeout_s = ready_timeout_s
        self._killed: list[str] = []

    def _start(self) -> tuple[str, ...]:
        self._killed = [n for n in self.cluster.nodes if self.cluster.is_running(n)]
        # Every SIGKILL first, then the reaping, so no node sees another go before it does.
        for node in self._killed:
            with contextlib.suppress(ProcessLookupError):
                self.cluster.signal(node, signal.SIGKILL)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(self.cluster.is_running(n) for n in self._killed):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: nodes still running {STOP_TIMEOUT_S:g} s "
                                   f"after SIGKILL")
            time.sleep(POLL_S)
        return tuple(self._killed)

    def _heal(self) -> None:
        controllers = {spec.name for spec in self.cluster.controllers()}
        order = sorted(self._killed, key=lambda n: (n not in controllers, n))
        for node in order:
            self.cluster.start(node)
        self.cluster.wait_ready(order, timeout_s=self._ready_timeout_s)
