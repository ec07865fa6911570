"""Golden scenarios for the group coordinator shard (broker/group/coordinator.py): heartbeats,
commits and timers in, records and responses out, in the controller's datadriven style.

Each file in testdata/groups/ is a script: a command, ``----``, then the expected output up to a
blank line. ``+`` lines are records (``key | value``), ``=`` the response. Member ids are shown
as m1, m2, ... in order of appearance (commands use the same aliases); topic ids as names.

The runner models well-behaved clients: a heartbeat without ``owned=`` reports what that member
was last told it is assigned (it revoked at once); ``owned=t1:0,1;t2:3`` (or ``owned=`` for
nothing) says otherwise, e.g. a member that has not yet revoked. ``regex=`` subscribes with a
regex, ``changed`` sets subscription_changed, ``client=id@host`` is the client's identity.
``topic``/``topic-delete`` change the metadata the next heartbeat sees. After every command it
checks that replaying every record so far from scratch, through their bytes, gives the same
state, and that no partition is owned by two members at once.

Run with TIDELOG_REWRITE_GOLDEN=1 to rewrite the expected output (then review the diff).
"""

from __future__ import annotations

import pathlib
import random
import shlex
from dataclasses import replace

import pytest
from golden import check_golden
from group_testkit import Renderer, check_invariants, scenario_assignors, topic_metadata

from tidelog.broker.group.assignment import TopicMetadata
from tidelog.broker.group.coordinator import GroupCoordinatorConfig, GroupCoordinatorShard
from tidelog.broker.group.heartbeat_checks import ClientIdentity
from tidelog.broker.group.records import GroupRecord
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import groups_pb2 as gpb

TESTDATA = pathlib.Path(__file__).parent / "testdata" / "groups"


