"""The Toxiproxy-compatible server as a process, `python -m tidelog.chaos.toxiproxy`
(chaos/toxiproxy/__main__.py), started and stopped by chaos/proxies.py's helpers as chaos runs
start it, and driven through toxiproxy-python.

Checked: the helpers point the client at the child, create and replace a link, set a toxic on
it and take it off on leaving faults(), and stop the child on the way out; a port already taken
ends the process at once with exit 1 and one line saying why. The upstream is a threaded echo
server on 127.0.0.1; the child listens on 127.0.0.1 only.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy_testkit import (
    IO_TIMEOUT_S,
    Upstream,
    connect,
    echo_handler,
    kept_api_consumer,
    roundtrip,
    upstream,
)

from tidelog.chaos import proxies

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def echo() -> Iterator[Upstream]:
    with upstream(echo_handler) as running:
        yield running


def test_helpers_with_a_child_process_server(echo: Upstream) -> None:
    with kept_api_consumer():
        with proxies.toxiproxy(real=False, embedded="process", seed=1) as handle:
            assert handle.kind == "process" and (APIConsumer.host, APIConsumer.port) == (
                handle.host, handle.port)
            link = proxies.create_link("b1", ("127.0.0.1", echo.port))
            link = proxies.create_link("b1", echo.address)  # replaces the first
            assert list(Toxiproxy().proxies()) == ["b1"]
            with connect(link) as sock, proxies.faults():
                proxies.latency(link, 150, stream="both")
                assert roundtrip(sock) >= 0.29
            assert link.toxics() == {}
            process = handle.process
            assert process is not None
        assert process.poll() is not None  # stopped


def test_a_port_taken_ends_the_process_with_one_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "tidelog.chaos.toxiproxy", "--host", "127.0.0.1",
             "--port", str(port)],
            cwd=REPO, capture_output=True, text=True, timeout=IO_TIMEOUT_S * 4, check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("toxiproxy server: ") and done.stderr.count("\n") == 1
