"""tidelog.scram (pure) and SCRAM credentials in the metadata image and its snapshots."""

from __future__ import annotations

import base64
import hmac

from tidelog import scram
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
