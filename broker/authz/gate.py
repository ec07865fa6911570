"""One decision per (principal, host, operation, resource), audited when it refuses."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tidelog.acl import AclBinding, Authorizer
from tidelog.broker.authz.audit import AuditLog, shown
from tidelog.broker.authz.principal import ANONYMOUS, Who
from tidelog.config import AuthorizationConfig
from tidelog.metadata.image import MetadataImage

__all__ = ["Gate"]

#: Refusals, one line each: principal, operation, resource, host and the rule that decided.
audit = logging.getLogger("tidelog.audit")


class Gate:
    """The ACL decision for requests on this broker (enabled or not, see the config)."""

    def __init__(self, config: AuthorizationConfig, image: Callable[[], MetadataImage],
                 failures: Any = None) -> None:
        self.enabled = config.enabled
        self._config = config
        self._image = image
        self._failures = failures  # the metric's counter, labelled (resource_type, operation)
        self._audit = AuditLog(audit)
        self._bindings: tuple[AclBinding, ...] | None = None
        self._authorizer = Authorizer(())

    def _current(self) -> Authorizer:
        # Images whose ACLs did not change share one bindings tuple: rebuilt only on a change.
        bindings = self._image().acls.bindings()
        if bindings is not self._bindings:
            self._authorizer = Authorizer(
                bindings, super_users=self._config.super_users,
                allow_everyone_if_no_acl_found=self._config.allow_everyone_if_no_acl_found)
        self._bindings = bindings
        return self._authorizer

    def image(self) -> MetadataImage:
        """The metadata image decisions are made against (the newest this broker has)."""
        return self._image()

    def acl_version(self) -> object:
        """Something that stays the same object while the ACLs do (None when disabled): a
        consumer fetch session is checked against one version."""
        return self._image().acls.bindings() if self.enabled else None

    def allows(self, who: Who, operation: str, resource_type: str, name: str, *,
               audit_refusal: bool = True) -> bool:
        """Whether ``who`` may; a refusal is audited and counted unless ``audit_refusal`` is
        False (filtering: what a regex or a listing leaves out is not a refused request, as
        Kafka's logIfDenied=false)."""
        if not self.enabled:
            return True
        decision = self._current().authorize(who.principal, who.host, operation,
                                             resource_type, name)
        if not decision.allowed and audit_refusal:
            self._audit.refusal("denied %s %s on %s %s from %s: %s", who.principal,
                                operation, resource_type, shown(name), who.host,
                                decision.reason)
            if self._failures is not None:
                self._failures.labels(resource_type, operation).inc()
        return decision.allowed

    def topic_describer(self) -> Callable[[str, str, str], bool] | None:
        """``(principal, host, topic) -> may it Describe the topic`` for the group coordinator,
        which leaves out of a member's subscriptions what it may not see (None when
        authorization is off: nothing is left out)."""
        if not self.enabled:
            return None
        return lambda principal, host, name: self.allows(
            Who(principal or ANONYMOUS, host), "Describe", "topic", name, audit_refusal=False)

    def allows_some(self, who: Who, operation: str, resource_type: str) -> bool:
        """Whether ``who`` may do ``operation`` on some resource of the type (KIP-679)."""
        if not self.enabled:
            return True
        return self._current().allows_some(who.principal, who.host, operation, resource_type)
