"""Who a peer is: the pure checks of tidelog.peer_auth, the credentials of cluster_secret.

What it checks: a call's claim is parsed from exactly one ``tidelog-peer-id`` and one
``tidelog-peer-auth`` (a repeated key is refused, whatever its values); a broker's TLS
certificate must name the id it claims and list addresses (a user's certificate lists none);
the controllers check a credential against the cluster secret, a broker against the verifier in
the caller's registration; a broker's two presented keys differ per audience, and neither its
file nor its verifier gives another broker's credential. Pure functions, no sockets (the same
checks on real processes: tests/integration/test_broker_identity.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.cluster_secret import (
    BROKERS,
    CONTROLLERS,
    PEER_AUTH_METADATA,
    PEER_ID_METADATA,
    broker_credential,
    credential_verifier,
    generate_secret,
    read_broker_credential_file,
    write_broker_credential_file,
)
from tidelog.peer_auth import (
    Claim,
    RegisteredVerifier,
    RootVerifier,
    certificate_problem,
    parse_claim,
    peer_metadata,
)

SECRET = generate_secret()


def key(broker_id: int, audience: str) -> str:
    return broker_credential(SECRET, broker_id).presented_to(audience)


def test_one_id_and_one_credential_make_a_claim() -> None:
    claim = parse_claim([(PEER_ID_METADATA, "101"), ("other", "x"),
                         (PEER_AUTH_METADATA, key(101, CONTROLLERS))])
    assert claim == Claim(101, key(101, CONTROLLERS))


@pytest.mark.parametrize("metadata", [
    # Issue 25's reproduction: the check read the last id, the handlers the first.
    [(PEER_ID_METADATA, "102"), (PEER_ID_METADATA, "101"),
     (PEER_AUTH_METADATA, key(101, CONTROLLERS))],
    [(PEER_ID_METADATA, "101"), (PEER_ID_METADATA, "101"),
     (PEER_AUTH_METADATA, key(101, CONTROLLERS))],
    [(PEER_ID_METADATA, "101"), (PEER_AUTH_METADATA, key(102, CONTROLLERS)),
     (PEER_AUTH_METADATA, key(101, CONTROLLERS))],
])
def test_a_repeated_key_is_refused_whatever_its_values(metadata: list[tuple[str, str]]) -> None:
    problem = parse_claim(metadata)
    assert isinstance(problem, str) and "repeats" in problem and "one identity per call" in problem


@pytest.mark.parametrize(("metadata", "words"), [
    ([], "no tidelog-peer-id"),
    ([(PEER_ID_METADATA, "101")], "no tidelog-peer-auth credential for broker 101"),
    ([(PEER_ID_METADATA, "-1"), (PEER_AUTH_METADATA, "x")], "is not a broker id"),
    ([(PEER_ID_METADATA, "+101"), (PEER_AUTH_METADATA, "x")], "is not a broker id"),
    ([(PEER_ID_METADATA, "1" * 5000), (PEER_AUTH_METADATA, "x")], "is not a broker id"),
    ([(PEER_ID_METADATA, "101"), (PEER_AUTH_METADATA, "x" * 5000)], "no tidelog-peer-auth"),
])
def test_a_missing_or_malformed_claim_is_named(metadata: list[tuple[str, str]],
                                               words: str) -> None:
    problem = parse_claim(metadata)
    assert isinstance(problem, str) and words in problem


def tls_context(common_name: str, sans: tuple[bytes, ...] = (b"127.0.0.1",),
                security: bytes = b"ssl") -> dict[str, list[bytes]]:
    """What grpc's auth_context() holds for a TLS peer (measured: see tidelog.peer_auth)."""
    context = {"transport_security_type": [security],
               "x509_common_name": [common_name.encode()]}
    if sans:
        context["x509_subject_alternative_name"] = list(sans)
    return context


def test_a_certificate_must_name_the_broker_it_claims() -> None:
    assert certificate_problem(tls_context("broker-101"), 101) is None
    problem = certificate_problem(tls_context("broker-101"), 102)
    assert problem is not None and "'broker-101', not 'broker-102'" in problem
    assert "tidelog security init --node broker-102=" in problem


def test_a_users_certificate_is_not_a_brokers() -> None:
    problem = certificate_problem(tls_context("alice", sans=()), 101)
    assert problem is not None and "'alice', not 'broker-101'" in problem
    # Even one named like a broker: a node's certificate lists the addresses it is dialled at.
    problem = certificate_problem(tls_context("broker-101", sans=()), 101)
    assert problem is not None and "lists no addresses" in problem


def test_a_call_without_tls_has_no_certificate() -> None:
    problem = certificate_problem({"transport_security_type": [b"insecure"]}, 101)
    assert problem == "the call did not come over TLS"


def test_a_broker_presents_one_key_to_controllers_and_another_to_brokers() -> None:
    """A leader sees its followers' inter-broker key on every fetch; that key must not open the
    controllers."""
    assert key(101, CONTROLLERS) != key(101, BROKERS)
    controllers = RootVerifier(SECRET, audience=CONTROLLERS)
    assert controllers.problem(Claim(101, key(101, CONTROLLERS))) is None
    assert controllers.problem(Claim(101, key(101, BROKERS))) is not None
    assert controllers.problem(Claim(102, key(101, CONTROLLERS))) is not None
    assert RootVerifier(generate_secret(), audience=CONTROLLERS).problem(
        Claim(101, key(101, CONTROLLERS))) is not None


def test_brokers_check_credentials_against_the_registrations_verifiers() -> None:
    registered = {101: broker_credential(SECRET, 101).verifier(), 103: b""}
    brokers = RegisteredVerifier(registered.get)
    assert brokers.problem(Claim(101, key(101, BROKERS))) is None
    assert "not broker 101's" in str(brokers.problem(Claim(101, key(102, BROKERS))))
    assert "not broker 101's" in str(brokers.problem(Claim(101, key(101, CONTROLLERS))))
    assert "not registered" in str(brokers.problem(Claim(102, key(102, BROKERS))))
    assert "no credential verifier" in str(brokers.problem(Claim(103, key(103, BROKERS))))


def test_a_verifier_is_not_the_key_it_verifies() -> None:
    credential = broker_credential(SECRET, 101)
    verifier = credential.verifier()
    assert verifier == credential_verifier(credential.presented_to(BROKERS))
    assert verifier.hex() not in (credential.presented_to(BROKERS), credential.key.hex())
    assert broker_credential(SECRET, 102).verifier() != verifier


def test_the_credential_file_round_trips_and_holds_no_root(tmp_path: Path) -> None:
    path = tmp_path / "broker-101.credential"
    credential = broker_credential(SECRET, 101)
    write_broker_credential_file(path, credential)
    assert path.stat().st_mode & 0o077 == 0
    assert read_broker_credential_file(path, broker_id=101) == credential
    assert SECRET not in path.read_text()
    assert repr(credential) == "BrokerCredential(broker_id=101)"  # no key in logs


def test_peer_metadata_names_one_broker_once() -> None:
    credential = broker_credential(SECRET, 101)
    assert peer_metadata(101, credential, audience=BROKERS) == (
        (PEER_ID_METADATA, "101"), (PEER_AUTH_METADATA, key(101, BROKERS)))
    assert peer_metadata(101, None, audience=BROKERS) == ((PEER_ID_METADATA, "101"),)
    with pytest.raises(ValueError, match="not broker 102's"):
        peer_metadata(102, credential, audience=BROKERS)
