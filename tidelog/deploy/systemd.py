"""The systemd units of Tidelog nodes (pure: text only).

One function writes both kinds of unit, so they cannot drift apart:

* a rendered node's own unit (``tidelog deploy render``: ``tidelog-broker-101.service`` with
  its config path filled in);
* the instance templates in deploy/systemd/ (``tidelog-broker@.service``: ``%i`` is the node
  id, the config is ``/etc/tidelog/broker-%i.toml``) for people who write configs by hand;
  tests/deploy/test_systemd_units.py fails when the committed files differ from
  :func:`template_text`.

Why these settings:

* ``KillSignal=SIGTERM`` with ``TimeoutStopSec`` above a broker's controlled shutdown (leadership
  moved away first, up to 15 s, broker/runtime.py) plus the servers' grace: systemd's SIGKILL
  must never cut a controlled shutdown short. ``SendSIGKILL`` stays on as the last resort.
* ``Restart=on-failure``: a node that crashed comes back; one stopped on purpose (exit 0 after
  SIGTERM) stays stopped. ``RestartSec`` with a start limit keeps a node that cannot start
  (a bad config, an unformatted data dir: exit 2) from spinning.
* ``LimitNOFILE``: RocksDB keeps files open per partition, gRPC a socket per connection.
* A dedicated user and the hardening options systemd offers for a network daemon that writes
  only its data dir: read-only system, no privileges, no new capabilities, only IP sockets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tidelog.deploy.inventory import Inventory, Node

__all__ = ["TEMPLATE_ROLES", "template_text", "unit_text"]

#: The instance templates committed in deploy/systemd/ (file name -> role).
TEMPLATE_ROLES = {"tidelog-controller@.service": "controller",
                  "tidelog-broker@.service": "broker"}
#: Above a broker's controlled shutdown (15 s) and the gRPC grace, with room for a slow disk.
STOP_TIMEOUT_S = 60
DOCS = "https://github.com/tidelog/tidelog/blob/main/docs/operations.md"


def unit_text(inv: Inventory, node: Node, config_path: str) -> str:
    """The unit of one rendered node."""
    return _unit(description=f"Tidelog {' and '.join(node.roles)} {node.id}",
                 user=inv.user, tidelog=f"{inv.install_prefix}/bin/tidelog",
                 config=config_path, data_dir=node.data_dir, config_dir=inv.config_dir)


def template_text(role: str) -> str:
    """The instance template for ``role`` (``%i`` = node id)."""
    return _unit(description=f"Tidelog {role} %i", user="tidelog",
                 tidelog="/opt/tidelog/bin/tidelog", config=f"/etc/tidelog/{role}-%i.toml",
                 data_dir="/var/lib/tidelog/node-%i", config_dir="/etc/tidelog")


def _unit(*, description: str, user: str, tidelog: str, config: str, data_dir: str,
          config_dir: str) -> str:
    return f"""\
[Unit]
Description={description}
Documentation={DOCS}
Wants=network-online.target
After=network-online.target
# A node that cannot start (bad config: exit 2) is not retried forever.
StartLimitIntervalSec=300
StartLimitBurst=5

[Service]
Type=exec
User={user}
Group={user}
ExecStart={tidelog} server --config {config}
# SIGTERM starts a controlled shutdown (a broker moves its leaderships away first); give it
# time before systemd's SIGKILL.
KillSignal=SIGTERM
KillMode=mixed
TimeoutStopSec={STOP_TIMEOUT_S}
Restart=on-failure
RestartSec=5
# RocksDB keeps files open per partition; gRPC a socket per connection.
LimitNOFILE=1048576
UMask=0077

# Hardening: the node writes only its data dir and talks only over IP.
ReadWritePaths={data_dir}
ReadOnlyPaths={config_dir}
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
CapabilityBoundingSet=
AmbientCapabilities=

[Install]
WantedBy=multi-user.target
"""
