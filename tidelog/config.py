"""Node configuration: one TOML file per node, every key documented with its default.

``tidelog server --config node.toml`` reads it. Keys are grouped in tables by role
(``[controller]``, ``[broker]``, ``[metrics]``); unknown keys are an error that names the key, so a
typo never silently falls back to a default. ``docs/configuration.md`` is generated from the
``doc`` of each field (``python -m tidelog.config --markdown``).

Example (a combined node)::

    node_id = 1
    roles = ["controller", "broker"]
    data_dir = "/var/lib/tidelog/node-1"

    [[controller.voters]]
    id = 1
    host = "127.0.0.1"
    port = 9093
    raft_port = 9094

    [broker]
    port = 9092
"""

from __future__ import annotations

import dataclasses
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidelog.cluster_secret import (
    BrokerCredential,
    broker_credential,
    is_loopback,
    read_broker_credential_file,
    read_secret_file,
)
from tidelog.errors import InvalidConfigError
from tidelog.scram import MECHANISMS as SCRAM_MECHANISMS
from tidelog.tls import CLIENT_AUTH, REQUESTED_UNAVAILABLE, TlsFiles

__all__ = [
    "AuthorizationConfig",
    "BrokerConfig",
    "ControllerConfig",
    "MetricsConfig",
    "NodeConfig",
    "SaslConfig",
    "TlsConfig",
    "VoterConfig",
    "load_config",
    "parse_config",
]

ROLES = ("controller", "broker")


def _doc(text: str, default: Any = dataclasses.MISSING, **kw: Any) -> Any:
    """A dataclass field carrying its one-line documentation (for the reference page)."""
    if default is not dataclasses.MISSING:
        kw["default"] = default
    return field(metadata={"doc": text}, **kw)


@dataclass(frozen=True)
class VoterConfig:
    """One controller of the quorum (Kafka's controller.quorum.voters entry)."""

    id: int = _doc("node id of the controller")
    host: str = _doc("host the controller's gRPC and Raft ports are reached at")
    port: int = _doc("ControllerService gRPC port", 9093)
    raft_port: int = _doc("Raft (pysyncobj) port; keep it on a private network", 9094)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def raft_address(self) -> str:
        return f"{self.host}:{self.raft_port}"


@dataclass(frozen=True)
class ControllerConfig:
    """[controller]: the metadata quorum."""

    voters: tuple[VoterConfig, ...] = _doc(
        "the controller quorum: a [[controller.voters]] table per controller (id, host, port, "
        "raft_port); brokers use it to find controllers too",
        default_factory=tuple,
    )
    listen_host: str = _doc(
        "address the ControllerService gRPC port binds to; non-loopback needs cluster_secret_file "
        "and [tls] (brokers' credentials must not travel in clear)", "127.0.0.1")
    raft_listen_host: str = _doc(
        "address the Raft port binds to; empty = listen_host. Keep it on a private network: a "
        "wildcard (0.0.0.0, ::) or any non-loopback address needs cluster_secret_file",
        "",
    )
    broker_session_timeout_ms: int = _doc(
        "a broker without a heartbeat for this long is fenced (Kafka's broker.session.timeout.ms)",
        9000,
    )
    election_timeout_min_ms: int = _doc("Raft election timeout, lower bound", 200)
    election_timeout_max_ms: int = _doc("Raft election timeout, upper bound", 500)
    append_entries_period_ms: int = _doc("Raft heartbeat period of the leader", 50)
    fast_election_stagger_ms: int = _doc(
        "when the leader's connection ends (its process died), the other voters stand at once, "
        "after a pre-vote, this far apart by rank, instead of waiting out the election timeout "
        "(docs/controllers.md, elections). 0 = off. Below election_timeout_min_ms",
        50)
    snapshot_min_entries: int = _doc(
        "Raft log compaction: a snapshot once the Raft log holds this many entries (or at "
        "snapshot_interval_ms, whichever first; and always once the journal's applied part "
        "reaches 64 MiB). 0 = only the 64 MiB trigger. Metadata changes are rare at steady "
        "state, so 20,000 keeps a restart's journal replay short; a snapshot costs the Raft "
        "thread ~5 ms per 1,000 partitions",
        20_000,
    )
    snapshot_interval_ms: int = _doc(
        "Raft log compaction: a snapshot at least this often if anything was applied since the "
        "last one (bounds a restart's replay when changes trickle in); ignored when "
        "snapshot_min_entries is 0",
        3_600_000,
    )
    fence_check_interval_ms: int = _doc("how often the active controller checks sessions", 250)
    broker_probe_after_ms: int = _doc(
        "fast fencing of dead brokers: a broker not heard from for this long (or whose metadata "
        "stream to the active controller ended) is probed with a TCP connect to each of its "
        "registered listeners; if every one is refused (nothing listens: the process is gone, "
        "e.g. kill -9) and no heartbeat came meanwhile, it is fenced at once rather than after "
        "broker_session_timeout_ms. A stopped or slow broker still accepts connects and waits out "
        "its session. Keep it above broker.heartbeat_interval_ms; 0 = off (fence at session "
        "expiry only, e.g. where a firewall rejects connections rather than dropping them)",
        2500,
    )
    leader_imbalance_check_interval_ms: int = _doc(
        "automatic leader rebalance (Kafka's auto.leader.rebalance.enable with "
        "leader.imbalance.check.interval.seconds): this often the active controller gives each "
        "partition back to its preferred replica (the first) where that one is in the ISR and "
        "active, 2,000 partitions per batch; 0 = off",
        300_000,
    )
    default_num_partitions: int = _doc("partitions of a topic created with -1 (num.partitions)", 1)
    default_replication_factor: int = _doc(
        "replication factor of a topic created with -1 (default.replication.factor)", 1
    )


