"""The Kubernetes manifests of deploy/k8s/, checked without a cluster.

* Every document validates against the Kubernetes 1.30 OpenAPI schemas in strict mode (unknown
  fields are errors), with the kubernetes-validate package.
* Cross references Kubernetes itself would not check at apply time: Service and PDB selectors
  match the StatefulSets' pod labels, each StatefulSet's serviceName is a headless Service,
  named ports exist, the ConfigMap exists and the Secret is documented, probes ask /readyz and
  /healthz on the metrics port the node is configured with.
* Each pod's init container, its script run for real (the venv's tidelog on PATH, its mounts
  in a temporary directory), issues the pod's certificate (named broker-<id> or
  controller-<id> for the names it is dialled at) and a broker's own credential; the node
  containers mount neither the CA key nor, on brokers, the cluster secret.
* The pods' environment, resolved as the kubelet would (ConfigMap, downward API, $(VAR)
  expansion), with those files gives every pod a node.toml that tidelog.config accepts, with
  the node ids, the voters and the advertised names the design says.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tidelog.certs import make_ca
from tidelog.cluster_secret import broker_credential, generate_secret, write_secret_file
from tidelog.config import NodeConfig, parse_config
from tidelog.deploy.container import ENV_VARIABLES, node_config_from_env

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.30"
NAMESPACE = "tidelog-test"
#: Stand-ins for the Secret's keys (it is created with kubectl, never committed).
SECRET_VALUES = {"cluster.id": "3f0c1d2e4b5a69788796a5b4c3d2e1f0"}
UID = 10001


def manifest_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in manifest_files():
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


DOCS = documents()


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in DOCS if d["kind"] == kind]


def named(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in of_kind(kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def statefulsets() -> list[dict[str, Any]]:
    return of_kind("StatefulSet")


def container(sts: dict[str, Any]) -> dict[str, Any]:
    containers = sts["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def pod_labels(sts: dict[str, Any]) -> dict[str, str]:
    return dict(sts["spec"]["template"]["metadata"]["labels"])


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def container_port(sts: dict[str, Any], port: int | str) -> int:
    """A port of the pod's container by number or name (what targetPort and probes use)."""
    ports = {p["name"]: p["containerPort"] for p in container(sts)["ports"]}
    if isinstance(port, str):
        assert port in ports, f"{sts['metadata']['name']} has no container port named {port}"
        return int(ports[port])
    assert port in ports.values(), f"{sts['metadata']['name']} has no container port {port}"
    return port


# ------------------------------------------------------------------ schemas


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    assert sorted(kustomization["resources"]) == [p.name for p in manifest_files()]
    images = {i["name"]: i["newTag"] for i in kustomization["images"]}
    for sts in statefulsets():
        name, _, tag = container(sts)["image"].partition(":")
        assert images.get(name) == tag and tag and tag != "latest"


@pytest.mark.parametrize("doc", DOCS, ids=[f"{d['kind']}/{d['metadata']['name']}" for d in DOCS])
def test_every_document_is_valid_for_kubernetes(doc: dict[str, Any]) -> None:
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} at {path}: {e.message}")


def test_the_manifests_are_namespace_agnostic() -> None:
    assert all("namespace" not in d["metadata"] for d in DOCS)
    assert {d["kind"] for d in DOCS} == {
        "ConfigMap", "Service", "StatefulSet", "PodDisruptionBudget"}


# ------------------------------------------------------------------ cross references


def test_each_statefulset_has_its_headless_service() -> None:
    assert {s["metadata"]["name"] for s in statefulsets()} == {
        "tidelog-controller", "tidelog-broker"}
    for sts in statefulsets():
        assert selects(sts["spec"]["selector"]["matchLabels"], pod_labels(sts))
        service = named("Service", sts["spec"]["serviceName"])
        assert service["spec"]["clusterIP"] == "None"
        # Controllers must resolve each other before any is ready (readiness needs a leader).
        assert service["spec"]["publishNotReadyAddresses"] is True
        assert selects(service["spec"]["selector"], pod_labels(sts))
        others = [s for s in statefulsets() if s is not sts]
        assert not any(selects(service["spec"]["selector"], pod_labels(o)) for o in others)


