"""``tidelog dev``: one combined controller + broker node in the foreground, for trying things.

The data dir (default ``.tidelog/dev``) is formatted on first use with a new cluster id and a
config is written beside it (``node.toml``), so later runs reuse the same data. Ctrl-C or SIGTERM
stops the node cleanly. Topics need ``-r 1`` (there is one broker).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import click

from tidelog.cluster_secret import generate_secret, write_secret_file
from tidelog.config import load_config
from tidelog.data_dir import check_data_dir, format_data_dir

DEFAULT_DIR = ".tidelog/dev"
NODE_ID = 1


def render(data_dir: Path, cluster_id: str, *, port: int, controller_port: int, raft_port: int,
           inter_broker_port: int, metrics_port: int, secret_file: Path) -> str:
    return "\n".join([
        f"node_id = {NODE_ID}", f'data_dir = "{data_dir}"', 'roles = ["controller", "broker"]',
        f'cluster_id = "{cluster_id}"', f'cluster_secret_file = "{secret_file}"', "",
        "[controller]", 'listen_host = "127.0.0.1"', 'raft_listen_host = "127.0.0.1"', "",
        "[broker]", 'host = "127.0.0.1"', 'listen_host = "127.0.0.1"', f"port = {port}",
        'inter_broker_listen_host = "127.0.0.1"', f"inter_broker_port = {inter_broker_port}", "",
        "[metrics]", 'host = "127.0.0.1"', f"port = {metrics_port}", "",
        "[[controller.voters]]", f"id = {NODE_ID}", 'host = "127.0.0.1"',
        f"port = {controller_port}", f"raft_port = {raft_port}", ""])


@click.command()
@click.option("--dir", "base_dir", default=DEFAULT_DIR, show_default=True,
              type=click.Path(file_okay=False), help="where the node keeps its data and config")
@click.option("--port", default=9092, show_default=True, help="broker port (clients connect here)")
@click.option("--controller-port", default=9093, show_default=True)
@click.option("--raft-port", default=9094, show_default=True)
@click.option("--inter-broker-port", default=9095, show_default=True,
              help="replication listener (other brokers only)")
@click.option("--metrics-port", default=9644, show_default=True, help="/metrics, /readyz")
def dev(base_dir: str, port: int, controller_port: int, raft_port: int, inter_broker_port: int,
        metrics_port: int) -> None:
    """Run one combined controller + broker node in the foreground (Ctrl-C stops it)."""
    base = Path(base_dir).resolve()
    data_dir = base / "data"
    config_path = base / "node.toml"
    if (data_dir / "meta.properties").exists():
        cluster_id = check_data_dir(data_dir, node_id=NODE_ID).cluster_id
    else:
        cluster_id = uuid.uuid4().hex
        format_data_dir(data_dir, cluster_id=cluster_id, node_id=NODE_ID)
    base.mkdir(parents=True, exist_ok=True)
    secret_file = base / "cluster.secret"
    if not secret_file.exists():  # kept across runs, like the data
        write_secret_file(secret_file, generate_secret())
    config_path.write_text(render(data_dir, cluster_id, port=port,
                                  controller_port=controller_port, raft_port=raft_port,
                                  inter_broker_port=inter_broker_port,
                                  metrics_port=metrics_port, secret_file=secret_file))
    click.echo(f"tidelog dev: cluster {cluster_id}, data in {data_dir}\n"
               f"  bootstrap: 127.0.0.1:{port}   (export TIDELOG_BROKERS=127.0.0.1:{port})\n"
               f"  metrics:   http://127.0.0.1:{metrics_port}/metrics\n"
               f"  topics need -r 1 (one broker); Ctrl-C stops the node", err=True)
    from tidelog.node import run_node

    run_node(load_config(config_path))