@dataclass(frozen=True)
class BrokerConfig:
    """[broker]: serving clients and replicating partitions."""

    host: str = _doc("host clients and other brokers reach this broker at", "127.0.0.1")
    listen_host: str = _doc("address the client listener (BrokerService) binds to", "127.0.0.1")
    port: int = _doc("client listener port: BrokerService, for producers, consumers, admins", 9092)
    inter_broker_host: str = _doc(
        "host other brokers reach this broker's inter-broker listener at; empty = host", "")
    inter_broker_listen_host: str = _doc(
        "address the inter-broker listener (ReplicaService: follower fetches) binds to; "
        "non-loopback needs broker_credential_file (or, combined, cluster_secret_file) and "
        "[tls]",
        "127.0.0.1",
    )
    inter_broker_port: int = _doc(
        "inter-broker listener port: ReplicaService, answered only to brokers that present "
        "their credential (and, with [tls], a certificate naming their id)",
        9095,
    )
    rack: str = _doc("rack label used to spread replicas; empty = none", "")
    heartbeat_interval_ms: int = _doc("how often the broker heartbeats to the controller", 2000)
    replica_lag_time_max_ms: int = _doc(
        "a follower not caught up for this long leaves the ISR (replica.lag.time.max.ms)", 30000
    )
    replica_fetch_wait_max_ms: int = _doc("long-poll wait of follower fetches", 500)
    log_flush_policy: str = _doc(
        "never | interval | every_batch: when appends are fsynced (the WAL is always on)", "never"
    )
    log_flush_interval_ms: int = _doc("fsync period when log_flush_policy = interval", 1000)
    log_retention_check_interval_ms: int = _doc("how often retention runs", 300_000)
    offsets_topic_num_partitions: int = _doc(
        "partitions of __consumer_offsets when a broker creates it on first use "
        "(offsets.topic.num.partitions); a group's coordinator is the leader of partition "
        "abs(hash(group id)) % this. Fixed once the topic exists", 50)
    group_consumer_session_timeout_ms: int = _doc(
        "a group member not heard from for this long is fenced and its partitions move "
        "(group.consumer.session.timeout.ms)", 45_000)
    group_consumer_heartbeat_interval_ms: int = _doc(
        "how often group members heartbeat to their coordinator, told to them in every "
        "answer (group.consumer.heartbeat.interval.ms); below the session timeout", 5_000)


