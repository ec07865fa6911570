"""``make run``: bring up a local cluster and show it working.

Today the demo runs what Tidelog has: a 3-controller metadata quorum as separate processes. It
registers three brokers' worth of metadata over gRPC (simulated brokers: the broker role is being
built), creates a topic, shows the quorum, kills the active controller with SIGKILL and shows the
new leader taking over, restarts the killed one, and leaves the cluster running for you to explore
with ``tidelog cluster …`` (it prints how to stop it).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc

from tidelog.local_cluster import LocalCluster
from tidelog.v1 import common_pb2, controller_pb2, controller_pb2_grpc
from tidelog.v1.common_pb2 import ErrorCode

RUN_DIR = Path(".tidelog/run")


def say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def tidelog_cmd(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "tidelog.cli", *args], check=False)


def active_call(cluster: LocalCluster, method: str, request: object, deadline_s: float = 15.0
                ) -> object:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for address in cluster.controller_addresses:
            try:
                with grpc.insecure_channel(address) as ch:
                    stub = controller_pb2_grpc.ControllerServiceStub(ch)
                    r = getattr(stub, method)(request, timeout=3)
            except grpc.RpcError:
                continue
            if r.error_code != ErrorCode.NOT_CONTROLLER:
                return r
        time.sleep(0.05)
    raise SystemExit(f"no active controller answered {method} within {deadline_s}s")


def main() -> None:
    if (RUN_DIR / "cluster.json").exists():
        LocalCluster.load(RUN_DIR).down()
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    say("starting 3 controllers as local processes (tidelog cluster up)")
    cluster = LocalCluster.create(RUN_DIR, controllers=3, brokers=0)
    cluster.start_all()
    cluster.wait_ready()
    tidelog_cmd("cluster", "status", "--dir", str(RUN_DIR))

    say("registering 3 brokers with the quorum and creating topic 'demo' (6 partitions, RF=3)")
    for broker_id in (101, 102, 103):
        r = active_call(cluster, "RegisterBroker", controller_pb2.RegisterBrokerRequest(
            cluster_id=cluster.cluster_id, broker_id=broker_id, incarnation_id=uuid.uuid4().bytes,
            endpoint=common_pb2.Endpoint(host="127.0.0.1", port=9000 + broker_id)))
        active_call(cluster, "BrokerHeartbeat", controller_pb2.BrokerHeartbeatRequest(
            broker_id=broker_id, broker_epoch=r.broker_epoch,  # type: ignore[attr-defined]
            current_metadata_offset=2**62))
    r = active_call(cluster, "CreateTopics", controller_pb2.CreateTopicsRequest(topics=[
        controller_pb2.CreateTopicsRequest.Topic(name="demo", num_partitions=6,
                                                 replication_factor=3)]))
    topic = r.topics[0]  # type: ignore[attr-defined]
    print(f"topic {topic.name}: {ErrorCode.Name(topic.error_code)} (id {topic.topic_id.hex()})")
    tidelog_cmd("cluster", "quorum", "--dir", str(RUN_DIR))

    with grpc.insecure_channel(cluster.controller_addresses[0]) as ch:
        q = controller_pb2_grpc.ControllerServiceStub(ch).DescribeQuorum(
            controller_pb2.DescribeQuorumRequest(), timeout=3)
    victim = f"controller-{q.leader_id}"
    say(f"kill -9 of the active controller ({victim}); the others elect a new one")
    cluster.kill(victim)
    started = time.monotonic()
    r = active_call(cluster, "CreateTopics", controller_pb2.CreateTopicsRequest(topics=[
        controller_pb2.CreateTopicsRequest.Topic(name="after-failover", num_partitions=1,
                                                 replication_factor=3)]))
    print(f"first write after the kill succeeded in {time.monotonic() - started:.2f}s: "
          f"{ErrorCode.Name(r.topics[0].error_code)}")  # type: ignore[attr-defined]
    tidelog_cmd("cluster", "quorum", "--dir", str(RUN_DIR))

    say(f"restarting {victim}: it catches up from its journal")
    cluster.start(victim)
    cluster.wait_ready([victim])
    tidelog_cmd("cluster", "quorum", "--dir", str(RUN_DIR))

    tidelog = Path(sys.executable).parent / "tidelog"
    say("the cluster keeps running. Try:")
    print(f"  {tidelog} cluster status --dir {RUN_DIR}")
    print(f"  {tidelog} cluster quorum --dir {RUN_DIR}")
    print(f"  {tidelog} cluster stop-node controller-2 --signal KILL --dir {RUN_DIR}")
    print(f"  {tidelog} cluster start-node controller-2 --dir {RUN_DIR}")
    print(f"stop it with:  make stop   (or {tidelog} cluster down --dir {RUN_DIR})")


if __name__ == "__main__":
    main()
