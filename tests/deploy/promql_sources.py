"""Every PromQL expression of the monitoring shipped in deploy/: Grafana dashboards and
Prometheus rule files, and a small PromQL tokenizer to find the metric names they use.

* :func:`all_promql_expressions` — ``(where, expr)`` for every panel target, templating query
  (the selector of ``label_values(selector, label)``), Prometheus annotation and rule, with
  Grafana's variables substituted so the expression runs as a plain query against a live
  Prometheus: ``$__rate_interval`` / ``$__interval`` → ``1m``, ``$__range`` → ``1h``, and the
  dashboards' own variables (``$topic``, ``${group}``, ``[[api]]``…) → ``.*`` (the dashboards
  use them only as values of regex matchers, ``label=~"$topic"``, which the dashboard test
  checks).
* :func:`raw_promql_expressions` — the same, unsubstituted.
* :func:`metric_names` — the metric names an expression selects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "DASHBOARDS_DIR",
    "DATASOURCE",
    "REPO",
    "RULES_DIR",
    "all_promql_expressions",
    "dashboard_files",
    "iter_panels",
    "metric_names",
    "raw_promql_expressions",
    "recording_rule_names",
    "rule_files",
    "substitute_variables",
    "variable_query_expression",
]

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS_DIR = REPO / "deploy" / "grafana" / "dashboards"
RULES_DIR = REPO / "deploy" / "prometheus" / "rules"
#: The datasource every dashboard panel uses (deploy/grafana/provisioning/datasources).
DATASOURCE = {"type": "prometheus", "uid": "tidelog-prometheus"}

#: Grafana's interval macros, as a plain query needs them.
INTERVALS = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h"}
#: $name, ${name}, ${name:format} and the deprecated [[name]] / [[name:format]].
VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]")


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS_DIR.glob("*.json"))


def rule_files() -> list[Path]:
    return sorted(RULES_DIR.glob("*.yml"))


def iter_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in (collapsed) rows."""
    for panel in panels:
        yield panel
        yield from iter_panels(panel.get("panels", []))


def variable_query_expression(query: Any) -> str | None:
    """The PromQL of a templating variable's query: the selector of label_values(selector,
    label), the expression of query_result(expr); None for label_values(label) and
    label_names() (no expression to run)."""
    text = (query.get("query", "") if isinstance(query, dict) else str(query or "")).strip()
    if not text:
        return None
    match = re.fullmatch(r"label_values\((.*),\s*(\w+)\s*\)", text, re.S)
    if match:
        return match.group(1).strip() or None
    if re.fullmatch(r"label_values\(\s*\w+\s*\)|label_names\(.*\)|metrics\(.*\)", text, re.S):
        return None
    match = re.fullmatch(r"query_result\((.*)\)", text, re.S)
    return match.group(1).strip() if match else text


def raw_promql_expressions() -> list[tuple[str, str]]:
    """(where, expr) for every PromQL expression of the dashboards and rule files, as written."""
    out: list[tuple[str, str]] = []
    for path in dashboard_files():
        board = json.loads(path.read_text())
        for panel in iter_panels(board.get("panels", [])):
            for t in panel.get("targets", []):
                if t.get("expr"):
                    out.append((f"{path.name}: panel {panel.get('title')!r} target "
                                f"{t.get('refId')}", t["expr"]))
        for var in board.get("templating", {}).get("list", []):
            if var.get("type") == "query":
                expr = variable_query_expression(var.get("query"))
                if expr:
                    out.append((f"{path.name}: variable ${var.get('name')}", expr))
        for ann in board.get("annotations", {}).get("list", []):
            if ann.get("expr"):
                out.append((f"{path.name}: annotation {ann.get('name')!r}", ann["expr"]))
    for path in rule_files():
        for group in yaml.safe_load(path.read_text()).get("groups", []):
            for rule in group.get("rules", []):
                name = rule.get("alert") or rule.get("record")
                out.append((f"{path.name}: {group['name']}: {name}", str(rule["expr"])))
    return out


def substitute_variables(expr: str) -> str:
    """``expr`` with Grafana's interval macros replaced by durations and every other variable
    by ``.*`` (valid where the dashboards use variables: inside regex matchers)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        return INTERVALS.get(name, ".*")

    return VARIABLE.sub(replace, expr)


def all_promql_expressions() -> list[tuple[str, str]]:
    """(where, expr) for every PromQL expression of every dashboard and rule file, runnable as
    a query (variables substituted, see the module docstring)."""
    return [(where, substitute_variables(expr)) for where, expr in raw_promql_expressions()]


def recording_rule_names() -> set[str]:
    return {rule["record"] for path in rule_files()
            for group in yaml.safe_load(path.read_text()).get("groups", [])
            for rule in group.get("rules", []) if "record" in rule}


# ------------------------------------------------------------------------------ tokenizer
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<var>\$\{[^}]*\}|\$\w+|\[\[[^\]]*\]\])
  | (?P<range>\[[^\]]*\])
  | (?P<number>(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)[A-Za-z0-9]*)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<punct>.)
""", re.X | re.S)

#: Aggregation operators (never metric names; ``group`` is also a label in by(group)).
AGGREGATORS = frozenset({"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                         "count_values", "bottomk", "topk", "quantile", "limitk",
                         "limit_ratio"})
#: Keywords and literals: binary set operators, modifiers, atan2, inf/nan.
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "by",
                      "without", "on", "ignoring", "group_left", "group_right"})
#: Followed by a parenthesised label list, not an expression.
LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})


def _tokens(expr: str) -> list[tuple[str, str]]:
    return [(m.lastgroup or "punct", m.group()) for m in _TOKEN.finditer(expr)
            if m.lastgroup not in ("ws", "comment")]


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects: identifiers not followed by ``(`` (functions), not
    PromQL keywords or aggregators, not label names (inside ``{}`` or the label lists of
    by/without/on/ignoring/group_left/group_right), not in strings, not durations; plus
    ``__name__="…"`` matchers."""
    tokens = _tokens(expr)
    names: set[str] = set()
    i, braces = 0, 0
    while i < len(tokens):
        kind, text = tokens[i]
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if text == "{":
            braces += 1
        elif text == "}":
            braces = max(0, braces - 1)
        elif braces:
            if (kind == "ident" and text == "__name__" and nxt == "="
                    and i + 2 < len(tokens) and tokens[i + 2][0] == "string"):
                names.add(tokens[i + 2][1][1:-1])
        elif kind == "ident":
            if text in LABEL_LISTS and nxt == "(":
                depth = 0
                for j in range(i + 1, len(tokens)):  # skip the label list
                    depth += {"(": 1, ")": -1}.get(tokens[j][1], 0)
                    if depth == 0:
                        i = j
                        break
            elif nxt != "(" and text not in KEYWORDS and text not in AGGREGATORS:
                names.add(text)
        i += 1
    return names
