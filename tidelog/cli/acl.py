"""``tidelog acl create|list|delete``: ACL bindings (kafka-acls' vocabulary, rpk's flags).

A binding says a principal (``User:alice``, ``User:*``) from a host (an IP address, ``*``) is
allowed or denied an operation on a resource (a topic, a group, the cluster, a transactional
id) whose name matches a literal or prefixed pattern; tidelog/acl.py holds the model and
docs/security.md how it decides. ``create`` makes one binding per principal and operation
(``--allow-principal`` / ``--deny-principal`` say the permission); ``list`` and ``delete`` take
the same flags as selectors, all optional: several principals or operations mean one filter each
(a binding matching any is listed or deleted), a flag left out matches anything.

``delete`` is a dry run by default, as ``group reset-offsets`` is: it lists what its filters
match, and ``--execute`` deletes. A filter, unlike ``topic delete``'s names, can match far more
than was meant (Kafka's and rpk's ACL deletes ask for confirmation for the same reason).

The argument -> binding / filter mapping is in pure functions (``bindings_from_args``,
``filters_from_args``), tested without a cluster; the commands call the Admin (``create_acls``,
``describe_acls``, ``delete_acls``) through tidelog.cli.common's ``admin_client``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click

from tidelog.acl import CLUSTER_NAME, OPERATIONS, AclBinding, AclFilter
from tidelog.cli.common import (
    CliError,
    OneLineCommand,
    OneLineGroup,
    admin_client,
    brokers_option,
    echo_json,
    format_option,
    raise_item_errors,
    table,
    timeout_option,
)

__all__ = [
    "acl",
    "binding_row",
    "binding_text",
    "bindings_from_args",
    "filter_text",
    "filters_from_args",
    "operation_name",
    "resource_from_args",
]

#: Operation names as typed -> Kafka's: case, ``-`` and ``_`` do not matter (``read``,
#: ``describe-configs`` and ``DESCRIBE_CONFIGS`` all work), so nobody has to remember the case.
_OPERATIONS = {op.lower(): op for op in OPERATIONS}


# ====================================================================== arguments -> the model
def operation_name(text: str) -> str:
    """Kafka's name of the operation ``text`` names; click.BadParameter if none."""
    op = _OPERATIONS.get(text.replace("-", "").replace("_", "").lower())
    if op is None:
        raise click.BadParameter(f"{text!r}: one of {', '.join(OPERATIONS)}",
                                 param_hint="'--operation'")
    return op


def resource_from_args(topic: str | None, group: str | None, cluster: bool,
                       transactional_id: str | None, *,
                       required: bool) -> tuple[str, str] | None:
    """(resource type, name) from the resource flags, of which at most one may be given (and
    one must be when ``required``); None when none is."""
    given = [(t, n) for t, n in (("topic", topic), ("group", group),
                                 ("cluster", CLUSTER_NAME if cluster else None),
                                 ("transactional_id", transactional_id)) if n is not None]
    if len(given) > 1:
        raise CliError("give at most one of --topic, --group, --cluster and --transactional-id")
    if not given:
        if required:
            raise CliError("name the resource: --topic NAME, --group NAME, --cluster or "
                           "--transactional-id NAME")
        return None
    return given[0]


def bindings_from_args(allow_principals: Sequence[str], deny_principals: Sequence[str],
                       host: str, resource: tuple[str, str], pattern_type: str,
                       operations: Sequence[str]) -> list[AclBinding]:
    """One binding per principal and operation (allows first), without repeats. Not validated
    here: ``Admin.create_acls`` refuses an invalid binding per item, as the cluster would."""
    if not allow_principals and not deny_principals:
        raise CliError("name who: --allow-principal User:NAME and/or --deny-principal "
                       "User:NAME")
    if not operations:
        raise CliError("name what: --operation OP (repeatable), one of "
                       f"{', '.join(OPERATIONS)}")
    who = [(p, "allow") for p in allow_principals] + [(p, "deny") for p in deny_principals]
    return list(dict.fromkeys(
        AclBinding(principal, host, resource[0], resource[1], pattern_type, op, permission)
        for principal, permission in who for op in operations))


def filters_from_args(principals: Sequence[str], allow_principals: Sequence[str],
                      deny_principals: Sequence[str], host: str | None,
                      resource: tuple[str, str] | None, pattern_type: str | None,
                      operations: Sequence[str]) -> list[AclFilter]:
    """One filter per principal and operation given (``--principal``: either permission); a
    selector left out matches anything, so no selector at all is one filter matching every
    binding."""
    who: list[tuple[str | None, str | None]] = [(p, None) for p in principals]
    who += [(p, "allow") for p in allow_principals] + [(p, "deny") for p in deny_principals]
    ops: list[str | None] = [*operations] or [None]
    resource_type, resource_name = resource if resource is not None else (None, None)
    return list(dict.fromkeys(
        AclFilter(principal, host, resource_type, resource_name, pattern_type, op, permission)
        for principal, permission in (who or [(None, None)]) for op in ops))


