"""jobs.json configs for jobs measured by `orion pairs`, shared with plan runs.

A plan runs each job exactly as `orion pairs` measured it: the same client fields, the same
policy for co-runners without an HP job, the same scheduler thresholds and sharing mode. Both
build their jobs files here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from colocation.policies import POLICIES

BE_ONLY_POLICY = "mps"


def shared_policy(policy: str, has_hp: bool) -> str:
    """The policy co-runners run under: ``policy``, except that co-runners without an HP job
    run under plain MPS when ``policy`` needs one (its gating protects an HP job; without one,
    MPS sharing is what it leaves, and the jobs file would be refused)."""
    return BE_ONLY_POLICY if not has_hp and POLICIES[policy].needs_hp else policy


MEASURED_BEFORE_SHARING = "mps"
"""The sharing mode of a matrix whose settings name none: it was measured before the gated
policies could run time-sliced, so through MPS."""


def run_sharing(policy: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """``run.sharing`` of a jobs file under ``policy`` (as :func:`shared_policy` gives it): the
    matrix's or plan's ``sharing`` setting where the policy runs either way (``mps`` when the
    settings name none, see :data:`MEASURED_BEFORE_SHARING`), so a default that changed since
    the measurement does not change the run; nothing where the policy runs one way only."""
    if len(POLICIES[policy].sharings) < 2:
        return {}
    return {"sharing": settings.get("sharing", MEASURED_BEFORE_SHARING)}


def run_thresholds(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The scheduler thresholds among a matrix's or plan's settings (jobs.json run.thresholds)."""
    keys = ("queue_limit_us", "unknown_kernel_us")
    return {key: settings[key] for key in keys if key in settings}


def jobs_client(
    name: str,
    role: str,
    job: Any,
    rate_per_s: float | None = None,
    sm_percent: int | None = None,
) -> dict[str, Any]:
    """One jobs.json client for ``job`` (anything with workload, mode, batch_size, dtype and
    cuda_graph): an HP one served at ``rate_per_s`` Poisson arrivals, a BE one with its SM
    share when ``sm_percent`` is given. Shared by `orion pairs` cells and plan runs, so a plan
    runs each job exactly as it was measured."""
    client: dict[str, Any] = {
        "name": name,
        "role": role,
        "workload": job.workload,
        "mode": job.mode,
        "batch_size": job.batch_size,
        "dtype": job.dtype,
    }
    if role == "hp":
        client["cuda_graph"] = job.cuda_graph
        client["arrivals"] = {"kind": "poisson", "rate_per_s": rate_per_s}
    elif sm_percent is not None:
        client["sm_percent"] = sm_percent
    return client