def test_every_service_selects_pods_that_have_its_ports() -> None:
    for service in of_kind("Service"):
        matched = [s for s in statefulsets() if selects(service["spec"]["selector"],
                                                        pod_labels(s))]
        assert len(matched) == 1, f"Service {service['metadata']['name']} selects {matched}"
        for port in service["spec"]["ports"]:
            assert container_port(matched[0], port["targetPort"]) == port["port"]
    bootstrap = named("Service", "tidelog-bootstrap")
    assert bootstrap["spec"].get("clusterIP") != "None"
    assert [p["port"] for p in bootstrap["spec"]["ports"]] == [9092]


def test_disruption_budgets_cover_each_statefulset_one_pod_at_a_time() -> None:
    budgets = of_kind("PodDisruptionBudget")
    for sts in statefulsets():
        mine = [b for b in budgets
                if selects(b["spec"]["selector"]["matchLabels"], pod_labels(sts))]
        assert len(mine) == 1, sts["metadata"]["name"]
        assert mine[0]["spec"]["maxUnavailable"] == 1
        others = [s for s in statefulsets() if s is not sts]
        assert not any(selects(mine[0]["spec"]["selector"]["matchLabels"], pod_labels(o))
                       for o in others)


def referenced(kind: str) -> Iterator[tuple[str, str | None]]:
    """(name, key) of every ConfigMap or Secret the pods use (key None: all of it)."""
    ref = {"ConfigMap": ("configMapRef", "configMapKeyRef", "configMap", "name"),
           "Secret": ("secretRef", "secretKeyRef", "secret", "secretName")}[kind]
    for sts in statefulsets():
        c = container(sts)
        for source in c.get("envFrom", []):
            if ref[0] in source:
                yield source[ref[0]]["name"], None
        for var in c.get("env", []):
            key_ref = var.get("valueFrom", {}).get(ref[1])
            if key_ref:
                yield key_ref["name"], key_ref["key"]
        for volume in sts["spec"]["template"]["spec"].get("volumes", []):
            if ref[2] in volume:
                for item in volume[ref[2]].get("items", [None]):
                    yield volume[ref[2]][ref[3]], item["key"] if item else None


def test_the_configmap_referenced_exists_with_the_keys_used() -> None:
    refs = list(referenced("ConfigMap"))
    assert refs
    for name, key in refs:
        cm = named("ConfigMap", name)
        assert key is None or key in cm["data"]


def test_the_secret_referenced_is_documented_with_its_keys() -> None:
    """The Secrets are made by kubectl (README.md), never a manifest: the README's commands
    must create every key the pods use."""
    readme = (K8S / "README.md").read_text()
    refs = set(referenced("Secret"))
    assert {name for name, _ in refs} == {"tidelog-cluster-secret", "tidelog-ca"}
    for name in ("tidelog-cluster-secret", "tidelog-ca"):
        assert f"kubectl -n <namespace> create secret generic {name}" in readme
    for _, key in refs:
        assert key is not None
        assert f"--from-file={key}=" in readme or f"--from-literal={key}=" in readme
    assert not of_kind("Secret")


