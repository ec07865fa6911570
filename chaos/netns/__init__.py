"""The network-namespace mode of the chaos runner: each node in a network namespace of its
own, partitions cut with tc filters and slow or lossy links made with netem.

* plan.py: pure: the names, addresses and ``ip``/``tc`` commands of one run;
* shell.py: runs them, checks the machine can (:func:`unavailable`), and always removes what a
  run created (:func:`namespaces`, :func:`cleanup`);
* faults.py: :class:`NetnsNetwork` (the cluster's nodes placed in their namespaces) and the
  faults, :class:`NetnsPartition` and :class:`NetnsNetem`;
* session.py: ``tidelog chaos run --network netns``: creates the namespaces and runs the
  runner itself again inside the client namespace.

``python -m tidelog.chaos.netns cleanup [RUN_ID]`` removes what a run left behind. docs/chaos.md
("Faults", the netns mode) says what the mode needs, creates and removes.
"""

from tidelog.chaos.netns.faults import NetnsNetem, NetnsNetwork, NetnsPartition
from tidelog.chaos.netns.plan import NetnsPlan
from tidelog.chaos.netns.shell import NetnsError, cleanup, namespaces, unavailable

__all__ = [
    "NetnsError",
    "NetnsNetem",
    "NetnsNetwork",
    "NetnsPartition",
    "NetnsPlan",
    "cleanup",
    "namespaces",
    "unavailable",
]
