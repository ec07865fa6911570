"""``tidelog security init``: a CA and certificates for a cluster's nodes and client users.

The files go into one directory: ``ca.crt`` (give it to every node and client), ``ca.key``
(keep it offline once the certificates are made), ``<name>.crt`` and ``<name>.key`` per node and
user (keys mode 0600). Run again with the same ``--out`` to issue more certificates from the
same CA (a renewal, a new broker, a new user): an existing CA is reused, never replaced.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import click

from tidelog.cli.common import CliError, OneLineGroup

__all__ = ["security"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@click.group(cls=OneLineGroup)
def security() -> None:
    """TLS certificates for a cluster."""


@security.command()
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="directory for ca.crt, ca.key and the certificates")
@click.option("--node", "nodes", multiple=True, metavar="NAME=HOST[,HOST…]",
              help="a node's certificate: its name (the common name: broker-<id> for a broker, "
                   "which the peer listeners check against the id it claims; controller-<id>) "
                   "and every address or DNS name peers and clients dial it at (repeatable)")
@click.option("--client", "clients", multiple=True, metavar="NAME",
              help="a client user's certificate, common name NAME (repeatable)")
@click.option("--days", default=397, show_default=True, help="validity of the certificates")
def init(out_dir: str, nodes: tuple[str, ...], clients: tuple[str, ...], days: int) -> None:
    """Make (or reuse) a CA in OUT and issue node and client certificates from it."""
    from tidelog.certs import Issued, issue, make_ca

    out = Path(out_dir)
    wanted: list[tuple[str, tuple[str, ...]]] = []
    for spec in nodes:
        name, _, hosts = spec.partition("=")
        if not _NAME.fullmatch(name) or not hosts:
            raise CliError(f"--node {spec!r}: give NAME=HOST[,HOST...], e.g. "
                           f"broker-101=10.0.0.21,broker-101.example.com")
        wanted.append((name, tuple(h.strip() for h in hosts.split(",") if h.strip())))
    for name in clients:
        if not _NAME.fullmatch(name):
            raise CliError(f"--client {name!r}: letters, digits, '.', '_' and '-' only")
        wanted.append((name, ()))
    if not wanted and (out / "ca.crt").exists():
        raise CliError(f"{out} has a CA already: name --node or --client certificates to issue")
    out.mkdir(parents=True, exist_ok=True)
    if (out / "ca.crt").exists():
        ca = Issued((out / "ca.key").read_bytes(), (out / "ca.crt").read_bytes())
        click.echo(f"reusing the CA in {out}")
    else:
        ca = make_ca()
        _write(out / "ca.key", ca.key_pem, private=True)
        _write(out / "ca.crt", ca.cert_pem)
        click.echo(f"made a CA: {out / 'ca.crt'} (keep {out / 'ca.key'} safe)")
    for name, node_hosts in wanted:
        cert = issue(ca, name, hosts=node_hosts, days=days)
        _write(out / f"{name}.key", cert.key_pem, private=True)
        _write(out / f"{name}.crt", cert.cert_pem)
        click.echo(f"issued {out / name}.crt"
                   + (f" for {', '.join(node_hosts)}" if node_hosts else ""))


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    """Write atomically (a node reloading certificates never reads half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    tmp.replace(path)
