"""tidelog/node_metrics.py: the series every node exports, read at scrape time.

What it checks: the data dir's free and capacity bytes are statvfs's (on a real tmp dir), the
info series carries the node id, sorted roles and the package version, a statvfs failure drops
only the disk series and is logged once per outage, and register_node_metrics adds the process
and platform collectors to the node's registry (not the global one).

How: scrapes of a fresh CollectorRegistry through ``generate_latest``, as /metrics does.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shutil
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidelog.node_metrics import NodeCollector, register_node_metrics, tidelog_version

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(registry: CollectorRegistry) -> Samples:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_disk_series_are_the_data_dirs_statvfs(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    registry.register(NodeCollector(tmp_path, node_id=7, roles=["controller", "broker"]))
    found = scrape(registry)
    st = os.statvfs(tmp_path)
    capacity = found[("tidelog_node_data_dir_capacity_bytes", ())]
    assert capacity == st.f_blocks * st.f_frsize > 0
    free = found[("tidelog_node_data_dir_free_bytes", ())]
    # Other processes write too: the free space may have moved a little between the calls.
    assert 0 < free <= capacity
    assert abs(free - st.f_bavail * st.f_frsize) < 64 << 20
    info = (("id", "7"), ("roles", "broker,controller"), ("version", tidelog_version()))
    assert found[("tidelog_node_info", info)] == 1


def test_version_is_the_installed_packages() -> None:
    assert tidelog_version() == importlib.metadata.version("tidelog")


def test_a_failing_statvfs_drops_the_disk_series_only_and_warns_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    registry = CollectorRegistry()
    registry.register(NodeCollector(data_dir, node_id=1, roles=["broker"], version="v"))
    assert ("tidelog_node_data_dir_free_bytes", ()) in scrape(registry)
    shutil.rmtree(data_dir)
    with caplog.at_level(logging.WARNING, logger="tidelog.node"):
        for _ in range(3):
            found = scrape(registry)
            assert ("tidelog_node_data_dir_free_bytes", ()) not in found
            assert ("tidelog_node_data_dir_capacity_bytes", ()) not in found
            info = (("id", "1"), ("roles", "broker"), ("version", "v"))
            assert found[("tidelog_node_info", info)] == 1
    assert len([r for r in caplog.records if "statvfs" in r.getMessage()]) == 1
    data_dir.mkdir()
    assert ("tidelog_node_data_dir_free_bytes", ()) in scrape(registry)


def test_registered_with_the_process_and_platform_collectors(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    register_node_metrics(registry, tmp_path, node_id=3, roles=("controller",))
    names = {name for name, _ in scrape(registry)}
    expected = {"tidelog_node_info", "tidelog_node_data_dir_free_bytes",
                "tidelog_node_data_dir_capacity_bytes", "python_info"}
    if Path("/proc/self/stat").exists():  # ProcessCollector reads /proc (Linux)
        expected |= {"process_cpu_seconds_total", "process_resident_memory_bytes",
                     "process_open_fds", "process_max_fds", "process_start_time_seconds"}
    assert expected <= names
    assert REGISTRY.get_sample_value("tidelog_node_info",
                                     {"id": "3", "roles": "controller",
                                      "version": tidelog_version()}) is None
