"""The partition planner (chaos/nemesis/plan.py) and the router's Raft HELLO parser, pure.

Every shape on a 3 controller + 3 broker topology whose links are the ones a routed cluster has
(each broker to every controller and every other broker, each controller to every other
controller): the exact set of links cut, written out by hand. Then the seeded pickers
(majority_minority, bridge) give valid shapes for many seeds, bad shapes are refused with a
message naming the problem, and the Fault bookkeeping refuses a double start or early heal.
"""

from __future__ import annotations

import random

import pytest

from tidelog.chaos.nemesis.fault import FaultBase, FaultStateError
from tidelog.chaos.nemesis.plan import (
    Bridge,
    BrokerFromControllers,
    Isolate,
    IsolateActiveController,
    Link,
    MajorityMinority,
    Node,
    bridge,
    grudge,
    majority_minority,
    plan_partition,
)
from tidelog.chaos.router import parse_raft_hello

C = ["c1", "c2", "c3"]
B = ["b1", "b2", "b3"]
NODES = [Node(c, frozenset({"controller"})) for c in C] + \
    [Node(b, frozenset({"broker"})) for b in B]
LINKS: set[Link] = {(b, t) for b in B for t in C + B if t != b} | \
    {(c, t) for c in C for t in C if t != c}


def both(a: str, b: str) -> set[Link]:
    return {(a, b), (b, a)} & LINKS


def test_isolate_cuts_every_link_of_the_node_both_ways() -> None:
    cut = plan_partition(Isolate("b2"), NODES, LINKS)
    assert cut == {("b2", t) for t in ["c1", "c2", "c3", "b1", "b3"]} | {("b1", "b2"),
                                                                         ("b3", "b2")}
    assert plan_partition(Isolate("c1"), NODES, LINKS) == \
        {("c1", "c2"), ("c1", "c3"), ("c2", "c1"), ("c3", "c1"), ("b1", "c1"), ("b2", "c1"),
         ("b3", "c1")}


def test_isolate_active_controller_isolates_the_one_named() -> None:
    cut = plan_partition(IsolateActiveController(), NODES, LINKS, active_controller="c2")
    assert cut == plan_partition(Isolate("c2"), NODES, LINKS)
    with pytest.raises(ValueError, match="needs to know which"):
        plan_partition(IsolateActiveController(), NODES, LINKS)
    with pytest.raises(ValueError, match="b1 is not a controller"):
        plan_partition(IsolateActiveController(), NODES, LINKS, active_controller="b1")


def test_broker_from_controllers_keeps_its_broker_links() -> None:
    cut = plan_partition(BrokerFromControllers("b3"), NODES, LINKS)
    assert cut == {("b3", "c1"), ("b3", "c2"), ("b3", "c3")}
    with pytest.raises(ValueError, match="c1 is not a broker-only node"):
        plan_partition(BrokerFromControllers("c1"), NODES, LINKS)


def test_majority_minority_cuts_every_link_across() -> None:
    cut = plan_partition(MajorityMinority(frozenset({"c3", "b1"})), NODES, LINKS)
    across = set()
    for a in ("c3", "b1"):
        for other in ("c1", "c2", "b2", "b3"):
            across |= both(a, other)
    assert cut == across
    assert not cut & both("c3", "b1"), "the minority's own link stays"


