"""The provisioned Grafana dashboards (deploy/grafana/) against the code and the rules.

Every dashboard is valid JSON with a unique uid and title; every panel, nested ones included,
queries the provisioned Prometheus datasource; every metric name in a panel, templating or
annotation expression and in every rule file exists in what a node exports
(tests/deploy/exported_metrics.py), is a recording rule of deploy/prometheus/rules or a series
Prometheus makes itself; dashboard variables are used only inside regex matchers (so
promql_sources can substitute them); the provisioning files point where the dashboards are.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

from .exported_metrics import exported_metric_names  # noqa: E402
from .promql_sources import (  # noqa: E402
    DASHBOARDS_DIR,
    DATASOURCE,
    INTERVALS,
    REPO,
    VARIABLE,
    all_promql_expressions,
    dashboard_files,
    iter_panels,
    metric_names,
    raw_promql_expressions,
    recording_rule_names,
    rule_files,
)

GRAFANA = REPO / "deploy" / "grafana"
PROVIDER_PATH = "/var/lib/grafana/dashboards"
#: Series Prometheus itself writes: per-target scrape series and the alerts' state.
PROMETHEUS_BUILTINS = frozenset({
    "up", "scrape_duration_seconds", "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling", "scrape_series_added", "scrape_timeout_seconds",
    "scrape_sample_limit", "scrape_body_size_bytes", "ALERTS", "ALERTS_FOR_STATE"})
#: The dashboards the deployment provisions (file name -> uid).
EXPECTED = {
    "tidelog-cluster-overview.json": "tidelog-cluster-overview",
    "tidelog-brokers.json": "tidelog-brokers",
    "tidelog-topics.json": "tidelog-topics",
    "tidelog-controller-quorum.json": "tidelog-controller-quorum",
    "tidelog-consumer-groups.json": "tidelog-consumer-groups",
    "tidelog-request-latency.json": "tidelog-request-latency",
}


def _boards() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in dashboard_files()}


def _board_params() -> list[Any]:
    return [pytest.param(path, id=path.name) for path in dashboard_files()]


# ------------------------------------------------------------------------------ the JSON model
def test_the_six_dashboards_are_there() -> None:
    assert sorted(p.name for p in dashboard_files()) == sorted(EXPECTED)


@pytest.mark.parametrize("path", _board_params())
def test_dashboard_is_a_valid_grafana_model(path: Path) -> None:
    board = json.loads(path.read_text())
    assert isinstance(board, dict)
    assert board["uid"] == EXPECTED[path.name]
    assert len(board["uid"]) <= 40 and re.fullmatch(r"[A-Za-z0-9_-]+", board["uid"])
    assert board["title"].startswith("Tidelog / ")
    assert board["schemaVersion"] == 39
    assert board.get("id") is None, "provisioned dashboards leave id to Grafana"
    assert "tidelog" in board["tags"]
    panels = list(iter_panels(board["panels"]))
    assert panels, "no panels"
    ids = Counter(p["id"] for p in panels)
    assert [i for i, n in ids.items() if n > 1] == [], "duplicate panel ids"
    for p in panels:
        where = f"{path.name}: panel {p.get('title')!r}"
        grid = p["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, where
        assert grid["h"] > 0 and grid["y"] >= 0, where
        if p["type"] == "row":
            for child in p.get("panels", []):
                assert child["type"] != "row", f"{where}: a row nested in a row"
            continue
        assert p.get("title"), f"{path.name}: panel {p['id']} has no title"
        assert p.get("targets"), f"{where}: no queries"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), f"{where}: duplicate refIds"
        assert all(t.get("expr") for t in p["targets"]), f"{where}: a query without expr"


def test_uids_and_titles_are_unique() -> None:
    boards = _boards().values()
    uids = Counter(b["uid"] for b in boards)
    titles = Counter(b["title"] for b in boards)
    assert [u for u, n in uids.items() if n > 1] == []
    assert [t for t, n in titles.items() if n > 1] == []


@pytest.mark.parametrize("path", _board_params())
def test_every_panel_and_query_uses_the_provisioned_datasource(path: Path) -> None:
    board = json.loads(path.read_text())
    wrong = []
    for p in iter_panels(board["panels"]):
        where = f"panel {p.get('title')!r}"
        # Rows run no query; one that names a datasource (for a repeat) must name ours.
        queries = p["type"] != "row" or "datasource" in p
        if queries and p.get("datasource") != DATASOURCE:
            wrong.append(f"{where}: {p.get('datasource')}")
        for t in p.get("targets", []):
            if t.get("datasource", DATASOURCE) != DATASOURCE:
                wrong.append(f"{where} target {t.get('refId')}: {t['datasource']}")
    for var in board.get("templating", {}).get("list", []):
        if var.get("type") == "query" and var.get("datasource") != DATASOURCE:
            wrong.append(f"variable ${var['name']}: {var.get('datasource')}")
    for ann in board.get("annotations", {}).get("list", []):
        if not ann.get("builtIn") and ann.get("datasource") != DATASOURCE:
            wrong.append(f"annotation {ann.get('name')!r}: {ann.get('datasource')}")
    assert wrong == []


# ------------------------------------------------------------------------------ variables
def _regex_matcher_spans(expr: str) -> list[tuple[int, int]]:
    """Spans of the quoted values of =~ and !~ matchers."""
    return [m.span(1) for m in re.finditer(r'[=!]~\s*("(?:[^"\\]|\\.)*")', expr)]


@pytest.mark.parametrize("path", _board_params())
def test_variables_are_defined_and_used_only_in_regex_matchers(path: Path) -> None:
    board = json.loads(path.read_text())
    defined = {v["name"] for v in board.get("templating", {}).get("list", [])}
    for var in board.get("templating", {}).get("list", []):
        if var.get("type") == "query" and var.get("multi"):
            assert var.get("includeAll") and var.get("allValue") == ".*", var["name"]
    problems = []
    for where, expr in raw_promql_expressions():
        if not where.startswith(path.name + ":"):
            continue
        regex_values = _regex_matcher_spans(expr)
        for m in VARIABLE.finditer(expr):
            name = m.group(1) or m.group(2) or m.group(3)
            if name in INTERVALS:
                continue
            if name not in defined:
                problems.append(f"{where}: ${name} is not a variable of the dashboard")
            elif not any(a <= m.start() and m.end() <= b for a, b in regex_values):
                problems.append(f"{where}: ${name} outside a =~/!~ matcher: {expr}")
    for p in iter_panels(board["panels"]):
        if p.get("repeat"):
            assert p["repeat"] in defined, f"panel {p.get('title')!r} repeats ${p['repeat']}"
    assert problems == []


def test_runnable_expressions_have_no_variables_left() -> None:
    expressions = all_promql_expressions()
    assert len(expressions) == len(raw_promql_expressions())
    left = [(where, expr) for where, expr in expressions if "$" in expr or "[[" in expr]
    assert left == []
    for path in dashboard_files():
        assert any(w.startswith(path.name + ":") for w, _ in expressions), path.name
    for path in rule_files():
        assert any(w.startswith(path.name + ":") for w, _ in expressions), path.name


# ------------------------------------------------------------------------------ metric names
def test_every_metric_name_is_exported_or_recorded() -> None:
    known = set(exported_metric_names()) | recording_rule_names() | PROMETHEUS_BUILTINS
    unknown = sorted({f"{where}: {name}"
                      for where, expr in all_promql_expressions()
                      for name in metric_names(expr) if name not in known})
    assert unknown == [], "\n".join(unknown)


def test_recording_rules_derive_from_exported_metrics() -> None:
    # A recording rule (level:metric:operations) must not shadow an exported name.
    exported = exported_metric_names()
    names = recording_rule_names()
    assert names, "no recording rules found"
    for name in names:
        assert name not in exported
        assert re.fullmatch(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", name), name


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (topic) (rate(tidelog_broker_bytes_in_total{topic=~"$topic"}[$__rate_interval]))',
     {"tidelog_broker_bytes_in_total"}),
    ("histogram_quantile(0.99, sum by (api, le) (rate(x_bucket[5m])))", {"x_bucket"}),
    ("sum(a) < 1 or absent(a)", {"a"}),
    ("a / on(instance) group_left(node_id) b unless c offset 5m", {"a", "b", "c"}),
    ('max(b) without (group) > bool 3 and d{__name__="e", le="+Inf"} @ start()',
     {"b", "d", "e"}),
    ("predict_linear(f[6h], 24 * 3600) < 0 or count(g) by (group) or vector(0)", {"f", "g"}),
    ('label_replace(h, "dst", "$1", "src", "(.*)") + 1e3 - 0x1f + inf', {"h"}),
    ("rate(i[10m:1m]) / tidelog:broker_bytes_in:rate1m", {"i", "tidelog:broker_bytes_in:rate1m"}),
    ("topk(10, j) # a comment naming k", {"j"}),
])
def test_metric_name_tokenizer(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


# ------------------------------------------------------------------------------ provisioning
def test_datasource_provisioning_has_the_uid_the_dashboards_use() -> None:
    config = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    assert config["apiVersion"] == 1
    [source] = [d for d in config["datasources"] if d.get("uid") == DATASOURCE["uid"]]
    assert source["type"] == DATASOURCE["type"]
    assert source["url"] == "http://prometheus:9090"
    assert source["access"] == "proxy"


def test_dashboard_provider_loads_the_dashboards_directory() -> None:
    config = yaml.safe_load((GRAFANA / "provisioning/dashboards/tidelog.yml").read_text())
    assert config["apiVersion"] == 1
    [provider] = config["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == PROVIDER_PATH
    assert DASHBOARDS_DIR == GRAFANA / "dashboards"


def test_compose_mounts_the_provisioning_where_grafana_reads_it() -> None:
    compose_file = REPO / "deploy" / "docker" / "compose.yml"
    if not compose_file.exists():
        pytest.skip("no deploy/docker/compose.yml")
    compose = yaml.safe_load(compose_file.read_text())
    volumes = compose["services"]["grafana"]["volumes"]
    mounts = {}
    for volume in volumes:
        source, target = volume.split(":")[:2]
        mounts[target] = (compose_file.parent / source).resolve()
    assert mounts.get(PROVIDER_PATH) == DASHBOARDS_DIR.resolve()
    assert mounts.get("/etc/grafana/provisioning") == (GRAFANA / "provisioning").resolve()
