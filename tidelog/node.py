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

import grpc
from prometheus_client import CollectorRegistry

from tidelog import limits
from tidelog.config import NodeConfig
from tidelog.data_dir import check_data_dir
from tidelog.observability import MetricsServer

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

    runtime = None
    server = None
    if config.is_controller:
        from controller.metrics import ControllerMetrics
        from controller.runtime import ControllerRuntime
        from controller.service import add_to_server

        runtime = ControllerRuntime(config, cluster_id=cluster_id,
                                    metrics=ControllerMetrics(registry))
        server = grpc.aio.server(options=GRPC_OPTIONS)
        add_to_server(server, runtime)
        voter = config.voter()
        address = f"{config.controller.listen_host}:{voter.port}"
        if server.add_insecure_port(address) == 0:
            raise OSError(f"cannot bind the controller port {address}")
        await server.start()
        await runtime.start()
        log.info("controller %d serving on %s (raft %s), cluster %s", config.node_id, address,
                 voter.raft_address, cluster_id)
    if config.is_broker:
        log.warning("the broker role is not implemented yet; running the controller role only")

    metrics_server = None
    if config.metrics.port:
        ready = runtime.readiness if runtime is not None else (lambda: None)
        metrics_server = MetricsServer(registry, ready, host=config.metrics.host,
                                       port=config.metrics.port)
        metrics_server.start()
    try:
        await stop.wait()
        log.info("node %d stopping", config.node_id)
    finally:
        if server is not None:
            await server.stop(GRACE_S)
        if runtime is not None:
            await runtime.stop()
        if metrics_server is not None:
            metrics_server.stop()
    log.info("node %d stopped", config.node_id)
