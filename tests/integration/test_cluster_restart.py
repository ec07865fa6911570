"""Whole-cluster restarts and deleted topics on a real cluster: 3 controller + 3 broker processes.

What it checks:

* kill -9 of every broker AND every controller, then all six started again at the same moment,
  twice: a broker may first stream its metadata from a controller still replaying its journal,
  which has applied only a prefix of the metadata log and reports that prefix as committed (the
  case where brokers deleted their partitions as "strays"; each crash comes right after a new
  topic was created and written, so that topic lies beyond the prefix). Once the cluster is
  healthy again, every record an idempotent acks=all producer had acknowledged (RF=3,
  min.insync.replicas=2, several partitions) is read back at its acknowledged offset, with nothing
  else and nothing twice; an acknowledgement without an offset fails the test too (a genuine
  DUPLICATE_SEQUENCE_NUMBER needs a retry of a batch older than the five the leader remembers,
  which a producer with at most five batches in flight per partition never sends); the topics
  keep their ids; writes after a restart continue at the next offsets;
* a topic deleted while one of its replicas' broker is down (kill -9): that broker, restarted
  together with a restarted controller quorum, removes the logs it still held (its log says so,
  and its RocksDB has none of them once it is stopped again); the topic created again under the
  same name, by the same active controller after a restart (the one that drew the old id), gets a
  new topic id, and a consumer reading it from the beginning, with the broker that held the old
  logs leading every partition, sees only the new records.

How: tests/integration/cluster_harness.py runs the nodes (one cluster for the module; a fixture
starts whatever a test left stopped); records go through tidelog's Producer, Consumer and Admin.
"Healthy" is a bounded wait: three unfenced brokers, every partition led with its full replica
set in the ISR and its leader's high watermark at its log end. No RPC shows a broker's on-disk
partitions that it does not host (DescribeLogs lists hosted ones only, and so do the metrics),
so the stray check waits for the broker's "deleted partition" log lines and then opens the killed
broker's data dir with broker.storage.Storage (replica_checks.open_storage, as
tests/integration/test_broker_replication.py does).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from cluster_harness import ClusterHarness
from replica_checks import all_running, broker_ids, broker_name, open_storage, read_all

from tidelog.client import (
    Admin,
    ConsumerRecord,
    NewTopic,
    Producer,
    TopicPartition,
)
from tidelog.errors import (
    NetworkError,
    RequestTimedOutError,
    TidelogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

pytestmark = pytest.mark.integration

T = TypeVar("T")
#: Acknowledged records: partition -> offset -> value.
Acked = dict[TopicPartition, dict[int, bytes]]
OVERRIDES = {
    "controller": {"broker_session_timeout_ms": 3_000, "fence_check_interval_ms": 100},
    "broker": {"heartbeat_interval_ms": 500, "replica_fetch_wait_max_ms": 200},
}
#: Bound of every wait on the cluster (generous: another test run may share the 2 cores).
WAIT_S = 45.0
PRODUCER = dict(request_timeout_ms=5_000, delivery_timeout_ms=60_000, retry_backoff_ms=50,
                max_block_ms=15_000, linger_ms=5)
RELIABLE = {"min.insync.replicas": "2"}
#: Attempts at making a given controller the active one (each: 1/2 chance).
ACTIVE_ATTEMPTS_MAX = 12


# --- helpers -------------------------------------------------------------------------------------


def eventually(check: Callable[[], T], *, what: str, timeout_s: float = WAIT_S) -> T:
    """``check()``'s result once it stops raising AssertionError / TidelogError (bounded)."""
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while True:
        try:
            return check()
        except (AssertionError, TidelogError) as error:
            last = error
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} "
                                     f"(last: {last})") from None
            time.sleep(0.1)


def admin_of(cluster: ClusterHarness) -> Admin:
    return Admin(cluster.bootstrap, request_timeout_ms=10_000, default_api_timeout_ms=20_000,
                 retry_backoff_ms=50)


