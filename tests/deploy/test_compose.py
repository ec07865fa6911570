"""The image and the docker compose cluster of deploy/docker/, checked without Docker.

* compose.yml, parsed with PyYAML and interpolated as compose does: images are the project's
  Dockerfile or pinned public ones, named volumes and secrets are declared, bind mounts exist,
  tidelog nodes have health checks, controlled-shutdown time and one published port (brokers),
  each node mounts only its own secrets (the cluster secret on controllers only, a broker its
  own credential, each node its certificate), which make-secrets.sh (run for real) writes, and
  each node's environment renders a node.toml tidelog.config accepts (TLS on the peer
  listeners), whose voters are the controller services. Prometheus' scrape config names those
  services.
* The Dockerfile: base image, non-root user, health check, stop signal, ports, entrypoint.
* entrypoint.sh, run for real with a stand-in ``tidelog`` on PATH: the private copies (a
  controller's cluster secret, a broker's credential, the TLS key), the order of the steps and
  that the node is exec'd (same pid).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidelog.certs import issue, make_ca
from tidelog.cluster_secret import (
    broker_credential,
    generate_secret,
    node_certificate_name,
    read_secret_file,
    write_broker_credential_file,
    write_secret_file,
)
from tidelog.config import NodeConfig, parse_config
from tidelog.deploy.container import ENV_VARIABLES, node_config_from_env
from tidelog.errors import InvalidConfigError

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "deploy" / "docker"
COMPOSE_FILE = DOCKER / "compose.yml"
DOCKERFILE = DOCKER / "Dockerfile"
ENTRYPOINT = DOCKER / "entrypoint.sh"
#: What the user's shell or deploy/docker/.env gives compose.
SHELL_ENV = {"TIDELOG_CLUSTER_ID": "5b0e9c2a7d3f41e8a6c4b2d0f9e8a7c6"}
UID = 10001


# ------------------------------------------------------------------ compose's interpolation

_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
                       r"(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)")


class InterpolationError(Exception):
    pass


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}, $$."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def replace(m: re.Match[str]) -> str:
        if m[0] == "$$":
            return "$"
        name = m["name"] or m["bare"]
        op, arg = m["op"], m["arg"]
        unset = name not in env or (op is not None and op.startswith(":") and not env[name])
        if op in (":?", "?") and unset:
            raise InterpolationError(f"{name}: {arg}")
        if op in (":-", "-") and unset:
            return str(arg)
        return env.get(name, "")

    return _VARIABLE.sub(replace, value)


def load_compose(env: dict[str, str] | None = None) -> dict[str, Any]:
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    return dict(interpolate(raw, SHELL_ENV if env is None else env))


COMPOSE = load_compose()
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
NODES = {name: s for name, s in SERVICES.items() if "build" in s}
CONTROLLERS = [n for n, s in NODES.items() if s["environment"]["TIDELOG_ROLE"] == "controller"]
BROKERS = [n for n, s in NODES.items() if s["environment"]["TIDELOG_ROLE"] == "broker"]


def test_the_cluster_id_must_be_given() -> None:
    with pytest.raises(InterpolationError, match="tidelog storage random-uuid"):
        load_compose({})
    assert CONTROLLERS == ["controller-1", "controller-2", "controller-3"]
    assert BROKERS == ["broker-1", "broker-2", "broker-3"]


# ------------------------------------------------------------------ compose.yml


def test_images_are_the_dockerfile_or_pinned() -> None:
    for name, service in SERVICES.items():
        if "build" in service:
            build = service["build"]
            assert (DOCKER / build["context"]).resolve() == ROOT, name
            assert (ROOT / build["dockerfile"]).resolve() == DOCKERFILE, name
            assert service["image"] == "tidelog:0.1.0"
        else:
            image = service["image"]
            repo, _, tag = image.rpartition(":")
            assert repo and "/" not in tag, f"{name}: {image} has no tag"
            assert tag != "latest" and re.search(r"\d+\.\d+\.\d+", tag), f"{name}: {image}"
    assert SERVICES["prometheus"]["image"].startswith("prom/prometheus:")
    assert SERVICES["grafana"]["image"].startswith("grafana/grafana:")


def volume_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    mounts = []
    for v in service.get("volumes", []):
        if isinstance(v, dict):
            mounts.append((v["source"], v["target"]))
        else:
            source, target = v.split(":")[:2]
            mounts.append((source, target))
    return mounts


def test_volumes_are_declared_and_bind_mounts_exist() -> None:
    declared = set(COMPOSE["volumes"])
    used = set()
    for name, service in SERVICES.items():
        for source, _target in volume_mounts(service):
            if source.startswith((".", "/")):
                path = (DOCKER / source).resolve()
                assert path.is_relative_to(ROOT), f"{name} mounts {source} from outside the repo"
                assert path.exists(), f"{name} mounts {source}, which does not exist"
            else:
                assert source in declared, f"{name} uses volume {source}, not declared"
                used.add(source)
    assert used == declared
    # A data volume per node, never shared: a data dir belongs to one node id.
    data = [s for n in NODES for s, t in volume_mounts(NODES[n]) if t == "/var/lib/tidelog"]
    assert len(data) == len(set(data)) == len(NODES)


def test_monitoring_mounts_the_deploy_configs() -> None:
    prometheus = dict((t, s) for s, t in volume_mounts(SERVICES["prometheus"]))
    assert prometheus["/etc/prometheus/prometheus.yml"] == "../prometheus/prometheus.yml"
    assert prometheus["/etc/prometheus/rules"] == "../prometheus/rules"
    grafana = dict((t, s) for s, t in volume_mounts(SERVICES["grafana"]))
    assert grafana["/etc/grafana/provisioning"] == "../grafana/provisioning"
    assert grafana["/var/lib/grafana/dashboards"] == "../grafana/dashboards"


def test_prometheus_scrapes_every_node_by_service_name() -> None:
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    jobs = {job["job_name"]: [t for sc in job["static_configs"] for t in sc["targets"]]
            for job in config["scrape_configs"]}
    for job, names in (("tidelog-controller", CONTROLLERS), ("tidelog-broker", BROKERS)):
        expected = [f"{n}:{NODES[n]['environment']['TIDELOG_METRICS_PORT']}" for n in names]
        assert sorted(jobs[job]) == sorted(expected)


def mounted(service: dict[str, Any]) -> dict[str, str]:
    """A service's secrets: the name it sees in /run/secrets -> the file compose reads."""
    return {m["target"]: COMPOSE["secrets"][m["source"]]["file"] for m in service["secrets"]}


