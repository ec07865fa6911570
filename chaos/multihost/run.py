"""The steps of the multi-host run, inside the client namespace; a report at the end.

Every wait is bounded, every load loop bounded in count and time. The report (a dict, printed
as the last line, JSON) holds what was checked and the figures; ``ok`` is true only when every
check passed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidelog.chaos.multihost.hosts import BROKER_HOSTS, Nodes, install, inventory_text, set_link
from tidelog.chaos.multihost.prometheus import Prometheus, dashboard_expressions
from tidelog.chaos.netns.plan import NetnsPlan
from tidelog.client import Admin, Consumer, NewTopic, Producer, TopicPartition
from tidelog.deploy.writer import default_rules_dir, render_to
from tidelog.errors import TidelogError

__all__ = ["DOWN_HOST", "run"]

DOWN_HOST = "broker-b"
TOPIC = "deploy-demo"
PARTITIONS = 6
RECORDS_BEFORE = 2_000
#: While the link is down: batches of this many, until the alert fires (bounded anyway).
BATCH = 200
BATCHES_MAX = 60
LINK_DOWN_MAX_S = 120.0
READY_TIMEOUT_S = 90.0
REPO = Path(__file__).resolve().parents[2]


class Step:
    """Prints each step with the time since the start, as a person watching would see it."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.lines: list[str] = []

    def __call__(self, text: str) -> None:
        line = f"[{time.monotonic() - self.started:6.1f} s] {text}"
        self.lines.append(line)
        print(line, flush=True)


def run(plan: NetnsPlan, workdir: Path) -> dict[str, Any]:
    step = Step()
    report: dict[str, Any] = {"ok": False, "subnet": plan.subnet}
    (workdir / "logs").mkdir(parents=True, exist_ok=True)
    inventory = workdir / "inventory.toml"
    inventory.write_text(inventory_text(plan, workdir))
    rendered = render_to(inventory, workdir / "rendered", rules_dir=default_rules_dir(),
                         scrape_interval="2s")
    inv = rendered.inventory
    step(f"rendered {len(inv.nodes)} nodes on {len(inv.hosts)} hosts ({plan.subnet}) into "
         f"{workdir / 'rendered'}")
    install(inv, workdir / "rendered")
    nodes = Nodes(plan, inv, workdir / "logs")
    prometheus = None
    try:
        nodes.format_all(rendered.cluster_id)
        for node in inv.nodes:
            nodes.start(node)
        prometheus = Prometheus(workdir / "rendered/prometheus/prometheus.yml",
                                workdir / "prometheus", plan.address("client"),
                                workdir / "logs/prometheus.log")
        nodes.wait_ready(READY_TIMEOUT_S)
        prometheus.wait_up(30)
        step("every node ready (/readyz), Prometheus up")
        bootstrap = ",".join(f"{inv.host(n.host).address}:{n.ports.client}"
                             for n in inv.brokers)
        tls = workdir / "rendered" / "tls"
        # The operator's client: TLS, verifying the brokers against the rendered CA.
        sec: dict[str, Any] = {"security_protocol": "SSL", "ssl_cafile": str(tls / "ca.crt"),
               "ssl_certfile": str(tls / "admin.crt"), "ssl_keyfile": str(tls / "admin.key")}
        _workload(plan, bootstrap, sec, prometheus, step, report)
        _check_prometheus(prometheus, step, report)
        report["ok"] = not report.get("failures")
    finally:
        if prometheus is not None:
            prometheus.stop()
        codes = nodes.stop_all()
        report["exit_codes"] = codes
        step(f"stopped every node (SIGTERM): exit codes {codes}")
    if any(code != 0 for code in codes.values()):
        report["ok"] = False
        report.setdefault("failures", []).append(f"a node did not stop cleanly: {codes}")
    report["steps"] = step.lines
    return report


def _workload(plan: NetnsPlan, bootstrap: str, sec: dict[str, Any], prometheus: Prometheus,
              step: Step, report: dict[str, Any]) -> None:
    failures = report.setdefault("failures", [])
    with Admin(bootstrap, **sec) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3,
                                      configs={"min.insync.replicas": "2"})]).all()
    step(f"created {TOPIC} over TLS: {PARTITIONS} partitions, RF 3, min.insync.replicas 2")
    report["plaintext_refused"] = _plaintext_refused(bootstrap)
    if not report["plaintext_refused"]:
        failures.append("a plaintext client was served by a TLS listener")
    acked: set[bytes] = set()
    with Producer(bootstrap, **sec) as producer:  # the defaults: acks=all, idempotent
        _produce(producer, range(RECORDS_BEFORE), acked)
        step(f"produced {len(acked)} records with acks=all, all acknowledged")
        set_link(plan, DOWN_HOST, up=False)
        down_at = time.monotonic()
        step(f"took host {DOWN_HOST}'s link down (ip link set eth0 down)")
        fired = _produce_until(producer, acked, lambda: prometheus.firing("TidelogBrokerDown"),
                               down_at)
        if fired:
            report["alert_fired_after_s"] = round(time.monotonic() - down_at, 1)
            step(f"TidelogBrokerDown fired for {[a.get('host') for a in fired]}; "
                 f"{len(acked)} records acknowledged so far")
            if not any(a.get("host") == DOWN_HOST for a in fired):
                failures.append(f"TidelogBrokerDown fired for {fired}, not {DOWN_HOST}")
        else:
            failures.append(f"TidelogBrokerDown did not fire within {LINK_DOWN_MAX_S:.0f} s")
        report["while_down"] = _evidence(bootstrap, sec)
        step(f"while {DOWN_HOST} was cut off: {report['while_down']}")
        set_link(plan, DOWN_HOST, up=True)
        step(f"brought {DOWN_HOST}'s link back")
        _produce(producer, range(10**6, 10**6 + BATCH), acked)
    report["acknowledged"] = len(acked)
    full = _wait_full_isr(bootstrap, sec, 90)
    step(f"every partition has its full ISR again after {full:.1f} s" if full is not None
         else "the ISR did not fill within 90 s")
    if full is None:
        failures.append("the downed broker did not rejoin every ISR within 90 s")
    read = _read_all(bootstrap, sec)
    lost = acked - read
    report.update(read=len(read), lost=len(lost))
    step(f"read back {len(read)} distinct records; lost acknowledged records: {len(lost)}")
    if lost:
        failures.append(f"{len(lost)} acknowledged records are missing, e.g. "
                        f"{sorted(lost)[:3]}")


