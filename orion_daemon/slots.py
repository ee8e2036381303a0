"""Loading a client's profile into its slot: the one place a profiled client is written (every
client joins a daemon, `orion colocate`'s included).

A profile gives the slot its kernel identity table; a CUDA-graph profile also the graph, which
the library recognises by its kernel nodes when the program instantiates it and gates as a unit.
"""

from __future__ import annotations

from typing import Any

from orion_common.errors import OrionError
from scheduler_core.shares import NO_CAP, NO_PROMISE


def add_profiled_client(
    scheduler: Any,
    name: str,
    role: str,
    profile: Any | None,
    *,
    memory_limit: int | None = None,
    min_util: float = NO_PROMISE,
    max_util: float = NO_CAP,
) -> int:
    """Adds a client to ``scheduler`` (a :class:`scheduler_core.SchedulerRun`) with its
    ``profile`` (a :class:`postprocess.Profile`, or None: every kernel unknown work) and limits;
    returns its slot. In an open run a slot whose profile cannot be loaded is given back."""
    from postprocess import kernel_identity_table
    from postprocess.graphs import is_graph_profile

    kernels = kernel_identity_table(profile) if profile is not None else None
    index = scheduler.add_client(
        name, role, kernels, memory_limit=memory_limit, min_util=min_util, max_util=max_util
    )
    if profile is not None and is_graph_profile(profile):
        try:
            for nodes, wall_time_ns in profile_graphs(profile):
                scheduler.add_graph(index, nodes, wall_time_ns)
        except OrionError:
            if scheduler.settings.open_slots:
                scheduler.release(index)
            raise
    return index


def profile_graphs(profile: Any) -> list[tuple[Any, float]]:
    """Each CUDA graph of a graph profile: its node rows and its wall time on the GPU.

    A profile made by `orion profile --cuda-graph` is one graph (every row a node); a learned
    profile (:mod:`postprocess.learned_profile`) may hold several, numbered in the ``graph``
    column, beside eager kernels (no graph number), which are kernels only."""
    import pandas as pd

    from postprocess.graphs import graph_wall_time_ns

    kernels = profile.kernels
    if "graph" not in kernels.columns:
        return [(kernels, graph_wall_time_ns(profile))]
    numbers = pd.to_numeric(kernels["graph"], errors="coerce")
    if numbers.isna().all():
        return [(kernels, graph_wall_time_ns(profile))]
    graphs = []
    for _, nodes in kernels[numbers.notna()].groupby(numbers[numbers.notna()], sort=True):
        recorded = pd.to_numeric(nodes["graph_duration_ns"], errors="coerce").dropna()
        wall_time = (
            float(recorded.iloc[0])
            if not recorded.empty and float(recorded.iloc[0]) > 0
            else graph_wall_time_ns(profile)
        )
        graphs.append((nodes, wall_time))
    return graphs
