"""Import contracts: the layout rules of DESIGN.md §2, checked on every `make test`.

* Each third-party library that shapes the system is imported in one place only: pysyncobj in
  the controller's Raft adapter (the package controller/raft/), rocksdict in broker storage's
  one module (broker/storage/rocks.py), pyspark in the data source's one module
  (tidelog/spark/datasource.py) and the pipeline example that uses it: the rest of
  tidelog/spark (options, offsets, the planner) is pure and never imports it.
* broker/ never imports controller/, and controller/ never imports broker/: they talk over gRPC
  only.
* tidelog/ (what clients import) imports neither at module level; only the node runner and the
  CLI's server command may import them lazily, inside a function.
* Nothing in production code imports chaos/ (fault injection is for tests and users' runs),
  except the CLI's ``tidelog chaos`` commands (tidelog/cli/chaos.py), lazily, inside a function.

How: every production module is parsed with ``ast`` (nothing is imported or run); each import is
classified as module level or inside a function. A violation names the file, the line and the
rule, so the fix is obvious. Tests, benchmarks and the simulator are outside the contracts (the
storage bench compares against bare rocksdict on purpose).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ("tidelog", "broker", "controller", "chaos")
#: library -> the only paths (a file, or a package directory) that may import it.
ONE_MODULE_PER_LIBRARY = {
    "pysyncobj": ("controller/raft/",),
    "rocksdict": ("broker/storage/rocks.py",),
    # The pipeline example (make pipeline) is a Spark application, not part of the source.
    "pyspark": ("tidelog/spark/datasource.py", "tidelog/spark/pipeline.py"),
    "re2": ("broker/group/topic_regex.py",),
    "cryptography": ("tidelog/certs.py",),
}
#: tidelog/ modules that may import broker/controller, and then only inside a function.
LAZY_SERVER_IMPORTS = ("tidelog/node.py", "tidelog/cli")
#: The one production module that may import chaos/, and then only inside a function.
LAZY_CHAOS_IMPORTS = ("tidelog/cli/chaos.py",)


@dataclass(frozen=True)
class Import:
    path: str         # relative to the repository root
    line: int
    module: str       # the top-level package imported
    in_function: bool


def imports_of(path: Path) -> list[Import]:
    rel = path.relative_to(ROOT).as_posix()
    tree = ast.parse(path.read_text(), filename=rel)
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend(Import(rel, child.lineno, alias.name.split(".")[0], in_function)
                             for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append(Import(rel, child.lineno, child.module.split(".")[0], in_function))
            visit(child, nested)

    visit(tree, False)
    return found


def production_imports() -> list[Import]:
    result: list[Import] = []
    for package in PRODUCTION:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "/v1/" in path.as_posix():  # generated protobuf code
                continue
            result.extend(imports_of(path))
    return result


def violations(imports: list[Import]) -> list[str]:
    problems: list[str] = []
    for imp in imports:
        where = f"{imp.path}:{imp.line}"
        allowed = ONE_MODULE_PER_LIBRARY.get(imp.module)
        if allowed is not None and not imp.path.startswith(allowed):
            problems.append(f"{where} imports {imp.module}: only {', '.join(allowed)} may")
        top = imp.path.split("/")[0]
        if top == "broker" and imp.module == "controller":
            problems.append(f"{where}: broker/ imports controller/ (they talk over gRPC only)")
        if top == "controller" and imp.module == "broker":
            problems.append(f"{where}: controller/ imports broker/ (they talk over gRPC only)")
        if top == "tidelog" and imp.module in ("broker", "controller"):
            lazy_ok = imp.path.startswith(LAZY_SERVER_IMPORTS) and imp.in_function
            if not lazy_ok:
                problems.append(f"{where}: tidelog/ imports {imp.module}/ (clients import "
                                f"tidelog; only the node runner may, inside a function)")
        if imp.module == "chaos" and top != "chaos" and not (
                imp.path.startswith(LAZY_CHAOS_IMPORTS) and imp.in_function):
            problems.append(f"{where}: production code imports chaos/")
    return problems


def test_the_production_code_keeps_the_import_contracts() -> None:
    imports = production_imports()
    assert len(imports) > 200, "the scan found too few imports: is ROOT right?"
    problems = violations(imports)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("path", "source", "rule"), [
    ("broker/new_thing.py", "import rocksdict\n", "only broker/storage/rocks.py may"),
    ("controller/runtime2.py", "from pysyncobj import SyncObj\n", "only controller/raft/ may"),
    ("broker/x.py", "from controller.control import QuorumController\n", "broker/ imports"),
    ("controller/x.py", "import broker.partition\n", "controller/ imports broker/"),
    ("tidelog/client/x.py", "from broker.storage import Storage\n", "tidelog/ imports broker/"),
    ("tidelog/node.py", "from broker.runtime import BrokerRuntime\n", "tidelog/ imports broker/"),
    ("tidelog/spark/planner.py", "import pyspark\n",
     "only tidelog/spark/datasource.py, tidelog/spark/pipeline.py may"),
    ("tidelog/client/x.py", "from pyspark.sql import SparkSession\n",
     "only tidelog/spark/datasource.py, tidelog/spark/pipeline.py may"),
    ("broker/y.py", "from chaos import proxies\n", "production code imports chaos/"),
    ("tidelog/cli/chaos.py", "from chaos import history\n", "production code imports chaos/"),
])
def test_each_rule_catches_its_violation(path: str, source: str, rule: str) -> None:
    """The checker itself: each rule fires on a file that breaks it (so the contract test
    above cannot pass by checking nothing)."""
    tree = ast.parse(source)
    imports = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports += [Import(path, node.lineno, a.name.split(".")[0], False)
                        for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imports.append(Import(path, node.lineno, node.module.split(".")[0], False))
    assert any(rule in p for p in violations(imports)), violations(imports)


def test_a_lazy_server_import_in_the_node_runner_is_allowed() -> None:
    lazy = Import("tidelog/node.py", 1, "broker", in_function=True)
    assert violations([lazy]) == []
