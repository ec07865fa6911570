"""The thin shell under chaos/netns/plan.py: runs its ``ip``/``tc`` commands, checks the machine
can, and removes what a run created, also when it failed or was interrupted.

* :func:`unavailable` says in one line why this machine cannot run the mode (not root, no
  ``ip`` or ``tc``, ``ip netns add`` refused, no bridge or veth, no HTB/u32/pfifo, and, when
  asked, no sch_netem), or None: it tries each thing in a probe namespace of its own, removed
  again;
* :func:`new_plan` picks a run id and a private /24 that no address or route of the root
  namespace overlaps (read with ``ip -4 addr``/``ip -4 route``: read only);
* :func:`namespaces` (a context manager) creates a plan's namespaces and always removes them:
  on exit, on an exception or Ctrl-C inside it, and at interpreter exit (atexit) should the
  ``with`` be skipped;
* :func:`cleanup` removes what runs left behind: the processes still inside their
  namespaces (SIGKILL, by pid, from ``ip netns pids``), then the namespaces, whose veths and
  bridge go with them. ``python -m tidelog.chaos.netns cleanup [RUN_ID]`` runs it by hand.

Every command is bounded by :data:`COMMAND_TIMEOUT_S`; a failing one raises
:class:`NetnsError` naming the command and ``ip``/``tc``'s own first line of error.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from tidelog.chaos.netns.plan import PREFIX, NetnsPlan, leftovers, pick_subnet

__all__ = ["NetnsError", "cleanup", "inside", "namespaces", "new_plan", "run", "unavailable"]

COMMAND_TIMEOUT_S = 10.0
#: How long a killed process of a namespace may take to go.
EXIT_TIMEOUT_S = 5.0
NETNS_DIR = Path("/run/netns")


class NetnsError(RuntimeError):
    """An ``ip``/``tc`` command failed."""


def run(argv: Sequence[str], *, timeout_s: float = COMMAND_TIMEOUT_S) -> str:
    """Run one command; its stdout, or NetnsError with its first line of error."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NetnsError(f"`{' '.join(argv)}`: {e}") from None
    if done.returncode != 0:
        first = (done.stderr.strip() or done.stdout.strip() or "no message").splitlines()[0]
        raise NetnsError(f"`{' '.join(argv)}` failed ({done.returncode}): {first}")
    return done.stdout


def run_all(commands: Sequence[Sequence[str]]) -> None:
    for argv in commands:
        run(argv)


def unavailable(*, netem: bool = False) -> str | None:
    """Why this machine cannot run the netns mode (one line), or None when it can."""
    if os.geteuid() != 0:
        return f"the netns mode needs root (network namespaces, tc); running as uid {os.geteuid()}"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the netns mode needs `{tool}` (iproute2) on PATH"
    probe = f"{PREFIX}{secrets.token_hex(4)}-probe"
    steps = [(["ip", "netns", "add", probe], "`ip netns add` fails"),
             (["ip", "-n", probe, "link", "add", "b0", "type", "bridge"], "no bridge devices"),
             (["ip", "-n", probe, "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
              "no veth devices"),
             (["tc", "-n", probe, "qdisc", "add", "dev", "v0", "root", "handle", "1:", "htb",
               "default", "1"], "no HTB qdisc (sch_htb)"),
             (["tc", "-n", probe, "class", "add", "dev", "v0", "parent", "1:", "classid", "1:2",
               "htb", "rate", "1gbit"], "no HTB classes"),
             (["tc", "-n", probe, "qdisc", "add", "dev", "v0", "parent", "1:2", "handle", "2:",
               "pfifo", "limit", "0"], "no pfifo qdisc"),
             (["tc", "-n", probe, "filter", "add", "dev", "v0", "parent", "1:", "protocol",
               "ip", "prio", "1", "u32", "match", "ip", "dst", "10.0.0.1/32", "flowid", "1:2"],
              "no u32 filters (cls_u32)")]
    if netem:
        steps.append((["tc", "-n", probe, "qdisc", "add", "dev", "v1", "root", "netem",
                       "delay", "1ms"], "no netem qdisc (sch_netem): latency and loss faults "
                                        "cannot run"))
    try:
        for argv, what in steps:
            try:
                run(argv)
            except NetnsError as e:
                return f"the netns mode cannot run here: {what} ({e})"
        return None
    finally:
        with contextlib.suppress(NetnsError):
            if (NETNS_DIR / probe).exists():
                run(["ip", "netns", "delete", probe])


def host_networks() -> list[str]:
    """The root namespace's IPv4 networks (addresses and routes), to keep clear of."""
    out = []
    for line in run(["ip", "-4", "-o", "addr", "show"]).splitlines():
        fields = line.split()
        if "inet" in fields:
            out.append(fields[fields.index("inet") + 1])
    for line in run(["ip", "-4", "route", "show", "table", "all"]).splitlines():
        fields = line.split()
        first = fields[1] if fields and fields[0] in ("local", "broadcast", "unicast") and \
            len(fields) > 1 else (fields[0] if fields else "")
        if first and first[0].isdigit():
            out.append(first)
    return out


def new_plan(nodes: Sequence[str]) -> NetnsPlan:
    """A plan for a new run: a fresh run id, a subnet clear of the host's networks."""
    return NetnsPlan(secrets.token_hex(4), pick_subnet(host_networks()), tuple(nodes))


def existing() -> list[str]:
    """``ip netns list``'s names."""
    return [line.split()[0] for line in run(["ip", "netns", "list"]).splitlines() if line.strip()]


def cleanup(run_id: str | None = None) -> list[str]:
    """Remove the namespaces of run ``run_id`` (every run's when None) and kill the processes
    still in them; the names removed."""
    removed = []
    for ns in leftovers(existing(), run_id):
        _kill_inside(ns)
        with contextlib.suppress(NetnsError):
            run(["ip", "netns", "delete", ns])
            removed.append(ns)
    return removed


def _kill_inside(ns: str) -> None:
    try:
        pids = [int(p) for p in run(["ip", "netns", "pids", ns]).split()]
    except NetnsError:
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    # Bounded: until every pid is gone (reaped by its parent, or by us) or the deadline.
    while pids and time.monotonic() < deadline:
        for pid in list(pids):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
                pids.remove(pid)
        time.sleep(0.05)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


@contextlib.contextmanager
def namespaces(plan: NetnsPlan) -> Iterator[NetnsPlan]:
    """Create ``plan``'s namespaces; remove them (and kill what runs in them) on the way out,
    whatever happened, set-up failures included."""
    remove = _Once(plan.run_id)
    atexit.register(remove)
    try:
        run_all(plan.setup_commands())
        yield plan
    finally:
        remove()
        atexit.unregister(remove)


class _Once:
    """cleanup(run_id) once (from the ``with`` or from atexit, whichever comes first)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.done = False

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            cleanup(self.run_id)


def inside(namespace: str) -> bool:
    """Whether this process runs in ``namespace`` (a name of ``ip netns list``)."""
    try:
        return os.stat("/proc/self/ns/net").st_ino == os.stat(NETNS_DIR / namespace).st_ino
    except OSError:
        return False
