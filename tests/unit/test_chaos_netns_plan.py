"""The netns mode's pure planner (chaos/netns/plan.py): names, addresses, the ``ip``/``tc``
commands of set-up, cuts, netem and heal, the subnet picked clear of the host's networks, and
which namespaces count as a run's leftovers. No command runs: these are argv lists."""

from __future__ import annotations

import pytest

from tidelog.chaos.netns.plan import (
    PREFIX,
    NetnsPlan,
    cut_commands,
    heal_commands,
    leftovers,
    netem_commands,
    pick_subnet,
    run_of,
)

NODES = ("controller-1", "controller-2", "broker-1")


def _plan() -> NetnsPlan:
    return NetnsPlan("0a1b2c3d", "10.213.7.0/24", NODES)


def test_names_and_addresses() -> None:
    plan = _plan()
    assert plan.switch == "tidelog-0a1b2c3d-switch"
    assert plan.client == "tidelog-0a1b2c3d-client"
    assert plan.namespace("broker-1") == "tidelog-0a1b2c3d-broker-1"
    assert plan.namespaces() == ["tidelog-0a1b2c3d-switch", "tidelog-0a1b2c3d-client",
                                 "tidelog-0a1b2c3d-controller-1",
                                 "tidelog-0a1b2c3d-controller-2", "tidelog-0a1b2c3d-broker-1"]
    assert plan.address("client") == "10.213.7.10"
    assert [plan.address(n) for n in NODES] == ["10.213.7.11", "10.213.7.12", "10.213.7.13"]
    assert plan.switch_port("client") == "v0" and plan.switch_port("broker-1") == "v3"
    assert plan.exec_prefix("broker-1") == ["ip", "netns", "exec", "tidelog-0a1b2c3d-broker-1"]
    # Interface names live inside namespaces and must fit IFNAMSIZ (15 characters).
    assert all(len(plan.switch_port(n)) <= 15 for n in NODES)


