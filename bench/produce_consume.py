"""Produce/consume benchmark against a local 3-controller + 3-broker cluster.

``python -m bench.produce_consume [--records 200000] [--seconds 10] [--raw-seconds 5]`` starts
the cluster as local processes, then measures twice, in the same run (100-byte values):

* ``broker_raw``: the brokers alone, through raw BrokerService gRPC calls with prebuilt batches
  (``tidelog.record_batch.build_batch``, ``RAW_BATCH_RECORDS`` records each, ``RAW_IN_FLIGHT``
  requests in flight over the 6 partitions' leaders): produce RF=1 acks=1, produce RF=3
  acks=all, and consume (Fetch from the leaders, 8 MiB per request) of what the first wrote;
* ``client``: the Tidelog client library:

  1. produce throughput, RF=1, acks=1 (topic of 6 partitions);
  2. produce throughput, RF=3, acks=all, min.insync.replicas=2;
  3. consume throughput, reading back what phase 1 wrote;
  4. end-to-end latency (send → poll) at a fixed 2,000 records/s, RF=3, acks=all: p50/p99;

* ``client_send_many``: phases 1 and 2 again through ``Producer.send_many`` (1,000 values per
  call) instead of one ``send()`` per record.

``--modes`` picks the modes to run (default: all three, in that order).

``--tls`` runs the ``client`` mode a second time, in the same run, against a second cluster with
``[tls]`` on every node (certificates from tidelog.certs; the client listener TLS without client
certificates, the inter-broker and controller listeners mutual TLS) and a client with
``security_protocol="SSL"``: section ``client_tls``, and ``tls_vs_plaintext`` the ratios.

Servers and the load share the machine's cores, as in the issue's reference figures. Every phase
is bounded by ``--records`` and ``--seconds`` (raw phases by ``--raw-seconds``), so the default
run takes about a minute and a half. Prints readable lines and a final JSON line, which says for
each mode which targets it meets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from typing import Any

import grpc

from tidelog import Admin, Consumer, NewTopic, Producer, TopicPartition, limits
from tidelog.local_cluster import LocalCluster
from tidelog.record_batch import NewRecord, build_batch, next_offset, parse_batch
from tidelog.v1 import broker_pb2 as pb
from tidelog.v1 import broker_pb2_grpc

VALUE = b"x" * 100
E2E_RATE = 2_000
PARTITIONS = 6
RAW_BATCH_RECORDS = 500
RAW_IN_FLIGHT = 8
RAW_FETCH_BYTES = 8 * 1024 * 1024
TARGETS = {"produce_rf1_acks1": 300_000, "produce_rf3_acks_all": 100_000, "consume": 500_000,
           "e2e_p99_ms": 4.0}


# --- broker_raw: BrokerService calls with prebuilt batches ------------------------------------

class RawBroker:
    """Stubs per broker address and each partition's leader, from one Metadata call."""

    def __init__(self, bootstrap: str) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._bootstrap = bootstrap.split(",")[0]

    def stub(self, address: str) -> broker_pb2_grpc.BrokerServiceStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc.aio.insecure_channel(address, options=[
                ("grpc.max_receive_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                ("grpc.max_send_message_length", limits.GRPC_MESSAGE_BYTES_MAX),
                ("grpc.enable_http_proxy", 0)])
        return broker_pb2_grpc.BrokerServiceStub(channel)  # type: ignore[no-untyped-call]

    async def leaders(self, topic: str) -> dict[int, broker_pb2_grpc.BrokerServiceStub]:
        md = await self.stub(self._bootstrap).Metadata(pb.MetadataRequest(topics=[topic]),
                                                       timeout=10)
        address = {b.broker_id: f"{b.endpoint.host}:{b.endpoint.port}" for b in md.brokers}
        (t,) = md.topics
        return {p.partition_id: self.stub(address[p.leader]) for p in t.partitions}

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()


async def _raw_produce(raw: RawBroker, topic: str, *, acks: int, records: int,
                       seconds: float) -> dict[str, float]:
    leaders = await raw.leaders(topic)
    batch = build_batch([NewRecord(None, VALUE)] * RAW_BATCH_RECORDS,
                        now_ms=int(time.time() * 1000))
    sent = 0
    errors = 0
    started = time.perf_counter()
    deadline = started + seconds

    async def worker(index: int) -> None:
        nonlocal sent, errors
        n = index
        # Bounded by the record count and the deadline; each call has its own timeout.
        while sent < records and time.perf_counter() < deadline:
            partition = n % PARTITIONS
            n += RAW_IN_FLIGHT
            request = pb.ProduceRequest(acks=acks, timeout_ms=10_000, topics=[
                pb.ProduceRequest.TopicData(name=topic, partitions=[
                    pb.ProduceRequest.PartitionData(partition_id=partition, batch=batch)])])
            resp = await leaders[partition].Produce(request, timeout=15)
            if resp.topics[0].partitions[0].error_code:
                errors += 1
            else:
                sent += RAW_BATCH_RECORDS

    await asyncio.gather(*(worker(i) for i in range(RAW_IN_FLIGHT)))
    elapsed = time.perf_counter() - started
    return {"records": sent, "errors": errors, "batch_records": RAW_BATCH_RECORDS,
            "in_flight": RAW_IN_FLIGHT, "seconds": round(elapsed, 3),
            "records_per_s": round(sent / elapsed)}


async def _raw_consume(raw: RawBroker, topic: str, *, records: int,
                       seconds: float) -> dict[str, float]:
    leaders = await raw.leaders(topic)
    got = 0
    started = time.perf_counter()
    deadline = started + seconds

    async def reader(partition: int) -> None:
        nonlocal got
        offset = 0
        # Bounded by the deadline; stops at the partition's high watermark.
        while time.perf_counter() < deadline:
            request = pb.FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=RAW_FETCH_BYTES,
                topics=[pb.FetchRequest.TopicData(name=topic, partitions=[
                    pb.FetchRequest.PartitionData(partition_id=partition, fetch_offset=offset,
                                                  current_leader_epoch=-1,
                                                  partition_max_bytes=RAW_FETCH_BYTES)])])
            resp = await leaders[partition].Fetch(request, timeout=15)
            data = resp.topics[0].partitions[0]
            for b in data.batches:
                header = parse_batch(b)
                got += header.record_count
                offset = next_offset(header)
            if offset >= data.high_watermark or data.error_code:
                return

    await asyncio.gather(*(reader(p) for p in range(PARTITIONS)))
    elapsed = time.perf_counter() - started
    return {"records": min(got, records) if records else got, "seconds": round(elapsed, 3),
            "records_per_s": round(got / elapsed)}


