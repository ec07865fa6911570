"""The rendered cluster on six hosts (network namespaces), end to end: ``python -m
chaos.multihost``, as ``make deploy-demo`` runs it (chaos/multihost/ says what it does).

Skips, saying why, where the machine cannot make namespaces (not root, no ``ip``); fails where
Prometheus is missing, since ``make test`` installs Debian's package.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tidelog.chaos.multihost.hosts import HOSTS
from tidelog.chaos.multihost.run import DOWN_HOST
from tidelog.chaos.netns.shell import unavailable

pytestmark = pytest.mark.integration


@pytest.mark.timeout(480)
def test_a_rendered_cluster_on_six_hosts_loses_nothing_and_alerts(tmp_path: Path) -> None:
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"network namespaces: {reason}")
    done = subprocess.run([sys.executable, "-m", "tidelog.chaos.multihost", "--workdir",
                           str(tmp_path)], capture_output=True, text=True, timeout=450,
                          check=False)
    print(done.stdout[-6000:], done.stderr[-3000:])
    last = (done.stdout.strip().splitlines() or [""])[-1]
    assert last.startswith("{"), f"the run ended without its report: {done.stderr[-3000:]}"
    report = json.loads(last)
    assert report["failures"] == [] and done.returncode == 0
    assert report["ok"] is True
    # Nothing acknowledged was lost, and the fault really cut the broker off.
    assert report["plaintext_refused"] is True  # every listener is TLS
    assert report["lost"] == 0 and report["read"] >= report["acknowledged"] > 2_000
    assert report["while_down"]["partitions_it_leads"] == 0
    assert report["while_down"]["isrs_it_is_in"] == 0
    # Prometheus: every node scraped, the alert for the downed host fired, every rule and
    # every dashboard expression ran without error.
    assert report["targets_up"] == len(HOSTS)
    assert report["alert_fired_after_s"] > 0
    assert report["rules"] > 10 and report["dashboard_expressions"] > 20
    assert all(code == 0 for code in report["exit_codes"].values())
    assert f"TidelogBrokerDown fired for ['{DOWN_HOST}']" in done.stdout
