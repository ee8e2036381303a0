"""The native library is found whichever copy of orion's Python packages is imported.

From a checkout's root, Python (``python -m pytest``, ``python examples/ray/...``, and Ray for its
workers) imports the checkout's ``scheduler_core/``, which holds no built library; the one
``pip install .`` built is in the installed copy, found through the distribution's file list."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from orion_common.errors import OrionError
from scheduler_core import library

ROOT = Path(__file__).resolve().parents[1]


class _Distribution:
    """A stand-in installed distribution whose files live under ``root``."""

    def __init__(self, root: Path, files: list[str]) -> None:
        self.root = root
        self.files = [Path(name) for name in files]

    def locate_file(self, path: Path) -> Path:
        return self.root / path


def _checkout_without_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``scheduler_core`` imported from a folder with no built library in it."""
    source = tmp_path / "checkout" / "scheduler_core"
    source.mkdir(parents=True)
    monkeypatch.setattr(library, "__file__", str(source / "library.py"))
    monkeypatch.delenv("ORION_PRELOAD_LIBRARY", raising=False)


def test_a_checkout_without_a_built_library_finds_the_installed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _checkout_without_library(tmp_path, monkeypatch)
    installed = tmp_path / "site-packages"
    (installed / "scheduler_core").mkdir(parents=True)
    (installed / "scheduler_core" / library.PRELOAD_LIBRARY_NAME).write_bytes(b"\x7fELF")
    files = ["scheduler_core/__init__.py", f"scheduler_core/{library.PRELOAD_LIBRARY_NAME}"]
    monkeypatch.setattr(metadata, "distribution", lambda name: _Distribution(installed, files))
    found = library.preload_library_path()
    assert found == (installed / "scheduler_core" / library.PRELOAD_LIBRARY_NAME).resolve()


def test_without_any_built_library_the_error_names_the_imported_copys_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _checkout_without_library(tmp_path, monkeypatch)

    def not_installed(name: str) -> None:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", not_installed)
    with pytest.raises(OrionError, match=r"orion's preload library is missing: .*checkout"):
        library.preload_library_path()


def test_the_environment_variable_still_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = tmp_path / "mine.so"
    chosen.write_bytes(b"\x7fELF")
    monkeypatch.setenv("ORION_PRELOAD_LIBRARY", str(chosen))
    assert library.preload_library_path() == chosen


def test_python_run_from_the_repository_root_finds_a_library_that_loads() -> None:
    """What `python -m pytest` and `python examples/ray/half_a_gpu_each.py` do: the checkout's
    packages first on the path. Needs orion installed (`pip install .`), as the README says."""
    try:
        metadata.distribution(library.DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pytest.skip("orion is not installed in this environment")
    code = (
        "import scheduler_core as s; print(s.__file__); print(s.check_preload_library()); "
        "print(s.native_module().__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    imported, (loads_line), module = result.stdout.splitlines()
    assert Path(imported).parent.parent == ROOT  # the checkout's copy was imported
    assert loads_line.startswith("(True, "), loads_line
    assert module == "scheduler_core._native"