@dataclass(frozen=True)
class MetricsConfig:
    """[metrics]: Prometheus /metrics, /healthz and /readyz over HTTP."""

    host: str = _doc("address the metrics HTTP server binds to", "127.0.0.1")
    port: int = _doc("metrics port; 0 = disabled", 0)


@dataclass(frozen=True)
class TlsConfig:
    """[tls]: TLS on the node's listeners and its connections to other nodes (off when empty)."""

    ca_file: str = _doc(
        "PEM CA bundle that signed every node's certificate (and clients', when client_auth "
        "asks for one); setting ca_file, cert_file and key_file turns TLS on: the controller "
        "and inter-broker listeners then require a certificate from this CA (mutual TLS)", "")
    cert_file: str = _doc(
        "this node's certificate chain (PEM); its subject alternative names must cover every "
        "address peers and clients dial it at (`tidelog security init` makes one). Renewed "
        "files are served to new connections without a restart", "")
    key_file: str = _doc("the certificate's private key (PEM, mode 0600)", "")
    client_auth: str = _doc(
        "the client listener's client certificates: none or required (Kafka's "
        "ssl.client.auth)", "none")
    client_listener: str = _doc(
        "tls or plaintext: plaintext leaves the client listener unencrypted (clients untrusted "
        "and anonymous unless they could authenticate otherwise: SCRAM needs tls) while the "
        "peer listeners keep TLS, as Kafka's PLAINTEXT client listener beside an SSL "
        "inter-broker one", "tls")

    @property
    def enabled(self) -> bool:
        return bool(self.ca_file or self.cert_file or self.key_file)

    def files(self) -> TlsFiles:
        return TlsFiles(self.ca_file, self.cert_file, self.key_file)


@dataclass(frozen=True)
class SaslConfig:
    """[sasl]: username/password clients (SCRAM credentials in the metadata log) on the client
    listener, Kafka's SASL_SSL."""

    enabled_mechanisms: tuple[str, ...] = _doc(
        'SCRAM mechanisms clients may authenticate with, e.g. ["SCRAM-SHA-256", '
        '"SCRAM-SHA-512"] (sasl.enabled.mechanisms); empty = no SASL. Needs the client '
        "listener on TLS: the proof a client sends is as good as its password",
        default_factory=tuple)
    required: bool = _doc(
        "refuse every call on the client listener that is not authenticated, by SCRAM or by a "
        "client certificate the listener verified (a SASL_SSL listener; UNAUTHENTICATED "
        "SASL_AUTHENTICATION_FAILED)", False)


@dataclass(frozen=True)
class AuthorizationConfig:
    """[authorization]: ACLs on the client listener (Kafka's StandardAuthorizer)."""

    enabled: bool = _doc(
        "check every client request against the ACLs in the metadata log (Kafka's "
        "authorizer.class.name); principals are User:<name> of a SCRAM user ([sasl]), else "
        "User:<certificate CN> with TLS client certificates, else User:ANONYMOUS", False)
    super_users: tuple[str, ...] = _doc(
        'principals allowed everything, e.g. ["User:admin"] (super.users)',
        default_factory=tuple)
    allow_everyone_if_no_acl_found: bool = _doc(
        "allow a request on a resource that has no ACL at all "
        "(allow.everyone.if.no.acl.found)", False)