def _plaintext_refused(bootstrap: str) -> bool:
    """Whether a client without TLS is refused by the brokers' TLS listeners."""
    try:
        with Admin(bootstrap, default_api_timeout_ms=2000, request_timeout_ms=1000) as admin:
            admin.list_topics()
    except TidelogError:
        return True
    return False


def _produce(producer: Producer, ids: range, acked: set[bytes]) -> None:
    futures = [(v, producer.send(TOPIC, v, key=v))
               for v in (b"record-%d" % i for i in ids)]
    for value, future in futures:
        future.result(timeout=150)  # within the producer's 120 s delivery timeout
        acked.add(value)


def _produce_until(producer: Producer, acked: set[bytes],
                   fired: Callable[[], list[dict[str, str]]], since: float
                   ) -> list[dict[str, str]]:
    """Produce batches until ``fired()`` says the alert fires (bounded in count and time)."""
    for batch in range(BATCHES_MAX):
        start = RECORDS_BEFORE + batch * BATCH
        _produce(producer, range(start, start + BATCH), acked)
        alerts = fired()
        if alerts or time.monotonic() - since > LINK_DOWN_MAX_S:
            return alerts
        time.sleep(1.0)
    return fired()


def _evidence(bootstrap: str, sec: dict[str, Any]) -> dict[str, int]:
    """What the cluster made of the cut: partitions the downed broker still led, and ISRs it
    was still in (both 0 once its session expired and its followers fell out)."""
    down_id = 100 + BROKER_HOSTS.index(DOWN_HOST) + 1
    with Admin(bootstrap, **sec) as admin:
        desc = admin.describe_topics([TOPIC], include_offsets=False).all()[TOPIC]
    return {"broker_id": down_id,
            "partitions_it_leads": sum(p.leader == down_id for p in desc.partitions),
            "isrs_it_is_in": sum(down_id in p.isr for p in desc.partitions)}


def _wait_full_isr(bootstrap: str, sec: dict[str, Any], timeout_s: float) -> float | None:
    started = time.monotonic()
    with Admin(bootstrap, **sec) as admin:
        while time.monotonic() - started < timeout_s:
            desc = admin.describe_topics([TOPIC], include_offsets=False).all()[TOPIC]
            if all(len(p.isr) == len(p.replicas) for p in desc.partitions):
                return time.monotonic() - started
            time.sleep(0.5)
    return None


def _read_all(bootstrap: str, sec: dict[str, Any]) -> set[bytes]:
    with Admin(bootstrap, **sec) as admin:
        desc = admin.describe_topics([TOPIC]).all()[TOPIC]
    ends = {p.partition: p.high_watermark for p in desc.partitions}
    seen: set[bytes] = set()
    with Consumer(bootstrap, auto_offset_reset="earliest", **sec) as consumer:
        tps = [TopicPartition(TOPIC, p) for p in ends]
        consumer.assign(tps)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
                consumer.position(tp) < ends[tp.partition] for tp in tps):
            seen.update(r.value for r in consumer.poll(timeout_ms=500) if r.value is not None)
    return seen


def _check_prometheus(prometheus: Prometheus, step: Step, report: dict[str, Any]) -> None:
    failures = report.setdefault("failures", [])
    deadline = time.monotonic() + 30
    while True:
        down = [t["labels"].get("host") for t in prometheus.targets() if t["health"] != "up"]
        if not down or time.monotonic() > deadline:
            break
        time.sleep(1)
    targets = prometheus.targets()
    report["targets_up"] = sum(t["health"] == "up" for t in targets)
    step(f"Prometheus targets up: {report['targets_up']} of {len(targets)}")
    if down or len(targets) != 6:
        failures.append(f"targets not up: {down} ({len(targets)} targets)")
    time.sleep(3)  # one more rule evaluation with every node up
    rules = prometheus.rules()
    bad_rules = [f"{r['name']}: {r.get('lastError')}" for r in rules if r["health"] != "ok"]
    report["rules"] = len(rules)
    if not rules:
        failures.append("no rules loaded (deploy/prometheus/rules missing?)")
    failures += [f"rule {b}" for b in bad_rules]
    expressions = list(dashboard_expressions(REPO / "deploy/grafana/dashboards"))
    bad_exprs = []
    for where, expr in expressions:
        try:
            prometheus.api("query", query=expr)
        except RuntimeError as e:
            bad_exprs.append(f"{where}: {expr}: {e}")
    report["dashboard_expressions"] = len(expressions)
    failures += bad_exprs
    step(f"{len(rules)} rules evaluated ({len(bad_rules)} with errors); "
         f"{len(expressions)} dashboard expressions ran ({len(bad_exprs)} with errors)")


def dump(report: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in report.items() if k != "steps"}, sort_keys=True)
