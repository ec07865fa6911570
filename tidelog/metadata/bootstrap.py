"""Bootstrap records: what a brand-new cluster's first active controller writes after its NoOp
(Kafka's bootstrap.checkpoint, ``kafka-storage format --add-scram``).

The first user of a cluster that refuses anonymous clients has to come from somewhere: nobody
could call AlterUserScramCredentials before a user exists. So ``tidelog storage format
--add-scram 'SCRAM-SHA-256=[name=admin,password=...]'`` salts the password at format time and
keeps the resulting records in the controller's data dir (``bootstrap.records``, mode 0600: a
salted password is still worth guessing at; tidelog.data_dir writes and reads the file, this
module is pure). The active controller proposes them only while the
committed image is blank (nothing but NoOps ever committed), so they land once, in a new cluster,
and a later deletion of that user is not undone by a failover. Upserts are idempotent, so two
controllers formatted with the same users (different salts) cannot conflict: the first to lead
wins.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from tidelog import scram
from tidelog.errors import InvalidConfigError
from tidelog.metadata.image import MetadataImage
from tidelog.metadata.records import metadata_record
from tidelog.v1 import metadata_pb2

__all__ = ["ScramBootstrap", "decode_bootstrap", "encode_bootstrap", "is_blank",
           "parse_add_scram", "scram_records"]

_ADD_SCRAM = re.compile(r"^(?P<mechanism>[A-Za-z0-9-]+)=\[(?P<fields>.*)\]$")


@dataclass(frozen=True)
class ScramBootstrap:
    """One ``--add-scram`` user: ``password`` is salted by :func:`scram_records`."""

    mechanism: str
    name: str
    password: str
    iterations: int = scram.ITERATIONS_DEFAULT

    def __repr__(self) -> str:  # never the password
        return f"ScramBootstrap({self.mechanism}, name={self.name!r})"


def parse_add_scram(text: str) -> ScramBootstrap:
    """Kafka's ``--add-scram`` syntax, ``MECHANISM=[name=NAME,password=PASSWORD]`` with an
    optional ``iterations=N``; InvalidConfigError naming what is wrong (never echoing the
    password)."""
    match = _ADD_SCRAM.match(text.strip())
    if match is None:
        raise InvalidConfigError(
            "--add-scram takes MECHANISM=[name=NAME,password=PASSWORD], e.g. "
            "'SCRAM-SHA-256=[name=admin,password=...]'")
    mechanism = scram.mechanism_named(match["mechanism"])
    if mechanism is None:
        raise InvalidConfigError(f"--add-scram: {match['mechanism']!r} is not one of "
                                 f"{', '.join(scram.MECHANISMS)}")
    fields: dict[str, str] = {}
    for part in match["fields"].split(","):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ("name", "password", "iterations"):
            raise InvalidConfigError(f"--add-scram: unknown field {key.strip()!r} (name, "
                                     f"password, iterations)")
        fields[key.strip()] = value
    name, password = fields.get("name", ""), fields.get("password", "")
    problem = scram.user_name_problem(name)
    if problem is not None:
        raise InvalidConfigError(f"--add-scram: {problem}")
    if not password:
        raise InvalidConfigError(f"--add-scram: user {name!r} has no password")
    try:
        iterations = int(fields.get("iterations", scram.ITERATIONS_DEFAULT))
    except ValueError:
        raise InvalidConfigError("--add-scram: iterations must be a number") from None
    if not scram.ITERATIONS_MIN <= iterations <= scram.ITERATIONS_MAX:
        raise InvalidConfigError(f"--add-scram: iterations {iterations} are outside "
                                 f"{scram.ITERATIONS_MIN}..{scram.ITERATIONS_MAX}")
    return ScramBootstrap(mechanism.name, name, password, iterations)


def scram_records(users: Sequence[ScramBootstrap]) -> list[metadata_pb2.MetadataRecord]:
    """The credential records of ``users``, each salted with 32 fresh random bytes."""
    records = []
    for user in users:
        mechanism = scram.MECHANISMS[user.mechanism]
        salt = secrets.token_bytes(32)
        c = scram.credential_from_salted(
            user.name, mechanism, salt,
            scram.salted_password(mechanism, user.password, salt, user.iterations),
            user.iterations)
        records.append(metadata_record(metadata_pb2.UserScramCredentialRecord(
            name=c.name, mechanism=c.mechanism,  # type: ignore[arg-type]
            salt=c.salt, stored_key=c.stored_key, server_key=c.server_key,
            iterations=c.iterations)))
    return records


def encode_bootstrap(records: Sequence[metadata_pb2.MetadataRecord]) -> bytes:
    """The bytes of a bootstrap file (tidelog.data_dir writes and reads it)."""
    data: bytes = metadata_pb2.MetadataRecordBatch(records=list(records)).SerializeToString()
    return data


def decode_bootstrap(data: bytes, source: str) -> list[metadata_pb2.MetadataRecord]:
    """The records of a bootstrap file's bytes; InvalidConfigError naming ``source`` when they
    do not parse or hold anything but SCRAM credentials."""
    batch = metadata_pb2.MetadataRecordBatch()
    try:
        batch.ParseFromString(data)
    except Exception as e:  # protobuf's DecodeError, whatever its class
        raise InvalidConfigError(f"{source} does not parse: {e}") from None
    kinds = {r.WhichOneof("record") for r in batch.records}
    if not kinds <= {"user_scram_credential"}:
        raise InvalidConfigError(f"{source} holds records other than SCRAM credentials: "
                                 f"{', '.join(sorted(k or '?' for k in kinds))}")
    return list(batch.records)


def is_blank(image: MetadataImage) -> bool:
    """Whether nothing but NoOps was ever committed: the only time bootstrap records apply."""
    return (not image.cluster.brokers and not image.topics.by_name
            and not image.configs.resources and not image.acls.by_id
            and not image.scram.credentials and image.producer_ids.next_producer_id == 0)
