"""The package layers of docs/architecture.md: lower packages never import upper ones."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
UPPER_PACKAGES = (
    "workloads",
    "profiler",
    "postprocess",
    "scheduler_core",
    "colocation",
    "reporting",
    "orion_cli",
)
ORION_COMMON_MODULES = sorted(
    path.stem for path in (REPO / "orion_common").glob("*.py") if path.stem != "__init__"
)


def _imported_packages(path: Path) -> set[str]:
    """Top-level package of every import in ``path``, wherever it sits (lazy ones included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", sorted((REPO / "orion_common").glob("*.py")), ids=str)
def test_orion_common_sources_import_no_upper_package(path: Path) -> None:
    assert not _imported_packages(path) & set(UPPER_PACKAGES)


def test_importing_every_orion_common_module_loads_no_upper_package() -> None:
    code = (
        "import importlib, json, sys\n"
        f"for name in {ORION_COMMON_MODULES!r}:\n"
        "    importlib.import_module('orion_common.' + name)\n"
        f"print(json.dumps(sorted(p for p in {UPPER_PACKAGES!r} if p in sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert ORION_COMMON_MODULES  # the glob found the package
    assert json.loads(result.stdout) == []


def test_import_circles_are_gone() -> None:
    """The arrivals models and the trace reader sit in colocation.arrivals, below the jobs schema;
    the workload spec imports the registry, which never imports the spec at run time."""
    arrivals = REPO / "colocation" / "arrivals.py"
    for upper in ("colocation.config", "colocation.jobs_schema"):
        assert not _imports_module(arrivals, upper)
    assert not _imports_module(REPO / "workloads" / "registry.py", "workloads.spec", runtime=True)
    for path, lower in (
        (REPO / "workloads" / "spec.py", "workloads.registry"),
        (REPO / "colocation" / "jobs_schema.py", "colocation.arrivals"),
    ):
        assert _imports_module(path, lower)
        assert lower not in _function_imports(path), f"{path.name} imports {lower} lazily"


def _function_imports(path: Path) -> set[str]:
    """Modules imported inside a function body of ``path``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module:
                    found.add(inner.module)
                elif isinstance(inner, ast.Import):
                    found.update(alias.name for alias in inner.names)
    return found


def _imports_module(path: Path, module: str, *, runtime: bool = False) -> bool:
    """Whether ``path`` imports ``module`` (with ``runtime``: outside ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    if runtime:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skipped.update(id(child) for child in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module == module:
            return True
        if isinstance(node, ast.Import) and any(a.name == module for a in node.names):
            return True
    return False
