"""Ray itself, imported when first needed: orion works without it, and ``import orion.ray``
must say what to install instead of failing deep inside."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from orion_common.errors import OrionError

INSTALL_HINT = 'pip install "orion-gpu-share[ray]"'
NAMESPACE = "orion"
"""The Ray namespace of orion's named actors (the node agents)."""


def ray_module() -> ModuleType:
    """The ``ray`` module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise OrionError("orion.ray needs Ray, which is not installed", hint=INSTALL_HINT) from None
    return ray


def connect(address: str | None = None) -> Any:
    """The ``ray`` module, connected: to ``address`` when given (and not connected yet), else to
    the cluster this process is connected to, or the one ``ray.init()`` finds."""
    ray = ray_module()
    if not ray.is_initialized():
        ray.init(address=address)
    return ray
