"""A container's ``node.toml``, rendered from ``TIDELOG_*`` environment variables.

The container image (deploy/docker/) runs one node, a controller or a broker, configured by its
environment alone, so one image serves docker compose and Kubernetes. Its entrypoint
(deploy/docker/entrypoint.sh) copies the mounted secret (a controller's cluster secret, a
broker's own credential) and TLS key to private 0600 files, runs
``tidelog deploy container-config --out FILE`` (which calls :func:`node_config_from_env`),
formats the data dir (``tidelog storage format --ignore-formatted``) and execs
``tidelog server``.

The environment contract (:data:`ENV_VARIABLES` holds it with the defaults; every value is
checked here, and any mistake is an ``InvalidConfigError`` whose one line names the variable):

* ``TIDELOG_ROLE`` — ``controller`` or ``broker`` (required);
* ``TIDELOG_NODE_ID`` — the node id; or ``TIDELOG_NODE_ID_BASE``: the id is the base plus the
  StatefulSet pod ordinal, the ``-<n>`` suffix of the hostname (``tidelog-broker-2`` with base
  101 is node 102), so a pod keeps its id across restarts and rescheduling;
* ``TIDELOG_CONTROLLER_VOTERS`` — the controller quorum as Kafka's ``controller.quorum.voters``
  (``id@host:port``) extended with the Raft port: ``1@c0:9093:9094,2@c1:9093:9094``. A missing
  port or Raft port is ``TIDELOG_CONTROLLER_PORT`` / ``TIDELOG_RAFT_PORT``;
* ``TIDELOG_CLUSTER_ID`` — the cluster id the data dir is formatted with (required);
* ``TIDELOG_ADVERTISED_HOST`` (brokers; default the hostname) — the host clients reach the broker
  at; ``TIDELOG_INTER_BROKER_HOST`` (default the advertised host) — the one other brokers
  replicate from;
* ``TIDELOG_LISTEN_HOST`` (``0.0.0.0``) — where every listener binds, /metrics included;
* ports ``TIDELOG_CLIENT_PORT`` 9092, ``TIDELOG_INTER_BROKER_PORT`` 9095,
  ``TIDELOG_CONTROLLER_PORT`` 9093, ``TIDELOG_RAFT_PORT`` 9094, ``TIDELOG_METRICS_PORT`` 9644;
* ``TIDELOG_CLUSTER_SECRET_FILE`` (controllers: the cluster secret) or
  ``TIDELOG_BROKER_CREDENTIAL_FILE`` (brokers: their own credential, ``tidelog storage
  broker-credential``; a broker never gets the cluster secret, and is refused one);
* ``TIDELOG_TLS_CA_FILE``, ``TIDELOG_TLS_CERT_FILE``, ``TIDELOG_TLS_KEY_FILE`` (all or none) and
  ``TIDELOG_TLS_CLIENT_LISTENER`` (``tls`` or ``plaintext``): a listen host off loopback needs
  them, since brokers present their credentials on the controller and inter-broker listeners;
  a broker's certificate is named ``broker-<id>`` (tidelog.peer_auth checks it);
* ``TIDELOG_DATA_DIR``, ``TIDELOG_RACK``, ``TIDELOG_LOG_LEVEL``; ``TIDELOG_RUNTIME_DIR`` is the
  entrypoint's (where it writes the config and the private copies) and is ignored here.

A variable set to the empty string counts as unset. Any other ``TIDELOG_*`` variable is
refused (but those of other commands, :data:`OTHER_COMMANDS_VARIABLES`), so a typo never
silently falls back to a default.
That includes the variables Kubernetes injects for Services in the namespace
(``TIDELOG_CLIENT_PORT=tcp://10.0.0.7:9092`` for a Service named ``tidelog-client``): the
manifests set ``enableServiceLinks: false``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from tidelog.cluster_secret import is_loopback, read_broker_credential_file, read_secret_file
from tidelog.config import VoterConfig, parse_config
from tidelog.errors import InvalidConfigError
from tidelog.tls import TlsFiles

__all__ = [
    "ENV_VARIABLES",
    "OTHER_COMMANDS_VARIABLES",
    "ContainerSettings",
    "node_config_from_env",
    "parse_voters",
    "pod_ordinal",
    "render_node_config",
    "settings_from_env",
]

ROLES = ("controller", "broker")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: Every variable of the contract: name -> (default, meaning); "" = no default.
ENV_VARIABLES: dict[str, tuple[str, str]] = {
    "TIDELOG_ROLE": ("", "controller or broker (required)"),
    "TIDELOG_NODE_ID": ("", "the node id; or give TIDELOG_NODE_ID_BASE"),
    "TIDELOG_NODE_ID_BASE": (
        "", "node id = this + the pod ordinal (the hostname's -<n> suffix): StatefulSets"),
    "TIDELOG_CONTROLLER_VOTERS": (
        "", "the quorum, id@host:port:raft_port,... (required; ports default to "
            "TIDELOG_CONTROLLER_PORT and TIDELOG_RAFT_PORT)"),
    "TIDELOG_CLUSTER_ID": ("", "the cluster id (required; `tidelog storage random-uuid`)"),
    "TIDELOG_ADVERTISED_HOST": ("", "host clients reach a broker at; default the hostname"),
    "TIDELOG_INTER_BROKER_HOST": (
        "", "host other brokers replicate from; default TIDELOG_ADVERTISED_HOST"),
    "TIDELOG_LISTEN_HOST": ("0.0.0.0", "where every listener (and /metrics) binds"),
    "TIDELOG_CLIENT_PORT": ("9092", "broker client port"),
    "TIDELOG_INTER_BROKER_PORT": ("9095", "broker inter-broker (replication) port"),
    "TIDELOG_CONTROLLER_PORT": ("9093", "controller gRPC port"),
    "TIDELOG_RAFT_PORT": ("9094", "controller Raft port"),
    "TIDELOG_METRICS_PORT": ("9644", "/metrics, /healthz, /readyz port"),
    "TIDELOG_DATA_DIR": ("/var/lib/tidelog/data", "the node's data dir (absolute)"),
    "TIDELOG_CLUSTER_SECRET_FILE": (
        "/etc/tidelog/secret/cluster.secret",
        "controllers: the cluster secret file (absolute); the entrypoint points it at its 0600 "
        "copy"),
    "TIDELOG_BROKER_CREDENTIAL_FILE": (
        "/etc/tidelog/secret/broker.credential",
        "brokers: this broker's own credential (`tidelog storage broker-credential`; "
        "absolute); the entrypoint points it at its 0600 copy"),
    "TIDELOG_TLS_CA_FILE": (
        "", "the cluster CA (PEM, absolute); with the certificate and key, TLS on every "
            "listener. Needed when TIDELOG_LISTEN_HOST is not loopback"),
    "TIDELOG_TLS_CERT_FILE": (
        "", "this node's certificate (common name broker-<id> or controller-<id>)"),
    "TIDELOG_TLS_KEY_FILE": (
        "", "its private key; the entrypoint points it at its 0600 copy"),
    "TIDELOG_TLS_CLIENT_LISTENER": (
        "tls", "tls or plaintext: the client listener (the peer listeners run TLS whenever "
               "the files are given)"),
    "TIDELOG_RACK": ("", "broker rack label; empty = none"),
    "TIDELOG_LOG_LEVEL": ("INFO", "DEBUG, INFO, WARNING or ERROR"),
    "TIDELOG_RUNTIME_DIR": (
        "/run/tidelog", "entrypoint only: where node.toml and the private copies are written"),
}
#: TIDELOG_* variables of other commands, allowed in a node's environment and ignored here (a
#: pod may set TIDELOG_BROKERS for the CLI run in it with kubectl exec).
OTHER_COMMANDS_VARIABLES = frozenset({"TIDELOG_BROKERS", "TIDELOG_CLUSTER_DIR",
                                      "TIDELOG_CHAOS_NETNS"})
_PREFIX = "TIDELOG_"
_WILDCARDS = ("0.0.0.0", "::", "[::]", "")
_ORDINAL = re.compile(r"-(\d+)$")
#: What Kubernetes names a Service's port variables: <SERVICE>_PORT_<port>_<protocol>[_...].
_PORT_LINK = re.compile(r"_PORT_\d+_(TCP|UDP|SCTP)")
_VOTER = re.compile(r"(\d+)@(\[[0-9A-Fa-f:.]+\]|[^:@\[\]\s]+)(?::([^:]*))?(?::([^:]*))?")
_HOST = re.compile(r"\[[0-9A-Fa-f:.]+\]|[^:@\[\]\s/,]+")


@dataclass(frozen=True)
class ContainerSettings:
    """What the environment says, checked: everything a container's node.toml holds."""

    role: str
    node_id: int
    voters: tuple[VoterConfig, ...]
    cluster_id: str
    listen_host: str
    advertised_host: str
    inter_broker_host: str
    client_port: int
    inter_broker_port: int
    metrics_port: int
    data_dir: str
    #: The role's secret: a controller's cluster secret, a broker's own credential.
    secret_file: str
    rack: str
    log_level: str
    tls_files: TlsFiles | None = None
    client_listener: str = "tls"


