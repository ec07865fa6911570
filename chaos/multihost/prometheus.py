"""The multi-host run's Prometheus: Debian's server on the rendered config, and its HTTP API.

The server runs in the client namespace (the seventh host), listening on that namespace's
address only, and scrapes every node across the run's bridge.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["INSTALL_HINT", "Prometheus", "dashboard_expressions"]

INSTALL_HINT = ("Prometheus is not installed: `make deploy-demo` and `make test` install "
                "Debian's `prometheus` package (apt-get install prometheus)")
PORT = 9090
#: Grafana's variables, replaced so an expression runs as a query: intervals by a range, the
#: dashboards' own variables (used in =~ matchers) by a regex matching everything.
_INTERVALS = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "5m",
              "${__rate_interval}": "1m", "${__interval}": "1m"}
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}?")


class Prometheus:
    def __init__(self, config: Path, data: Path, address: str, log: Path) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise FileNotFoundError(INSTALL_HINT)
        self.url = f"http://{address}:{PORT}"
        self._log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--web.listen-address={address}:{PORT}", "--storage.tsdb.retention.time=1h"],
            stdout=self._log, stderr=self._log, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def api(self, path: str, **params: str) -> Any:
        """``data`` of a /api/v1 answer; RuntimeError with Prometheus' error otherwise."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
        if body.get("status") != "success":
            raise RuntimeError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def wait_up(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Prometheus did not start (exit {self.proc.poll()})")
            time.sleep(0.3)

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets", state="active")["activeTargets"])

    def firing(self, alert: str) -> list[dict[str, str]]:
        """The labels of each firing instance of ``alert``."""
        return [a["labels"] for a in self.api("alerts")["alerts"]
                if a["labels"].get("alertname") == alert and a["state"] == "firing"]

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]


def dashboard_expressions(dashboards: Path) -> Iterator[tuple[str, str]]:
    """(dashboard/panel, expression) for every query of every dashboard, runnable as is."""
    for path in sorted(dashboards.glob("*.json")):
        board = json.loads(path.read_text())
        for panel in _panels(board.get("panels", [])):
            for target in panel.get("targets", []):
                if target.get("expr"):
                    yield f"{path.name}: {panel.get('title', '?')}", _runnable(target["expr"])
        for var in board.get("templating", {}).get("list", []):
            query = var.get("query")
            text = query.get("query", "") if isinstance(query, dict) else str(query or "")
            match = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", text)
            if match and match.group(1).strip():
                yield f"{path.name}: variable {var.get('name')}", _runnable(match.group(1))


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _runnable(expr: str) -> str:
    for name, value in _INTERVALS.items():
        expr = expr.replace(name, value)
    return _VARIABLE.sub(".*", expr)
