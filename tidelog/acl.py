"""ACLs with Kafka's model, and the decision they give (pure: no I/O, no clock).

An ACL binding says: *principal* from *host* is allowed (or denied) *operation* on resources of
one type whose name matches a *pattern* (literal, ``*`` for every name, or prefixed). The
authorizer decides a request as Kafka's StandardAuthorizer does:

1. a super user is allowed everything;
2. a matching DENY binding denies (deny wins over any allow);
3. a matching ALLOW binding allows; ALLOW of Read, Write, Delete or Alter implies Describe, and
   ALLOW of AlterConfigs implies DescribeConfigs (Kafka's implied operations); ``All`` matches
   every operation;
4. no binding at all on the resource (for any principal): allowed only when
   ``allow_everyone_if_no_acl_found`` (off by default once ACLs are on);
5. else denied.

A binding matches a request when its resource type is the request's, its pattern matches the
name (literal equal, literal ``*``, or prefixed and the name starts with the prefix), its
principal is the request's or ``User:*``, and its host is the request's or ``*``.

This is the core of the authorisation issue's work (docs/security.md says what is enforced
today): the metadata records that carry bindings, the RPCs that manage them and the checks in
every handler build on it.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from tidelog.v1 import common_pb2

__all__ = [
    "CLUSTER_NAME",
    "OPERATIONS",
    "RESOURCE_TYPES",
    "AclBinding",
    "AclFilter",
    "Authorizer",
    "Decision",
    "binding_from_proto",
    "binding_to_proto",
    "filter_from_proto",
    "filter_to_proto",
    "normalized_host",
]

RESOURCE_TYPES = ("topic", "group", "cluster", "transactional_id")
PATTERN_TYPES = ("literal", "prefixed")
OPERATIONS = ("Read", "Write", "Create", "Delete", "Alter", "Describe", "DescribeConfigs",
              "AlterConfigs", "ClusterAction", "IdempotentWrite", "All")
PERMISSIONS = ("allow", "deny")
#: The one cluster resource's name, as Kafka names it.
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
#: operation -> the operations whose ALLOW implies it.
_IMPLIED_BY = {"Describe": ("Read", "Write", "Delete", "Alter"),
               "DescribeConfigs": ("AlterConfigs",)}


@dataclass(frozen=True, slots=True)
class AclBinding:
    principal: str          # "User:alice" or "User:*"
    host: str               # an IP address or "*"
    resource_type: str
    resource_name: str      # a name, "*" (literal only), or a prefix
    pattern_type: str       # literal | prefixed
    operation: str
    permission: str         # allow | deny

    def problem(self) -> str | None:
        """Why this binding is invalid (one line), or None."""
        if not self.principal.startswith("User:") or len(self.principal) == len("User:"):
            return f"principal {self.principal!r}: use User:<name> or User:*"
        if self.host != WILDCARD:
            try:
                ipaddress.ip_address(self.host)
            except ValueError:
                return f"host {self.host!r}: use an IP address or *"
        if self.resource_type not in RESOURCE_TYPES:
            return f"resource type {self.resource_type!r}: one of {', '.join(RESOURCE_TYPES)}"
        if self.pattern_type not in PATTERN_TYPES:
            return f"pattern type {self.pattern_type!r}: literal or prefixed"
        if not self.resource_name:
            return "resource name is empty"
        if self.pattern_type == "prefixed" and self.resource_name == WILDCARD:
            return "a prefixed pattern of * matches nothing: use a literal *"
        if self.resource_type == "cluster" and self.resource_name != CLUSTER_NAME:
            return f"the cluster resource is named {CLUSTER_NAME!r}"
        if self.operation not in OPERATIONS:
            return f"operation {self.operation!r}: one of {', '.join(OPERATIONS)}"
        if self.permission not in PERMISSIONS:
            return f"permission {self.permission!r}: allow or deny"
        return None

    def matches_resource(self, resource_type: str, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == "prefixed":
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)

    def matches_who(self, principal: str, host: str) -> bool:
        """Whether the binding is for ``principal`` connecting from ``host`` (a
        :func:`normalized_host`)."""
        return self.principal in (principal, "User:*") and (
            self.host == WILDCARD or normalized_host(self.host) == host)


@functools.lru_cache(maxsize=4096)
def normalized_host(host: str) -> str:
    """One spelling per address, so a binding and a connection compare as addresses, not as
    strings: ``2001:DB8:0:0::1`` and ``2001:db8::1`` are one host, and so are ``127.0.0.1`` and
    the IPv4-mapped ``::ffff:127.0.0.1`` an IPv6 socket reports (a DENY written in one form
    must deny a client seen in the other). Anything that is not an address (``*``, a peer
    string gRPC did not give as ipv4/ipv6) is left as it is."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        address = ipaddress.IPv6Address(address.packed)  # drops a %zone: not an ACL matter
    return str(address)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Which bindings DescribeAcls lists and DeleteAcls removes: None matches anything; names
    and pattern types compare exactly (Kafka's filter, without its MATCH pattern type)."""

    principal: str | None = None
    host: str | None = None
    resource_type: str | None = None
    resource_name: str | None = None
    pattern_type: str | None = None
    operation: str | None = None
    permission: str | None = None

    def problem(self) -> str | None:
        """Why this filter is invalid (one line), or None: an enumerated field must name a value
        that exists, or the filter could never match and a delete would silently do nothing
        (Kafka refuses UNKNOWN filters likewise)."""
        for name, choices in (("resource_type", RESOURCE_TYPES),
                              ("pattern_type", PATTERN_TYPES), ("operation", OPERATIONS),
                              ("permission", PERMISSIONS)):
            value = getattr(self, name)
            if value is not None and value not in choices:
                return f"{name.replace('_', ' ')} {value!r}: one of {', '.join(choices)}"
        return None

    def matches(self, b: AclBinding) -> bool:
        if self.host is not None and normalized_host(self.host) != normalized_host(b.host):
            return False
        return all(want is None or want == have for want, have in (
            (self.principal, b.principal),
            (self.resource_type, b.resource_type), (self.resource_name, b.resource_name),
            (self.pattern_type, b.pattern_type), (self.operation, b.operation),
            (self.permission, b.permission)))


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str     # which rule decided, for the audit log and the error message


class Authorizer:
    """Decides requests against a set of bindings (rebuilt when the bindings change)."""

    def __init__(self, bindings: Iterable[AclBinding], *, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self._by_type: dict[str, list[AclBinding]] = {t: [] for t in RESOURCE_TYPES}
        for b in bindings:
            self._by_type[b.resource_type].append(b)
        self._super_users = frozenset(super_users)
        self._allow_if_none = allow_everyone_if_no_acl_found

    def authorize(self, principal: str, host: str, operation: str, resource_type: str,
                  name: str) -> Decision:
        if principal in self._super_users:
            return Decision(True, f"{principal} is a super user")
        host = normalized_host(host)
        on_resource = [b for b in self._by_type[resource_type]
                       if b.matches_resource(resource_type, name)]
        if not on_resource:
            return Decision(self._allow_if_none,
                            f"no ACL on {resource_type} {name!r}; "
                            f"allow.everyone.if.no.acl.found is "
                            f"{str(self._allow_if_none).lower()}")
        mine = [b for b in on_resource if b.matches_who(principal, host)]
        for b in mine:
            if b.permission == "deny" and b.operation in (operation, "All"):
                return Decision(False, f"denied by {_describe(b)}")
        granting = (operation, "All", *_IMPLIED_BY.get(operation, ()))
        for b in mine:
            if b.permission == "allow" and b.operation in granting:
                return Decision(True, f"allowed by {_describe(b)}")
        return Decision(False, f"no ACL allows {principal} {operation} on {resource_type} "
                               f"{name!r} from {host}")


    def allows_some(self, principal: str, host: str, operation: str,
                    resource_type: str) -> bool:
        """Whether some ALLOW binding lets ``principal`` do ``operation`` on some resource of
        ``resource_type`` (KIP-679: an idempotent producer needs Write on a topic, not
        IdempotentWrite on the cluster)."""
        if principal in self._super_users:
            return True
        host = normalized_host(host)
        return any(b.permission == "allow" and b.operation in (operation, "All")
                   and b.matches_who(principal, host) for b in self._by_type[resource_type])


def _describe(b: AclBinding) -> str:
    pattern = f"{b.resource_name}*" if b.pattern_type == "prefixed" else b.resource_name
    return (f"{b.permission.upper()} {b.principal} {b.operation} on {b.resource_type} "
            f"{pattern!r} from {b.host}")


# ------------------------------------------------------------------------------- wire forms
_FIELDS = ("principal", "host", "resource_type", "resource_name", "pattern_type", "operation",
           "permission")


def binding_to_proto(b: AclBinding) -> common_pb2.AclBinding:
    return common_pb2.AclBinding(**{f: getattr(b, f) for f in _FIELDS})


def binding_from_proto(p: common_pb2.AclBinding) -> AclBinding:
    """The binding a message carries (not validated: call :meth:`AclBinding.problem`)."""
    return AclBinding(*(getattr(p, f) for f in _FIELDS))


def filter_to_proto(f: AclFilter) -> common_pb2.AclFilter:
    return common_pb2.AclFilter(**{k: getattr(f, k) for k in _FIELDS
                                   if getattr(f, k) is not None})


def filter_from_proto(p: common_pb2.AclFilter) -> AclFilter:
    return AclFilter(*(getattr(p, k) if p.HasField(k) else None for k in _FIELDS))