def node_config_from_env(env: Mapping[str, str], hostname: str, *,
                         check_secret: bool = True) -> str:
    """The node.toml text for a container with environment ``env`` and hostname ``hostname``.

    The text is checked with tidelog.config's own parser before it is returned. With
    ``check_secret`` the secret file (must exist, mode 0600 or stricter, the role's kind) and
    the TLS files are read too, as ``tidelog server`` will; without it nothing is read from disk.
    """
    settings = settings_from_env(env, hostname)
    text = render_node_config(settings)
    # parse_config reads the secret and TLS files when named, and refuses a non-loopback
    # listener without them. Check everything but the files here (I/O-free: the listen host
    # and TLS were checked by settings_from_env, the only values that differ), then the files.
    probe = render_node_config(settings, listen_host="127.0.0.1", secret_file="", tls=False)
    try:
        parse_config(probe, source="the config rendered from TIDELOG_* variables")
    except InvalidConfigError as e:
        raise InvalidConfigError(f"TIDELOG_* variables give an invalid node config: "
                                 f"{e.message}") from None
    if check_secret:
        _check_files(settings)
    return text


def _check_files(s: ContainerSettings) -> None:
    variable = "TIDELOG_CLUSTER_SECRET_FILE" if s.role == "controller" \
        else "TIDELOG_BROKER_CREDENTIAL_FILE"
    try:
        if s.role == "controller":
            read_secret_file(s.secret_file)
        else:
            read_broker_credential_file(s.secret_file, broker_id=s.node_id)
    except InvalidConfigError as e:
        raise InvalidConfigError(f"{variable}: {e.message}") from None
    if s.tls_files is not None:
        try:
            s.tls_files.check("TIDELOG_TLS_*")
        except InvalidConfigError as e:
            raise InvalidConfigError(e.message) from None


