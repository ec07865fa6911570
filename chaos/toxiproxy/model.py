"""The values the admin API speaks in, checked: its errors, names, addresses and a proxy's
configuration. Pure: no sockets, no clocks (the toxics are in chaos/toxiproxy/toxics.py).

Every bad value is an ApiError carrying Toxiproxy's status and message, which the API answers as
Toxiproxy's error body, ``{"error": message, "status": status}``. The checks are stricter than
Toxiproxy's where a typo in a test would otherwise pass silently (docs/decisions.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidelog.chaos.toxiproxy.limits import NAME_CHARS_MAX

__all__ = [
    "ApiError",
    "ProxyConfig",
    "bad_body",
    "check_name",
    "error_body",
    "format_address",
    "parse_address",
]

#: Where a proxy listens when its create body names no address: this machine, a free port.
#: (Toxiproxy would take all interfaces; nothing of ours listens beyond loopback.)
DEFAULT_LISTEN = "127.0.0.1:0"


class ApiError(Exception):
    """An HTTP error answer, with Toxiproxy's message and status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def bad_body(reason: str) -> ApiError:
    return ApiError(400, f"bad request body: {reason}")


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": message, "status": status}


def check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ApiError(400, f"missing required field: {what}")
    # A name is a path segment of the API; one with "/" could never be addressed again.
    if len(value) > NAME_CHARS_MAX or "/" in value or not value.isprintable():
        raise bad_body(f"{what} must be printable, without '/', at most {NAME_CHARS_MAX} chars")
    return value


def parse_address(value: object, what: str, *, listen: bool) -> tuple[str, int]:
    """'host:port' or '[v6]:port'. A listen port may be 0 (any free port); an upstream host may
    be empty, meaning this machine, as Go's net.Dial reads it."""
    if not isinstance(value, str) or not value:
        raise ApiError(400, f"missing required field: {what}")
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit() or len(port_text) > 5:
        raise bad_body(f"{what} must be host:port, got {value!r}")
    port = int(port_text)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not (0 if listen else 1) <= port <= 65535:
        raise bad_body(f"{what} port out of range in {value!r}")
    if not listen and not host:
        host = "127.0.0.1"
    return host, port


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_enabled(value: object) -> bool:
    if not isinstance(value, bool):
        raise bad_body("enabled must be true or false")
    return value


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """What a proxy is asked to be: its name, where it listens, where it connects, whether it
    is enabled. The addresses are kept as given (checked), since the API shows them so."""

    name: str
    listen: str
    upstream: str
    enabled: bool

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> ProxyConfig:
        """A create (or populate) entry; checked in Toxiproxy's order: name, upstream, listen."""
        name = check_name(body.get("name"), "name")
        upstream = body.get("upstream")
        parse_address(upstream, "upstream", listen=False)
        listen = body.get("listen") or DEFAULT_LISTEN
        parse_address(listen, "listen", listen=True)
        enabled = _check_enabled(body.get("enabled", True))
        assert isinstance(upstream, str) and isinstance(listen, str)  # parse_address checked
        return cls(name, listen, upstream, enabled)

    def updated(self, body: dict[str, Any]) -> ProxyConfig:
        """This configuration after an update body: a field missing or empty keeps its value
        (as Toxiproxy's Proxy.Update); the name never changes."""
        listen = body.get("listen") or self.listen
        upstream = body.get("upstream") or self.upstream
        parse_address(listen, "listen", listen=True)
        parse_address(upstream, "upstream", listen=False)
        enabled = _check_enabled(body.get("enabled", self.enabled))
        assert isinstance(upstream, str) and isinstance(listen, str)  # parse_address checked
        return ProxyConfig(self.name, listen, upstream, enabled)
