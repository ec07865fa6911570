"""A member's subscriptions match only the topics its principal may describe (issue 25; Kafka 4
resolves regexes so): the pure shard, with a topics view that knows an ACL.

Two members of one group: alice may describe everything, mallory only ``public``. Both subscribe
with the regex ``.*``; mallory's target assignment never holds ``secret``, and neither does any
heartbeat answer she gets, while alice is assigned both. Her principal is in her member record,
so a coordinator that replays the group filters alike, and a change of the ACL (a new view) lets
the next heartbeat assign her what it now allows.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping

from group_testkit import topic_metadata

from tidelog.broker.group.assignment import TopicMetadata
from tidelog.broker.group.coordinator import GroupCoordinatorConfig, GroupCoordinatorShard
from tidelog.broker.group.heartbeat_checks import ClientIdentity
from tidelog.broker.group.topic_regex import RegexTopics
from tidelog.v1 import broker_pb2 as pb

ALICE, MALLORY = ClientIdentity("c1", "10.0.0.1", "User:alice"), \
    ClientIdentity("c2", "10.0.0.2", "User:mallory")


class Topics(RegexTopics):
    """``public`` and ``secret``; ``readable[principal]`` are the names it may describe."""

    def __init__(self, readable: Mapping[str, set[str]]) -> None:
        super().__init__()
        self._topics = {name: topic_metadata(name, 2) for name in ("public", "secret")}
        self._readable = readable

    def __getitem__(self, name: str) -> TopicMetadata:
        return self._topics[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._topics)

    def __len__(self) -> int:
        return len(self._topics)

    def describable(self, principal: str, host: str, names: set[str]) -> set[str]:
        return names & self._readable.get(principal, set())


def _heartbeat(shard: GroupCoordinatorShard, topics: Topics, client: ClientIdentity,
               request: pb.ConsumerGroupHeartbeatRequest, now_ms: int
               ) -> pb.ConsumerGroupHeartbeatResponse:
    records, response = shard.consumer_group_heartbeat(request, now_ms=now_ms, topics=topics,
                                                       client=client)
    for record in records:
        shard.replay_written(record)
    assert response.error_code == 0, response
    return response


def _join(shard: GroupCoordinatorShard, topics: Topics, client: ClientIdentity,
          now_ms: int) -> pb.ConsumerGroupHeartbeatResponse:
    return _heartbeat(shard, topics, client, pb.ConsumerGroupHeartbeatRequest(
        group_id="g", member_epoch=0, rebalance_timeout_ms=10_000,
        subscribed_topic_regex=".*", subscription_changed=True), now_ms)


def _targets(shard: GroupCoordinatorShard, topics: Topics) -> dict[str, set[bytes]]:
    group = shard.state.groups["g"]
    return {m.principal: {t for t, parts in group.target_assignment.get(m.member_id, {}).items()
                          if parts}
            for m in group.members.values()}


def test_a_regex_matches_only_what_each_member_may_describe() -> None:
    shard = GroupCoordinatorShard(GroupCoordinatorConfig(), rng=random.Random(1))
    topics = Topics({"User:alice": {"public", "secret"}, "User:mallory": {"public"}})
    secret_id = topics["secret"].topic_id
    _join(shard, topics, ALICE, now_ms=0)
    answer = _join(shard, topics, MALLORY, now_ms=10)
    for now_ms in range(20, 400, 20):  # both reconcile to the target
        answer = _heartbeat(shard, topics, MALLORY, pb.ConsumerGroupHeartbeatRequest(
            group_id="g", member_id=answer.member_id, member_epoch=answer.member_epoch),
            now_ms)
        assert secret_id not in answer.SerializeToString()
    targets = _targets(shard, topics)
    assert targets["User:alice"] >= {secret_id}
    assert secret_id not in targets["User:mallory"]
    assert topics["public"].topic_id in targets["User:mallory"] | targets["User:alice"]
    # The principal is in the member's record: a shard built by replay has it too.
    member = next(m for m in shard.state.groups["g"].members.values()
                  if m.member_id == answer.member_id)
    assert member.principal == "User:mallory" and member.client_host == "10.0.0.2"
    # The ACLs change (a new view): she may now describe secret, and alice may no longer. The
    # next heartbeat bumps the group epoch though the group's topics are the same, and the new
    # target follows the new ACLs.
    group = shard.state.groups["g"]
    epoch = group.group_epoch
    swapped = Topics({"User:alice": {"public"}, "User:mallory": {"public", "secret"}})
    _heartbeat(shard, swapped, MALLORY, pb.ConsumerGroupHeartbeatRequest(
        group_id="g", member_id=answer.member_id, member_epoch=answer.member_epoch), 500)
    assert shard.state.groups["g"].group_epoch == epoch + 1
    targets = _targets(shard, swapped)
    assert secret_id not in targets["User:alice"]
    assert secret_id in targets["User:mallory"]
