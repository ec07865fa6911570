"""tidelog.scram (pure) and SCRAM credentials in the metadata image and its snapshots."""

from __future__ import annotations

import base64
import hmac
import random
import re
from pathlib import Path

import pytest

from tidelog import scram
from tidelog.controller.control import ControllerLogic
from tidelog.data_dir import read_bootstrap, write_bootstrap
from tidelog.errors import InvalidConfigError
from tidelog.metadata.bootstrap import parse_add_scram, scram_records
from tidelog.metadata.delta import MetadataDelta, apply_records
from tidelog.metadata.image import MetadataImage
from tidelog.metadata.records import image_to_snapshot, metadata_record
from tidelog.v1 import metadata_pb2

SHA256 = scram.MECHANISMS["SCRAM-SHA-256"]


def test_key_derivation_matches_rfc_7677_example() -> None:
    # RFC 7677 section 3: user "user", password "pencil"; our keys must give its ClientProof
    # and ServerSignature for its AuthMessage.
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    auth_message = (f"n=user,r=rOprNGfwEbeRWgbNEkqO,r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,"
                    f"i=4096,c=biws,r={nonce}").encode()
    salted = scram.salted_password(SHA256, "pencil", salt, 4096)
    credential = scram.credential_from_salted("user", SHA256, salt, salted, 4096)
    client_key = scram.client_key(SHA256, salted)
    signature = hmac.new(credential.stored_key, auth_message, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    assert base64.b64encode(proof).decode() == "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    server_signature = hmac.new(credential.server_key, auth_message, "sha256").digest()
    assert base64.b64encode(server_signature).decode() == \
        "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_verify_accepts_the_client_key_only() -> None:
    m = scram.MECHANISMS["SCRAM-SHA-512"]
    salted = scram.salted_password(m, "right", b"s" * 16, 4096)
    credential = scram.credential_from_salted("u", m, b"s" * 16, salted, 4096)
    assert scram.verify(credential, scram.client_key(m, salted))
    wrong = scram.salted_password(m, "wrong", b"s" * 16, 4096)
    assert not scram.verify(credential, scram.client_key(m, wrong))
    assert not scram.verify(credential, b"")
    assert not scram.verify(credential, credential.stored_key)  # the stored form is no proof


def test_decoy_salt_is_stable_per_user_and_key() -> None:
    a = scram.decoy_salt(b"k", "nobody", SHA256)
    assert a == scram.decoy_salt(b"k", "nobody", SHA256)
    assert a != scram.decoy_salt(b"k", "somebody", SHA256)
    assert a != scram.decoy_salt(b"other", "nobody", SHA256)


def test_user_name_problems() -> None:
    assert scram.user_name_problem("alice") is None
    assert scram.user_name_problem("") == "the user name is empty"
    assert "control character" in (scram.user_name_problem("a\nb") or "")
    assert "whitespace" in (scram.user_name_problem(" a") or "")
    assert "above 255" in (scram.user_name_problem("x" * 256) or "")


def _upsert(name: str, password: str) -> metadata_pb2.MetadataRecord:
    salt = name.encode().ljust(16, b"-")
    c = scram.credential_from_salted(name, SHA256, salt,
                                     scram.salted_password(SHA256, password, salt, 4096), 4096)
    return metadata_record(metadata_pb2.UserScramCredentialRecord(
        name=name, mechanism=c.mechanism, salt=c.salt,  # type: ignore[arg-type]
        stored_key=c.stored_key, server_key=c.server_key, iterations=c.iterations))


def test_credentials_replay_replace_remove_and_survive_a_snapshot() -> None:
    image = apply_records(MetadataImage.empty(), [_upsert("alice", "a"), _upsert("bob", "b")])
    image = apply_records(image, [_upsert("alice", "changed")])  # a password change replaces
    alice = image.scram.get("alice", SHA256.value)
    assert alice is not None
    assert scram.verify(alice, scram.client_key(SHA256, scram.salted_password(
        SHA256, "changed", alice.salt, 4096)))
    image = apply_records(image, [metadata_record(metadata_pb2.RemoveUserScramCredentialRecord(
        name="bob", mechanism=SHA256.value))])  # type: ignore[arg-type]
    assert sorted(image.scram.users()) == ["alice"]
    snapshot = image_to_snapshot(image, cluster_id="c")
    rebuilt = apply_records(MetadataImage.empty(), list(snapshot.records))
    assert rebuilt.scram == image.scram
    assert "keys=" in "\n".join(image.canonical_lines())
    assert alice.stored_key.hex() not in "\n".join(image.canonical_lines())


def test_replay_refuses_malformed_credentials_and_unknown_removals() -> None:
    delta = MetadataDelta(MetadataImage.empty())
    bad_keys = metadata_record(metadata_pb2.UserScramCredentialRecord(
        name="x", mechanism=SHA256.value, salt=b"s" * 16,  # type: ignore[arg-type]
        stored_key=b"short", server_key=b"short", iterations=4096))
    outcome = delta.replay_batch([bad_keys], 0)
    assert outcome is not None and "malformed" in str(outcome)
    delta = MetadataDelta(MetadataImage.empty())
    outcome = delta.replay_batch([metadata_record(metadata_pb2.RemoveUserScramCredentialRecord(
        name="ghost", mechanism=SHA256.value))], 0)  # type: ignore[arg-type]
    assert outcome is not None and "ghost" in str(outcome)


# --- bootstrap users (tidelog storage format --add-scram) -------------------------------------

def test_add_scram_parses_kafkas_syntax_and_names_each_mistake() -> None:
    user = parse_add_scram("SCRAM-SHA-512=[name=admin,password=pa=ss,iterations=8192]")
    assert (user.mechanism, user.name, user.password, user.iterations) == \
        ("SCRAM-SHA-512", "admin", "pa=ss", 8192)
    assert "pa=ss" not in repr(user)
    for text, says in [("admin:secret", "takes MECHANISM=[name=NAME,password=PASSWORD]"),
                       ("SCRAM-MD5=[name=a,password=b]", "'SCRAM-MD5' is not one of"),
                       ("SCRAM-SHA-256=[name=a,pw=b]", "unknown field 'pw'"),
                       ("SCRAM-SHA-256=[name=a]", "user 'a' has no password"),
                       ("SCRAM-SHA-256=[name=,password=b]", "the user name is empty"),
                       ("SCRAM-SHA-256=[name=a,password=b,iterations=9]", "outside 4096..16384")]:
        with pytest.raises(InvalidConfigError, match=re.escape(says)):
            parse_add_scram(text)


def test_bootstrap_records_round_trip_through_the_data_dir(tmp_path: Path) -> None:
    records = scram_records([parse_add_scram("SCRAM-SHA-256=[name=admin,password=pw]")])
    path = write_bootstrap(tmp_path, records)
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_bootstrap(tmp_path) == records
    assert read_bootstrap(tmp_path / "elsewhere") == []
    assert b"pw" not in path.read_bytes().replace(b"password", b"")  # salted, not kept


def test_the_first_active_controller_writes_bootstrap_users_into_a_blank_image_only() -> None:
    records = scram_records([parse_add_scram("SCRAM-SHA-256=[name=admin,password=pw]")])
    logic = ControllerLogic(node_id=0, cluster_id="c", rng=random.Random(0), bootstrap=records)
    proposed = list(logic.on_become_active(0).records)
    assert [r.WhichOneof("record") for r in proposed] == ["no_op", "user_scram_credential"]
    # Anything committed before (here: another user) means the cluster is not new: no bootstrap,
    # so a user deleted later does not come back on a failover.
    used = apply_records(MetadataImage.empty(), [_upsert("alice", "a")])
    logic = ControllerLogic(node_id=0, cluster_id="c", rng=random.Random(0), bootstrap=records,
                            image=used)
    assert [r.WhichOneof("record") for r in logic.on_become_active(0).records] == ["no_op"]


def test_decoy_iterations_look_like_the_real_ones() -> None:
    """Made-up iterations for unknown users are drawn from the iterations real credentials of
    the mechanism use, stable per name; the default when there are none."""
    key = b"k" * 32
    mechanism = scram.MECHANISMS["SCRAM-SHA-512"]
    assert scram.decoy_iterations(key, "x", mechanism, []) == scram.ITERATIONS_DEFAULT
    assert scram.decoy_iterations(key, "x", mechanism, [8192, 8192]) == 8192
    mixed = [4096, 16384]
    picks = {scram.decoy_iterations(key, f"user-{i}", mechanism, mixed) for i in range(64)}
    assert picks == {4096, 16384}
    assert scram.decoy_iterations(key, "same", mechanism, mixed) == \
        scram.decoy_iterations(key, "same", mechanism, mixed)