async def _broker_raw(bootstrap: str, *, records: int, seconds: float) -> dict[str, Any]:
    raw = RawBroker(bootstrap)
    try:
        rf1 = await _raw_produce(raw, "raw-rf1", acks=1, records=records, seconds=seconds)
        print(f"broker_raw produce RF=1 acks=1: {rf1['records_per_s']:,} records/s")
        rf3 = await _raw_produce(raw, "raw-rf3", acks=-1, records=records, seconds=seconds)
        print(f"broker_raw produce RF=3 acks=all: {rf3['records_per_s']:,} records/s")
        cons = await _raw_consume(raw, "raw-rf1", records=0, seconds=seconds)
        print(f"broker_raw consume: {cons['records_per_s']:,} records/s")
    finally:
        await raw.close()
    return {"produce_rf1_acks1": rf1, "produce_rf3_acks_all": rf3, "consume": cons}


def broker_raw(bootstrap: str, *, records: int, seconds: float) -> dict[str, Any]:
    return asyncio.run(_broker_raw(bootstrap, records=records, seconds=seconds))


def meets(section: dict[str, Any]) -> dict[str, bool]:
    """Which targets a mode's figures meet."""
    out: dict[str, bool] = {name: section[name]["records_per_s"] >= TARGETS[name]
           for name in ("produce_rf1_acks1", "produce_rf3_acks_all", "consume")
           if name in section}
    e2e = section.get("end_to_end_rf3_acks_all")
    if e2e is not None:
        out["e2e_p99_ms"] = 0 <= e2e["p99_ms"] <= TARGETS["e2e_p99_ms"]
    return out


# --- client: the Tidelog client library -------------------------------------------------------


