"""The plan-run directory, format ``orion-plan-run``, declared once.

Written by ``placement/plan_run.py`` (`orion run-plan PLAN.json`, and ``orion.ray.run_plan`` on a
Ray cluster, through its ``PlanRunRecord``), read by
``reporting/plan_check.py`` (`orion report` on the directory); laid out as in
docs/architecture.md::

    <output>/plan-<yyyymmdd-HHMMSS>/
      plan.json        a copy of the plan
      plan_run.json    the record: format, version, plan, started_utc, ended_utc, status, and
                       per GPU {index, jobs, run_dir, exit_code} (paths relative to the directory)
      gpu<k>/jobs.json       that GPU's jobs file
      gpu<k>/colocate.log    what its `orion colocate` printed
      gpu<k>/<policy>-<timestamp>/   its run directory
"""

from __future__ import annotations

PLAN_RUN_FORMAT = "orion-plan-run"
PLAN_RUN_VERSION = 1
PLAN_RUN_FILE = "plan_run.json"
PLAN_COPY_FILE = "plan.json"
PLAN_RUN_STATUSES = ("running", "complete", "incomplete", "failed")
GPU_JOBS_FILE = "jobs.json"
GPU_LOG_FILE = "colocate.log"


def gpu_folder(index: int) -> str:
    """The folder of GPU ``index`` in a plan-run directory (also the label of its run)."""
    return f"gpu{index}"