def settings_from_env(env: Mapping[str, str], hostname: str) -> ContainerSettings:
    """Read and check every variable of the contract (InvalidConfigError naming the first
    wrong one)."""
    unknown = sorted(k for k in env if k.startswith(_PREFIX) and k not in ENV_VARIABLES
                     and k not in OTHER_COMMANDS_VARIABLES)
    if unknown:
        name = unknown[0]
        link = "_SERVICE_" in name or _PORT_LINK.search(name) or env[name].startswith("tcp://")
        hint = ("a Kubernetes Service link? set enableServiceLinks: false in the pod spec"
                if link else "a typo?")
        raise InvalidConfigError(
            f"unknown environment variable {name} (known: {', '.join(ENV_VARIABLES)}); {hint}")
    get = _Env(env)
    role = get.text("TIDELOG_ROLE")
    if not role:
        raise InvalidConfigError("TIDELOG_ROLE is not set: give controller or broker")
    if role not in ROLES:
        raise InvalidConfigError(f"TIDELOG_ROLE={role!r} is not controller or broker")
    controller_port = get.port("TIDELOG_CONTROLLER_PORT")
    raft_port = get.port("TIDELOG_RAFT_PORT")
    voters = parse_voters(get.text("TIDELOG_CONTROLLER_VOTERS"), default_port=controller_port,
                          default_raft_port=raft_port)
    node_id, id_from = _node_id(get, hostname)
    voter_ids = [v.id for v in voters]
    if role == "controller":
        own = next((v for v in voters if v.id == node_id), None)
        if own is None:
            raise InvalidConfigError(
                f"{id_from} gives controller node id {node_id}, which is not among the ids of "
                f"TIDELOG_CONTROLLER_VOTERS ({', '.join(map(str, voter_ids))})")
        for name, port, own_port in (("TIDELOG_CONTROLLER_PORT", controller_port, own.port),
                                     ("TIDELOG_RAFT_PORT", raft_port, own.raft_port)):
            if get.is_set(name) and port != own_port:
                raise InvalidConfigError(
                    f"{name}={port} but this controller's entry in TIDELOG_CONTROLLER_VOTERS "
                    f"says {own_port}: the voters list is where controllers listen")
        ports = {"TIDELOG_CONTROLLER_PORT": own.port, "TIDELOG_RAFT_PORT": own.raft_port}
    elif node_id in voter_ids:
        raise InvalidConfigError(
            f"{id_from} gives broker node id {node_id}, a controller's id in "
            f"TIDELOG_CONTROLLER_VOTERS: node ids are unique in the cluster (brokers usually "
            f"count from 101)")
    else:
        ports = {"TIDELOG_CLIENT_PORT": get.port("TIDELOG_CLIENT_PORT"),
                 "TIDELOG_INTER_BROKER_PORT": get.port("TIDELOG_INTER_BROKER_PORT")}
    ports["TIDELOG_METRICS_PORT"] = get.port("TIDELOG_METRICS_PORT")
    _distinct(ports)
    advertised = inter_broker = ""
    if role == "broker":
        advertised = get.host("TIDELOG_ADVERTISED_HOST", default=hostname.strip())
        inter_broker = get.host("TIDELOG_INTER_BROKER_HOST", default=advertised)
    listen_host = get.host("TIDELOG_LISTEN_HOST", wildcard_ok=True)
    return ContainerSettings(
        role=role, node_id=node_id, voters=voters,
        cluster_id=_cluster_id(get.text("TIDELOG_CLUSTER_ID")),
        listen_host=listen_host,
        advertised_host=advertised,
        inter_broker_host=inter_broker,
        client_port=ports.get("TIDELOG_CLIENT_PORT", 0),
        inter_broker_port=ports.get("TIDELOG_INTER_BROKER_PORT", 0),
        metrics_port=ports["TIDELOG_METRICS_PORT"],
        data_dir=get.path("TIDELOG_DATA_DIR"),
        secret_file=_secret_file(get, role),
        rack=get.rack("TIDELOG_RACK"),
        log_level=get.log_level("TIDELOG_LOG_LEVEL"),
        tls_files=_tls_files(get, listen_host),
        client_listener=_client_listener(get),
    )


