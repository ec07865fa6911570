"""Storage, the per-data-dir owner of partition logs (broker/storage/storage.py).

Opens real RocksDBs under pytest's tmp_path and checks: the data dir's cluster/node ids are
enforced before anything opens, a second opener is refused while the first holds the dir,
partitions are listed from disk after a reopen, deleting one partition leaves its neighbours
intact and disables its PartitionLog, a closed storage refuses work with KAFKA_STORAGE_ERROR,
the flush policies run, and the package's public API and its one rocksdict import stay as
documented (an AST scan of broker/storage).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tidelog.broker.storage as storage_package
from tidelog.broker.storage import FlushPolicy, Storage, StorageConfig, TopicPartition
from tidelog.data_dir import InconsistentNodeIdError, UnformattedDataDirError, format_data_dir
from tidelog.errors import (
    InconsistentClusterIdError,
    KafkaStorageErrorError,
    UnknownTopicOrPartitionError,
)
from tidelog.record_batch import NewRecord, build_batch, validate_batch

CLUSTER = "test-cluster"
TOPIC_A = b"A" * 16
TOPIC_B = b"B" * 16
STORAGE_DIR = Path(storage_package.__file__).parent


def formatted(path: Path) -> Path:
    format_data_dir(path, CLUSTER, 1)
    return path


def open_storage(path: Path, config: StorageConfig | None = None) -> Storage:
    return Storage.open(path, cluster_id=CLUSTER, node_id=1, config=config)


def append_one(storage: Storage, topic_id: bytes, partition: int) -> None:
    log = storage.get_or_create_log(topic_id, partition)
    batch = validate_batch(build_batch([NewRecord(b"k", b"v")], now_ms=1))
    log.append_as_leader(batch, leader_epoch=0, now_ms=1)


def test_data_dir_ids_are_checked_before_opening(tmp_path: Path) -> None:
    with pytest.raises(UnformattedDataDirError):
        open_storage(tmp_path)
    formatted(tmp_path)
    with pytest.raises(InconsistentClusterIdError):
        Storage.open(tmp_path, cluster_id="another", node_id=1)
    with pytest.raises(InconsistentNodeIdError):
        Storage.open(tmp_path, cluster_id=CLUSTER, node_id=2)
    with open_storage(tmp_path) as storage:
        assert storage.meta.cluster_id == CLUSTER


def test_a_second_opener_is_refused(tmp_path: Path) -> None:
    with open_storage(formatted(tmp_path)), pytest.raises(KafkaStorageErrorError,
                                                          match="another process"):
        open_storage(tmp_path)


def test_partitions_are_found_on_disk(tmp_path: Path) -> None:
    with open_storage(formatted(tmp_path)) as storage:
        append_one(storage, TOPIC_B, 1)
        append_one(storage, TOPIC_A, 7)
        storage.get_or_create_log(TOPIC_A, 2)  # empty logs exist too
    with open_storage(tmp_path) as storage:
        assert storage.partitions() == [
            TopicPartition(TOPIC_A, 2), TopicPartition(TOPIC_A, 7), TopicPartition(TOPIC_B, 1)]
        assert storage.log(TOPIC_A, 7).log_end_offset == 1
        with pytest.raises(UnknownTopicOrPartitionError):
            storage.log(TOPIC_A, 3)


def test_delete_partition_leaves_neighbours_intact(tmp_path: Path) -> None:
    with open_storage(formatted(tmp_path)) as storage:
        for tp in ((TOPIC_A, 0), (TOPIC_A, 1), (TOPIC_A, 2), (TOPIC_B, 1)):
            append_one(storage, *tp)
        doomed = storage.log(TOPIC_A, 1)
        assert storage.delete_partition(TOPIC_A, 1)
        assert not storage.delete_partition(TOPIC_A, 1)
        with pytest.raises(UnknownTopicOrPartitionError, match="deleted"):
            doomed.read(0, 100)
        with pytest.raises(UnknownTopicOrPartitionError):
            doomed.append_as_leader(validate_batch(build_batch([NewRecord(None, b"x")], now_ms=0)),
                                    leader_epoch=0, now_ms=0)
    with open_storage(tmp_path) as storage:
        assert TopicPartition(TOPIC_A, 1) not in storage.partitions()
        for tp in ((TOPIC_A, 0), (TOPIC_A, 2), (TOPIC_B, 1)):
            assert len(storage.log(*tp).read(0, 100).batches) == 1
        assert storage.get_or_create_log(TOPIC_A, 1).log_end_offset == 0, "re-created empty"


def test_a_closed_storage_refuses_work(tmp_path: Path) -> None:
    storage = open_storage(formatted(tmp_path))
    append_one(storage, TOPIC_A, 0)
    log = storage.log(TOPIC_A, 0)
    storage.close()
    storage.close()  # twice is fine
    assert storage.closed
    with pytest.raises(KafkaStorageErrorError, match="closed"):
        log.read(0, 100)
    with pytest.raises(KafkaStorageErrorError, match="closed"):
        storage.partitions()


@pytest.mark.parametrize(("topic_id", "partition"), [(b"short", 0), (TOPIC_A, -1)])
def test_bad_partition_ids_are_refused(tmp_path: Path, topic_id: bytes, partition: int) -> None:
    with open_storage(formatted(tmp_path)) as storage, pytest.raises(ValueError):
        storage.get_or_create_log(topic_id, partition)


def test_every_batch_flush_policy_appends(tmp_path: Path) -> None:
    config = StorageConfig(flush_policy=FlushPolicy.EVERY_BATCH)
    with open_storage(formatted(tmp_path), config) as storage:
        append_one(storage, TOPIC_A, 0)
        assert not storage.maybe_flush(0)
    with open_storage(tmp_path) as storage:
        assert storage.log(TOPIC_A, 0).log_end_offset == 1


def test_interval_flush_policy_flushes_on_its_period(tmp_path: Path) -> None:
    config = StorageConfig(flush_policy=FlushPolicy.INTERVAL, flush_interval_ms=1_000)
    with open_storage(formatted(tmp_path), config) as storage:
        append_one(storage, TOPIC_A, 0)
        assert [storage.maybe_flush(t) for t in (0, 999, 1_000, 1_500, 2_000)] == [
            True, False, True, False, True]


def test_public_api_is_what_all_says() -> None:
    exported = set(storage_package.__all__)
    assert {"Storage", "PartitionLog", "LogConfig", "StorageConfig", "FlushPolicy",
            "AppendInfo", "FetchDataInfo", "EpochEndOffset", "TopicPartition"} <= exported
    for name in exported:
        assert getattr(storage_package, name) is not None


def test_rocksdict_is_imported_by_rocks_py_only() -> None:
    importers = []
    for path in sorted(STORAGE_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.split(".")[0] == "rocksdict" for n in names):
                importers.append(path.name)
    assert importers == ["rocks.py"]
