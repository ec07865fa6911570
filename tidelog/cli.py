"""The ``tidelog`` command.

User mistakes and unreachable clusters end in one line on stderr (what failed, why, what to do)
and a non-zero exit code, never a traceback: every command body runs under :func:`main`'s handler,
which turns ``TidelogError`` (and ``OSError``) into that line.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import click

from tidelog.errors import TidelogError

__all__ = ["cli", "main"]

EXIT_USER_ERROR = 2
EXIT_FAILURE = 1


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tidelog")
def cli() -> None:
    """Tidelog: a distributed, replicated event log (Kafka KRaft-style)."""


@cli.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="the node's TOML config file")
def server(config_path: str) -> None:
    """Run a node (controller, broker, or both) in the foreground until SIGTERM/SIGINT."""
    from tidelog.config import load_config

    config = load_config(config_path)
    from tidelog.node import run_node  # lazy: pulls in controller/broker code

    run_node(config)


@cli.group()
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
def format_cmd(config_path: str | None, data_dir: str | None, node_id: int | None,
               cluster_id: str, ignore_formatted: bool) -> None:
    """Format a node's data directory with a cluster id and node id (once, before first start)."""
    from tidelog.data_dir import format_data_dir

    if config_path:
        from tidelog.config import load_config

        cfg = load_config(config_path)
        data_dir, node_id = cfg.data_dir, cfg.node_id
    if data_dir is None or node_id is None:
        raise click.UsageError("give --config, or both --dir and --node-id")
    meta = format_data_dir(Path(data_dir), cluster_id=cluster_id, node_id=node_id,
                           ignore_formatted=ignore_formatted)
    click.echo(f"formatted {data_dir}: cluster {meta.cluster_id}, node {meta.node_id}")


def _add_subcommands() -> None:
    import tidelog.cli_info  # noqa: F401 - adds `cluster info` and `cluster health`
    from tidelog.cli_cluster import cluster
    from tidelog.cli_dev import dev
    from tidelog.cli_topic import topic

    cli.add_command(cluster)
    cli.add_command(topic)
    cli.add_command(dev)


_add_subcommands()


def new_cluster_id() -> str:
    """A fresh cluster id (a UUID's hex form, as Kafka prints a base64 one)."""
    return uuid.uuid4().hex


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``tidelog`` console script."""
    try:
        rc = cli.main(args=argv, prog_name="tidelog", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_FAILURE)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except TidelogError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_USER_ERROR if not e.retriable else EXIT_FAILURE)
    except OSError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_FAILURE)
    except KeyboardInterrupt:
        sys.exit(130)
    if isinstance(rc, int):
        sys.exit(rc)


if __name__ == "__main__":
    main()
