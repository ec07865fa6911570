"""The I/O under ``tidelog deploy render``: read the inventory, settle the cluster id and secret,
write the rendered files (tidelog.deploy.render makes them, purely).

Re-rendering into the same directory keeps the cluster: a generated cluster id (``OUT/cluster.id``)
and a generated secret (``OUT/cluster.secret``) are reused, so changing the inventory (adding a
broker) and rendering again gives configs of the same cluster, not a new one whose nodes would
refuse the old data dirs.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from tidelog.cluster_secret import (
    generate_secret,
    node_certificate_name,
    read_secret_file,
    write_secret_file,
)
from tidelog.deploy.inventory import GENERATE, Inventory, InventoryError, parse_inventory
from tidelog.deploy.render import NodeCertificates, node_hosts, render
from tidelog.errors import InvalidConfigError

__all__ = ["Rendered", "default_rules_dir", "render_to"]

CLUSTER_ID_FILE = "cluster.id"
SECRET_FILE = "cluster.secret"


@dataclass(frozen=True)
class Rendered:
    inventory: Inventory
    cluster_id: str
    files: list[Path]
    rules_dir: Path | None


def default_rules_dir() -> Path | None:
    """deploy/prometheus/rules of the checkout tidelog runs from, when it runs from one."""
    candidate = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules"
    return candidate if candidate.is_dir() else None


def render_to(inventory_path: str | Path, out: str | Path, *, rules_dir: Path | None = None,
              scrape_interval: str = "15s") -> Rendered:
    """Render ``inventory_path`` into directory ``out``; InvalidConfigError on a problem."""
    src = Path(inventory_path)
    try:
        text = src.read_text()
    except OSError as e:
        raise InventoryError([f"cannot read inventory {src}: {e.strerror}"]) from None
    inv = parse_inventory(text, source=str(src))
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise InvalidConfigError(f"--out {out_dir} exists and is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    cluster_id = _cluster_id(inv, out_dir)
    secret = _secret(inv, out_dir, src.parent)
    rules = {p.name: p.read_text() for p in sorted(rules_dir.glob("*.yml"))} \
        if rules_dir is not None else None
    certs = _certificates(inv, out_dir) if inv.tls else None
    written = []
    for f in render(inv, cluster_id=cluster_id, secret=secret, rules=rules,
                    scrape_interval=scrape_interval, certs=certs):
        path = out_dir / f.path
        path.parent.mkdir(parents=True, exist_ok=True)
        if f.mode == 0o600:
            write_secret_file(path, f.content.strip())
        else:
            path.write_text(f.content)
            os.chmod(path, f.mode)
        written.append(path)
    if inv.tls:
        written.append(_profile(inv, out_dir))
    return Rendered(inv, cluster_id, written, rules_dir)


def _certificates(inv: Inventory, out_dir: Path) -> NodeCertificates:
    """The cluster's CA (kept in OUT/tls and reused on every render) and a certificate per
    node, issued anew on each render (so rendering again renews them), plus an ``admin``
    client certificate for the operator's profile."""
    from tidelog.certs import Issued, issue, make_ca

    tls = out_dir / "tls"
    tls.mkdir(exist_ok=True)
    if (tls / "ca.crt").exists():
        ca = Issued((tls / "ca.key").read_bytes(), (tls / "ca.crt").read_bytes())
    else:
        ca = make_ca(f"Tidelog CA {inv.cluster_id if inv.cluster_id != GENERATE else ''}".strip())
        write_secret_file(tls / "ca.key", ca.key_pem.decode().strip())
        (tls / "ca.crt").write_bytes(ca.cert_pem)
    admin = issue(ca, "admin")
    write_secret_file(tls / "admin.key", admin.key_pem.decode().strip())
    (tls / "admin.crt").write_bytes(admin.cert_pem)
    nodes = {}
    for node in inv.nodes:
        # Named broker-<id> when the node acts as a broker: the peer listeners check it.
        issued = issue(ca, node_certificate_name(node.id, node.roles),
                       hosts=node_hosts(inv, node))
        nodes[node.id] = (issued.cert_pem.decode(), issued.key_pem.decode())
    return NodeCertificates(ca.cert_pem.decode(), nodes)


def _profile(inv: Inventory, out_dir: Path) -> Path:
    """OUT/profile.toml: the brokers and the admin certificate, for ``TIDELOG_PROFILE``."""
    tls = (out_dir / "tls").resolve()
    brokers = ",".join(f"{inv.host(n.host).address}:{n.ports.client}" for n in inv.brokers)
    path = out_dir / "profile.toml"
    path.write_text(f'brokers = "{brokers}"\nsecurity_protocol = "SSL"\n'
                    f'ssl_cafile = "{tls / "ca.crt"}"\nssl_certfile = "{tls / "admin.crt"}"\n'
                    f'ssl_keyfile = "{tls / "admin.key"}"\n')
    return path


def _cluster_id(inv: Inventory, out_dir: Path) -> str:
    path = out_dir / CLUSTER_ID_FILE
    if inv.cluster_id != GENERATE:
        cluster_id = inv.cluster_id
    elif path.exists():
        cluster_id = path.read_text().strip()
    else:
        cluster_id = uuid.uuid4().hex
    if path.exists() and path.read_text().strip() != cluster_id:
        raise InvalidConfigError(
            f"{out_dir} was rendered for cluster {path.read_text().strip()}, the inventory names "
            f"{cluster_id}: render a new cluster into a new directory")
    path.write_text(cluster_id + "\n")
    return cluster_id


def _secret(inv: Inventory, out_dir: Path, inventory_dir: Path) -> str:
    path = out_dir / SECRET_FILE
    if inv.cluster_secret_file != GENERATE:
        given = Path(inv.cluster_secret_file)
        secret = read_secret_file(given if given.is_absolute() else inventory_dir / given)
    elif path.exists():
        secret = read_secret_file(path)
    else:
        secret = generate_secret()
    write_secret_file(path, secret)
    return secret
