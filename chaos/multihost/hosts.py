"""The six hosts of the multi-host run: their inventory, rendered files and node processes."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.chaos.netns.plan import DEVICE, NetnsPlan
from tidelog.chaos.netns.shell import run as run_ip
from tidelog.deploy.inventory import Inventory, Node

__all__ = [
    "BROKER_HOSTS",
    "CONTROLLER_HOSTS",
    "HOSTS",
    "Nodes",
    "install",
    "inventory_text",
    "set_link",
]

CONTROLLER_HOSTS = ("ctl-1", "ctl-2", "ctl-3")
BROKER_HOSTS = ("broker-a", "broker-b", "broker-c")
HOSTS = CONTROLLER_HOSTS + BROKER_HOSTS
STOP_TIMEOUT_S = 30.0


def inventory_text(plan: NetnsPlan, workdir: Path) -> str:
    """The inventory of the run: each host at its namespace's address, in a rack of its own
    (racks r1..r3, a controller and a broker in each), TLS on every listener (the renderer
    makes the CA and the certificates), files under ``workdir``."""
    lines = ['cluster_id = "generate"', 'cluster_secret_file = "generate"', "tls = true",
             f'config_dir = "{workdir}/etc/tidelog"', f'data_root = "{workdir}/data"',
             f'install_prefix = "{Path(sys.executable).parent.parent}"', ""]
    for i, host in enumerate(HOSTS):
        node_id = i + 1 if host in CONTROLLER_HOSTS else 100 + i - 2
        role = "controller" if host in CONTROLLER_HOSTS else "broker"
        lines += ["[[hosts]]", f'name = "{host}"', f'address = "{plan.address(host)}"',
                  f'rack = "r{i % 3 + 1}"', "[[hosts.nodes]]", f"id = {node_id}",
                  f'roles = ["{role}"]', ""]
    return "\n".join(lines)


def install(inv: Inventory, rendered: Path) -> None:
    """What ``rsync -a hosts/<host>/ <host>:/`` does on real hosts: each host's config files
    into the config dir (the hosts share this machine's file system, and their file names
    differ: only the identical cluster secret and CA certificate are written more than once);
    data dirs 0700."""
    target = Path(inv.config_dir)
    for host in inv.hosts:
        shutil.copytree(rendered / "hosts" / host.name / inv.config_dir.lstrip("/"), target,
                        dirs_exist_ok=True)
        for node in host.nodes:
            Path(node.data_dir).mkdir(mode=0o700, parents=True, exist_ok=True)


@dataclass
class Nodes:
    """The nodes' processes, each in its host's namespace, started and stopped by pid."""

    plan: NetnsPlan
    inv: Inventory
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def config(self, node: Node) -> str:
        return f"{self.inv.config_dir}/{node.name}.toml"

    def _exec(self, node: Node, *args: str) -> list[str]:
        return [*self.plan.exec_prefix(node.host), sys.executable, "-m", "tidelog.cli", *args]

    def format_all(self, cluster_id: str) -> None:
        for node in self.inv.nodes:
            subprocess.run(self._exec(node, "storage", "format", "--config", self.config(node),
                                      "--cluster-id", cluster_id, "--ignore-formatted"),
                           check=True, capture_output=True, timeout=60)

    def start(self, node: Node) -> None:
        log = open(self.logs / f"{node.name}.log", "ab")  # noqa: SIM115 - the child keeps it
        self.procs[node.name] = subprocess.Popen(
            self._exec(node, "server", "--config", self.config(node)), stdout=log, stderr=log,
            stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log.close()

    def readiness(self, node: Node) -> str | None:
        proc = self.procs.get(node.name)
        if proc is None or proc.poll() is not None:
            return "not running"
        host = self.inv.host(node.host)
        url = f"http://{host.metrics_address}:{node.ports.metrics}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return None if r.status == 200 else f"HTTP {r.status}"
        except urllib.error.HTTPError as e:
            return e.read().decode().strip() or f"HTTP {e.code}"
        except OSError as e:
            return f"unreachable ({e})"

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            waiting = {n.name: r for n in self.inv.nodes if (r := self.readiness(n))}
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes not ready after {timeout_s:.0f} s: {waiting}")
            time.sleep(0.5)

    def stop_all(self) -> dict[str, int | None]:
        """SIGTERM the brokers (each a controlled shutdown, which needs the controllers), then
        the controllers; SIGKILL what outlives its wait. The exit codes."""
        codes: dict[str, int | None] = {}
        for kind in ("broker", "controller"):
            group = {n.name: self.procs[n.name] for n in self.inv.nodes
                     if n.name in self.procs and n.is_broker == (kind == "broker")}
            for proc in group.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for name, proc in group.items():
                try:
                    codes[name] = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    codes[name] = None
        return codes

    def log_tail(self, name: str, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join((self.logs / f"{name}.log").read_text().splitlines()[-lines:])
        return ""


def set_link(plan: NetnsPlan, host: str, up: bool) -> None:
    """Take a host's only link down or up (from any namespace: ``ip -n``)."""
    run_ip(["ip", "-n", plan.namespace(host), "link", "set", DEVICE, "up" if up else "down"])
