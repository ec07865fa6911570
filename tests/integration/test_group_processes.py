"""A consumer group of real processes through a consumer crash and a coordinator crash.

Issue 10's "Integration (real processes)". On 1 controller + 3 broker processes
(tests/integration/cluster_harness.py; ``__consumer_offsets`` with 3 partitions, RF 3, min ISR
2; a group session timeout of 6 s and heartbeat interval of 300 ms), a 12-partition topic (RF 3,
min.insync.replicas 2), one test:

1. a producer (acks=all, idempotent, in a thread of the test) writes unique values ``v<i>`` at
   a bounded rate, keyed so they spread over the partitions, recording each acknowledged one;
2. three consumer processes (tests/integration/group_member_process.py: commit() after
   writing each poll's records to its own file) join one group and share the 12 partitions;
3. kill -9 of one: within the session timeout plus a margin, DescribeGroups shows its
   partitions owned by the two survivors, and the group stable;
4. a fourth process joins and gets a share;
5. kill -9 of the broker that coordinates the group (DescribeGroups names it): another broker
   becomes the coordinator, the group is stable again with the same three members, the offsets
   committed before the crash are still there (none went back), and the members keep
   processing; the broker is restarted;
6. the producer stops; once every partition's committed offset reaches its high watermark
   (the members drained it), they are stopped (SIGTERM: they leave), and every acknowledged
   value is in the union of the files (at least once), no file has a value that was never
   sent, one (partition, offset) always holds the same value, and the group's lag is 0.

Every wait is bounded; processes are killed in ``finally``. About a minute on 2 cores.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from cluster_harness import ClusterHarness
from replica_checks import broker_name

from tidelog.client import Admin, NewTopic, Producer, TopicPartition
from tidelog.client.admin import GroupDescription

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 6_000
OVERRIDES = {
    "controller": {"broker_session_timeout_ms": 3_000, "fence_check_interval_ms": 100},
    "broker": {"offsets_topic_num_partitions": 3, "heartbeat_interval_ms": 500,
               "group_consumer_heartbeat_interval_ms": 300,
               "group_consumer_session_timeout_ms": SESSION_TIMEOUT_MS},
}
TOPIC = "events"
GROUP = "processors"
PARTITIONS = 12
#: The producer's pace and its bound (it is stopped earlier by the test, normally).
RATE_PER_S = 100
PRODUCE_S_MAX = 90.0
#: How long after the kill -9 of a member its partitions may take to move: the session timeout,
#: then the survivors' heartbeats (revoke nothing, take the freed partitions) and our polling.
MOVE_MARGIN_S = 5.0
WAIT_S = 30.0
MEMBER = Path(__file__).with_name("group_member_process.py")
ALL = {TopicPartition(TOPIC, p) for p in range(PARTITIONS)}
T = TypeVar("T")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterHarness]:
    with ClusterHarness.started(tmp_path / "cluster", controllers=1, brokers=3,
                                overrides=OVERRIDES) as cluster:
        cluster.start_brokers()
        yield cluster


def wait_for(check: Callable[[], T | None], what: str, timeout_s: float = WAIT_S) -> T:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            result = check()
        except Exception as error:  # a coordinator moving: ask again
            result, last = None, error
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} ({last!r})")


class Members:
    """The consumer processes by name, each with its output file; all killed on close."""

    def __init__(self, cluster: ClusterHarness, base: Path) -> None:
        self.cluster = cluster
        self.base = base
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str) -> None:
        with (self.base / f"{name}.err").open("wb") as err:
            self.procs[name] = subprocess.Popen(
                [sys.executable, str(MEMBER), self.cluster.bootstrap, GROUP, TOPIC,
                 str(self.base / f"{name}.out")], stderr=err)

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        proc.kill()
        proc.wait(timeout=10)

    def stop_all(self) -> dict[str, int]:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        return {name: proc.wait(timeout=WAIT_S) for name, proc in self.procs.items()}

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None and proc.returncode != -9:
                raise AssertionError(f"member {name} exited with {proc.returncode}: "
                                     f"{(self.base / f'{name}.err').read_text()[-2000:]}")

    def lines(self) -> list[tuple[int, int, str]]:
        out = []
        for path in self.base.glob("*.out"):
            for line in path.read_text().splitlines():
                partition, offset, value = line.split(" ", 2)
                out.append((int(partition), int(offset), value))
        return out

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


class Writer(threading.Thread):
    """Sends v0, v1, … at RATE_PER_S (acks=all, idempotent) until stopped; keeps the acked."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.stopping = threading.Event()
        self.acked: set[str] = set()
        self.sent = 0
        self.errors: list[BaseException] = []

    def run(self) -> None:
        with Producer(self.bootstrap, acks="all", linger_ms=5, request_timeout_ms=10_000,
                      delivery_timeout_ms=60_000) as producer:
            started = time.monotonic()
            # Bounded by PRODUCE_S_MAX whatever the test does.
            while not self.stopping.is_set() and time.monotonic() - started < PRODUCE_S_MAX:
                value = f"v{self.sent}"
                producer.send(TOPIC, value.encode(), value.encode(),
                              on_delivery=lambda md, err, v=value: self._done(v, err))
                self.sent += 1
                time.sleep(1 / RATE_PER_S)
            producer.flush(60_000)

    def _done(self, value: str, error: BaseException | None) -> None:
        if error is None:
            self.acked.add(value)
        else:
            self.errors.append(error)


