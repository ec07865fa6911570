"""Ports a local cluster's nodes listen on: picked outside the kernel's ephemeral range, so an
outgoing connection cannot take one between the pick and the node's bind (a chaos smoke test
once failed a broker's start with "Address already in use" that way)."""

from __future__ import annotations

import random
import socket

from tidelog.local_cluster import (
    HOST,
    LISTEN_PORTS_LOW,
    ephemeral_port_range,
    free_ports,
    listen_port_range,
)


def test_listen_ports_come_from_outside_the_ephemeral_range() -> None:
    assert listen_port_range((32768, 60999)) == range(LISTEN_PORTS_LOW, 32768)
    # A range starting low leaves room only above it.
    assert listen_port_range((1024, 40000)) == range(40001, 65536)
    # No room on either side: nothing to pick from (free_ports then binds port 0).
    assert len(listen_port_range((1024, 65535))) == 0


def test_the_ephemeral_range_is_read_or_defaults(tmp_path) -> None:
    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    assert ephemeral_port_range(str(f)) == (40000, 50000)
    assert ephemeral_port_range(str(tmp_path / "missing")) == (32768, 60999)
    f.write_text("garbage\n")
    assert ephemeral_port_range(str(f)) == (32768, 60999)


def test_free_ports_are_distinct_bindable_and_not_ephemeral() -> None:
    low, high = ephemeral_port_range()
    ports = free_ports(24, rng=random.Random(7))
    assert len(set(ports)) == 24
    if len(listen_port_range((low, high))) >= 24 * 4:
        assert all(not low <= p <= high for p in ports), ports
    for port in ports:
        with socket.socket() as s:
            s.bind((HOST, port))


def test_a_port_in_use_is_skipped() -> None:
    # The same seed picks the same first candidate; with it held, another is returned.
    first = free_ports(1, rng=random.Random(11))[0]
    with socket.socket() as held:
        held.bind((HOST, first))
        held.listen()
        again = free_ports(1, rng=random.Random(11))[0]
    assert again != first
