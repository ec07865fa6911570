"""``bootstrap_servers``: the brokers a client first asks for metadata, parsed and checked
when the client is made (Kafka's ``bootstrap.servers``), so a typo fails at construction and
not at the first request. Public: the CLI checks ``--brokers`` with the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["DEFAULT_PORT", "parse_bootstrap"]

#: The port of a bootstrap server written without one (Kafka's).
DEFAULT_PORT = 9092


def parse_bootstrap(servers: str | Iterable[str]) -> list[str]:
    """``"host:port,host:port"`` or a list of ``host:port`` -> a list of ``host:port``.

    A missing port means 9092; IPv6 hosts are written ``[::1]:9092``. ValueError on anything else,
    so a typo fails at construction, not at the first request.
    """
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out: list[str] = []
    for raw in items:
        if not isinstance(raw, str):
            raise TypeError(f"bootstrap_servers entries must be strings, got {raw!r}")
        item = raw.strip()
        if not item:
            continue
        host, port = _split_host_port(item)
        out.append(f"{host}:{port}")
    if not out:
        raise ValueError("bootstrap_servers is empty: give at least one host:port")
    return list(dict.fromkeys(out))


def _split_host_port(item: str) -> tuple[str, int]:
    if item.startswith("["):
        end = item.find("]")
        if end < 0:
            raise ValueError(f"bootstrap server {item!r}: unclosed '[' in an IPv6 address")
        host, rest = item[: end + 1], item[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ("" if not rest else None)
    elif item.count(":") == 1:
        host, port_text = item.split(":")
    elif ":" not in item:
        host, port_text = item, ""
    else:
        raise ValueError(f"bootstrap server {item!r}: write IPv6 addresses as [addr]:port")
    if port_text is None or not host:
        raise ValueError(f"bootstrap server {item!r} is not host:port")
    if port_text == "":
        return host, DEFAULT_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"bootstrap server {item!r}: port must be 1..65535")
    return host, int(port_text)
