"""AclControlManager through ControllerLogic (controller/managers/acl_control.py): CreateAcls
validates each creation on its own, writes one AclRecord per new binding (none for a binding that
exists or repeats in the request); DeleteAcls removes every binding a filter matches, once even
when several filters match it, and lists them per filter; refusals: not the active controller,
too many items, a request too large for one metadata batch."""

from __future__ import annotations

import dataclasses

import pytest
from controller_testkit import TestCluster

from tidelog import limits
from tidelog.acl import AclBinding, AclFilter, binding_from_proto, binding_to_proto, filter_to_proto
from tidelog.controller.managers import common
from tidelog.controller.managers.common import (
    error_response,
    response_error_code,
    set_controller_hint,
)
from tidelog.errors import NotControllerError
from tidelog.v1 import common_pb2, controller_pb2

NONE = common_pb2.ErrorCode.NONE
INVALID_REQUEST = common_pb2.ErrorCode.INVALID_REQUEST

READ_ORDERS = AclBinding("User:alice", "*", "topic", "orders", "literal", "Read", "allow")
WRITE_LOGS = AclBinding("User:bob", "10.0.0.1", "topic", "logs-", "prefixed", "Write", "allow")
DENY_GROUP = AclBinding("User:*", "*", "group", "g", "literal", "All", "deny")
ALTER_CLUSTER = AclBinding("User:ops", "*", "cluster", "kafka-cluster", "literal", "Alter",
                           "allow")


def active_cluster() -> TestCluster:
    cluster = TestCluster(seed=3)
    cluster.activate()
    return cluster


def create(cluster: TestCluster, *bindings: AclBinding) -> controller_pb2.CreateAclsResponse:
    request = controller_pb2.CreateAclsRequest(creations=[binding_to_proto(b) for b in bindings])
    return cluster.submit(cluster.logic.handle_create_acls(request, cluster.now_ms)).response


def delete(cluster: TestCluster, *filters: AclFilter) -> controller_pb2.DeleteAclsResponse:
    request = controller_pb2.DeleteAclsRequest(filters=[filter_to_proto(f) for f in filters])
    return cluster.submit(cluster.logic.handle_delete_acls(request, cluster.now_ms)).response


def codes(response: controller_pb2.CreateAclsResponse | controller_pb2.DeleteAclsResponse
          ) -> list[str]:
    return [common_pb2.ErrorCode.Name(r.error_code) for r in response.results]


def deleted(result: controller_pb2.DeleteAclsFilterResult) -> list[AclBinding]:
    return [binding_from_proto(b) for b in result.deleted]


def committed_bindings(cluster: TestCluster) -> set[AclBinding]:
    return set(cluster.logic.committed_image.acls.bindings())


def test_create_writes_one_record_per_new_binding() -> None:
    cluster = active_cluster()
    response = create(cluster, READ_ORDERS, WRITE_LOGS, ALTER_CLUSTER)
    assert codes(response) == ["NONE"] * 3
    _, batch = cluster.log[-1]
    assert [r.WhichOneof("record") for r in batch] == ["acl"] * 3
    ids = [r.acl.acl_id for r in batch]
    assert len(set(ids)) == 3 and all(len(i) == 16 for i in ids)
    assert all(i[6] >> 4 == 4 for i in ids), "uuid4-shaped ids"
    assert committed_bindings(cluster) == {READ_ORDERS, WRITE_LOGS, ALTER_CLUSTER}
    assert cluster.replayed_from_scratch().digest() == cluster.logic.committed_image.digest()


def test_each_creation_is_validated_on_its_own() -> None:
    cluster = active_cluster()
    response = create(
        cluster,
        dataclasses.replace(READ_ORDERS, principal="alice"),
        READ_ORDERS,
        dataclasses.replace(WRITE_LOGS, pattern_type="match"),
        dataclasses.replace(ALTER_CLUSTER, resource_name="c"),
        dataclasses.replace(DENY_GROUP, permission="ALLOW"),
        DENY_GROUP,
    )
    assert codes(response) == ["INVALID_REQUEST", "NONE", "INVALID_REQUEST", "INVALID_REQUEST",
                               "INVALID_REQUEST", "NONE"]
    messages = [r.error_message for r in response.results]
    assert "principal 'alice'" in messages[0]
    assert "pattern type 'match'" in messages[2]
    assert "kafka-cluster" in messages[3]
    assert "permission 'ALLOW'" in messages[4]
    assert committed_bindings(cluster) == {READ_ORDERS, DENY_GROUP}


def test_duplicates_succeed_without_a_second_record() -> None:
    cluster = active_cluster()
    response = create(cluster, READ_ORDERS, READ_ORDERS)
    assert codes(response) == ["NONE", "NONE"]
    assert len(cluster.log[-1][1]) == 1
    records_before = len(cluster.log)
    again = create(cluster, READ_ORDERS)
    assert codes(again) == ["NONE"] and len(cluster.log) == records_before, "nothing written"
    assert len(cluster.logic.committed_image.acls.by_id) == 1


def test_duplicates_of_a_binding_still_in_flight() -> None:
    """The speculative image holds proposals not yet committed: a second CreateAcls of the same
    binding sees the first and writes nothing."""
    cluster = active_cluster()
    cluster.autocommit = False
    create(cluster, READ_ORDERS)
    create(cluster, READ_ORDERS)
    assert len(cluster.in_flight) == 1
    outcomes = cluster.commit()
    assert [o.ignored for o in outcomes] == [None]


