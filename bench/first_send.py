"""First sends to new topics: what a producer's first record to a topic it has not used costs.

``python -m bench.first_send [--brokers 3] [--topics 100] [--samples 20]`` starts a local
cluster (1 controller + ``--brokers`` brokers) as processes and measures three phases, each
with a new producer that has already sent one record to another topic (so it knows the cluster
and has its producer id). Each phase's topics (1 partition, replication factor min(3, brokers))
are created with Admin after that producer started, and have a leader before the clock starts:
new to the producer, not to the cluster.

* ``sequential``: one record to each of ``--topics`` new topics from one thread (``send()``
  after ``send()``), then ``flush()``: seconds in all and in the sends (each blocks for its
  topic's metadata), and the Metadata requests the producer made;
* ``threads``: the same with one thread per topic, all released at once: seconds and Metadata
  requests (the topics wanted while a request is out go together in the next one);
* ``first_send``: ``--samples`` times, one record to a new topic: how long ``send()`` blocked
  (the metadata look-up) and how long until the record was acknowledged; for comparison, the
  acknowledgement of a second record to the same (now known) topic. Medians and maxima.

Metadata requests are counted and timed (until answered: median and max, ms) by wrapping the
producer's connection object's ``call`` (the metadata manager's only way out). Prints readable
lines and a final JSON line with every figure and the machine it ran on. Every process started
here is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from tidelog import Admin, NewTopic, Producer
from tidelog.errors import TidelogError
from tidelog.local_cluster import LocalCluster

VALUE = b"x" * 100
WAIT_S = 60.0


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def create_topics(bootstrap: str, names: list[str], replication: int) -> None:
    """Create ``names`` and wait (bounded) until every one has a leader."""
    with Admin(bootstrap) as admin:
        for i in range(0, len(names), 100):
            admin.create_topics([NewTopic(n, num_partitions=1, replication_factor=replication)
                                 for n in names[i:i + 100]]).all()
        deadline = time.monotonic() + WAIT_S
        pending = set(names)
        while pending:  # bounded by the deadline
            if time.monotonic() > deadline:
                raise SystemExit(f"{len(pending)} topics have no leader after {WAIT_S} s")
            found = admin.describe_topics(sorted(pending), include_offsets=False)
            for name in list(pending):
                try:
                    described = found[name]
                except TidelogError:  # not visible yet: look again
                    continue
                if all(p.leader >= 0 for p in described.partitions):
                    pending.discard(name)
            if pending:
                time.sleep(0.2)


def counting_producer(bootstrap: str, warm_topic: str, topics: list[str],
                      replication: int) -> tuple[Producer, Callable[[], dict[str, Any]]]:
    """A producer that has sent one record to ``warm_topic``, the phase's ``topics`` created
    after that, and what its Metadata requests from then on were: how many, and how long each
    took to be answered (median and max, ms)."""
    create_topics(bootstrap, [warm_topic], replication)
    producer = Producer(bootstrap)
    producer.send(warm_topic, VALUE).result(WAIT_S)
    create_topics(bootstrap, topics, replication)
    conns = producer._conns
    original = conns.call
    took: list[float] = []

    async def call(address: str, method: str, request: Any, **kwargs: Any) -> Any:
        if method != "Metadata":
            return await original(address, method, request, **kwargs)
        start = time.perf_counter()
        try:
            return await original(address, method, request, **kwargs)
        finally:
            took.append((time.perf_counter() - start) * 1000)

    conns.call = call  # type: ignore[method-assign]
    return producer, lambda: {"count": len(took), **(summary(took) if took else {})}


def sequential(bootstrap: str, warm: str, topics: list[str], replication: int) -> dict[str, Any]:
    producer, metadata_requests = counting_producer(bootstrap, warm, topics, replication)
    with producer:
        start = time.perf_counter()
        futures = [producer.send(t, VALUE) for t in topics]
        queued = time.perf_counter() - start
        producer.flush()
        elapsed = time.perf_counter() - start
        for f in futures:
            f.result(WAIT_S)
        return {"topics": len(topics), "seconds": round(elapsed, 3),
                "sends_seconds": round(queued, 3), "metadata_requests": metadata_requests()}


def threads(bootstrap: str, warm: str, topics: list[str], replication: int) -> dict[str, Any]:
    producer, metadata_requests = counting_producer(bootstrap, warm, topics, replication)
    with producer:
        barrier = threading.Barrier(len(topics) + 1)
        futures: list[Any] = []

        def send(topic: str) -> None:
            barrier.wait(WAIT_S)
            futures.append(producer.send(topic, VALUE))

        workers = [threading.Thread(target=send, args=(t,)) for t in topics]
        for w in workers:
            w.start()
        barrier.wait(WAIT_S)
        start = time.perf_counter()
        for w in workers:
            w.join(WAIT_S)
        producer.flush()
        elapsed = time.perf_counter() - start
        for f in futures:
            f.result(WAIT_S)
        return {"topics": len(topics), "seconds": round(elapsed, 3),
                "metadata_requests": metadata_requests()}


def first_send(bootstrap: str, warm: str, topics: list[str], replication: int) -> dict[str, Any]:
    blocked: list[float] = []
    acked: list[float] = []
    known: list[float] = []
    producer, metadata_requests = counting_producer(bootstrap, warm, topics, replication)
    with producer:
        for topic in topics:
            start = time.perf_counter()
            future = producer.send(topic, VALUE)
            blocked.append((time.perf_counter() - start) * 1000)
            future.result(WAIT_S)
            acked.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            producer.send(topic, VALUE).result(WAIT_S)
            known.append((time.perf_counter() - start) * 1000)
        return {"samples": len(topics), "metadata_requests": metadata_requests(),
                "send_blocked_ms": summary(blocked), "acked_ms": summary(acked),
                "known_topic_acked_ms": summary(known)}


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "max": round(max(values), 2)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    replication = min(3, args.brokers)
    warm = ["warm-0", "warm-1", "warm-2"]
    seq = [f"seq-{i}" for i in range(args.topics)]
    par = [f"par-{i}" for i in range(args.topics)]
    one = [f"one-{i}" for i in range(args.samples)]
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as tmp:
        cluster = LocalCluster.create(f"{tmp}/cluster", controllers=1, brokers=args.brokers)
        with cluster.running():
            bootstrap = cluster.bootstrap
            log(f"cluster up (1 controller, {args.brokers} brokers)")
            out_seq = sequential(bootstrap, warm[0], seq, replication)
            log(f"sequential: one record to each of {len(seq)} new topics: "
                f"{out_seq['seconds']} s ({out_seq['sends_seconds']} s in send()), "
                f"Metadata requests {out_seq['metadata_requests']}")
            out_par = threads(bootstrap, warm[1], par, replication)
            log(f"threads: one record to each of {len(par)} new topics, a thread each: "
                f"{out_par['seconds']} s, Metadata requests {out_par['metadata_requests']}")
            out_one = first_send(bootstrap, warm[2], one, replication)
            log(f"first send to a new topic: send() blocked {out_one['send_blocked_ms']} ms, "
                f"acknowledged after {out_one['acked_ms']} ms (a known topic: "
                f"{out_one['known_topic_acked_ms']} ms)")
    return {"bench": "first_send", "brokers": args.brokers, "replication_factor": replication,
            "sequential": out_seq, "threads": out_par, "first_send": out_one,
            "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=3, help="brokers (1 controller)")
    parser.add_argument("--topics", type=int, default=100,
                        help="new topics in the sequential and threads phases")
    parser.add_argument("--samples", type=int, default=20, help="first sends measured one by one")
    args = parser.parse_args()
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
