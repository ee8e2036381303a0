"""Loading a client's profile into its slot: the one place a profiled client is written (every
client joins a daemon, `orion colocate`'s included).

A profile gives the slot its kernel identity table; a CUDA-graph profile also the graph, which
the library recognises by its kernel nodes when the program instantiates it and gates as a unit.
"""

from __future__ import annotations

from typing import Any

from orion_common.errors import OrionError


def add_profiled_client(
    scheduler: Any,
    name: str,
    role: str,
    profile: Any | None,
    *,
    memory_limit: int | None = None,
    min_util: float = 0.0,
    max_util: float = 1.0,
) -> int:
    """Adds a client to ``scheduler`` (a :class:`scheduler_core.SchedulerRun`) with its
    ``profile`` (a :class:`postprocess.Profile`, or None: every kernel unknown work) and limits;
    returns its slot. In an open run a slot whose profile cannot be loaded is given back."""
    from postprocess import kernel_identity_table
    from postprocess.graphs import graph_wall_time_ns, is_graph_profile

    kernels = kernel_identity_table(profile) if profile is not None else None
    index = scheduler.add_client(
        name, role, kernels, memory_limit=memory_limit, min_util=min_util, max_util=max_util
    )
    if profile is not None and is_graph_profile(profile):
        try:
            scheduler.add_graph(index, profile.kernels, graph_wall_time_ns(profile))
        except OrionError:
            if scheduler.settings.open_slots:
                scheduler.release(index)
            raise
    return index