@pytest.mark.parametrize("run_id, subnet, nodes, message", [
    ("XYZ", "10.213.7.0/24", NODES, "8 lowercase hex"),
    ("0a1b2c3d", "10.213.7.0/16", NODES, "private /24"),
    ("0a1b2c3d", "8.8.8.0/24", NODES, "private /24"),
    ("0a1b2c3d", "10.213.7.0/24", ("a", "a"), "distinct"),
    ("0a1b2c3d", "10.213.7.0/24", ("switch",), "not switch or client"),
    ("0a1b2c3d", "10.213.7.0/24", ("Broker 1",), "lowercase"),
])
def test_bad_plans_are_refused(run_id: str, subnet: str, nodes: tuple[str, ...],
                               message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NetnsPlan(run_id, subnet, nodes)


def test_an_unknown_node_is_named() -> None:
    with pytest.raises(ValueError, match="no node 'broker-9'"):
        _plan().address("broker-9")


def test_setup_builds_the_switch_first_and_attaches_every_namespace() -> None:
    commands = _plan().setup_commands()
    assert commands[0] == ["ip", "netns", "add", "tidelog-0a1b2c3d-switch"]
    assert ["ip", "-n", "tidelog-0a1b2c3d-switch", "link", "add", "br0", "type",
            "bridge"] in commands
    assert ["ip", "-n", "tidelog-0a1b2c3d-switch", "link", "add", "v3", "type", "veth", "peer",
            "name", "eth0", "netns", "tidelog-0a1b2c3d-broker-1"] in commands
    assert ["ip", "-n", "tidelog-0a1b2c3d-broker-1", "addr", "add", "10.213.7.13/24", "dev",
            "eth0"] in commands
    assert ["ip", "-n", "tidelog-0a1b2c3d-client", "link", "set", "lo", "up"] in commands
    # Nothing outside the run's namespaces: every command names one of them.
    for argv in commands:
        assert any(ns in argv for ns in _plan().namespaces()), argv
    # No route anywhere (no way out), and the client gets no tc: its traffic is never faulted.
    assert not [argv for argv in commands if "route" in argv]
    assert not [argv for argv in commands
                if argv[0] == "tc" and "tidelog-0a1b2c3d-client" in argv]
    drop = ["tc", "-n", "tidelog-0a1b2c3d-broker-1", "qdisc", "add", "dev", "eth0", "parent",
            "1:2", "handle", "2:", "pfifo", "limit", "0"]
    assert drop in commands
    # Each namespace exists before a command uses it.
    created: set[str] = set()
    for argv in commands:
        if argv[:3] == ["ip", "netns", "add"]:
            created.add(argv[3])
        elif "-n" in argv:
            assert argv[argv.index("-n") + 1] in created, argv


def test_teardown_deletes_every_namespace_switch_last() -> None:
    commands = _plan().teardown_commands()
    assert [argv[3] for argv in commands] == list(reversed(_plan().namespaces()))
    assert all(argv[:3] == ["ip", "netns", "delete"] for argv in commands)


def test_a_cut_drops_both_ways_at_the_slot_priority() -> None:
    commands = cut_commands(_plan(), [("broker-1", "controller-1"), ("controller-1", "broker-1")],
                            3)
    assert commands == [
        ["tc", "-n", "tidelog-0a1b2c3d-broker-1", "filter", "add", "dev", "eth0", "parent",
         "1:", "protocol", "ip", "prio", "103", "u32", "match", "ip", "dst", "10.213.7.11/32",
         "flowid", "1:2"],
        ["tc", "-n", "tidelog-0a1b2c3d-controller-1", "filter", "add", "dev", "eth0", "parent",
         "1:", "protocol", "ip", "prio", "103", "u32", "match", "ip", "dst", "10.213.7.13/32",
         "flowid", "1:2"]]
    with pytest.raises(ValueError, match="slot"):
        cut_commands(_plan(), [("broker-1", "controller-1")], 0)


def test_netem_delays_both_directions_and_heal_removes_it() -> None:
    plan = _plan()
    commands = netem_commands(plan, "broker-1", ["controller-1", "controller-2"], 2,
                              delay_ms=200, jitter_ms=100, loss_percent=5)
    qdiscs = [argv for argv in commands if "netem" in argv]
    assert len(qdiscs) == 3  # the node's namespace and each peer's
    assert qdiscs[0][-6:] == ["netem", "delay", "200ms", "100ms", "loss", "5%"]
    filters = [(argv[2], argv[-3]) for argv in commands if "filter" in argv]
    assert filters == [("tidelog-0a1b2c3d-broker-1", "10.213.7.11/32"),
                       ("tidelog-0a1b2c3d-controller-1", "10.213.7.13/32"),
                       ("tidelog-0a1b2c3d-broker-1", "10.213.7.12/32"),
                       ("tidelog-0a1b2c3d-controller-2", "10.213.7.13/32")]
    assert all(argv[-1] == "1:102" for argv in commands if "filter" in argv)
    heal = heal_commands(plan, ["broker-1", "controller-1", "controller-2"], 2, netem=True)
    assert ["tc", "-n", "tidelog-0a1b2c3d-broker-1", "filter", "del", "dev", "eth0", "parent",
            "1:", "prio", "102"] in heal
    assert ["tc", "-n", "tidelog-0a1b2c3d-broker-1", "class", "del", "dev", "eth0", "classid",
            "1:102"] in heal
    with pytest.raises(ValueError, match="jitter needs a delay"):
        netem_commands(plan, "broker-1", ["controller-1"], 1, jitter_ms=5)
    with pytest.raises(ValueError, match="peers other than"):
        netem_commands(plan, "broker-1", ["broker-1"], 1, delay_ms=5)


def test_the_subnet_avoids_the_hosts_networks() -> None:
    assert pick_subnet(["127.0.0.1/8", "192.0.2.2/24"]) == "10.213.0.0/24"
    # A host on 10.0.0.0/8 pushes the pick to 192.168.x; a default route overlaps nothing.
    assert pick_subnet(["0.0.0.0/0", "10.0.0.0/8"]).startswith("192.168.")
    assert pick_subnet(["10.213.0.5/24"], ["10.213.0.0/24", "10.213.7.0/24"]) == \
        "10.213.7.0/24"
    with pytest.raises(ValueError, match="overlaps"):
        pick_subnet(["10.0.0.0/8"], ["10.213.0.0/24"])


def test_leftovers_are_only_the_modes_own_namespaces() -> None:
    names = ["tidelog-0a1b2c3d-switch", "tidelog-0a1b2c3d-broker-1", "tidelog-ffffffff-client",
             "tidelog-notarun-x", "tidelog-0a1b2c3d", "someone-elses", "tidelogger"]
    assert leftovers(names) == ["tidelog-0a1b2c3d-broker-1", "tidelog-ffffffff-client",
                                "tidelog-0a1b2c3d-switch"]
    assert leftovers(names, "0a1b2c3d") == ["tidelog-0a1b2c3d-broker-1",
                                            "tidelog-0a1b2c3d-switch"]
    assert run_of(f"{PREFIX}0a1b2c3d-client") == "0a1b2c3d"
    assert run_of("tidelog-0a1b2c3d") is None
