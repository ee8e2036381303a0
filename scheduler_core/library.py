"""Where the native pieces live, and whether they load.

The preload library (``liborion_preload.so``) and the controller module (``_native``) are built
by ``pip install .`` next to this file. Everything that needs them asks here, so a broken
install gives one clear error instead of an ImportError deep inside a run.

Which copy: ``$ORION_PRELOAD_LIBRARY`` when set (the library only), else the one next to the
imported package, else the installed distribution's. The last is for a source checkout: Python
puts the current folder first on its path (``python -m pytest``, ``python script.py``, and Ray
puts a driver's folder first on its workers' path), so from a checkout's root its
``scheduler_core/`` is imported, which holds no built library, while ``pip install .`` built one
into the installed copy. The installed copy is found through the distribution's own file list
(:mod:`importlib.metadata`), whichever copy of the Python packages is imported.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType

from orion_common.errors import OrionError
from orion_common.prerequisites import COLOCATE, Check

PRELOAD_LIBRARY_NAME = "liborion_preload.so"
NATIVE_MODULE = "scheduler_core._native"
DISTRIBUTION = "orion-gpu-share"
"""The distribution ``pip install .`` installs (``pyproject.toml``'s ``project.name``)."""
_REINSTALL_HINT = "reinstall orion with 'pip install .' (it builds the library with CMake)"


def _installed_files(prefix: str) -> list[Path]:
    """The installed distribution's files whose path starts with ``scheduler_core/<prefix>``
    (none when orion is not installed, or installed without a file list)."""
    try:
        distribution = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return []
    files = distribution.files or []
    wanted = f"scheduler_core/{prefix}"
    found = [Path(str(distribution.locate_file(f))) for f in files if str(f).startswith(wanted)]
    return [path for path in found if path.is_file()]


def preload_library_path() -> Path:
    """The LD_PRELOAD library of this installation (see the module's docstring for which)."""
    override = os.environ.get("ORION_PRELOAD_LIBRARY")
    if override:
        path = Path(override)
    else:
        path = Path(__file__).resolve().parent / PRELOAD_LIBRARY_NAME
        if not path.is_file():
            installed = _installed_files(PRELOAD_LIBRARY_NAME)
            path = installed[0].resolve() if installed else path
    if not path.is_file():
        raise OrionError(f"orion's preload library is missing: {path}", hint=_REINSTALL_HINT)
    return path


def native_module() -> ModuleType:
    """The compiled controller module (``scheduler_core._native``): the imported package's, else
    the installed distribution's.

    Imported by its own module name, not as a name of the package (``from scheduler_core
    import _native``): this module needs the compiled submodule, never what the package's
    ``__init__`` re-exports from this module, and the package's modules import one another in
    one direction only (``tests/test_layering.py``)."""
    try:
        import scheduler_core._native as _native
    except ImportError as error:
        module = _installed_native_module()
        if module is None:
            raise OrionError(
                f"orion's native controller module does not load: {error}", hint=_REINSTALL_HINT
            ) from None
        return module
    return _native


def _installed_native_module() -> ModuleType | None:
    """The installed distribution's ``_native``, loaded under its own name (so that pickles and
    ``scheduler_core._native`` imports after this one find it); None when there is none."""
    for path in _installed_files("_native"):
        if path.suffix != ".so":
            continue
        spec = importlib.util.spec_from_file_location(NATIVE_MODULE, path)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except ImportError:
            continue  # built for another Python: try the next, else the caller's error
        sys.modules[NATIVE_MODULE] = module
        return module
    return None


def check_preload_library() -> tuple[bool, str]:
    """(loads?, detail): dlopen the library here the way the loader will in a client.

    Loading it without ``ORION_RUN`` set is harmless: it stays inactive and interposes nothing
    (ctypes loads it with RTLD_LOCAL).
    """
    try:
        path = preload_library_path()
    except OrionError as error:
        return False, error.message
    try:
        ctypes.CDLL(str(path), mode=os.RTLD_LOCAL | os.RTLD_NOW)
    except OSError as error:
        return False, f"{path} does not load: {error}"
    return True, str(path)


def native_checks() -> list[Check]:
    """orion's own native pieces, as prerequisite checks (``orion doctor``, ``orion colocate``).

    Here rather than in :mod:`orion_common.prerequisites`, which sits below this package.
    """
    loads, detail = check_preload_library()
    checks = [
        Check(
            "preload library",
            loads,
            detail,
            (COLOCATE,),
            None if loads else "reinstall orion with 'pip install .'",
            None if loads else detail,
        )
    ]
    try:
        native_module()
        checks.append(Check("controller module", True, "scheduler_core._native", (COLOCATE,)))
    except OrionError as error:
        checks.append(
            Check("controller module", False, error.message, (COLOCATE,), problem=error.message)
        )
    return checks


def with_preload(environment: dict[str, str], library: Path | None = None) -> dict[str, str]:
    """``environment`` with the preload library first in LD_PRELOAD (others kept after it)."""
    path = str(library or preload_library_path())
    existing = [item for item in environment.get("LD_PRELOAD", "").split(":") if item]
    environment = dict(environment)
    environment["LD_PRELOAD"] = ":".join([path, *[item for item in existing if item != path]])
    return environment
