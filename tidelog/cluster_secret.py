"""The cluster secret and the credentials derived from it: how nodes prove who they are.

The **cluster secret** (the root) is generated when the cluster is laid out (``tidelog cluster
up``, ``tidelog dev``, ``tidelog deploy render``, or ``tidelog storage random-secret`` for
hand-made clusters) and kept in a file only the node's user can read (``cluster_secret_file``).
It stays on the controllers (combined nodes are controllers) and with whoever lays the cluster
out: it is the root of every broker's credential and of the Raft key, so a node holding it could
act as any broker or as a voter. Clients never have it.

Nothing sends the root itself. Each use gets a key of its own, derived with HMAC-SHA256 over a
purpose label (:func:`derive_key`), so a key that leaks from one use opens nothing else:

* ``raft`` — authenticates the controllers' Raft transport (controller/raft);
* ``broker/<id>`` — broker ``<id>``'s own credential (:class:`BrokerCredential`), the only
  secret a broker-only node holds (``broker_credential_file``, written by ``tidelog storage
  broker-credential`` from the root). It cannot be turned into the root, another broker's
  credential or the Raft key (HMAC is one-way). What it presents:

  - to the controllers: the credential's key, which the controllers recompute from the root;
  - to other brokers' inter-broker listeners: a key derived from it for that audience, which a
    broker checks against the **verifier** the active controller wrote into the broker's
    registration (``RegisterBrokerRecord.credential_verifier``, a SHA-256 of that key, as
    SCRAM's StoredKey): a broker can check another's credential without holding it, and a
    leader, which sees its followers' inter-broker keys on every fetch, cannot replay them to
    the controllers;

* ``scram-decoy-salts`` — keys the made-up salts ``ScramSalt`` answers for unknown users; the
  same on every broker, so every broker's credential file carries it.

These credentials are bearer tokens in gRPC metadata: a capture could be replayed. So they are
a proof only inside TLS, where a broker's certificate must also name its id (tidelog.peer_auth),
or on loopback; tidelog.config refuses a plaintext controller or inter-broker listener anywhere
else. A node without any secret is allowed only when every listener it has binds loopback
(development); tidelog.config refuses anything else with a one-line reason.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.errors import InvalidConfigError

__all__ = [
    "AUDIENCES",
    "BROKERS",
    "CONTROLLERS",
    "PEER_AUTH_METADATA",
    "PEER_ID_METADATA",
    "SECRET_CHARS_MIN",
    "BrokerCredential",
    "broker_certificate_name",
    "broker_credential",
    "broker_credential_text",
    "credential_verifier",
    "derive_key",
    "generate_secret",
    "is_loopback",
    "node_certificate_name",
    "read_broker_credential_file",
    "read_secret_file",
    "write_broker_credential_file",
    "write_secret_file",
]

#: A secret shorter than this is refused: it would be guessable offline from one credential.
SECRET_CHARS_MIN = 32
#: gRPC metadata keys a broker sends to prove who it is (lower case: gRPC's rule).
PEER_ID_METADATA = "tidelog-peer-id"
PEER_AUTH_METADATA = "tidelog-peer-auth"
#: Whom a broker presents its credential to: each gets a key of its own (see the module doc).
CONTROLLERS = "controllers"
BROKERS = "brokers"
AUDIENCES = (CONTROLLERS, BROKERS)
_LABEL_PREFIX = b"tidelog/v1/"
_VERIFIER_LABEL = b"tidelog/v1/inter-broker-verifier/"
_KEY_HEX = re.compile(r"[0-9a-f]{64}")


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
    where = f"cluster_secret_file {path}"
    secret = _read_private(path, where).strip()
    if secret.startswith("#") and "broker_id" in secret:
        raise InvalidConfigError(f"{where} holds a broker credential, not the cluster secret")
    check_secret(secret, where=where)
    return secret


def _read_private(path: str | Path, where: str) -> str:
    """The text of a file only its owner may read, or InvalidConfigError naming ``where``."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
        text = p.read_text()
    except OSError as e:
        raise InvalidConfigError(f"cannot read {where}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise InvalidConfigError(f"{where} is not text") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidConfigError(
            f"{where} is readable by others (mode {stat.filemode(mode)}); chmod 600 it")
    return text


def check_secret(secret: str, *, where: str) -> None:
    if len(secret) < SECRET_CHARS_MIN or any(c.isspace() for c in secret):
        raise InvalidConfigError(
            f"{where}: a cluster secret must be one line of at least {SECRET_CHARS_MIN} "
            f"characters without spaces (make one with `tidelog storage random-secret`)")


