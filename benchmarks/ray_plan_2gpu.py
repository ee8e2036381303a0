"""A 2-GPU `orion plan` from a committed pair matrix, run on Ray and checked by `orion report`.

    python benchmarks/ray_plan_2gpu.py --out DIR [--address ADDR] [--duration 30] [--kind KIND]
    python benchmarks/ray_plan_2gpu.py --out DIR --dry-run       # plan and checks, no Ray
    python benchmarks/ray_plan_2gpu.py --out DIR --stand-in      # CPU: stand-in GPUs and jobs

1. The fleet: two GPUs of this machine's kind (``--kind``, else GPU 0's) with two HP services
   (ResNet-50 and MobileNetV2, CUDA graphs, 80 requests/s, 10-ms SLO) and two ResNet-50
   trainers, unless ``--fleet`` gives another. Written as ``DIR/fleet.json``.
2. The plan from the committed matrix ``benchmarks/results/<kind>/pairs/<kind>.json`` (or
   ``--matrix-dir``), as ``orion plan`` makes it: ``DIR/plan.json``.
3. ``orion.ray.run_plan``: each plan GPU's jobs as actors on one GPU of a node of that kind, under
   the policy and sharing mode the matrix was measured in (the node agent restarts its own
   daemons so); the plan-run directory under ``DIR/runs/``.
4. ``orion report`` of that directory, as a user runs it: ``DIR/report/`` (report.md with the
   plan check, "measured against predicted", within 10%) and ``DIR/report.json``.

Writes ``DIR/summary.json`` (format ``orion-ray-plan-2gpu``): the plan, the plan run's status,
each client's predicted and measured figure and whether it is within 10%, the command and the
software. ``--dry-run`` stops after the plan and the checks ``run_plan`` makes before it reaches
Ray (``DIR/dry_run.json``: each GPU's jobs and the daemon they need).

Bounded: ``--duration`` is at most 120 s and a job that is not ready within ``READY_S`` fails
its GPU's run, so a run ends within 5 minutes. ``--stand-in`` runs everything on a local Ray node
with two orion stand-in GPUs (``ORION_STAND_IN_GPUS``) and jobs that sleep instead of running a
model, time-sliced (a stand-in has no MPS): it checks the script end to end on a machine without a
GPU; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FORMAT = {"name": "orion-ray-plan-2gpu", "version": 1}
MAX_DURATION_S = 120.0
READY_S = 120.0
"""How long a plan GPU's jobs may take to be placed, built and warm (run_plan's ready_timeout_s)."""
STAND_IN_READY_S = 400.0
"""The same under ``--stand-in`` (a check on a machine without a GPU, often a busy CI machine
whose two loaded cores start Ray workers slowly): a hang guard only."""
STAND_IN_KIND_NAME = "NVIDIA H100 80GB HBM3"


def default_fleet(kind: str) -> dict[str, Any]:
    """Two GPUs of ``kind``: two HP services and two trainers, jobs of the committed matrices."""
    return {
        "gpus": [{"kind": kind, "count": 2}],
        "objective": "max-total-be",
        "hp": [
            {"name": "search", "job": "resnet50-serve", "rate_per_s": 80, "p99_slo_ms": 10},
            {"name": "mobile", "job": "mobilenet-serve", "rate_per_s": 80, "p99_slo_ms": 10},
        ],
        "be": [
            {"name": "trainer-a", "job": "resnet50-train", "weight": 1},
            {"name": "trainer-b", "job": "resnet50-train", "weight": 1},
        ],
    }


def gpu_kind(args: argparse.Namespace) -> str:
    """The GPU kind the plan is for: ``--kind``, the stand-ins', else this machine's GPU 0's."""
    from orion_common.errors import OrionError
    from postprocess.profile_format import gpu_slug

    if args.kind:
        return args.kind
    if args.stand_in:
        return gpu_slug(STAND_IN_KIND_NAME)
    from orion_common.sysinfo import gpu_facts

    facts = gpu_facts(0)
    if facts is None or not facts.name:
        raise OrionError("no GPU here to name the kind: give --kind (e.g. nvidia-h100-80gb-hbm3)")
    return gpu_slug(facts.name)


