"""Running an `orion plan` on one host (`orion run-plan PLAN.json`): one run per GPU, together.

Each GPU of the plan becomes an ordinary jobs file (the plan's policy and knobs, its clients
pinned to that GPU by ``run.gpu``) run by an ordinary `orion colocate` in a process of its own,
so each GPU's run is recorded, checked and reported exactly like a single-GPU run. All of them
start together and are stopped together (Ctrl-C, SIGTERM), under one plan-run directory
(format ``orion-plan-run``, declared in ``orion_common/plan_run_format.py``). `orion report` on
it compares each GPU's measurements with the plan's predictions.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from colocation.config import RunConfig, parse_jobs
from colocation.jobs_errors import value_problem
from colocation.processes import own_code_environment
from colocation.rundir import create_run_dir
from orion_common.atomic_io import write_json_atomic
from orion_common.errors import OrionError, UsageError
from orion_common.output_paths import check_output_folder
from orion_common.plan_run_format import (
    GPU_JOBS_FILE,
    GPU_LOG_FILE,
    PLAN_COPY_FILE,
    PLAN_RUN_FILE,
    PLAN_RUN_FORMAT,
    PLAN_RUN_VERSION,
    gpu_folder,
)
from orion_common.run_format import RUN_JSON
from orion_common.runclock import utc_now
from orion_daemon.signals import sigterm_as_interrupt
from placement.jobs_files import jobs_client, run_sharing, run_thresholds, shared_policy
from placement.plan_file import Plan, load_plan
from reporting.plan_check import length_mismatch

DEFAULT_RUN_S = 60.0
"""How long a plan is measured when neither the caller nor its matrices say (matrices from before
they recorded their cells' length): `orion pairs`' own default cell length."""


def planned_duration(plan: Plan) -> float:
    """How long to measure ``plan`` unless told: as long as its matrix's cells were measured (the
    longest where GPUs come from matrices of different lengths), so that the run measures what
    the plan predicted; :data:`DEFAULT_RUN_S` when no matrix recorded it."""
    known = [gpu.matrix_duration_s for gpu in plan.gpus if gpu.matrix_duration_s is not None]
    return max(known) if known else DEFAULT_RUN_S


def duration_mismatches(plan: Plan, duration_s: float) -> list[str]:
    """One sentence per plan GPU whose matrix measured cells of another length than
    ``duration_s`` (said before a run; the report says it again after)."""
    found = []
    for gpu in plan.gpus:
        mismatch = length_mismatch(duration_s, gpu.matrix_duration_s)
        if gpu.clients and mismatch is not None:
            found.append(f"GPU {gpu.index}: {mismatch}")
    return found


def plan_jobs(plan: Plan, duration_s: float, output_dir: Path) -> dict[int, dict[str, Any]]:
    """Each GPU's jobs config (colocation.config format), keyed by GPU index, validated."""
    configs: dict[int, dict[str, Any]] = {}
    for gpu in plan.gpus:
        thresholds = run_thresholds(gpu.settings)
        share = gpu.settings.get("be_sm_percent")
        clients = [
            jobs_client(client.name, client.role, client, client.rate_per_s, share)
            for client in gpu.clients
        ]
        has_hp = any(client.role == "hp" for client in gpu.clients)
        policy = shared_policy(gpu.policy, has_hp)
        config = {
            "run": {
                # A GPU with one job runs it under the plan's policy too (not `dedicated`, which
                # reports would take for every GPU's baseline).
                "policy": policy,
                **run_sharing(policy, gpu.settings),
                "duration_s": duration_s,
                "warmup_steps": 20,
                "seed": 1,
                "gpu": gpu.index,
                "output_dir": str(output_dir / gpu_folder(gpu.index)),
                "thresholds": thresholds,
            },
            "clients": clients,
        }
        try:
            parse_jobs(config, output_dir)
        except OrionError as error:
            raise OrionError(
                f"the plan's GPU {gpu.index} gives an invalid jobs file: {error}"
            ) from None
        configs[gpu.index] = config
    return configs