def test_delete_by_filter_lists_what_each_filter_matched() -> None:
    cluster = active_cluster()
    create(cluster, READ_ORDERS, WRITE_LOGS, DENY_GROUP, ALTER_CLUSTER)
    response = delete(cluster, AclFilter(resource_type="topic"),
                      AclFilter(principal="User:bob"), AclFilter(operation="All"))
    assert codes(response) == ["NONE"] * 3
    assert sorted(deleted(response.results[0]), key=repr) == sorted([READ_ORDERS, WRITE_LOGS],
                                                                    key=repr)
    assert deleted(response.results[1]) == [WRITE_LOGS], "listed again, removed once"
    assert deleted(response.results[2]) == [DENY_GROUP]
    batch = cluster.log[-1][1]
    assert [r.WhichOneof("record") for r in batch] == ["remove_acl"] * 3
    assert len({r.remove_acl.acl_id for r in batch}) == 3
    assert committed_bindings(cluster) == {ALTER_CLUSTER}


def test_an_empty_filter_deletes_everything() -> None:
    cluster = active_cluster()
    create(cluster, READ_ORDERS, WRITE_LOGS)
    response = delete(cluster, AclFilter())
    assert codes(response) == ["NONE"] and len(response.results[0].deleted) == 2
    assert committed_bindings(cluster) == set()


def test_a_delete_matching_nothing_writes_nothing() -> None:
    cluster = active_cluster()
    create(cluster, READ_ORDERS)
    before = len(cluster.log)
    response = delete(cluster, AclFilter(principal="User:nobody"), AclFilter(host="10.9.9.9"))
    assert codes(response) == ["NONE", "NONE"]
    assert all(not r.deleted for r in response.results)
    assert len(cluster.log) == before
    empty = delete(active_cluster(), AclFilter())
    assert codes(empty) == ["NONE"] and not empty.results[0].deleted


def test_filters_naming_unknown_values_are_refused() -> None:
    cluster = active_cluster()
    create(cluster, READ_ORDERS)
    response = delete(cluster, AclFilter(operation="read"), AclFilter(resource_type="topics"),
                      AclFilter(pattern_type="match"), AclFilter(permission="Allow"),
                      AclFilter(principal="User:alice"))
    assert codes(response) == ["INVALID_REQUEST"] * 4 + ["NONE"]
    assert "operation 'read'" in response.results[0].error_message
    assert deleted(response.results[4]) == [READ_ORDERS]
    assert committed_bindings(cluster) == set()
    assert AclFilter().problem() is None


def test_not_the_active_controller() -> None:
    cluster = TestCluster()
    request = controller_pb2.CreateAclsRequest(creations=[binding_to_proto(READ_ORDERS)] * 2)
    result = cluster.logic.handle_create_acls(request, 0)
    assert not result.records and codes(result.response) == ["NOT_CONTROLLER"] * 2
    filters = controller_pb2.DeleteAclsRequest(filters=[filter_to_proto(AclFilter())])
    refused = cluster.logic.handle_delete_acls(filters, 0)
    assert not refused.records and codes(refused.response) == ["NOT_CONTROLLER"]


def test_too_many_items_in_one_request() -> None:
    cluster = active_cluster()
    many = [dataclasses.replace(READ_ORDERS, resource_name=f"t{i}")
            for i in range(common.ACL_CREATIONS_PER_REQUEST_MAX + 1)]
    response = create(cluster, *many)
    assert set(codes(response)) == {"INVALID_REQUEST"} and len(response.results) == len(many)
    assert committed_bindings(cluster) == set()
    filters = [AclFilter()] * (common.ACL_FILTERS_PER_REQUEST_MAX + 1)
    assert set(codes(delete(cluster, *filters))) == {"INVALID_REQUEST"}


def test_a_request_too_large_for_one_batch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = active_cluster()
    create(cluster, READ_ORDERS, WRITE_LOGS, DENY_GROUP)
    monkeypatch.setattr(limits, "METADATA_BATCH_BYTES_MAX", 60)
    response = create(cluster, ALTER_CLUSTER, dataclasses.replace(READ_ORDERS, principal="x"))
    assert codes(response) == ["POLICY_VIOLATION", "INVALID_REQUEST"]
    removal = delete(cluster, AclFilter())
    assert codes(removal) == ["POLICY_VIOLATION"] and not removal.results[0].deleted
    assert committed_bindings(cluster) == {READ_ORDERS, WRITE_LOGS, DENY_GROUP}
    assert cluster.logic.pending_batches == 0


def test_error_responses_fill_every_item() -> None:
    """What the runtime and the gRPC service answer for a whole request (NOT_CONTROLLER with a
    hint, timeouts): the ACL responses carry it per item, the others at the top."""
    request = controller_pb2.DeleteAclsRequest(filters=[filter_to_proto(AclFilter())] * 2)
    error = NotControllerError("not me")
    response = error_response(controller_pb2.DeleteAclsResponse, request, error)
    assert codes(response) == ["NOT_CONTROLLER"] * 2
    assert [r.error_message for r in response.results] == ["not me"] * 2
    assert response_error_code(response) == common_pb2.ErrorCode.NOT_CONTROLLER
    set_controller_hint(response, common_pb2.ControllerHint(controller_id=2))
    assert response.controller_hint.controller_id == 2
    topics = error_response(controller_pb2.CreateTopicsResponse, None, error)
    assert topics.error_code == common_pb2.ErrorCode.NOT_CONTROLLER
    set_controller_hint(topics, common_pb2.ControllerHint(controller_id=2))
    assert topics.controller.controller_id == 2
    ok = controller_pb2.CreateAclsResponse(results=[controller_pb2.CreateAclResult()])
    assert response_error_code(ok) == NONE
