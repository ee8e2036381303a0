"""Itanium C++ demangling through libstdc++'s own ``__cxa_demangle``.

ncu run with ``--print-kernel-base mangled`` prints stable mangled names; the un-instrumented
torch.profiler pass reports names demangled by the same libstdc++ routine. Demangling ncu's
mangled names here with that routine makes both spellings identical, which the kernel matching
in :mod:`postprocess.build` relies on (ncu's own demangler writes ``<unnamed>`` and
``[lambda() (instance 1)]`` where libstdc++ writes ``(anonymous namespace)`` and
``{lambda()#1}``). No third-party package is needed: libstdc++ is on every machine with a CUDA
toolchain. Without it names pass through unchanged, which only weakens matching.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


@functools.cache
def _cxa_demangle() -> tuple[Any, Any] | None:
    """(``__cxa_demangle``, ``free``) as typed ctypes functions, or None without libstdc++."""
    try:
        libstdcxx = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        demangle_fn = libstdcxx.__cxa_demangle
        free_fn = libc.free
    except (OSError, AttributeError):
        return None
    # Return a raw pointer (not c_char_p) so the malloc'd buffer can be freed.
    demangle_fn.restype = ctypes.c_void_p
    demangle_fn.argtypes = [
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_int),
    ]
    free_fn.restype = None
    free_fn.argtypes = [ctypes.c_void_p]
    return demangle_fn, free_fn


def demangler_available() -> bool:
    """True when libstdc++'s demangler could be loaded."""
    return _cxa_demangle() is not None


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """The demangled form of ``name``, or ``name`` itself when it is not a valid mangled name.

    Cached because a profile repeats the same few dozen kernel names hundreds of times.
    """
    if not name.startswith("_Z"):
        return name
    functions = _cxa_demangle()
    if functions is None:
        return name
    demangle_fn, free_fn = functions
    status = ctypes.c_int(0)
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return name
    pointer = demangle_fn(encoded, None, None, ctypes.byref(status))
    if not pointer:
        return name
    try:
        text = ctypes.string_at(pointer).decode("utf-8", errors="replace")
    finally:
        free_fn(pointer)
    return text if status.value == 0 else name