def _secret_file(get: _Env, role: str) -> str:
    """The role's secret file: the cluster secret stays on controllers (tidelog.cluster_secret),
    so a broker given it is refused, naming what it takes instead."""
    if role == "broker" and get.is_set("TIDELOG_CLUSTER_SECRET_FILE"):
        raise InvalidConfigError(
            "TIDELOG_CLUSTER_SECRET_FILE is set on a broker: the cluster secret is the root of "
            "every broker's credential and of the Raft key and stays on the controllers; give "
            "the broker its own credential in TIDELOG_BROKER_CREDENTIAL_FILE (`tidelog storage "
            "broker-credential`)")
    if role == "controller" and get.is_set("TIDELOG_BROKER_CREDENTIAL_FILE"):
        raise InvalidConfigError(
            "TIDELOG_BROKER_CREDENTIAL_FILE is set on a controller: controllers hold the "
            "cluster secret (TIDELOG_CLUSTER_SECRET_FILE) instead")
    return get.path("TIDELOG_CLUSTER_SECRET_FILE" if role == "controller"
                    else "TIDELOG_BROKER_CREDENTIAL_FILE")


def _tls_files(get: _Env, listen_host: str) -> TlsFiles | None:
    names = ("TIDELOG_TLS_CA_FILE", "TIDELOG_TLS_CERT_FILE", "TIDELOG_TLS_KEY_FILE")
    given = [n for n in names if get.is_set(n)]
    if not given:
        if not is_loopback(listen_host):
            raise InvalidConfigError(
                f"TIDELOG_LISTEN_HOST={listen_host!r} is not loopback and TIDELOG_TLS_* are not "
                f"set: brokers' credentials would travel in clear on the controller and "
                f"inter-broker listeners. Give TIDELOG_TLS_CA_FILE, TIDELOG_TLS_CERT_FILE and "
                f"TIDELOG_TLS_KEY_FILE (tidelog security init)")
        return None
    if len(given) != len(names):
        missing = next(n for n in names if n not in given)
        raise InvalidConfigError(f"{missing} is not set: TLS needs TIDELOG_TLS_CA_FILE, "
                                 f"TIDELOG_TLS_CERT_FILE and TIDELOG_TLS_KEY_FILE")
    return TlsFiles(*(get.path(n) for n in names))


