"""Data dir formatting and checking (tidelog/data_dir.py).

Formats directories under pytest's tmp_path and checks them back: ids round-trip, a directory of
another cluster or node or an unformatted one is refused with an error that says which ids differ
and what to do, re-formatting is refused unless asked to accept the same ids, and a damaged meta
file is reported rather than misread.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.data_dir import (
    META_FILE_NAME,
    DataDirError,
    DataDirMeta,
    InconsistentNodeIdError,
    UnformattedDataDirError,
    check_data_dir,
    format_data_dir,
)
from tidelog.errors import InconsistentClusterIdError, KafkaStorageErrorError, TidelogError

CLUSTER = "5f0c7a1e2b3d4c5e8f9a0b1c2d3e4f50"


def test_format_then_check_round_trips(tmp_path: Path) -> None:
    data_dir = tmp_path / "node-1" / "data"
    meta = format_data_dir(data_dir, CLUSTER, 1)
    assert meta == DataDirMeta(cluster_id=CLUSTER, node_id=1)
    assert check_data_dir(data_dir) == meta
    assert check_data_dir(data_dir, cluster_id=CLUSTER, node_id=1) == meta
    text = (data_dir / META_FILE_NAME).read_text()
    assert f"cluster.id={CLUSTER}" in text and "node.id=1" in text and "version=1" in text
    assert not list(data_dir.glob("*.tmp")), "the temp file is renamed away"


def test_another_cluster_is_refused_with_both_ids(tmp_path: Path) -> None:
    format_data_dir(tmp_path, CLUSTER, 1)
    with pytest.raises(InconsistentClusterIdError) as info:
        check_data_dir(tmp_path, cluster_id="other-cluster", node_id=1)
    assert CLUSTER in str(info.value) and "other-cluster" in str(info.value)
    assert "data_dir" in str(info.value), "the message says what to do"
    assert not info.value.retriable


def test_another_node_is_refused_with_both_ids(tmp_path: Path) -> None:
    format_data_dir(tmp_path, CLUSTER, 1)
    with pytest.raises(InconsistentNodeIdError) as info:
        check_data_dir(tmp_path, cluster_id=CLUSTER, node_id=2)
    assert "node 1" in str(info.value) and "node 2" in str(info.value)
    assert isinstance(info.value, DataDirError) and isinstance(info.value, KafkaStorageErrorError)
    assert not info.value.retriable, "an operator must act; retrying cannot help"


def test_unformatted_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnformattedDataDirError, match="tidelog storage format"):
        check_data_dir(tmp_path)
    with pytest.raises(UnformattedDataDirError):
        check_data_dir(tmp_path / "missing")


def test_reformat_is_refused_unless_same_ids_are_accepted(tmp_path: Path) -> None:
    format_data_dir(tmp_path, CLUSTER, 3)
    with pytest.raises(DataDirError, match="already formatted"):
        format_data_dir(tmp_path, CLUSTER, 3)
    assert format_data_dir(tmp_path, CLUSTER, 3, ignore_formatted=True).node_id == 3
    with pytest.raises(InconsistentNodeIdError):
        format_data_dir(tmp_path, CLUSTER, 4, ignore_formatted=True)
    with pytest.raises(InconsistentClusterIdError):
        format_data_dir(tmp_path, "x" + CLUSTER, 3, ignore_formatted=True)


@pytest.mark.parametrize(
    ("cluster_id", "node_id"), [("", 1), ("a=b", 1), ("a\nb", 1), (" a", 1), ("c", -1)]
)
def test_bad_ids_are_refused_before_writing(tmp_path: Path, cluster_id: str, node_id: int) -> None:
    with pytest.raises(DataDirError):
        format_data_dir(tmp_path, cluster_id, node_id)
    assert not (tmp_path / META_FILE_NAME).exists()


@pytest.mark.parametrize(
    "content",
    [
        b"version=1\ncluster.id=c\n",  # no node.id
        b"version=1\ncluster.id=c\nnode.id=one\n",
        b"version=9\ncluster.id=c\nnode.id=1\n",
        b"garbage without equals\n",
        b"\xff\xfe\x00",
        b"x" * 5000,
    ],
)
def test_damaged_meta_file_is_reported(tmp_path: Path, content: bytes) -> None:
    (tmp_path / META_FILE_NAME).write_bytes(content)
    with pytest.raises(DataDirError, match=META_FILE_NAME):
        check_data_dir(tmp_path)


def test_errors_are_tidelog_errors_for_the_cli(tmp_path: Path) -> None:
    # The CLI prints any TidelogError as one line; these must all be TidelogErrors.
    with pytest.raises(TidelogError):
        check_data_dir(tmp_path)
