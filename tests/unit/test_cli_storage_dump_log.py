"""``tidelog storage dump-log``: what a stopped broker's logs hold, batch by batch.

How: a real Storage (RocksDB) in tmp_path gets batches in two partitions of two topics and is
closed, as a stopped broker leaves it; the command runs through ``tidelog.cli.main`` (its error
handling included). Checked: every batch listed once, in partition and offset order, with the
stored bytes' size and digest; --topic-id filters; a data dir still open (its broker running)
is refused with one line; a bad topic id is a usage error.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from tidelog.broker.storage import Storage
from tidelog.cli import main
from tidelog.data_dir import format_data_dir
from tidelog.record_batch import NewRecord, build_batch, validate_batch

#: The module (tidelog.cli's ``storage`` attribute is the click group of the same name).
storage_cli = importlib.import_module("tidelog.cli.storage")
TOPIC_A = bytes.fromhex("0a" * 16)
TOPIC_B = bytes.fromhex("0b" * 16)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(["storage", "dump-log", *args])
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    format_data_dir(tmp_path, "c1", 101)
    with Storage.open(tmp_path, cluster_id="c1", node_id=101) as store:
        for topic_id, partition, batches in ((TOPIC_B, 0, 2), (TOPIC_A, 1, 3), (TOPIC_A, 0, 1)):
            log = store.get_or_create_log(topic_id, partition)
            for i in range(batches):
                records = [NewRecord(b"k", b"v%d" % j) for j in range(i + 1)]
                log.append_as_leader(validate_batch(build_batch(records, now_ms=1)),
                                     leader_epoch=0, now_ms=1)
    return tmp_path


def stored(data_dir: Path) -> list[dict[str, object]]:
    """What the dump must say, read here through the same Storage."""
    rows = []
    with Storage.open(data_dir, cluster_id="c1", node_id=101) as store:
        for key in sorted(store.partitions(), key=lambda k: (k.topic_id, k.partition)):
            plog = store.log(key.topic_id, key.partition)
            start, end = plog.log_start_offset, plog.log_end_offset
            rows.append({"kind": "partition", "topic_id": key.topic_id.hex(),
                         "partition": key.partition, "log_start_offset": start,
                         "log_end_offset": end})
            for base, data in plog.scan_batches(start, end):
                rows.append({"kind": "batch", "topic_id": key.topic_id.hex(),
                             "partition": key.partition, "base_offset": base,
                             "bytes": len(data), "digest": storage_cli.batch_digest(data)})
    return rows


def test_every_batch_is_listed_with_its_size_and_digest(
    data_dir: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "--dir", str(data_dir), "--node-id", "101", "--format", "json")
    assert code == 0 and err == ""
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows == stored(data_dir)
    batches = [r for r in rows if r["kind"] == "batch"]
    assert [(r["topic_id"][:2], r["partition"], r["base_offset"]) for r in batches] == [
        ("0a", 0, 0), ("0a", 1, 0), ("0a", 1, 1), ("0a", 1, 3), ("0b", 0, 0), ("0b", 0, 1)]
    ends = [(r["partition"], r["log_end_offset"]) for r in rows if r["kind"] == "partition"]
    assert ends == [(0, 1), (1, 6), (0, 3)]
    code, text, _ = run(capsys, "--dir", str(data_dir), "--node-id", "101")
    assert code == 0
    assert text.splitlines()[:2] == [
        f"partition {TOPIC_A.hex()} 0: log start 0, end 1",
        f"  batch at 0: {batches[0]['bytes']} bytes, digest {batches[0]['digest']}"]


def test_topic_id_filters(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--dir", str(data_dir), "--node-id", "101", "--format", "json",
                       "--topic-id", TOPIC_B.hex())
    assert code == 0
    assert {json.loads(line)["topic_id"] for line in out.splitlines()} == {TOPIC_B.hex()}


def test_a_data_dir_in_use_is_refused_with_one_line(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(storage_cli, "DUMP_LOCK_WAIT_S", 0.2)
    with Storage.open(data_dir, cluster_id="c1", node_id=101):  # its broker, still running
        code, out, err = run(capsys, "--dir", str(data_dir), "--node-id", "101")
    assert code == 1 and out == ""
    assert err.startswith(f"error: {data_dir} is in use (is its broker still running?)")
    assert err.count("\n") == 1


def test_a_bad_topic_id_is_a_usage_error(data_dir: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--dir", str(data_dir), "--node-id", "101", "--topic-id", "x")
    assert code == 2 and out == ""
    assert err == "error: --topic-id must be a topic id (32 hex digits), got x\n"
