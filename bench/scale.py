"""Scale benchmark: what idle partitions cost, and how failure handling and clients behave with
many of them, on a local 3-controller + 3-broker cluster (RF 3).

``python -m bench.scale [--steps 0,3000,10000,30000] [--idle-seconds 10] [--topic-partitions
1000]`` starts the cluster as local processes and grows it step by step. At each step it creates
topics of ``--topic-partitions`` partitions (CreateTopics of at most 10,000 partitions each),
waits until every partition has a leader and its full ISR, lets it settle, and then measures
every node's CPU (utime + stime from /proc over ``--idle-seconds``) and RSS while nothing is
produced or consumed. After the last step, with everything still in place:

* ``few_partitions``: one producer (default configs) writes 100-byte records to a new
  3-partition topic for ``--few-seconds`` and one consumer reads them back: records/s each way.
  ``few_partitions_empty`` is the same on a fresh, empty cluster started for it alone before
  the main one (so its writes do not weigh on the idle figures);

* ``first_send_ms``: a producer that already knows the cluster sends one record to a topic it
  has not used yet (created just before), median of 5;
* ``produce_spread``: one producer with default configs writes 100-byte records round-robin
  over ``--spread-partitions`` partitions of the existing topics for ``--seconds``: records/s;
* ``consume_spread``: one consumer with default configs, assigned those partitions, reads
  every record the spread producer wrote: records/s; then, caught up and still polling, the
  brokers' CPU for ``--idle-seconds`` (``idle_consumer``: what an idle consumer of that many
  partitions costs; its fetch sessions carry only what changed);
* ``restart_full_isr_s``: a broker stopped with SIGTERM and started again; seconds from its
  start to every partition having its full ISR again;
* ``kill9_leadership_moved_s``: a broker killed with SIGKILL; seconds until no partition names
  it as leader (then it is started again and the cluster waits for full ISRs);
* ``controller_failover_s``: the active controller killed with SIGKILL; seconds until the
  metadata names another active controller and a CreateTopics succeeds.

Prints readable lines and a final JSON line with every figure and the machine it ran on. Every
wait is bounded (``--timeout``), and every process started here is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import grpc

from tidelog import Admin, Consumer, NewTopic, Producer, TopicPartition, limits
from tidelog.local_cluster import LocalCluster
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import broker_pb2_grpc

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
VALUE = b"x" * 100


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# --- process figures ------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE_BYTES / 2**20


def idle_figures(cluster: LocalCluster, seconds: float,
                 meanwhile: Callable[[float], None] = time.sleep) -> dict[str, dict[str, float]]:
    """Each running node's CPU (cores) and RSS over ``seconds`` of doing nothing (but
    ``meanwhile(seconds)``)."""
    pids = {name: spec.pid for name, spec in cluster.nodes.items()
            if spec.pid and cluster.is_running(name)}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    meanwhile(seconds)
    return {name: {"cpu_cores": round((cpu_seconds(pid) - before[name]) / seconds, 4),
                   "rss_mib": round(rss_mib(pid), 1)} for name, pid in pids.items()}


# --- metadata ---------------------------------------------------------------------------------

class Metadata:
    """Raw Metadata calls to one broker (the client's cache would hide what we wait for)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self._cluster = cluster
        self._channels: dict[str, grpc.Channel] = {}

    def _stub(self, address: str) -> broker_pb2_grpc.BrokerServiceStub:
        if address not in self._channels:
            self._channels[address] = grpc.insecure_channel(address, options=[
                ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                ("grpc.enable_http_proxy", 0)])
        return broker_pb2_grpc.BrokerServiceStub(self._channels[address])  # type: ignore[no-untyped-call]

    def fetch(self, topics: list[str] | None = None) -> pb.MetadataResponse | None:
        """Every topic's metadata (or ``topics``'), from the first running broker that answers."""
        for spec in self._cluster.brokers():
            if not self._cluster.is_running(spec.name):
                continue
            try:
                return self._stub(f"127.0.0.1:{spec.broker_port}").Metadata(
                    pb.MetadataRequest(topics=topics or []), timeout=30)
            except grpc.RpcError:
                continue
        return None

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()


def partitions_of(md: pb.MetadataResponse) -> list[Any]:
    return [p for t in md.topics for p in t.partitions]


def wait_until(what: str, check: Callable[[], bool], timeout_s: float,
               poll_s: float = 0.1) -> float:
    """Seconds until ``check()`` holds; raises TimeoutError naming ``what``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if check():
            return time.monotonic() - started
        time.sleep(poll_s)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")


def all_full(meta: Metadata, expected: int) -> Callable[[], bool]:
    """A check: every partition led and with a full ISR. Each look asks only for the topics
    not full at the previous one, and a full answer confirms it (an ISR may shrink again): a
    Metadata call of every partition every 100 ms would cost the answering broker much of
    its CPU at 30,000 partitions and more (each answer is megabytes), and slow what is timed."""
    pending: list[str] | None = None  # None: look at everything

    def not_full(md: pb.MetadataResponse) -> list[str]:
        return [t.name for t in md.topics
                if not t.partitions or any(p.leader < 0 or len(p.isr) != len(p.replicas)
                                           for p in t.partitions)]

    def check() -> bool:
        nonlocal pending
        if pending:
            md = meta.fetch(pending)
            if md is None:
                return False
            pending = not_full(md) or None
            return False
        md = meta.fetch()
        if md is None:
            return False
        pending = not_full(md) or None
        return pending is None and len(partitions_of(md)) >= expected
    return check


# --- phases -----------------------------------------------------------------------------------

def grow(admin: Admin, meta: Metadata, have: int, target: int, per_topic: int,
         timeout_s: float) -> dict[str, float]:
    """Create topics until ``target`` partitions exist; seconds to create and to full ISRs."""
    started = time.monotonic()
    names = []
    while have < target:
        count = min(per_topic, target - have)
        batch: list[NewTopic] = []
        while have < target and sum(t.num_partitions for t in batch) + count <= \
                limits.PARTITIONS_PER_CREATE_REQUEST_MAX:
            name = f"scale-{have:07d}"
            batch.append(NewTopic(name, count, 3))
            names.append(name)
            have += count
            count = min(per_topic, target - have)
            if count <= 0:
                break
        admin.create_topics(batch, timeout_ms=int(timeout_s * 1000)).all()
    created = time.monotonic() - started
    full = wait_until(f"{target} partitions led with full ISRs",
                      all_full(meta, target), timeout_s, poll_s=1.0)
    return {"create_s": round(created, 2), "full_isr_s": round(created + full, 2),
            "topics": len(names)}


def first_send_ms(bootstrap: str, admin: Admin) -> float:
    with Producer(bootstrap) as producer:
        producer.send("scale-warmup", b"x").result(timeout=60)  # knows the cluster
        samples = []
        for i in range(5):
            topic = f"scale-first-{i}"
            admin.create_topics([NewTopic(topic, 1, 3)]).all()
            started = time.perf_counter()
            producer.send(topic, b"x").result(timeout=60)
            samples.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(samples), 1)


def produce_spread(bootstrap: str, targets: list[tuple[str, int]],
                   seconds: float) -> dict[str, float]:
    sent = 0
    with Producer(bootstrap) as producer:
        started = time.perf_counter()
        deadline = started + seconds
        futures = []
        while time.perf_counter() < deadline:  # bounded by time; 1,000 sends per check
            for _ in range(1000):
                topic, partition = targets[sent % len(targets)]
                futures.append(producer.send(topic, VALUE, partition=partition))
                sent += 1
        producer.flush(timeout_ms=120_000)
        elapsed = time.perf_counter() - started
        failed = sum(1 for f in futures if f.exception(timeout=0) is not None)
    return {"partitions": len(targets), "records": sent, "failed": failed,
            "seconds": round(elapsed, 2), "records_per_s": round(sent / elapsed)}


def few_partitions(bootstrap: str, admin: Admin, topic: str, seconds: float,
                   timeout_s: float) -> dict[str, Any]:
    """Produce to a new 3-partition topic for ``seconds``, then consume it all: records/s."""
    admin.create_topics([NewTopic(topic, 3, 3)]).all()
    produced = produce_spread(bootstrap, [(topic, p) for p in range(3)], seconds)
    targets = [TopicPartition(topic, p) for p in range(3)]
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(targets)
        got = 0
        started = time.perf_counter()
        deadline = started + timeout_s
        while got < produced["records"] and time.perf_counter() < deadline:  # bounded
            got += len(consumer.poll(timeout_ms=500))
        elapsed = time.perf_counter() - started
    return {"produce_records_per_s": produced["records_per_s"],
            "consume_records_per_s": round(got / elapsed) if elapsed else 0,
            "records": got}


def few_on_an_empty_cluster(base: str, seconds: float, timeout_s: float) -> dict[str, Any]:
    """:func:`few_partitions` on a cluster of its own, started and stopped here."""
    cluster = LocalCluster.create(base, controllers=3, brokers=3)
    try:
        cluster.start_all()
        cluster.wait_ready()
        with Admin(cluster.bootstrap) as admin:
            return few_partitions(cluster.bootstrap, admin, "scale-few", seconds, timeout_s)
    finally:
        cluster.stop_all()


def consume_spread(cluster: LocalCluster, targets: list[tuple[str, int]], records: int,
                   idle_s: float, timeout_s: float) -> dict[str, Any]:
    """One consumer (default configs) assigned ``targets`` reads ``records`` from the start;
    then, caught up, it keeps polling for ``idle_s`` while the brokers' CPU is measured."""
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(t, p) for t, p in targets])
        got = 0
        started = time.perf_counter()
        deadline = started + timeout_s
        while got < records and time.perf_counter() < deadline:  # bounded by time
            got += len(consumer.poll(timeout_ms=500))
        elapsed = time.perf_counter() - started
        consumer.poll(timeout_ms=500)  # the last positions listed: the sessions hold them

        def keep_polling(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                consumer.poll(timeout_ms=max(1, int((end - time.monotonic()) * 1000)))
        idle = idle_figures(cluster, idle_s, keep_polling)
    brokers = [v["cpu_cores"] for n, v in idle.items() if cluster.nodes[n].is_broker]
    return {"partitions": len(targets), "records": got, "seconds": round(elapsed, 2),
            "records_per_s": round(got / elapsed) if elapsed else 0,
            "idle_consumer_broker_cpu_cores_max": max(brokers)}


def restart_full_isr(cluster: LocalCluster, meta: Metadata, name: str, expected: int,
                     timeout_s: float) -> float:
    cluster.stop(name)
    time.sleep(3)
    cluster.start(name)
    return round(wait_until(f"full ISRs after {name} restarted",
                            all_full(meta, expected), timeout_s), 2)


def kill9_leadership_moved(cluster: LocalCluster, meta: Metadata, name: str,
                           timeout_s: float) -> float:
    """Seconds from SIGKILL until no partition names the broker as leader. The check asks only
    for the topics that still did at the last look (as a client watching its topics would): a
    Metadata call of every partition every 50 ms costs the answering broker CPU it needs for
    the fencing (at 30,000 partitions, each answer is megabytes)."""
    broker_id = cluster.nodes[name].node_id

    def still_led(md: pb.MetadataResponse) -> list[str]:
        return [t.name for t in md.topics if any(p.leader == broker_id for p in t.partitions)]
    md = meta.fetch()
    assert md is not None
    watched = still_led(md)

    def moved() -> bool:
        nonlocal watched
        if watched:
            now = meta.fetch(watched)
            if now is None:
                return False
            watched = still_led(now)
        return not watched
    cluster.kill(name)
    return round(wait_until(f"leaderships away from {name}", moved, timeout_s, 0.05), 2)


def controller_failover(cluster: LocalCluster, meta: Metadata, admin: Admin,
                        timeout_s: float) -> float:
    md = meta.fetch()
    assert md is not None
    active = next(n for n, s in cluster.nodes.items()
                  if s.is_controller and s.node_id == md.controller_id)
    cluster.kill(active)
    started = time.monotonic()

    def moved() -> bool:
        now = meta.fetch()
        return now is not None and now.controller_id not in (-1, md.controller_id)
    wait_until("another active controller", moved, timeout_s, 0.05)
    admin.create_topics([NewTopic("scale-after-failover", 1, 3)],
                        timeout_ms=int(timeout_s * 1000)).all()
    elapsed = time.monotonic() - started
    cluster.start(active)
    return round(elapsed, 2)


def run(args: argparse.Namespace) -> dict[str, Any]:
    steps = sorted({int(s) for s in args.steps.split(",")})
    result: dict[str, Any] = {"steps": [], "machine": {
        "cpu_count": os.cpu_count(), "python": platform.python_version(),
        "load_avg_at_start": os.getloadavg()}}
    with tempfile.TemporaryDirectory(prefix="tidelog-scale-") as tmp:
        base = args.dir or tmp  # --dir keeps the nodes' logs and data for a look afterwards
        if args.few_seconds > 0:
            few = result["few_partitions_empty"] = few_on_an_empty_cluster(
                os.path.join(base, "empty"), args.few_seconds, args.timeout)
            log(f"empty cluster: 3 busy partitions produce {few['produce_records_per_s']:,} "
                f"records/s, consume {few['consume_records_per_s']:,} records/s")
        cluster = LocalCluster.create(os.path.join(base, "main"), controllers=3, brokers=3)
        meta = Metadata(cluster)
        try:
            cluster.start_all()
            cluster.wait_ready()
            bootstrap = cluster.bootstrap
            with Admin(bootstrap) as admin:
                have = 0
                for step in steps:
                    row: dict[str, Any] = {"partitions": step}
                    if step > have:
                        row.update(grow(admin, meta, have, step, args.topic_partitions,
                                        args.timeout))
                        have = step
                    time.sleep(args.settle_seconds)
                    idle = idle_figures(cluster, args.idle_seconds)
                    brokers = [v for n, v in idle.items() if cluster.nodes[n].is_broker]
                    controllers = [v for n, v in idle.items() if cluster.nodes[n].is_controller]
                    row["broker_cpu_cores_max"] = max(b["cpu_cores"] for b in brokers)
                    row["broker_rss_mib_max"] = max(b["rss_mib"] for b in brokers)
                    row["controller_cpu_cores_max"] = max(c["cpu_cores"] for c in controllers)
                    row["controller_rss_mib_max"] = max(c["rss_mib"] for c in controllers)
                    row["nodes"] = idle
                    log(f"{step:>7,} partitions: broker idle CPU {row['broker_cpu_cores_max']} "
                        f"cores, RSS {row['broker_rss_mib_max']} MiB; controller "
                        f"{row['controller_cpu_cores_max']} cores, "
                        f"{row['controller_rss_mib_max']} MiB"
                        + (f"; created in {row['create_s']} s, full ISRs at "
                           f"{row['full_isr_s']} s" if "create_s" in row else ""))
                    result["steps"].append(row)
                first, last = result["steps"][0], result["steps"][-1]
                if last["partitions"] > first["partitions"]:
                    replicas = last["partitions"]  # RF 3 over 3 brokers: each hosts all
                    result["broker_rss_kib_per_replica"] = round(
                        (last["broker_rss_mib_max"] - first["broker_rss_mib_max"]) * 1024
                        / replicas, 2)
                expected = have
                if args.few_seconds > 0:
                    few = result["few_partitions"] = few_partitions(
                        bootstrap, admin, "scale-few", args.few_seconds, args.timeout)
                    log(f"{have:,} partitions: 3 busy partitions produce "
                        f"{few['produce_records_per_s']:,} records/s, consume "
                        f"{few['consume_records_per_s']:,} records/s")
                    expected += 3
                admin.create_topics([NewTopic("scale-warmup", 1, 3)]).all()
                expected += 1
                result["first_send_ms"] = first_send_ms(bootstrap, admin)
                expected += 5
                log(f"first send to a new topic: {result['first_send_ms']} ms (median of 5)")
                if have:
                    md = meta.fetch()
                    assert md is not None
                    topics = [(t.name, len(t.partitions)) for t in md.topics
                              if t.name.startswith("scale-0")]
                    targets = [(t, p) for t, n in topics
                               for p in range(n)][:args.spread_partitions]
                    spread = result["produce_spread"] = produce_spread(
                        bootstrap, targets, args.seconds)
                    log(f"produce spread over {spread['partitions']:,} "
                        f"partitions: {spread['records_per_s']:,} records/s")
                    consumed = result["consume_spread"] = consume_spread(
                        cluster, targets, int(spread["records"] - spread["failed"]),
                        args.idle_seconds, args.timeout)
                    log(f"consume spread over {consumed['partitions']:,} partitions: "
                        f"{consumed['records']:,} records at {consumed['records_per_s']:,} "
                        f"records/s; idle and polling, the brokers' CPU "
                        f"{consumed['idle_consumer_broker_cpu_cores_max']} cores")
                result["restart_full_isr_s"] = restart_full_isr(
                    cluster, meta, "broker-2", expected, args.timeout)
                log(f"broker-2 restarted: full ISRs after {result['restart_full_isr_s']} s")
                result["kill9_leadership_moved_s"] = kill9_leadership_moved(
                    cluster, meta, "broker-3", args.timeout)
                log(f"broker-3 killed (SIGKILL): leaderships moved after "
                    f"{result['kill9_leadership_moved_s']} s")
                cluster.start("broker-3")
                wait_until("full ISRs after broker-3 came back",
                           all_full(meta, expected), args.timeout, 1.0)
                result["controller_failover_s"] = controller_failover(
                    cluster, meta, admin, args.timeout)
                log(f"active controller killed: failover in {result['controller_failover_s']} s")
        finally:
            meta.close()
            cluster.stop_all()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="0,3000,10000,30000",
                        help="total partitions (RF 3) at which to measure, comma separated")
    parser.add_argument("--topic-partitions", type=int, default=1000)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--settle-seconds", type=float, default=5.0)
    parser.add_argument("--spread-partitions", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="length of the produce-spread phase")
    parser.add_argument("--few-seconds", type=float, default=5.0,
                        help="length of the few-partitions produce phases (0: skip them)")
    parser.add_argument("--dir", default="",
                        help="cluster directory to keep (default: a temporary one, removed)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="longest wait of any phase, in seconds")
    args = parser.parse_args()
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
