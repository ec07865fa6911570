"""``tidelog acl create|list|delete``: the flags -> bindings and filters mapping (pure functions,
no cluster), the usage mistakes that end in one line before any request, and the commands end to
end against a fake broker (tests/unit/fake_acl_broker.py) through click's CliRunner."""

from __future__ import annotations

import json
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner, Result
from fake_acl_broker import FakeAclBroker

from tidelog.acl import AclBinding, AclFilter
from tidelog.cli import cli
from tidelog.cli.acl import (
    binding_text,
    bindings_from_args,
    filter_text,
    filters_from_args,
    operation_name,
    resource_from_args,
)
from tidelog.cli.common import CliError

ORDERS = ("topic", "orders")


# ====================================================================== pure mapping
@pytest.mark.parametrize(("typed", "name"), [
    ("Read", "Read"), ("read", "Read"), ("WRITE", "Write"), ("describe-configs", "DescribeConfigs"),
    ("DESCRIBE_CONFIGS", "DescribeConfigs"), ("idempotentwrite", "IdempotentWrite"),
    ("all", "All"), ("cluster_action", "ClusterAction"),
])
def test_operation_names_in_any_case(typed: str, name: str) -> None:
    assert operation_name(typed) == name


def test_an_unknown_operation_lists_the_valid_ones() -> None:
    with pytest.raises(click.BadParameter, match="'Reed': one of Read, Write"):
        operation_name("Reed")


def test_resource_flags() -> None:
    assert resource_from_args("orders", None, False, None, required=True) == ORDERS
    assert resource_from_args(None, "app", False, None, required=True) == ("group", "app")
    assert resource_from_args(None, None, True, None, required=True) == ("cluster",
                                                                         "kafka-cluster")
    assert resource_from_args(None, None, False, "tx-1", required=True) == ("transactional_id",
                                                                            "tx-1")
    assert resource_from_args(None, None, False, None, required=False) is None
    with pytest.raises(CliError, match="name the resource"):
        resource_from_args(None, None, False, None, required=True)
    with pytest.raises(CliError, match="at most one"):
        resource_from_args("orders", None, True, None, required=False)


def test_one_binding_per_principal_and_operation() -> None:
    bindings = bindings_from_args(["User:alice", "User:bob"], ["User:eve"], "10.0.0.1",
                                  ORDERS, "prefixed", ["Read", "Write"])
    assert bindings == [
        AclBinding("User:alice", "10.0.0.1", "topic", "orders", "prefixed", "Read", "allow"),
        AclBinding("User:alice", "10.0.0.1", "topic", "orders", "prefixed", "Write", "allow"),
        AclBinding("User:bob", "10.0.0.1", "topic", "orders", "prefixed", "Read", "allow"),
        AclBinding("User:bob", "10.0.0.1", "topic", "orders", "prefixed", "Write", "allow"),
        AclBinding("User:eve", "10.0.0.1", "topic", "orders", "prefixed", "Read", "deny"),
        AclBinding("User:eve", "10.0.0.1", "topic", "orders", "prefixed", "Write", "deny"),
    ]
    assert len(bindings_from_args(["User:a"], [], "*", ORDERS, "literal",
                                  ["Read", "Read"])) == 1


def test_a_binding_needs_a_principal_and_an_operation() -> None:
    with pytest.raises(CliError, match="--allow-principal"):
        bindings_from_args([], [], "*", ORDERS, "literal", ["Read"])
    with pytest.raises(CliError, match="--operation"):
        bindings_from_args(["User:a"], [], "*", ORDERS, "literal", [])


def test_no_selector_is_one_filter_matching_everything() -> None:
    assert filters_from_args([], [], [], None, None, None, []) == [AclFilter()]


def test_selectors_make_one_filter_per_principal_and_operation() -> None:
    filters = filters_from_args(["User:a"], ["User:b"], ["User:c"], "*", ORDERS, "literal",
                                ["Read", "Write"])
    common = dict(host="*", resource_type="topic", resource_name="orders",
                  pattern_type="literal")
    assert filters == [
        AclFilter("User:a", operation="Read", **common),
        AclFilter("User:a", operation="Write", **common),
        AclFilter("User:b", operation="Read", permission="allow", **common),
        AclFilter("User:b", operation="Write", permission="allow", **common),
        AclFilter("User:c", operation="Read", permission="deny", **common),
        AclFilter("User:c", operation="Write", permission="deny", **common),
    ]
    assert filters_from_args([], [], [], None, ("cluster", "kafka-cluster"), None, []) == [
        AclFilter(resource_type="cluster", resource_name="kafka-cluster")]


def test_texts_for_error_lines() -> None:
    b = AclBinding("User:a", "*", "topic", "ord", "prefixed", "Read", "deny")
    assert binding_text(b) == "DENY User:a Read on topic 'ord' (prefixed) from *"
    assert filter_text(AclFilter()) == "(every binding)"
    assert filter_text(AclFilter(principal="User:a", operation="Read")) == (
        "principal=User:a operation=Read")