def make_plan(args: argparse.Namespace, out: Path) -> tuple[Path, Any]:
    """The fleet and its plan written under ``out``; the plan's path and the plan."""
    from placement.fleet import load_fleet
    from placement.plan import load_matrices, solve
    from placement.plan_file import write_plan

    kind = gpu_kind(args)
    fleet_path = out / "fleet.json"
    if args.fleet:
        fleet_path.write_text(Path(args.fleet).read_text())
    else:
        fleet_path.write_text(json.dumps(default_fleet(kind), indent=2) + "\n")
    matrix_dir = args.matrix_dir or RESULTS / kind / "pairs"
    fleet = load_fleet(fleet_path)
    plan = solve(fleet, load_matrices(fleet.gpu_kinds(), matrix_dir))
    if args.stand_in:
        # a stand-in GPU has no MPS: every plan GPU time-sliced (the figures mean nothing)
        gpus = tuple(
            replace(gpu, settings={**gpu.settings, "sharing": "timeslice"}) for gpu in plan.gpus
        )
        plan = replace(plan, gpus=gpus)
    used = sum(1 for gpu in plan.gpus if gpu.clients)
    if used != 2:
        raise SystemExit(f"error: the plan uses {used} GPU(s), not 2: give another --fleet")
    return write_plan(plan, out / "plan.json"), plan


def dry_run(plan_path: Path, plan: Any, duration_s: float, out: Path) -> dict[str, Any]:
    """What ``run_plan`` checks before Ray, and what each GPU would run under."""
    from orion.ray.plan import check_run_plan, daemon_need
    from placement.plan_run import plan_jobs

    check_run_plan(plan_path, duration_s, out / "runs", READY_S, {})
    configs = plan_jobs(plan, duration_s, out / "runs")
    return {
        "gpus": [
            {
                "index": index,
                "policy": config["run"]["policy"],
                "daemon": str(daemon_need(index, config)),
                "clients": [client["name"] for client in config["clients"]],
            }
            for index, config in configs.items()
        ]
    }


def stand_in_environment(out: Path) -> dict[str, str]:
    """Two orion stand-in GPUs, a state folder and CPU jobs for a local Ray node's workers."""
    state = out / "stand-in-state"
    state.mkdir(parents=True, exist_ok=True)
    gpus = [
        {
            "uuid": f"GPU-00000000-0000-4000-8000-00000000000{i}",
            "name": STAND_IN_KIND_NAME,
            "memory_mib": 8192,
        }
        for i in range(2)
    ]
    return {
        "ORION_STAND_IN_GPUS": json.dumps(gpus),
        "ORION_STATE_DIR": str(state),
        "ORION_CLIENT_DEVICE": "cpu",
    }


# -- the run ---------------------------------------------------------------------------------------


def report(root: Path, out: Path) -> dict[str, Any]:
    """`orion report` of the plan run, as a user runs it; its JSON (``{}`` when it failed)."""
    orion = [sys.executable, "-m", "orion_cli.app", "report", str(root)]
    shown = subprocess.run(
        [*orion, "-o", str(out / "report")], capture_output=True, text=True, check=False, cwd=out
    )
    (out / "report.txt").write_text(shown.stdout + shown.stderr)
    as_json = subprocess.run(
        [*orion, "--json"], capture_output=True, text=True, check=False, cwd=out
    )
    try:
        data = json.loads(as_json.stdout)
    except ValueError:
        return {}
    (out / "report.json").write_text(json.dumps(data, indent=2) + "\n")
    return data


def verdicts(plan_check: dict[str, Any]) -> list[dict[str, Any]]:
    """Each client's predicted and measured figure and whether it is within the tolerance."""
    tolerance = plan_check.get("tolerance")
    rows = []
    for client in plan_check.get("clients", []):
        rows.append({key: client.get(key) for key in client})
    return [{"tolerance": tolerance, **row} for row in rows]


