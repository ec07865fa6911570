"""The controller's ``tidelog_controller_leader_elections_total{kind}``.

What it checks:

* which committed changes are elections (counted by replay, MetadataDelta.leader_elections,
  when the active controller proposes a batch; read through ``ReplayOutcome.elections``): a
  controlled shutdown moving a leader to an ISR member is clean; a fenced last ISR member
  replaced on a topic with unclean.leader.election.enable is unclean; going offline, ISR
  changes and new partitions are not elections; an offline partition whose ISR member is
  unfenced is a clean one;
* the active controller counts them when their batch commits (controller/runtime.py), on a real
  one-voter quorum.

How: the pure ControllerLogic through tests/unit/controller_testkit.py, then a ControllerRuntime
with its own registry, written to as its gRPC service does.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from controller_testkit import (
    RuntimeDriver,
    TestCluster,
    create_topic,
    one_voter_runtime,
    register_request,
)
from prometheus_client import CollectorRegistry

from tidelog.controller.managers.partition_change import LeaderElections
from tidelog.metadata.image import NO_LEADER
from tidelog.v1 import controller_pb2 as cpb
from tidelog.v1.common_pb2 import ErrorCode

WAIT_S = 10.0


def committed(c: TestCluster) -> LeaderElections:
    """Commit what is in flight; the elections of all of it."""
    outcomes = c.commit()
    assert outcomes and all(o.own and o.ignored is None for o in outcomes), outcomes
    return LeaderElections(sum(o.elections.clean for o in outcomes),
                           sum(o.elections.unclean for o in outcomes))


def leader(c: TestCluster, topic: str) -> int:
    registration = c.logic.committed_image.topics.partition(c.topic_id(topic), 0)
    assert registration is not None
    return registration.leader


def test_which_committed_leader_changes_are_elections() -> None:
    c = TestCluster()
    c.activate()
    c.add_brokers([1, 2, 3])
    c.autocommit = False
    c.create_topics(create_topic("t", assignments=[[1, 2]]),
                    create_topic("u", assignments=[[2, 3]],
                                 configs={"unclean.leader.election.enable": "true"}))
    assert committed(c) == LeaderElections(0, 0), "a new partition's first leader is not one"

    c.heartbeat(1, want_shutdown=True)  # t: leader 1 -> 2, an ISR member
    assert committed(c) == LeaderElections(1, 0)
    assert leader(c, "t") == 2

    c.alter_partition(2, "u", 0, [2])  # u: ISR [2, 3] -> [2], same leader
    assert committed(c) == LeaderElections(0, 0), "an ISR change is not an election"

    # Broker 2 fenced: t has no eligible ISR member left and goes offline (not an election);
    # u's last ISR member goes, and unclean election makes 3 the leader.
    c.heartbeat(2, want_fence=True)
    assert committed(c) == LeaderElections(0, 1)
    assert (leader(c, "t"), leader(c, "u")) == (NO_LEADER, 3)

    c.heartbeat(2)  # unfenced: t's last ISR member leads it again
    assert committed(c) == LeaderElections(1, 0)
    assert leader(c, "t") == 2


def test_the_active_controller_counts_committed_elections(tmp_path: Path) -> None:
    asyncio.run(_count_on_a_one_voter_quorum(tmp_path))


async def _count_on_a_one_voter_quorum(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    runtime = one_voter_runtime(tmp_path, registry=registry)

    def elections(kind: str) -> float | None:
        return registry.get_sample_value("tidelog_controller_leader_elections_total",
                                         {"kind": kind})

    driver = RuntimeDriver(runtime)
    write, heartbeat = driver.write, driver.heartbeat

    await runtime.start()
    try:
        await driver.wait_active(WAIT_S)
        assert (elections("clean"), elections("unclean")) == (0, 0)
        for broker_id in (1, 2):
            await write("register_broker", register_request(broker_id, cluster_id="c"))
            await heartbeat(broker_id)
        created = await write("create_topics", cpb.CreateTopicsRequest(
            topics=[create_topic("t", assignments=[[1, 2]])]))
        assert created.topics[0].error_code == ErrorCode.NONE, created
        await heartbeat(1, want_shutdown=True)  # leadership moves to broker 2
        assert (elections("clean"), elections("unclean")) == (1, 0)
    finally:
        await runtime.stop()
