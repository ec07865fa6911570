"""What the leader's record check costs per record (tidelog.record_batch.validate_records).

``python -m bench.record_check [--rounds 7]`` builds, for each codec (none, gzip, lz4, zstd),
batches of 1,000 and of 100,000 records with 100-byte values (the first checked by protobuf's
parser, the second walked in Python, as every batch of more than 65,536 records is) and the
compacted-topic bomb's 500,000 records with short keys and empty values, and times, best of
``--rounds`` in this process:

* ``framing``: check_record_framing on the decompressed payload;
* ``check``: validate_records, what the leader runs on a produced batch (CRC, decompression,
  framing);
* ``check_keys``: the same with the keyless-record search of compacted topics;
* ``decode``: decode_records, what the leader did for compacted topics before (and what a
  consumer does), for comparison.

Prints ns per record, one line per batch, then one JSON line. Best-of because the machine is
shared: the minimum is the cost, the rest is other work.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from tidelog.compression import CODEC_NAMES, decompress
from tidelog.record_batch import (
    NewRecord,
    build_batch,
    check_record_framing,
    decode_records,
    validate_header,
    validate_records,
)

CASES = [("1k x 100 B", 1_000, b"x" * 100), ("100k x 100 B", 100_000, b"x" * 100),
         ("bomb 500k x 0 B", 500_000, b"")]


def best_ns_per_record(work: Callable[[], object], records: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return round(best / records * 1e9, 1)


def measure(codec_name: str, label: str, count: int, value: bytes,
            rounds: int) -> dict[str, Any]:
    codec = CODEC_NAMES[codec_name]
    data = build_batch([NewRecord(b"%d" % (i % 1000), value) for i in range(count)],
                       now_ms=1, compression=codec, max_bytes=1 << 30)
    batch = validate_header(data, max_bytes=1 << 30)
    payload = decompress(codec, batch.records, expected_size=batch.uncompressed_size)
    check_record_framing(payload, count)  # the expected offsets encoding, built once
    decode_rounds = max(1, rounds // 3)  # decoding 500,000 records takes seconds
    return {
        "codec": codec_name, "batch": label, "records": count, "stored_bytes": len(data),
        "framing": best_ns_per_record(lambda: check_record_framing(payload, count), count,
                                      rounds),
        "check": best_ns_per_record(lambda: validate_records(batch), count, rounds),
        "check_keys": best_ns_per_record(
            lambda: validate_records(batch, find_keyless=True), count, rounds),
        "decode": best_ns_per_record(lambda: decode_records(batch), count, decode_rounds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="timings per figure (best kept)")
    args = parser.parse_args()
    results = []
    for codec_name in ("none", "gzip", "lz4", "zstd"):
        for label, count, value in CASES:
            if codec_name == "none" and not value:
                continue  # the bomb is a compressed batch
            r = measure(codec_name, label, count, value, args.rounds)
            results.append(r)
            print(f"{codec_name:5} {label:16} ({r['stored_bytes']:>9,} B): framing "
                  f"{r['framing']:6.0f}  check {r['check']:6.0f}  check+keys "
                  f"{r['check_keys']:6.0f}  decode {r['decode']:6.0f}  ns/record")
    print(json.dumps({"bench": "record_check", "ns_per_record": results}))


if __name__ == "__main__":
    main()