def test_each_node_mounts_only_its_own_secrets_kept_out_of_git() -> None:
    """The cluster secret to the controllers only; to each broker its own credential; to each
    node its own certificate and key (named as the peer listeners check them) and the CA."""
    for name, service in NODES.items():
        env = service["environment"]
        node_id = int(env["TIDELOG_NODE_ID"])
        files = mounted(service)
        common = {"ca.crt": "./secrets/pki/ca.crt"}
        if name in CONTROLLERS:
            common |= {"cluster.secret": "./secrets/cluster.secret",
                       "node.crt": f"./secrets/pki/controller-{node_id}.crt",
                       "node.key": f"./secrets/pki/controller-{node_id}.key"}
            assert env["TIDELOG_CLUSTER_SECRET_FILE"] == "/run/secrets/cluster.secret"
        else:
            common |= {"broker.credential": f"./secrets/broker-{node_id}.credential",
                       "node.crt": f"./secrets/pki/broker-{node_id}.crt",
                       "node.key": f"./secrets/pki/broker-{node_id}.key"}
            assert env["TIDELOG_BROKER_CREDENTIAL_FILE"] == "/run/secrets/broker.credential"
            assert "TIDELOG_CLUSTER_SECRET_FILE" not in env
        assert files == common, name
        for key, target in (("TIDELOG_TLS_CA_FILE", "ca.crt"), ("TIDELOG_TLS_CERT_FILE",
                                                                "node.crt"),
                            ("TIDELOG_TLS_KEY_FILE", "node.key")):
            assert env[key] == f"/run/secrets/{target}", (name, key)
    assert "secrets/" in (DOCKER / ".gitignore").read_text().split()
    readme = (DOCKER / "README.md").read_text()
    assert "deploy/docker/make-secrets.sh" in readme
    assert f"sudo chown -R {UID} deploy/docker/secrets" in readme