def describe(cluster: ClusterHarness) -> GroupDescription:
    with Admin(cluster.bootstrap, request_timeout_ms=5_000) as admin:
        return admin.describe_groups([GROUP], timeout_ms=10_000)[GROUP]


def stable(cluster: ClusterHarness, members: int) -> GroupDescription | None:
    """The group when ``members`` members own every partition between them, each exactly its
    target at the group epoch (no rebalance in progress); else None."""
    g = describe(cluster)
    owned = [tp for m in g.members for tp in m.assignment]
    if (len(g.members) == members and len(owned) == len(set(owned)) and set(owned) == ALL
            and all(m.assignment and set(m.assignment) == set(m.target_assignment)
                    and m.member_epoch == g.group_epoch for m in g.members)):
        return g
    return None


def committed(cluster: ClusterHarness) -> dict[TopicPartition, tuple[int, int]]:
    with Admin(cluster.bootstrap, request_timeout_ms=5_000) as admin:
        return {tp: (o.offset, o.lag)
                for tp, o in admin.list_group_offsets(GROUP, timeout_ms=10_000).items()}


def high_watermarks(cluster: ClusterHarness) -> dict[TopicPartition, int]:
    with Admin(cluster.bootstrap, request_timeout_ms=5_000) as admin:
        topic = admin.describe_topics([TOPIC]).all()[TOPIC]
    return {TopicPartition(TOPIC, p.partition): p.high_watermark for p in topic.partitions}


def test_group_of_processes_survives_member_and_coordinator_crashes(
        cluster: ClusterHarness, tmp_path: Path) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3,
                                      configs={"min.insync.replicas": "2"})]).all()
    writer = Writer(cluster.bootstrap)
    members = Members(cluster, tmp_path)
    try:
        writer.start()
        for name in ("a", "b", "c"):
            members.start(name)
        wait_for(lambda: stable(cluster, 3), "three members sharing the 12 partitions")
        wait_for(lambda: len(members.lines()) > 0, "records processed")

        # -- kill -9 of a member: its partitions move to the survivors within the session.
        before = {m.member_id for m in describe(cluster).members}
        members.kill("a")
        killed_at = time.monotonic()
        after = wait_for(lambda: stable(cluster, 2), "the survivors owning all 12 partitions",
                         SESSION_TIMEOUT_MS / 1000 + MOVE_MARGIN_S)
        moved_s = time.monotonic() - killed_at
        assert {m.member_id for m in after.members} < before
        members.check_alive()

        # -- a fourth member joins and gets a share.
        members.start("d")
        three = wait_for(lambda: stable(cluster, 3), "the fourth member's share")
        assert len({m.member_id for m in three.members} - before) == 1

        # -- kill -9 of the coordinator's broker: a new one; offsets and members carry on.
        old_coordinator = three.coordinator
        offsets_before = committed(cluster)
        processed_before = len(members.lines())
        victim = broker_name(cluster, old_coordinator)
        cluster.kill(victim)
        coordinator_killed_at = time.monotonic()
        moved = wait_for(lambda: (g := stable(cluster, 3)) and g.coordinator != old_coordinator
                         and g, "a new coordinator with the group stable")
        failover_s = time.monotonic() - coordinator_killed_at
        assert {m.member_id for m in moved.members} == {m.member_id for m in three.members}
        offsets_after = committed(cluster)
        for tp, (offset, _) in offsets_before.items():
            assert offsets_after[tp][0] >= offset, (tp, offset, offsets_after[tp])
        wait_for(lambda: len(members.lines()) > processed_before + RATE_PER_S,
                 "members processing after the failover")
        cluster.start(victim)
        members.check_alive()

        # -- drain: stop writing, wait for the commits to reach every high watermark.
        writer.stopping.set()
        writer.join(timeout=70)
        assert not writer.is_alive() and not writer.errors, writer.errors[:3]

        def drained() -> bool:
            hws = high_watermarks(cluster)
            done = committed(cluster)
            return all(done.get(tp, (-1, -1))[0] == hw for tp, hw in hws.items())
        wait_for(drained, "the group's commits reaching every high watermark")
        lags = committed(cluster)
        codes = members.stop_all()
    finally:
        writer.stopping.set()
        members.close()
    assert codes == {"a": -9, "b": 0, "c": 0, "d": 0}, codes

    lines = members.lines()
    values = {value for _, _, value in lines}
    assert len(writer.acked) >= RATE_PER_S * 5, len(writer.acked)
    assert not writer.acked - values, sorted(writer.acked - values)[:10]
    assert values <= {f"v{i}" for i in range(writer.sent)}
    at: dict[tuple[int, int], str] = {}
    for partition, offset, value in lines:
        assert at.setdefault((partition, offset), value) == value, (partition, offset)
    assert set(lags) == ALL and all(lag == 0 for _, lag in lags.values()), lags
    print(f"partitions moved {moved_s:.1f} s after the kill -9 of a member; the group was "
          f"stable with a new coordinator {failover_s:.1f} s after the kill -9 of its broker; "
          f"{len(writer.acked)} acknowledged, {len(lines)} processed "
          f"({len(lines) - len(at)} re-processed)")
