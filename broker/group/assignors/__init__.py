"""The server-side assignors (KIP-848) and their registry.

``ASSIGNORS`` maps the name a member asks for in ConsumerGroupHeartbeatRequest.server_assignor to
the assignor; ``DEFAULT_ASSIGNOR`` is used when it asks for none (Kafka's
``group.consumer.assignors`` default: uniform first, then range). A name not in the registry is
the coordinator's UNSUPPORTED_ASSIGNOR.

- ``uniform`` (:mod:`.uniform`): balanced, then sticky; Kafka's UniformAssignor.
- ``range`` (:mod:`.range`): contiguous ranges per topic, co-partitioned; Kafka's RangeAssignor.

Both implement :class:`broker.group.assignment.Assignor`: pure (no I/O, no clock, no randomness)
and deterministic, so every coordinator replaying the same records computes the same target.
What both do with bad input (unknown topics ignored, topics without partitions, zero members ->
``{}``) is in :mod:`.common`.
"""

from __future__ import annotations

from tidelog.broker.group.assignment import Assignor
from tidelog.broker.group.assignors.range import RangeAssignor
from tidelog.broker.group.assignors.uniform import UniformAssignor

__all__ = ["ASSIGNORS", "DEFAULT_ASSIGNOR", "RangeAssignor", "UniformAssignor"]

ASSIGNORS: dict[str, Assignor] = {
    UniformAssignor.name: UniformAssignor(),
    RangeAssignor.name: RangeAssignor(),
}

DEFAULT_ASSIGNOR = UniformAssignor.name