# ====================================================================== usage mistakes
@pytest.mark.parametrize(("args", "says"), [
    (["create", "--topic", "t", "--operation", "Read"], "--allow-principal"),
    (["create", "--allow-principal", "User:a", "--operation", "Read"], "name the resource"),
    (["create", "--allow-principal", "User:a", "--topic", "t", "--cluster", "--operation",
      "Read"], "at most one"),
    (["create", "--allow-principal", "alice", "--topic", "t", "--operation", "Read"],
     "'alice': write User:NAME"),
    (["create", "--allow-principal", "User:a", "--topic", "t", "--operation", "Reed"],
     "'Reed': one of"),
    (["create", "--allow-principal", "User:a", "--topic", "t"], "--operation"),
    (["list", "--principal", "bob"], "'bob': write User:NAME"),
    (["delete"], "or --all for every binding"),
    (["delete", "--all", "--topic", "t"], "exclude each other"),
])
def test_usage_mistakes_are_one_line(args: list[str], says: str) -> None:
    # 127.0.0.1:1 is never dialled: each mistake is caught before the Admin is opened.
    result = CliRunner().invoke(cli, ["acl", *args, "--brokers", "127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines


# ====================================================================== against a fake broker
@pytest.fixture()
def broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAclBroker]:
    with FakeAclBroker() as fake:
        monkeypatch.setenv("TIDELOG_BROKERS", fake.bootstrap)
        yield fake


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["acl", *args])


def test_create_prints_what_was_created(broker: FakeAclBroker) -> None:
    result = run("create", "--allow-principal", "User:alice", "--deny-principal", "User:bob",
                 "--topic", "orders", "--operation", "read", "--operation", "Write")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["PRINCIPAL", "HOST", "RESOURCE_TYPE", "NAME", "PATTERN",
                                "OPERATION", "PERMISSION", "STATUS"]
    assert lines[1].split() == ["User:alice", "*", "topic", "orders", "literal", "Read",
                                "allow", "created"]
    assert len(lines) == 5 and len(broker.bindings) == 4


def test_create_reports_each_refused_binding_on_its_own_line(broker: FakeAclBroker) -> None:
    result = run("create", "--allow-principal", "User:alice", "--host", "somewhere",
                 "--cluster", "--operation", "Alter", "--operation", "Describe")
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert errors == [
        f"error: cannot create ACL ALLOW User:alice {op} on cluster 'kafka-cluster' from "
        f"somewhere: host 'somewhere': use an IP address or * (INVALID_REQUEST)"
        for op in ("Alter", "Describe")]
    assert broker.requests == []  # refused by the Admin's check, never sent


def test_list_filters_and_json(broker: FakeAclBroker) -> None:
    run("create", "--allow-principal", "User:alice", "--topic", "orders", "--operation",
        "Read")
    run("create", "--allow-principal", "User:bob", "--group", "app", "--resource-pattern-type",
        "prefixed", "--operation", "Read")
    every = json.loads(run("list", "--format", "json").output)
    assert [(r["principal"], r["resource_type"]) for r in every] == [("User:bob", "group"),
                                                                     ("User:alice", "topic")]
    assert set(every[0]) == {"principal", "host", "resource_type", "resource_name",
                             "pattern_type", "operation", "permission"}
    bob = run("list", "--principal", "User:bob", "--principal", "User:alice", "--group", "app")
    assert bob.exit_code == 0 and len(bob.output.splitlines()) == 2
    assert "User:bob" in bob.output and "User:alice" not in bob.output
    none = run("list", "--deny-principal", "User:bob")
    assert none.output.strip() == "(none)"


def test_delete_is_a_dry_run_until_execute(broker: FakeAclBroker) -> None:
    run("create", "--allow-principal", "User:alice", "--allow-principal", "User:bob",
        "--topic", "orders", "--operation", "Read")
    dry = run("delete", "--principal", "User:alice")
    assert dry.exit_code == 0
    assert "would delete" in dry.output and "User:bob" not in dry.output
    assert "dry run: nothing deleted; --execute deletes them" in dry.output
    assert len(broker.bindings) == 2
    done = run("delete", "--principal", "User:alice", "--execute", "--format", "json")
    assert done.exit_code == 0
    assert [(r["principal"], r["status"]) for r in json.loads(done.output)] == [
        ("User:alice", "deleted")]
    assert [b.principal for b in broker.bindings] == ["User:bob"]
    everything = run("delete", "--all", "--execute")
    assert "User:bob" in everything.output and broker.bindings == []


def test_a_refused_call_is_one_line(broker: FakeAclBroker) -> None:
    broker.refuse = "User:ANONYMOUS may not Describe the cluster"
    result = run("list")
    assert result.exit_code == 2
    assert result.output.strip() == ("error: cannot list ACLs: User:ANONYMOUS may not Describe "
                                     "the cluster (CLUSTER_AUTHORIZATION_FAILED)")
    deleted = run("delete", "--topic", "orders", "--execute")
    assert deleted.exit_code == 2
    assert "cannot delete ACLs matching resource_type=topic resource_name=orders" in (
        deleted.output)
