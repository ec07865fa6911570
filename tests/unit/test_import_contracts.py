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
* The pure rooms (the metadata images and their replay, the controller's managers and logic,
  the replication core, the chaos checkers: what the simulations and golden files drive) import
  no I/O, thread or clock module: files, sockets and time are the shells' business.
* A package's ``_``-prefixed modules are its own: no other package imports them (the CLI, Spark
  and the node use what tidelog.client exports); chaos/ (a user of the cluster, like any
  client) imports nothing of broker/ or controller/.
* broker/, controller/ and chaos/ are imported as tidelog.broker, tidelog.controller and
  tidelog.chaos (setup.py maps the folders), never by their folder's name: nothing outside the
  wheel's one top-level name.

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
    module: str       # the package imported: a library's top-level name, or one of PRODUCTION
    in_function: bool
    #: The module as written (``tidelog.broker.storage``), for the rules on names.
    name: str = ""


#: Pure rooms and the modules they may not import (I/O, threads, clocks, processes).
PURE = ("tidelog/metadata/", "controller/managers/", "controller/control.py",
        "broker/replication/", "chaos/checkers/")
IMPURE_MODULES = frozenset({"os", "pathlib", "io", "socket", "shutil", "subprocess", "asyncio",
                            "threading", "time", "tempfile", "select", "signal"})
#: Where each of PRODUCTION is imported from: tidelog.broker is the broker/ folder (setup.py).
MAPPED = {"tidelog.broker": "broker", "tidelog.controller": "controller",
          "tidelog.chaos": "chaos"}


def package_of(module: str) -> str:
    """The layer a module name belongs to: "broker" for tidelog.broker.*, "tidelog" for the
    rest of tidelog, a library's top-level name otherwise."""
    for prefix, folder in MAPPED.items():
        if module == prefix or module.startswith(prefix + "."):
            return folder
    top = module.split(".")[0]
    return f"{top} (unmapped)" if top in MAPPED.values() else top


def make_import(path: str, line: int, module: str, in_function: bool) -> Import:
    return Import(path, line, package_of(module), in_function, module)


def importer_package(path: str) -> str:
    """The installed package a file is in: broker/group/x.py -> tidelog.broker.group."""
    parts = path.split("/")[:-1]
    if parts and parts[0] in MAPPED.values():
        parts = ["tidelog", *parts]
    return ".".join(parts)


def private_owner(module: str) -> str | None:
    """The package whose private module ``module`` is (tidelog.client._io -> tidelog.client),
    or None when no part of its name is private."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def imports_of(path: Path) -> list[Import]:
    rel = path.relative_to(ROOT).as_posix()
    tree = ast.parse(path.read_text(), filename=rel)
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend(make_import(rel, child.lineno, alias.name, in_function)
                             for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append(make_import(rel, child.lineno, child.module, in_function))
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
        if imp.module.endswith(" (unmapped)"):
            folder = imp.module.split()[0]
            problems.append(f"{where} imports {imp.name}: import it as tidelog.{imp.name} "
                            f"({folder}/ installs as tidelog.{folder})")
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
        if imp.path.startswith(PURE) and imp.module in IMPURE_MODULES:
            problems.append(f"{where} imports {imp.module}: {imp.path} is pure (no I/O, "
                            f"threads or clocks; the shell around it does that)")
        owner = private_owner(imp.name)
        here = importer_package(imp.path)
        if owner and owner.startswith("tidelog") and here != owner \
                and not here.startswith(owner + "."):
            problems.append(f"{where} imports {imp.name}, a private module of {owner}: "
                            f"import what {owner} exports")
        if top == "chaos" and imp.module in ("broker", "controller"):
            problems.append(f"{where}: chaos/ imports {imp.module}/ (it is a user of the "
                            f"cluster: clients, the CLI and files only)")
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
    ("broker/x.py", "from tidelog.controller.control import QuorumController\n",
     "broker/ imports"),
    ("controller/x.py", "import tidelog.broker.partition\n", "controller/ imports broker/"),
    ("tidelog/client/x.py", "from tidelog.broker.storage import Storage\n",
     "tidelog/ imports broker/"),
    ("tidelog/node.py", "from tidelog.broker.runtime import BrokerRuntime\n",
     "tidelog/ imports broker/"),
    ("tidelog/node.py", "from broker.runtime import BrokerRuntime\n",
     "import it as tidelog.broker.runtime"),
    ("chaos/x.py", "import chaos.history\n", "import it as tidelog.chaos.history"),
    ("tidelog/spark/planner.py", "import pyspark\n",
     "only tidelog/spark/datasource.py, tidelog/spark/pipeline.py may"),
    ("tidelog/client/x.py", "from pyspark.sql import SparkSession\n",
     "only tidelog/spark/datasource.py, tidelog/spark/pipeline.py may"),
    ("broker/y.py", "from tidelog.chaos import proxies\n", "production code imports chaos/"),
    ("tidelog/cli/chaos.py", "from tidelog.chaos import history\n",
     "production code imports chaos/"),
    ("tidelog/cli/group.py", "from tidelog.client._fetcher import EARLIEST\n",
     "a private module of tidelog.client"),
    ("tidelog/tls.py", "from tidelog.client._scram_auth import ScramAuth\n",
     "a private module of tidelog.client"),
    ("broker/x.py", "from tidelog.broker.group._y import z\n",
     "a private module of tidelog.broker.group"),
    ("chaos/workload/x.py", "from tidelog.broker.storage import Storage\n",
     "chaos/ imports broker/"),
    ("tidelog/metadata/bootstrap.py", "import os\n", "tidelog/metadata/bootstrap.py is pure"),
    ("broker/replication/core.py", "from time import monotonic\n", "is pure"),
])
def test_each_rule_catches_its_violation(path: str, source: str, rule: str) -> None:
    """The checker itself: each rule fires on a file that breaks it (so the contract test
    above cannot pass by checking nothing)."""
    tree = ast.parse(source)
    imports = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports += [make_import(path, node.lineno, a.name, False) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imports.append(make_import(path, node.lineno, node.module, False))
    assert any(rule in p for p in violations(imports)), violations(imports)


def test_a_package_imports_its_own_private_modules() -> None:
    own = [make_import("tidelog/client/producer.py", 1, "tidelog.client._sender", False),
           make_import("tidelog/client/x/y.py", 1, "tidelog.client._io", False),
           make_import("broker/group/x.py", 1, "tidelog.broker.group._y", False)]
    assert violations(own) == []


def test_a_lazy_server_import_in_the_node_runner_is_allowed() -> None:
    lazy = make_import("tidelog/node.py", 1, "tidelog.broker.runtime", in_function=True)
    assert violations([lazy]) == []
