"""The principal and host of a call on the client listener."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ANONYMOUS", "Who", "who_is"]

#: Kafka's name for a client that did not authenticate.
ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True, slots=True)
class Who:
    principal: str
    host: str


def who_is(context: Any) -> Who:
    """``User:<CN>`` of the client certificate gRPC verified (TLS with client_auth required),
    else ANONYMOUS; the peer's IP address."""
    auth = context.auth_context() or {}
    names = auth.get("x509_common_name") or []
    principal = f"User:{names[0].decode()}" if names else ANONYMOUS
    return Who(principal, peer_host(context.peer() or ""))


def peer_host(peer: str) -> str:
    """The address of a gRPC peer string: ``ipv4:10.0.0.5:5123`` -> ``10.0.0.5``,
    ``ipv6:[::1]:5123`` -> ``::1``; anything else as it is."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    return peer
