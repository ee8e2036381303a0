"""Running an `orion plan` on one host (`orion colocate PLAN.json`): one run per GPU, together.

Each GPU of the plan becomes an ordinary jobs file (the plan's policy and knobs, its clients
pinned to that GPU by ``run.gpu``) run by an ordinary `orion colocate` in a process of its own,
so each GPU's run is recorded, checked and reported exactly like a single-GPU run. All of them
start together and are stopped together (Ctrl-C, SIGTERM), under one plan-run directory::

    <output>/plan-<yyyymmdd-HHMMSS>/
      plan.json        a copy of the plan
      plan_run.json    format "orion-plan-run": per GPU its jobs file, run directory, exit code
      gpu<k>/jobs.json
      gpu<k>/colocate.log   what that GPU's `orion colocate` printed
      gpu<k>/<policy>-<timestamp>/   its run directory

`orion report` on the plan-run directory compares each GPU's measurements with the plan's
predictions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from colocation.config import parse_jobs
from colocation.processes import own_code_environment
from colocation.rundir import create_run_dir, utc_now
from colocation.signals import sigterm_as_interrupt
from orion_common.atomic_io import write_json_atomic
from orion_common.errors import OrionError
from orion_common.run_format import RUN_JSON

PLAN_RUN_FORMAT = "orion-plan-run"
PLAN_RUN_VERSION = 1
PLAN_RUN_JSON = "plan_run.json"


def is_plan_file(path: Path) -> bool:
    """Whether ``path`` is a plan (format ``orion-plan``) rather than a jobs file."""
    from placement.plan_file import FORMAT

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return False  # the jobs-file reader reports what is wrong with it
    # any orion-plan* format: a plan of another version or spelling is refused as a plan (one
    # line naming its format), not read as a jobs file with a dozen unrelated errors
    return isinstance(data, dict) and str(data.get("format", "")).startswith(FORMAT)


def plan_jobs(plan: Any, duration_s: float, output_dir: Path) -> dict[int, dict[str, Any]]:
    """Each GPU's jobs config (colocation.config format), keyed by GPU index, validated."""
    from placement.pairs import jobs_client, run_thresholds, shared_policy

    configs: dict[int, dict[str, Any]] = {}
    for gpu in plan.gpus:
        thresholds = run_thresholds(gpu.settings)
        share = gpu.settings.get("be_sm_percent")
        clients = [
            jobs_client(client.name, client.role, client, client.rate_per_s, share)
            for client in gpu.clients
        ]
        has_hp = any(client.role == "hp" for client in gpu.clients)
        config = {
            "run": {
                # A GPU with one job runs it under the plan's policy too (not `dedicated`, which
                # reports would take for every GPU's baseline).
                "policy": shared_policy(gpu.policy, has_hp),
                "duration_s": duration_s,
                "warmup_steps": 20,
                "seed": 1,
                "gpu": gpu.index,
                "output_dir": str(output_dir / f"gpu{gpu.index}"),
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
    from placement.plan_file import load_plan

    plan = load_plan(plan_path)
    if duration_s <= 0:
        raise OrionError(f"--duration must be positive (got {duration_s:g})")
    indices = [gpu.index for gpu in plan.gpus]
    _check_gpus(indices, _visible_gpus() if available_gpus is None else available_gpus)
    root = create_run_dir(output_dir, "plan").resolve()  # each GPU's run starts in its folder
    configs = plan_jobs(plan, duration_s, root)
    (root / "plan.json").write_text(plan_path.read_text())
    record: dict[str, Any] = {
        "format": PLAN_RUN_FORMAT,
        "version": PLAN_RUN_VERSION,
        "plan": "plan.json",
        "started_utc": utc_now(),
        "ended_utc": None,
        "status": "running",
        "gpus": [],
    }
    base = list(command) if command is not None else [sys.executable, "-m", "orion_cli.app"]
    processes: dict[int, subprocess.Popen[bytes]] = {}
    logs = []
    for index, config in configs.items():
        gpu_dir = root / f"gpu{index}"
        gpu_dir.mkdir(parents=True, exist_ok=True)
        jobs_path = gpu_dir / "jobs.json"
        write_json_atomic(jobs_path, config)
        log = (gpu_dir / "colocate.log").open("wb")
        logs.append(log)
        processes[index] = subprocess.Popen(
            [*base, "colocate", str(jobs_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=gpu_dir,
            env=own_code_environment(os.environ),
        )
        record["gpus"].append(
            {"index": index, "jobs": f"gpu{index}/jobs.json", "run_dir": None, "exit_code": None}
        )
    write_json_atomic(root / PLAN_RUN_JSON, record)
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
    for entry in record["gpus"]:
        run_dir = _run_dir_of(root / f"gpu{entry['index']}")
        entry["run_dir"] = str(run_dir.relative_to(root)) if run_dir is not None else None
        entry["exit_code"] = processes[entry["index"]].returncode
    codes = [entry["exit_code"] for entry in record["gpus"]]
    if interrupted:
        record["status"] = "incomplete"
    else:
        record["status"] = "complete" if all(code == 0 for code in codes) else "failed"
    record["ended_utc"] = utc_now()
    write_json_atomic(root / PLAN_RUN_JSON, record)
    if interrupted:
        raise KeyboardInterrupt
    return root