def produce(bootstrap: str, topic: str, *, acks: Any, records: int, seconds: float,
            linger_ms: int = 5, batch_size: int = 256 * 1024,
            send_many: bool = False, sec: dict[str, str] | None = None) -> dict[str, float]:
    values = [VALUE] * 1000
    with Producer(bootstrap, acks=acks, linger_ms=linger_ms, batch_size=batch_size,
                  **(sec or {})) as p:
        started = time.perf_counter()
        deadline = started + seconds
        sent = 0
        while sent < records and time.perf_counter() < deadline:
            if send_many:
                p.send_many(topic, values)
            else:
                for _ in range(1000):
                    p.send(topic, VALUE)
            sent += 1000
        p.flush()
        elapsed = time.perf_counter() - started
    return {"records": sent, "seconds": round(elapsed, 3), "records_per_s": round(sent / elapsed)}


def consume(bootstrap: str, topic: str, *, partitions: int, records: int,
            seconds: float, sec: dict[str, str] | None = None) -> dict[str, float]:
    with Consumer(bootstrap, max_poll_records=10_000, **(sec or {})) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        c.seek_to_beginning(*c.assignment())
        started = time.perf_counter()
        deadline = started + seconds
        got = 0
        while got < records and time.perf_counter() < deadline:
            got += len(c.poll(timeout_ms=500))
        elapsed = time.perf_counter() - started
    return {"records": got, "seconds": round(elapsed, 3), "records_per_s": round(got / elapsed)}


def end_to_end(bootstrap: str, topic: str, *, seconds: float,
               sec: dict[str, str] | None = None) -> dict[str, float]:
    """Send at E2E_RATE with the send time in the value; a consumer thread measures arrival."""
    latencies_ms: list[float] = []
    stop = threading.Event()
    with Consumer(bootstrap, fetch_max_wait_ms=100, **(sec or {})) as c:
        c.assign([TopicPartition(topic, 0)])
        c.seek_to_end(*c.assignment())
        c.position(TopicPartition(topic, 0))

        def reader() -> None:
            while not stop.is_set():
                for r in c.poll(timeout_ms=100):
                    sent_ns = int.from_bytes((r.value or b"")[:8], "big")
                    latencies_ms.append((time.perf_counter_ns() - sent_ns) / 1e6)

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        with Producer(bootstrap, acks="all", linger_ms=0, **(sec or {})) as p:
            interval = 1.0 / E2E_RATE
            started = time.perf_counter()
            n = 0
            while time.perf_counter() - started < seconds:
                # Sleep (not spin) to the next send: a spinning loop would take a core from the
                # servers on this 2-core machine and inflate the latencies measured.
                delay = started + n * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                p.send(topic, time.perf_counter_ns().to_bytes(8, "big") + VALUE[8:], partition=0)
                n += 1
            p.flush()
        time.sleep(1.0)
        stop.set()
        thread.join(5)
    lat = sorted(latencies_ms)
    return {"records": len(lat), "rate_per_s": E2E_RATE,
            "p50_ms": round(statistics.median(lat), 2) if lat else -1,
            "p99_ms": round(lat[int(len(lat) * 0.99) - 1], 2) if lat else -1}


def make_topics(bootstrap: str, sec: dict[str, str] | None = None) -> None:
    isr2 = {"min.insync.replicas": "2"}
    with Admin(bootstrap, **(sec or {})) as admin:
        admin.create_topics([
            NewTopic("rf1", num_partitions=PARTITIONS, replication_factor=1),
            NewTopic("rf3", num_partitions=PARTITIONS, replication_factor=3, configs=isr2),
            NewTopic("raw-rf1", num_partitions=PARTITIONS, replication_factor=1),
            NewTopic("raw-rf3", num_partitions=PARTITIONS, replication_factor=3, configs=isr2),
            NewTopic("e2e", num_partitions=1, replication_factor=3, configs=isr2),
        ]).all()
    time.sleep(1.0)  # leaders take over their partitions


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as tmp:
        cluster = LocalCluster.create(f"{tmp}/plain", controllers=3, brokers=3)
        out: dict[str, Any] = {}
        with cluster.running():
            bootstrap = cluster.bootstrap
            make_topics(bootstrap)
            if "broker_raw" in args.modes:
                out["broker_raw"] = broker_raw(bootstrap, records=args.records * 10,
                                               seconds=args.raw_seconds)
            if "client" in args.modes:
                out["client"] = client(bootstrap, args)
            if "client_send_many" in args.modes:
                out["client_send_many"] = client_send_many(bootstrap, args)
        if args.tls:
            out["client_tls"] = client_tls(f"{tmp}/tls", args)
            if "client" in out:
                out["tls_vs_plaintext"] = {
                    k: round(out["client_tls"][k]["records_per_s"]
                             / out["client"][k]["records_per_s"], 2)
                    for k in ("produce_rf1_acks1", "produce_rf3_acks_all", "consume")}
    meets_from = {k: v for k, v in out.items() if k != "tls_vs_plaintext"}
    return {
        "bench": "produce_consume", "value_bytes": len(VALUE), **out,
        "targets": TARGETS,
        "meets_targets": {mode: meets(section) for mode, section in meets_from.items()},
        "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version()},
    }


