"""``tidelog cluster …``: local multi-process clusters (up, status, stop-node, start-node, down)
and the controller quorum's status; the group also holds ``info`` and ``health``
(tidelog/cli/info.py), which ask any cluster through its brokers.

Local clusters live in a directory (``--dir``, default ``$TIDELOG_CLUSTER_DIR`` or
``.tidelog/cluster``) holding each node's config, data dir and log, and ``cluster.json`` with the
pids, so each command is a separate process that finds the cluster there.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import click

from tidelog.cli.common import client_options, table
from tidelog.cli.info import health, info
from tidelog.local_cluster import LocalCluster

DEFAULT_DIR = ".tidelog/cluster"
#: An election takes well under a second; a quorum without a leader for longer is down.
QUORUM_WAIT_S = 5.0
SIGNALS = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL, "STOP": signal.SIGSTOP,
           "CONT": signal.SIGCONT}


def _dir_option(f: Any) -> Any:
    return click.option(
        "--dir", "cluster_dir", type=click.Path(file_okay=False),
        default=lambda: os.environ.get("TIDELOG_CLUSTER_DIR", DEFAULT_DIR), show_default=True,
        help="the local cluster's directory")(f)


def _load(cluster_dir: str) -> LocalCluster:
    try:
        return LocalCluster.load(cluster_dir)
    except FileNotFoundError:
        raise click.ClickException(
            f"no local cluster in {cluster_dir}: start one with `tidelog cluster up --dir "
            f"{cluster_dir}`") from None


@click.group()
def cluster() -> None:
    """Local clusters and cluster status."""


cluster.add_command(info)
cluster.add_command(health)


@cluster.command()
@click.option("--controllers", default=3, show_default=True, help="controller processes")
@click.option("--brokers", default=3, show_default=True, help="broker processes")
@_dir_option
@click.option("--timeout", "timeout_s", default=60.0, show_default=True,
              help="seconds to wait until every node is ready")
@click.option("--tls", is_flag=True, help="TLS on every listener: a CA and certificates in "
                                          "DIR/pki, a CLI profile in DIR/profile.toml")
def up(controllers: int, brokers: int, cluster_dir: str, timeout_s: float, tls: bool) -> None:
    """Format, configure and start a local cluster; wait until it is healthy."""
    path = Path(cluster_dir)
    if (path / "cluster.json").exists():
        c = LocalCluster.load(path)
        click.echo(f"starting the existing cluster in {path} ({len(c.nodes)} nodes)")
    else:
        c = LocalCluster.create(path, controllers=controllers, brokers=brokers, tls=tls)
        click.echo(f"created cluster {c.cluster_id} in {path}" + (" (TLS)" if tls else ""))
    c.start_all()
    try:
        c.wait_ready(timeout_s=timeout_s)
    except TimeoutError as e:
        raise click.ClickException(f"{e}\n(the cluster is still running: `tidelog cluster down "
                                   f"--dir {path}` stops it)") from None
    _print_status(c)
    if c.brokers() and "tls" in c.overrides:
        click.echo(f"\nbootstrap: {c.bootstrap} over TLS   (export TIDELOG_PROFILE="
                   f"{(path / 'profile.toml').resolve()})")
    elif c.brokers():
        click.echo(f"\nbootstrap: {c.bootstrap}   (export TIDELOG_BROKERS={c.bootstrap})")
    click.echo(f"stop it with: tidelog cluster down --dir {path}")


@cluster.command()
@_dir_option
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
def status(cluster_dir: str, fmt: str) -> None:
    """Each node of the local cluster: pid, running, ready, ports."""
    c = _load(cluster_dir)
    if fmt == "json":
        click.echo(json.dumps(_status_rows(c), indent=2))
    else:
        _print_status(c)


@cluster.command("stop-node")
@click.argument("name")
@click.option("--signal", "sig", type=click.Choice(sorted(SIGNALS)), default="TERM",
              show_default=True, help="TERM: clean stop; KILL: kill -9; STOP: pause (CONT resumes)")
@_dir_option
def stop_node(name: str, sig: str, cluster_dir: str) -> None:
    """Stop, kill or pause one node."""
    c = _load(cluster_dir)
    _check_name(c, name)
    if sig == "TERM":
        c.stop(name)
    elif sig == "KILL":
        c.kill(name)
    else:
        try:
            c.signal(name, SIGNALS[sig])
        except ProcessLookupError:
            raise click.ClickException(f"{name} is not running") from None
    click.echo(f"{name}: sent {sig}")


@cluster.command("start-node")
@click.argument("name")
@_dir_option
def start_node(name: str, cluster_dir: str) -> None:
    """Start (or resume, if paused) one node and wait until it is ready."""
    c = _load(cluster_dir)
    _check_name(c, name)
    if c.is_running(name):
        c.signal(name, signal.SIGCONT)
    else:
        c.start(name)
    c.wait_ready([name])
    click.echo(f"{name}: ready (pid {c.nodes[name].pid})")


@cluster.command()
@_dir_option
@click.option("--purge", is_flag=True, help="also delete the cluster's directory and data")
def down(cluster_dir: str, purge: bool) -> None:
    """Stop every node (brokers first), optionally deleting all data."""
    c = _load(cluster_dir)
    c.down(purge=purge)
    click.echo(f"cluster in {cluster_dir} stopped" + (" and deleted" if purge else ""))


@cluster.command()
@click.option("--controller", "controllers", multiple=True,
              help="a controller host:port (repeatable); default: the local cluster's")
@_dir_option
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
@click.option("--wait", "wait_s", default=QUORUM_WAIT_S, show_default=True,
              help="seconds to wait for an election in progress to finish")
def quorum(controllers: tuple[str, ...], cluster_dir: str, fmt: str, wait_s: float) -> None:
    """The controller quorum's Raft status: leader, epoch, and each voter's progress."""
    from tidelog.v1 import controller_pb2

    addresses = list(controllers) or _load(cluster_dir).controller_addresses
    response = _describe_quorum(addresses, wait_s=wait_s)
    rows = [{"node": v.node_id, "leader": v.is_leader, "connected": v.connected,
             "commit_index": v.commit_index, "applied_index": v.applied_index, "lag": v.lag,
             "raft": v.raft_address} for v in response.voters]
    if fmt == "json":
        click.echo(json.dumps({"leader_id": response.leader_id,
                               "leader_epoch": response.leader_epoch,
                               "high_watermark": response.high_watermark,
                               "metadata_offset": response.metadata_offset,
                               "responder": response.responder_id, "voters": rows}, indent=2))
        return
    assert isinstance(response, controller_pb2.DescribeQuorumResponse)
    click.echo(f"leader: {response.leader_id}  leader epoch: {response.leader_epoch}  "
               f"commit index: {response.high_watermark}  metadata offset: "
               f"{response.metadata_offset}  (answered by {response.responder_id})")
    table(rows)


def _describe_quorum(addresses: list[str], *, wait_s: float = QUORUM_WAIT_S) -> Any:
    """The leader's DescribeQuorum; waits up to ``wait_s`` for an election to finish."""
    deadline = time.monotonic() + wait_s
    while True:
        response, errors = _ask_quorum(addresses)
        if response is not None:
            return response
        if time.monotonic() >= deadline:
            raise click.ClickException(
                "no controller answered with a leader (" + "; ".join(errors)
                + f") within {wait_s:.0f}s; is the cluster running?")
        time.sleep(0.2)


