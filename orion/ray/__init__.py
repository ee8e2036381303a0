"""orion on a Ray cluster: actors and tasks with fractional GPUs that are really isolated.

Ray's ``num_gpus=0.5`` is a count, not a boundary: two actors on one GPU share its memory and
time with no isolation. With orion each node's GPUs have an orion daemon, and an actor declared
with :func:`runtime_env` (or :func:`options`) joins the daemon of the GPU Ray gave it, as the
high-priority (HP) client or a best-effort (BE) one, with a memory limit::

    import ray, orion.ray

    orion.ray.start_daemons()  # once: an agent per node starts each GPU's daemon
    Server = ray.remote(**orion.ray.options("hp", num_gpus=0.5))(InferenceServer)
    Trainer = ray.remote(**orion.ray.options("be", num_gpus=0.5))(TrainingLoop)

:func:`run_plan` carries out an `orion plan` on the cluster and records it as `orion run-plan`
does. Ray is imported only when used (``pip install "orion-gpu-share[ray]"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orion.ray.agent import NodeGpu, NodeInventory, start_daemons, stop_daemons
from orion.ray.env import options, runtime_env

if TYPE_CHECKING:
    from orion.ray.plan import run_plan

__all__ = [
    "NodeGpu",
    "NodeInventory",
    "options",
    "run_plan",
    "runtime_env",
    "start_daemons",
    "stop_daemons",
]


def __getattr__(name: str) -> Any:
    """``run_plan`` on first use (PEP 562): its module reads jobs files and runs, which loads
    pandas through ``colocation``, and an actor's ``import orion.ray`` (or ``orion doctor``'s
    Ray rows, :mod:`orion.ray.checks`) should not pay for that."""
    if name == "run_plan":
        from orion.ray.plan import run_plan

        return run_plan
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
