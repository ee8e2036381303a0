"""The Ray example as a user would trust it: the HP served as a CUDA graph, each actor alone first.

    python benchmarks/ray_graph_example.py --out DIR [--address ADDR] [--duration 30] [--rate 80]
    python benchmarks/ray_graph_example.py --out DIR --dry-run     # checks, writes plan.json
    python benchmarks/ray_graph_example.py --out DIR --stand-in    # CPU: a stand-in GPU, no CUDA

Two Ray actors on one GPU (a placement group of one GPU keeps them together), as
``examples/ray/half_a_gpu_each.py`` declares them: an HP inference server (ResNet-50 batch 4,
Poisson arrivals at ``--rate``, served as production servers serve it, by replaying a CUDA graph
of the step) and a BE trainer (ResNet-50 batch 32, back to back), each with ``num_gpus=0.5``.
Four phases of ``--duration`` seconds each, every actor built afresh:

1. ``hp-alone``: the HP actor alone on the GPU;
2. ``be-alone``: the BE actor alone;
3. ``ray``: both, Ray alone (``num_gpus=0.5`` is bookkeeping only);
4. ``orion``: both under orion (``orion.ray.options``; daemons from ``orion.ray.start_daemons()``
   with its defaults, as a user calls it).

Prints and writes the HP p99 and the BE throughput of each phase and, for ``ray`` and ``orion``,
their ratios to the actor alone: the figures a user can act on. Writes under ``--out``:
``results.json`` (format ``orion-ray-example``), ``printout.txt`` (what it printed),
``hp-<phase>.csv`` (every request's latency) and ``plan.json`` (what it was asked to run).

Bounded: ``--duration`` is at most 45 s, every Ray call has a deadline, and a phase that would
start after ``BUDGET_S`` is skipped and recorded as such, so a run ends within 5 minutes
(under ``--stand-in``, only hang guards: ``STAND_IN_TIMEOUT_S``).
``--stand-in`` runs the same phases on a local Ray node whose one GPU is an orion stand-in
(``ORION_STAND_IN_GPUS``) with small CPU steps instead of the models: it checks the script end
to end on a machine without a GPU; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

FORMAT = {"name": "orion-ray-example", "version": 1}
PHASES = ("hp-alone", "be-alone", "ray", "orion")
MAX_DURATION_S = 45.0
BUDGET_S = 270.0
"""No phase starts later than this after the script's start (a phase takes its duration plus the
actors' build): with at most 45-s phases the run ends within 5 minutes."""
BUILD_TIMEOUT_S = 90.0
"""How long an actor may take to build its model (and capture its graph) and warm up."""
STAND_IN_TIMEOUT_S = 400.0
"""Under ``--stand-in`` (a check of the script on a machine without a GPU, often a busy CI
machine), how long any Ray call may take, and no phase is skipped for the budget: there a Ray
worker importing torch on two loaded cores took longer than BUILD_TIMEOUT_S to start, and the
check failed for a machine's speed. Only a hang guard; what runs the check bounds it as a whole."""
STAND_IN_GPU = {
    "uuid": "GPU-00000000-0000-4000-8000-000000000001",
    "name": "NVIDIA H100 80GB HBM3",
    "memory_mib": 8192,
}
STAND_IN_STEP = 64
"""The stand-in step: a matrix product of this size on the CPU."""


# -- the actors -----------------------------------------------------------------------------------


def _build(spec: dict[str, Any], with_orion: bool) -> tuple[Any, dict[str, Any]]:
    """The actor's workload (the real one, or a CPU stand-in) and what it joined under orion.
    Under orion the actor joins its GPU's daemon before it builds anything, as orion.ray's plan
    jobs do: a refused join ends it with the library's one line."""
    joined: dict[str, Any] = {}
    if with_orion:
        from orion.ray.jobs import join_now

        joined = join_now()
    if spec["stand_in"]:
        return _StandInWorkload(spec["batch_size"]), joined
    from workloads.build import build_workload
    from workloads.spec import WorkloadSpec

    workload = build_workload(
        WorkloadSpec(
            name=spec["workload"],
            mode=spec["mode"],
            batch_size=spec["batch_size"],
            device="cuda",
            cuda_graph=spec["cuda_graph"],
        )
    )
    return workload, joined


