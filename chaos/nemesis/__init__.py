"""Faults (Jepsen's nemeses), each with its start and its heal, for controllers and brokers.

* fault.py: the :class:`Fault` protocol the scenario runner drives (``start``, ``heal``,
  ``name``, ``description``, ``targets``, ``window``, ``duration_s``) and :class:`FaultBase`;
* plan.py: pure: which links a partition shape cuts (:func:`plan_partition`);
* process.py: kill -9, SIGSTOP/SIGCONT, graceful restart, whole-cluster kill -9, through
  tidelog.local_cluster;
* network.py: the cluster's links through Toxiproxy-compatible proxies (chaos/router.py routes
  each connection onto its link) and the partition and slow/flaky-link faults;
* topology.py: the nodes and the active controller of a running cluster.

docs/chaos.md ("Faults") describes each fault, what it does and how it heals.
"""

from tidelog.chaos.nemesis.fault import Fault, FaultBase, FaultStateError, Window
from tidelog.chaos.nemesis.network import LinkToxic, Partition, ProxiedNetwork, routed_overrides
from tidelog.chaos.nemesis.plan import (
    Bridge,
    BrokerFromControllers,
    Isolate,
    IsolateActiveController,
    MajorityMinority,
    Node,
    bridge,
    majority_minority,
    plan_partition,
)
from tidelog.chaos.nemesis.process import GracefulRestart, Kill, KillCluster, Pause

__all__ = [
    "Bridge",
    "BrokerFromControllers",
    "Fault",
    "FaultBase",
    "FaultStateError",
    "GracefulRestart",
    "Isolate",
    "IsolateActiveController",
    "Kill",
    "KillCluster",
    "LinkToxic",
    "MajorityMinority",
    "Node",
    "Partition",
    "Pause",
    "ProxiedNetwork",
    "Window",
    "bridge",
    "majority_minority",
    "plan_partition",
    "routed_overrides",
]
