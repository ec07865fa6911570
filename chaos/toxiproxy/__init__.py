"""A TCP proxy with Toxiproxy's HTTP admin API, on asyncio (DESIGN.md section 10).

No Toxiproxy server binary can be installed here, so chaos tests drive this one with the real
toxiproxy-python client (or a real `toxiproxy-server` when one is on PATH; see chaos/proxies.py).
It follows Shopify Toxiproxy 2.x as far as that client and our tests use it: the same routes,
status codes, JSON shapes and error bodies ({"error": ..., "status": ...}), and the same toxics:
latency, bandwidth, timeout, reset_peer, slow_close, slicer, limit_data and noop. Where it
differs on purpose (a timeout toxic holds data instead of dropping it, half-closes are passed
on, attributes are checked strictly) is written down in docs/decisions.md.

Two ways to run it:
- in a test process: `ToxiproxyServer(port=0).start()` runs it on a background thread with its
  own event loop; `.stop()` ends it;
- as a process: `python -m tidelog.chaos.toxiproxy --host 127.0.0.1 --port 8474`; it prints one JSON
  line, {"api": "host:port"}, on stdout once it listens (so --port 0 can be used).

The modules, from the pure core out (the first four do no I/O and read no clock):
- limits.py: every limit, with their relations asserted;
- model.py: the API's values, checked: ApiError and Toxiproxy's error body, names, addresses,
  a proxy's configuration;
- toxics.py: the toxic kinds as data, a proxy's toxic, the checks of a create or update body;
- pipe.py: one direction of a connection, sans I/O: chunks in with their read times, what to
  write when given the toxics in force, a seeded rng and `now`;
- proxy.py: the TCP side: a proxy listens, each connection dials its upstream, and asyncio
  protocols drive a pipe per direction;
- api.py: the admin API's routes on aiohttp;
- server.py: the API's listener and the proxies in one event loop (ToxiproxyApp), and a
  background-thread runner for tests (ToxiproxyServer);
- __main__.py: the process.
"""

from tidelog.chaos.toxiproxy.api import VERSION
from tidelog.chaos.toxiproxy.server import DEFAULT_API_PORT, ToxiproxyApp, ToxiproxyServer

__all__ = ["DEFAULT_API_PORT", "VERSION", "ToxiproxyApp", "ToxiproxyServer"]
