"""Metrics every node exports, whatever its roles (``tidelog_node_``), plus the process's own.

* ``tidelog_node_data_dir_free_bytes`` / ``tidelog_node_data_dir_capacity_bytes``: statvfs of the
  node's data dir (free = what an unprivileged process may still write, ``f_bavail``), for the
  "disk filling" alert: a broker whose disk fills stops taking writes.
* ``tidelog_node_info{id, roles, version}``: always 1, for joining the version and roles onto
  other series. ``id`` is the node id, named as Kafka's app-info MBean names it; not ``node_id``,
  the target label the rendered scrape configs set (a scraped label of the same name would be
  renamed ``exported_node_id``).
* prometheus_client's ProcessCollector (``process_cpu_seconds_total``,
  ``process_resident_memory_bytes``, ``process_open_fds``, ``process_max_fds``,
  ``process_start_time_seconds``, ``process_virtual_memory_bytes``; Linux only, from /proc) and
  PlatformCollector (``python_info``, computed once).

Collected at scrape time (on the metrics HTTP thread): a statvfs is a cheap syscall, and a value
read at scrape time is never stale. A statvfs that fails (the data dir unmounted, say) leaves
the disk series out of that scrape rather than failing it, and is logged once per outage.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["NodeCollector", "register_node_metrics", "tidelog_version"]

log = logging.getLogger("tidelog.node")


def tidelog_version() -> str:
    """The installed tidelog package's version, or "unknown" (running from a bare checkout)."""
    try:
        return importlib.metadata.version("tidelog")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class NodeCollector(Collector):
    """The ``tidelog_node_`` series of one node."""

    def __init__(self, data_dir: str | os.PathLike[str], *, node_id: int,
                 roles: Iterable[str], version: str | None = None) -> None:
        self._data_dir = os.fspath(data_dir)
        self._info = [str(node_id), ",".join(sorted(roles)),
                      tidelog_version() if version is None else version]
        self._statvfs_failing = False

    def describe(self) -> list[Metric]:
        # Names only (the registry checks them for clashes): no statvfs when registering.
        return list(self._families((0, 0)))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self._disk())

    def _disk(self) -> tuple[int, int] | None:
        """(free, capacity) bytes of the data dir's file system, or None when statvfs fails."""
        try:
            st = os.statvfs(self._data_dir)
        except OSError as error:
            if not self._statvfs_failing:
                log.warning("node metrics: statvfs of data dir %s failed, no disk series until "
                            "it works again: %s", self._data_dir, error)
            self._statvfs_failing = True
            return None
        self._statvfs_failing = False
        return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize

    def _families(self, disk: tuple[int, int] | None) -> Iterator[Metric]:
        p = "tidelog_node_"
        info = GaugeMetricFamily(p + "info", "1, labelled with the node's id, roles and Tidelog "
                                 "version", labels=["id", "roles", "version"])
        info.add_metric(self._info, 1)
        yield info
        if disk is None:
            return
        free, capacity = disk
        yield GaugeMetricFamily(p + "data_dir_free_bytes", "bytes an unprivileged process may "
                                "still write on the data dir's file system (statvfs f_bavail)",
                                value=free)
        yield GaugeMetricFamily(p + "data_dir_capacity_bytes", "size of the data dir's file "
                                "system in bytes (statvfs f_blocks)", value=capacity)


def register_node_metrics(registry: CollectorRegistry, data_dir: str | os.PathLike[str], *,
                          node_id: int, roles: Iterable[str]) -> None:
    """Register the node collector, ProcessCollector and PlatformCollector on ``registry`` (the
    node's own, not prometheus_client's global one, which a node's /metrics does not serve)."""
    registry.register(NodeCollector(data_dir, node_id=node_id, roles=roles))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
