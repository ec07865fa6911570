"""Integration-test harness: real `tidelog server` processes on 127.0.0.1, always cleaned up.

It wraps :class:`tidelog.local_cluster.LocalCluster` (the launcher behind ``tidelog cluster up``:
free ports, one TOML config and one formatted data dir per node, one OS process per node, logs in
``<dir>/<name>.log``) and adds what tests need on top:

- cleanup that cannot be forgotten: a context manager, plus an ``atexit`` sweep of every harness
  still open, both SIGCONT + SIGKILL (a paused node is killed too, and nothing waits for a
  graceful stop that a test does not care about);
- waits: ``wait_ready`` (/readyz), ``wait_for_leader`` (every running, unpaused controller reports
  the same live leader in DescribeQuorum);
- faults by node name: ``kill`` (kill -9), ``pause`` (SIGSTOP), ``resume`` (SIGCONT), ``stop``
  (SIGTERM, graceful), ``restart``, and ``start`` again after any of them;
- what in-process components need: ``voters`` (VoterConfig for ControllerClient), ``cluster_id``;
- per-node environment variables (``env={"broker-1": {"grpc_proxy": "http://..."}}`` or
  :meth:`set_env`), added to the environment of every later start of that node, e.g. to send a
  node's outgoing gRPC connections through a proxy in a network-fault test.

Node names are LocalCluster's: ``controller-1..C`` (node ids 1..C) and ``broker-101..`` (ids
101..). Broker processes: ``brokers=N`` lays them out (configs, data dirs, ports) and
``start_brokers()`` runs them, with the same faults by name; what they do depends on the broker
role's wiring in tidelog/node.py (until then they start and serve nothing). Broker endpoints for
clients: ``bootstrap``. Timeouts are bounded everywhere (a stuck node fails the test with the tail
of its log rather than hanging it).

Example::

    FAST = {"controller": {"broker_session_timeout_ms": 3000, "fence_check_interval_ms": 100}}

    @pytest.fixture
    def cluster(tmp_path: Path) -> Iterator[ClusterHarness]:
        with ClusterHarness.started(tmp_path / "cluster", overrides=FAST) as cluster:
            yield cluster

    def test_failover(cluster: ClusterHarness) -> None:
        leader = cluster.wait_for_leader()
        cluster.kill(f"controller-{leader}")
        assert cluster.wait_for_leader() != leader
        cluster.start(f"controller-{leader}")  # back from its journal
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from tidelog.cluster_secret import broker_certificate_name
from tidelog.config import VoterConfig
from tidelog.local_cluster import BROKER_ID_BASE, HOST, LocalCluster, NodeSpec
from tidelog.v1 import controller_pb2, controller_pb2_grpc

__all__ = ["ClusterHarness", "certificate_name"]

#: Bounds of the harness's own waits.
READY_TIMEOUT_S = 30.0
LEADER_TIMEOUT_S = 20.0
KILL_TIMEOUT_S = 10.0
POLL_S = 0.05
DESCRIBE_TIMEOUT_S = 1.0

_OPEN: weakref.WeakSet[ClusterHarness] = weakref.WeakSet()


def certificate_name(node_name: str) -> str:
    """The common name a harness node's TLS certificate must have: a broker's names its broker
    id (``broker-1`` is broker 101, so ``broker-101``), which the peer listeners check; other
    names (controllers, users) are their own."""
    kind, _, number = node_name.rpartition("-")
    if kind == "broker" and number.isdigit():
        return broker_certificate_name(BROKER_ID_BASE + int(number))
    return node_name


@atexit.register
def _sweep() -> None:
    """Kill whatever a test left running (a crash, a missing fixture, Ctrl-C)."""
    for harness in list(_OPEN):
        harness.close()


class ClusterHarness:
    """Real controller (and later broker) processes for one test or module (see module doc)."""

    def __init__(self, local: LocalCluster,
                 env: dict[str, dict[str, str]] | None = None) -> None:
        self.local = local
        self._env: dict[str, dict[str, str]] = {n: dict(e) for n, e in (env or {}).items()}
        self._paused: set[str] = set()
        self._stubs: dict[str, Any] = {}
        self._channels: list[Any] = []
        self._closed = False
        _OPEN.add(self)

    # --- creation ------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        base_dir: str | Path,
        *,
        controllers: int = 3,
        brokers: int = 0,
        overrides: dict[str, dict[str, Any]] | None = None,
        cluster_id: str | None = None,
        env: dict[str, dict[str, str]] | None = None,
        tls: bool = False,
    ) -> ClusterHarness:
        """Lay out a cluster (configs, formatted data dirs, ports); nothing runs yet.
        ``env``: extra environment variables per node name (see :meth:`set_env`). ``tls``: as
        ``tidelog cluster up --tls`` (a CA and node certificates in ``<dir>/pki``)."""
        local = LocalCluster.create(base_dir, controllers=controllers, brokers=brokers,
                                    cluster_id=cluster_id, overrides=overrides, tls=tls)
        return cls(local, env)

    @classmethod
    @contextlib.contextmanager
    def started(
        cls,
        base_dir: str | Path,
        *,
        controllers: int = 3,
        brokers: int = 0,
        overrides: dict[str, dict[str, Any]] | None = None,
        cluster_id: str | None = None,
        env: dict[str, dict[str, str]] | None = None,
    ) -> Iterator[ClusterHarness]:
        """Create, start the controllers, wait for a leader; always kill everything on exit.
        Broker processes (if laid out) are left for the test to start."""
        harness = cls.create(base_dir, controllers=controllers, brokers=brokers,
                             overrides=overrides, cluster_id=cluster_id, env=env)
        try:
            harness.start_controllers()
            harness.wait_for_leader()
            yield harness
        finally:
            harness.close()

    # --- views ---------------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self.local.cluster_id

    @property
    def base_dir(self) -> Path:
        return self.local.base_dir

    @property
    def controller_names(self) -> list[str]:
        return [spec.name for spec in self.local.controllers()]

    @property
    def broker_names(self) -> list[str]:
        return [spec.name for spec in self.local.brokers() if not spec.is_controller]

    @property
    def voters(self) -> tuple[VoterConfig, ...]:
        """The quorum as brokers configure it ([[controller.voters]])."""
        return tuple(
            VoterConfig(id=spec.node_id, host=HOST, port=spec.controller_port,
                        raft_port=spec.raft_port)
            for spec in self.local.controllers()
        )

    @property
    def bootstrap(self) -> str:
        """Broker addresses as clients take them (host:port,...)."""
        return self.local.bootstrap

    def node(self, name: str) -> NodeSpec:
        return self.local.nodes[name]

    def controller_name(self, node_id: int) -> str:
        for spec in self.local.controllers():
            if spec.node_id == node_id:
                return spec.name
        raise KeyError(f"no controller with node id {node_id}")

    def is_running(self, name: str) -> bool:
        return self.local.is_running(name)

    def is_paused(self, name: str) -> bool:
        return name in self._paused

    def log_tail(self, name: str, lines: int = 30) -> str:
        return self.local.log_tail(name, lines)

    def set_env(self, name: str, env: dict[str, str]) -> None:
        """Extra environment variables for every later start of ``name`` (replacing earlier
        ones; {} = none). A running node keeps the environment it was started with."""
        self.node(name)  # KeyError for an unknown node
        if env:
            self._env[name] = dict(env)
        else:
            self._env.pop(name, None)

    # --- processes -----------------------------------------------------------------------------

    def start(self, *names: str, wait: bool = True, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start nodes (a paused one is resumed); with ``wait``, until their /readyz says so."""
        for name in names:
            if name in self._paused:
                self.resume(name)
            self.local.start(name, env=self._env.get(name))
        if wait and names:
            self.wait_ready(list(names), timeout_s=timeout_s)

    def start_controllers(self, *, wait: bool = True) -> None:
        self.start(*self.controller_names, wait=wait)

    def start_brokers(self, *, wait: bool = True) -> None:
        """Hook for broker processes (roles = ["broker"]): start every laid-out broker."""
        self.start(*self.broker_names, wait=wait)

    def kill(self, name: str) -> None:
        """kill -9 (no shutdown of any kind), and reap it."""
        self._ensure_continued(name)
        self.local.kill(name)

    def pause(self, name: str) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing (a hung node)."""
        self.local.pause(name)
        self._paused.add(name)

    def resume(self, name: str) -> None:
        """SIGCONT after :meth:`pause`."""
        self.local.resume(name)
        self._paused.discard(name)

    def stop(self, name: str, *, timeout_s: float = KILL_TIMEOUT_S) -> None:
        """SIGTERM (graceful stop, a broker's controlled shutdown), SIGKILL after ``timeout_s``."""
        self._paused.discard(name)  # LocalCluster.stop sends SIGCONT first
        self.local.stop(name, timeout_s=timeout_s)

    def restart(self, name: str, *, wait: bool = True) -> None:
        """Stop gracefully (if running), then start from the same data dir and ports."""
        self.stop(name)
        self.start(name, wait=wait)

    def _ensure_continued(self, name: str) -> None:
        if name in self._paused and self.is_running(name):
            self.resume(name)

    # --- waiting -------------------------------------------------------------------------------

    def wait_ready(self, names: list[str] | None = None, *,
                   timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until every named (default: running, unpaused) node's /readyz answers 200."""
        targets = names or [n for n in self.local.nodes
                            if self.is_running(n) and n not in self._paused]
        self.local.wait_ready(targets, timeout_s=timeout_s)

    def describe_quorum(self, name: str, *, timeout_s: float = DESCRIBE_TIMEOUT_S
                        ) -> controller_pb2.DescribeQuorumResponse | None:
        """One controller's DescribeQuorum answer, or None when it does not answer in time."""
        try:
            response: controller_pb2.DescribeQuorumResponse = self._stub(name).DescribeQuorum(
                controller_pb2.DescribeQuorumRequest(), timeout=timeout_s)
        except grpc.RpcError:
            return None
        return response

    def wait_for_leader(self, *, among: list[str] | None = None,
                        timeout_s: float = LEADER_TIMEOUT_S) -> int:
        """The node id of the leader every running, unpaused controller (of ``among``) reports,
        once they agree and it is one of them."""
        deadline = time.monotonic() + timeout_s
        seen: dict[str, int] = {}
        while time.monotonic() < deadline:
            names = [n for n in (among or self.controller_names)
                     if self.is_running(n) and n not in self._paused]
            seen = {}
            for name in names:
                answer = self.describe_quorum(name)
                seen[name] = answer.leader_id if answer is not None else -2
            leaders = set(seen.values())
            if len(leaders) == 1 and (leader := leaders.pop()) >= 0:
                with contextlib.suppress(KeyError):
                    if self.controller_name(leader) in names:
                        return leader
            time.sleep(POLL_S)
        logs = "\n".join(f"{n}:\n{self.log_tail(n, 10)}" for n in seen)
        raise TimeoutError(f"controllers did not agree on a live leader within {timeout_s:.0f} s "
                           f"(leader per controller, -2 = no answer: {seen})\n{logs}")

    def _stub(self, name: str) -> Any:
        stub = self._stubs.get(name)
        if stub is None:
            channel = grpc.insecure_channel(f"{HOST}:{self.node(name).controller_port}")
            self._channels.append(channel)
            stub = controller_pb2_grpc.ControllerServiceStub(channel)
            self._stubs[name] = stub
        return stub

    # --- cleanup -------------------------------------------------------------------------------

    def close(self) -> None:
        """Kill every node still running (SIGCONT, then SIGKILL) and reap it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        _OPEN.discard(self)
        for channel in self._channels:
            channel.close()
        for name, spec in self.local.nodes.items():
            if not spec.pid or not self.is_running(name):
                continue
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(spec.pid, sig)
        deadline = time.monotonic() + KILL_TIMEOUT_S
        for name in self.local.nodes:
            while self.is_running(name) and time.monotonic() < deadline:
                time.sleep(POLL_S)
        self._paused.clear()

    def __enter__(self) -> ClusterHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
