"""Storage benchmark: the partition log against bare rocksdict, same bytes, same machine, same run.

    python -m bench.storage [--batches N] [--rounds R] [--json-only]

Append: ~16 KiB batches of 100-byte records (half random bytes, half repeated, so RocksDB's lz4
has something to do), one batch per append, appended from one Python thread with the default
flush policy (never: WAL on, no fsync). The partition log path is PartitionLog.append_as_leader on
batches already validated (the produce handler validates once, then appends); the bare path is
one rocksdict WriteBatch per batch with the batch under an 8-byte big-endian offset key plus a
small state key, as in shared/reference/libraries.md §2.

Fetch: a consumer-style scan from offset 0 to the end, 1 MiB per read: PartitionLog.read on one
side, a fresh iterator + seek_for_prev + forward reads on the other.

Each round uses a fresh RocksDB in a temp dir (removed, then os.sync() so its writeback does not
land on the next round); the two paths alternate which goes first, and the median round of each
is reported. The last line printed is one JSON object.

This module imports rocksdict for the baseline only: production code imports it in
broker/storage/rocks.py alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

from rocksdict import (
    ColumnFamily,
    DBCompressionType,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from tidelog.broker.storage import Storage, StorageConfig
from tidelog.data_dir import format_data_dir
from tidelog.record_batch import NewRecord, build_batch, parse_batch, validate_batch

RECORD_BYTES = 100
BATCH_BYTES_TARGET = 16 * 1024
DISTINCT_BATCHES = 32
FETCH_BYTES = 1 << 20
TOPIC_ID = bytes(range(16))
TARGET_RATIO = 0.70
TARGET_RECORDS_PER_S = 1_000_000
_OFFSET = struct.Struct(">Q")


def make_batches(rng: random.Random, now_ms: int) -> list[bytes]:
    """Distinct serialized batches of 100-byte records, each as close to 16 KiB as fits."""
    count = _records_per_batch(rng, now_ms)
    return [build_batch(_records(rng, count), now_ms=now_ms) for _ in range(DISTINCT_BATCHES)]


def _records(rng: random.Random, count: int) -> list[NewRecord]:
    half = RECORD_BYTES // 2
    return [NewRecord(None, rng.randbytes(half) + b"x" * (RECORD_BYTES - half))
            for _ in range(count)]


def _records_per_batch(rng: random.Random, now_ms: int) -> int:
    count = 1
    while len(build_batch(_records(rng, count + 1), now_ms=now_ms)) <= BATCH_BYTES_TARGET:
        count += 1
    return count


# --- partition log path ------------------------------------------------------------------------


def plog_round(root: Path, batches: list[bytes], total: int) -> dict[str, float]:
    data_dir = root / "plog"
    format_data_dir(data_dir, "bench", 0)
    parsed = [validate_batch(b) for b in batches]
    n = len(parsed)
    storage = Storage.open(data_dir, cluster_id="bench", node_id=0, config=StorageConfig())
    try:
        log = storage.get_or_create_log(TOPIC_ID, 0)
        now_ms = int(time.time() * 1000)
        append = log.append_as_leader
        start = time.perf_counter()
        for i in range(total):
            append(parsed[i % n], leader_epoch=1, now_ms=now_ms)
        append_s = time.perf_counter() - start
        log.update_high_watermark(log.log_end_offset)
        written = log.size_bytes
        leo = log.log_end_offset
        start = time.perf_counter()
        fetched_bytes, offset = 0, 0
        while offset < leo:
            got = log.read(offset, FETCH_BYTES).batches
            fetched_bytes += sum(len(b) for b in got)
            offset = _next_offset_after(got[-1])
        fetch_s = time.perf_counter() - start
    finally:
        storage.close()
    return {"append_s": append_s, "fetch_s": fetch_s, "bytes": written,
            "fetched_bytes": fetched_bytes, "records": leo}


def _next_offset_after(batch: bytes) -> int:
    # The consumer's next fetch offset; parsing one header per 1 MiB read is the consumer's cost.
    header = parse_batch(batch)
    return int(header.base_offset + header.record_count)


# --- bare rocksdict path -----------------------------------------------------------------------


def _open_bare(path: Path) -> tuple[Rdict, Rdict, ColumnFamily, ColumnFamily]:
    def cf_options() -> Options:
        o = Options(raw_mode=True)
        o.set_compression_type(DBCompressionType.lz4())
        return o

    opts = cf_options()
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_write_buffer_size(64 << 20)
    opts.set_max_write_buffer_number(3)
    opts.increase_parallelism(2)
    cfs = {"log": cf_options(), "state": cf_options()}
    db = Rdict(str(path), opts, column_families=cfs)
    return (db, db.get_column_family("log"), db.get_column_family_handle("log"),
            db.get_column_family_handle("state"))


def bare_round(root: Path, batches: list[bytes], records_per_batch: int, total: int
               ) -> dict[str, float]:
    db, log_cf, log_h, state_h = _open_bare(root / "bare")
    wo = WriteOptions()
    n = len(batches)
    prefix = TOPIC_ID + b"\x00\x00\x00\x00"
    try:
        start = time.perf_counter()
        for i in range(total):
            offset = i * records_per_batch
            wb = WriteBatch(raw_mode=True)
            wb.put(prefix + _OFFSET.pack(offset), batches[i % n], log_h)
            wb.put(prefix + b"S", _OFFSET.pack(offset + records_per_batch), state_h)
            db.write(wb, wo)
        append_s = time.perf_counter() - start
        written = sum(len(batches[i % n]) for i in range(total))
        leo = total * records_per_batch
        start = time.perf_counter()
        fetched_bytes, offset = 0, 0
        upper = prefix + b"\xff" * 8
        while offset < leo:
            got = _bare_fetch(log_cf, prefix + _OFFSET.pack(offset), upper)
            fetched_bytes += sum(len(b) for b in got)
            offset += len(got) * records_per_batch
        fetch_s = time.perf_counter() - start
    finally:
        del log_cf, log_h, state_h
        db.close()
    return {"append_s": append_s, "fetch_s": fetch_s, "bytes": written,
            "fetched_bytes": fetched_bytes, "records": leo}


def _bare_fetch(log_cf: Rdict, key: bytes, upper: bytes) -> list[bytes]:
    ro = ReadOptions()
    ro.set_iterate_upper_bound(upper)
    it = log_cf.iter(ro)
    it.seek_for_prev(key)
    got: list[bytes] = []
    total = 0
    while it.valid():
        value = it.value()
        total += len(value)
        if got and total > FETCH_BYTES:
            break
        got.append(value)
        it.next()
    return got


# --- driver ------------------------------------------------------------------------------------


def run_rounds(name: str, fn: Callable[[Path], dict[str, float]], results: list[dict[str, float]]
               ) -> None:
    root = Path(tempfile.mkdtemp(prefix=f"tidelog-bench-{name}-"))
    try:
        results.append(fn(root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        # Write back this round's dirty pages now, so the next round does not pay for them.
        os.sync()


def summarize(rounds: list[dict[str, float]]) -> dict[str, float]:
    append_s = statistics.median(r["append_s"] for r in rounds)
    fetch_s = statistics.median(r["fetch_s"] for r in rounds)
    r0 = rounds[0]
    mib = 1024 * 1024
    return {
        "append_records_per_s": round(r0["records"] / append_s),
        "append_mib_per_s": round(r0["bytes"] / mib / append_s, 1),
        "append_batches_per_s": round(r0["records"] / append_s / RECORDS_PER_BATCH),
        "fetch_records_per_s": round(r0["records"] / fetch_s),
        "fetch_mib_per_s": round(r0["fetched_bytes"] / mib / fetch_s, 1),
        "append_s_rounds": [round(r["append_s"], 3) for r in rounds],  # type: ignore[dict-item]
        "fetch_s_rounds": [round(r["fetch_s"], 3) for r in rounds],  # type: ignore[dict-item]
        "bytes_written": r0["bytes"],
    }


RECORDS_PER_BATCH = 0  # set in main()


def main(argv: list[str] | None = None) -> None:
    global RECORDS_PER_BATCH
    parser = argparse.ArgumentParser(prog="python -m bench.storage", description=__doc__.split(
        "\n")[0])
    parser.add_argument("--batches", type=int, default=20_000, help="batches appended per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per path (median reported)")
    args = parser.parse_args(argv)
    rng = random.Random(42)
    batches = make_batches(rng, now_ms=int(time.time() * 1000))
    RECORDS_PER_BATCH = parse_batch(batches[0]).record_count
    batch_bytes = statistics.mean(len(b) for b in batches)
    print(f"batch: {RECORDS_PER_BATCH} records of {RECORD_BYTES} B, {batch_bytes:.0f} B; "
          f"{args.batches} batches ({args.batches * batch_bytes / 2**20:.0f} MiB) per round, "
          f"{args.rounds} rounds per path")
    plog: list[dict[str, float]] = []
    bare: list[dict[str, float]] = []
    for r in range(args.rounds):
        # Alternate which path goes first, so neither always meets a colder or busier machine.
        for path in (("bare", "plog") if r % 2 == 0 else ("plog", "bare")):
            if path == "bare":
                run_rounds("bare", lambda root: bare_round(root, batches, RECORDS_PER_BATCH,
                                                           args.batches), bare)
            else:
                run_rounds("plog", lambda root: plog_round(root, batches, args.batches), plog)
        print(f"round {r + 1}: append bare {bare[-1]['append_s']:.2f} s, partition log "
              f"{plog[-1]['append_s']:.2f} s; fetch bare {bare[-1]['fetch_s']:.2f} s, partition "
              f"log {plog[-1]['fetch_s']:.2f} s")
    p, b = summarize(plog), summarize(bare)
    append_ratio = p["append_records_per_s"] / b["append_records_per_s"]
    fetch_ratio = p["fetch_records_per_s"] / b["fetch_records_per_s"]
    for name, s in (("bare rocksdict", b), ("partition log", p)):
        print(f"{name:>15}: append {s['append_records_per_s']:>10,} records/s "
              f"{s['append_mib_per_s']:7.1f} MiB/s {s['append_batches_per_s']:>7,} batches/s | "
              f"fetch {s['fetch_records_per_s']:>10,} records/s {s['fetch_mib_per_s']:7.1f} MiB/s")
    meets = append_ratio >= TARGET_RATIO and p["append_records_per_s"] >= TARGET_RECORDS_PER_S
    print(f"partition log / bare: append {append_ratio:.2f}, fetch {fetch_ratio:.2f} "
          f"(target: append >= {TARGET_RATIO:.2f} and >= {TARGET_RECORDS_PER_S:,} records/s: "
          f"{'met' if meets else 'NOT met'})")
    print(json.dumps({
        "bench": "storage",
        "record_bytes": RECORD_BYTES,
        "records_per_batch": RECORDS_PER_BATCH,
        "batch_bytes": round(batch_bytes),
        "batches_per_round": args.batches,
        "rounds": args.rounds,
        "flush_policy": "never",
        "partition_log": p,
        "bare_rocksdict": b,
        "append_ratio": round(append_ratio, 3),
        "fetch_ratio": round(fetch_ratio, 3),
        "target_met": meets,
        "machine": {
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "rocksdict": version("rocksdict"),
        },
    }))


if __name__ == "__main__":
    main()
