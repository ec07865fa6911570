"""Server-side assignor benchmark: how long one target assignment takes at a given size.

``python -m bench.assignors [--members 1000] [--topics 100] [--partitions-per-topic 100]
[--heterogeneous-topics 30] [--rounds 5]``

Scenarios, for each assignor (uniform, range):

- ``homogeneous_scratch``: every member subscribes to every topic, nobody owns anything yet;
- ``homogeneous_member_left``: the previous result minus one member (a rebalance);
- ``homogeneous_member_joined``: the previous result plus one new member;
- ``heterogeneous_scratch``: each member subscribes to ``--heterogeneous-topics`` topics drawn
  with a fixed seed (so the subscriptions differ), nobody owns anything yet;
- ``heterogeneous_member_left``: the previous result minus one member.

Each scenario runs ``--rounds`` times; the median wall time in seconds is reported, plus how many
partitions changed owner in the rebalance scenarios. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from collections.abc import Mapping

from tidelog.broker.group.assignment import Assignment, Assignor, MemberSubscription, TopicMetadata
from tidelog.broker.group.assignors import ASSIGNORS

Members = dict[str, MemberSubscription]
Topics = dict[bytes, TopicMetadata]


def _topics(count: int, partitions: int) -> Topics:
    ids = [i.to_bytes(16, "big") for i in range(count)]
    return {t: TopicMetadata(t, f"topic-{i}", partitions) for i, t in enumerate(ids)}


def _members(count: int, subscriptions: list[frozenset[bytes]]) -> Members:
    return {f"member-{i:05d}": MemberSubscription(f"member-{i:05d}", subscriptions[i])
            for i in range(count)}


def _with_current(members: Members, result: Mapping[str, Assignment]) -> Members:
    return {m: MemberSubscription(m, s.subscribed_topic_ids, dict(result.get(m, {})))
            for m, s in members.items()}


def _moved(before: Mapping[str, Assignment], after: Mapping[str, Assignment]) -> int:
    def owners(result: Mapping[str, Assignment]) -> dict[tuple[bytes, int], str]:
        return {(t, p): m for m, a in result.items() for t, ps in a.items() for p in ps}
    old, new = owners(before), owners(after)
    return sum(1 for tp, m in new.items() if old.get(tp) not in (None, m))


def _time(assignor: Assignor, members: Members, topics: Topics, rounds: int
          ) -> tuple[float, dict[str, Assignment]]:
    times = []
    result: dict[str, Assignment] = {}
    for _ in range(rounds):
        start = time.perf_counter()
        result = assignor.assign(members, topics)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def _scenarios(assignor: Assignor, args: argparse.Namespace) -> dict[str, object]:
    topics = _topics(args.topics, args.partitions_per_topic)
    everything = frozenset(topics)
    out: dict[str, object] = {}
    members = _members(args.members, [everything] * args.members)
    out["homogeneous_scratch_s"], first = _time(assignor, members, topics, args.rounds)
    left = _with_current(members, first)
    left.pop(next(iter(sorted(left))))
    out["homogeneous_member_left_s"], after = _time(assignor, left, topics, args.rounds)
    out["homogeneous_member_left_moved"] = _moved(first, after)
    joined = _with_current(members, first)
    joined["member-new"] = MemberSubscription("member-new", everything)
    out["homogeneous_member_joined_s"], after = _time(assignor, joined, topics, args.rounds)
    out["homogeneous_member_joined_moved"] = _moved(first, after)

    rng = random.Random(7)
    ids = sorted(topics)
    subscriptions = [frozenset(rng.sample(ids, min(args.heterogeneous_topics, len(ids))))
                     for _ in range(args.members)]
    members = _members(args.members, subscriptions)
    out["heterogeneous_scratch_s"], first = _time(assignor, members, topics, args.rounds)
    loads = [sum(len(ps) for ps in a.values()) for a in first.values()]
    out["heterogeneous_load_min_max"] = [min(loads), max(loads)]
    left = _with_current(members, first)
    left.pop(next(iter(sorted(left))))
    out["heterogeneous_member_left_s"], after = _time(assignor, left, topics, args.rounds)
    out["heterogeneous_member_left_moved"] = _moved(first, after)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions-per-topic", type=int, default=100)
    parser.add_argument("--heterogeneous-topics", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    result: dict[str, object] = {
        "members": args.members,
        "partitions": args.topics * args.partitions_per_topic,
        "python": platform.python_version(),
    }
    for name, assignor in sorted(ASSIGNORS.items()):
        for key, value in _scenarios(assignor, args).items():
            if isinstance(value, float):
                value = round(value, 4)
            result[f"{name}_{key}"] = value
            print(f"{name:8} {key:36} {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