def derive_key(secret: str, purpose: str) -> bytes:
    """The 32-byte key for one ``purpose`` (``raft``, ``broker/<id>``) of ``secret``."""
    return hmac.new(secret.encode(), _LABEL_PREFIX + purpose.encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class BrokerCredential:
    """Broker ``broker_id``'s own credential, and the cluster's SCRAM decoy key (see the
    module doc). ``repr()`` shows neither key."""

    broker_id: int
    key: bytes = field(repr=False)
    scram_decoy_key: bytes = field(repr=False)

    def presented_to(self, audience: str) -> str:
        """What this broker sends in ``PEER_AUTH_METADATA`` to ``audience`` (hex)."""
        if audience == CONTROLLERS:
            return self.key.hex()
        if audience == BROKERS:
            return hmac.new(self.key, _LABEL_PREFIX + b"to-brokers", hashlib.sha256).hexdigest()
        raise ValueError(f"audience must be one of {AUDIENCES}, got {audience!r}")

    def verifier(self) -> bytes:
        """The one-way image of what this broker presents to brokers, which its registration
        carries (:func:`credential_verifier`)."""
        return credential_verifier(self.presented_to(BROKERS))


def broker_credential(secret: str, broker_id: int) -> BrokerCredential:
    """Broker ``broker_id``'s credential, derived from the cluster secret."""
    if broker_id < 0:
        raise ValueError(f"a broker id is >= 0, got {broker_id}")
    return BrokerCredential(broker_id, derive_key(secret, f"broker/{broker_id}"),
                            derive_key(secret, "scram-decoy-salts"))


def credential_verifier(presented: str) -> bytes:
    """SHA-256 of an inter-broker key as presented: what a broker's registration carries and
    other brokers compare with, which does not give the key back."""
    return hashlib.sha256(_VERIFIER_LABEL + presented.encode()).digest()


def broker_credential_text(credential: BrokerCredential) -> str:
    """The text of a broker credential file, as ``broker_credential_file`` reads it."""
    return "\n".join([
        "# A Tidelog broker credential (tidelog storage broker-credential): this broker's only",
        "# secret. Keep it on this broker, mode 0600; never the cluster secret.",
        f"broker_id = {credential.broker_id}",
        f'credential = "{credential.key.hex()}"',
        f'scram_decoy_key = "{credential.scram_decoy_key.hex()}"', ""])


def write_broker_credential_file(path: str | Path, credential: BrokerCredential) -> None:
    """Write ``credential`` to ``path`` (mode 0600, atomically)."""
    write_secret_file(path, broker_credential_text(credential).strip())


def read_broker_credential_file(path: str | Path, *, broker_id: int) -> BrokerCredential:
    """Broker ``broker_id``'s credential in ``path``, or InvalidConfigError naming what is
    wrong (unreadable, readable by others, not a credential file, another broker's)."""
    where = f"broker_credential_file {path}"
    text = _read_private(path, where)
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        table = {}
    keys = {"broker_id", "credential", "scram_decoy_key"}
    if set(table) != keys or not isinstance(table["broker_id"], int) or not all(
            isinstance(table[k], str) and _KEY_HEX.fullmatch(table[k])
            for k in ("credential", "scram_decoy_key")):
        hint = (" (it holds a cluster secret: a broker gets its own credential instead)"
                if _looks_like_secret(text) else "")
        raise InvalidConfigError(
            f"{where} is not a broker credential{hint}: make one with `tidelog storage "
            f"broker-credential --secret-file <the cluster secret> --broker-id {broker_id} "
            f"--out FILE`")
    if table["broker_id"] != broker_id:
        raise InvalidConfigError(
            f"{where} is broker {table['broker_id']}'s credential, and this is node "
            f"{broker_id}: each broker holds its own")
    return BrokerCredential(broker_id, bytes.fromhex(table["credential"]),
                            bytes.fromhex(table["scram_decoy_key"]))


def _looks_like_secret(text: str) -> bool:
    line = text.strip()
    return len(line) >= SECRET_CHARS_MIN and not any(c.isspace() for c in line)


def broker_certificate_name(broker_id: int) -> str:
    """The common name broker ``broker_id``'s TLS certificate must have (tidelog.peer_auth
    checks it on the controller and inter-broker listeners)."""
    return f"broker-{broker_id}"


def node_certificate_name(node_id: int, roles: tuple[str, ...] | list[str]) -> str:
    """The common name of a node's certificate: ``broker-<id>`` for a node with the broker role
    (combined nodes too: they act as that broker), ``controller-<id>`` otherwise."""
    return broker_certificate_name(node_id) if "broker" in roles else f"controller-{node_id}"


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
