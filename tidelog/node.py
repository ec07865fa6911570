"""Running a node: the roles a config names, in one asyncio event loop, until a signal.

``tidelog server --config FILE`` lands here. The node checks its data dir (formatted, same
cluster and node id), starts its roles, serves gRPC and metrics, and on SIGTERM/SIGINT stops its
roles in order (a broker's controlled shutdown first, once brokers exist) and exits 0.
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
from tidelog.observability import MetricsServer, Readiness

log = logging.getLogger("tidelog.node")

GRPC_OPTIONS = [
    ("grpc.max_send_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
    ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
    ("grpc.so_reuseport", 0),
]
#: Time in-flight RPCs get to finish when the node stops.
GRACE_S = 2.0


def run_node(config: NodeConfig) -> None:
    """Run the node in the foreground until SIGTERM or SIGINT."""
    logging.basicConfig(
        level=config.log_level.upper(), stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s [node {config.node_id}] %(name)s: %(message)s")
    meta = check_data_dir(Path(config.data_dir), cluster_id=config.cluster_id or None,
                          node_id=config.node_id)
    asyncio.run(_serve(config, meta.cluster_id))


async def _serve(config: NodeConfig, cluster_id: str) -> None:
    registry = CollectorRegistry()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stack: list[tuple[str, Any]] = []  # (what, async stop function), stopped in reverse
    checks: list[Readiness] = []
    try:
        if config.is_controller:
            checks.append(await _start_controller(config, cluster_id, registry, stack))
        if config.is_broker:
            broker = await _start_broker(config, cluster_id, registry, stack)
            checks.append(broker.readiness)
            stop_on = broker.stopping
        else:
            stop_on = asyncio.Event()
        if config.metrics.port:
            metrics = MetricsServer(registry, lambda: _first_reason(checks),
                                    host=config.metrics.host, port=config.metrics.port)
            metrics.start()
            stack.append(("metrics", _as_async(metrics.stop)))
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(stop_on.wait())]
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


async def _start_controller(config: NodeConfig, cluster_id: str, registry: CollectorRegistry,
                            stack: list[tuple[str, Any]]) -> Readiness:
    from controller.metrics import ControllerMetrics
    from controller.runtime import ControllerRuntime
    from controller.service import add_to_server

    runtime = ControllerRuntime(config, cluster_id=cluster_id,
                                metrics=ControllerMetrics(registry))
    stack.append(("controller", runtime.stop))
    server = grpc.aio.server(options=GRPC_OPTIONS)
    add_to_server(server, runtime)
    voter = config.voter()
    address = f"{config.controller.listen_host}:{voter.port}"
    if server.add_insecure_port(address) == 0:
        raise OSError(f"cannot bind the controller port {address}")
    await server.start()
    stack.append(("controller gRPC", lambda: server.stop(GRACE_S)))
    await runtime.start()
    log.info("controller %d serving on %s (raft %s), cluster %s", config.node_id, address,
             voter.raft_address, cluster_id)
    return runtime.readiness


async def _start_broker(config: NodeConfig, cluster_id: str, registry: CollectorRegistry,
                        stack: list[tuple[str, Any]]) -> Any:
    from broker.runtime import BrokerRuntime
    from broker.service import add_to_server

    runtime = BrokerRuntime(config, cluster_id=cluster_id, registry=registry)
    server = grpc.aio.server(options=GRPC_OPTIONS)
    add_to_server(server, runtime)
    address = f"{config.broker.listen_host}:{config.broker.port}"
    if server.add_insecure_port(address) == 0:
        raise OSError(f"cannot bind the broker port {address}")
    # Serve before registering: once registered, other brokers may fetch from us at once.
    await server.start()
    stack.append(("broker gRPC", lambda: server.stop(GRACE_S)))
    stack.append(("broker", runtime.stop))  # stopped first: controlled shutdown while serving
    await runtime.start()
    log.info("broker %d serving on %s, cluster %s", config.node_id, address, cluster_id)
    return runtime


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