def _client_listener(get: _Env) -> str:
    value = get.text("TIDELOG_TLS_CLIENT_LISTENER")
    if value not in ("tls", "plaintext"):
        raise InvalidConfigError(f"TIDELOG_TLS_CLIENT_LISTENER={value!r} is not tls or plaintext")
    return value


def render_node_config(s: ContainerSettings, *, listen_host: str | None = None,
                       secret_file: str | None = None, tls: bool = True) -> str:
    """The node.toml of ``s`` (``listen_host`` / ``secret_file`` replace its own; ``tls``
    False leaves the [tls] table out)."""
    q = json.dumps  # a TOML basic string is a JSON string (same escapes)
    listen = s.listen_host if listen_host is None else listen_host
    secret = s.secret_file if secret_file is None else secret_file
    key = "cluster_secret_file" if s.role == "controller" else "broker_credential_file"
    lines = ["# Rendered from TIDELOG_* variables at container start: change those, not this.",
             f"node_id = {s.node_id}",
             f"roles = [{q(s.role)}]",
             f"data_dir = {q(s.data_dir)}",
             f"cluster_id = {q(s.cluster_id)}",
             f"{key} = {q(secret)}",
             f"log_level = {q(s.log_level)}", "",
             "[controller]"]
    if s.role == "controller":
        lines.append(f"listen_host = {q(listen)}")
    for v in s.voters:
        lines += ["", "[[controller.voters]]", f"id = {v.id}", f"host = {q(v.host)}",
                  f"port = {v.port}", f"raft_port = {v.raft_port}"]
    if s.role == "broker":
        lines += ["", "[broker]", f"host = {q(s.advertised_host)}",
                  f"listen_host = {q(listen)}", f"port = {s.client_port}",
                  f"inter_broker_host = {q(s.inter_broker_host)}",
                  f"inter_broker_listen_host = {q(listen)}",
                  f"inter_broker_port = {s.inter_broker_port}", f"rack = {q(s.rack)}"]
    lines += ["", "[metrics]", f"host = {q(listen)}", f"port = {s.metrics_port}", ""]
    if tls and s.tls_files is not None:
        f = s.tls_files
        lines += ["[tls]", f"ca_file = {q(f.ca_file)}", f"cert_file = {q(f.cert_file)}",
                  f"key_file = {q(f.key_file)}", f"client_listener = {q(s.client_listener)}", ""]
    return "\n".join(lines)


def parse_voters(text: str, *, default_port: int = 9093,
                 default_raft_port: int = 9094) -> tuple[VoterConfig, ...]:
    """``TIDELOG_CONTROLLER_VOTERS``: ``id@host[:port[:raft_port]]``, comma-separated."""
    name = "TIDELOG_CONTROLLER_VOTERS"
    if not text.strip():
        raise InvalidConfigError(
            f"{name} is not set: list the controller quorum as id@host:port:raft_port,...")
    voters: list[VoterConfig] = []
    for raw in text.split(","):
        entry = raw.strip()
        m = _VOTER.fullmatch(entry)
        if m is None:
            raise InvalidConfigError(
                f"{name} entry {entry!r} is not id@host:port:raft_port" if entry else
                f"{name} has an empty entry (a stray comma?) in {text!r}")
        ports = []
        for part, default in ((m[3], default_port), (m[4], default_raft_port)):
            if part is None:
                ports.append(default)
            elif not part.isdigit() or not 1 <= int(part) <= 65535:
                raise InvalidConfigError(
                    f"{name} entry {entry!r}: port {part!r} is not a number in 1..65535")
            else:
                ports.append(int(part))
        if m[2] in _WILDCARDS:
            raise InvalidConfigError(
                f"{name} entry {entry!r}: {m[2]} is a wildcard, not a host others can reach")
        voter = VoterConfig(id=int(m[1]), host=m[2], port=ports[0], raft_port=ports[1])
        if voter.port == voter.raft_port:
            raise InvalidConfigError(
                f"{name} entry {entry!r}: the port and the Raft port must differ")
        for other in voters:
            if other.id == voter.id:
                raise InvalidConfigError(f"{name} names controller id {voter.id} twice")
            if {other.address, other.raft_address} & {voter.address, voter.raft_address}:
                raise InvalidConfigError(
                    f"{name}: controllers {other.id} and {voter.id} share an address")
        voters.append(voter)
    return tuple(voters)