@dataclass(frozen=True)
class NodeConfig:
    """Top level of a node's config file."""

    node_id: int = _doc("this node's id, unique in the cluster (>= 0)")
    data_dir: str = _doc("directory for this node's data; formatted once with the cluster id")
    roles: tuple[str, ...] = _doc(
        'what this node runs: ["controller"], ["broker"] or both (combined mode)',
        default_factory=lambda: ("controller", "broker"),
    )
    cluster_id: str = _doc(
        "expected cluster id; empty = take it from the formatted data dir", ""
    )
    cluster_secret_file: str = _doc(
        "controllers (and combined nodes) only: the file holding the cluster secret (one line, "
        "mode 0600; `tidelog storage random-secret` makes one), the root of every broker's "
        "credential and of the Raft key. A broker-only node never holds it (refused): it gets "
        "broker_credential_file. Empty = none, allowed only when every listener binds loopback",
        "",
    )
    broker_credential_file: str = _doc(
        "broker-only nodes: the file holding this broker's own credential (mode 0600; `tidelog "
        "storage broker-credential` makes it from the cluster secret), which it presents to the "
        "controllers and to other brokers. Empty = none, allowed only when every listener binds "
        "loopback",
        "",
    )
    log_level: str = _doc("DEBUG, INFO, WARNING or ERROR", "INFO")
    controller: ControllerConfig = _doc("[controller] table", default_factory=ControllerConfig)
    broker: BrokerConfig = _doc("[broker] table", default_factory=BrokerConfig)
    metrics: MetricsConfig = _doc("[metrics] table", default_factory=MetricsConfig)
    tls: TlsConfig = _doc("[tls] table", default_factory=TlsConfig)
    sasl: SaslConfig = _doc("[sasl] table", default_factory=SaslConfig)
    authorization: AuthorizationConfig = _doc("[authorization] table",
                                              default_factory=AuthorizationConfig)

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def raft_bind_host(self) -> str:
        """Where the Raft port binds (controllers only)."""
        return self.controller.raft_listen_host or self.controller.listen_host

    @property
    def inter_broker_advertised_host(self) -> str:
        return self.broker.inter_broker_host or self.broker.host

    def cluster_secret(self) -> str | None:
        """The cluster secret from ``cluster_secret_file`` (read now), or None when unset
        (always on a broker-only node: validation refuses the key there)."""
        if not self.cluster_secret_file:
            return None
        return read_secret_file(self.cluster_secret_file)

    def broker_credential(self) -> BrokerCredential | None:
        """This broker's credential (read now): from ``broker_credential_file`` on a
        broker-only node, derived from the cluster secret on a combined one; None without, and
        on a controller-only node."""
        if not self.is_broker:
            return None
        if self.broker_credential_file:
            return read_broker_credential_file(self.broker_credential_file,
                                               broker_id=self.node_id)
        secret = self.cluster_secret()
        return broker_credential(secret, self.node_id) if secret is not None else None

    @property
    def has_credentials(self) -> bool:
        return bool(self.cluster_secret_file or self.broker_credential_file)

    def listen_hosts(self) -> dict[str, str]:
        """Every peer-facing or client-facing listener of this node: name -> bind host."""
        hosts: dict[str, str] = {}
        if self.is_controller:
            hosts["controller.listen_host"] = self.controller.listen_host
            hosts["controller.raft_listen_host"] = self.raft_bind_host
        if self.is_broker:
            hosts["broker.listen_host"] = self.broker.listen_host
            hosts["broker.inter_broker_listen_host"] = self.broker.inter_broker_listen_host
        return hosts

    def voter(self) -> VoterConfig:
        """This node's own entry in the voter list (controllers only)."""
        for v in self.controller.voters:
            if v.id == self.node_id:
                return v
        raise InvalidConfigError(
            f"node_id {self.node_id} has the controller role but is not in [[controller.voters]]"
        )