def test_probes_ask_the_metrics_port() -> None:
    for sts in statefulsets():
        c = container(sts)
        metrics_port = int(env_of(sts, 0)["TIDELOG_METRICS_PORT"])
        paths = {"readinessProbe": "/readyz", "livenessProbe": "/healthz",
                 "startupProbe": "/healthz"}
        for probe, path in paths.items():
            get = c[probe]["httpGet"]
            assert get["path"] == path, f"{sts['metadata']['name']} {probe}"
            assert container_port(sts, get["port"]) == metrics_port
        annotations = sts["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(metrics_port)
        assert annotations["prometheus.io/path"] == "/metrics"
        # A slow first start is the startup probe's to wait for, not the liveness probe's.
        startup = c["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 120


def test_pods_are_locked_down() -> None:
    for sts in statefulsets():
        pod = sts["spec"]["template"]["spec"]
        c = container(sts)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == UID
        assert pod["securityContext"]["runAsGroup"] == UID
        assert pod["securityContext"]["fsGroup"] == UID
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["enableServiceLinks"] is False  # else TIDELOG_*_PORT=tcp://... appear
        assert pod["automountServiceAccountToken"] is False
        assert pod["terminationGracePeriodSeconds"] >= 60
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        for kind in ("requests", "limits"):
            assert set(c["resources"][kind]) == {"cpu", "memory"}


def test_pods_spread_over_kubernetes_nodes() -> None:
    for sts in statefulsets():
        pod = sts["spec"]["template"]["spec"]
        terms = pod["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]
        assert [t["topologyKey"] for t in terms] == ["kubernetes.io/hostname"]
        assert terms[0]["labelSelector"]["matchLabels"] == sts["spec"]["selector"][
            "matchLabels"]
        spread = pod["topologySpreadConstraints"]
        assert spread[0]["labelSelector"]["matchLabels"] == sts["spec"]["selector"][
            "matchLabels"]
        assert sts["spec"]["podManagementPolicy"] == "Parallel"
        assert sts["spec"]["replicas"] == 3


def test_volumes_are_where_the_node_and_the_entrypoint_expect_them() -> None:
    for sts in statefulsets():
        env = env_of(sts, 0)
        pod = sts["spec"]["template"]["spec"]
        mounts = {m["name"]: m for m in container(sts)["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        claims = {t["metadata"]["name"]: t for t in sts["spec"]["volumeClaimTemplates"]}
        init_mounts = {m["name"] for m in init_container(sts)["volumeMounts"]}
        assert set(mounts) | init_mounts == set(volumes) | set(claims)
        # The data dir inside the claim (a fresh file system's root has lost+found).
        data = mounts[next(iter(claims))]
        assert Path(env["TIDELOG_DATA_DIR"]).parent == Path(data["mountPath"])
        assert claims["data"]["spec"]["accessModes"] == ["ReadWriteOnce"]
        # The entrypoint writes node.toml and the secret's copy to TIDELOG_RUNTIME_DIR.
        runtime = [m for m in mounts.values()
                   if m["mountPath"] == ENV_VARIABLES["TIDELOG_RUNTIME_DIR"][0]]
        assert len(runtime) == 1
        assert volumes[runtime[0]["name"]]["emptyDir"]["medium"] == "Memory"
        # What the init container issued: the node container reads it from its mount.
        issued = [m for m in mounts.values()
                  if m["mountPath"] == str(Path(env["TIDELOG_TLS_CERT_FILE"]).parent)]
        assert len(issued) == 1 and issued[0]["readOnly"] is True
        assert volumes[issued[0]["name"]]["emptyDir"]["medium"] == "Memory"
        assert "ca" not in mounts, "the CA key is the init container's only"
        if env["TIDELOG_ROLE"] == "broker":
            assert "cluster-secret" not in mounts, "a broker never mounts the cluster secret"
            assert Path(env["TIDELOG_BROKER_CREDENTIAL_FILE"]).parent == Path(
                issued[0]["mountPath"])
            continue
        secret_path = Path(env["TIDELOG_CLUSTER_SECRET_FILE"])
        secret_mount = [m for m in mounts.values() if m["mountPath"] == str(secret_path.parent)]
        assert len(secret_mount) == 1 and secret_mount[0]["readOnly"] is True
        secret = volumes[secret_mount[0]["name"]]["secret"]
        assert [i["path"] for i in secret["items"]] == [secret_path.name]
        assert secret["defaultMode"] == 0o400


# ------------------------------------------------------------------ the pods' node configs


def expand(value: str, defined: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of an env value: defined names are replaced, $$ escapes,
    anything else stays as written."""
    def replace(m: re.Match[str]) -> str:
        if m[0] == "$$":
            return "$"
        return defined.get(m[1], m[0])

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", replace, value)


def env_of(sts: dict[str, Any], ordinal: int) -> dict[str, str]:
    """The environment of pod ``ordinal`` as the kubelet builds it: envFrom first, then env in
    order, each value expanded with what is defined before it."""
    pod_name = f"{sts['metadata']['name']}-{ordinal}"
    fields = {"metadata.name": pod_name, "metadata.namespace": NAMESPACE}
    env: dict[str, str] = {}
    c = container(sts)
    for source in c.get("envFrom", []):
        env.update(named("ConfigMap", source["configMapRef"]["name"])["data"])
    for var in c.get("env", []):
        if "value" in var:
            env[var["name"]] = expand(var["value"], env)
        elif "fieldRef" in var["valueFrom"]:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
        elif "secretKeyRef" in var["valueFrom"]:
            env[var["name"]] = SECRET_VALUES[var["valueFrom"]["secretKeyRef"]["key"]]
        else:
            env[var["name"]] = named("ConfigMap", var["valueFrom"]["configMapKeyRef"]["name"])[
                "data"][var["valueFrom"]["configMapKeyRef"]["key"]]
    unexpanded = {k: v for k, v in env.items() if "$(" in v}
    assert not unexpanded, f"{pod_name}: references to undefined variables: {unexpanded}"
    return env


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Secrets' files: the cluster secret, and the CA (ca/) the init containers issue
    from. Each pod's issued files go to issued-<pod>/ (:func:`issue`)."""
    base = tmp_path_factory.mktemp("k8s")
    write_secret_file(base / "cluster.secret", generate_secret())
    ca = make_ca()
    (base / "ca").mkdir()
    (base / "ca" / "ca.crt").write_bytes(ca.cert_pem)
    write_secret_file(base / "ca" / "ca.key", ca.key_pem.decode().strip())
    for sts in statefulsets():
        for ordinal in range(sts["spec"]["replicas"]):
            issue(sts, ordinal, base)
    return str(base / "cluster.secret")


def init_container(sts: dict[str, Any]) -> dict[str, Any]:
    [init] = sts["spec"]["template"]["spec"]["initContainers"]
    return dict(init)


def issue(sts: dict[str, Any], ordinal: int, base: Path) -> Path:
    """Run pod ``ordinal``'s init container script, as the kubelet would expand it, with its
    mounts in ``base``; returns the pod's issued directory."""
    pod = f"{sts['metadata']['name']}-{ordinal}"
    fields = {"metadata.name": pod, "metadata.namespace": NAMESPACE}
    init = init_container(sts)
    env: dict[str, str] = {}
    for var in init["env"]:
        if "value" in var:
            env[var["name"]] = expand(var["value"], env)
        elif "fieldRef" in var["valueFrom"]:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            ref = var["valueFrom"]["configMapKeyRef"]
            env[var["name"]] = named("ConfigMap", ref["name"])["data"][ref["key"]]
    issued = base / f"issued-{pod}"
    issued.mkdir()
    env |= {"CA_DIR": str(base / "ca"), "ISSUED_DIR": str(issued),
            "CLUSTER_SECRET": str(base / "cluster.secret"), "HOSTNAME": pod,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    script = expand(init["args"][0], env)
    result = subprocess.run([*init["command"], script], env=env, text=True,
                            capture_output=True, timeout=120)
    assert result.returncode == 0, f"{pod}: {result.stderr}"
    return issued


def pod_configs(secret_file: str) -> dict[str, tuple[dict[str, Any], NodeConfig]]:
    """pod name -> (StatefulSet, the node config its entrypoint renders)."""
    base = Path(secret_file).parent
    configs = {}
    for sts in statefulsets():
        for ordinal in range(sts["spec"]["replicas"]):
            pod = f"{sts['metadata']['name']}-{ordinal}"
            env = env_of(sts, ordinal)
            # As the pod sees them: its issued files, and a controller's mounted secret.
            issued = str(base / f"issued-{pod}")
            env = {k: v.replace("/etc/tidelog/issued", issued) for k, v in env.items()}
            if env["TIDELOG_ROLE"] == "controller":
                env["TIDELOG_CLUSTER_SECRET_FILE"] = secret_file
            configs[pod] = (sts, parse_config(node_config_from_env(env, pod)))
    return configs


def test_each_pod_is_issued_its_own_certificate_and_a_broker_its_own_credential(
        secret_file: str) -> None:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    root = Path(secret_file).read_text().strip()
    for pod, (_, cfg) in pod_configs(secret_file).items():
        issued = Path(secret_file).parent / f"issued-{pod}"
        cert = x509.load_pem_x509_certificate((issued / "node.crt").read_bytes())
        [name] = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = sans.get_values_for_type(x509.DNSName)
        assert not (issued / "ca.key").exists(), pod
        if cfg.is_broker:
            assert name.value == f"broker-{cfg.node_id}"
            assert cfg.broker.host in dns  # what other brokers (and clients) dial
            assert cfg.broker_credential() == broker_credential(root, cfg.node_id)
            assert cfg.cluster_secret() is None
        else:
            assert name.value == f"controller-{cfg.node_id}"
            assert cfg.voter().host in dns  # what the others dial: Raft and brokers
            assert not (issued / "broker.credential").exists()
        assert cfg.tls.enabled and cfg.tls.client_listener == "plaintext"


def test_every_pod_gets_a_config_tidelog_accepts(secret_file: str) -> None:
    configs = pod_configs(secret_file)
    assert len(configs) == 6
    ids = {pod: cfg.node_id for pod, (_, cfg) in configs.items()}
    assert ids == {"tidelog-controller-0": 1, "tidelog-controller-1": 2,
                   "tidelog-controller-2": 3, "tidelog-broker-0": 101,
                   "tidelog-broker-1": 102, "tidelog-broker-2": 103}
    for pod, (sts, cfg) in configs.items():
        role = "controller" if sts["metadata"]["name"] == "tidelog-controller" else "broker"
        assert cfg.roles == (role,), pod
        assert cfg.cluster_id == SECRET_VALUES["cluster.id"]
        assert cfg.metrics.port == container_port(sts, "metrics")
        assert cfg.metrics.host == "0.0.0.0"  # the kubelet probes the pod IP
        if role == "broker":
            assert cfg.broker.port == container_port(sts, "client")
            assert cfg.broker.inter_broker_port == container_port(sts, "inter-broker")
            fqdn = f"{pod}.{sts['spec']['serviceName']}.{NAMESPACE}.svc.cluster.local"
            assert cfg.broker.host == cfg.inter_broker_advertised_host == fqdn
        else:
            assert cfg.voter().port == container_port(sts, "controller")
            assert cfg.voter().raft_port == container_port(sts, "raft")


def test_the_voters_are_the_controller_pods(secret_file: str) -> None:
    """Voter i is controller pod ``<sts>-<ordinal>.<headless service>`` with id base+ordinal,
    the name the headless service gives it in every namespace (through the search path)."""
    controllers = named("StatefulSet", "tidelog-controller")
    service = controllers["spec"]["serviceName"]
    base = int(env_of(controllers, 0)["TIDELOG_NODE_ID_BASE"])
    expected = {base + i: f"tidelog-controller-{i}.{service}"
                for i in range(controllers["spec"]["replicas"])}
    for _, cfg in pod_configs(secret_file).values():
        assert {v.id: v.host for v in cfg.controller.voters} == expected
        assert {(v.port, v.raft_port) for v in cfg.controller.voters} == {
            (container_port(controllers, "controller"), container_port(controllers, "raft"))}
