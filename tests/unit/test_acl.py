"""The ACL decision (tidelog/acl.py): Kafka's StandardAuthorizer rules, one case per rule."""

from __future__ import annotations

import pytest

from tidelog.acl import AclBinding, AclFilter, Authorizer

ALICE, BOB = "User:alice", "User:bob"


def acl(principal: str, operation: str, name: str, *, permission: str = "allow",
        resource_type: str = "topic", pattern: str = "literal", host: str = "*") -> AclBinding:
    return AclBinding(principal, host, resource_type, name, pattern, operation, permission)


def decide(bindings: list[AclBinding], principal: str, operation: str, name: str, *,
           resource_type: str = "topic", host: str = "10.0.0.5", **kw: object) -> bool:
    authorizer = Authorizer(bindings, **kw)  # type: ignore[arg-type]
    return authorizer.authorize(principal, host, operation, resource_type, name).allowed


def test_a_literal_allow_allows_that_principal_that_operation_on_that_topic_only() -> None:
    rules = [acl(ALICE, "Write", "orders")]
    assert decide(rules, ALICE, "Write", "orders")
    assert not decide(rules, ALICE, "Read", "orders")
    assert not decide(rules, BOB, "Write", "orders")
    assert not decide([*rules, acl(BOB, "Read", "payments")], ALICE, "Write", "payments")


def test_deny_wins_over_allow() -> None:
    rules = [acl("User:*", "All", "orders"), acl(BOB, "Write", "orders", permission="deny")]
    assert decide(rules, ALICE, "Write", "orders")
    assert not decide(rules, BOB, "Write", "orders")
    assert decide(rules, BOB, "Read", "orders")
    deny_all = [*rules, acl(BOB, "All", "ord", pattern="prefixed", permission="deny")]
    assert not decide(deny_all, BOB, "Read", "orders")


def test_prefixed_patterns_match_names_that_start_with_the_prefix() -> None:
    rules = [acl(ALICE, "Read", "billing.", pattern="prefixed")]
    assert decide(rules, ALICE, "Read", "billing.invoices")
    assert not decide(rules, ALICE, "Read", "billing")
    assert not decide(rules, ALICE, "Read", "shipping.billing.x")


def test_wildcards_for_names_principals_and_hosts() -> None:
    assert decide([acl("User:*", "Read", "*")], BOB, "Read", "anything")
    rules = [acl(ALICE, "Read", "orders", host="10.0.0.5")]
    assert decide(rules, ALICE, "Read", "orders", host="10.0.0.5")
    assert not decide(rules, ALICE, "Read", "orders", host="10.0.0.6")


def test_implied_operations() -> None:
    for op in ("Read", "Write", "Delete", "Alter"):
        assert decide([acl(ALICE, op, "t")], ALICE, "Describe", "t"), op
    assert decide([acl(ALICE, "AlterConfigs", "t")], ALICE, "DescribeConfigs", "t")
    assert not decide([acl(ALICE, "Describe", "t")], ALICE, "Read", "t")
    # A DENY of Read does not deny the Describe that an ALLOW of Write implies.
    rules = [acl(ALICE, "Write", "t"), acl(ALICE, "Read", "t", permission="deny")]
    assert decide(rules, ALICE, "Describe", "t")


def test_no_acl_on_a_resource_and_super_users() -> None:
    other = [acl(BOB, "Read", "other")]
    assert not decide(other, ALICE, "Read", "orders")
    assert decide(other, ALICE, "Read", "orders", allow_everyone_if_no_acl_found=True)
    # With an ACL on the resource, the flag does not apply.
    assert not decide([acl(BOB, "Read", "orders")], ALICE, "Read", "orders",
                      allow_everyone_if_no_acl_found=True)
    assert decide([acl(ALICE, "All", "orders", permission="deny")], ALICE, "Write", "orders",
                  super_users=[ALICE])


def test_resource_types_are_separate() -> None:
    rules = [acl(ALICE, "Read", "orders", resource_type="group")]
    assert decide(rules, ALICE, "Read", "orders", resource_type="group")
    assert not decide(rules, ALICE, "Read", "orders")
    cluster = [acl(ALICE, "Create", "kafka-cluster", resource_type="cluster")]
    assert decide(cluster, ALICE, "Create", "kafka-cluster", resource_type="cluster")


def test_the_reason_names_the_deciding_binding() -> None:
    decision = Authorizer([acl(BOB, "Write", "orders", permission="deny")]).authorize(
        BOB, "10.0.0.5", "Write", "topic", "orders")
    assert decision.reason == "denied by DENY User:bob Write on topic 'orders' from *"


@pytest.mark.parametrize(("binding", "problem"), [
    (acl("alice", "Read", "t"), "principal 'alice': use User:<name> or User:*"),
    (acl(ALICE, "Read", "t", host="example.com"), "host 'example.com': use an IP address or *"),
    (acl(ALICE, "Read", "t", resource_type="queue"), "resource type 'queue': one of topic, "
                                                      "group, cluster, transactional_id"),
    (acl(ALICE, "Read", "*", pattern="prefixed"), "a prefixed pattern of * matches nothing"),
    (acl(ALICE, "Create", "prod", resource_type="cluster"),
     "the cluster resource is named 'kafka-cluster'"),
    (acl(ALICE, "Fly", "t"), "operation 'Fly': one of Read, Write"),
    (acl(ALICE, "Read", "t", permission="maybe"), "permission 'maybe': allow or deny"),
])
def test_invalid_bindings_say_why(binding: AclBinding, problem: str) -> None:
    assert (binding.problem() or "").startswith(problem)
    assert acl(ALICE, "Read", "t").problem() is None


def test_filters_match_fields_given() -> None:
    a, b = acl(ALICE, "Read", "t"), acl(BOB, "Write", "t", permission="deny")
    assert [x for x in (a, b) if AclFilter(resource_name="t").matches(x)] == [a, b]
    assert [x for x in (a, b) if AclFilter(permission="deny").matches(x)] == [b]
    assert [x for x in (a, b) if AclFilter(principal=ALICE, operation="Write").matches(x)] == []


def test_wire_forms_round_trip() -> None:
    from tidelog.acl import binding_from_proto, binding_to_proto, filter_from_proto, filter_to_proto

    b = acl(ALICE, "Write", "orders", pattern="prefixed", permission="deny", host="10.0.0.1")
    assert binding_from_proto(binding_to_proto(b)) == b
    f = AclFilter(principal=ALICE, resource_type="topic")
    assert filter_from_proto(filter_to_proto(f)) == f
    assert filter_from_proto(filter_to_proto(AclFilter())) == AclFilter()


def test_hosts_compare_as_addresses_not_as_strings() -> None:
    """A DENY written in one spelling of an address denies a client seen in another."""
    deny = [acl("User:*", "All", "orders"),
            acl(BOB, "Read", "orders", permission="deny", host="2001:DB8:0:0::1")]
    assert not decide(deny, BOB, "Read", "orders", host="2001:db8::1")
    mapped = [acl("User:*", "All", "orders"),
              acl(BOB, "Read", "orders", permission="deny", host="::ffff:10.0.0.5")]
    assert not decide(mapped, BOB, "Read", "orders", host="10.0.0.5")
    assert decide(mapped, BOB, "Read", "orders", host="10.0.0.6")
    assert AclFilter(host="2001:db8::1").matches(deny[1])
    assert not AclFilter(host="2001:db8::2").matches(deny[1])
