"""docs/operations.md's "## Metrics" tables are what a node exports: every family is in a table
with its type and labels, and the page names no ``tidelog_`` metric that does not exist.

How: the names from tests/deploy/exported_metrics.py (built from the code's metric sources) and
the page's table rows (`| \\`name\\` | type | labels | meaning |`) and ``tidelog_...`` words.
"""

from __future__ import annotations

import re
from pathlib import Path

from deploy.exported_metrics import exported_metric_families, exported_metric_names

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
ROW = re.compile(r"^\| `([a-z0-9_]+)` \| (\w+) \| ([^|]*) \|", re.MULTILINE)
#: A metric-like word: tidelog_... not inside a longer identifier, nor a recording rule's name.
WORD = re.compile(r"(?<![\w:])tidelog_[a-z0-9_]*[a-z0-9](?![\w:])")


def metrics_section() -> str:
    text = DOC.read_text()
    start = text.index("\n## Metrics\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def documented_rows() -> dict[str, tuple[str, frozenset[str]]]:
    rows: dict[str, tuple[str, frozenset[str]]] = {}
    for name, kind, labels in ROW.findall(metrics_section()):
        assert name not in rows, f"{name} has two rows"
        rows[name] = (kind, frozenset(x.strip() for x in labels.split(",") if x.strip() != "—"))
    return rows


def test_every_exported_family_has_a_row_with_its_type_and_labels() -> None:
    rows = documented_rows()
    exported = exported_metric_families()
    missing = sorted(set(exported) - set(rows))
    assert not missing, f"families exported but not in docs/operations.md's tables: {missing}"
    wrong = {name: (rows[name], found) for name, found in exported.items() if rows[name] != found}
    assert not wrong, f"documented (type, labels) differ from the exported ones: {wrong}"


def test_the_page_names_no_metric_that_does_not_exist() -> None:
    names = exported_metric_names()
    unknown = sorted(set(WORD.findall(DOC.read_text())) - set(names))
    assert not unknown, f"docs/operations.md names metrics no node exports: {unknown}"
    extra = sorted(set(documented_rows()) - set(exported_metric_families()))
    assert not extra, f"table rows for families no node exports: {extra}"
