"""`tidelog cluster status` lists every port a node listens on, the inter-broker one included
(an operator opening a firewall needs all of them). A laid-out cluster that is not running is
enough: the rows come from its state file."""

from __future__ import annotations

from pathlib import Path

from tidelog.cli.cluster import _status_rows
from tidelog.local_cluster import LocalCluster


def test_status_rows_name_every_port(tmp_path: Path) -> None:
    cluster = LocalCluster.create(tmp_path / "c", controllers=1, brokers=1)
    rows = {row["name"]: row for row in _status_rows(cluster)}
    broker = cluster.nodes["broker-1"]
    controller = cluster.nodes["controller-1"]
    assert rows["broker-1"]["ports"] == (f"broker={broker.broker_port} "
                                         f"inter-broker={broker.inter_broker_port}")
    assert rows["controller-1"]["ports"] == (f"controller={controller.controller_port} "
                                             f"raft={controller.raft_port}")
    assert not rows["broker-1"]["running"]
