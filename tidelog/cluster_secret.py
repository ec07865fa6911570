"""The cluster secret: what lets brokers and controllers prove to each other who they are.

Until mutual TLS lands (the security issue), nodes of one cluster share one secret, generated
when the cluster is laid out (``tidelog cluster up``, ``tidelog dev``, or ``tidelog storage
random-secret`` for hand-made clusters) and kept in a file only the node's user can read
(``cluster_secret_file`` in node.toml). Clients never have it.

Nothing sends the secret itself. Each use gets a key of its own, derived with HMAC-SHA256 over a
purpose label (:func:`derive_key`), so a key that leaks from one use (say a broker's replication
credential, sent in gRPC metadata) opens nothing else:

* ``raft`` — authenticates the controllers' Raft transport (controller/raft);
* ``broker/<id>`` — the credential broker ``<id>`` presents on the inter-broker listener and to
  the controllers (:func:`broker_credential`). A credential names its broker: broker 101's
  cannot fetch as broker 102.

A node without a secret is allowed only when every listener it has binds loopback
(development); tidelog.config refuses anything else with a one-line reason.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import stat
from pathlib import Path

from tidelog.errors import InvalidConfigError

__all__ = [
    "PEER_AUTH_METADATA",
    "PEER_ID_METADATA",
    "SECRET_CHARS_MIN",
    "broker_credential",
    "derive_key",
    "generate_secret",
    "is_loopback",
    "read_secret_file",
    "verify_broker_credential",
    "write_secret_file",
]

#: A secret shorter than this is refused: it would be guessable offline from one credential.
SECRET_CHARS_MIN = 32
#: gRPC metadata keys a broker sends to prove who it is (lower case: gRPC's rule).
PEER_ID_METADATA = "tidelog-peer-id"
PEER_AUTH_METADATA = "tidelog-peer-auth"
_LABEL_PREFIX = b"tidelog/v1/"


def generate_secret() -> str:
    """A new cluster secret: 256 random bits, URL-safe text (43 characters)."""
    return secrets.token_urlsafe(32)


def write_secret_file(path: str | Path, secret: str) -> None:
    """Write ``secret`` to ``path`` readable by its owner only (0600), atomically."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(p)


def read_secret_file(path: str | Path) -> str:
    """The secret in ``path`` (one line), or InvalidConfigError naming what is wrong."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
        text = p.read_text()
    except OSError as e:
        raise InvalidConfigError(f"cannot read cluster_secret_file {p}: {e.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidConfigError(
            f"cluster_secret_file {p} is readable by others (mode {stat.filemode(mode)}); "
            f"chmod 600 it")
    secret = text.strip()
    check_secret(secret, where=f"cluster_secret_file {p}")
    return secret


def check_secret(secret: str, *, where: str) -> None:
    if len(secret) < SECRET_CHARS_MIN or any(c.isspace() for c in secret):
        raise InvalidConfigError(
            f"{where}: a cluster secret must be one line of at least {SECRET_CHARS_MIN} "
            f"characters without spaces (make one with `tidelog storage random-secret`)")


def derive_key(secret: str, purpose: str) -> bytes:
    """The 32-byte key for one ``purpose`` (``raft``, ``broker/<id>``) of ``secret``."""
    return hmac.new(secret.encode(), _LABEL_PREFIX + purpose.encode(), hashlib.sha256).digest()


def broker_credential(secret: str, broker_id: int) -> str:
    """What broker ``broker_id`` sends in ``PEER_AUTH_METADATA`` (hex)."""
    return derive_key(secret, f"broker/{broker_id}").hex()


def verify_broker_credential(secret: str, broker_id: int, credential: str) -> bool:
    """Whether ``credential`` is broker ``broker_id``'s (constant-time comparison)."""
    return hmac.compare_digest(broker_credential(secret, broker_id).encode(),
                               credential.encode())


def is_loopback(host: str) -> bool:
    """Whether ``host`` names a loopback address only (127.0.0.0/8, ::1, localhost).

    A wildcard ("", 0.0.0.0, ::) and any name that is not ``localhost`` count as not loopback:
    a name can resolve anywhere.
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
