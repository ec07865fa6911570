"""``tidelog server --config FILE``: run one node (controller, broker, or both) in the
foreground until SIGTERM/SIGINT.

The node runner is imported inside the command: it pulls in the controller and broker code,
which no other command needs (and tidelog/ may import only lazily: tests/unit/
test_import_contracts.py).
"""

from __future__ import annotations

import click

__all__ = ["server"]


@click.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="the node's TOML config file")
def server(config_path: str) -> None:
    """Run a node (controller, broker, or both) in the foreground until SIGTERM/SIGINT."""
    from tidelog.config import load_config

    config = load_config(config_path)
    from tidelog.node import run_node  # lazy: pulls in controller/broker code

    run_node(config)
