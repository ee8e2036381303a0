"""Where the native pieces live, and whether they load.

The preload library (``liborion_preload.so``) and the controller module (``_native``) are built
by ``pip install .`` next to this file. Everything that needs them asks here, so a broken
install gives one clear error instead of an ImportError deep inside a run.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from types import ModuleType

from orion_common.errors import OrionError
from orion_common.prerequisites import COLOCATE, Check

PRELOAD_LIBRARY_NAME = "liborion_preload.so"
_REINSTALL_HINT = "reinstall orion with 'pip install .' (it builds the library with CMake)"


def preload_library_path() -> Path:
    """The LD_PRELOAD library of this installation."""
    override = os.environ.get("ORION_PRELOAD_LIBRARY")
    path = Path(override) if override else Path(__file__).resolve().parent / PRELOAD_LIBRARY_NAME
    if not path.is_file():
        raise OrionError(f"orion's preload library is missing: {path}", hint=_REINSTALL_HINT)
    return path


def native_module() -> ModuleType:
    """The compiled controller module (``scheduler_core._native``)."""
    try:
        from scheduler_core import _native
    except ImportError as error:
        raise OrionError(
            f"orion's native controller module does not load: {error}", hint=_REINSTALL_HINT
        ) from None
    return _native


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
