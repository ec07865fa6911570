"""``tidelog topic …``: the group; its commands live in tidelog/cli/topic_admin.py (create, list,
describe, delete, add-partitions, alter-config, describe-config) and tidelog/cli/topic_data.py
(produce, consume).

Every command talks to the brokers named by ``--brokers`` (default ``$TIDELOG_BROKERS``, else
``127.0.0.1:9092``) through the client library. The group is a ``OneLineGroup``: a usage mistake
in any of its commands is one error line with exit code 2, like every other failure.
"""

from __future__ import annotations

import click

from tidelog.cli.common import OneLineGroup
from tidelog.cli.topic_admin import (
    add_partitions,
    alter_config,
    create,
    delete,
    describe,
    describe_config,
    list_cmd,
)
from tidelog.cli.topic_data import consume, produce

__all__ = ["topic"]


@click.group(cls=OneLineGroup)
def topic() -> None:
    """Create, inspect, change and delete topics; produce and consume records."""


for _command in (create, list_cmd, describe, delete, add_partitions, alter_config,
                 describe_config, produce, consume):
    topic.add_command(_command)
