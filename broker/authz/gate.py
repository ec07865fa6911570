"""One decision per (principal, host, operation, resource), audited when it refuses."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from broker.authz.principal import Who
from tidelog.acl import AclBinding, Authorizer
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

    def acl_version(self) -> object:
        """Something that stays the same object while the ACLs do (None when disabled): a
        consumer fetch session is checked against one version."""
        return self._image().acls.bindings() if self.enabled else None

    def allows(self, who: Who, operation: str, resource_type: str, name: str) -> bool:
        if not self.enabled:
            return True
        decision = self._current().authorize(who.principal, who.host, operation,
                                             resource_type, name)
        if not decision.allowed:
            audit.warning("denied %s %s on %s %r from %s: %s", who.principal, operation,
                          resource_type, name, who.host, decision.reason)
            if self._failures is not None:
                self._failures.labels(resource_type, operation).inc()
        return decision.allowed

    def allows_some(self, who: Who, operation: str, resource_type: str) -> bool:
        """Whether ``who`` may do ``operation`` on some resource of the type (KIP-679)."""
        if not self.enabled:
            return True
        return self._current().allows_some(who.principal, who.host, operation, resource_type)
