"""Which links a network partition cuts: shapes in, a set of links out (pure: no I/O, no clock).

A cluster is a set of :class:`Node` s (controllers and brokers) and the directed links that
exist between them: ``(source, target)`` means ``source`` opens connections to ``target``
(a broker to each controller and to each other broker; a controller's Raft connections to the
other controllers). A partition is a *grudge*, Jepsen's word: which pairs of nodes may no longer
talk. :func:`plan_partition` turns a shape into its grudge and returns every existing link whose
two ends hold one, in either direction: cutting a link ends its connections both ways.

Shapes (frozen dataclasses, so a schedule can hold them and tests compare them):

* :class:`Isolate` ``(node)``: one node alone, every link to and from it cut;
* :class:`IsolateActiveController`: the same for whichever controller is active (Raft leader)
  when the fault starts: the caller passes ``active_controller``;
* :class:`BrokerFromControllers` ``(broker)``: the broker loses every controller but keeps the
  other brokers (its replication goes on, its heartbeats do not);
* :class:`MajorityMinority` ``(minority)``: two sides; the minority holds fewer than half of the
  controllers (so the majority side keeps a quorum) and at least one node;
* :class:`Bridge` ``(left, bridge, right)``: left and right cannot talk, the bridge node talks
  to both (Jepsen's bridge: each side sees a majority through the bridge). Every node is placed.

:func:`majority_minority` and :func:`bridge` pick the nodes of a shape from a seeded
``random.Random`` (the random-mix scenario). Bad shapes (an unknown node, sides that overlap or
leave a node out, a minority that is not one) raise :class:`ValueError` naming the problem.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Set
from dataclasses import dataclass
from typing import Literal, TypeAlias

__all__ = [
    "Bridge",
    "BrokerFromControllers",
    "Isolate",
    "IsolateActiveController",
    "Link",
    "MajorityMinority",
    "Node",
    "Shape",
    "bridge",
    "grudge",
    "majority_minority",
    "plan_partition",
]

Role: TypeAlias = Literal["controller", "broker"]
#: (source, target): ``source`` opens connections to ``target``.
Link: TypeAlias = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Node:
    """A cluster node by name and roles (a combined node has both)."""

    name: str
    roles: frozenset[Role]

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles


@dataclass(frozen=True, slots=True)
class Isolate:
    node: str


@dataclass(frozen=True, slots=True)
class IsolateActiveController:
    pass


@dataclass(frozen=True, slots=True)
class BrokerFromControllers:
    broker: str


@dataclass(frozen=True, slots=True)
class MajorityMinority:
    minority: frozenset[str]


@dataclass(frozen=True, slots=True)
class Bridge:
    left: frozenset[str]
    bridge: str
    right: frozenset[str]


Shape: TypeAlias = Isolate | IsolateActiveController | BrokerFromControllers | \
    MajorityMinority | Bridge


def plan_partition(shape: Shape, nodes: Iterable[Node], links: Iterable[Link], *,
                   active_controller: str | None = None) -> frozenset[Link]:
    """The links of ``links`` that ``shape`` cuts (see the module docstring)."""
    pairs = grudge(shape, nodes, active_controller=active_controller)
    return frozenset(link for link in links if frozenset(link) in pairs)


def grudge(shape: Shape, nodes: Iterable[Node], *,
           active_controller: str | None = None) -> frozenset[frozenset[str]]:
    """The unordered pairs of nodes that ``shape`` keeps apart."""
    by_name = {node.name: node for node in nodes}
    names = set(by_name)
    if isinstance(shape, IsolateActiveController):
        if active_controller is None:
            raise ValueError("isolating the active controller needs to know which it is")
        _check_known(by_name, [active_controller], "active controller")
        if not by_name[active_controller].is_controller:
            raise ValueError(f"{active_controller} is not a controller")
        shape = Isolate(active_controller)
    if isinstance(shape, Isolate):
        _check_known(by_name, [shape.node], "node to isolate")
        return _between({shape.node}, names - {shape.node})
    if isinstance(shape, BrokerFromControllers):
        _check_known(by_name, [shape.broker], "broker")
        if not by_name[shape.broker].is_broker or by_name[shape.broker].is_controller:
            raise ValueError(f"{shape.broker} is not a broker-only node")
        controllers = {n.name for n in by_name.values() if n.is_controller}
        return _between({shape.broker}, controllers)
    if isinstance(shape, MajorityMinority):
        _check_minority(by_name, shape.minority)
        return _between(set(shape.minority), names - shape.minority)
    return _bridge_grudge(by_name, shape)


def _bridge_grudge(by_name: dict[str, Node], shape: Bridge) -> frozenset[frozenset[str]]:
    _check_known(by_name, [*shape.left, shape.bridge, *shape.right], "bridge node")
    if not shape.left or not shape.right:
        raise ValueError("a bridge needs nodes on both sides")
    if shape.left & shape.right or shape.bridge in shape.left | shape.right:
        raise ValueError("a bridge's sides and its bridge node must not overlap")
    missing = set(by_name) - shape.left - shape.right - {shape.bridge}
    if missing:
        raise ValueError(f"a bridge must place every node; not placed: {sorted(missing)}")
    return _between(set(shape.left), set(shape.right))


def _check_minority(by_name: dict[str, Node], minority: Set[str]) -> None:
    _check_known(by_name, minority, "minority node")
    controllers = {n.name for n in by_name.values() if n.is_controller}
    if not minority or minority >= set(by_name):
        raise ValueError("a minority holds at least one node and not all of them")
    if 2 * len(minority & controllers) >= len(controllers):
        raise ValueError(f"a minority holds fewer than half of the {len(controllers)} "
                         f"controllers, not {len(minority & controllers)}")


def _check_known(by_name: dict[str, Node], names: Iterable[str], what: str) -> None:
    unknown = sorted(set(names) - set(by_name))
    if unknown:
        raise ValueError(f"unknown {what}: {', '.join(unknown)} (nodes: {sorted(by_name)})")


def _between(side: set[str], other: set[str]) -> frozenset[frozenset[str]]:
    return frozenset(frozenset((a, b)) for a in side for b in other if a != b)


def majority_minority(nodes: Iterable[Node], rng: random.Random) -> MajorityMinority:
    """A random split: the minority takes the most controllers it can without a quorum
    ((c - 1) // 2) and as many of the broker-only nodes ((b - 1) // 2), at least one node."""
    controllers = sorted(n.name for n in nodes if n.is_controller)
    brokers = sorted(n.name for n in nodes if n.is_broker and not n.is_controller)
    minority = rng.sample(controllers, (len(controllers) - 1) // 2)
    minority += rng.sample(brokers, (len(brokers) - 1) // 2) if brokers else []
    if not minority:
        if not brokers:
            raise ValueError("one controller and no broker cannot be split")
        minority = [rng.choice(brokers)]
    return MajorityMinority(frozenset(minority))


def bridge(nodes: Iterable[Node], rng: random.Random) -> Bridge:
    """Jepsen's bridge, centred on the quorum: a random controller is the bridge; the other
    controllers, then the brokers, are dealt to the two sides in turn, so each side holds one
    controller of three and reaches a majority only through the bridge."""
    controllers = [n.name for n in sorted(nodes, key=lambda n: n.name) if n.is_controller]
    brokers = sorted(n.name for n in nodes if n.name not in controllers)
    if len(controllers) < 3:
        raise ValueError(f"a bridge needs at least 3 controllers, not {len(controllers)}")
    rng.shuffle(controllers)
    rng.shuffle(brokers)
    others = controllers[1:] + brokers
    return Bridge(frozenset(others[0::2]), controllers[0], frozenset(others[1::2]))
