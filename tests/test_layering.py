"""The package layers of docs/architecture.md: a package imports only packages on lower layers."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ARCHITECTURE = REPO / "docs" / "architecture.md"
LAYERS_PREFIX = "layers: "
UI_PACKAGES = ("typer", "rich")
UI_LAYER = "orion_cli"


def read_layers(text: str) -> list[list[str]]:
    """The layer order written once in docs/architecture.md: the line ``layers: a < b, c < d``,
    lowest first, peers on one layer separated by commas."""
    lines = [line.strip() for line in text.splitlines() if line.startswith(LAYERS_PREFIX)]
    assert len(lines) == 1, f"docs/architecture.md must hold one line starting {LAYERS_PREFIX!r}"
    layers = [
        [name.strip() for name in layer.split(",")]
        for layer in lines[0].removeprefix(LAYERS_PREFIX).split("<")
    ]
    assert all(name.isidentifier() for layer in layers for name in layer), layers
    return layers


LAYERS = read_layers(ARCHITECTURE.read_text(encoding="utf-8"))
RANK = {name: rank for rank, layer in enumerate(LAYERS) for name in layer}
UI_RANK = RANK[UI_LAYER]


def package_sources(package: str) -> list[Path]:
    """The package's Python files; none for a package that does not exist (yet)."""
    return sorted((REPO / package).rglob("*.py"))


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level name) of every absolute import in ``path``, lazy ones included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def layer_violations(repo: Path = REPO) -> list[str]:
    """Every import of a package on the importer's own layer or above, and every typer or rich
    import below ``orion_cli``, as ``path:line: message``."""
    problems = []
    for package, rank in RANK.items():
        for path in sorted((repo / package).rglob("*.py")):
            where = path.relative_to(repo)
            for line, name in _imports(path):
                if name in RANK and name != package and RANK[name] >= rank:
                    problems.append(
                        f"{where}:{line}: {package} (layer {rank}) imports {name} "
                        f"(layer {RANK[name]}): only lower layers may be imported"
                    )
                if name in UI_PACKAGES and rank < UI_RANK:
                    problems.append(
                        f"{where}:{line}: {package} imports {name}: only {UI_LAYER} talks to "
                        "the terminal"
                    )
    return problems


def test_every_package_imports_only_lower_layers_and_no_ui_below_the_cli() -> None:
    problems = layer_violations()
    assert not problems, "imports against docs/architecture.md's layers:\n" + "\n".join(problems)


def test_every_top_level_package_has_a_layer() -> None:
    packages = {path.parent.name for path in REPO.glob("*/__init__.py")}
    assert packages - set(RANK) == set(), "add the package to the layers line of architecture.md"
    assert "benchmarks" in RANK and RANK["benchmarks"] == UI_RANK  # top, beside the CLI


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    """The check itself: a planted import of an upper package, and rich in a library."""
    (tmp_path / "scheduler_core").mkdir()
    (tmp_path / "scheduler_core" / "planted.py").write_text(
        "def f():\n    from colocation import config\n    import rich\n"
    )
    problems = layer_violations(tmp_path)
    assert len(problems) == 2
    assert f"scheduler_core (layer {RANK['scheduler_core']}) imports colocation" in problems[0]
    assert "scheduler_core imports rich" in problems[1]


