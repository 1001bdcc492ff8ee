"""The import rules of docs/architecture.md hold in the code.

The table under "What each package owns and may import" is the authority: each row names
a package of ``src/partita`` and, in backticks, what it may import (a package, or one
module of it as ``package.module``). This test reads that table and every import in the
source (function-level and ``TYPE_CHECKING`` imports too: a lazy import is still a
dependency), so the document and the code cannot drift apart, and an import that runs
up the layers fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "partita"
DOC = ROOT / "docs" / "architecture.md"

# Modules at the top of the package that anything may import: they import nothing of ours.
BASE = {"errors", "logs"}


def allowed_imports() -> dict[str, set[str] | None]:
    """package -> what it may import (None: anything), from the document's table."""
    rules: dict[str, set[str] | None] = {}
    in_table = False
    for line in DOC.read_text().splitlines():
        if line.startswith("| package | owns | may import |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        if not in_table or line.startswith("| ---"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        packages = re.findall(r"`([a-z_.]+)`", cells[0])
        may = cells[2]
        targets = None if may.startswith("anything") else set(re.findall(r"`([a-z_.]+)`", may))
        for package in packages:
            rules[package] = targets
    return rules


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every ``partita.*`` import in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # ``from partita.client import connection`` imports the module client.connection
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return [(line, name) for line, name in found if name.startswith("partita.")]


def package_of(path: Path) -> str:
    return path.relative_to(SOURCE).parts[0].removesuffix(".py")


def permitted(target: str, allowed: set[str]) -> bool:
    """``target`` (a dotted path below partita) is inside something ``allowed`` names."""
    return any(target == a or target.startswith(a + ".") for a in allowed)


def violations() -> list[str]:
    rules = allowed_imports()
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        package = package_of(path)
        if package in BASE or package == "__init__":
            continue
        allowed = rules.get(package, set())
        for line, module in imports_of(path):
            target = module.removeprefix("partita.")
            top = target.split(".")[0]
            if allowed is None or top == package or top in BASE:
                continue
            if package not in rules or not permitted(target, allowed):
                found.append(f"{path.relative_to(ROOT)}:{line}: {package} -> {target}")
    return found


def test_the_document_has_a_rule_for_every_package() -> None:
    rules = allowed_imports()
    packages = {p.name for p in SOURCE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(rules), f"packages without a row: {sorted(packages - set(rules))}"
    assert set(rules) <= packages, f"rows without a package: {sorted(set(rules) - packages)}"


def test_every_import_is_one_the_document_allows() -> None:
    assert violations() == []


def test_the_allowed_imports_run_one_way() -> None:
    """The table itself has no cycle: packages can be ordered so that each imports only
    packages below it."""
    rules = allowed_imports()
    graph = {
        p: {t.split(".")[0] for t in (targets or set())} - BASE - {p}
        for p, targets in rules.items()
        if targets is not None
    }
    placed: list[str] = []
    while graph:
        ready = [p for p, deps in graph.items() if deps <= set(placed)]
        if not ready:
            pytest.fail(f"the table's imports go round: {graph}")
        placed += ready
        for p in ready:
            del graph[p]


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    """The check can fail: storage importing the server is reported."""
    rules = allowed_imports()
    storage = rules["storage"]
    assert storage is not None
    assert not permitted("server.partition", storage)
    assert permitted("protocol.record_batch", storage)
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from partita.server.partition import Partition\n")
    assert imports_of(module)[0] == (2, "partita.server.partition")
