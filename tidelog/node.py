"""Running a node: the roles a config names, in one asyncio event loop, until a signal.

``tidelog server --config FILE`` lands here. The node checks its data dir (formatted, same
cluster and node id), starts its roles, serves gRPC and metrics, and on SIGTERM/SIGINT stops its
roles in order (a broker's controlled shutdown first, once brokers exist) and exits 0. A role
that fails for good (a controller whose Raft journal cannot be written, a broker's fatal error)
stops the node the same way, and it exits 1 after a last line saying why.

Listeners, each bound exactly where the config says (DESIGN §11): a broker's client listener
(BrokerService) and inter-broker listener (ReplicaService), a controller's listener
(ControllerService), and metrics. The inter-broker and controller listeners carry
tidelog.peer_auth's interceptor: only brokers with their own credential (and, with [tls], a
certificate naming their id) get through (DescribeQuorum excepted), refused before their
request is read. Every gRPC server has a concurrent-RPC limit from tidelog.limits (past it gRPC
answers RESOURCE_EXHAUSTED, retriable), and the peer listeners a message limit sized for what
brokers send them (``CONTROLLER_REQUEST_BYTES_MAX``, ``INTER_BROKER_REQUEST_BYTES_MAX``). A
listener that cannot bind stops the node with one line naming its config keys.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import grpc
from prometheus_client import CollectorRegistry

from tidelog import limits
from tidelog.config import NodeConfig
from tidelog.data_dir import check_data_dir
from tidelog.node_metrics import register_node_metrics
from tidelog.observability import DirectExposition, MetricsServer, Readiness
from tidelog.rpc_guard import DecodeGuardInterceptor
from tidelog.tls import server_credentials

log = logging.getLogger("tidelog.node")

def grpc_options(receive_bytes_max: int) -> list[tuple[str, int]]:
    """A server's options: answers up to GRPC_MESSAGE_BYTES_MAX (fetch answers carry records),
    requests up to ``receive_bytes_max`` (gRPC refuses a larger one with RESOURCE_EXHAUSTED
    from its length prefix, before reading it)."""
    return [("grpc.max_send_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
            ("grpc.max_receive_message_length", receive_bytes_max),
            ("grpc.so_reuseport", 0)]


#: Time in-flight RPCs get to finish when the node stops.
GRACE_S = 2.0


def run_node(config: NodeConfig) -> None:
    """Run the node in the foreground until SIGTERM or SIGINT."""
    logging.basicConfig(
        level=config.log_level.upper(), stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s [node {config.node_id}] %(name)s: %(message)s")
    meta = check_data_dir(Path(config.data_dir), cluster_id=config.cluster_id or None,
                          node_id=config.node_id)
    failure = asyncio.run(_serve(config, meta.cluster_id))
    if failure is not None:
        log.critical("node %d stopped after a fatal error: %s", config.node_id, failure)
        raise SystemExit(1)


async def _serve(config: NodeConfig, cluster_id: str) -> str | None:
    """Runs the node until a signal or a role's fatal error; returns that error, if any."""
    registry = CollectorRegistry()
    # Disk, info and process series, whatever the roles (tidelog/node_metrics.py).
    register_node_metrics(registry, config.data_dir, node_id=config.node_id, roles=config.roles)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stack: list[tuple[str, Any]] = []  # (what, async stop function), stopped in reverse
    checks: list[Readiness] = []
    roles: list[Any] = []  # runtimes with .stopping (an asyncio.Event) and .failure
    direct: list[DirectExposition] = []  # collectors /metrics lets write their own families
    try:
        if config.is_controller:
            controller = await _start_controller(config, cluster_id, registry, stack)
            checks.append(controller.readiness)
            roles.append(controller)
        if config.is_broker:
            broker = await _start_broker(config, cluster_id, registry, stack)
            checks.append(broker.readiness)
            if broker.replica_manager.metrics is not None:
                direct.append(broker.replica_manager.metrics.partition_gauges)
            roles.append(broker)
        if config.metrics.port:
            metrics = MetricsServer(registry, lambda: _first_reason(checks),
                                    host=config.metrics.host, port=config.metrics.port,
                                    direct=direct)
            metrics.start()
            stack.append(("metrics", _as_async(metrics.stop)))
        waits = [asyncio.ensure_future(stop.wait()),
                 *(asyncio.ensure_future(role.stopping.wait()) for role in roles)]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        log.info("node %d stopping", config.node_id)
    finally:
        for what, stop_fn in reversed(stack):
            try:
                await stop_fn()
            except Exception:
                log.exception("node %d: stopping %s failed", config.node_id, what)
    log.info("node %d stopped", config.node_id)
    return next((str(role.failure) for role in roles if role.failure is not None), None)


async def _start_controller(config: NodeConfig, cluster_id: str, registry: CollectorRegistry,
                            stack: list[tuple[str, Any]]) -> Any:
    from tidelog.controller.metrics import ControllerMetrics
    from tidelog.controller.runtime import ControllerRuntime
    from tidelog.controller.service import add_to_server, peer_auth_interceptor

    runtime = ControllerRuntime(config, cluster_id=cluster_id,
                                metrics=ControllerMetrics(registry))
    stack.append(("controller", runtime.stop))
    _warn_if_open(runtime.secret is None, "the controller listener")
    server = _server(limits.CONTROLLER_LISTENER_CONCURRENT_RPCS_MAX,
                     limits.CONTROLLER_REQUEST_BYTES_MAX,
                     [peer_auth_interceptor(runtime.secret, tls=config.tls.enabled)])
    add_to_server(server, runtime)
    voter = config.voter()
    address = _bind(server, config.controller.listen_host, voter.port,
                    "controller.listen_host", "[[controller.voters]] port",
                    _peer_credentials(config, "the controller listener"))
    await server.start()
    stack.append(("controller gRPC", lambda: server.stop(GRACE_S)))
    await runtime.start()
    log.info("controller %d serving on %s (raft %s), cluster %s", config.node_id, address,
             voter.raft_address, cluster_id)
    return runtime