@pytest.mark.parametrize(("minority", "problem"), [
    ({"c1", "c2"}, "fewer than half of the 3 controllers, not 2"),
    (set(), "at least one node"),
    (set(C + B), "not all of them"),
    ({"c9"}, "unknown minority node: c9"),
])
def test_a_bad_minority_is_refused(minority: set[str], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        plan_partition(MajorityMinority(frozenset(minority)), NODES, LINKS)


def test_bridge_splits_the_sides_and_keeps_the_bridge() -> None:
    shape = Bridge(frozenset({"c1", "b1", "b3"}), "c2", frozenset({"c3", "b2"}))
    cut = plan_partition(shape, NODES, LINKS)
    expected = set()
    for a in ("c1", "b1", "b3"):
        for b in ("c3", "b2"):
            expected |= both(a, b)
    assert cut == expected
    assert not any("c2" in link for link in cut), "the bridge reaches everyone"


@pytest.mark.parametrize(("shape", "problem"), [
    (Bridge(frozenset({"c1"}), "c2", frozenset({"c3", "b1", "b2"})), "not placed: \\['b3'\\]"),
    (Bridge(frozenset({"c1", "b1"}), "c1", frozenset({"c3", "b2", "b3", "c2"})), "overlap"),
    (Bridge(frozenset(), "c2", frozenset(C + B) - {"c2"}), "both sides"),
])
def test_a_bad_bridge_is_refused(shape: Bridge, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        plan_partition(shape, NODES, LINKS)


def test_only_existing_links_are_planned() -> None:
    # Controllers never dial brokers: the grudge holds the pair, the plan has no such link.
    assert frozenset({"c1", "b1"}) in grudge(Isolate("c1"), NODES)
    assert ("c1", "b1") not in plan_partition(Isolate("c1"), NODES, LINKS)
    assert plan_partition(Isolate("b1"), NODES, set()) == frozenset()


def test_unknown_node_is_named() -> None:
    with pytest.raises(ValueError, match="unknown node to isolate: b9"):
        plan_partition(Isolate("b9"), NODES, LINKS)


@pytest.mark.parametrize("seed", range(50))
def test_seeded_pickers_give_valid_shapes(seed: int) -> None:
    split = majority_minority(NODES, random.Random(seed))
    assert len(split.minority & set(C)) == 1 and len(split.minority & set(B)) == 1
    assert plan_partition(split, NODES, LINKS)
    shape = bridge(NODES, random.Random(seed))
    assert shape.bridge in C
    assert len(shape.left & set(C)) == 1 and len(shape.right & set(C)) == 1
    assert shape.left | shape.right | {shape.bridge} == set(C + B)
    assert plan_partition(shape, NODES, LINKS)
    assert majority_minority(NODES, random.Random(seed)) == split, "same seed, same shape"


def test_pickers_refuse_what_cannot_be_split() -> None:
    with pytest.raises(ValueError, match="cannot be split"):
        majority_minority([Node("c1", frozenset({"controller"}))], random.Random(0))
    with pytest.raises(ValueError, match="at least 3 controllers"):
        bridge(NODES[:2] + NODES[3:], random.Random(0))


def test_raft_hello_names_the_dialer() -> None:
    dialer, dialled = b"127.0.0.1:4001", b"127.0.0.1:4002"
    body = b"TLRAFT01H" + bytes(32) + bytes([len(dialer)]) + dialer + \
        bytes([len(dialled)]) + dialled
    assert parse_raft_hello(body) == ("127.0.0.1:4001", "127.0.0.1:4002")
    assert parse_raft_hello(body + b"x") is None, "trailing bytes"
    assert parse_raft_hello(body[:-3]) is None, "an address runs past the end"
    assert parse_raft_hello(b"TLRAFT01C" + body[9:]) is None, "not a HELLO"


class _Noop(FaultBase):
    def __init__(self) -> None:
        super().__init__("noop", "does nothing", duration_s=0)
        self.healed = 0

    def _start(self) -> tuple[str, ...]:
        return ("n1",)

    def _heal(self) -> None:
        self.healed += 1


def test_fault_window_and_state() -> None:
    fault = _Noop()
    with pytest.raises(FaultStateError, match="not active"):
        fault.heal()
    fault.start()
    assert fault.targets == ("n1",) and fault.window is not None
    assert fault.window.healed_ns is None
    with pytest.raises(FaultStateError, match="already active"):
        fault.start()
    fault.heal()
    assert fault.healed == 1 and fault.window.healed_ns is not None
    assert fault.window.healed_ns >= fault.window.started_ns
    fault.start()  # a healed fault may run again
    fault.heal()
    assert fault.healed == 2
