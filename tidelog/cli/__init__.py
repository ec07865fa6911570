"""The ``tidelog`` command: the root group, :func:`main`, and the command groups it holds.

One module per command group, each importing only :mod:`tidelog.cli.common` (errors and exit
codes, the shared options, the Admin context, tables and JSON) and never another group's module:

- ``server.py``: ``tidelog server`` (one node in the foreground);
- ``security.py``: ``tidelog security init`` (a CA and node and client certificates);
- ``storage.py``: ``tidelog storage random-uuid|random-secret|format``;
- ``dev.py``: ``tidelog dev`` (one combined node for trying things);
- ``cluster.py``: ``tidelog cluster up|status|stop-node|start-node|down|quorum`` (local
  multi-process clusters), plus ``info`` and ``health`` from ``info.py`` (any cluster, through
  its brokers);
- ``topic.py``: the ``tidelog topic`` group; its commands are in ``topic_admin.py`` (create,
  list, describe, delete, add-partitions, alter-config, describe-config) and ``topic_data.py``
  (produce, consume);
- ``group.py``: ``tidelog group list|describe|delete|reset-offsets|delete-offsets`` (consumer
  groups);
- ``acl.py``: ``tidelog acl create|list|delete`` (ACL bindings, kafka-acls' vocabulary);
- ``user.py``: ``tidelog user create|delete|list`` (SCRAM users for SASL_SSL clients; passwords
  are salted on the client and never taken as arguments);
- ``deploy.py``: ``tidelog deploy render|container-config`` (an inventory to every node's files;
  a container's config from its environment);
- ``chaos.py``: ``tidelog chaos check`` (re-checks a chaos run's history; imports ``chaos/``
  only inside its function, as the import contracts allow).

User mistakes and unreachable clusters end in one line on stderr (what failed, why, what to do)
and a non-zero exit code, never a traceback: every command body runs under :func:`main`'s handler
(``common.run_main``), which turns ``TidelogError`` (and ``OSError``) into that line.
``python -m tidelog.cli`` runs the same program (``__main__.py``).
"""

from __future__ import annotations

import click

from tidelog.cli.acl import acl
from tidelog.cli.chaos import chaos
from tidelog.cli.cluster import cluster
from tidelog.cli.common import run_main
from tidelog.cli.deploy import deploy
from tidelog.cli.dev import dev
from tidelog.cli.group import group
from tidelog.cli.security import security
from tidelog.cli.server import server
from tidelog.cli.storage import storage
from tidelog.cli.topic import topic
from tidelog.cli.user import user

__all__ = ["cli", "main"]

@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tidelog")
def cli() -> None:
    """Tidelog: a distributed, replicated event log (Kafka KRaft-style)."""


for _group in (server, storage, security, cluster, topic, group, acl, user, dev, deploy, chaos):
    cli.add_command(_group)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``tidelog`` console script."""
    run_main(cli, argv)