# ====================================================================== output
def binding_row(b: AclBinding) -> dict[str, str]:
    """A binding for ``--format json`` (the model's field names: part of the interface)."""
    return {"principal": b.principal, "host": b.host, "resource_type": b.resource_type,
            "resource_name": b.resource_name, "pattern_type": b.pattern_type,
            "operation": b.operation, "permission": b.permission}


def _table_row(b: AclBinding) -> dict[str, str]:
    return {"principal": b.principal, "host": b.host, "resource_type": b.resource_type,
            "name": b.resource_name, "pattern": b.pattern_type, "operation": b.operation,
            "permission": b.permission}


def binding_text(b: AclBinding) -> str:
    """``ALLOW User:alice Read on topic 'orders' from *``, for error lines."""
    prefixed = " (prefixed)" if b.pattern_type == "prefixed" else ""
    return (f"{b.permission.upper()} {b.principal} {b.operation} on {b.resource_type} "
            f"{b.resource_name!r}{prefixed} from {b.host}")


def filter_text(f: AclFilter) -> str:
    """``principal=User:alice resource_type=topic``; ``(every binding)`` for the empty filter."""
    fields = {"principal": f.principal, "host": f.host, "resource_type": f.resource_type,
              "resource_name": f.resource_name, "pattern_type": f.pattern_type,
              "operation": f.operation, "permission": f.permission}
    return " ".join(f"{k}={v}" for k, v in fields.items() if v is not None) or "(every binding)"


def _sorted(bindings: Iterable[AclBinding]) -> list[AclBinding]:
    # By resource first, as one reads ACLs: who may do what to this topic.
    return sorted(set(bindings), key=lambda b: (b.resource_type, b.resource_name,
                                                b.pattern_type, b.principal, b.host,
                                                b.operation, b.permission))


def _show(bindings: list[AclBinding], status: str | None, fmt: str) -> None:
    """A table (``(none)`` for no binding) or JSON; with ``status``, a column saying it."""
    extra = {} if status is None else {"status": status}
    if fmt == "json":
        echo_json([binding_row(b) | extra for b in bindings])
    else:
        table([_table_row(b) | extra for b in bindings])


# ====================================================================== options
def _principal(ctx: click.Context, param: click.Parameter,
               values: tuple[str, ...]) -> tuple[str, ...]:
    # Checked here, not only by the cluster: in a filter, "alice" (not User:alice) would
    # silently match nothing.
    for v in values:
        if not v.startswith("User:") or v == "User:":
            raise click.BadParameter(f"{v!r}: write User:NAME or User:*")
    return tuple(dict.fromkeys(values))


def _operations(ctx: click.Context, param: click.Parameter,
                values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(operation_name(v) for v in values))


def _who_options(*, selecting: bool) -> Callable[[Any], Any]:
    def add(f: Any) -> Any:
        f = click.option("--deny-principal", "deny_principals", multiple=True,
                         metavar="User:NAME", callback=_principal,
                         help=("its DENY bindings" if selecting else "a principal denied")
                         + " (repeatable)")(f)
        return click.option("--allow-principal", "allow_principals", multiple=True,
                            metavar="User:NAME", callback=_principal,
                            help=("its ALLOW bindings (repeatable)" if selecting else
                                  "a principal allowed (repeatable); User:* is everyone"))(f)
    return add


def _resource_options(*, selecting: bool) -> Callable[[Any], Any]:
    # In a selector a name compares exactly: --topic '*' is the every-topic binding itself.
    every = "the every-{} binding" if selecting else "every {}"

    def add(f: Any) -> Any:
        for option in reversed([
            click.option("--topic", metavar="NAME",
                         help=f"a topic (or prefix); * is {every.format('topic')}"),
            click.option("--group", metavar="NAME",
                         help=f"a consumer group (or prefix); * is {every.format('group')}"),
            click.option("--cluster", is_flag=True, help=f"the cluster ({CLUSTER_NAME})"),
            click.option("--transactional-id", metavar="NAME",
                         help="a transactional id (or prefix)"),
        ]):
            f = option(f)
        return f
    return add


def _operation_option(*, required: bool) -> Callable[[Any], Any]:
    return click.option("--operation", "operations", multiple=True, required=required,
                        metavar="OP", callback=_operations,
                        help=f"repeatable: {', '.join(OPERATIONS)} (any case)")


def _selector_options(f: Any) -> Any:
    """``list``'s and ``delete``'s selectors: all optional, a missing one matches anything."""
    for option in reversed([
        click.option("--principal", "principals", multiple=True, metavar="User:NAME",
                     callback=_principal, help="bindings of this principal, allow or deny "
                                               "(repeatable)"),
        _who_options(selecting=True),
        click.option("--host", default=None, help="bindings for this host (exactly: * is "
                                                  "the any-host binding)"),
        _resource_options(selecting=True),
        click.option("--resource-pattern-type", "pattern_type", default="any",
                     show_default=True, type=click.Choice(["literal", "prefixed", "any"]),
                     help="any: both"),
        _operation_option(required=False),
    ]):
        f = option(f)
    return f


