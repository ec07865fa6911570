"""Controller quorum benchmark: topic-creation throughput and leader failover after kill -9.

``python -m bench.controller [--partitions 10000] [--rounds 5]`` starts a 3-controller quorum as
local processes, registers three brokers over gRPC (each listening at its endpoint, heartbeating
from this process so they stay unfenced), then

1. creates ``--partitions`` partitions in topics of 10 (RF=3), ``--concurrency`` CreateTopics
   requests in flight, each answered after its records commit on the quorum: partitions/s;
2. ``--rounds`` times: kill -9 the active controller, measure the time until a survivor reports a
   new leader (polled every 10 ms) and until the first write (a CreateTopics) succeeds, with the
   new leader's log giving the breakdown (elected, active, write answered), then restart the
   killed one.

``--trace`` prints, after each round, every write attempt (which controller, what it answered)
and the election lines of the nodes' logs (pre-votes, leadership, activation): where a slow round
spent its time. Prints readable lines, both medians against their targets, and a final JSON
line; exits 1 when the median first write after a failover is above FIRST_WRITE_TARGET_S or
creation is below its target. Bounded: every wait has a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import socket
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import grpc

from tidelog.broker.controller_client import CHANNEL_OPTIONS
from tidelog.cluster_secret import CONTROLLERS, broker_credential
from tidelog.local_cluster import LocalCluster
from tidelog.peer_auth import peer_metadata
from tidelog.v1 import common_pb2, controller_pb2, controller_pb2_grpc
from tidelog.v1.common_pb2 import ErrorCode

#: A broker's channel options (its reconnect backoff of 0.1-1 s above all): with gRPC's
#: default (1 s, growing to 120 s), the channel to a controller killed in one round was still
#: backing off when that controller became active in a later one, and the first write waited
#: for the client's redial (0.2-1 s), not for the quorum.
OPTIONS = list(CHANNEL_OPTIONS)
CALL_TIMEOUT_S = 5.0
FAILOVER_DEADLINE_S = 20.0
#: How often the survivors are asked who leads while a failover is measured.
POLL_S = 0.01
#: Targets (issue 26): the median first committed write after a kill -9 of the active
#: controller, and the creation rate; the bench exits 1 when one is missed.
FIRST_WRITE_TARGET_S = 0.35
PARTITIONS_PER_S_TARGET = 2000


class Quorum:
    """A tiny controller client: finds the active controller and follows NOT_CONTROLLER."""

    def __init__(self, addresses: list[str], secret: str | None) -> None:
        self.stubs = {a: controller_pb2_grpc.ControllerServiceStub(
            grpc.aio.insecure_channel(a, options=OPTIONS)) for a in addresses}
        self.active = addresses[0]
        self.secret = secret
        #: (perf_counter, address, outcome) of every attempt, while a list (--trace).
        self.trace: list[tuple[float, str, str]] | None = None

    async def call(self, method: str, request: Any, *, deadline_s: float = 10.0) -> Any:
        # The controllers answer only brokers of the cluster: the bench plays simulated
        # brokers, so it signs each call as the broker the request names (or broker 0 for
        # the admin calls a broker would forward).
        broker_id = getattr(request, "broker_id", 0)
        credential = broker_credential(self.secret, broker_id) if self.secret else None
        metadata = peer_metadata(broker_id, credential, audience=CONTROLLERS)
        deadline = time.monotonic() + deadline_s
        addresses = list(self.stubs)
        i = addresses.index(self.active)
        while True:
            try:
                response = await getattr(self.stubs[self.active], method)(
                    request, timeout=CALL_TIMEOUT_S, metadata=metadata)
                if self.trace is not None:
                    self.trace.append((time.perf_counter(), self.active,
                                       ErrorCode.Name(response.error_code)))
                if response.error_code != ErrorCode.NOT_CONTROLLER:
                    return response
                hint = response.controller
                if hint.controller_id >= 0:
                    self.active = f"{hint.endpoint.host}:{hint.endpoint.port}"
                    continue
            except grpc.aio.AioRpcError as e:
                if self.trace is not None:
                    self.trace.append((time.perf_counter(), self.active, e.code().name))
                i += 1
                self.active = addresses[i % len(addresses)]
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method}: no active controller within {deadline_s}s")
            await asyncio.sleep(0.02)

    async def leader_from(self, address: str) -> int:
        try:
            q = await self.stubs[address].DescribeQuorum(controller_pb2.DescribeQuorumRequest(),
                                                         timeout=1)
            return int(q.leader_id)
        except grpc.aio.AioRpcError:
            return -1


async def register_brokers(q: Quorum, cluster_id: str,
                           count: int) -> tuple[dict[int, int], list[socket.socket]]:
    """Register ``count`` simulated brokers, each listening at the endpoint it registers, as a
    live broker does: a new active controller probes every unfenced broker (controller/
    runtime.py), and a refused connect is evidence of death. (Registering endpoints nothing
    listened on made every failover fence the brokers and wait for their next heartbeat to
    unfence them before a topic could be placed: ~1 s of this bench's first-write figure.)"""
    epochs, listeners = {}, []
    for b in range(1, count + 1):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listeners.append(listener)
        r = await q.call("RegisterBroker", controller_pb2.RegisterBrokerRequest(
            cluster_id=cluster_id, broker_id=100 + b, incarnation_id=uuid.uuid4().bytes,
            endpoint=common_pb2.Endpoint(host="127.0.0.1", port=listener.getsockname()[1])))
        assert r.error_code == 0, r
        epochs[100 + b] = r.broker_epoch
    return epochs, listeners


async def heartbeat_forever(q: Quorum, epochs: dict[int, int]) -> None:
    while True:
        for broker_id, epoch in epochs.items():
            with contextlib.suppress(TimeoutError):  # an election: the next round retries
                await q.call("BrokerHeartbeat", controller_pb2.BrokerHeartbeatRequest(
                    broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=2**62),
                    deadline_s=2)
        await asyncio.sleep(0.5)


def topic(name: str, partitions: int = 10) -> controller_pb2.CreateTopicsRequest:
    return controller_pb2.CreateTopicsRequest(topics=[controller_pb2.CreateTopicsRequest.Topic(
        name=name, num_partitions=partitions, replication_factor=3)])


async def create_topics(q: Quorum, partitions: int, concurrency: int) -> float:
    names = [f"bench-{i:05d}" for i in range(partitions // 10)]
    queue: asyncio.Queue[str] = asyncio.Queue()
    for n in names:
        queue.put_nowait(n)

    async def worker() -> None:
        while not queue.empty():
            name = queue.get_nowait()
            r = await q.call("CreateTopics", topic(name))
            err = r.error_code or r.topics[0].error_code
            assert err == 0, f"{name}: {r}"

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


async def _first_new_leader(q: Quorum, survivors: list[str], old_leader: int,
                            started: float) -> float:
    """Seconds from ``started`` until a survivor names a leader other than ``old_leader``,
    polled every POLL_S (concurrently with the writes: a write's retries must not make this
    figure coarser)."""
    while True:
        leaders = await asyncio.gather(*(q.leader_from(a) for a in survivors))
        if any(x not in (-1, old_leader) for x in leaders):
            return time.perf_counter() - started
        await asyncio.sleep(POLL_S)


def _logged_at(path: Path, text: str, after: float) -> float | None:
    """The wall-clock time of the first line of ``path`` containing ``text`` logged after
    ``after`` (the node's log lines start with asctime, to the millisecond)."""
    for line in path.read_text(errors="replace").splitlines():
        if text in line:
            try:
                stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            except ValueError:
                continue
            if stamp > after:
                return stamp
    return None


#: What --trace prints of each node's log after a failover round.
TRACED_LOG_LINES = ("pre-vote", "gained leadership", "is active (leader epoch")


def _print_trace(cluster: LocalCluster, q: Quorum, killed_at: float, killed_wall: float) -> None:
    """--trace: every attempt of the round's writes, then the nodes' election lines."""
    for at, address, outcome in q.trace or []:
        print(f"  +{at - killed_at:.3f}s write to {address}: {outcome}")
    q.trace = None
    since = datetime.datetime.fromtimestamp(killed_wall).strftime("%Y-%m-%d %H:%M:%S,%f")[:23]
    for spec in cluster.controllers():
        for line in cluster.log_path(spec.name).read_text(errors="replace").splitlines():
            if line[:23] >= since and any(text in line for text in TRACED_LOG_LINES):
                print(f"  {spec.name}: {line}")


async def failover_round(cluster: LocalCluster, q: Quorum, round_no: int,
                         trace: bool = False) -> dict[str, float]:
    """kill -9 the active controller; the time to a new Raft leader (as the survivors report
    it), to the first committed write (a CreateTopics), and, from the new leader's log, the
    breakdown: kill -> elected, elected -> active, active -> the write's answer."""
    by_port = {f"127.0.0.1:{c.controller_port}": c.name for c in cluster.controllers()}
    leader_id = await q.leader_from(q.active)
    victim = f"controller-{leader_id}"
    survivors = [a for a, n in by_port.items() if n != victim]
    # Both clocks read at the signal: kill() then waits (polling) for the process to be reaped,
    # and timing from its return understated every figure by up to ~50 ms.
    killed_wall, killed_at = time.time(), time.perf_counter()
    cluster.kill(victim)
    if trace:
        q.trace = []
    elected_task = asyncio.ensure_future(_first_new_leader(q, survivors, leader_id, killed_at))
    written = None
    try:
        while time.perf_counter() - killed_at < FAILOVER_DEADLINE_S:
            with contextlib.suppress(TimeoutError):
                r = await q.call("CreateTopics", topic(f"failover-{round_no}", 1), deadline_s=0.5)
                if r.error_code == 0 and r.topics[0].error_code == 0:
                    written = time.perf_counter() - killed_at
                    break
        assert written is not None, f"no write succeeded within {FAILOVER_DEADLINE_S}s"
        elected = await asyncio.wait_for(elected_task, FAILOVER_DEADLINE_S)
    finally:
        elected_task.cancel()
    new_leader = f"controller-{await q.leader_from(q.active)}"
    log = cluster.log_path(new_leader)
    gained = _logged_at(log, "gained leadership in epoch", killed_wall)
    active = _logged_at(log, "is active (leader epoch", killed_wall)
    if trace:
        _print_trace(cluster, q, killed_at, killed_wall)
    cluster.start(victim)
    cluster.wait_ready([victim])
    result = {"new_leader_s": round(min(elected, written), 3),
              "first_write_s": round(written, 3)}
    if gained is not None and active is not None:
        result |= {"elected_s": round(gained - killed_wall, 3),
                   "activated_s": round(active - gained, 3),
                   "write_after_active_s": round(killed_wall + written - active, 3)}
    return result


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as tmp:
        cluster = LocalCluster.create(tmp, controllers=3, brokers=0,
                                      overrides={"controller": {"snapshot_min_entries": 20000}})
        with cluster.running():
            q = Quorum(cluster.controller_addresses, cluster.secret_path.read_text().strip())
            epochs, listeners = await register_brokers(q, cluster.cluster_id, 3)
            beats = asyncio.ensure_future(heartbeat_forever(q, epochs))
            await asyncio.sleep(1.0)  # let the brokers unfence
            elapsed = await create_topics(q, args.partitions, args.concurrency)
            rate = args.partitions / elapsed
            print(f"created {args.partitions} partitions in {elapsed:.2f}s: {rate:,.0f} "
                  f"partitions/s ({args.concurrency} requests in flight)")
            rounds = []
            for i in range(args.rounds):
                r = await failover_round(cluster, q, i, args.trace)
                parts = (f" (elected {r['elected_s']}s, active {r['activated_s']}s later, "
                         f"write answered {r['write_after_active_s']}s after)"
                         if "elected_s" in r else "")
                print(f"failover {i}: new leader after {r['new_leader_s']}s, first write after "
                      f"{r['first_write_s']}s{parts}")
                rounds.append(r)
            beats.cancel()
            for listener in listeners:
                listener.close()
    first_write = statistics.median(r["first_write_s"] for r in rounds)
    return {
        "bench": "controller",
        "partitions": args.partitions, "partitions_per_topic": 10, "replication_factor": 3,
        "concurrency": args.concurrency,
        "create_seconds": round(elapsed, 3), "partitions_per_s": round(rate),
        "failover_rounds": rounds,
        "failover_new_leader_median_s": statistics.median(r["new_leader_s"] for r in rounds),
        "failover_first_write_median_s": first_write,
        "targets": {"partitions_per_s": PARTITIONS_PER_S_TARGET,
                    "failover_first_write_median_s": FIRST_WRITE_TARGET_S},
        "met": rate >= PARTITIONS_PER_S_TARGET and first_write <= FIRST_WRITE_TARGET_S,
        "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trace", action="store_true",
                        help="print each failover's write attempts and election log lines")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print(f"medians: new leader {result['failover_new_leader_median_s']} s, first write "
          f"{result['failover_first_write_median_s']} s (target {FIRST_WRITE_TARGET_S} s); "
          f"{result['partitions_per_s']:,} partitions/s (target {PARTITIONS_PER_S_TARGET:,})")
    print(json.dumps(result))
    if not result["met"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
