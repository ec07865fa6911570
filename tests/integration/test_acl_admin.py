"""ACL management against a real cluster: Admin.create_acls / describe_acls / delete_acls and the
``tidelog acl`` commands, through a broker that forwards creations and deletions to the active
controller and answers DescribeAcls from its metadata image.

What it checks: a valid binding is created and an invalid one refused per item (by the client,
without a request); creating an existing binding succeeds without a second copy; describe_acls
filters by principal, resource, pattern type, operation and permission; delete_acls reports
per filter what it removed, and the bindings are gone from describe_acls; the CLI does the same
(create prints a table, list --format json, delete is a dry run until --execute).

How: tests/integration/cluster_harness.py runs one controller and one broker for the module
(authorisation off: nobody is refused); names are unique per test. Waits are bounded polls,
because the broker's image may trail the controller by a few milliseconds after a write.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from click.testing import CliRunner, Result
from cluster_harness import ClusterHarness

from tidelog.cli import cli
from tidelog.client import AclBinding, AclFilter, Admin
from tidelog.errors import InvalidRequestError

pytestmark = pytest.mark.integration

T = TypeVar("T")
WAIT_S = 15.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHarness]:
    base: Path = tmp_path_factory.mktemp("acl-admin") / "cluster"
    with ClusterHarness.started(base, controllers=1, brokers=1) as harness:
        harness.start_brokers()
        yield harness


@pytest.fixture(scope="module")
def admin(cluster: ClusterHarness) -> Iterator[Admin]:
    with Admin(cluster.bootstrap, default_api_timeout_ms=20_000, retry_backoff_ms=50) as client:
        yield client


def eventually(check: Callable[[], T], *, what: str) -> T:
    """Poll ``check`` until it returns without AssertionError (bounded by WAIT_S)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}") from None
            time.sleep(0.05)


def _described(admin: Admin, acl_filter: AclFilter, expected: list[AclBinding]) -> None:
    assert sorted(admin.describe_acls(acl_filter), key=repr) == sorted(expected, key=repr)


def test_admin_create_describe_delete(admin: Admin) -> None:
    read = AclBinding("User:adm-alice", "*", "topic", "adm-orders", "literal", "Read", "allow")
    deny = AclBinding("User:adm-bob", "10.0.0.7", "group", "adm-", "prefixed", "All", "deny")
    invalid = AclBinding("adm-alice", "*", "topic", "adm-orders", "literal", "Read", "allow")

    created = admin.create_acls([read, invalid, deny])
    assert list(created.values) == [read, deny]
    assert isinstance(created.errors[invalid], InvalidRequestError)
    assert admin.create_acls([read]).ok  # exists already: no second copy

    mine = AclFilter(principal="User:adm-alice")
    eventually(lambda: _described(admin, mine, [read]), what="alice's binding")
    eventually(lambda: _described(admin, AclFilter(resource_type="group",
                                                   resource_name="adm-"), [deny]),
               what="bob's binding")
    assert admin.describe_acls(AclFilter(pattern_type="prefixed", permission="deny",
                                         operation="All", principal="User:adm-bob")) == [deny]
    assert admin.describe_acls(AclFilter(principal="User:adm-alice", operation="Write")) == []
    everything = admin.describe_acls()
    assert read in everything and deny in everything

    by_bob = AclFilter(principal="User:adm-bob")
    nobody = AclFilter(principal="User:adm-nobody")
    deleted = admin.delete_acls([mine, by_bob, nobody])
    assert deleted.all() == {mine: [read], by_bob: [deny], nobody: []}
    eventually(lambda: _described(admin, AclFilter(resource_name="adm-orders"), []),
               what="alice's binding gone")
    eventually(lambda: _described(admin, by_bob, []), what="bob's binding gone")


def _run(cluster: ClusterHarness, *args: str) -> Result:
    result = CliRunner().invoke(cli, ["acl", *args],
                                env={"TIDELOG_BROKERS": cluster.bootstrap})
    assert "Traceback" not in result.output, result.output
    return result


def _cli_listed(cluster: ClusterHarness, *selectors: str) -> list[dict[str, str]]:
    result = _run(cluster, "list", *selectors, "--format", "json")
    assert result.exit_code == 0, result.output
    rows: list[dict[str, str]] = json.loads(result.output)
    return rows


def test_cli_create_list_delete(cluster: ClusterHarness) -> None:
    created = _run(cluster, "create", "--allow-principal", "User:cli-alice", "--deny-principal",
                   "User:cli-bob", "--topic", "cli-orders", "--operation", "read",
                   "--operation", "Write")
    assert created.exit_code == 0, created.output
    assert created.output.count("created") == 4

    refused = _run(cluster, "create", "--allow-principal", "User:cli-alice", "--host",
                   "not-an-ip", "--cluster", "--operation", "Describe")
    assert refused.exit_code == 2
    assert "host 'not-an-ip'" in refused.output and "(INVALID_REQUEST)" in refused.output

    def four() -> list[dict[str, str]]:
        rows = _cli_listed(cluster, "--topic", "cli-orders")
        assert len(rows) == 4
        return rows

    rows = eventually(four, what="the CLI's four bindings")
    assert {(r["principal"], r["operation"], r["permission"]) for r in rows} == {
        ("User:cli-alice", "Read", "allow"), ("User:cli-alice", "Write", "allow"),
        ("User:cli-bob", "Read", "deny"), ("User:cli-bob", "Write", "deny")}
    assert len(_cli_listed(cluster, "--deny-principal", "User:cli-bob")) == 2

    dry = _run(cluster, "delete", "--principal", "User:cli-bob")
    assert dry.exit_code == 0 and dry.output.count("would delete") == 2
    assert "dry run: nothing deleted" in dry.output
    assert len(_cli_listed(cluster, "--topic", "cli-orders")) == 4

    done = _run(cluster, "delete", "--principal", "User:cli-bob", "--operation", "write",
                "--execute", "--format", "json")
    assert done.exit_code == 0, done.output
    assert [(r["principal"], r["operation"], r["status"]) for r in json.loads(done.output)] == [
        ("User:cli-bob", "Write", "deleted")]

    def three() -> None:
        assert len(_cli_listed(cluster, "--topic", "cli-orders")) == 3

    eventually(three, what="one binding deleted")
    cleanup = _run(cluster, "delete", "--topic", "cli-orders", "--execute")
    assert cleanup.exit_code == 0 and cleanup.output.count("deleted") == 3

    def none() -> None:
        assert _cli_listed(cluster, "--topic", "cli-orders") == []

    eventually(none, what="every binding deleted")
