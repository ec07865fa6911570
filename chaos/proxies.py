"""Network faults for chaos tests: a Toxiproxy server, one proxy per link, and helpers that set
toxics through toxiproxy-python (DESIGN.md section 10).

    from tidelog.chaos import proxies

    with proxies.toxiproxy() as server:                      # a real toxiproxy-server if on PATH
        link = proxies.create_link("client-b1", upstream=("127.0.0.1", 9092))
        host, port = proxies.address(link)                   # clients connect here instead
        with proxies.faults():                               # everything reset on exit
            proxies.latency(link, 100, jitter_ms=10)         # +100 ms ± 10 server -> client
            proxies.timeout(link)                            # stall both ways, keep connections
            proxies.cut(link)                                # drop connections, refuse new ones
            proxies.heal(link)                               # enable again, remove its toxics

toxiproxy-python keeps the server's address in class-level globals, so one server at a time per
process: starting one points the client at it. Toxic helpers take `stream` ("upstream" is client
to server, "downstream" server to client, "both"); they default to Toxiproxy's "downstream",
except timeout, which defaults to "both" because a stall one way only is not a partition. They
set rather than add: calling latency() again on a link changes its latency (a toxic update, so
open connections see it). Each returns the names of the toxics it set.
"""

from __future__ import annotations

import contextlib
import json
import select
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from toxiproxy import Proxy, Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import NotFound, ProxyExists

from tidelog.chaos.toxiproxy import ToxiproxyServer

__all__ = [
    "Stream",
    "ToxiproxyHandle",
    "address",
    "bandwidth",
    "create_link",
    "cut",
    "faults",
    "heal",
    "latency",
    "limit_data",
    "remove",
    "reset_peer",
    "slicer",
    "slow_close",
    "start_toxiproxy",
    "timeout",
    "toxiproxy",
]

Stream = Literal["upstream", "downstream", "both"]
Kind = Literal["real", "process", "thread"]

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
POLL_INTERVAL_S = 0.05
REAL_BINARY = "toxiproxy-server"
_REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ToxiproxyHandle:
    """A running Toxiproxy-compatible server: real (a toxiproxy-server process), or ours in a
    child process or on a thread of this process."""

    host: str
    port: int
    kind: Kind
    process: subprocess.Popen[str] | None = None
    server: ToxiproxyServer | None = None

    def use(self) -> Toxiproxy:
        """Points toxiproxy-python (process-wide) at this server and returns a client."""
        client = Toxiproxy()
        client.update_api_consumer(self.host, self.port)
        return client

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.process is not None:
            _stop_process(self.process)
            self.process = None


def start_toxiproxy(*, host: str = "127.0.0.1", port: int = 0, real: bool | None = None,
                    embedded: Literal["process", "thread"] = "process",
                    seed: int | None = None) -> ToxiproxyHandle:
    """Starts a server and points toxiproxy-python at it.

    real=None uses `toxiproxy-server` when it is on PATH (DESIGN.md), else ours; True requires
    it; False always uses ours. Ours runs as a child process by default, so that proxying does
    not compete for this process's GIL with the test's own clients; "thread" starts faster and
    is what the server's unit tests use. `seed` (ours only) fixes toxicity draws and jitter.
    """
    binary = shutil.which(REAL_BINARY) if real is not False else None
    if real and binary is None:
        raise FileNotFoundError(f"{REAL_BINARY} is not on PATH")
    if binary is not None:
        handle = _start_real(binary, host, port or _free_port(host))
    elif embedded == "thread":
        server = ToxiproxyServer(host, port, seed=seed).start(START_TIMEOUT_S)
        handle = ToxiproxyHandle(server.host, server.port, "thread", server=server)
    else:
        handle = _start_child(host, port, seed)
    handle.use()
    return handle


@contextlib.contextmanager
def toxiproxy(**kwargs: Any) -> Iterator[ToxiproxyHandle]:
    """start_toxiproxy() for a `with` block: every proxy is destroyed and the server stopped
    at the end."""
    handle = start_toxiproxy(**kwargs)
    try:
        yield handle
    finally:
        try:
            handle.use().destroy_all()
        finally:
            handle.stop()


