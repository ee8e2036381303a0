"""Loads a script of ``benchmarks/`` as a module, so its pure parts are tested on CPU: the
scripts are run as files, not installed as a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as the module ``orion_<name>`` (registered, so that its
    dataclasses and pickling find it)."""
    spec = importlib.util.spec_from_file_location(f"orion_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