def _filters(principals: tuple[str, ...], allow_principals: tuple[str, ...],
             deny_principals: tuple[str, ...], host: str | None, topic: str | None,
             group: str | None, cluster: bool, transactional_id: str | None, pattern_type: str,
             operations: tuple[str, ...]) -> list[AclFilter]:
    resource = resource_from_args(topic, group, cluster, transactional_id, required=False)
    return filters_from_args(principals, allow_principals, deny_principals, host, resource,
                             None if pattern_type == "any" else pattern_type, operations)


# ====================================================================== commands
@click.group(cls=OneLineGroup)
def acl() -> None:
    """Create, list and delete ACL bindings."""


@acl.command("create", cls=OneLineCommand)
@_who_options(selecting=False)
@click.option("--host", default="*", show_default=True,
              help="the client address it applies to: an IP address, or * for any")
@_resource_options(selecting=False)
@click.option("--resource-pattern-type", "pattern_type", default="literal", show_default=True,
              type=click.Choice(["literal", "prefixed"]),
              help="literal: the name (or * for all); prefixed: names starting with it")
@_operation_option(required=True)
@brokers_option
@timeout_option
@format_option
def create(allow_principals: tuple[str, ...], deny_principals: tuple[str, ...], host: str,
           topic: str | None, group: str | None, cluster: bool, transactional_id: str | None,
           pattern_type: str, operations: tuple[str, ...], brokers: str, timeout_ms: int,
           fmt: str) -> None:
    """Create ACL bindings: one per principal and operation.

    A binding that exists already counts as created."""
    resource = resource_from_args(topic, group, cluster, transactional_id, required=True)
    assert resource is not None
    bindings = bindings_from_args(allow_principals, deny_principals, host, resource,
                                  pattern_type, operations)
    with admin_client(brokers, timeout_ms, "cannot create ACLs") as admin:
        result = admin.create_acls(bindings)
    if result.values or fmt == "json":
        _show(list(result.values), "created", fmt)
    raise_item_errors(result.errors, lambda b: f"cannot create ACL {binding_text(b)}", brokers)


@acl.command("list", cls=OneLineCommand)
@_selector_options
@brokers_option
@timeout_option
@format_option
def list_cmd(principals: tuple[str, ...], allow_principals: tuple[str, ...],
             deny_principals: tuple[str, ...], host: str | None, topic: str | None,
             group: str | None, cluster: bool, transactional_id: str | None, pattern_type: str,
             operations: tuple[str, ...], brokers: str, timeout_ms: int, fmt: str) -> None:
    """List ACL bindings (all, or those the selectors match)."""
    filters = _filters(principals, allow_principals, deny_principals, host, topic, group,
                       cluster, transactional_id, pattern_type, operations)
    with admin_client(brokers, timeout_ms, "cannot list ACLs") as admin:
        found = [b for f in filters for b in admin.describe_acls(f)]
    _show(_sorted(found), None, fmt)


@acl.command("delete", cls=OneLineCommand)
@_selector_options
@click.option("--all", "everything", is_flag=True,
              help="no selector: every binding of the cluster")
@click.option("--execute", is_flag=True, help="delete (default: a dry run that lists them)")
@brokers_option
@timeout_option
@format_option
def delete(principals: tuple[str, ...], allow_principals: tuple[str, ...],
           deny_principals: tuple[str, ...], host: str | None, topic: str | None,
           group: str | None, cluster: bool, transactional_id: str | None, pattern_type: str,
           operations: tuple[str, ...], everything: bool, execute: bool, brokers: str,
           timeout_ms: int, fmt: str) -> None:
    """Delete the ACL bindings the selectors match.

    A dry run by default: lists what would be deleted; --execute deletes. With no selector,
    --all is needed (every binding of the cluster)."""
    filters = _filters(principals, allow_principals, deny_principals, host, topic, group,
                       cluster, transactional_id, pattern_type, operations)
    if (filters == [AclFilter()]) != everything:
        raise CliError("--all and the selectors exclude each other" if everything else
                       "name what to delete (--topic, --group, --cluster, --transactional-id, "
                       "--principal, --host, --operation...), or --all for every binding")
    if not execute:
        with admin_client(brokers, timeout_ms, "cannot list ACLs") as admin:
            found = [b for f in filters for b in admin.describe_acls(f)]
        _show(_sorted(found), "would delete", fmt)
        click.echo("dry run: nothing deleted; --execute deletes them", err=True)
        return
    with admin_client(brokers, timeout_ms, "cannot delete ACLs") as admin:
        result = admin.delete_acls(filters)
    if result.values or fmt == "json":
        _show(_sorted(b for deleted in result.values.values() for b in deleted), "deleted", fmt)
    raise_item_errors(result.errors, lambda f: f"cannot delete ACLs matching {filter_text(f)}",
                      brokers)
