"""The Prometheus config, rules and alerts of deploy/prometheus/, checked by the real promtool:
``promtool check config`` (which loads the rule files too), ``promtool check rules``, the
``promtool test rules`` unit tests of deploy/prometheus/tests/, and every dashboard expression
parsed by Prometheus' own parser. Plus the alerts' conventions: a severity label, summary,
description and runbook_url annotations, and a unit test firing and one staying quiet for each.

promtool comes with Debian's ``prometheus`` package, which ``make test`` installs; without it
the promtool tests skip.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

from .promql_sources import REPO, all_promql_expressions, rule_files  # noqa: E402

PROMETHEUS = REPO / "deploy" / "prometheus"
ALERTS_FILE = PROMETHEUS / "rules" / "tidelog-alerts.yml"
OPERATIONS = REPO / "docs" / "operations.md"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed: `make test` installs Debian's prometheus package "
           "(apt-get install prometheus), which has it")
RUNBOOK = "https://github.com/tidelog/tidelog/blob/main/docs/operations.md#"
#: Alerts the deployment must have, and the for: of those whose timing others rely on (the
#: multi-host test expects TidelogBrokerDown within about a minute of a broker's link going
#: down).
REQUIRED_ALERTS = {
    "TidelogNoActiveController": None, "TidelogMultipleActiveControllers": None,
    "TidelogOfflinePartitions": None, "TidelogUnderMinIsrPartitions": None,
    "TidelogUnderReplicatedPartitions": None, "TidelogBrokerFenced": None,
    "TidelogBrokerDown": "30s", "TidelogControllerDown": "30s",
    "TidelogConsumerGroupLagGrowing": None, "TidelogDiskFilling": None,
    "TidelogLogFlushFailures": None,
}


def _promtool(*args: str, cwd: Path = REPO) -> None:
    assert PROMTOOL is not None
    done = subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, (f"promtool {' '.join(args)} exited {done.returncode}:\n"
                                  f"{done.stdout}\n{done.stderr}")


def _alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS_FILE.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def _unit_test_files() -> list[Path]:
    return sorted((PROMETHEUS / "tests").glob("*.yml"))


# ------------------------------------------------------------------------------ promtool
@needs_promtool
def test_promtool_check_config() -> None:
    _promtool("check", "config", str(PROMETHEUS / "prometheus.yml"))


@needs_promtool
@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in rule_files()])
def test_promtool_check_rules(path: Path) -> None:
    _promtool("check", "rules", str(path))


@needs_promtool
def test_promtool_rule_unit_tests() -> None:
    files = _unit_test_files()
    assert files, "no promtool unit tests in deploy/prometheus/tests"
    _promtool("test", "rules", *map(str, files))


@needs_promtool
def test_every_dashboard_expression_parses(tmp_path: Path) -> None:
    # Each expression as a recording rule: `promtool check rules` parses it with Prometheus'
    # own PromQL parser (the live multi-host run also executes them).
    expressions = all_promql_expressions()
    rules = [{"record": f"dashboard:expression:n{i}", "expr": expr}
             for i, (_, expr) in enumerate(expressions)]
    path = tmp_path / "expressions.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "expressions", "rules": rules}]}))
    assert PROMTOOL is not None
    done = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=120, check=False)
    if done.returncode != 0:  # name the dashboard panels behind promtool's rule numbers
        listing = "\n".join(f"n{i}: {where}: {expr}"
                            for i, (where, expr) in enumerate(expressions))
        pytest.fail(f"promtool check rules: {done.stdout}\n{done.stderr}\n{listing}")


# ------------------------------------------------------------------------------ conventions
def test_the_required_alerts_exist() -> None:
    alerts = {rule["alert"]: rule for rule in _alerts()}
    assert set(REQUIRED_ALERTS) <= set(alerts), set(REQUIRED_ALERTS) - set(alerts)
    for name, for_ in REQUIRED_ALERTS.items():
        if for_ is not None:
            assert alerts[name].get("for") == for_, name
    assert alerts["TidelogBrokerDown"]["expr"].strip() == 'up{job="tidelog-broker"} == 0'
    assert alerts["TidelogControllerDown"]["expr"].strip() == 'up{job="tidelog-controller"} == 0'
    assert "absent(" in alerts["TidelogNoActiveController"]["expr"]


def test_every_alert_has_severity_summary_description_and_runbook() -> None:
    for rule in _alerts():
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        annotations = rule["annotations"]
        assert annotations["summary"].strip() and annotations["description"].strip(), name
        assert annotations["runbook_url"] == RUNBOOK + name.lower(), name
        assert re.fullmatch(r"\d+[smh]", str(rule.get("for", "0s"))), name


def _github_anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_runbook_anchors_exist_in_operations_md() -> None:
    anchors = {_github_anchor(m.group(1))
               for m in re.finditer(r"^#+\s+(.*)$", OPERATIONS.read_text(), re.M)}
    names = [rule["alert"] for rule in _alerts()]
    missing = [name for name in names if name.lower() not in anchors]
    assert missing == [], f"runbook_url anchors without a heading in docs/operations.md: {missing}"


def test_every_alert_has_a_unit_test_that_fires_and_one_that_stays_quiet() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for path in _unit_test_files():
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {rule["alert"] for rule in _alerts()}
    assert names - fires == set(), "alerts no unit test sees firing"
    assert names - quiet == set(), "alerts no unit test sees staying quiet"
