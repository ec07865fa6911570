"""SCRAM credentials (RFC 5802 and 7677, as Kafka stores them: KIP-554), pure.

A user's password is never stored nor sent to a broker. ``tidelog user create`` salts it on
the client (PBKDF2-HMAC, the "salted password"), the controller keeps only what RFC 5802 lets a
server keep: the salt, the iterations, ``StoredKey = H(ClientKey)`` and ``ServerKey``, where
``ClientKey = HMAC(salted password, "Client Key")``.

How a client proves it knows the password (docs/security.md, "SCRAM users"): SCRAM's four-message
exchange is a per-connection conversation, and a gRPC call has no connection of its own to hang a
conversation on. So a SASL_SSL client asks any broker for its salt and iterations once
(``ScramSalt``), derives ``ClientKey`` locally, and sends it with every call in its call
credentials, inside TLS. The broker checks ``H(ClientKey) == StoredKey``: one hash per call,
no session state, a deleted or changed credential refused on the next call. What this gives up
against full SCRAM: the ClientKey is a bearer token for the life of the password (TLS is
required to carry it; a plaintext listener refuses SASL), and the client does not check the
server's ServerSignature (TLS already authenticates the broker by its certificate).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from tidelog.v1.common_pb2 import ScramMechanism

__all__ = [
    "ITERATIONS_DEFAULT",
    "ITERATIONS_MAX",
    "ITERATIONS_MIN",
    "MECHANISMS",
    "METADATA_MECHANISM",
    "METADATA_PROOF",
    "METADATA_USER",
    "Mechanism",
    "ScramCredential",
    "client_key",
    "credential_from_salted",
    "decoy_iterations",
    "decoy_salt",
    "mechanism_named",
    "request_users",
    "salted_password",
    "upsertion_problem",
    "user_name_problem",
    "verify",
]

#: Kafka's bounds on SCRAM iterations (ScramMechanism.minIterations / maxIterations).
ITERATIONS_MIN: Final = 4096
ITERATIONS_MAX: Final = 16384
#: kafka-configs' default for a new credential.
ITERATIONS_DEFAULT: Final = 4096
#: Salt lengths accepted from a client (Kafka makes 32-byte salts; RFC 5802 sets no bound).
SALT_BYTES_MIN: Final = 16
SALT_BYTES_MAX: Final = 64
#: A user name's length, at most (Kafka sets none; a bound keeps records small).
USER_NAME_MAX: Final = 255


@dataclass(frozen=True, slots=True)
class Mechanism:
    """One SCRAM mechanism: its SASL name, protobuf value and hash."""

    name: str
    value: int
    hash_name: str

    @property
    def key_bytes(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()


MECHANISMS: Final[dict[str, Mechanism]] = {
    m.name: m for m in (Mechanism("SCRAM-SHA-256", ScramMechanism.SCRAM_SHA_256, "sha256"),
                        Mechanism("SCRAM-SHA-512", ScramMechanism.SCRAM_SHA_512, "sha512"))
}
_BY_VALUE: Final = {m.value: m for m in MECHANISMS.values()}


def mechanism_named(name_or_value: str | int) -> Mechanism | None:
    """The mechanism for a SASL name (``SCRAM-SHA-256``) or a protobuf value; None if unknown."""
    if isinstance(name_or_value, int):
        return _BY_VALUE.get(name_or_value)
    return MECHANISMS.get(name_or_value.upper())


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the metadata log holds for one (user, mechanism)."""

    name: str
    mechanism: int
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def salted_password(mechanism: Mechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(Normalize(password), salt, i): PBKDF2-HMAC. Passwords are taken as UTF-8
    without SASLprep, as Kafka's Java client does (ScramFormatter.normalize)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def client_key(mechanism: Mechanism, salted: bytes) -> bytes:
    return mechanism.hmac(salted, b"Client Key")


def credential_from_salted(name: str, mechanism: Mechanism, salt: bytes, salted: bytes,
                           iterations: int) -> ScramCredential:
    """The stored form of a salted password (what the controller writes)."""
    return ScramCredential(name=name, mechanism=mechanism.value, salt=salt,
                           stored_key=mechanism.hash(client_key(mechanism, salted)),
                           server_key=mechanism.hmac(salted, b"Server Key"),
                           iterations=iterations)


def verify(credential: ScramCredential, proof: bytes) -> bool:
    """Whether ``proof`` is the ClientKey of ``credential``'s password (constant time)."""
    mechanism = _BY_VALUE[credential.mechanism]
    if len(proof) != mechanism.key_bytes:
        return False
    return hmac.compare_digest(mechanism.hash(proof), credential.stored_key)


def decoy_salt(key: bytes, name: str, mechanism: Mechanism) -> bytes:
    """A stable salt for a user without a credential, so ScramSalt does not reveal who exists
    (the same on every broker of a cluster: ``key`` is derived from the cluster id)."""
    return hmac.new(key, f"{mechanism.name}\0{name}".encode(), "sha256").digest()


def decoy_iterations(key: bytes, name: str, mechanism: Mechanism,
                     in_use: Sequence[int]) -> int:
    """Iterations for a user without a credential that look like a real user's: one of the
    iterations the mechanism's real credentials use (``in_use``, sorted, one entry per
    credential), picked by a keyed hash of the name, so decoys are as common at each value as
    real users are, and stable per name. No credentials yet: the default."""
    if not in_use:
        return ITERATIONS_DEFAULT
    digest = hmac.new(key, f"iterations\0{mechanism.name}\0{name}".encode(), "sha256").digest()
    return in_use[int.from_bytes(digest[:8], "big") % len(in_use)]


def user_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a SCRAM user, or None."""
    if not name:
        return "the user name is empty"
    if len(name) > USER_NAME_MAX:
        return f"the user name is {len(name)} characters long, above {USER_NAME_MAX}"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return f"the user name {name!r} contains a control character"
    if name != name.strip():
        return f"the user name {name!r} has leading or trailing whitespace"
    return None


def upsertion_problem(name: str, mechanism_value: int, iterations: int, salt: bytes,
                      salted: bytes) -> tuple[str, str] | None:
    """Why a credential upsertion is refused, as (error code name, message), or None. The same
    checks as Kafka's ScramControlManager, with its codes."""
    problem = user_name_problem(name)
    if problem is not None:
        return "UNACCEPTABLE_CREDENTIAL", problem
    mechanism = _BY_VALUE.get(mechanism_value)
    if mechanism is None:
        return "UNSUPPORTED_SASL_MECHANISM", f"unknown SCRAM mechanism {mechanism_value}"
    if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
        return ("UNACCEPTABLE_CREDENTIAL", f"iterations {iterations} are outside "
                f"{ITERATIONS_MIN}..{ITERATIONS_MAX} for {mechanism.name}")
    if not SALT_BYTES_MIN <= len(salt) <= SALT_BYTES_MAX:
        return ("UNACCEPTABLE_CREDENTIAL", f"a salt of {len(salt)} bytes; "
                f"{SALT_BYTES_MIN}..{SALT_BYTES_MAX} are accepted")
    if len(salted) != mechanism.key_bytes:
        return ("UNACCEPTABLE_CREDENTIAL", f"a salted password of {len(salted)} bytes; "
                f"{mechanism.name} makes {mechanism.key_bytes}")
    return None


# --- the call credentials' metadata keys (a SASL_SSL client sends all three on every call)
#: The mechanism's SASL name, e.g. SCRAM-SHA-256.
METADATA_MECHANISM: Final = "tidelog-sasl-mechanism"
#: The user name, UTF-8 bytes (binary, so that a name need not be ASCII).
METADATA_USER: Final = "tidelog-sasl-username-bin"
#: The ClientKey, binary (gRPC's "-bin" suffix: sent base64 on the wire, bytes in Python).
METADATA_PROOF: Final = "tidelog-scram-client-key-bin"


def request_users(request: Any) -> list[str]:
    """The users an AlterUserScramCredentials request names, in first-seen order (its response
    has one result per user, as Kafka's does)."""
    users: dict[str, None] = {}
    for item in (*request.deletions, *request.upsertions):
        users.setdefault(item.name, None)
    return list(users)
