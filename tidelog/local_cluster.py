"""Local multi-process clusters on 127.0.0.1: configs, formatting, start/stop, faults.

One launcher for everything that runs a cluster on this machine: ``tidelog cluster up``, the
integration tests, the benchmarks and the chaos tests. Each node is its own OS process
(``python -m tidelog.cli server --config <dir>/<name>.toml``) logging to ``<dir>/<name>.log``; the
cluster's layout and pids are kept in ``<dir>/cluster.json`` so another process (a later CLI call)
can find, signal and stop them.

Node names: ``controller-<id>`` (ids 1..C) and ``broker-<id>`` (ids 101..100+B), or ``node-<id>``
for combined nodes. Ports are picked free at creation and kept for the cluster's lifetime, so a
restarted node comes back at the same address.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tidelog.cluster_secret import (
    broker_credential,
    generate_secret,
    node_certificate_name,
    read_secret_file,
    write_broker_credential_file,
    write_secret_file,
)
from tidelog.data_dir import format_data_dir

__all__ = ["LocalCluster", "NodeSpec", "free_ports"]

STATE_FILE = "cluster.json"
#: The cluster secret, beside the state file (mode 0600): the controllers' configs point at it;
#: each broker-only node gets its own credential made from it (``<name>.credential``).
SECRET_FILE = "cluster.secret"
HOST = "127.0.0.1"
#: Bounds of waits, so a broken node fails a test or a CLI call instead of hanging it.
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
POLL_S = 0.05
BROKER_ID_BASE = 100


#: Where :func:`free_ports` picks from when the kernel's ephemeral range leaves room: listening
#: ports below it (or above it), so that no outgoing connection can take one between the pick and
#: the node's bind.
LISTEN_PORTS_LOW = 10_000
_EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


def ephemeral_port_range(path: str = _EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's range for ephemeral ports (what bind(0) and outgoing connections use);
    Linux's default when it cannot be read."""
    try:
        low, high = (int(v) for v in Path(path).read_text().split()[:2])
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def listen_port_range(ephemeral: tuple[int, int]) -> range:
    """Ports to pick listeners from: the larger stretch outside ``ephemeral`` above
    LISTEN_PORTS_LOW (an empty range when there is none)."""
    low, high = ephemeral
    below = range(LISTEN_PORTS_LOW, max(low, LISTEN_PORTS_LOW))
    above = range(min(high + 1, 65536), 65536)
    return max(below, above, key=len)


