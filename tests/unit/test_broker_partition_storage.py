"""Storage behaviour the broker's replication shell depends on (broker/storage/partition_log.py).

What it checks: ``PartitionLog.truncate_to`` at or past the LEO drops an epoch entry that holds
no data (Kafka's truncateTo), so a broker elected leader of epoch N and demoted before its first
append can take the next leader's batches of an older epoch; entries holding data stay, and the
change survives a reopen. How: a real RocksDB Storage in pytest's tmp_path, batches built with
tidelog.record_batch, one behaviour per test, the log's invariants checked at the end.
"""

from __future__ import annotations

from pathlib import Path

from tidelog.broker.storage import PartitionLog, Storage
from tidelog.data_dir import format_data_dir
from tidelog.record_batch import NewRecord, build_batch, validate_batch

CLUSTER = "test-cluster"
TOPIC = bytes(range(16))


def open_storage(path: Path) -> Storage:
    if not (path / "meta.properties").exists():
        format_data_dir(path, CLUSTER, 1)
    return Storage.open(path, cluster_id=CLUSTER, node_id=1)


def append(log: PartitionLog, *, epoch: int, count: int = 2) -> None:
    records = [NewRecord(None, b"v%d" % i) for i in range(count)]
    batch = validate_batch(build_batch(records, now_ms=1_000))
    log.append_as_leader(batch, leader_epoch=epoch, now_ms=1_000)


def test_truncate_at_the_log_end_drops_an_epoch_without_data(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    leader = storage.get_or_create_log(TOPIC, 1)
    append(leader, epoch=1)
    append(leader, epoch=1)
    older_epoch_batch = leader.read(2, 1 << 20).batches[0]  # offsets 2..3, epoch 1

    follower = storage.get_or_create_log(TOPIC, 2)
    follower.append_as_follower(leader.read(0, 1 << 20).batches[0])  # offsets 0..1, epoch 1
    assert follower.maybe_assign_epoch_start_offset(5), "elected leader of epoch 5 at LEO 2"
    assert follower.epoch_entries == [(1, 0), (5, 2)]

    # Demoted before appending: the divergence answer makes it truncate at its LEO.
    assert follower.truncate_to(2) == 2
    assert follower.epoch_entries == [(1, 0)], "the entry without data is gone"
    follower.append_as_follower(older_epoch_batch)  # would raise FencedLeaderEpochError before
    assert follower.log_end_offset == 4
    follower.check_invariants()

    storage.close()
    storage = open_storage(tmp_path)
    assert storage.log(TOPIC, 2).epoch_entries == [(1, 0)]
    storage.close()


def test_truncate_past_the_log_end_keeps_epochs_with_data(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    log = storage.get_or_create_log(TOPIC, 0)
    append(log, epoch=1)
    append(log, epoch=3)
    assert log.truncate_to(10) == 4
    assert log.truncate_to(4) == 4
    assert log.epoch_entries == [(1, 0), (3, 2)]
    log.check_invariants()
    storage.close()
