"""Admin.create_acls / describe_acls / delete_acls against a fake broker
(tests/unit/fake_acl_broker.py): per-item results, the local checks that keep invalid bindings
and filters from being sent, the per-item retry of NOT_CONTROLLER (the ACL responses have no
request-level code), and typed errors.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fake_acl_broker import FakeAclBroker

import tidelog
from tidelog.client import AclBinding, AclFilter, Admin
from tidelog.client._admin_acls import binding_error, filter_error
from tidelog.errors import (
    ClusterAuthorizationFailedError,
    DuplicateResourceError,
    InvalidRequestError,
    NotControllerError,
    UnsupportedVersionError,
)
from tidelog.v1 import controller_pb2

FAST: dict[str, Any] = dict(request_timeout_ms=2_000, default_api_timeout_ms=5_000,
                            retry_backoff_ms=10, retry_backoff_max_ms=50)
READ = AclBinding("User:alice", "*", "topic", "orders", "literal", "Read", "allow")
WRITE = AclBinding("User:alice", "*", "topic", "orders", "literal", "Write", "allow")
DENY = AclBinding("User:bob", "10.0.0.1", "group", "app", "prefixed", "All", "deny")
BAD_PRINCIPAL = AclBinding("alice", "*", "topic", "orders", "literal", "Read", "allow")
BAD_HOST = AclBinding("User:alice", "somewhere", "topic", "orders", "literal", "Read", "allow")


@pytest.fixture()
def broker() -> Iterator[FakeAclBroker]:
    with FakeAclBroker() as fake:
        yield fake


@pytest.fixture()
def admin(broker: FakeAclBroker) -> Iterator[Admin]:
    with Admin(broker.bootstrap, **FAST) as client:
        yield client


def test_exported_from_tidelog_and_tidelog_client() -> None:
    assert tidelog.AclBinding is AclBinding is tidelog.acl.AclBinding
    assert tidelog.AclFilter is AclFilter is tidelog.acl.AclFilter


def test_local_checks_name_the_problem() -> None:
    assert binding_error(READ) is None
    error = binding_error(BAD_PRINCIPAL)
    assert isinstance(error, InvalidRequestError) and "User:" in error.message
    assert filter_error(AclFilter()) is None
    assert filter_error(AclFilter(resource_type="topic", operation="Read")) is None
    error = filter_error(AclFilter(resource_type="topics"))
    assert isinstance(error, InvalidRequestError) and "'topics'" in error.message
    with pytest.raises(TypeError):
        binding_error(("User:alice", "*"))


def test_invalid_bindings_are_refused_per_item_without_a_request() -> None:
    # Nothing listens on 127.0.0.1:1: a request would fail, so these never send one.
    with Admin("127.0.0.1:1", **FAST) as admin:
        result = admin.create_acls([BAD_PRINCIPAL, BAD_HOST])
        assert result.values == {}
        assert list(result.errors) == [BAD_PRINCIPAL, BAD_HOST]
        assert all(isinstance(e, InvalidRequestError) for e in result.errors.values())
        assert "host 'somewhere'" in result.errors[BAD_HOST].message
        bad = AclFilter(operation="read")
        deleted = admin.delete_acls([bad])
        assert isinstance(deleted.errors[bad], InvalidRequestError)
        with pytest.raises(InvalidRequestError, match="permission 'yes'"):
            admin.describe_acls(AclFilter(permission="yes"))
        with pytest.raises(DuplicateResourceError):
            admin.create_acls([READ, READ])


def test_create_reports_per_binding_and_sends_only_the_valid(admin: Admin,
                                                             broker: FakeAclBroker) -> None:
    result = admin.create_acls([READ, BAD_PRINCIPAL, DENY])
    assert list(result.values) == [READ, DENY]
    assert list(result.errors) == [BAD_PRINCIPAL]
    with pytest.raises(InvalidRequestError):
        result.all()
    (sent,) = broker.requests
    assert isinstance(sent, controller_pb2.CreateAclsRequest)
    assert [c.principal for c in sent.creations] == ["User:alice", "User:bob"]
    assert broker.bindings == [READ, DENY]
    again = admin.create_acls([READ])  # an existing binding: created, no second copy
    assert again.ok and broker.bindings == [READ, DENY]


def test_describe_with_filters(admin: Admin) -> None:
    admin.create_acls([READ, WRITE, DENY]).all()
    assert admin.describe_acls() == [READ, WRITE, DENY]
    assert admin.describe_acls(AclFilter(principal="User:alice")) == [READ, WRITE]
    assert admin.describe_acls(AclFilter(operation="Write", resource_name="orders")) == [WRITE]
    assert admin.describe_acls(AclFilter(permission="deny", pattern_type="prefixed")) == [DENY]
    assert admin.describe_acls(AclFilter(resource_type="cluster")) == []


def test_delete_reports_what_each_filter_removed(admin: Admin, broker: FakeAclBroker) -> None:
    admin.create_acls([READ, WRITE, DENY]).all()
    by_write = AclFilter(operation="Write")
    by_alice = AclFilter(principal="User:alice")
    nothing = AclFilter(resource_type="transactional_id")
    result = admin.delete_acls([by_write, by_alice, nothing])
    assert result.all() == {by_write: [WRITE], by_alice: [READ], nothing: []}
    assert broker.bindings == [DENY]


def test_not_controller_is_retried_per_item(admin: Admin, broker: FakeAclBroker) -> None:
    broker.not_controller_rounds = 2
    assert admin.create_acls([READ, BAD_HOST, DENY]).values == {READ: None, DENY: None}
    assert len(broker.requests) == 3  # two NOT_CONTROLLER rounds, then applied
    broker.not_controller_rounds = 1
    gone = AclFilter(principal="User:bob")
    assert admin.delete_acls([gone]).all() == {gone: [DENY]}
    assert broker.bindings == [READ]


def test_not_controller_past_the_deadline_is_the_items_error(admin: Admin,
                                                             broker: FakeAclBroker) -> None:
    broker.not_controller_rounds = 10_000
    result = admin.create_acls([READ], timeout_ms=300)
    assert isinstance(result.errors[READ], NotControllerError)
    assert len(broker.requests) > 1 and broker.bindings == []


def test_authorization_failures_are_typed(admin: Admin, broker: FakeAclBroker) -> None:
    broker.refuse = "User:mallory may not Alter the cluster"
    result = admin.create_acls([READ])
    assert isinstance(result.errors[READ], ClusterAuthorizationFailedError)
    assert len(broker.requests) == 1  # not retriable: sent once
    with pytest.raises(ClusterAuthorizationFailedError, match="mallory"):
        admin.describe_acls()
    everything = AclFilter()
    assert isinstance(admin.delete_acls([everything]).errors[everything],
                      ClusterAuthorizationFailedError)


def test_a_broker_without_the_rpcs_raises_unsupported_version() -> None:
    from fake_broker import FakeCluster  # a fake that does not implement the ACL RPCs

    with FakeCluster(1) as cluster, Admin(cluster.bootstrap, **FAST) as admin:
        with pytest.raises(UnsupportedVersionError):
            admin.create_acls([READ])
        with pytest.raises(UnsupportedVersionError):
            admin.describe_acls()
