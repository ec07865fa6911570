"""Every limit of the Toxiproxy-compatible server, in one place, with their relations asserted.

Each queue, buffer, collection and wait of the package is bounded by one of these. The HTTP
ones are handed to aiohttp (chaos/toxiproxy/server.py, chaos/toxiproxy/api.py), which enforces
them; the rest are enforced where the package keeps the thing they bound.
"""

from __future__ import annotations

from typing import Final

# -- the admin API (HTTP) ------------------------------------------------------------------------

#: A request's head (request line and headers), in all. aiohttp bounds the parts, not the sum,
#: so the parts below are chosen to add up to at most this.
HTTP_HEAD_BYTES_MAX: Final = 64 * 1024
#: The request line: long enough for two 256-character names percent-encoded as UTF-8.
HTTP_REQUEST_LINE_BYTES_MAX: Final = 8 * 1024
HTTP_HEADER_BYTES_MAX: Final = 4 * 1024  # one header line
HTTP_HEADERS_MAX: Final = 14  # toxiproxy-python (requests) sends 5 to 7
HTTP_BODY_BYTES_MAX: Final = 1024 * 1024
HTTP_CONNECTIONS_MAX: Final = 64
#: How long a request's head may take to arrive (aiohttp's keep-alive timeout, which also runs
#: from the connection's start), and then, separately, its body; also the idle keep-alive.
HTTP_REQUEST_TIMEOUT_S: Final = 15.0
#: On close, how long requests in flight may take to finish before they are cut.
HTTP_CLOSE_TIMEOUT_S: Final = 1.0

# -- proxies, toxics and their names -------------------------------------------------------------

PROXIES_MAX: Final = 1024
TOXICS_PER_PROXY_MAX: Final = 64
CONNECTIONS_PER_PROXY_MAX: Final = 4096
NAME_CHARS_MAX: Final = 256
ATTRIBUTE_VALUE_MAX: Final = 2**53  # exact in JSON and in a float

# -- the data path -------------------------------------------------------------------------------

#: Bytes a toxic pipe holds before it stops reading from its source (TCP then pushes back).
#: Under a latency toxic this caps a connection at 4 MiB per latency (40 MiB/s at 100 ms).
PIPE_QUEUE_BYTES_MAX: Final = 4 * 1024 * 1024
#: A toxic pipe yields to the event loop after this many writes in a row (slicer with delay 0).
PIPE_WRITES_PER_TURN_MAX: Final = 64
UPSTREAM_CONNECT_TIMEOUT_S: Final = 10.0

assert HTTP_REQUEST_LINE_BYTES_MAX + HTTP_HEADERS_MAX * HTTP_HEADER_BYTES_MAX <= HTTP_HEAD_BYTES_MAX
assert HTTP_BODY_BYTES_MAX >= HTTP_HEAD_BYTES_MAX
assert HTTP_CLOSE_TIMEOUT_S < HTTP_REQUEST_TIMEOUT_S
# A request line names at most a proxy and a toxic; each name takes at most 12 bytes a character
# percent-encoded as UTF-8, and the method, route words and version fit in 100 bytes.
assert 2 * NAME_CHARS_MAX * 12 + 100 <= HTTP_REQUEST_LINE_BYTES_MAX
assert PIPE_QUEUE_BYTES_MAX >= 64 * 1024  # above asyncio's write high-water mark