@pytest.mark.parametrize("package", [name for layer in LAYERS[:-1] for name in layer])
def test_importing_a_library_package_loads_no_package_above_it(package: str) -> None:
    modules = [
        ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for path in package_sources(package)
    ]
    upper = [name for name, rank in RANK.items() if rank >= RANK[package] and name != package]
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(p for p in {[*upper, *UI_PACKAGES]!r} if p in sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
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


EVERYTHING_BELOW = "everything above"


def read_imports_column(text: str) -> dict[str, set[str]]:
    """The orion packages each row of docs/architecture.md's package table says it imports.

    A cell lists names with notes in parentheses, e.g. ``orion_common, postprocess (profile
    reader), pandas``; the notes may hold commas, so they go first, and only the names of orion
    packages are kept (third-party ones are not checked). ``everything above`` stands for every
    package on a lower layer."""
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        package = cells[0].strip("`").rstrip("/")
        if package not in RANK:
            continue
        if cells[2] == EVERYTHING_BELOW:
            found[package] = {name for name, rank in RANK.items() if rank < RANK[package]}
            continue
        names = re.sub(r"\([^)]*\)", "", cells[2]).replace(";", ",").split(",")
        found[package] = {name.split()[0] for name in names if name.split()} & set(RANK)
    return found


def imported_packages(package: str, repo: Path = REPO) -> set[str]:
    """The other orion packages that ``package`` imports anywhere, lazily or not."""
    return {
        name
        for path in sorted((repo / package).rglob("*.py"))
        for _, name in _imports(path)
        if name in RANK and name != package
    }


def imports_column_drift(text: str, repo: Path = REPO) -> list[str]:
    """Each package whose imports column in the table differs from what its code imports."""
    documented = read_imports_column(text)
    problems = [f"{name}: no row in the package table" for name in RANK if name not in documented]
    for package, written in sorted(documented.items()):
        actual = imported_packages(package, repo)
        if written != actual:
            problems.append(
                f"{package}: imports but the table leaves out {sorted(actual - written)}; "
                f"the table lists but it does not import {sorted(written - actual)}"
            )
    return problems


def test_the_package_tables_imports_column_matches_the_code() -> None:
    """The imports column is read by people deciding where code goes; it drifted once (issue 39)
    and nothing noticed, so it is now checked against the imports themselves."""
    problems = imports_column_drift(ARCHITECTURE.read_text(encoding="utf-8"))
    assert not problems, "docs/architecture.md's imports column:\n" + "\n".join(problems)


def test_a_drifted_imports_column_is_caught() -> None:
    """The check itself: a row that leaves out an import and names one that is not there."""
    text = ARCHITECTURE.read_text(encoding="utf-8").replace(
        "| orion_common, scheduler_core (profile sources", "| orion_common, workloads (plots"
    )
    problems = [line for line in imports_column_drift(text) if line.startswith("reporting:")]
    assert problems == [
        "reporting: imports but the table leaves out ['scheduler_core']; "
        "the table lists but it does not import ['workloads']"
    ]


def test_the_first_diagram_names_every_package() -> None:
    """The data-flow diagram is the first thing a reader sees; a package missing there (as
    orion_daemon was) is a package a newcomer does not know exists."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    diagram = text.split("```")[1]
    missing = [name for name in RANK if not re.search(rf"\b{name}\b", diagram)]
    assert not missing, f"add to the first diagram of docs/architecture.md: {missing}"


CONSOLE_CALLS = ("print", "traceback.print_exc", "sys.stdout.write", "sys.stderr.write")
NOT_LIBRARIES = (UI_LAYER, "benchmarks")
CONSOLE_ALLOWED = {
    ("orion_daemon/server.py", "traceback.print_exc"): "a bug in answering one request: its "
    "traceback in the daemon's log, the request refused and the daemon kept",
    ("colocation/client.py", "traceback.print_exc"): "a bug in a client process's main: its "
    "traceback on the stderr the runner keeps, beside the error event",
}
"""The console writes a library may make, each with why: both are tracebacks of a bug, written
where a traceback that escaped would have gone, by the top of a process that must not die of it."""


def console_writes(repo: Path = REPO) -> list[tuple[str, int, str]]:
    """(path, line, call) of every ``print`` and direct write to stdout or stderr in the library
    packages (all but the CLI and the benchmarks, whose job is the terminal)."""
    found = []
    for package in RANK:
        if package in NOT_LIBRARIES:
            continue
        for path in sorted((repo / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and ast.unparse(node.func) in CONSOLE_CALLS:
                    where = path.relative_to(repo).as_posix()
                    found.append((where, node.lineno, ast.unparse(node.func)))
    return found


def test_libraries_never_print() -> None:
    """Library code logs or returns what it has to say; only an entry point chooses where lines
    go (docs/architecture.md), so importing a package never writes into its caller's terminal."""
    problems = [
        f"{path}:{line}: {call}(...) in library code: log it (orion_common.process_log) or "
        "return it for the CLI to show"
        for path, line, call in console_writes()
        if (path, call) not in CONSOLE_ALLOWED
    ]
    assert not problems, "\n".join(problems)


def test_a_print_in_a_library_is_caught(tmp_path: Path) -> None:
    """The check itself: a planted print in a library is found, one in the CLI is not."""
    for package in ("reporting", UI_LAYER):
        (tmp_path / package).mkdir()
        (tmp_path / package / "planted.py").write_text("def f():\n    print('hello')\n")
    assert console_writes(tmp_path) == [("reporting/planted.py", 2, "print")]


def module_imports(package: str, repo: Path = REPO) -> dict[str, set[str]]:
    """Each module of ``package`` and the modules of the same package it imports at run time,
    lazy imports inside functions included and ``if TYPE_CHECKING`` blocks left out (they never
    run). ``from workloads import _runtime`` is an import of ``workloads._runtime``."""
    paths = {
        ".".join(path.relative_to(repo).with_suffix("").parts).removesuffix(".__init__"): path
        for path in sorted((repo / package).rglob("*.py"))
    }
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        skipped = {
            id(child)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for child in ast.walk(node)
        }
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                submodules = {f"{node.module}.{alias.name}" for alias in node.names}
                targets.update(submodules & paths.keys() or {node.module})
        graph[name] = {target for target in targets if target in paths and target != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of two or more modules that import one another, through any chain (Tarjan's
    strongly connected components), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for target in sorted(graph[name]):
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            group = []
            while (member := stack.pop()) != name:
                group.append(member)
            group.append(name)
            if len(group) > 1:
                groups.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return groups


@pytest.mark.parametrize("package", [name for layer in LAYERS for name in layer])
def test_no_package_has_an_import_cycle(package: str) -> None:
    """A circle of lazy imports works only while every import in it stays lazy and in order.
    ``workloads`` had one through ``build_workload`` (issue 39), which now lives in
    ``workloads.build``, above the spec and the registry; ``scheduler_core`` had one through
    ``library.native_module``'s ``from scheduler_core import _native`` (the package's
    ``__init__``, which imports ``library``), now an import of the compiled submodule itself."""
    assert import_cycles(module_imports(package)) == []


def test_an_import_cycle_is_found(tmp_path: Path) -> None:
    """The check itself: a lazy import closing a circle counts, a TYPE_CHECKING one does not."""
    (tmp_path / "workloads").mkdir()
    for name, code in {
        "a": "from workloads import b\n",
        "b": "def f():\n    from workloads.c import g\n",
        "c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import workloads.d\n"
        "import workloads.a\n",
        "d": "import workloads.a\n",
    }.items():
        (tmp_path / "workloads" / f"{name}.py").write_text(code)
    graph = module_imports("workloads", tmp_path)
    assert graph["workloads.c"] == {"workloads.a"}
    assert import_cycles(graph) == [["workloads.a", "workloads.b", "workloads.c"]]


def test_the_wheel_ships_every_package_but_the_benchmarks() -> None:
    """pyproject.toml lists the wheel's packages by hand: a package with a layer but left out of
    that list installs broken (its importers fail only after `pip install`)."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = set(config["tool"]["scikit-build"]["wheel"]["packages"])
    assert shipped == set(RANK) - {"benchmarks"}
