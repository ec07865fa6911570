"""A test process hosting one RaftQuorum with a list-of-batches state machine.

Run: ``python -m tests.integration.raft_node --node-id 0 --raft-address 127.0.0.1:P0
--peers 127.0.0.1:P0,127.0.0.1:P1,127.0.0.1:P2 --data-dir DIR --http-port H``.

Control channel: a small HTTP server on 127.0.0.1:H (JSON answers):
- ``GET /status``: the quorum's status() plus ``count`` and ``digest`` of the applied batches;
- ``POST /propose[?timeout_ms=N]`` (body = the batch): ``{"ok": true, "index": i}`` once
  committed and applied here, else ``{"ok": false, "reason": NAME, "leader": ADDRESS}``;
- ``POST /propose_many?count=N`` (body = a prefix): proposes ``prefix + %06d`` for 0..N-1,
  at most PROPOSE_MANY_IN_FLIGHT at once; ``{"ok": n, "failed": {reason: count}}`` once each
  has its outcome (many writes without an HTTP round trip each);
- ``POST /snapshot``: ask for a snapshot now.
SIGTERM closes the quorum cleanly; the tests also use kill -9.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import logging
import signal
import struct
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# Runnable as a script as well as with -m: put the repository root on the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tidelog.controller.raft import ProposeError, RaftQuorum, RaftSettings

_LENGTH = struct.Struct("<I")
#: How long one /propose waits for its outcome (the adapter's own timeout fires first).
_PROPOSE_WAIT_S = 10.0
#: Proposals one /propose_many keeps in flight (below proposals_in_flight_max).
PROPOSE_MANY_IN_FLIGHT = 256


class ListStateMachine:
    """Applied batches in order; the snapshot is the length-prefixed concatenation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # readers are HTTP threads; the writer is the tick thread
        self.batches: list[bytes] = []

    def apply(self, batch: bytes, index: int) -> None:
        with self._lock:
            self.batches.append(batch)

    def snapshot(self) -> bytes:
        with self._lock:
            return b"".join(_LENGTH.pack(len(b)) + b for b in self.batches)

    def restore(self, data: bytes) -> None:
        batches, offset = [], 0
        while offset < len(data):
            (length,) = _LENGTH.unpack_from(data, offset)
            batches.append(data[offset + 4:offset + 4 + length])
            offset += 4 + length
        with self._lock:
            self.batches = batches

    def summary(self) -> dict[str, Any]:
        with self._lock:
            digest = hashlib.sha256()
            for batch in self.batches:
                digest.update(_LENGTH.pack(len(batch)) + batch)
            return {"count": len(self.batches), "digest": digest.hexdigest()}


def _make_handler(quorum: RaftQuorum, machine: ListStateMachine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per poll would drown the node's log

        def _reply(self, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path != "/status":
                self.send_error(404)
                return
            self._reply({**quorum.status(), **machine.summary()})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            if self.path == "/snapshot":
                quorum.force_snapshot()
                self._reply({"ok": True})
            elif self.path.startswith("/propose_many"):
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                self._reply(_propose_many(quorum, body, int(query["count"][0])))
            elif self.path.startswith("/propose"):
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                timeout_ms = int(query["timeout_ms"][0]) if "timeout_ms" in query else None
                try:
                    index = quorum.propose(body, timeout_ms=timeout_ms).result(_PROPOSE_WAIT_S)
                    self._reply({"ok": True, "index": index})
                except ProposeError as exc:
                    self._reply({"ok": False, "reason": exc.reason.name,
                                 "leader": exc.leader_address})
            else:
                self.send_error(404)

    return Handler


def _propose_many(quorum: RaftQuorum, prefix: bytes, count: int) -> dict[str, Any]:
    ok, failed = 0, collections.Counter[str]()
    for start in range(0, count, PROPOSE_MANY_IN_FLIGHT):
        futures = [quorum.propose(prefix + b"%06d" % i)
                   for i in range(start, min(start + PROPOSE_MANY_IN_FLIGHT, count))]
        for future in futures:
            try:
                future.result(_PROPOSE_WAIT_S)
                ok += 1
            except ProposeError as exc:
                failed[exc.reason.name] += 1
    return {"ok": ok, "failed": dict(failed)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--raft-address", required=True)
    parser.add_argument("--peers", required=True, help="comma-separated, may include self")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--snapshot-min-entries", type=int,
                        default=RaftSettings.snapshot_min_entries)
    args = parser.parse_args()

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    machine = ListStateMachine()
    quorum = RaftQuorum(args.node_id, args.raft_address, args.peers.split(","), args.data_dir,
                        machine, settings=RaftSettings(
                            snapshot_min_entries=args.snapshot_min_entries))
    server = ThreadingHTTPServer(("127.0.0.1", args.http_port), _make_handler(quorum, machine))
    server.daemon_threads = True

    def stop(_signum: int, _frame: Any) -> None:
        # shutdown() blocks until serve_forever returns, so it cannot run on the serving thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
        quorum.close()


if __name__ == "__main__":
    main()
