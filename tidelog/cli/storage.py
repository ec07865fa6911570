"""``tidelog storage …``: make a cluster id (``random-uuid``), a cluster secret
(``random-secret``, for the controllers) and a broker's own credential from it
(``broker-credential``), format a node's data directory (``format``) before its first start, and
list what a stopped broker's logs hold (``dump-log``, Kafka's kafka-dump-log).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from pathlib import Path
from typing import Any

import click

from tidelog.cli.common import EXIT_FAILURE, CliError

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
    """Make a new cluster secret (the controllers' cluster_secret_file; brokers get their own
    credential from it: tidelog storage broker-credential)."""
    from tidelog.cluster_secret import generate_secret, write_secret_file

    secret = generate_secret()
    if out_path:
        write_secret_file(out_path, secret)
    else:
        click.echo(secret)


@storage.command("broker-credential")
@click.option("--secret-file", required=True, type=click.Path(dir_okay=False),
              help="the cluster secret (tidelog storage random-secret), as the controllers have it")
@click.option("--broker-id", required=True, type=click.IntRange(min=0),
              help="the broker's node id")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="the credential file to write (mode 0600): the broker's broker_credential_file")
def broker_credential_cmd(secret_file: str, broker_id: int, out_path: str) -> None:
    """Make a broker's own credential from the cluster secret. The broker holds only this file,
    never the secret: it cannot be turned into another broker's credential or the Raft key."""
    from tidelog.cluster_secret import (
        broker_credential,
        read_secret_file,
        write_broker_credential_file,
    )
    from tidelog.errors import InvalidConfigError

    try:
        secret = read_secret_file(secret_file)
    except InvalidConfigError as e:
        raise click.UsageError(e.message.replace("cluster_secret_file", "--secret-file", 1)) \
            from None
    write_broker_credential_file(out_path, broker_credential(secret, broker_id))
    click.echo(f"wrote broker {broker_id}'s credential to {out_path} (mode 0600): copy it to "
               f"that broker and set broker_credential_file = \"{out_path}\"")


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
    from tidelog.data_dir import format_data_dir, write_bootstrap
    from tidelog.errors import InvalidConfigError
    from tidelog.metadata.bootstrap import parse_add_scram, scram_records

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


#: How long dump-log retries a RocksDB LOCK still held (a just-killed broker's last threads
#: may hold it for a few milliseconds after the process is reaped).
DUMP_LOCK_WAIT_S = 5.0


def batch_digest(data: bytes) -> str:
    """dump-log's digest of one stored batch: BLAKE2b-128 of its bytes, header included (so a
    batch written under another leader epoch or producer state differs)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@storage.command("dump-log")
@click.option("--dir", "data_dir", required=True, type=click.Path(file_okay=False, exists=True),
              help="a broker's data directory (the broker must be stopped)")
@click.option("--node-id", type=int, required=True, help="the broker's node id")
@click.option("--topic-id", "topic_ids", multiple=True, metavar="HEX",
              help="only this topic (its id, as `tidelog topic describe` shows it; repeatable)")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: one object per batch and line")
def dump_log_cmd(data_dir: str, node_id: int, topic_ids: tuple[str, ...], fmt: str) -> None:
    """List every batch a stopped broker's logs hold: partition, base offset, size, digest.

    Per partition one line (its log start and end offsets), then one per batch (base offset,
    bytes, BLAKE2b-128 of the stored bytes); with --format json, objects of ``kind``
    "partition" and "batch".

    Opens the data directory as the broker's own recovery would (a broker killed -9 is fine:
    RocksDB's write-ahead log keeps every write); a running broker holds its lock and is
    refused. What replicas hold can so be compared across brokers (the chaos runs' divergence
    check does)."""
    try:
        wanted = {uuid.UUID(hex=t).bytes for t in topic_ids}
    except ValueError:
        raise CliError(f"--topic-id must be a topic id (32 hex digits), got "
                       f"{', '.join(topic_ids)}") from None
    with _open_stopped(Path(data_dir), node_id) as store:
        for key in sorted(store.partitions(), key=lambda k: (k.topic_id, k.partition)):
            if wanted and key.topic_id not in wanted:
                continue
            plog = store.log(key.topic_id, key.partition)
            topic_id = key.topic_id.hex()
            start, end = plog.log_start_offset, plog.log_end_offset
            click.echo(json.dumps({"kind": "partition", "topic_id": topic_id,
                                   "partition": key.partition, "log_start_offset": start,
                                   "log_end_offset": end}) if fmt == "json" else
                       f"partition {topic_id} {key.partition}: log start {start}, end {end}")
            for base, data in plog.scan_batches(start, end):
                digest = batch_digest(data)
                click.echo(json.dumps({"kind": "batch", "topic_id": topic_id,
                                       "partition": key.partition, "base_offset": base,
                                       "bytes": len(data), "digest": digest})
                           if fmt == "json" else
                           f"  batch at {base}: {len(data)} bytes, digest {digest}")


def _open_stopped(data_dir: Path, node_id: int) -> Any:
    """The broker's Storage, opened (imported here: the CLI imports broker/ only inside
    commands, so its type is not named)."""
    from tidelog.broker.storage import Storage
    from tidelog.errors import KafkaStorageErrorError, TidelogError

    deadline = time.monotonic() + DUMP_LOCK_WAIT_S
    while True:  # bounded: retries only a held LOCK, until the deadline
        try:
            return Storage.open(data_dir, cluster_id=None, node_id=node_id)
        except KafkaStorageErrorError as e:
            if "lock" not in str(e).lower():
                raise CliError(f"cannot open {data_dir}: {e}", EXIT_FAILURE) from None
            if time.monotonic() > deadline:
                raise CliError(f"{data_dir} is in use (is its broker still running?): {e}",
                               EXIT_FAILURE) from None
            time.sleep(0.05)
        except TidelogError as e:
            raise CliError(f"cannot open {data_dir}: {e}") from None
