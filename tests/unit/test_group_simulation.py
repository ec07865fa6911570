"""A seeded simulation of the group coordinator shard: members join, leave (cleanly, statically
or by going silent), heartbeat with owned partitions that lag behind what they were told (a
member revokes only some heartbeats later), subscriptions (by name or regex) change, topics grow
and a topic the regexes match is created and deleted. After every
step: no partition is owned by two members at once, a member's epoch never goes back; every
20 steps and at the end, replay from scratch gives the same state. A failing seed replays with
TIDELOG_GROUP_SIM_SEED=<n>."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

import pytest
from group_testkit import check_invariants, scenario_assignors, topic_metadata

from tidelog.broker.group.assignment import TopicMetadata
from tidelog.broker.group.coordinator import GroupCoordinatorConfig, GroupCoordinatorShard
from tidelog.broker.group.records import GroupRecord
from tidelog.v1 import broker_pb2 as pb

SEEDS = ([int(os.environ["TIDELOG_GROUP_SIM_SEED"])] if "TIDELOG_GROUP_SIM_SEED" in os.environ
         else list(range(12)))
STEPS = 400


@dataclass
class Client:
    member_id: str
    epoch: int
    owned: list[pb.TopicPartitions] = field(default_factory=list)
    told: list[pb.TopicPartitions] = field(default_factory=list)


def _step(rng: random.Random, shard: GroupCoordinatorShard, clients: dict[str, Client],
          topics: dict[str, TopicMetadata], now_ms: int) -> list[GroupRecord]:
    roll = rng.random()
    if roll < 0.15 or not clients:
        request = pb.ConsumerGroupHeartbeatRequest(
            group_id="g", member_epoch=0, rebalance_timeout_ms=10_000,
            instance_id=rng.choice(["", "", "i1", "i2"]))
        if rng.random() < 0.3:
            request.subscribed_topic_regex = rng.choice(["t[0-9]+", "t[13]", ".*"])
        else:
            request.subscribed_topic_names.extend(
                rng.sample(sorted(topics), rng.randint(1, len(topics))))
        records, response = shard.consumer_group_heartbeat(request, now_ms=now_ms, topics=topics)
        if response.error_code == 0:
            clients[response.member_id] = Client(response.member_id, response.member_epoch,
                                                 [], list(response.assignment))
        return records
    if roll < 0.2:
        if rng.random() < 0.5:
            topics["t2"] = topic_metadata("t2", topics["t2"].partitions + 1)
        elif topics.pop("t3", None) is None:  # a topic regexes match comes and goes
            topics["t3"] = topic_metadata("t3", 3)
        return []
    client = clients[rng.choice(sorted(clients))]
    if roll < 0.25:
        del clients[client.member_id]
        epoch = -2 if rng.random() < 0.3 else -1
        request = pb.ConsumerGroupHeartbeatRequest(group_id="g", member_id=client.member_id,
                                                   member_epoch=epoch)
        if epoch == -2:
            member = shard.state.groups["g"].members.get(client.member_id)
            request.instance_id = member.instance_id if member else ""
        return shard.consumer_group_heartbeat(request, now_ms=now_ms, topics=topics)[0]
    if roll < 0.3:
        del clients[client.member_id]  # goes silent: the session timeout fences it
        return []
    if rng.random() < 0.5:
        client.owned = client.told  # it has revoked/taken what it was told
    request = pb.ConsumerGroupHeartbeatRequest(
        group_id="g", member_id=client.member_id, member_epoch=client.epoch,
        owned_partitions=client.owned)
    records, response = shard.consumer_group_heartbeat(request, now_ms=now_ms, topics=topics)
    if response.error_code:
        del clients[client.member_id]  # fenced: it would rejoin as a new member
    else:
        assert response.member_epoch >= client.epoch
        client.epoch = response.member_epoch
        if response.assignment_changed:
            client.told = list(response.assignment)
    return records


@pytest.mark.parametrize("seed", SEEDS)
def test_simulation(seed: int) -> None:
    rng = random.Random(seed)
    shard = GroupCoordinatorShard(GroupCoordinatorConfig(default_assignor="simple"),
                                  rng=random.Random(seed), assignors=scenario_assignors())
    topics = {"t1": topic_metadata("t1", 6), "t2": topic_metadata("t2", 2)}
    clients: dict[str, Client] = {}
    log: list[GroupRecord] = []
    epochs: dict[str, int] = {}
    now_ms = 0
    for step in range(STEPS):
        now_ms += rng.randint(0, 3000)
        log.extend(_step(rng, shard, clients, topics, now_ms))
        if rng.random() < 0.1:
            log.extend(shard.on_timer(now_ms))
        # Replay from scratch is quadratic over the run: every 20 steps and at the end.
        check_invariants(shard, log, replay=step % 20 == 0 or step == STEPS - 1)
        group = shard.state.groups.get("g")
        for member in group.members.values() if group else ():
            if member.member_epoch >= 0:
                assert member.member_epoch >= epochs.get(member.member_id, 0), seed
                epochs[member.member_id] = member.member_epoch