class PlanRunRecord:
    """A plan-run directory and its ``plan_run.json`` as they are written, for `orion run-plan`
    and ``orion.ray.run_plan`` alike (format in ``orion_common/plan_run_format.py``); the record
    is replaced atomically at every :meth:`save`."""

    def __init__(self, root: Path, data: dict[str, Any]) -> None:
        self.root = root
        self.data = data

    @classmethod
    def create(cls, plan_path: Path, output_dir: Path, **extra: Any) -> PlanRunRecord:
        """A new plan-run directory under ``output_dir`` holding a copy of the plan; ``extra``
        fields go into the record (readers ignore fields they do not know)."""
        root = create_run_dir(output_dir, "plan").resolve()  # each GPU's run starts in its folder
        (root / PLAN_COPY_FILE).write_text(plan_path.read_text())
        data: dict[str, Any] = {
            "format": PLAN_RUN_FORMAT,
            "version": PLAN_RUN_VERSION,
            "plan": PLAN_COPY_FILE,
            "started_utc": utc_now(),
            "ended_utc": None,
            "status": "running",
            **extra,
            "gpus": [],
        }
        return cls(root, data)

    def gpu_dir(self, index: int) -> Path:
        return self.root / gpu_folder(index)

    def add_gpu(self, index: int, config: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """Writes GPU ``index``'s jobs file and lists the GPU; its entry (to fill in later)."""
        gpu_dir = self.gpu_dir(index)
        gpu_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(gpu_dir / GPU_JOBS_FILE, config)
        entry = {
            "index": index,
            "jobs": f"{gpu_folder(index)}/{GPU_JOBS_FILE}",
            "run_dir": None,
            "exit_code": None,
            **extra,
        }
        self.data["gpus"].append(entry)
        return entry

    def gpu(self, index: int) -> dict[str, Any]:
        return next(entry for entry in self.data["gpus"] if entry["index"] == index)

    def set_run_dir(self, index: int, run_dir: Path | None) -> None:
        self.gpu(index)["run_dir"] = str(run_dir.relative_to(self.root)) if run_dir else None

    def save(self) -> None:
        write_json_atomic(self.root / PLAN_RUN_FILE, self.data)

    def finish(self, status: str) -> None:
        self.data["status"] = status
        self.data["ended_utc"] = utc_now()
        self.save()


def _check_gpus(indices: Sequence[int], available: int) -> None:
    if not indices:
        raise OrionError("the plan places nothing on any GPU")
    missing = [index for index in indices if index >= available]
    if missing:
        raise OrionError(
            f"the plan uses GPU {', '.join(map(str, sorted(indices)))} but this host has "
            f"{available} GPU(s): GPU {', '.join(map(str, missing))} missing"
        )


def _visible_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def _run_dir_of(gpu_dir: Path) -> Path | None:
    """The run directory `orion colocate` created under ``gpu_dir`` (the newest one)."""
    runs = sorted(path.parent for path in gpu_dir.glob(f"*/{RUN_JSON}"))
    return runs[-1] if runs else None


def check_plan_run(plan_path: Path, duration_s: float, output_dir: Path) -> Plan:
    """The plan at ``plan_path``, once everything a run of it takes from the user holds: the
    duration (``run.duration_s``'s bounds), the plan, every GPU's jobs file (validated as `orion
    colocate` would) and a writable output folder. Input first: this looks at no GPU."""
    problem = value_problem(RunConfig, "duration_s", duration_s)
    if problem is not None:
        raise UsageError(f"--duration: {problem}")
    plan = load_plan(plan_path)
    check_output_folder(output_dir, "plan-run folder")
    plan_jobs(plan, duration_s, Path(output_dir).absolute())
    return plan


def run_plan(
    plan_path: Path,
    duration_s: float,
    output_dir: Path,
    *,
    command: Sequence[str] | None = None,
    available_gpus: int | None = None,
) -> Path:
    """Runs every GPU of the plan at ``plan_path`` at once; returns the plan-run directory.

    ``command`` is how a GPU's jobs file is run (default: this Python's `orion colocate`);
    ``available_gpus`` overrides the count of GPUs this host shows (both for tests).
    """
    plan = check_plan_run(plan_path, duration_s, output_dir)
    indices = [gpu.index for gpu in plan.gpus]
    _check_gpus(indices, _visible_gpus() if available_gpus is None else available_gpus)
    record = PlanRunRecord.create(plan_path, output_dir)
    root = record.root
    configs = plan_jobs(plan, duration_s, root)
    base = list(command) if command is not None else [sys.executable, "-m", "orion_cli.app"]
    processes: dict[int, subprocess.Popen[bytes]] = {}
    logs = []
    for index, config in configs.items():
        record.add_gpu(index, config)
        gpu_dir = record.gpu_dir(index)
        log = (gpu_dir / GPU_LOG_FILE).open("wb")
        logs.append(log)
        processes[index] = subprocess.Popen(
            [*base, "colocate", str(gpu_dir / GPU_JOBS_FILE)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=gpu_dir,
            env=own_code_environment(os.environ),
        )
    record.save()
    interrupted = False
    try:
        with sigterm_as_interrupt():
            for process in processes.values():
                process.wait()
    except KeyboardInterrupt:
        # Every GPU's run stops the way one run does on Ctrl-C: its record says incomplete.
        interrupted = True
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in processes.values():
            process.wait()
    finally:
        for log in logs:
            log.close()
    for index, process in processes.items():
        record.set_run_dir(index, _run_dir_of(record.gpu_dir(index)))
        record.gpu(index)["exit_code"] = process.returncode
    codes = [process.returncode for process in processes.values()]
    if interrupted:
        record.finish("incomplete")
    else:
        record.finish("complete" if all(code == 0 for code in codes) else "failed")
    if interrupted:
        raise KeyboardInterrupt
    return root