def _start_real(binary: str, host: str, port: int) -> ToxiproxyHandle:
    # The real server logs every connection at INFO; its output would bury the test's own.
    process = subprocess.Popen([binary, "-host", host, "-port", str(port)], text=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{binary} exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return ToxiproxyHandle(host, port, "real", process=process)
        time.sleep(POLL_INTERVAL_S)
    _stop_process(process)
    raise TimeoutError(f"{binary} did not listen on {host}:{port} in {START_TIMEOUT_S} s")


def _start_child(host: str, port: int, seed: int | None) -> ToxiproxyHandle:
    command = [sys.executable, "-m", "tidelog.chaos.toxiproxy", "--host", host, "--port", str(port)]
    if seed is not None:
        command += ["--seed", str(seed)]
    process = subprocess.Popen(command, cwd=_REPO_ROOT, text=True, stdout=subprocess.PIPE)
    assert process.stdout is not None
    # The child prints one line, {"api": "host:port"}, once it listens.
    readable, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
    line = process.stdout.readline() if readable else ""
    if not line:
        _stop_process(process)
        raise RuntimeError(f"toxiproxy server process did not start (exit {process.returncode})")
    api_host, _, api_port = json.loads(line)["api"].rpartition(":")
    return ToxiproxyHandle(api_host, int(api_port), "process", process=process)


def _stop_process(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_S)
    if process.stdout is not None:
        process.stdout.close()


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------------------------------------
# Links and toxics
# ----------------------------------------------------------------------------------------------


def create_link(name: str, upstream: str | tuple[str, int], *,
                listen: str = "127.0.0.1:0") -> Proxy:
    """Creates the proxy `name` in front of `upstream` (replacing one of that name)."""
    if isinstance(upstream, tuple):
        upstream = f"{upstream[0]}:{upstream[1]}"
    client = Toxiproxy()
    existing = client.get_proxy(name)
    if existing is not None:
        existing.destroy()
    return client.create(upstream=upstream, name=name, listen=listen)


def address(proxy: Proxy) -> tuple[str, int]:
    """Where clients connect to go through `proxy`."""
    host, _, port = str(proxy.listen).rpartition(":")
    return host.strip("[]"), int(port)


def _streams(stream: Stream) -> tuple[str, ...]:
    if stream == "both":
        return ("upstream", "downstream")
    if stream not in ("upstream", "downstream"):
        raise ValueError(f"stream must be upstream, downstream or both, not {stream!r}")
    return (stream,)


def _set_toxic(proxy: Proxy, toxic_type: str, stream: Stream, attributes: dict[str, int],
               toxicity: float) -> list[str]:
    names = []
    for direction in _streams(stream):
        name = f"{toxic_type}_{direction}"
        try:
            proxy.add_toxic(type=toxic_type, stream=direction, name=name, toxicity=toxicity,
                            attributes=attributes)
        except ProxyExists:
            # 409: it is there already, so update it in place (the client has no call for
            # this; the route is Toxiproxy's own).
            APIConsumer.post(f"/proxies/{proxy.name}/toxics/{name}",
                             json={"attributes": attributes, "toxicity": toxicity})
        names.append(name)
    return names


def latency(proxy: Proxy, ms: int, jitter_ms: int = 0, *, stream: Stream = "downstream",
            toxicity: float = 1.0) -> list[str]:
    """Delays every chunk by ms ± jitter_ms (counted from when the proxy read it)."""
    return _set_toxic(proxy, "latency", stream, {"latency": ms, "jitter": jitter_ms}, toxicity)


def bandwidth(proxy: Proxy, kb_s: int, *, stream: Stream = "downstream",
              toxicity: float = 1.0) -> list[str]:
    """Limits each connection to kb_s KB/s (1 KB = 1000 bytes) per direction."""
    return _set_toxic(proxy, "bandwidth", stream, {"rate": kb_s}, toxicity)


def timeout(proxy: Proxy, ms: int = 0, *, stream: Stream = "both",
            toxicity: float = 1.0) -> list[str]:
    """Stops all data; closes each connection after ms (0: holds until removed). Our server
    delivers the held bytes when the toxic goes; the real one drops them (docs/decisions.md)."""
    return _set_toxic(proxy, "timeout", stream, {"timeout": ms}, toxicity)


def reset_peer(proxy: Proxy, timeout_ms: int = 0, *, stream: Stream = "downstream",
               toxicity: float = 1.0) -> list[str]:
    """Resets (TCP RST) each connection timeout_ms after the next data in `stream`."""
    return _set_toxic(proxy, "reset_peer", stream, {"timeout": timeout_ms}, toxicity)


def slow_close(proxy: Proxy, delay_ms: int, *, stream: Stream = "downstream",
               toxicity: float = 1.0) -> list[str]:
    """Delays passing on the end of the stream (FIN) by delay_ms."""
    return _set_toxic(proxy, "slow_close", stream, {"delay": delay_ms}, toxicity)


def slicer(proxy: Proxy, average_size: int, size_variation: int = 0, delay_us: int = 0, *,
           stream: Stream = "downstream", toxicity: float = 1.0) -> list[str]:
    """Splits data into pieces of average_size ± size_variation bytes, delay_us apart."""
    attributes = {"average_size": average_size, "size_variation": size_variation,
                  "delay": delay_us}
    return _set_toxic(proxy, "slicer", stream, attributes, toxicity)


def limit_data(proxy: Proxy, nbytes: int, *, stream: Stream = "downstream",
               toxicity: float = 1.0) -> list[str]:
    """Closes each connection once nbytes have passed in `stream`."""
    return _set_toxic(proxy, "limit_data", stream, {"bytes": nbytes}, toxicity)


def remove(proxy: Proxy, names: list[str]) -> None:
    """Removes the named toxics; ones already gone are fine."""
    for name in names:
        with contextlib.suppress(NotFound):
            proxy.destroy_toxic(name)


def cut(*proxies: Proxy) -> None:
    """Disables the links: open connections are dropped and new ones refused."""
    for proxy in proxies:
        proxy.disable()


def heal(*proxies: Proxy) -> None:
    """Enables the links again (same address) and removes their toxics; with no argument,
    every proxy on the server (Toxiproxy's reset)."""
    if not proxies:
        Toxiproxy().reset()
        return
    for proxy in proxies:
        proxy.enable()
        remove(proxy, list(proxy.toxics()))


@contextlib.contextmanager
def faults() -> Iterator[Toxiproxy]:
    """A block whose faults never outlive it: on the way out, however it ends, every proxy is
    enabled again and every toxic removed."""
    client = Toxiproxy()
    try:
        yield client
    finally:
        client.reset()