def say(error: Any) -> int:
    """An orion error as its one line (and hint) on stderr; the exit status 1."""
    hint = error.hint
    if "no pair matrix" in error.message:
        committed = sorted(path.parent.parent.name for path in RESULTS.glob("*/pairs/*.json"))
        hint = f"committed pair matrices: {', '.join(committed)} (or give --matrix-dir)"
    print(f"error: {error.message}" + (f"\nhint: {hint}" if hint else ""), file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ray_plan_2gpu.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the results")
    parser.add_argument("--address", default=None, help="Ray cluster (default: a local one)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds measured (<= 120)")
    parser.add_argument("--kind", default=None, help="GPU kind (default: this machine's GPU 0)")
    parser.add_argument("--fleet", default=None, help="a fleet file instead of the default")
    parser.add_argument(
        "--matrix-dir",
        type=Path,
        default=None,
        help="folder of <kind>.json (default: benchmarks/results/<kind>/pairs)",
    )
    parser.add_argument("--dry-run", action="store_true", help="plan and check only, no Ray")
    parser.add_argument(
        "--stand-in", action="store_true", help="CPU only: a local Ray node with two stand-in GPUs"
    )
    args = parser.parse_args(argv)
    if not (math.isfinite(args.duration) and 0 < args.duration <= MAX_DURATION_S):
        parser.error(
            f"--duration must be over 0 and at most {MAX_DURATION_S:g} s "
            f"(got {args.duration:g}): the run must end within 5 minutes"
        )
    from orion_common.errors import OrionError
    from orion_common.output_paths import check_output_folder

    started = time.monotonic()
    out = args.out.absolute()
    try:
        check_output_folder(out, "results folder")
        out.mkdir(parents=True, exist_ok=True)
        plan_path, plan = make_plan(args, out)
        checked = dry_run(plan_path, plan, args.duration, out)
    except OrionError as error:
        return say(error)
    (out / "dry_run.json").write_text(json.dumps(checked, indent=2) + "\n")
    for gpu in checked["gpus"]:
        print(
            f"plan GPU {gpu['index']}: {', '.join(gpu['clients'])} under {gpu['policy']} "
            f"(daemon: {gpu['daemon']})"
        )
    if args.dry_run:
        print(f"dry run: plan written to {plan_path}; nothing run")
        return 0

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    init: dict[str, Any] = {"address": args.address}
    extra: dict[str, Any] = {}
    if args.stand_in:
        os.environ.update(stand_in_environment(out))  # the local node's workers inherit it
        # its own node, even where another Ray cluster runs on this machine (ray.init() would
        # join the one last started here, and refuse the node's resources)
        init = {"address": "local", "num_gpus": 2, "num_cpus": 8, "include_dashboard": False}
        from orion.ray.jobs import StandInJobHost

        extra = {"job_host": StandInJobHost}
    import ray

    import orion.ray
    from orion_common.sysinfo import software_summary

    ray.init(**init)
    try:
        root = orion.ray.run_plan(
            plan_path,
            duration_s=args.duration,
            output_dir=out / "runs",
            ready_timeout_s=STAND_IN_READY_S if args.stand_in else READY_S,
            **extra,
        )
    except OrionError as error:  # the cluster cannot carry the plan out: one line
        return say(error)
    finally:
        ray.shutdown()
    record = json.loads((root / "plan_run.json").read_text())
    data = report(root, out)
    plan_check = data.get("plan", {})
    summary = {
        "format": FORMAT,
        "command": [sys.executable, *sys.argv],
        "stand_in": args.stand_in,
        "plan": str(plan_path.relative_to(out)),
        "plan_run": str(root.relative_to(out)),
        "status": record["status"],
        "gpus": record["gpus"],
        "accepted": plan_check.get("accepted"),
        "plan_check": plan_check.get("summary", []),
        "clients": verdicts(plan_check),
        "software": software_summary(),
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"plan run {record['status']}: {root}")
    for sentence in summary["plan_check"]:
        print(f"- {sentence}")
    return 0 if record["status"] == "complete" else 1


if __name__ == "__main__":
    sys.exit(main())
