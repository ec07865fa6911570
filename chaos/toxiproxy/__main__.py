"""`python -m tidelog.chaos.toxiproxy`: the Toxiproxy-compatible server as a process.

    python -m tidelog.chaos.toxiproxy --host 127.0.0.1 --port 8474 [--seed N] [--log-level INFO]

It prints one JSON line on stdout, {"api": "host:port"}, once the API listens, so that whoever
started it learns the port even when --port is 0 (chaos/proxies.py reads it), and runs until
SIGTERM or SIGINT. Logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys

from tidelog.chaos.toxiproxy.model import format_address
from tidelog.chaos.toxiproxy.server import DEFAULT_API_PORT, ToxiproxyApp


async def _serve(host: str, port: int, seed: int | None) -> None:
    app = ToxiproxyApp(seed=seed)
    try:
        await app.start(host, port)
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        print(json.dumps({"api": format_address(app.api_host, app.api_port)}), flush=True)
        await stopping.wait()
    finally:
        await app.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tidelog.chaos.toxiproxy",
        description="A TCP proxy with Toxiproxy's HTTP admin API (chaos/toxiproxy).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_API_PORT)
    parser.add_argument("--seed", type=int, default=None, help="seed for toxicity and jitter")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(_serve(args.host, args.port, args.seed))
    except OSError as error:
        print(f"toxiproxy server: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
