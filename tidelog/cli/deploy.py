"""``tidelog deploy …``: from an inventory to every node's files (``render``), and a container's
node config from its environment (``container-config``, the image's entrypoint runs it).

docs/operations.md walks through a deployment; tidelog/deploy/ holds the logic (the inventory
checks and the renderer are pure, tidelog/deploy/writer.py does the I/O).
"""

from __future__ import annotations

from pathlib import Path

import click

from tidelog.cli.common import EXIT_USER_ERROR, CliError, OneLineGroup

__all__ = ["deploy"]


@click.group(cls=OneLineGroup)
def deploy() -> None:
    """Render a multi-host deployment from an inventory; configure containers."""


@deploy.command()
@click.option("--inventory", "inventory_path", required=True,
              type=click.Path(dir_okay=False), help="the cluster's TOML inventory")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="directory to write into (re-rendering into it keeps the cluster id)")
@click.option("--rules-dir", type=click.Path(file_okay=False, exists=True),
              help="Prometheus rule files to ship (default: deploy/prometheus/rules of this "
                   "checkout)")
@click.option("--scrape-interval", default="15s", show_default=True,
              help="the rendered Prometheus config's scrape and evaluation interval")
def render(inventory_path: str, out_dir: str, rules_dir: str | None,
           scrape_interval: str) -> None:
    """Write each node's node.toml and systemd unit, per-host READMEs and a scrape config."""
    from tidelog.deploy.inventory import InventoryError
    from tidelog.deploy.writer import default_rules_dir, render_to

    try:
        done = render_to(inventory_path, out_dir,
                         rules_dir=Path(rules_dir) if rules_dir else default_rules_dir(),
                         scrape_interval=scrape_interval)
    except InventoryError as e:
        for line in e.problems[:-1]:
            click.echo(f"error: {line}", err=True)
        raise CliError(e.problems[-1], EXIT_USER_ERROR) from None
    inv = done.inventory
    click.echo(f"rendered cluster {done.cluster_id}: {len(inv.controllers)} controllers, "
               f"{len(inv.brokers)} brokers on {len(inv.hosts)} hosts into {out_dir}")
    if done.rules_dir is None:
        click.echo("note: no rule files found (pass --rules-dir deploy/prometheus/rules)")
    click.echo(f"next: {Path(out_dir) / 'README.md'} says what to run on each host")


@deploy.command("container-config")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="where to write the node config")
def container_config(out_path: str) -> None:
    """Write this container's node.toml from its TIDELOG_* environment (docs/operations.md)."""
    import os
    import socket

    from tidelog.deploy.container import node_config_from_env

    text = node_config_from_env(os.environ, socket.gethostname())
    Path(out_path).write_text(text)
    click.echo(f"wrote {out_path}")
