"""``tidelog storage …``: make a cluster id (``random-uuid``) and a cluster secret
(``random-secret``), and format a node's data directory (``format``) before its first start.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import click

__all__ = ["new_cluster_id", "storage"]


@click.group()
def storage() -> None:
    """Format and inspect node data directories."""


@storage.command("random-uuid")
def random_uuid() -> None:
    """Print a new cluster id."""
    click.echo(new_cluster_id())


@storage.command("random-secret")
@click.option("--out", "out_path", type=click.Path(dir_okay=False),
              help="write it to this file (mode 0600) instead of printing it")
def random_secret(out_path: str | None) -> None:
    """Make a new cluster secret (every node's cluster_secret_file holds the same one)."""
    from tidelog.cluster_secret import generate_secret, write_secret_file

    secret = generate_secret()
    if out_path:
        write_secret_file(out_path, secret)
    else:
        click.echo(secret)


@storage.command("format")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="take node id and data dir from this node config")
@click.option("--dir", "data_dir", type=click.Path(file_okay=False), help="data directory")
@click.option("--node-id", type=int, help="node id (with --dir)")
@click.option("--cluster-id", required=True, help="cluster id (tidelog storage random-uuid)")
@click.option("--ignore-formatted", is_flag=True,
              help="succeed if the directory is already formatted with the same ids")
@click.option("--add-scram", "add_scram", multiple=True, metavar="MECHANISM=[name=N,password=P]",
              help="a SCRAM user the new cluster starts with, e.g. "
                   "'SCRAM-SHA-256=[name=admin,password=...]' (Kafka's syntax; repeatable). "
                   "Give it to the controllers: the first active one writes the users into "
                   "the metadata log of a brand-new cluster. The password is salted here; "
                   "it lands in your shell history, so change it once the cluster runs")
def format_cmd(config_path: str | None, data_dir: str | None, node_id: int | None,
               cluster_id: str, ignore_formatted: bool, add_scram: tuple[str, ...]) -> None:
    """Format a node's data directory with a cluster id and node id (once, before first start)."""
    from tidelog.data_dir import format_data_dir
    from tidelog.errors import InvalidConfigError
    from tidelog.metadata.bootstrap import parse_add_scram, scram_records, write_bootstrap

    try:
        users = [parse_add_scram(text) for text in add_scram]
    except InvalidConfigError as e:
        raise click.UsageError(e.message) from None

    if config_path:
        from tidelog.config import load_config

        cfg = load_config(config_path)
        data_dir, node_id = cfg.data_dir, cfg.node_id
    if data_dir is None or node_id is None:
        raise click.UsageError("give --config, or both --dir and --node-id")
    meta = format_data_dir(Path(data_dir), cluster_id=cluster_id, node_id=node_id,
                           ignore_formatted=ignore_formatted)
    click.echo(f"formatted {data_dir}: cluster {meta.cluster_id}, node {meta.node_id}")
    if users:
        write_bootstrap(data_dir, scram_records(users))
        named = ", ".join(f"{u.name} ({u.mechanism})" for u in users)
        click.echo(f"bootstrap SCRAM users: {named}")


def new_cluster_id() -> str:
    """A fresh cluster id (a UUID's hex form, as Kafka prints a base64 one)."""
    return uuid.uuid4().hex
