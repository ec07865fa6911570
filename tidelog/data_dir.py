"""A node's data directory: formatted once with a cluster id and node id, checked at every start.

``format_data_dir`` writes ``meta.properties`` (Kafka's file name and keys: ``version``,
``cluster.id``, ``node.id``) atomically; ``check_data_dir`` reads it back and refuses a directory
that is unformatted or belongs to another cluster or node, so a misconfigured node can never mix
its data with another's. Controllers and brokers both call it before opening their stores, so this
module does no more than files (no RocksDB here). It also keeps a controller's bootstrap records
(``bootstrap.records``: tidelog/metadata/bootstrap.py says what they are).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tidelog.errors import InconsistentClusterIdError, InvalidConfigError, KafkaStorageErrorError
from tidelog.metadata.bootstrap import decode_bootstrap, encode_bootstrap
from tidelog.v1 import metadata_pb2

__all__ = [
    "BOOTSTRAP_FILE_NAME",
    "META_FILE_NAME",
    "DataDirError",
    "DataDirMeta",
    "InconsistentNodeIdError",
    "UnformattedDataDirError",
    "check_data_dir",
    "format_data_dir",
    "read_bootstrap",
    "write_bootstrap",
]

META_FILE_NAME = "meta.properties"
BOOTSTRAP_FILE_NAME = "bootstrap.records"
META_VERSION = 1
#: meta.properties is a few lines; anything larger is not ours.
META_FILE_BYTES_MAX = 4096


class DataDirError(KafkaStorageErrorError):
    """A data directory that this node cannot use as it is: an operator must act."""

    retriable = False


class UnformattedDataDirError(DataDirError):
    """The directory (or its meta.properties) does not exist: run ``tidelog storage format``."""


class InconsistentNodeIdError(DataDirError):
    """The directory was formatted for another node id."""


@dataclass(frozen=True, slots=True)
class DataDirMeta:
    """What meta.properties says about a data directory."""

    cluster_id: str
    node_id: int
    version: int = META_VERSION


def format_data_dir(
    path: Path | str, cluster_id: str, node_id: int, *, ignore_formatted: bool = False
) -> DataDirMeta:
    """Create ``path`` if needed and write its meta.properties.

    A directory that is already formatted is an error (as ``kafka-storage format``), unless
    ``ignore_formatted`` is set and its ids are the same ones; other ids are always an error.
    """
    _check_ids(cluster_id, node_id)
    path = Path(path)
    meta = DataDirMeta(cluster_id=cluster_id, node_id=node_id)
    if (path / META_FILE_NAME).exists():
        existing = check_data_dir(path, cluster_id=cluster_id, node_id=node_id)
        if not ignore_formatted:
            raise DataDirError(
                f"data dir {path} is already formatted (cluster {existing.cluster_id}, node "
                f"{existing.node_id}); pass --ignore-formatted to accept it as it is"
            )
        return existing
    path.mkdir(parents=True, exist_ok=True)
    _write_atomically(path / META_FILE_NAME, _render(meta))
    return meta


def check_data_dir(
    path: Path | str, cluster_id: str | None = None, node_id: int | None = None
) -> DataDirMeta:
    """Read ``path``'s meta.properties and check it against the ids given (None = any)."""
    path = Path(path)
    meta = _read_meta(path)
    if cluster_id is not None and meta.cluster_id != cluster_id:
        raise InconsistentClusterIdError(
            f"data dir {path} belongs to cluster {meta.cluster_id}, not to cluster {cluster_id} "
            "that this node is configured for; point data_dir at this cluster's directory, or "
            "format an empty directory for it"
        )
    if node_id is not None and meta.node_id != node_id:
        raise InconsistentNodeIdError(
            f"data dir {path} belongs to node {meta.node_id}, not to node {node_id} that this "
            "node is configured as; fix node_id or data_dir in the node's config"
        )
    return meta


def _check_ids(cluster_id: str, node_id: int) -> None:
    # The meta file is key=value lines: an id with a line break or '=' could not be read back.
    if not cluster_id or any(c in cluster_id for c in "\r\n=") or cluster_id != cluster_id.strip():
        raise DataDirError(f"cluster id {cluster_id!r} is not valid (empty or has '=' or spaces)")
    if isinstance(node_id, bool) or not isinstance(node_id, int) or node_id < 0:
        raise DataDirError(f"node id {node_id!r} is not valid (must be an integer >= 0)")


def _render(meta: DataDirMeta) -> bytes:
    lines = [
        "# Written by tidelog storage format. Do not edit: the node checks it at every start.",
        f"version={meta.version}",
        f"cluster.id={meta.cluster_id}",
        f"node.id={meta.node_id}",
    ]
    return ("\n".join(lines) + "\n").encode()


def _read_meta(path: Path) -> DataDirMeta:
    meta_path = path / META_FILE_NAME
    try:
        with meta_path.open("rb") as f:
            raw = f.read(META_FILE_BYTES_MAX + 1)
    except FileNotFoundError:
        raise UnformattedDataDirError(
            f"data dir {path} is not formatted (no {META_FILE_NAME}); run `tidelog storage "
            "format` with the cluster id and this node's id first"
        ) from None
    except OSError as e:
        raise DataDirError(f"cannot read {meta_path}: {e}") from None
    if len(raw) > META_FILE_BYTES_MAX:
        raise DataDirError(f"{meta_path} is larger than {META_FILE_BYTES_MAX} bytes: not ours")
    return _parse(meta_path, raw)


def _parse(meta_path: Path, raw: bytes) -> DataDirMeta:
    props: dict[str, str] = {}
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise DataDirError(f"{meta_path} is not text: the file is damaged") from None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise DataDirError(f"{meta_path} has a line without '=': {line!r}")
        props[key.strip()] = value.strip()
    try:
        version = int(props["version"])
        cluster_id = props["cluster.id"]
        node_id = int(props["node.id"])
    except (KeyError, ValueError) as e:
        raise DataDirError(f"{meta_path} is missing or has a bad value for {e}") from None
    if version != META_VERSION:
        raise DataDirError(
            f"{meta_path} has version {version}; this release reads version {META_VERSION} only"
        )
    return DataDirMeta(cluster_id=cluster_id, node_id=node_id, version=version)


def _write_atomically(target: Path, content: bytes) -> None:
    """Write via a temp file, fsync, rename, fsync the directory: all of it or nothing lands."""
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, content)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_bootstrap(data_dir: Path | str, records: Sequence[metadata_pb2.MetadataRecord]) -> Path:
    """Keep ``records`` in ``data_dir`` for the first active controller (mode 0600, written
    atomically)."""
    path = Path(data_dir) / BOOTSTRAP_FILE_NAME
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(encode_bootstrap(records))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_bootstrap(data_dir: Path | str) -> list[metadata_pb2.MetadataRecord]:
    """The bootstrap records kept in ``data_dir`` (none when there is no file)."""
    path = Path(data_dir) / BOOTSTRAP_FILE_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise InvalidConfigError(f"cannot read {path}: {e.strerror}") from None
    return decode_bootstrap(data, str(path))