def _build(cls: type[Any], table: dict[str, Any], where: str) -> Any:
    """Build dataclass ``cls`` from a TOML table, rejecting unknown keys and wrong types."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise InvalidConfigError(
            f"unknown config key '{where}{unknown[0]}' (known: {', '.join(sorted(fields))})"
        )
    kwargs: dict[str, Any] = {}
    for name, value in table.items():
        kwargs[name] = _convert(cls, fields[name], value, f"{where}{name}")
    try:
        return cls(**kwargs)
    except TypeError as e:
        missing = [n for n, f in fields.items() if _required(f) and n not in table]
        what = f"{where}{missing[0]}" if missing else str(e)
        raise InvalidConfigError(f"missing config key {what}") from None


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


_NESTED = {"controller": ControllerConfig, "broker": BrokerConfig, "metrics": MetricsConfig,
           "tls": TlsConfig, "sasl": SaslConfig, "authorization": AuthorizationConfig}


def _convert(cls: type[Any], f: dataclasses.Field[Any], value: Any, key: str) -> Any:
    if cls is NodeConfig and f.name in _NESTED:
        if not isinstance(value, dict):
            raise InvalidConfigError(f"{key} must be a table")
        return _build(_NESTED[f.name], value, f"{key}.")
    if cls is ControllerConfig and f.name == "voters":
        if not isinstance(value, list):
            raise InvalidConfigError(f"{key} must be an array of tables ([[controller.voters]])")
        return tuple(_build(VoterConfig, v, f"{key}[{i}].") for i, v in enumerate(value))
    if cls is AuthorizationConfig and f.name == "super_users":
        if not isinstance(value, list) or not all(
                isinstance(v, str) and v.startswith("User:") and len(v) > 5 for v in value):
            raise InvalidConfigError(f'{key} must be a list of principals like "User:admin", '
                                     f"got {value!r}")
        return tuple(value)
    if str(f.type) == "bool" and not isinstance(value, bool):
        raise InvalidConfigError(f"{key} must be true or false, got {value!r}")
    if f.name == "roles":
        if not isinstance(value, list) or not value or not set(value) <= set(ROLES):
            raise InvalidConfigError(f"{key} must be a non-empty list of {ROLES}, got {value!r}")
        return tuple(value)
    expected = {"int": int, "str": str}.get(str(f.type))
    if expected is not None and (not isinstance(value, expected) or isinstance(value, bool)):
        raise InvalidConfigError(f"{key} must be {f.type}, got {value!r}")
    return value


def _validate(cfg: NodeConfig) -> NodeConfig:
    if cfg.node_id < 0:
        raise InvalidConfigError(f"node_id must be >= 0, got {cfg.node_id}")
    if not cfg.controller.voters:
        raise InvalidConfigError("[[controller.voters]] is empty: list the controller quorum")
    ids = [v.id for v in cfg.controller.voters]
    if len(set(ids)) != len(ids):
        raise InvalidConfigError(f"[[controller.voters]] has duplicate ids: {ids}")
    if cfg.is_controller:
        cfg.voter()
    c = cfg.controller
    if not 0 < c.election_timeout_min_ms < c.election_timeout_max_ms:
        raise InvalidConfigError("controller.election_timeout_min_ms must be > 0 and < max")
    if c.leader_imbalance_check_interval_ms < 0:
        raise InvalidConfigError(
            "controller.leader_imbalance_check_interval_ms must be >= 0 (0 = off), got "
            f"{c.leader_imbalance_check_interval_ms}")
    if c.broker_probe_after_ms < 0:
        raise InvalidConfigError(
            "controller.broker_probe_after_ms must be >= 0 (0 = off), got "
            f"{c.broker_probe_after_ms}")
    if c.snapshot_min_entries < 0 or c.snapshot_min_entries == 1 or c.snapshot_interval_ms <= 0:
        raise InvalidConfigError(
            "controller.snapshot_min_entries must be 0 or >= 2 (pysyncobj keeps two entries) "
            "and controller.snapshot_interval_ms > 0")
    if not 0 <= c.fast_election_stagger_ms < c.election_timeout_min_ms:
        raise InvalidConfigError(
            "controller.fast_election_stagger_ms must be >= 0 and below "
            "election_timeout_min_ms")
    if c.election_timeout_min_ms <= 3 * c.append_entries_period_ms:
        raise InvalidConfigError(
            "controller.election_timeout_min_ms must exceed 3 * append_entries_period_ms "
            "(pysyncobj's rule: followers would time out between heartbeats)"
        )
    if cfg.broker.log_flush_policy not in ("never", "interval", "every_batch"):
        raise InvalidConfigError(
            f"broker.log_flush_policy must be never, interval or every_batch, "
            f"got {cfg.broker.log_flush_policy!r}"
        )
    if not 1 <= cfg.broker.offsets_topic_num_partitions <= 1000:
        raise InvalidConfigError(
            f"broker.offsets_topic_num_partitions must be 1..1000, "
            f"got {cfg.broker.offsets_topic_num_partitions}")
    if not 0 < cfg.broker.group_consumer_heartbeat_interval_ms < (
            cfg.broker.group_consumer_session_timeout_ms):
        raise InvalidConfigError(
            "broker.group_consumer_heartbeat_interval_ms must be positive and below "
            "broker.group_consumer_session_timeout_ms")
    if cfg.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise InvalidConfigError(f"log_level {cfg.log_level!r} is not a log level")
    if cfg.is_broker and cfg.broker.inter_broker_port == cfg.broker.port:
        raise InvalidConfigError(
            "broker.inter_broker_port must differ from broker.port: replication is served on a "
            "listener of its own, never to clients")
    _validate_tls(cfg)
    _validate_sasl(cfg)
    _validate_credentials(cfg)
    return cfg


def _validate_credentials(cfg: NodeConfig) -> None:
    """The root secret on controllers only, a broker's own credential on a broker-only node,
    and a credential sent in clear only on loopback (docs/security.md, "Who is a broker")."""
    if cfg.cluster_secret_file and not cfg.is_controller:
        raise InvalidConfigError(
            f"cluster_secret_file is set on broker-only node {cfg.node_id}: the cluster secret is "
            f"the root of every broker's credential and of the Raft key and stays on the "
            f"controllers. Give this broker its own credential instead: `tidelog storage "
            f"broker-credential --secret-file {cfg.cluster_secret_file} --broker-id "
            f"{cfg.node_id} --out FILE`, then broker_credential_file = FILE")
    if cfg.broker_credential_file and cfg.is_controller:
        raise InvalidConfigError(
            "broker_credential_file is for broker-only nodes: a controller (or combined node) "
            "holds cluster_secret_file and derives its broker credential from it")
    cfg.cluster_secret()  # unreadable, too open, not a secret: one line now, not at first use
    cfg.broker_credential()
    if not cfg.has_credentials:
        exposed = {k: h for k, h in cfg.listen_hosts().items() if not is_loopback(h)}
        if exposed:
            key, host = next(iter(exposed.items()))
            needs = ("cluster_secret_file (make one with `tidelog storage random-secret --out "
                     "FILE`)") if cfg.is_controller else (
                "broker_credential_file (`tidelog storage broker-credential`)")
            raise InvalidConfigError(f"{key} = {host!r} is not loopback, so this node needs "
                                     f"{needs}")
    if not cfg.tls.enabled:
        # A credential in gRPC metadata is a bearer token: in clear, one capture replays it.
        # The Raft port is not listed: its handshake is a challenge-response and every frame
        # is MAC'd under a per-connection key, so a capture replays nothing.
        clear = {k: h for k, h in cfg.listen_hosts().items()
                 if k in _PEER_LISTENERS and not is_loopback(h)}
        if clear:
            key, host = next(iter(clear.items()))
            raise InvalidConfigError(
                f"{key} = {host!r} is not loopback and [tls] is not set: the broker credentials "
                f"this listener checks would travel in clear, and anyone who captures one can "
                f"replay it. Set [tls] (tidelog security init), or bind it to loopback")


#: The listeners where brokers present their credentials (gRPC metadata).
_PEER_LISTENERS = ("controller.listen_host", "broker.inter_broker_listen_host")


def _validate_tls(cfg: NodeConfig) -> None:
    tls = cfg.tls
    if tls.client_auth == "requested":
        raise InvalidConfigError(f"tls.{REQUESTED_UNAVAILABLE}")
    if tls.client_auth not in CLIENT_AUTH:
        raise InvalidConfigError(f"tls.client_auth must be one of {', '.join(CLIENT_AUTH)}, "
                                 f"got {tls.client_auth!r}")
    if tls.client_listener not in ("tls", "plaintext"):
        raise InvalidConfigError(f"tls.client_listener must be tls or plaintext, got "
                                 f"{tls.client_listener!r}")
    if not tls.enabled:
        return
    missing = [k for k in ("ca_file", "cert_file", "key_file") if not getattr(tls, k)]
    if missing:
        raise InvalidConfigError(f"tls.{missing[0]} is empty: TLS needs ca_file, cert_file and "
                                 f"key_file (tidelog security init makes them)")
    tls.files().check("tls")  # unreadable, not PEM, a key others can read: one line now
    # A plaintext client listener is allowed anywhere, as it is without [tls]: since the peer
    # listeners need TLS off loopback, this is how a cluster keeps plaintext clients (Kafka's
    # PLAINTEXT client listener beside an SSL inter-broker one). SCRAM still needs TLS there.


def _validate_sasl(cfg: NodeConfig) -> None:
    sasl, tls = cfg.sasl, cfg.tls
    unknown = [m for m in sasl.enabled_mechanisms if m not in SCRAM_MECHANISMS]
    if unknown:
        raise InvalidConfigError(f"sasl.enabled_mechanisms: {unknown[0]!r} is not one of "
                                 f"{', '.join(SCRAM_MECHANISMS)}")
    client_tls = tls.enabled and tls.client_listener == "tls"
    if sasl.enabled_mechanisms and not client_tls:
        raise InvalidConfigError(
            "sasl.enabled_mechanisms needs the client listener on TLS ([tls] set and "
            "tls.client_listener = \"tls\"): a client's SCRAM proof is as good as its password")
    if sasl.required and not sasl.enabled_mechanisms and \
            not (client_tls and tls.client_auth != "none"):
        raise InvalidConfigError(
            "sasl.required = true, but no client could authenticate: enable SCRAM "
            "(sasl.enabled_mechanisms) or client certificates (tls.client_auth)")


def parse_config(text: str, *, source: str = "<config>") -> NodeConfig:
    """Parse and validate a node config from TOML text."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InvalidConfigError(f"{source} is not valid TOML: {e}") from None
    cfg: NodeConfig = _build(NodeConfig, table, "")
    return _validate(cfg)