async def _start_broker(config: NodeConfig, cluster_id: str, registry: CollectorRegistry,
                        stack: list[tuple[str, Any]]) -> Any:
    """The broker's two listeners: clients (BrokerService) on ``listen_host:port``, follower
    fetches (ReplicaService, brokers with a credential only) on
    ``inter_broker_listen_host:inter_broker_port``."""
    from tidelog.broker.authz.authn import AuthenticationInterceptor
    from tidelog.broker.runtime import BrokerRuntime
    from tidelog.broker.service import add_replica_service, add_to_server
    from tidelog.peer_auth import PeerAuthInterceptor

    b = config.broker
    runtime = BrokerRuntime(config, cluster_id=cluster_id, registry=registry)
    server = _server(limits.CLIENT_LISTENER_CONCURRENT_RPCS_MAX, limits.GRPC_MESSAGE_BYTES_MAX,
                     [AuthenticationInterceptor(runtime.authn)] if runtime.authn.active else [])
    add_to_server(server, runtime)
    client_tls = config.tls.enabled and config.tls.client_listener == "tls"
    address = _bind(server, b.listen_host, b.port, "broker.listen_host", "broker.port",
                    server_credentials(config.tls.files(), client_auth=config.tls.client_auth,
                                       where="the client listener") if client_tls else None)
    verifier = runtime.peer_verifier()
    _warn_if_open(verifier is None, "the inter-broker listener")
    replica_server = _server(
        limits.INTER_BROKER_LISTENER_CONCURRENT_RPCS_MAX, limits.INTER_BROKER_REQUEST_BYTES_MAX,
        [PeerAuthInterceptor(verifier, listener="the inter-broker listener",
                             tls=config.tls.enabled)])
    add_replica_service(replica_server, runtime)
    replica_address = _bind(replica_server, b.inter_broker_listen_host, b.inter_broker_port,
                            "broker.inter_broker_listen_host", "broker.inter_broker_port",
                            _peer_credentials(config, "the inter-broker listener"))
    # Serve before registering: once registered, other brokers may fetch from us at once.
    await server.start()
    await replica_server.start()
    stack.append(("broker gRPC", lambda: server.stop(GRACE_S)))
    stack.append(("broker inter-broker gRPC", lambda: replica_server.stop(GRACE_S)))
    stack.append(("broker", runtime.stop))  # stopped first: controlled shutdown while serving
    await runtime.start()
    log.info("broker %d serving clients on %s (%s), brokers on %s (%s), cluster %s",
             config.node_id, address, "TLS" if client_tls else "plaintext", replica_address,
             "mutual TLS" if config.tls.enabled else "plaintext", cluster_id)
    return runtime


def _server(concurrent_rpcs_max: int, receive_bytes_max: int,
            interceptors: list[Any]) -> grpc.aio.Server:
    # The decode guard goes first so that it wraps what the others return (a peer-auth
    # refusal has no deserializer and stays as it is).
    return grpc.aio.server(options=grpc_options(receive_bytes_max),
                           interceptors=[DecodeGuardInterceptor(), *interceptors],
                           maximum_concurrent_rpcs=concurrent_rpcs_max)


def _peer_credentials(config: NodeConfig, listener: str) -> grpc.ServerCredentials | None:
    """Mutual TLS for a peer listener when [tls] is set: only certificates of the CA."""
    if not config.tls.enabled:
        return None
    return server_credentials(config.tls.files(), client_auth="required", where=listener)


def _bind(server: grpc.aio.Server, host: str, port: int, host_key: str, port_key: str,
          credentials: grpc.ServerCredentials | None = None) -> str:
    """Bind ``host:port`` (TLS with ``credentials``) or raise an OSError whose one line names
    the config keys."""
    address = f"{host}:{port}"
    try:
        bound = server.add_secure_port(address, credentials) if credentials is not None \
            else server.add_insecure_port(address)
    except RuntimeError:  # grpc raises this for some failures instead of returning 0
        bound = 0
    if bound == 0:
        raise OSError(f"cannot bind {host_key}:{port_key} = {address} (port in use, or not an "
                      f"address of this host)")
    return address


def _warn_if_open(unauthenticated: bool, listener: str) -> None:
    """Without a secret anyone who reaches ``listener`` may use it: config validation allows
    that only when every listener binds loopback."""
    if unauthenticated:
        log.warning("%s is unauthenticated: no cluster_secret_file or broker_credential_file "
                    "is set (fine for a loopback-only development node, never on a network)",
                    listener)


def _first_reason(checks: list[Readiness]) -> str | None:
    for check in checks:
        reason = check()
        if reason is not None:
            return reason
    return None


def _as_async(fn: Any) -> Any:
    async def run() -> None:
        fn()
    return run