def wait_healthy(cluster: ClusterHarness, topics: list[str]) -> dict[str, str]:
    """Until three brokers are unfenced and every partition of ``topics`` is led, fully in sync
    and at HW == LEO on its leader; the topics' ids."""
    cluster.wait_for_leader(timeout_s=WAIT_S)
    cluster.wait_ready(timeout_s=WAIT_S)

    def healthy(admin: Admin) -> dict[str, str]:
        brokers = admin.describe_cluster().brokers
        assert sum(not b.fenced for b in brokers) == len(cluster.broker_names), brokers
        described = admin.describe_topics(topics).all()
        for name, topic in described.items():
            for p in topic.partitions:
                assert p.leader >= 0, f"{name}-{p.partition} has no leader"
                assert sorted(p.isr) == sorted(p.replicas), f"{name}-{p.partition}: {p}"
                assert p.high_watermark == p.log_end_offset >= 0, f"{name}-{p.partition}: {p}"
        return {name: topic.topic_id for name, topic in described.items()}

    with admin_of(cluster) as admin:
        return eventually(lambda: healthy(admin), what=f"a healthy cluster serving {topics}")


def create_topic(cluster: ClusterHarness, topic: NewTopic) -> str:
    """Create ``topic`` and wait until it is healthy; its id. A write that timed out may have
    been applied, so it is sent again, and TOPIC_ALREADY_EXISTS after such a timeout means done
    (nothing else creates topics here)."""
    timed_out: list[TidelogError] = []

    def create(admin: Admin) -> None:
        try:
            error = admin.create_topics([topic]).errors.get(topic.name)
        except (RequestTimedOutError, NetworkError) as e:
            timed_out.append(e)
            raise
        if error is None or (timed_out and isinstance(error, TopicAlreadyExistsError)):
            return
        if isinstance(error, RequestTimedOutError):
            timed_out.append(error)
        raise error

    with admin_of(cluster) as admin:
        eventually(lambda: create(admin), what=f"creating {topic.name}")
    topic_id = wait_healthy(cluster, [topic.name])[topic.name]
    assert uuid.UUID(topic_id)
    return topic_id


def delete_topic(cluster: ClusterHarness, name: str) -> None:
    """Delete ``name`` and wait until no broker lists it. Sent again after a timeout, when
    UNKNOWN_TOPIC_OR_PARTITION means the earlier attempt was applied."""
    timed_out: list[TidelogError] = []

    def delete(admin: Admin) -> None:
        try:
            error = admin.delete_topics([name]).errors.get(name)
        except (RequestTimedOutError, NetworkError) as e:
            timed_out.append(e)
            raise
        if error is None or (timed_out and isinstance(error, UnknownTopicOrPartitionError)):
            return
        if isinstance(error, RequestTimedOutError):
            timed_out.append(error)
        raise error

    def absent(admin: Admin) -> None:
        assert name not in admin.list_topics(), f"{name} still listed"

    with admin_of(cluster) as admin:
        eventually(lambda: delete(admin), what=f"deleting {name}")
        eventually(lambda: absent(admin), what=f"{name} gone from the metadata")


def produce(cluster: ClusterHarness, topic: str, partitions: int, count: int,
            prefix: bytes) -> Acked:
    """``count`` records ``prefix-i`` spread over the partitions (record i to partition
    i % partitions), acks=all, idempotent; every acknowledged (partition, offset, value)."""
    values = [b"%s-%06d" % (prefix, i) for i in range(count)]
    with Producer(cluster.bootstrap, acks="all", **PRODUCER) as producer:
        futures = [producer.send(topic, value, partition=i % partitions)
                   for i, value in enumerate(values)]
        producer.flush(int(WAIT_S * 1000))
        metas = [future.result(WAIT_S) for future in futures]
    unknown = [(m.partition, v) for m, v in zip(metas, values, strict=True) if m.offset < 0]
    assert not unknown, (f"{len(unknown)} records acknowledged without an offset (a "
                         f"DUPLICATE_SEQUENCE_NUMBER answer), e.g. {unknown[:3]}")
    acked: Acked = {}
    for i, (meta, value) in enumerate(zip(metas, values, strict=True)):
        assert (meta.topic, meta.partition) == (topic, i % partitions), meta
        acked.setdefault(TopicPartition(topic, meta.partition), {})[meta.offset] = value
    return acked