class Runner:
    def __init__(self) -> None:
        self.topics: dict[str, TopicMetadata] = {}
        self.config = GroupCoordinatorConfig(default_assignor="simple")
        self.shard = GroupCoordinatorShard(self.config, rng=random.Random(7),
                                           assignors=scenario_assignors())
        self.log: list[GroupRecord] = []
        self.now_ms = 0
        self.show = Renderer(self.topics)
        #: member id -> what the client was last told it is assigned.
        self.client_owned: dict[str, list[pb.TopicPartitions]] = {}

    def run(self, command: str) -> list[str]:
        words = shlex.split(command)
        args = dict(w.split("=", 1) if "=" in w else (w, "") for w in words[1:])
        output = getattr(self, "cmd_" + words[0].replace("-", "_"))(args)
        check_invariants(self.shard, self.log)
        return output or ["ok"]

    def _out(self, records: list[GroupRecord], response: object | None) -> list[str]:
        self.log.extend(records)
        lines = [self.show.record(r) for r in records]
        if response is not None:
            lines.append("= " + self.show.message(response))  # type: ignore[arg-type]
        return [self._aliased(line) for line in lines]

    def _aliased(self, line: str) -> str:
        for real, alias in self.show.aliases.items():
            line = line.replace(real, alias)
        return line

    def _partitions(self, text: str) -> list[pb.TopicPartitions]:
        result = []
        for part in filter(None, text.split(";")):
            name, _, numbers = part.partition(":")
            topic = self.topics.get(name)
            result.append(pb.TopicPartitions(
                topic_id=topic.topic_id if topic else b"", topic=name,
                partitions=[int(n) for n in numbers.split(",") if n]))
        return result

    # --- commands -----------------------------------------------------------------------------

    def cmd_topic(self, args: dict[str, str]) -> list[str]:
        self.topics[args["name"]] = topic_metadata(args["name"], int(args["partitions"]))
        return []

    def cmd_topic_delete(self, args: dict[str, str]) -> list[str]:
        del self.topics[args["name"]]
        return []

    def cmd_members_max(self, args: dict[str, str]) -> list[str]:
        self.shard.config = replace(self.config, members_max=int(args["n"]))
        return []

    def cmd_advance(self, args: dict[str, str]) -> list[str]:
        self.now_ms += int(args["ms"])
        return [f"now={self.now_ms}"]

    def cmd_heartbeat(self, args: dict[str, str]) -> list[str]:
        alias = args.get("member", "-")
        member_id = "" if alias == "-" else self.show.member_id(alias)
        request = pb.ConsumerGroupHeartbeatRequest(
            group_id=args.get("group", "g"), member_id=member_id,
            member_epoch=int(args.get("epoch", "0")), instance_id=args.get("instance", ""),
            rack_id=args.get("rack", ""),
            rebalance_timeout_ms=int(args.get("rebalance", "30000")),
            subscribed_topic_names=[t for t in args.get("topics", "").split(",") if t],
            subscribed_topic_regex=args.get("regex", ""),
            subscription_changed="changed" in args,
            server_assignor=args.get("assignor", ""),
        )
        if "owned" in args:
            request.owned_partitions.extend(self._partitions(args["owned"]))
        else:
            request.owned_partitions.extend(self.client_owned.get(member_id, []))
        client_id, _, client_host = args.get("client", "").partition("@")
        records, response = self.shard.consumer_group_heartbeat(
            request, now_ms=self.now_ms, topics=self.topics,
            client=ClientIdentity(client_id, client_host))
        if response.error_code == 0 and response.assignment_changed:
            self.client_owned[response.member_id] = list(response.assignment)
        if response.member_epoch < 0 or response.error_code:
            self.client_owned.pop(response.member_id or member_id, None)
        return self._out(records, response)

    def cmd_timer(self, args: dict[str, str]) -> list[str]:
        self.now_ms = int(args.get("now", self.now_ms))
        return self._out(self.shard.on_timer(self.now_ms), None) or [f"now={self.now_ms}"]

    def cmd_commit(self, args: dict[str, str]) -> list[str]:
        alias = args.get("member", "-")
        request = pb.OffsetCommitRequest(
            group_id=args.get("group", "g"),
            member_id="" if alias == "-" else self.show.member_id(alias),
            member_epoch=int(args.get("epoch", "-1")))
        for spec in filter(None, args.get("offsets", "").split(";")):
            topic_partition, _, offset = spec.partition("=")
            name, _, partition = topic_partition.partition(":")
            request.topics.add(name=name).partitions.add(
                partition_id=int(partition), committed_offset=int(offset),
                committed_leader_epoch=int(args.get("leader-epoch", "-1")),
                metadata=args.get("metadata", "") * int(args.get("repeat", "1")))
        return self._out(*self.shard.offset_commit(request, now_ms=self.now_ms))

    def cmd_fetch(self, args: dict[str, str]) -> list[str]:
        request = pb.OffsetFetchRequest(group_id=args.get("group", "g"))
        for spec in filter(None, args.get("topics", "").split(";")):
            name, _, partitions = spec.partition(":")
            request.topics.add(name=name, partitions=[int(p) for p in partitions.split(",")
                                                      if p])
        return self._out([], self.shard.offset_fetch(request))

    def cmd_offset_delete(self, args: dict[str, str]) -> list[str]:
        """``offset-delete group=g topics=t1:0,1;t2:`` (``t2:`` = every committed partition)."""
        request = pb.OffsetDeleteRequest(group_id=args.get("group", "g"))
        for spec in filter(None, args.get("topics", "").split(";")):
            name, _, partitions = spec.partition(":")
            request.topics.add(name=name, partitions=[int(p) for p in partitions.split(",")
                                                      if p])
        return self._out(*self.shard.offset_delete(request, topics=self.topics))

    def cmd_list(self, args: dict[str, str]) -> list[str]:
        return self._out([], self.shard.list_groups())

    def cmd_describe(self, args: dict[str, str]) -> list[str]:
        return self._out([], self.shard.describe_groups(args["groups"].split(",")))

    def cmd_delete(self, args: dict[str, str]) -> list[str]:
        return self._out(*self.shard.delete_groups(args["groups"].split(",")))

    def cmd_state(self, args: dict[str, str]) -> list[str]:
        lines = []
        for group in sorted(self.shard.state.groups.values(), key=lambda g: g.group_id):
            lines.append(f"group {group.group_id} epoch={group.group_epoch} "
                         f"assignment_epoch={group.assignment_epoch} state={group.state}")
            for member in sorted(group.members.values(), key=lambda m: self.show.alias(
                    m.member_id)):
                lines.append(
                    f"  {self.show.alias(member.member_id)} epoch={member.member_epoch} "
                    f"state={gpb.MemberState.Name(member.state)} "
                    f"assigned={self._names(member.assigned)} "
                    f"pending={self._names(member.pending_revocation)} target="
                    f"{self._names(group.target_assignment.get(member.member_id, {}))}")
        return lines

    def _names(self, partitions: object) -> str:
        assert isinstance(partitions, dict)
        names = {t.topic_id: n for n, t in self.topics.items()}
        return ";".join(f"{names.get(t, t.hex())}:" + ",".join(map(str, sorted(p)))
                        for t, p in sorted(partitions.items()) if p) or "-"


def _scenario_files() -> list[pathlib.Path]:
    return sorted(TESTDATA.glob("*.txt"))


@pytest.mark.parametrize("path", _scenario_files(), ids=lambda p: p.stem)
def test_scenario(path: pathlib.Path) -> None:
    check_golden(path, Runner().run)


def test_scenario_files_exist() -> None:
    assert len(_scenario_files()) >= 5
