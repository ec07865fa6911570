"""The chaos runner's network-namespace mode (chaos/netns/) on this machine's real kernel.

* the namespaces of a plan (switch with its bridge, client, one per node) are created by
  ``shell.namespaces`` and all gone after it, also when the body raised; ``cleanup`` removes a
  run's leftovers and kills the process left inside;
* a partition really partitions: with :class:`~chaos.netns.NetnsPartition` isolating one node
  of a laid-out cluster, a TCP connect from another node's namespace to a listener in the
  isolated one times out, a connect from the client namespace still succeeds (clients are not
  cut), and after heal the connect succeeds again;
* ``tidelog chaos run isolate-broker --network netns`` end to end (a subprocess, as a user
  runs it): exit 0, the promise held, the partition started and stopped, no namespace left;
* a scenario with latency faults where sch_netem is missing exits 2 with one line saying so.

Everything skips, with the reason :func:`chaos.netns.unavailable` gives, where the machine
cannot (not root, no ``ip``/``tc``, no namespaces). Every wait is bounded; about 30 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelog.chaos.nemesis import Isolate
from tidelog.chaos.netns import NetnsNetwork, NetnsPartition, NetnsPlan, cleanup, namespaces, shell
from tidelog.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

UNAVAILABLE = shell.unavailable()
NETEM_UNAVAILABLE = shell.unavailable(netem=True) if UNAVAILABLE is None else UNAVAILABLE
needs_netns = pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))
PORT = 7411
CONNECT_TIMEOUT_S = 1.0
RUN_TIMEOUT_S = 150.0


def _ours() -> set[str]:
    return set(shell.leftovers(shell.existing()))


def _connect(plan: NetnsPlan, source: str, target: str) -> bool:
    """Whether a TCP connect from ``source``'s namespace to ``target``'s listener succeeds
    within CONNECT_TIMEOUT_S."""
    code = (f"import socket\ntry:\n socket.create_connection(('{plan.address(target)}', "
            f"{PORT}), timeout={CONNECT_TIMEOUT_S}).close()\nexcept OSError:\n raise "
            f"SystemExit(1)")
    done = subprocess.run([*plan.exec_prefix(source), sys.executable, "-c", code],
                          timeout=CONNECT_TIMEOUT_S + 10, capture_output=True, check=False)
    return done.returncode == 0


@pytest.fixture
def listener_in() -> Iterator[object]:
    started: list[subprocess.Popen[bytes]] = []

    def start(plan: NetnsPlan, node: str) -> None:
        code = (f"import socket, time\ns = socket.socket()\ns.bind(('{plan.address(node)}', "
                f"{PORT}))\ns.listen(16)\nprint('up', flush=True)\ntime.sleep(60)")
        proc = subprocess.Popen([*plan.exec_prefix(node), sys.executable, "-c", code],
                                stdout=subprocess.PIPE)
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"

    yield start
    for proc in started:  # stopped by pid, whatever the test did
        proc.kill()
        proc.wait(timeout=10)


@needs_netns
def test_namespaces_are_created_and_removed_also_after_an_exception() -> None:
    before = _ours()
    plan = shell.new_plan(["controller-1", "broker-1"])
    with namespaces(plan):
        assert set(plan.namespaces()) <= set(shell.existing())
        # The bridge lives in the switch namespace, an address in each member's.
        assert "br0" in shell.run(["ip", "-n", plan.switch, "-br", "link"])
        assert plan.address("broker-1") in shell.run(["ip", "-n", plan.namespace("broker-1"),
                                                      "-br", "addr"])
        # No way out: no namespace has a default route.
        assert "default" not in shell.run(["ip", "-n", plan.client, "route"])
    assert _ours() == before
    plan = shell.new_plan(["broker-1"])
    with pytest.raises(RuntimeError, match="inside"), namespaces(plan):
        assert plan.client in shell.existing()
        raise RuntimeError("inside")
    assert _ours() == before


@needs_netns
def test_cleanup_removes_a_runs_leftovers_and_what_runs_in_them(listener_in: object) -> None:
    plan = shell.new_plan(["broker-1"])
    shell.run_all(plan.setup_commands())  # as a run killed with -9 would leave them
    listener_in(plan, "broker-1")  # type: ignore[operator]
    pids = [int(p) for p in shell.run(["ip", "netns", "pids", plan.namespace("broker-1")])
            .split()]
    assert pids
    assert sorted(cleanup(plan.run_id)) == sorted(plan.namespaces())
    assert not set(plan.namespaces()) & set(shell.existing())
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


@needs_netns
def test_a_cut_link_passes_no_packets_and_heal_restores_it(tmp_path: Path,
                                                          listener_in: object) -> None:
    cluster = LocalCluster.create(tmp_path / "cluster", controllers=1, brokers=2)
    plan = shell.new_plan(sorted(cluster.nodes))
    with namespaces(plan):
        net = NetnsNetwork(cluster, plan)
        net.place()
        assert cluster.nodes["broker-1"].host == plan.address("broker-1")
        assert f'listen_host = "{plan.address("broker-1")}"' in \
            cluster.config_path("broker-1").read_text()
        listener_in(plan, "broker-1")  # type: ignore[operator]
        assert _connect(plan, "broker-2", "broker-1")
        fault = NetnsPartition(net, Isolate("broker-1"), duration_s=1)
        fault.start()
        assert set(fault.targets) == {"broker-1>broker-2", "broker-2>broker-1",
                                      "broker-1>controller-1"}
        started = time.monotonic()
        assert not _connect(plan, "broker-2", "broker-1")
        assert time.monotonic() - started >= CONNECT_TIMEOUT_S * 0.9  # dropped, not refused
        assert not _connect(plan, "controller-1", "broker-1")
        assert _connect(plan, "client", "broker-1")  # clients are not partitioned
        fault.heal()
        assert _connect(plan, "broker-2", "broker-1")
        assert _connect(plan, "controller-1", "broker-1")


@needs_netns
def test_isolate_broker_end_to_end_through_the_cli(tmp_path: Path) -> None:
    before = _ours()
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "tidelog.cli", "chaos", "run",
                           "isolate-broker", "--network", "netns", "--duration", "13",
                           "--seed", "3", "--dir", str(run_dir), "--format", "json"],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["valid"] is True
    assert [f["fault"] for f in result["faults"]] == ["partition-isolate"]
    assert result["faults"][0]["targets"], result["faults"]
    assert result["workload"]
    # The nodes listened on their namespaces' addresses, not on loopback.
    state = json.loads((run_dir / "cluster" / "cluster.json").read_text())
    assert all(n["netns"] and not n["host"].startswith("127.") for n in state["nodes"])
    assert _ours() == before


@pytest.mark.skipif(UNAVAILABLE is not None or NETEM_UNAVAILABLE is None,
                    reason="needs a machine with namespaces but without sch_netem")
def test_a_netem_scenario_exits_2_where_netem_is_missing(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tidelog.cli", "chaos", "run", "slow-link",
                           "--network", "netns", "--dir", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {NETEM_UNAVAILABLE}"] or \
        "no netem qdisc (sch_netem)" in done.stderr