def test_make_secrets_writes_what_compose_mounts(tmp_path: Path) -> None:
    """make-secrets.sh, run for real (the venv's tidelog on PATH) in a copy of deploy/docker."""
    import shutil
    import sys

    docker = tmp_path / "docker"
    docker.mkdir()
    shutil.copy(DOCKER / "make-secrets.sh", docker)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    result = subprocess.run(["sh", str(docker / "make-secrets.sh")], env=env, text=True,
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for file in COMPOSE["secrets"].values():
        path = docker / file["file"]
        assert path.is_file(), file
    assert not (docker / "secrets/pki/ca.key").exists()
    for service in NODES.values():
        files = {t: docker / f for t, f in mounted(service).items()}
        if "broker.credential" in files:
            assert "broker_id = " + service["environment"]["TIDELOG_NODE_ID"] in \
                files["broker.credential"].read_text()
    again = subprocess.run(["sh", str(docker / "make-secrets.sh")], env=env, text=True,
                           capture_output=True, timeout=120)
    assert again.returncode == 1 and "exists" in again.stderr


def seconds(duration: str) -> int:
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert m and duration, duration
    return int(m[1] or 0) * 60 + int(m[2] or 0)


def test_nodes_have_health_checks_and_time_to_shut_down() -> None:
    for name, service in NODES.items():
        metrics = service["environment"]["TIDELOG_METRICS_PORT"]
        test = " ".join(service["healthcheck"]["test"])
        assert service["healthcheck"]["test"][0] == "CMD"
        assert f"http://127.0.0.1:{metrics}/readyz" in test, name
        assert seconds(service["stop_grace_period"]) >= 60
        assert service["stop_signal"] == "SIGTERM"
        assert service["read_only"] is True and "/run/tidelog" in service["tmpfs"]
        assert service["cap_drop"] == ["ALL"]
        assert service["hostname"] == name
    for broker in BROKERS:
        assert NODES[broker]["depends_on"] == {
            c: {"condition": "service_healthy"} for c in CONTROLLERS}
    for controller in CONTROLLERS:
        assert "depends_on" not in NODES[controller]  # they elect a leader together


def test_only_client_ports_are_published_on_loopback() -> None:
    for name, service in SERVICES.items():
        for port in service.get("ports", []):
            host, published, target = port.split(":")
            assert host == "127.0.0.1", f"{name} publishes {port}"
            if name in NODES:
                assert name in BROKERS
                env = NODES[name]["environment"]
                assert published == target == env["TIDELOG_CLIENT_PORT"]
                assert env["TIDELOG_ADVERTISED_HOST"] == "127.0.0.1"
    assert all("ports" in NODES[b] for b in BROKERS)
    exposed = load_compose({**SHELL_ENV, "TIDELOG_PUBLISH_HOST": "0.0.0.0"})
    assert exposed["services"]["broker-1"]["ports"] == ["0.0.0.0:19092:19092"]


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The cluster secret, each broker's credential and a CA with the nodes' certificates, in
    one directory, as make-secrets.sh lays them out under secrets/."""
    base = tmp_path_factory.mktemp("compose")
    root = generate_secret()
    write_secret_file(base / "cluster.secret", root)
    ca = make_ca()
    (base / "ca.crt").write_bytes(ca.cert_pem)
    for name, service in NODES.items():
        node_id = int(service["environment"]["TIDELOG_NODE_ID"])
        issued = issue(ca, node_certificate_name(node_id, [
            service["environment"]["TIDELOG_ROLE"]]), hosts=(name,))
        (base / f"{name}.crt").write_bytes(issued.cert_pem)
        write_secret_file(base / f"{name}.key", issued.key_pem.decode().strip())
        if name in BROKERS:
            write_broker_credential_file(base / f"{name}.credential",
                                         broker_credential(root, node_id))
    return str(base / "cluster.secret")


def node_configs(secret_file: str) -> dict[str, NodeConfig]:
    base = Path(secret_file).parent
    configs = {}
    for name, service in NODES.items():
        env = {k: str(v) for k, v in service["environment"].items()}
        # The entrypoint's private copies, and the mounted certificates.
        secret = "TIDELOG_CLUSTER_SECRET_FILE" if name in CONTROLLERS \
            else "TIDELOG_BROKER_CREDENTIAL_FILE"
        env[secret] = secret_file if name in CONTROLLERS else str(base / f"{name}.credential")
        env |= {"TIDELOG_TLS_CA_FILE": str(base / "ca.crt"),
                "TIDELOG_TLS_CERT_FILE": str(base / f"{name}.crt"),
                "TIDELOG_TLS_KEY_FILE": str(base / f"{name}.key")}
        configs[name] = parse_config(node_config_from_env(env, service["hostname"]))
    return configs


def test_every_node_gets_a_config_tidelog_accepts(secret_file: str) -> None:
    configs = node_configs(secret_file)
    assert {n: c.node_id for n, c in configs.items()} == {
        "controller-1": 1, "controller-2": 2, "controller-3": 3,
        "broker-1": 101, "broker-2": 102, "broker-3": 103}
    controller_ids = {configs[c].node_id: c for c in CONTROLLERS}
    for name, cfg in configs.items():
        assert cfg.cluster_id == SHELL_ENV["TIDELOG_CLUSTER_ID"]
        # The voters are the controller services, reached by service name.
        assert {v.id: v.host for v in cfg.controller.voters} == controller_ids, name
        assert cfg.tls.enabled, name  # the peer listeners bind 0.0.0.0: mutual TLS
        if name in BROKERS:
            assert cfg.broker.inter_broker_host == name  # replication by service name
            assert cfg.broker.listen_host == cfg.broker.inter_broker_listen_host == "0.0.0.0"
            assert cfg.cluster_secret() is None and cfg.tls.client_listener == "plaintext"
    ports = [configs[b].broker.port for b in BROKERS]
    assert len(set(ports)) == len(ports)  # one published port each


def test_the_readme_documents_the_environment_contract() -> None:
    rows = {line.split("|")[1].strip(" `"): line.split("|")[2].strip(" `")
            for line in (DOCKER / "README.md").read_text().splitlines()
            if line.startswith("| `TIDELOG_")}
    assert rows == {name: default for name, (default, _) in ENV_VARIABLES.items()}


# ------------------------------------------------------------------ Dockerfile


def instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1])
            for line in lines if line and not line.startswith("#")]


def test_the_dockerfile() -> None:
    steps = instructions()
    args = {i: [a for j, a in steps if j == i] for i, _ in steps}
    assert args["FROM"] == ["python:3.11-slim"]
    user = args["USER"][-1].split(":")[0]
    assert user not in ("root", "0") and user == str(UID)
    assert [i for i, _ in steps].index("USER") > max(
        n for n, (i, _) in enumerate(steps) if i == "RUN")  # nothing runs as root after it
    assert f"--uid {UID}" in " ".join(args["RUN"])
    assert set(args["EXPOSE"][0].split()) == {"9092", "9093", "9094", "9095", "9644"}
    assert args["VOLUME"] == ['["/var/lib/tidelog"]']
    assert args["STOPSIGNAL"] == ["SIGTERM"]
    healthcheck = args["HEALTHCHECK"][0]
    assert "CMD [" in healthcheck and "urllib.request" in healthcheck
    assert "http://127.0.0.1:%s/healthz" in healthcheck and "'9644'" in healthcheck
    assert "curl" not in healthcheck and "wget" not in healthcheck
    # The project from the build context, without the dev extra.
    assert "pip install ." in " ".join(args["RUN"])
    assert "[dev" not in DOCKERFILE.read_text()
    for copy in args["COPY"]:
        *sources, _ = [a for a in copy.split() if not a.startswith("--")]
        assert all((ROOT / s).exists() for s in sources), copy
    entrypoint = args["ENTRYPOINT"][0]
    assert entrypoint.startswith("[")  # exec form: the script is PID 1, gets SIGTERM
    target = yaml.safe_load(entrypoint)[0]
    copies = [c.split() for c in args["COPY"] if c.split()[-1] == target]
    assert len(copies) == 1 and copies[0][-2] == "deploy/docker/entrypoint.sh"
    assert "--chmod=0755" in copies[0]
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().split()
    assert {".venv", ".git", "**/*.secret"} <= set(ignore)


def test_the_entrypoint_script() -> None:
    mode = ENTRYPOINT.stat().st_mode
    assert mode & stat.S_IXUSR and mode & stat.S_IXOTH
    text = ENTRYPOINT.read_text()
    assert text.startswith("#!/bin/sh\n")
    assert "\nset -eu\n" in text
    subprocess.run(["sh", "-n", str(ENTRYPOINT)], check=True)


# ------------------------------------------------------------------ entrypoint.sh, run

FAKE_TIDELOG = """#!/bin/sh
# Records each call: its pid, the secret file it was told about, its arguments, and the
# broker credential and TLS key files it was told about.
echo "$$|${TIDELOG_CLUSTER_SECRET_FILE:-}|$*|${TIDELOG_BROKER_CREDENTIAL_FILE:-}|\
${TIDELOG_TLS_KEY_FILE:-}" >> "$CALLS"
if [ "$1 $2" = "deploy container-config" ]; then echo "node_id = 1" > "$4"; fi
"""


def run_entrypoint(tmp_path: Path, env: dict[str, str], *args: str
                   ) -> tuple[subprocess.CompletedProcess[str], int, list[list[str]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "tidelog").write_text(FAKE_TIDELOG)
    (bin_dir / "tidelog").chmod(0o755)
    calls = tmp_path / "calls"
    full_env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls), **env}
    proc = subprocess.Popen(["sh", str(ENTRYPOINT), *args], env=full_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=30)
    lines = calls.read_text().splitlines() if calls.exists() else []
    return (subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid,
            [line.split("|") for line in lines])


def test_the_entrypoint_copies_the_secret_formats_and_execs_the_node(tmp_path: Path) -> None:
    mounted = tmp_path / "mounted.secret"
    mounted.write_text(generate_secret() + "\n")
    mounted.chmod(0o440)  # what Kubernetes makes of defaultMode 0400 with an fsGroup
    with pytest.raises(InvalidConfigError, match="readable by others"):
        read_secret_file(mounted)  # which is why the entrypoint copies it
    runtime = tmp_path / "run"
    env = {"TIDELOG_CLUSTER_SECRET_FILE": str(mounted), "TIDELOG_RUNTIME_DIR": str(runtime),
           "TIDELOG_CLUSTER_ID": "c1d"}
    result, pid, calls = run_entrypoint(tmp_path, env)
    assert result.returncode == 0, result.stderr
    copy = runtime / "cluster.secret"
    config = str(runtime / "node.toml")
    assert [c[2] for c in calls] == [
        f"deploy container-config --out {config}",
        f"storage format --config {config} --cluster-id c1d --ignore-formatted",
        f"server --config {config}"]
    assert {c[1] for c in calls} == {str(copy)}  # every step is told about the copy
    assert calls[-1][0] == str(pid)  # exec'd: the node is the process the runtime signals
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert read_secret_file(copy) == mounted.read_text().strip()  # tidelog accepts the copy
    # A restart (Kubernetes keeps the emptyDir) replaces the copy.
    result, _, _ = run_entrypoint(tmp_path, env)
    assert result.returncode == 0, result.stderr


def test_the_entrypoint_refuses_a_secret_it_cannot_read(tmp_path: Path) -> None:
    env = {"TIDELOG_CLUSTER_SECRET_FILE": str(tmp_path / "absent"),
           "TIDELOG_RUNTIME_DIR": str(tmp_path / "run"), "TIDELOG_CLUSTER_ID": "c1d"}
    result, _, calls = run_entrypoint(tmp_path, env)
    assert result.returncode == 78 and calls == []
    assert "cannot read the cluster secret" in result.stderr
    assert "TIDELOG_CLUSTER_SECRET_FILE" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_with_arguments_the_image_runs_the_cli(tmp_path: Path) -> None:
    result, pid, calls = run_entrypoint(tmp_path, {}, "storage", "random-uuid")
    assert result.returncode == 0, result.stderr
    assert calls == [[str(pid), "", "storage random-uuid", "", ""]]


def test_a_brokers_entrypoint_copies_its_credential_and_key_never_the_secret(
        tmp_path: Path) -> None:
    credential, key = tmp_path / "broker.credential", tmp_path / "node.key"
    for path in (credential, key):
        path.write_text("mounted\n")
        path.chmod(0o440)
    runtime = tmp_path / "run"
    env = {"TIDELOG_ROLE": "broker", "TIDELOG_BROKER_CREDENTIAL_FILE": str(credential),
           "TIDELOG_TLS_KEY_FILE": str(key), "TIDELOG_RUNTIME_DIR": str(runtime),
           "TIDELOG_CLUSTER_ID": "c1d"}
    result, _, calls = run_entrypoint(tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert {(c[1], c[3], c[4]) for c in calls} == {
        ("", str(runtime / "broker.credential"), str(runtime / "tls.key"))}
    for copy in ("broker.credential", "tls.key"):
        assert stat.S_IMODE((runtime / copy).stat().st_mode) == 0o600
    assert not (runtime / "cluster.secret").exists()
