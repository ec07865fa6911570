"""The suite's own layout: pytest imports test modules by basename (rootdir-relative, no
packages), so two test files with one name in different folders stop the whole run at
collection ("import file mismatch") — caught here, by name, before it reaches CI."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_test_module_basenames_are_unique() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if path.name != "__init__.py" and "testdata" not in path.parts:
            seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test modules sharing a basename (rename one): {clashes}"
