"""The ``runtime_env`` that puts a Ray actor or task under orion, on whatever GPU Ray gives it.

Ray's fractional GPUs (``num_gpus=0.5``) are bookkeeping only: two actors on one GPU share its
memory and time with no isolation at all. Under orion each joins the daemon of the GPU Ray gave
it, as HP or BE, with a memory limit, so the HP one keeps its latency and neither can take the
other's memory. Nothing wraps the actor: the runtime_env sets the variables with which orion's
preload library joins by itself (``orion_daemon.joining``; ``scheduler_core/native/
daemon_join.h`` has each one), Ray then sets ``CUDA_VISIBLE_DEVICES`` when the actor starts, and
the library joins that GPU's daemon at the actor's first CUDA call.

Two Ray facts shape this:

- Ray numbers a node's GPUs like CUDA does, by index, and CUDA's default order is "fastest
  first", which on a machine of mixed GPUs is not nvidia-smi's. The runtime_env sets
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so index N is nvidia-smi's GPU N, whose daemon is the one in
  state folder ``gpuN``; after joining, the library names the GPU by its UUID.
- A worker is told which GPU it got, never what fraction of it. The fraction is known where the
  actor is declared, so it is given here (``num_gpus``, or :func:`options`, which sets both from
  one number): with no explicit ``memory_limit`` it becomes that fraction of the GPU's memory,
  computed by the node's daemon, which knows its GPU's size where the driver may not.

The preload library path is this machine's: Ray clusters run one image on every node, so orion
is installed at the same path there (the node agent checks; :func:`orion.ray.start_daemons`).
"""

from __future__ import annotations

from typing import Any

from orion_common.errors import UsageError
from orion_daemon.admission import ROLES, JoinRequest, check_request
from orion_daemon.joining import join_variables
from scheduler_core.settings import HP_CONTEXT, MAX_UTIL, MEMORY_LIMIT, MIN_UTIL


def preload_path() -> str:
    from scheduler_core import preload_library_path

    return str(preload_library_path())


def runtime_env(
    role: str,
    *,
    num_gpus: float | None = None,
    memory_limit: int | str | None = None,
    max_util: float | None = None,
    min_util: float | None = None,
    latency_target_ms: float | None = None,
    name: str | None = None,
    profile: str | None = None,
    hp_context: str | None = None,
) -> dict[str, Any]:
    """The ``runtime_env`` for an actor or task under orion as ``role`` (``"hp"`` or ``"be"``).

    ``num_gpus``: the GPU fraction the actor asks Ray for; below 1 and without ``memory_limit``
    it becomes that fraction of the GPU's memory as the limit. ``memory_limit``: bytes or a size
    (``"8GiB"``). ``max_util`` / ``min_util``: GPU-time shares (the daemon must enforce shares:
    ``start_daemons(shares=True)``). ``latency_target_ms``: HP only, the p99 it aims at.
    ``name``: the client's name on its GPU (default: the worker's name and pid, unique).
    ``profile``: its kernel profile, a path the node's daemon can read. ``hp_context``: HP only,
    on a daemon of ``sharing="mps"``: ``"mps"`` or ``"own"`` (``HP_CONTEXT``).

    Merge it into a runtime_env of your own with ``{**yours, "env_vars": {**yours_vars,
    **orion_env["env_vars"]}}``.
    """
    if role not in ROLES:
        raise UsageError(f"role must be 'hp' or 'be' (got {role!r})")
    fraction = None
    if num_gpus is not None and not 0 < num_gpus <= 1:
        raise UsageError(
            f"an actor under orion uses one GPU or a part of one: num_gpus is above 0 and "
            f"at most 1 (got {num_gpus:g})"
        )
    limit = MEMORY_LIMIT.checked(memory_limit, "memory_limit")
    if num_gpus is not None and num_gpus < 1 and limit is None:  # None and "none" alike
        fraction = float(num_gpus)
    request = JoinRequest(
        role=role,
        name=name or "",
        profile=profile,
        memory_limit=limit,
        memory_fraction=fraction,
        min_util=MIN_UTIL.or_default(MIN_UTIL.checked(min_util)),
        max_util=MAX_UTIL.or_default(MAX_UTIL.checked(max_util)),
        latency_target_ms=latency_target_ms,
        hp_context=HP_CONTEXT.checked(hp_context, "hp_context"),
    )
    # the daemon's own rules, here: a bad value is said now, not as the actor's exit status 75
    check_request(request, name_pending=name is None)
    env_vars = join_variables(request)
    env_vars["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    # Ray expands ${VAR} from the worker's own environment: a preload the node sets is kept.
    env_vars["LD_PRELOAD"] = preload_path() + ":${LD_PRELOAD}"
    return {"env_vars": env_vars}


def options(role: str, num_gpus: float = 1.0, **fields: Any) -> dict[str, Any]:
    """``num_gpus`` and the matching :func:`runtime_env`, for ``@ray.remote(**options(...))`` or
    ``Actor.options(**options(...))``: the fraction is written once, so Ray's share of the GPU
    and orion's memory limit cannot disagree."""
    return {"num_gpus": num_gpus, "runtime_env": runtime_env(role, num_gpus=num_gpus, **fields)}