def load_config(path: str | Path) -> NodeConfig:
    """Read, parse and validate a node config file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise InvalidConfigError(f"cannot read config file {p}: {e.strerror}") from None
    return parse_config(text, source=str(p))


def markdown() -> str:
    """Every key with its default and doc, as a Markdown reference."""
    lines = ["# Node configuration reference", "",
             "Generated by `python -m tidelog.config --markdown`; one TOML file per node.", ""]
    for title, cls in (("top level", NodeConfig), ("[controller]", ControllerConfig),
                       ("[[controller.voters]]", VoterConfig), ("[broker]", BrokerConfig),
                       ("[metrics]", MetricsConfig), ("[tls]", TlsConfig),
                       ("[sasl]", SaslConfig), ("[authorization]", AuthorizationConfig)):
        lines += [f"## {title}", "", "| key | default | meaning |", "|---|---|---|"]
        for f in dataclasses.fields(cls):
            if f.name in _NESTED:
                continue
            lines.append(f"| `{f.name}` | `{_default_text(f)}` | {f.metadata['doc']} |")
        lines.append("")
    return "\n".join(lines + _topic_config_lines())


def _topic_config_lines() -> list[str]:
    from tidelog.configs import TOPIC_CONFIGS

    lines = [
        "## Topic configs", "",
        "Topic-level configs use Kafka's names (`tidelog/configs.py` holds their defaults, "
        "validation and docs). Set them when creating a topic or later with AlterConfigs; an "
        "unknown name or an invalid value is refused with `INVALID_CONFIG` naming the key.", "",
        "| name | default | meaning |", "|---|---|---|",
    ]
    for name, d in sorted(TOPIC_CONFIGS.items()):
        lines.append(f"| `{name}` | `{d.default}` | {d.doc} |")
    return [*lines, ""]


def _default_text(f: dataclasses.Field[Any]) -> str:
    if _required(f):
        return "(required)"
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    factory: Any = f.default_factory
    return repr(factory())


if __name__ == "__main__":
    if sys.argv[1:] == ["--markdown"]:
        print(markdown())