def extend(acked: Acked, more: Acked) -> None:
    """Add ``more`` to ``acked``; each partition's new records follow its old ones densely."""
    for tp, records in more.items():
        known = acked.setdefault(tp, {})
        start = len(known)
        assert sorted(records) == list(range(start, start + len(records))), \
            f"{tp}: acknowledged at offsets {min(records)}..{max(records)} after {start} records"
        known.update(records)


def assert_exactly(records: list[ConsumerRecord], acked: Acked) -> None:
    """Each partition holds exactly its acknowledged records, at their offsets."""
    got: dict[TopicPartition, dict[int, bytes]] = {tp: {} for tp in acked}
    for r in records:
        tp = TopicPartition(r.topic, r.partition)
        assert r.offset not in got[tp], f"{tp} offset {r.offset} read twice"
        got[tp][r.offset] = r.value or b""
    for tp, want in acked.items():
        missing = sorted(set(want) - set(got[tp]))
        assert not missing, f"{tp}: {len(missing)} acknowledged records lost, e.g. {missing[:5]}"
        wrong = [o for o in want if got[tp][o] != want[o]]
        assert not wrong, f"{tp}: other values at acknowledged offsets {wrong[:5]}"
        extra = sorted(set(got[tp]) - set(want))
        assert not extra, f"{tp}: records nobody acknowledged at offsets {extra[:5]}"
    values = [r.value for r in records]
    assert len(values) == len(set(values)), "a record was written twice"


def start_together(cluster: ClusterHarness, names: list[str]) -> None:
    """Start ``names`` at once (each spawn returns at once; no readiness wait between them),
    then wait until every one is ready."""
    cluster.start(*names, wait=False)
    cluster.wait_ready(names, timeout_s=WAIT_S)


def make_active(cluster: ClusterHarness, node_id: int) -> None:
    """Kill -9 and restart the active controller until ``node_id`` is the active one."""
    for _ in range(ACTIVE_ATTEMPTS_MAX):
        leader = cluster.wait_for_leader(timeout_s=WAIT_S)
        if leader == node_id:
            return
        name = cluster.controller_name(leader)
        cluster.kill(name)
        cluster.wait_for_leader(timeout_s=WAIT_S)
        cluster.start(name, timeout_s=WAIT_S)
    raise AssertionError(f"controller {node_id} never became active in {ACTIVE_ATTEMPTS_MAX} "
                         "elections")


def stored_partitions(cluster: ClusterHarness, name: str, topic_id: str) -> list[int]:
    """Partitions of ``topic_id`` with a log in the (killed) broker's RocksDB."""
    raw = uuid.UUID(topic_id).bytes
    with open_storage(cluster, name, lock_wait_s=10) as storage:
        return [tp.partition for tp in storage.partitions() if tp.topic_id == raw]


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("restart") / "cluster"
    with ClusterHarness.started(base, controllers=3, brokers=3, overrides=OVERRIDES) as harness:
        harness.start_brokers()
        yield harness


@pytest.fixture
def healthy(cluster: ClusterHarness) -> ClusterHarness:
    """Every node running and unpaused, three unfenced brokers (a test may have stopped some)."""
    all_running(cluster, timeout_s=WAIT_S)
    wait_healthy(cluster, [])
    return cluster


# --- the tests -----------------------------------------------------------------------------------


def crash_and_restart(cluster: ClusterHarness, topics: list[str]) -> dict[str, str]:
    """kill -9 every node, start all six at once, wait until healthy; the topics' ids."""
    for name in cluster.broker_names + cluster.controller_names:
        cluster.kill(name)
    started = time.monotonic()
    start_together(cluster, cluster.controller_names + cluster.broker_names)
    ids = wait_healthy(cluster, topics)
    print(f"healthy {time.monotonic() - started:.1f} s after starting all six nodes")
    return ids