def free_ports(count: int, *, rng: random.Random | None = None) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now (bound together, then released).

    Picked outside the kernel's ephemeral range where it leaves room: a port picked by
    binding port 0 is an ephemeral one, and any outgoing connection on the machine (another
    node dialling a peer, a client) can take it before the node that was given it binds it,
    which fails that node's start with "Address already in use". A listening port outside the
    range is only ever taken by another listener. Falls back to binding port 0."""
    rng = rng or random.Random()  # spreads the picks of processes started together
    candidates = listen_port_range(ephemeral_port_range())
    socks: list[socket.socket] = []
    try:
        attempts = count * 50 if len(candidates) >= count * 4 else 0  # a port in use is skipped
        for _ in range(attempts):
            if len(socks) == count:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((HOST, rng.choice(candidates)))
            except OSError:
                s.close()
                continue
            socks.append(s)
        while len(socks) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class NodeSpec:
    """One node of a local cluster and where it listens."""

    name: str
    node_id: int
    roles: list[str]
    metrics_port: int
    controller_port: int = 0
    raft_port: int = 0
    broker_port: int = 0
    inter_broker_port: int = 0
    pid: int = 0
    #: Where every listener of the node binds and is dialled (chaos's netns mode moves a node
    #: onto its namespace's address), and the network namespace it starts in ("" none).
    host: str = HOST
    netns: str = ""

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles


@dataclass
class LocalCluster:
    """A cluster of local processes rooted at ``base_dir``."""

    base_dir: Path
    cluster_id: str
    nodes: dict[str, NodeSpec] = field(default_factory=dict)
    #: Extra keys per table, e.g. {"controller": {"broker_session_timeout_ms": 3000}}.
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Extra environment variables per node name for every start of it, kept in cluster.json so
    #: a later CLI call restarts a node the same way (chaos/ routes a node's links with them).
    env: dict[str, dict[str, str]] = field(default_factory=dict)

    # ------------------------------------------------------------------ creation
    @classmethod
    def create(cls, base_dir: str | Path, *, controllers: int = 3, brokers: int = 3,
               combined: int = 0, cluster_id: str | None = None,
               overrides: dict[str, dict[str, Any]] | None = None,
               tls: bool = False) -> LocalCluster:
        """Lay out a new cluster: node specs, configs and formatted data dirs (nothing runs)."""
        import uuid

        base = Path(base_dir).resolve()
        if (base / STATE_FILE).exists():
            raise FileExistsError(f"{base} already holds a cluster; run `tidelog cluster down "
                                  f"--dir {base} --purge` or pick another --dir")
        base.mkdir(parents=True, exist_ok=True)
        cluster = cls(base, cluster_id or uuid.uuid4().hex, overrides=overrides or {})
        write_secret_file(cluster.secret_path, generate_secret())
        for spec in _layout(controllers=controllers, brokers=brokers, combined=combined):
            cluster.nodes[spec.name] = spec
        cluster.write_credentials()
        if tls:
            cluster.make_tls()
        for spec in cluster.nodes.values():
            cluster.config_path(spec.name).write_text(cluster.render_config(spec))
            format_data_dir(cluster.data_dir(spec.name), cluster_id=cluster.cluster_id,
                            node_id=spec.node_id)
        cluster.save()
        return cluster

    @classmethod
    def load(cls, base_dir: str | Path) -> LocalCluster:
        """The cluster laid out at ``base_dir`` (FileNotFoundError when there is none)."""
        base = Path(base_dir).resolve()
        state = json.loads((base / STATE_FILE).read_text())
        nodes = {n["name"]: NodeSpec(**n) for n in state["nodes"]}
        return cls(base, state["cluster_id"], nodes, state.get("overrides", {}),
                   state.get("env", {}))

    def save(self) -> None:
        state = {"cluster_id": self.cluster_id, "overrides": self.overrides, "env": self.env,
                 "nodes": [asdict(n) for n in self.nodes.values()]}
        # A temp name per process and thread: two savers (e.g. nodes started from several
        # threads) never write into each other's file; the last rename wins whole.
        tmp = self.base_dir / f"{STATE_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.base_dir / STATE_FILE)

    @property
    def secret_path(self) -> Path:
        return self.base_dir / SECRET_FILE

    def credential_path(self, name: str) -> Path:
        """A broker-only node's own credential (its config's broker_credential_file)."""
        return self.base_dir / f"{name}.credential"

    def write_credentials(self) -> None:
        """Each broker-only node's credential, made from the cluster secret (which only the
        controllers' configs name: a broker holds nothing that gives another's)."""
        secret = read_secret_file(self.secret_path)
        for spec in self.nodes.values():
            if spec.is_broker and not spec.is_controller:
                write_broker_credential_file(self.credential_path(spec.name),
                                             broker_credential(secret, spec.node_id))

    def config_path(self, name: str) -> Path:
        return self.base_dir / f"{name}.toml"

    def data_dir(self, name: str) -> Path:
        return self.base_dir / name

    def log_path(self, name: str) -> Path:
        return self.base_dir / f"{name}.log"

    def make_tls(self, *, client_tls: bool = True) -> Path:
        """TLS for every node (``tidelog cluster up --tls``): a CA and a certificate per node
        in ``<dir>/pki`` (with the CA's key, for issuing more with ``tidelog security init``;
        each node's for its host, 127.0.0.1 and localhost; common name ``broker-<id>``
        or ``controller-<id>``, which the peer listeners check against the id a broker
        claims), an ``admin`` client certificate, the ``[tls]`` override (configs must be
        written after), and ``<dir>/profile.toml`` for the CLI; returns the profile's path.
        Without ``client_tls`` the client listener stays plaintext (chaos's netns mode, whose
        clients speak plaintext) and only the peer listeners run TLS."""
        from tidelog.certs import issue, make_ca
        from tidelog.scram import MECHANISMS as SCRAM_MECHANISMS

        pki = self.base_dir / "pki"
        pki.mkdir(exist_ok=True)
        ca = make_ca(f"Tidelog local CA {self.cluster_id[:8]}")
        (pki / "ca.crt").write_bytes(ca.cert_pem)
        # Kept (0600) so that `tidelog security init --out <dir>/pki --client NAME` issues more
        # certificates from it: one machine holds every node here anyway.
        write_secret_file(pki / "ca.key", ca.key_pem.decode().strip())
        for spec in self.nodes.values():
            hosts = tuple(dict.fromkeys((spec.host, HOST, "localhost")))
            self._write_certificate(pki, spec.name, issue(
                ca, node_certificate_name(spec.node_id, spec.roles), hosts=hosts))
        self._write_certificate(pki, "admin", issue(ca, "admin"))
        # Other [tls] keys given (client_auth) are kept; the files are these.
        self.overrides["tls"] = {**self.overrides.get("tls", {}), "ca_file": str(pki / "ca.crt"),
                                 "cert_file": f"{pki}/{{name}}.crt",
                                 "key_file": f"{pki}/{{name}}.key"}
        if not client_tls:
            self.overrides["tls"]["client_listener"] = "plaintext"
            self.overrides.pop("sasl", None)
            return pki / "ca.crt"
        # SCRAM users too (tidelog user create): a TLS cluster takes both kinds of client.
        self.overrides["sasl"] = {"enabled_mechanisms": list(SCRAM_MECHANISMS)}
        profile = self.base_dir / "profile.toml"
        profile.write_text(f'brokers = "{self.bootstrap}"\nsecurity_protocol = "SSL"\n'
                           f'ssl_cafile = "{pki / "ca.crt"}"\n'
                           f'ssl_certfile = "{pki / "admin.crt"}"\n'
                           f'ssl_keyfile = "{pki / "admin.key"}"\n')
        return profile

    @staticmethod
    def _write_certificate(pki: Path, name: str, issued: Any) -> None:
        (pki / f"{name}.crt").write_bytes(issued.cert_pem)
        write_secret_file(pki / f"{name}.key", issued.key_pem.decode().strip())

    def render_config(self, spec: NodeSpec) -> str:
        """The node's TOML config: a controller (or combined node) names the cluster secret, a
        broker-only node its own credential."""
        secret = (f'cluster_secret_file = "{self.secret_path}"' if spec.is_controller
                  else f'broker_credential_file = "{self.credential_path(spec.name)}"')
        lines = [f"node_id = {spec.node_id}", f'data_dir = "{self.data_dir(spec.name)}"',
                 f"roles = {json.dumps(spec.roles)}", f'cluster_id = "{self.cluster_id}"',
                 secret, ""]
        # An override may replace a default key (chaos/ moves raft_listen_host): TOML refuses
        # a key given twice.
        controller = {"listen_host": spec.host, "raft_listen_host": spec.host}
        lines += ["[controller]",
                  *_toml_items(controller | self.overrides.get("controller", {})), ""]
        lines += ["[broker]", f'host = "{spec.host}"', f'listen_host = "{spec.host}"',
                  f"port = {spec.broker_port or 9092}",
                  f'inter_broker_listen_host = "{spec.host}"',
                  f"inter_broker_port = {spec.inter_broker_port or 9095}",
                  *_toml_items(self.overrides.get("broker", {})), ""]
        lines += ["[metrics]", f'host = "{spec.host}"', f"port = {spec.metrics_port}", ""]
        if "tls" in self.overrides:  # per-node files: "{name}" in a value is the node's name
            tls = {k: v.format(name=spec.name) if isinstance(v, str) else v
                   for k, v in self.overrides["tls"].items()}
            lines += ["[tls]", *_toml_items(tls), ""]
        if "sasl" in self.overrides:
            lines += ["[sasl]", *_toml_items(self.overrides["sasl"]), ""]
        if "authorization" in self.overrides:
            lines += ["[authorization]", *_toml_items(self.overrides["authorization"]), ""]
        for voter in self.controllers():
            lines += ["[[controller.voters]]", f"id = {voter.node_id}", f'host = "{voter.host}"',
                      f"port = {voter.controller_port}", f"raft_port = {voter.raft_port}", ""]
        return "\n".join(lines)

    # ------------------------------------------------------------------ views
    def controllers(self) -> list[NodeSpec]:
        return [n for n in self.nodes.values() if n.is_controller]

    def brokers(self) -> list[NodeSpec]:
        return [n for n in self.nodes.values() if n.is_broker]

    @property
    def bootstrap(self) -> str:
        """Comma-separated broker addresses, as clients take them."""
        return ",".join(f"{b.host}:{b.broker_port}" for b in self.brokers())

    @property
    def controller_addresses(self) -> list[str]:
        return [f"{c.host}:{c.controller_port}" for c in self.controllers()]

    def peer_channel(self, address: str) -> Any:
        """A blocking gRPC channel to a node's controller or inter-broker listener as a tool
        dials it (DescribeQuorum): plaintext, or, on a TLS cluster, mutual TLS with the
        ``admin`` certificate, which those listeners want (a certificate of the CA)."""
        import grpc

        if "tls" not in self.overrides:
            return grpc.insecure_channel(address)
        pki = self.base_dir / "pki"
        credentials = grpc.ssl_channel_credentials(
            root_certificates=(pki / "ca.crt").read_bytes(),
            private_key=(pki / "admin.key").read_bytes(),
            certificate_chain=(pki / "admin.crt").read_bytes())
        return grpc.secure_channel(address, credentials)

    def is_running(self, name: str) -> bool:
        pid = self.nodes[name].pid
        if not pid:
            return False
        try:
            waited, _ = os.waitpid(pid, os.WNOHANG)
            if waited == pid:
                return False
        except ChildProcessError:
            pass  # not our child (another CLI call started it): fall back to a signal probe
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return not _is_zombie(pid)

    # ------------------------------------------------------------------ processes
    def start(self, name: str, *, env: Mapping[str, str] | None = None) -> int:
        """Start one node (no-op when it already runs); returns its pid. ``env``: extra
        environment variables for the process (tests use it to route a node through a proxy)."""
        spec = self.nodes[name]
        if self.is_running(name):
            return spec.pid
        log = open(self.log_path(name), "ab")  # noqa: SIM115 - handed to the child
        environment = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env.get(name, {}),
                       **(env or {})}
        # ip netns exec execs the command itself, so the pid is the node's.
        netns = ["ip", "netns", "exec", spec.netns] if spec.netns else []
        proc = subprocess.Popen(
            [*netns, sys.executable, "-m", "tidelog.cli", "server", "--config",
             str(self.config_path(name))],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment,
            start_new_session=True,  # a Ctrl-C in the user's terminal does not reach the nodes
        )
        log.close()
        spec.pid = proc.pid
        self.save()
        return proc.pid

    def start_all(self) -> None:
        for name in self.nodes:
            self.start(name)

    def signal(self, name: str, sig: int) -> None:
        """Send ``sig`` to a running node (ProcessLookupError when it is not running)."""
        if not self.is_running(name):
            raise ProcessLookupError(f"{name} is not running")
        os.kill(self.nodes[name].pid, sig)

    def kill(self, name: str) -> None:
        """kill -9: no shutdown, no flush; then reap it."""
        self.signal(name, signal.SIGKILL)
        self._wait_exit(name, STOP_TIMEOUT_S)

    def pause(self, name: str) -> None:
        self.signal(name, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self.signal(name, signal.SIGCONT)

    def stop(self, name: str, *, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM (clean or controlled shutdown), then SIGKILL if it does not exit in time."""
        if not self.is_running(name):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.nodes[name].pid, signal.SIGCONT)  # a paused node cannot handle TERM
            os.kill(self.nodes[name].pid, signal.SIGTERM)
        if not self._wait_exit(name, timeout_s):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.nodes[name].pid, signal.SIGKILL)
            self._wait_exit(name, STOP_TIMEOUT_S)

    def restart(self, name: str) -> int:
        self.stop(name)
        return self.start(name)

    def stop_all(self) -> None:
        # Brokers first: their controlled shutdown needs the controllers.
        for spec in self.brokers() + [c for c in self.controllers() if not c.is_broker]:
            self.stop(spec.name)

    def _wait_exit(self, name: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.is_running(name):
                self.nodes[name].pid = 0
                self.save()
                return True
            time.sleep(POLL_S)
        return False

    # ------------------------------------------------------------------ health
    def readiness(self, name: str) -> str | None:
        """None when the node's /readyz says ready, else why not."""
        if not self.is_running(name):
            return "not running"
        url = f"http://{self.nodes[name].host}:{self.nodes[name].metrics_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return None if r.status == 200 else r.read().decode().strip()
        except urllib.error.HTTPError as e:
            return e.read().decode().strip() or f"HTTP {e.code}"
        except OSError as e:
            return f"metrics endpoint not reachable ({e})"

    def wait_ready(self, names: list[str] | None = None, *, timeout_s: float = READY_TIMEOUT_S
                   ) -> None:
        """Wait until every named (default: every running) node is ready; TimeoutError names
        the nodes that are not, with the tail of their logs."""
        targets = names or [n for n in self.nodes if self.is_running(n)]
        deadline = time.monotonic() + timeout_s
        pending = {n: "not checked" for n in targets}
        while pending and time.monotonic() < deadline:
            for name in list(pending):
                reason = self.readiness(name)
                if reason is None:
                    del pending[name]
                else:
                    pending[name] = reason
                    if reason == "not running":
                        break
            if pending:
                time.sleep(0.1)
        if pending:
            detail = "; ".join(f"{n}: {r}\n{self.log_tail(n)}" for n, r in pending.items())
            raise TimeoutError(f"nodes not ready after {timeout_s:.0f}s: {detail}")

    def log_tail(self, name: str, lines: int = 15) -> str:
        try:
            text = self.log_path(name).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join("    " + line for line in text.splitlines()[-lines:])

    def down(self, *, purge: bool = False) -> None:
        """Stop every node; with ``purge`` also delete the cluster's directory."""
        self.stop_all()
        for spec in self.nodes.values():  # anything left (a controller on a combined node)
            self.stop(spec.name)
        if purge:
            import shutil

            shutil.rmtree(self.base_dir, ignore_errors=True)

    @contextlib.contextmanager
    def running(self, *, timeout_s: float = READY_TIMEOUT_S) -> Iterator[LocalCluster]:
        """Start every node, wait until ready, and always stop them on exit."""
        try:
            self.start_all()
            self.wait_ready(timeout_s=timeout_s)
            yield self
        finally:
            self.down()


def _layout(*, controllers: int, brokers: int, combined: int) -> list[NodeSpec]:
    if combined and (controllers or brokers):
        raise ValueError("use either combined nodes or separate controllers and brokers")
    if not combined and controllers < 1:
        raise ValueError("a cluster needs at least one controller")
    specs: list[NodeSpec] = []
    if combined:
        ports = iter(free_ports(combined * 5))
        for i in range(1, combined + 1):
            specs.append(NodeSpec(f"node-{i}", i, ["controller", "broker"], next(ports),
                                  next(ports), next(ports), next(ports), next(ports)))
        return specs
    ports = iter(free_ports(controllers * 3 + brokers * 3))
    for i in range(1, controllers + 1):
        specs.append(NodeSpec(f"controller-{i}", i, ["controller"], next(ports), next(ports),
                              next(ports)))
    for i in range(1, brokers + 1):
        specs.append(NodeSpec(f"broker-{i}", BROKER_ID_BASE + i, ["broker"], next(ports),
                              broker_port=next(ports), inter_broker_port=next(ports)))
    return specs


def _toml_items(items: dict[str, Any]) -> list[str]:
    return [f"{k} = {json.dumps(v)}" for k, v in items.items()]


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False
