"""A controller and a broker started the way the image starts them, on 127.0.0.1.

Each node runs deploy/docker/entrypoint.sh with a TIDELOG_* environment, as a container would
(no container runtime here): the entrypoint copies the "mounted" secret (the controller's
cluster secret, the broker's own credential) and TLS key (group-readable, as Kubernetes mounts
them) to 0600 files, renders node.toml with node_config_from_env, formats the data dir with
``tidelog storage format`` and execs ``tidelog server``: the real ``tidelog`` console script
of this venv, first on PATH. The peer listeners run mutual TLS with certificates named as the
listeners check them (broker-101); the broker never sees the cluster secret. Both nodes must
answer /readyz 200 (the broker registered through TLS with its credential), then stop on
SIGTERM with exit 0. A second start on the same data dirs (formatted already) must come up too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tidelog.certs import issue, make_ca
from tidelog.cluster_secret import broker_credential, broker_credential_text, generate_secret
from tidelog.local_cluster import free_ports

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "deploy" / "docker" / "entrypoint.sh"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
CLUSTER_ID = "9d1c0b2a3e4f5a6b7c8d9e0f1a2b3c4d"



def start(name: str, base: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    environment = {**{k: v for k, v in os.environ.items() if not k.startswith("TIDELOG_")},
                   "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
                   "PYTHONUNBUFFERED": "1",
                   "TIDELOG_RUNTIME_DIR": str(base / name / "run"),
                   "TIDELOG_DATA_DIR": str(base / name / "volume" / "data"),
                   "TIDELOG_CLUSTER_ID": CLUSTER_ID, "TIDELOG_LISTEN_HOST": "127.0.0.1",
                   "TIDELOG_TLS_CA_FILE": str(base / "mounted" / "ca.crt"),
                   "TIDELOG_TLS_CERT_FILE": str(base / "mounted" / f"{name}.crt"),
                   "TIDELOG_TLS_KEY_FILE": str(base / "mounted" / f"{name}.key"),
                   "TIDELOG_TLS_CLIENT_LISTENER": "plaintext",
                   **env}
    log = open(base / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(["sh", str(ENTRYPOINT)], env=environment, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    finally:
        log.close()


def readiness(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
            return None if r.status == 200 else f"HTTP {r.status}"
    except urllib.error.HTTPError as e:
        return e.read().decode().strip() or f"HTTP {e.code}"
    except OSError as e:
        return str(e)


def log_tail(base: Path, name: str) -> str:
    path = base / f"{name}.log"
    return "\n".join(path.read_text(errors="replace").splitlines()[-20:]) if path.exists() else ""


def wait_ready(base: Path, nodes: dict[str, tuple[subprocess.Popen[bytes], int]]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    pending = dict.fromkeys(nodes, "not asked yet")
    while pending and time.monotonic() < deadline:
        for name in list(pending):
            proc, port = nodes[name]
            assert proc.poll() is None, f"{name} exited {proc.returncode}:\n{log_tail(base, name)}"
            reason = readiness(port)
            if reason is None:
                del pending[name]
            else:
                pending[name] = reason
        time.sleep(0.1)
    assert not pending, "\n".join(f"{n} not ready after {READY_TIMEOUT_S:.0f}s ({r}):\n"
                                  f"{log_tail(base, n)}" for n, r in pending.items())


def stop(base: Path, name: str, proc: subprocess.Popen[bytes]) -> int:
    os.kill(proc.pid, signal.SIGTERM)  # the entrypoint exec'd the node: this pid is the node
    try:
        return proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"{name} did not stop on SIGTERM:\n{log_tail(base, name)}")


def mount(path: Path, data: bytes) -> None:
    """As Kubernetes mounts a Secret with an fsGroup: tidelog itself would refuse the file."""
    path.write_bytes(data)
    path.chmod(0o440)


def test_a_controller_and_a_broker_run_from_the_entrypoint(tmp_path: Path) -> None:
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    root = generate_secret()
    mount(mounted / "cluster.secret", root.encode() + b"\n")
    mount(mounted / "broker.credential",
          broker_credential_text(broker_credential(root, 101)).encode())
    ca = make_ca()
    (mounted / "ca.crt").write_bytes(ca.cert_pem)
    for name, common_name in (("controller", "controller-1"), ("broker", "broker-101")):
        issued = issue(ca, common_name, hosts=("127.0.0.1",))
        (mounted / f"{name}.crt").write_bytes(issued.cert_pem)
        mount(mounted / f"{name}.key", issued.key_pem)
    controller_port, raft_port, controller_metrics, client_port, inter_broker_port, \
        broker_metrics = free_ports(6)
    voters = f"1@127.0.0.1:{controller_port}:{raft_port}"
    envs = {
        "controller": ({"TIDELOG_ROLE": "controller", "TIDELOG_NODE_ID": "1",
                        "TIDELOG_CLUSTER_SECRET_FILE": str(mounted / "cluster.secret"),
                        "TIDELOG_CONTROLLER_VOTERS": voters,
                        "TIDELOG_METRICS_PORT": str(controller_metrics)}, controller_metrics),
        "broker": ({"TIDELOG_ROLE": "broker", "TIDELOG_NODE_ID": "101",
                    "TIDELOG_BROKER_CREDENTIAL_FILE": str(mounted / "broker.credential"),
                    "TIDELOG_CONTROLLER_VOTERS": voters, "TIDELOG_ADVERTISED_HOST": "127.0.0.1",
                    "TIDELOG_CLIENT_PORT": str(client_port),
                    "TIDELOG_INTER_BROKER_PORT": str(inter_broker_port),
                    "TIDELOG_METRICS_PORT": str(broker_metrics)}, broker_metrics),
    }
    for attempt in ("first start (formats)", "second start (formatted)"):
        nodes = {name: (start(name, tmp_path, env), port) for name, (env, port) in envs.items()}
        try:
            wait_ready(tmp_path, nodes)
        finally:
            # The broker first: its controlled shutdown needs the controller.
            codes = {name: stop(tmp_path, name, nodes[name][0])
                     for name in ("broker", "controller") if nodes[name][0].poll() is None}
        assert codes == {"broker": 0, "controller": 0}, (
            attempt, codes, log_tail(tmp_path, "broker"), log_tail(tmp_path, "controller"))
    for name, secret in (("controller", "cluster.secret"), ("broker", "broker.credential")):
        meta = (tmp_path / name / "volume" / "data" / "meta.properties").read_text()
        assert f"cluster.id={CLUSTER_ID}" in meta
        run = tmp_path / name / "run"
        assert (run / secret).stat().st_mode & 0o077 == 0
        assert (run / "tls.key").stat().st_mode & 0o077 == 0
    assert not (tmp_path / "broker" / "run" / "cluster.secret").exists()
    assert root not in (tmp_path / "broker" / "run" / "node.toml").read_text()