def pod_ordinal(hostname: str) -> int:
    """The StatefulSet ordinal of a pod named ``<statefulset>-<n>`` (the first DNS label of
    ``hostname``); InvalidConfigError when it has none."""
    label = hostname.strip().split(".", 1)[0]
    m = _ORDINAL.search(label)
    if m is None:
        raise InvalidConfigError(
            f"TIDELOG_NODE_ID_BASE needs a StatefulSet pod's hostname, ending in -<ordinal>, "
            f"but the hostname is {hostname!r}; set TIDELOG_NODE_ID instead")
    return int(m[1])


class _Env:
    """Typed reads of the environment, each error naming its variable."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def is_set(self, name: str) -> bool:
        return bool(self.env.get(name, "").strip())

    def text(self, name: str) -> str:
        """The value; unset or empty (compose's ``${X:-}``) is the default."""
        return self.env.get(name, "").strip() or ENV_VARIABLES[name][0]

    def number(self, name: str) -> int:
        value = self.text(name)
        if not value.isdigit():
            raise InvalidConfigError(f"{name}={value!r} is not a non-negative integer")
        return int(value)

    def port(self, name: str) -> int:
        value = self.text(name)
        if not value.isdigit() or not 1 <= int(value) <= 65535:
            hint = ("; a Kubernetes Service link? set enableServiceLinks: false in the pod spec"
                    if value.startswith("tcp://") else "")
            raise InvalidConfigError(f"{name}={value!r} is not a port (1..65535){hint}")
        return int(value)

    def host(self, name: str, *, default: str = "", wildcard_ok: bool = False) -> str:
        value = self.text(name) or default
        if not value:
            raise InvalidConfigError(f"{name} is not set and there is no hostname to default to")
        if _HOST.fullmatch(value) is None:
            raise InvalidConfigError(f"{name}={value!r} is not a host name or address")
        if not wildcard_ok and value in _WILDCARDS:
            raise InvalidConfigError(
                f"{name}={value!r} is a wildcard: give a name or address others can reach")
        return value

    def path(self, name: str) -> str:
        value = self.text(name)
        if not value.startswith("/"):
            raise InvalidConfigError(f"{name}={value!r} is not an absolute path")
        if any(not c.isprintable() for c in value):
            raise InvalidConfigError(f"{name} has a control character: {value!r}")
        return value

    def rack(self, name: str) -> str:
        value = self.text(name)
        if any(c.isspace() or not c.isprintable() for c in value):
            raise InvalidConfigError(f"{name}={value!r} has a space or a control character")
        return value

    def log_level(self, name: str) -> str:
        value = self.text(name).upper()
        if value not in LOG_LEVELS:
            raise InvalidConfigError(
                f"{name}={self.text(name)!r} is not one of {', '.join(LOG_LEVELS)}")
        return value


def _node_id(get: _Env, hostname: str) -> tuple[int, str]:
    """The node id and the variable(s) it came from."""
    explicit, base = get.text("TIDELOG_NODE_ID"), get.text("TIDELOG_NODE_ID_BASE")
    if explicit and base:
        raise InvalidConfigError("TIDELOG_NODE_ID and TIDELOG_NODE_ID_BASE are both set: "
                                 "give one (the base for StatefulSet pods)")
    if explicit:
        return get.number("TIDELOG_NODE_ID"), "TIDELOG_NODE_ID"
    if base:
        ordinal = pod_ordinal(hostname)
        return (get.number("TIDELOG_NODE_ID_BASE") + ordinal,
                f"TIDELOG_NODE_ID_BASE + pod ordinal {ordinal}")
    raise InvalidConfigError("TIDELOG_NODE_ID is not set: give it, or TIDELOG_NODE_ID_BASE for "
                             "a StatefulSet (node id = base + pod ordinal)")


def _cluster_id(value: str) -> str:
    if not value:
        raise InvalidConfigError(
            "TIDELOG_CLUSTER_ID is not set: make one with `tidelog storage random-uuid`")
    if "=" in value or any(c.isspace() or not c.isprintable() for c in value):
        raise InvalidConfigError(
            f"TIDELOG_CLUSTER_ID={value!r} has '=', a space or a control character")
    return value


def _distinct(ports: dict[str, int]) -> None:
    seen: dict[int, str] = {}
    for name, port in ports.items():
        if port in seen:
            raise InvalidConfigError(
                f"{name} and {seen[port]} are both {port}: each listener needs a port of its own")
        seen[port] = name