def _ask_quorum(addresses: list[str]) -> tuple[Any, list[str]]:
    import grpc

    from tidelog.v1 import controller_pb2, controller_pb2_grpc

    errors: list[str] = []
    channels = _controller_channels()
    for address in addresses:
        try:
            with channels.blocking(address) as channel:
                stub = controller_pb2_grpc.ControllerServiceStub(channel)
                r = stub.DescribeQuorum(controller_pb2.DescribeQuorumRequest(), timeout=2)
            if r.leader_id >= 0:
                return _from_leader(r) or r, errors
            errors.append(f"{address}: no leader known")
        except grpc.RpcError as e:
            errors.append(f"{address}: {e.code().name}")
    return None, errors


def _controller_channels() -> Any:
    """Plaintext, or TLS with the profile's CA and certificate: a TLS controller listener
    wants a certificate of the cluster's CA (docs/security.md). A profile's SCRAM user is left
    out: controllers take no SCRAM users."""
    from tidelog.tls import ClientSecurity

    return ClientSecurity(**client_options()).without_sasl().channel_factory()


def _from_leader(r: Any) -> Any:
    """The leader's own view (it alone knows every voter's progress), when it answers."""
    import grpc

    from tidelog.v1 import controller_pb2, controller_pb2_grpc

    if r.responder_id == r.leader_id:
        return r
    leader = next((v for v in r.voters if v.node_id == r.leader_id), None)
    if leader is None:
        return None
    try:
        address = f"{leader.endpoint.host}:{leader.endpoint.port}"
        with _controller_channels().blocking(address) as ch:
            return controller_pb2_grpc.ControllerServiceStub(ch).DescribeQuorum(
                controller_pb2.DescribeQuorumRequest(), timeout=3)
    except grpc.RpcError:
        return None


def _check_name(c: LocalCluster, name: str) -> None:
    if name not in c.nodes:
        raise click.ClickException(f"no node {name!r}; nodes: {', '.join(c.nodes)}")


def _status_rows(c: LocalCluster) -> list[dict[str, Any]]:
    rows = []
    for spec in c.nodes.values():
        running = c.is_running(spec.name)
        ready = running and c.readiness(spec.name) is None
        ports = []
        if spec.is_controller:
            ports.append(f"controller={spec.controller_port} raft={spec.raft_port}")
        if spec.is_broker:
            ports.append(f"broker={spec.broker_port} inter-broker={spec.inter_broker_port}")
        rows.append({"name": spec.name, "node_id": spec.node_id, "pid": spec.pid if running
                     else None, "running": running, "ready": ready, "ports": " ".join(ports),
                     "metrics": spec.metrics_port})
    return rows


def _print_status(c: LocalCluster) -> None:
    table(_status_rows(c))