class _StandInWorkload:
    """The workload API the actors use, as a small CPU matrix product (``--stand-in``)."""

    def __init__(self, batch_size: int) -> None:
        import torch

        self.torch = torch
        self.samples_per_step = batch_size
        self.a = torch.randn(STAND_IN_STEP, STAND_IN_STEP)

    def warmup(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def step(self) -> Any:
        return self.a @ self.a

    def synchronize(self) -> None:
        pass


class Server:
    """The HP actor: serves requests arriving as a Poisson process, replaying its graph for each;
    a request's latency counts its queueing from its arrival."""

    def __init__(self, spec: dict[str, Any], with_orion: bool) -> None:
        self.workload, self.joined = _build(spec, with_orion)
        self.workload.warmup(20)
        self.workload.synchronize()

    def serve(self, rate_per_s: float, duration_s: float, seed: int) -> list[float]:
        import numpy as np

        count = max(1, int(rate_per_s * duration_s))
        gaps = np.random.default_rng(seed).exponential(1.0 / rate_per_s, count)
        latencies = []
        arrival = time.perf_counter()
        for gap in gaps:
            arrival += gap
            time.sleep(max(0.0, arrival - time.perf_counter()))
            self.workload.step()
            self.workload.synchronize()
            latencies.append((time.perf_counter() - arrival) * 1000.0)
        return latencies

    def where(self) -> dict[str, Any]:
        import ray

        return {**self.joined, "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}


class Trainer:
    """The BE actor: training iterations back to back; samples per second."""

    def __init__(self, spec: dict[str, Any], with_orion: bool) -> None:
        self.workload, self.joined = _build(spec, with_orion)
        self.batch_size = spec["batch_size"]
        self.workload.warmup(5)
        self.workload.synchronize()

    def train(self, duration_s: float) -> float:
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < duration_s:
            self.workload.step()
            self.workload.synchronize()
            steps += 1
        return steps * self.batch_size / (time.perf_counter() - start)

    def where(self) -> dict[str, Any]:
        import ray

        return {**self.joined, "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}


# -- the phases -----------------------------------------------------------------------------------


def plan(args: argparse.Namespace) -> dict[str, Any]:
    """What the run is asked to do, checked (raises ValueError in one line)."""
    if not (math.isfinite(args.duration) and 0 < args.duration <= MAX_DURATION_S):
        raise ValueError(
            f"--duration must be over 0 and at most {MAX_DURATION_S:g} s "
            f"(got {args.duration:g}): four phases must end within 5 minutes"
        )
    if not (math.isfinite(args.rate) and 0 < args.rate <= 10_000):
        raise ValueError(f"--rate must be over 0 and at most 10000 per s (got {args.rate:g})")
    if not (math.isfinite(args.latency_target_ms) and args.latency_target_ms > 0):
        raise ValueError(f"--latency-target-ms must be positive (got {args.latency_target_ms:g})")
    hp = {
        "workload": args.hp_workload,
        "mode": "infer",
        "batch_size": args.hp_batch,
        "cuda_graph": not args.stand_in,
        "stand_in": args.stand_in,
    }
    be = {
        "workload": args.be_workload,
        "mode": "train",
        "batch_size": args.be_batch,
        "cuda_graph": False,
        "stand_in": args.stand_in,
    }
    return {
        "phases": list(PHASES),
        "duration_s": args.duration,
        "rate_per_s": args.rate,
        "latency_target_ms": args.latency_target_ms,
        "hp": hp,
        "be": be,
        "num_gpus_each": 0.5,
        "stand_in": args.stand_in,
        "address": args.address,
        # Deadlines of Ray calls and the budget phases start within (None: none).
        "build_timeout_s": STAND_IN_TIMEOUT_S if args.stand_in else BUILD_TIMEOUT_S,
        "run_slack_s": STAND_IN_TIMEOUT_S if args.stand_in else 30.0,
        "budget_s": None if args.stand_in else BUDGET_S,
    }


def _options(role: str, with_orion: bool, target_ms: float) -> dict[str, Any]:
    if not with_orion:
        return {"num_gpus": 0.5}  # Ray's bookkeeping only
    import orion.ray

    if role == "hp":
        return orion.ray.options("hp", num_gpus=0.5, latency_target_ms=target_ms, name="server")
    return orion.ray.options("be", num_gpus=0.5, name="trainer")


def run_phase(ray: Any, phase: str, todo: dict[str, Any], strategy: Any) -> dict[str, Any]:
    """One phase: its actors built in the GPU's bundle, measured together, then ended."""
    with_orion = phase == "orion"
    duration = todo["duration_s"]
    roles = {"hp-alone": ("hp",), "be-alone": ("be",)}.get(phase, ("hp", "be"))
    actors: dict[str, Any] = {}
    try:
        for role in roles:
            options = _options(role, with_orion, todo["latency_target_ms"])
            actors[role] = (
                ray.remote(Server if role == "hp" else Trainer)
                .options(**options, num_cpus=1, max_restarts=0, scheduling_strategy=strategy)
                .remote(todo[role], with_orion)
            )
        where = ray.get(
            [a.where.remote() for a in actors.values()], timeout=todo["build_timeout_s"]
        )
        calls = {
            "hp": lambda actor: actor.serve.remote(todo["rate_per_s"], duration, 1),
            "be": lambda actor: actor.train.remote(duration),
        }
        pending = [calls[role](actor) for role, actor in actors.items()]
        deadline = duration * 3 + todo["run_slack_s"]
        results = dict(zip(actors, ray.get(pending, timeout=deadline), strict=True))
    finally:
        for actor in actors.values():
            ray.kill(actor)
    return {
        "latencies_ms": results.get("hp"),
        "be_samples_per_s": results.get("be"),
        "actors": where,
    }


def p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def summarize(measured: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each phase's figures and, for the shared phases, their ratios to the actor alone."""
    phases: dict[str, Any] = {}
    for phase, result in measured.items():
        if "skipped" in result or "error" in result:
            phases[phase] = {k: v for k, v in result.items() if k in ("skipped", "error")}
            continue
        latencies = result["latencies_ms"]
        phases[phase] = {
            "hp_p99_ms": None if latencies is None else p99(latencies),
            "hp_p50_ms": None if latencies is None else sorted(latencies)[len(latencies) // 2],
            "hp_requests": None if latencies is None else len(latencies),
            "be_samples_per_s": result["be_samples_per_s"],
            "actors": result["actors"],
        }
    alone_p99 = phases.get("hp-alone", {}).get("hp_p99_ms")
    alone_be = phases.get("be-alone", {}).get("be_samples_per_s")
    ratios = {}
    for phase in ("ray", "orion"):
        figures = phases.get(phase, {})
        shared_p99, shared_be = figures.get("hp_p99_ms"), figures.get("be_samples_per_s")
        ratios[phase] = {
            "hp_p99_vs_alone": shared_p99 / alone_p99 if shared_p99 and alone_p99 else None,
            "be_vs_alone": shared_be / alone_be if shared_be and alone_be else None,
        }
    return {"phases": phases, "ratios": ratios}


def printout(todo: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    hp, be = todo["hp"], todo["be"]
    graph = " (CUDA graph)" if hp["cuda_graph"] else ""
    lines = [
        f"HP {hp['workload']} infer bs{hp['batch_size']}{graph} at {todo['rate_per_s']:g}/s; "
        f"BE {be['workload']} train bs{be['batch_size']}; {todo['duration_s']:g} s a phase"
        + ("; STAND-IN (CPU): the figures mean nothing" if todo["stand_in"] else ""),
        f"{'phase':<12}{'HP p99 ms':>11}{'x alone':>9}{'BE samples/s':>14}{'x alone':>9}",
    ]
    names = {
        "hp-alone": "HP alone",
        "be-alone": "BE alone",
        "ray": "Ray alone",
        "orion": "under orion",
    }
    for phase in PHASES:
        figures = summary["phases"].get(phase, {})
        if "skipped" in figures or "error" in figures:
            why = figures.get("skipped") or figures.get("error")
            lines.append(f"{names[phase]:<12}  not measured: {why}")
            continue
        ratio = summary["ratios"].get(phase, {})
        lines.append(
            f"{names[phase]:<12}{_num(figures.get('hp_p99_ms'), '.2f'):>11}"
            f"{_num(ratio.get('hp_p99_vs_alone'), '.2f'):>9}"
            f"{_num(figures.get('be_samples_per_s'), '.0f'):>14}"
            f"{_num(ratio.get('be_vs_alone'), '.2f'):>9}"
        )
    return lines


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


# -- the run ---------------------------------------------------------------------------------------


def stand_in_environment(out: Path) -> dict[str, str]:
    """The variables that give a local Ray node's workers one orion stand-in GPU."""
    state = out / "stand-in-state"
    state.mkdir(parents=True, exist_ok=True)
    return {"ORION_STAND_IN_GPUS": json.dumps([STAND_IN_GPU]), "ORION_STATE_DIR": str(state)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ray_graph_example.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for the results")
    parser.add_argument("--address", default=None, help="Ray cluster (default: a local one)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds a phase (<= 45)")
    parser.add_argument("--rate", type=float, default=80.0, help="HP requests per second")
    parser.add_argument(
        "--latency-target-ms", type=float, default=10.0, help="the HP's target under orion"
    )
    parser.add_argument("--hp-workload", default="resnet50")
    parser.add_argument("--hp-batch", type=int, default=4)
    parser.add_argument("--be-workload", default="resnet50")
    parser.add_argument("--be-batch", type=int, default=32)
    parser.add_argument("--dry-run", action="store_true", help="check and write plan.json only")
    parser.add_argument(
        "--stand-in", action="store_true", help="CPU only: a local Ray node with a stand-in GPU"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        todo = plan(args)
    except ValueError as error:
        parser.error(str(error))
    from orion_common.output_paths import check_output_folder

    try:
        check_output_folder(args.out, "results folder")
    except Exception as error:  # orion's one-line error
        print(f"error: {error}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "plan.json").write_text(json.dumps(todo, indent=2) + "\n")
    if args.dry_run:
        print(
            f"dry run: {len(PHASES)} phases of {args.duration:g} s ({', '.join(PHASES)}); "
            f"plan written to {args.out / 'plan.json'}"
        )
        return 0

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    init: dict[str, Any] = {"address": args.address}
    if args.stand_in:
        os.environ.update(stand_in_environment(args.out))  # the local node's workers inherit it
        # its own node, even where another Ray cluster runs on this machine (ray.init() would
        # join the one last started here, and refuse the node's resources)
        init = {"address": "local", "num_gpus": 1, "num_cpus": 4, "include_dashboard": False}
    import ray

    import orion.ray
    from orion_common.sysinfo import software_summary

    ray.init(**init)
    measured: dict[str, dict[str, Any]] = {}
    try:
        inventory: list[Any] = []
        daemons_error = None
        try:
            inventory = orion.ray.start_daemons()  # the orion phase's daemons; idempotent
        except Exception as error:  # the phases without orion still run
            daemons_error = _first_line(error)
        group = ray.util.placement_group([{"GPU": 1, "CPU": 2}])
        ray.get(group.ready(), timeout=todo["build_timeout_s"])
        strategy = ray.util.scheduling_strategies.PlacementGroupSchedulingStrategy(group, 0)
        for phase in PHASES:
            budget = todo["budget_s"]
            if budget is not None and time.monotonic() - started > budget:
                measured[phase] = {"skipped": f"past the {budget:g}-s budget"}
                continue
            if phase == "orion" and daemons_error:
                measured[phase] = {"error": f"no orion daemons: {daemons_error}"}
                continue
            try:
                measured[phase] = run_phase(ray, phase, todo, strategy)
            except Exception as error:  # one phase's failure is recorded, the others still run
                measured[phase] = {"error": _first_line(error)}
        nodes = [
            {"node_id": n.node_id, "gpus": [g.__dict__ for g in n.gpus], "problem": n.problem}
            for n in inventory
        ]
    finally:
        ray.shutdown()
    summary = summarize(measured)
    lines = printout(todo, summary)
    for phase, result in measured.items():
        if result.get("latencies_ms"):
            with (args.out / f"hp-{phase}.csv").open("w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(["request", "latency_ms"])
                writer.writerows(enumerate(result["latencies_ms"]))
    record = {
        "format": FORMAT,
        "command": [sys.executable, *sys.argv],
        "plan": todo,
        **summary,
        "orion_nodes": nodes,
        "software": software_summary(),
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    (args.out / "results.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    (args.out / "printout.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    failed = [p for p in PHASES if "error" in summary["phases"].get(p, {})]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