def client_tls(base: str, args: argparse.Namespace) -> dict[str, Any]:
    """The client phases against a cluster with TLS on every listener (``cluster up --tls``'s
    layout: a CA and node certificates in ``<dir>/pki``)."""
    cluster = LocalCluster.create(f"{base}/cluster", controllers=3, brokers=3, tls=True)
    sec = {"security_protocol": "SSL", "ssl_cafile": f"{base}/cluster/pki/ca.crt"}
    with cluster.running():
        make_topics(cluster.bootstrap, sec)
        print("TLS cluster:")
        return client(cluster.bootstrap, args, sec)


def client(bootstrap: str, args: argparse.Namespace,
           sec: dict[str, str] | None = None) -> dict[str, Any]:
    rf1 = produce(bootstrap, "rf1", acks=1, records=args.records, seconds=args.seconds, sec=sec)
    print(f"produce RF=1 acks=1: {rf1['records_per_s']:,} records/s")
    rf3 = produce(bootstrap, "rf3", acks="all", records=args.records, seconds=args.seconds,
                  sec=sec)
    print(f"produce RF=3 acks=all: {rf3['records_per_s']:,} records/s")
    cons = consume(bootstrap, "rf1", partitions=PARTITIONS, records=int(rf1["records"]),
                   seconds=args.seconds, sec=sec)
    print(f"consume: {cons['records_per_s']:,} records/s")
    e2e = end_to_end(bootstrap, "e2e", seconds=min(10.0, args.seconds), sec=sec)
    print(f"end-to-end at {E2E_RATE}/s RF=3 acks=all: p50 {e2e['p50_ms']} ms, "
          f"p99 {e2e['p99_ms']} ms")
    return {"produce_rf1_acks1": rf1, "produce_rf3_acks_all": rf3, "consume": cons,
            "end_to_end_rf3_acks_all": e2e}


def client_send_many(bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    rf1 = produce(bootstrap, "rf1", acks=1, records=args.records, seconds=args.seconds,
                  send_many=True)
    print(f"send_many produce RF=1 acks=1: {rf1['records_per_s']:,} records/s")
    rf3 = produce(bootstrap, "rf3", acks="all", records=args.records, seconds=args.seconds,
                  send_many=True)
    print(f"send_many produce RF=3 acks=all: {rf3['records_per_s']:,} records/s")
    return {"produce_rf1_acks1": rf1, "produce_rf3_acks_all": rf3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000,
                        help="records per client phase at most (broker_raw: 10x)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="seconds per client phase at most")
    parser.add_argument("--raw-seconds", type=float, default=5.0,
                        help="seconds per broker_raw phase at most")
    parser.add_argument("--modes", type=lambda v: v.split(","),
                        default=["broker_raw", "client", "client_send_many"],
                        help="comma-separated: broker_raw, client, client_send_many")
    parser.add_argument("--tls", action="store_true",
                        help="also run the client phases against a cluster with TLS on every "
                             "listener (section client_tls)")
    args = parser.parse_args()
    unknown = set(args.modes) - {"broker_raw", "client", "client_send_many"}
    if unknown:
        parser.error(f"unknown modes: {sorted(unknown)}")
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
