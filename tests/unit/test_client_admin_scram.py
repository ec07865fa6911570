"""Admin.alter_user_scram_credentials / describe_user_scram_credentials against a fake broker
(tests/unit/fake_scram_broker.py): passwords salted on the client and never sent, per-user
results, the local checks that keep bad alterations from being sent, and the per-user retry of
NOT_CONTROLLER (upsertions on any retriable code, deletions only on WRITE_RETRY_CODES).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fake_scram_broker import FakeScramBroker, credential

import tidelog
from tidelog import scram
from tidelog.client import (
    Admin,
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from tidelog.client._admin_scram import alteration_error
from tidelog.errors import (
    ClusterAuthorizationFailedError,
    DuplicateResourceError,
    NotControllerError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from tidelog.v1 import controller_pb2

FAST: dict[str, Any] = dict(request_timeout_ms=2_000, default_api_timeout_ms=5_000,
                            retry_backoff_ms=10, retry_backoff_max_ms=50)
SHA256, SHA512 = scram.MECHANISMS["SCRAM-SHA-256"], scram.MECHANISMS["SCRAM-SHA-512"]


@pytest.fixture()
def broker() -> Iterator[FakeScramBroker]:
    with FakeScramBroker() as fake:
        yield fake


@pytest.fixture()
def admin(broker: FakeScramBroker) -> Iterator[Admin]:
    with Admin(broker.bootstrap, **FAST) as client:
        yield client


def alters(broker: FakeScramBroker) -> list[controller_pb2.AlterUserScramCredentialsRequest]:
    return [r for r in broker.requests
            if isinstance(r, controller_pb2.AlterUserScramCredentialsRequest)]


def test_exported_from_tidelog_and_tidelog_client() -> None:
    assert tidelog.UserScramCredentialUpsertion is UserScramCredentialUpsertion
    assert tidelog.UserScramCredentialDeletion is UserScramCredentialDeletion
    assert "hunter2" not in repr(UserScramCredentialUpsertion("a", "SCRAM-SHA-256", "hunter2"))


def test_an_upsertion_sends_a_salted_password_never_the_password(
        admin: Admin, broker: FakeScramBroker) -> None:
    result = admin.alter_user_scram_credentials(upsertions=[
        UserScramCredentialUpsertion("alice", "SCRAM-SHA-256", "hunter2"),
        UserScramCredentialUpsertion("alice", "scram-sha-512", "hunter2", iterations=8192),
        UserScramCredentialUpsertion("bob", "SCRAM-SHA-256", "pw-of-bob")])
    assert result.ok and list(result.values) == ["alice", "bob"]
    (request,) = alters(broker)
    assert b"hunter2" not in request.SerializeToString()
    assert b"pw-of-bob" not in request.SerializeToString()
    first, second, third = request.upsertions
    assert (first.name, first.mechanism, first.iterations) == ("alice", SHA256.value, 4096)
    assert (second.mechanism, second.iterations) == (SHA512.value, 8192)
    assert len(first.salt) == 32 and first.salt != second.salt != third.salt  # random each
    assert first.salted_password == scram.salted_password(SHA256, "hunter2", first.salt, 4096)
    # What the fake stored verifies the password's client key, as a broker would check it.
    stored = broker.credentials[("alice", SHA256.value)]
    salted = scram.salted_password(SHA256, "hunter2", stored.salt, stored.iterations)
    assert scram.verify(stored, scram.client_key(SHA256, salted))


def test_a_given_salt_reproduces_a_credential(admin: Admin, broker: FakeScramBroker) -> None:
    salt = b"x" * 16
    admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("alice", "SCRAM-SHA-256", "pw", salt=salt)]).all()
    assert broker.credentials[("alice", SHA256.value)] == credential("alice", "pw", salt=salt)


def test_describe_every_user_or_named_ones(admin: Admin, broker: FakeScramBroker) -> None:
    broker.add(credential("bob", "pw"))
    broker.add(credential("alice", "pw", "SCRAM-SHA-512", iterations=8192))
    broker.add(credential("alice", "pw"))
    every = admin.describe_user_scram_credentials()
    assert every.all() == {
        "alice": [ScramCredentialInfo("SCRAM-SHA-256", 4096),
                  ScramCredentialInfo("SCRAM-SHA-512", 8192)],
        "bob": [("SCRAM-SHA-256", 4096)]}
    named = admin.describe_user_scram_credentials(["bob", "carol", " bad"])
    assert named["bob"] == [("SCRAM-SHA-256", 4096)]
    assert list(named.errors) == ["carol", " bad"]
    assert isinstance(named.errors["carol"], ResourceNotFoundError)
    assert isinstance(named.errors[" bad"], UnacceptableCredentialError)
    assert list(broker.requests[-1].users) == ["bob", "carol"]  # the bad name was not sent
    with pytest.raises(DuplicateResourceError):
        admin.describe_user_scram_credentials(["bob", "bob"])


def test_delete_per_user(admin: Admin, broker: FakeScramBroker) -> None:
    broker.add(credential("alice", "pw"))
    result = admin.alter_user_scram_credentials(deletions=[
        UserScramCredentialDeletion("alice", "SCRAM-SHA-256"),
        UserScramCredentialDeletion("bob", "SCRAM-SHA-256")])
    assert list(result.values) == ["alice"]
    assert isinstance(result.errors["bob"], ResourceNotFoundError)
    assert broker.credentials == {}


@pytest.mark.parametrize(("alteration", "cls", "says"), [
    (UserScramCredentialUpsertion("", "SCRAM-SHA-256", "pw"), UnacceptableCredentialError,
     "the user name is empty"),
    (UserScramCredentialUpsertion("a", "SCRAM-SHA-1", "pw"), UnsupportedSaslMechanismError,
     "unknown SCRAM mechanism 'SCRAM-SHA-1'"),
    (UserScramCredentialUpsertion("a", "SCRAM-SHA-256", "pw", iterations=100),
     UnacceptableCredentialError, "iterations 100 are outside 4096..16384"),
    (UserScramCredentialUpsertion("a", "SCRAM-SHA-256", ""), UnacceptableCredentialError,
     "the password is empty"),
    (UserScramCredentialUpsertion("a", "SCRAM-SHA-256", "pw\udcff"),
     UnacceptableCredentialError, "not valid Unicode text"),
    (UserScramCredentialUpsertion("a", "SCRAM-SHA-256", "pw", salt=b"short"),
     UnacceptableCredentialError, "a salt must be 16..64 bytes"),
    (UserScramCredentialDeletion("a\n", "SCRAM-SHA-256"), UnacceptableCredentialError,
     "control character"),
])
def test_local_checks_name_the_problem(alteration: Any, cls: type, says: str) -> None:
    error = alteration_error(alteration)
    assert isinstance(error, cls) and says in error.message
    with pytest.raises(TypeError):
        alteration_error(("alice", "SCRAM-SHA-256"))


def test_bad_alterations_fail_their_user_without_a_request() -> None:
    # Nothing listens on 127.0.0.1:1: a request would fail, so these never send one.
    with Admin("127.0.0.1:1", **FAST) as admin:
        result = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("a", "SCRAM-SHA-256", "pw", iterations=1),
            UserScramCredentialUpsertion("a", "SCRAM-SHA-512", "pw"),
            UserScramCredentialUpsertion("b", "SCRAM-SHA-256", "pw"),
            UserScramCredentialUpsertion("b", "SCRAM-SHA-256", "other"),
            UserScramCredentialUpsertion("c", "SCRAM-SHA-256", "pw"),
            UserScramCredentialDeletion("c", "SCRAM-SHA-512")])
    assert result.values == {}
    assert [type(e) for e in result.errors.values()] == [
        UnacceptableCredentialError, DuplicateResourceError, DuplicateResourceError]
    assert "both deleted and set" in result.errors["c"].message


def test_not_controller_is_retried_per_user(admin: Admin, broker: FakeScramBroker) -> None:
    broker.not_controller_rounds = 2
    result = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("alice", "SCRAM-SHA-256", "pw")])
    assert result.ok and len(alters(broker)) == 3
    # The retried request carries the same salted password: the salting is done once.
    assert len({r.upsertions[0].salt for r in alters(broker)}) == 1


def test_not_controller_is_retried_until_the_deadline(
        broker: FakeScramBroker) -> None:
    broker.add(credential("alice", "pw"))
    broker.not_controller_rounds = 1
    with Admin(broker.bootstrap, **FAST) as admin:
        done = admin.alter_user_scram_credentials(
            deletions=[UserScramCredentialDeletion("alice", "SCRAM-SHA-256")])
        assert done.ok and len(alters(broker)) == 2
        broker.not_controller_rounds = 10**6
        late = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("bob", "SCRAM-SHA-256", "pw")], timeout_ms=300)
    assert isinstance(late.errors["bob"], NotControllerError)


def test_a_timed_out_deletion_is_not_sent_again_an_upsertion_is(
        admin: Admin, broker: FakeScramBroker) -> None:
    from tidelog.errors import ErrorCode, RequestTimedOutError

    broker.add(credential("alice", "pw"))
    broker.error_rounds = [ErrorCode.REQUEST_TIMED_OUT]
    deleted = admin.alter_user_scram_credentials(
        deletions=[UserScramCredentialDeletion("alice", "SCRAM-SHA-256")])
    assert isinstance(deleted.errors["alice"], RequestTimedOutError)  # it may have been applied
    assert len(alters(broker)) == 1
    broker.error_rounds = [ErrorCode.REQUEST_TIMED_OUT]
    assert admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("bob", "SCRAM-SHA-256", "pw")]).ok
    assert len(alters(broker)) == 3


def test_refusals_are_typed(admin: Admin, broker: FakeScramBroker) -> None:
    broker.refuse = "User:bob may not Alter the cluster"
    result = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("alice", "SCRAM-SHA-256", "pw")])
    assert isinstance(result.errors["alice"], ClusterAuthorizationFailedError)
    with pytest.raises(ClusterAuthorizationFailedError, match="may not Alter"):
        admin.describe_user_scram_credentials()