def test_whole_cluster_kill_and_restart_loses_nothing(healthy: ClusterHarness) -> None:
    cluster = healthy
    acked: Acked = {}
    ids: dict[str, str] = {}
    # Two crashes. Before each, a new topic is created and written: a controller saves its Raft
    # commit index only now and then (pysyncobj: about once a second), so after a restart it
    # first replays its journal up to an older point, and a broker streaming from it sees an
    # image without the newest topic for a moment -- the brokers of the bug deleted those logs.
    for crash, (partitions, count) in enumerate([(6, 3_000), (3, 600)]):
        name = f"restart-{crash}"
        ids[name] = create_topic(cluster, NewTopic(name, partitions, 3, RELIABLE))
        extend(acked, produce(cluster, name, partitions, count, b"c%d" % crash))
        if crash:  # writes after a restart continue at the next offsets
            extend(acked, produce(cluster, "restart-0", 6, 600, b"c%d-more" % crash))
        assert crash_and_restart(cluster, sorted(ids)) == ids, "a topic id changed"
        assert_exactly(read_all(cluster, sorted(acked), timeout_s=WAIT_S), acked)
    assert len(acked) == 9 and sum(len(r) for r in acked.values()) == 4_200
    for name, partitions in (("restart-0", 6), ("restart-1", 3)):
        extend(acked, produce(cluster, name, partitions, 300, b"%s-last" % name.encode()))
    assert_exactly(read_all(cluster, sorted(acked), timeout_s=WAIT_S), acked)


def test_topic_deleted_while_a_broker_is_down(healthy: ClusterHarness) -> None:
    cluster = healthy
    name, partitions = "gone", 3
    victim = broker_ids(cluster)[-1]
    victim_name = broker_name(cluster, victim)
    others = [b for b in broker_ids(cluster) if b != victim]
    # The victim leads every partition of both incarnations, so a consumer reads its log.
    assignment = {p: [victim, *others] for p in range(partitions)}
    # Fresh controllers: the topic id below is the active controller's first random draw since
    # its start (an explicit assignment draws no placement).
    for controller in cluster.controller_names:
        cluster.kill(controller)
    start_together(cluster, cluster.controller_names)
    wait_healthy(cluster, [])
    old_id = create_topic(cluster, NewTopic(name, configs=RELIABLE,
                                            replica_assignment=assignment))
    active = cluster.wait_for_leader(timeout_s=WAIT_S)  # the one that drew old_id
    produce(cluster, name, partitions, 150, b"old")
    wait_healthy(cluster, [name])  # HW == LEO, full ISR: every replica holds all 150

    cluster.kill(victim_name)
    delete_topic(cluster, name)
    assert stored_partitions(cluster, victim_name, old_id) == list(range(partitions)), \
        "the victim should still hold the deleted topic's logs while it is down"

    # The quorum restarts too, and the victim with it: it may first stream from a controller
    # that has replayed only part of its journal (the topic still there, or not yet created).
    for controller in cluster.controller_names:
        cluster.kill(controller)
    log_path = cluster.local.log_path(victim_name)
    log_start = log_path.stat().st_size
    start_together(cluster, [*cluster.controller_names, victim_name])
    old_hex = uuid.UUID(old_id).hex
    lines = [(f"deleted partition {old_hex}-{p} (not assigned here in the metadata)",
              f"deleted partition {name}-{p} (metadata)") for p in range(partitions)]

    def removed() -> None:
        with open(log_path, "rb") as log:
            log.seek(log_start)
            text = log.read().decode(errors="replace")
        assert all(stray in text or deleted in text for stray, deleted in lines), \
            f"not yet deleted; log since restart:\n{text[-2_000:]}"

    eventually(removed, what=f"broker {victim} deleting its logs of the deleted {name}")
    wait_healthy(cluster, [])

    make_active(cluster, active)  # restarted since, it draws again from its start
    new_id = create_topic(cluster, NewTopic(name, configs=RELIABLE,
                                            replica_assignment=assignment))
    assert new_id != old_id, "the re-created topic got the deleted topic's id"
    with admin_of(cluster) as admin:
        described = admin.describe_topics([name]).all()[name]
    assert [p.leader for p in described.partitions] == [victim] * partitions
    new = produce(cluster, name, partitions, 30, b"new")
    assert {tp: sorted(r) for tp, r in new.items()} == \
        {TopicPartition(name, p): list(range(10)) for p in range(partitions)}
    assert_exactly(read_all(cluster, sorted(new), timeout_s=WAIT_S), new)

    cluster.kill(victim_name)
    assert stored_partitions(cluster, victim_name, old_id) == [], "old logs still on disk"
    assert stored_partitions(cluster, victim_name, new_id) == list(range(partitions))
