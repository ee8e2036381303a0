"""`orion simulate`: a round-based fleet simulator (Gavel-style) for the planner and baselines.

A simulation file is a fleet file (placement/fleet.py; its ``be`` list empty or absent) with a
``simulation`` object: BE jobs arrive (Poisson, or from a CSV trace), wait in a queue and run
for a number of iterations. Each round of ``round_s`` seconds a policy places the active BE jobs
beside the fixed HP services; each placed BE job advances by its predicted rate (iterations per
second = alone throughput x the measured pair ratio) x ``round_s`` and finishes inside the round
when its iterations run out (the finish time is interpolated). A job arriving mid-round waits for
the next round. Policies: ``orion`` (placement.plan.solve every round on the active jobs, the
fleet's objective) and three baselines, ``one-gpu-per-job``, ``packing-blind`` and
``gavel-isolated`` (see :data:`POLICIES`). Everything is deterministic for a seed.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orion_common.atomic_io import write_text_atomic
from orion_common.errors import OrionError
from orion_common.json_fields import (
    FieldError,
    array,
    checked,
    integer,
    join,
    number,
    obj,
    read_json,
    string,
)
from orion_common.output_paths import make_folder, write_with
from placement.fleet import MAX_WEIGHT, BeJob, Fleet, HpService, parse_fleet
from placement.pair_matrix import PairMatrix
from placement.plan import solve

FORMAT = "orion-simulation"
VERSION = 1
ARRIVAL_KINDS = ("poisson", "trace")
# Bounds that keep one `orion simulate` to seconds or minutes: a typo (duration_s 1e15,
# jobs_per_hour 1e9) is refused with the bound rather than left to run for hours.
MAX_DURATION_S = 366 * 24 * 3600.0
MAX_ROUNDS = 10_000
MAX_JOBS_PER_HOUR = 10_000.0
MAX_JOBS = 10_000
MAX_ITERATIONS = 1e12
POLICIES = ("orion", "one-gpu-per-job", "packing-blind", "gavel-isolated")
# a simulation that has not drained after this many rounds past the arrivals stops there
_DRAIN_FACTOR = 100


@dataclass(frozen=True)
class MixEntry:
    """One kind of BE job: ``share`` of the arrivals (relative), ``iterations`` to run."""

    job: str
    weight: float
    iterations: float
    share: float


@dataclass(frozen=True)
class Simulation:
    round_s: float
    duration_s: float
    seed: int
    arrivals: dict[str, Any]
    job_mix: tuple[MixEntry, ...]
    trace_path: Path | None = None


@dataclass(frozen=True)
class SimulationSpec:
    fleet: Fleet
    simulation: Simulation
    source: str = "simulation"


@dataclass(frozen=True)
class Arrival:
    """One BE job of the run: its name, matrix job, weight, iterations and arrival time."""

    name: str
    job: str
    weight: float
    iterations: float
    arrival_s: float


@dataclass(frozen=True)
class Group:
    """What runs on one GPU during a round: the HP service (or none) and BE job names."""

    gpu: int
    hp: HpService | None
    be: tuple[str, ...]


@dataclass
class PolicyResult:
    policy: str
    completion_s: dict[str, float]  # job name -> finish time - arrival time
    finish_s: dict[str, float]
    unfinished: tuple[str, ...]
    rounds: int
    busy_gpu_rounds: int
    gpus_used: int
    hp_slo_violations: int
    first_arrival_s: float | None
    gpus: int

    def metrics(self) -> dict[str, float | int | None]:
        times = list(self.completion_s.values())
        makespan = None
        if self.finish_s and self.first_arrival_s is not None:
            makespan = max(self.finish_s.values()) - self.first_arrival_s
        total = self.rounds * self.gpus
        return {
            "avg_jct_s": float(np.mean(times)) if times else None,
            "makespan_s": makespan,
            "gpu_utilisation": self.busy_gpu_rounds / total if total else 0.0,
            "hp_slo_violations": self.hp_slo_violations,
            "gpus_used": self.gpus_used,
            "finished": len(times),
            "unfinished": len(self.unfinished),
            "rounds": self.rounds,
        }


# ---------------------------------------------------------------- reading the simulation file


def load_simulation(path: str | Path) -> SimulationSpec:
    """Reads a simulation file; a trace path is relative to the file's folder."""
    path = Path(path)
    return parse_simulation(read_json(path, "simulation file"), str(path), path.parent)


def parse_simulation(
    data: Any, source: str = "simulation", base_dir: Path | None = None
) -> SimulationSpec:
    """Validates a parsed simulation document; raises OrionError `SOURCE: field.path: message`."""
    if not isinstance(data, dict):
        raise OrionError(f"{source}: (top level): must be an object")
    fleet_part = {key: value for key, value in data.items() if key != "simulation"}
    fleet = parse_fleet(fleet_part, source)

    def parse(data: dict[str, Any]) -> Simulation:
        if fleet.be:
            raise FieldError("be", "must be empty: BE jobs arrive from simulation.job_mix")
        if "simulation" not in data:
            raise FieldError("simulation", "is required")
        return _simulation(data["simulation"], base_dir or Path("."))

    hint = "see the orion-simulation format in docs/architecture.md"
    return SimulationSpec(fleet, checked(parse, data, source, hint), source)


def _simulation(data: Any, base_dir: Path) -> Simulation:
    path = "simulation"
    spec = obj(data, path, ("round_s", "duration_s", "seed", "arrivals", "job_mix"))
    round_s = number(spec["round_s"], join(path, "round_s"))
    duration_s = number(spec["duration_s"], join(path, "duration_s"), maximum=MAX_DURATION_S)
    if duration_s < round_s:
        raise FieldError(join(path, "duration_s"), f"must be at least round_s ({round_s:g})")
    if duration_s / round_s > MAX_ROUNDS:
        raise FieldError(
            join(path, "round_s"),
            f"gives {duration_s / round_s:,.0f} rounds over duration_s; at most {MAX_ROUNDS:,} "
            f"(round_s at least {duration_s / MAX_ROUNDS:,.6g})",
        )
    seed = integer(spec["seed"], join(path, "seed"), maximum=2**63 - 1)
    arrivals_path = join(path, "arrivals")
    if not isinstance(spec["arrivals"], dict):
        raise FieldError(arrivals_path, "must be an object")
    kind = string(spec["arrivals"].get("kind"), join(arrivals_path, "kind"), ARRIVAL_KINDS)
    trace_path = None
    if kind == "poisson":
        arrivals = obj(spec["arrivals"], arrivals_path, ("kind", "jobs_per_hour"))
        rate = number(
            arrivals["jobs_per_hour"],
            join(arrivals_path, "jobs_per_hour"),
            maximum=MAX_JOBS_PER_HOUR,
        )
        if rate * duration_s / 3600.0 > MAX_JOBS:
            raise FieldError(
                join(arrivals_path, "jobs_per_hour"),
                f"brings about {rate * duration_s / 3600.0:,.0f} jobs over duration_s; at most "
                f"{MAX_JOBS:,} jobs are simulated",
            )
    else:
        arrivals = obj(spec["arrivals"], arrivals_path, ("kind", "path"))
        trace_path = base_dir / string(arrivals["path"], join(arrivals_path, "path"))
    mix = []
    jobs: set[str] = set()
    mix_path = join(path, "job_mix")
    for index, item in enumerate(array(spec["job_mix"], mix_path, nonempty=True)):
        entry_path = join(mix_path, index)
        entry = obj(item, entry_path, ("job", "iterations", "share"), ("weight",))
        job = string(entry["job"], join(entry_path, "job"))
        if job in jobs:
            raise FieldError(join(entry_path, "job"), f"{job!r} is listed twice")
        jobs.add(job)
        mix.append(
            MixEntry(
                job,
                number(entry.get("weight", 1.0), join(entry_path, "weight"), maximum=MAX_WEIGHT),
                number(entry["iterations"], join(entry_path, "iterations"), maximum=MAX_ITERATIONS),
                number(entry["share"], join(entry_path, "share"), maximum=MAX_WEIGHT),
            )
        )
    return Simulation(round_s, duration_s, seed, dict(arrivals), tuple(mix), trace_path)


def check_mix(spec: SimulationSpec, matrices: dict[str, PairMatrix]) -> None:
    """Every job of the mix is a BE job of every kind's matrix (one-line `field: message`)."""
    for index, entry in enumerate(spec.simulation.job_mix):
        for kind, matrix in matrices.items():
            found = matrix.jobs.get(entry.job)
            if found is None or found.kind != "be":
                what = "is not in" if found is None else "is an hp job in"
                raise OrionError(
                    f"{spec.source}: simulation.job_mix[{index}].job: {entry.job!r} {what} the "
                    f"pair matrix for {kind} ({matrix.source})",
                    hint="BE jobs there: "
                    + ", ".join(sorted(n for n, j in matrix.jobs.items() if j.kind == "be")),
                )


# ---------------------------------------------------------------- arrivals


def arrivals(spec: SimulationSpec) -> list[Arrival]:
    """The BE jobs of the run in arrival order: Poisson from the seed, or the trace."""
    sim = spec.simulation
    if sim.arrivals["kind"] == "trace":
        assert sim.trace_path is not None
        return _trace(sim, sim.trace_path)
    rng = np.random.default_rng(sim.seed)
    mean_gap_s = 3600.0 / float(sim.arrivals["jobs_per_hour"])
    shares = np.array([entry.share for entry in sim.job_mix])
    shares = shares / shares.sum()
    jobs: list[Arrival] = []
    clock = float(rng.exponential(mean_gap_s))
    while clock < sim.duration_s:
        entry = sim.job_mix[int(rng.choice(len(sim.job_mix), p=shares))]
        jobs.append(
            Arrival(f"j{len(jobs) + 1:04d}", entry.job, entry.weight, entry.iterations, clock)
        )
        clock += float(rng.exponential(mean_gap_s))
    if not jobs:
        # as for an empty trace: a week of "0 BE jobs" simulated with success says nothing
        rate = float(sim.arrivals["jobs_per_hour"])
        raise OrionError(
            f"simulation.arrivals: {rate:g} jobs per hour over {sim.duration_s:g} s brought no "
            f"job (seed {sim.seed}; about {rate * sim.duration_s / 3600:.3g} expected): a "
            "simulation needs at least one",
            hint="raise simulation.arrivals.jobs_per_hour or simulation.duration_s",
        )
    return jobs


def _trace(sim: Simulation, path: Path) -> list[Arrival]:
    """CSV with a header: ``arrival_s,job`` and optionally ``iterations``; ``job`` in the mix."""
    by_job = {entry.job: entry for entry in sim.job_mix}
    where = f"trace {path}"
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
            columns = set(rows[0]) if rows else set()
    except FileNotFoundError:
        raise OrionError(f"{where} does not exist") from None
    if not rows:
        raise OrionError(
            f"{where} holds no arrivals: a simulation needs at least one job",
            hint="one line per job after the header arrival_s,job[,iterations]",
        )
    if len(rows) > MAX_JOBS:
        raise OrionError(
            f"{where} holds {len(rows):,} arrivals; at most {MAX_JOBS:,} are simulated"
        )
    for column in ("arrival_s", "job"):
        if column not in columns:
            raise OrionError(f"{where}: {column}: column is required")
    jobs = []
    for line, row in enumerate(rows, start=2):
        name = row["job"]
        if name not in by_job:
            raise OrionError(f"{where}: line {line}: job: {name!r} is not in simulation.job_mix")
        try:
            arrival_s = float(row["arrival_s"])
            raw = row.get("iterations") or ""
            iterations = float(raw) if raw.strip() else by_job[name].iterations
        except ValueError:
            message = f"{where}: line {line}: arrival_s/iterations must be numbers"
            raise OrionError(message) from None
        if not (math.isfinite(arrival_s) and arrival_s >= 0):
            raise OrionError(f"{where}: line {line}: arrival_s: must be a number >= 0")
        if not (math.isfinite(iterations) and iterations > 0):
            raise OrionError(f"{where}: line {line}: iterations: must be positive")
        if arrival_s < sim.duration_s:
            jobs.append(Arrival("", name, by_job[name].weight, iterations, arrival_s))
    if not jobs:
        raise OrionError(
            f"{where}: no job arrives before simulation.duration_s ({sim.duration_s:g} s)",
            hint="arrival_s is seconds from the start of the simulation",
        )
    jobs.sort(key=lambda job: job.arrival_s)  # stable: equal times keep file order
    return [
        Arrival(f"j{index + 1:04d}", j.job, j.weight, j.iterations, j.arrival_s)
        for index, j in enumerate(jobs)
    ]


# ---------------------------------------------------------------- outcome of a group on a GPU


def group_outcome(
    matrix: PairMatrix, hp: HpService | None, be: list[Arrival]
) -> tuple[float | None, dict[str, float]]:
    """(predicted HP p99 ms or None, {BE name: iterations per second}) from the pair matrix.

    Raises KeyError when the group was not measured (the policies only form measured groups).
    """
    hp_p99 = None if hp is None else (matrix.jobs[hp.job].alone_p99_ms or 0.0)
    if not be:
        return hp_p99, {}
    if hp is None and len(be) == 1:
        job = be[0]
        return None, {job.name: _iterations_per_s(matrix, job.job, 1.0)}
    pair = matrix.pair(hp.job if hp else None, tuple(j.job for j in be))
    if pair is None:
        raise KeyError("unmeasured group")
    if hp_p99 is not None:
        hp_p99 *= pair.hp_p99_ratio or 1.0
    rates = {j.name: _iterations_per_s(matrix, j.job, pair.be_ratios[j.job]) for j in be}
    return hp_p99, rates


def _iterations_per_s(matrix: PairMatrix, job: str, ratio: float) -> float:
    """A BE job's training iterations per second at ``ratio`` of its alone throughput: the
    matrix counts samples per second, and one iteration is one batch."""
    measured = matrix.jobs[job]
    return (measured.alone_throughput_per_s or 0.0) / measured.batch_size * ratio


def _measured(matrix: PairMatrix, hp: HpService | None, be: list[Arrival]) -> bool:
    if hp is None and len(be) <= 1:
        return True
    if len(be) == 2 and be[0].job == be[1].job:
        return False
    return matrix.pair(hp.job if hp else None, tuple(j.job for j in be)) is not None


# ---------------------------------------------------------------- policies

# A policy: (active jobs in arrival order, what ran last round, round index) -> groups this round
Policy = Callable[[list[Arrival], list[Group], int], list[Group]]


def _hp_first(fleet: Fleet) -> list[Group]:
    """HP services on the first GPUs in index order, one each (the baselines' fixed HP)."""
    n = len(fleet.gpu_kinds())
    if len(fleet.hp) > n:
        raise OrionError(
            f"{len(fleet.hp)} HP services need {len(fleet.hp)} GPUs, the fleet has {n}"
        )
    return [Group(gpu, fleet.hp[gpu] if gpu < len(fleet.hp) else None, ()) for gpu in range(n)]


def _orion_policy(fleet: Fleet, matrices: dict[str, PairMatrix]) -> Policy:
    n = len(fleet.gpu_kinds())
    window = max(0, 2 * n - len(fleet.hp))  # at most two jobs per GPU: more cannot be placed
    cache: dict[tuple[str, ...], list[Group]] = {}

    def place(active: list[Arrival], _last: list[Group], _round: int) -> list[Group]:
        considered = active[:window]
        key = tuple(job.name for job in considered)
        if key not in cache:
            be = tuple(BeJob(job.name, job.job, job.weight) for job in considered)
            plan = solve(Fleet(fleet.gpus, fleet.objective, fleet.hp, be), matrices)
            hp_by_name = {service.name: service for service in fleet.hp}
            groups = []
            for gpu in plan.gpus:
                hp = next((hp_by_name[c.name] for c in gpu.clients if c.role == "hp"), None)
                names = tuple(c.name for c in gpu.clients if c.role == "be")
                groups.append(Group(gpu.index, hp, names))
            cache.clear()  # the set only grows or shrinks: the last plan is the one reused
            cache[key] = groups
        return cache[key]

    return place


def _sticky_policy(
    fleet: Fleet, matrices: dict[str, PairMatrix], fits: Callable[[Group, Arrival], bool]
) -> Policy:
    """Non-preemptive FIFO: running jobs keep their GPU, queued jobs go to the first that fits."""
    base = _hp_first(fleet)
    kinds = fleet.gpu_kinds()

    def place(active: list[Arrival], last: list[Group], _round: int) -> list[Group]:
        alive = {job.name for job in active}
        groups = last or base
        groups = [Group(g.gpu, g.hp, tuple(n for n in g.be if n in alive)) for g in groups]
        placed = {name for g in groups for name in g.be}
        by_name = {job.name: job for job in active}
        for job in active:
            if job.name in placed:
                continue
            for index, group in enumerate(groups):
                members = [by_name[n] for n in group.be]
                matrix = matrices[kinds[index]]
                if fits(group, job) and _measured(matrix, group.hp, [*members, job]):
                    groups[index] = Group(group.gpu, group.hp, (*group.be, job.name))
                    placed.add(job.name)
                    break
        return groups

    return place


def _gavel_policy(fleet: Fleet) -> Policy:
    """Max-min fair time shares of isolated GPUs: the least-served jobs run, one per GPU."""
    base = _hp_first(fleet)
    free = [g.gpu for g in base if g.hp is None]
    served: dict[str, int] = {}

    def place(active: list[Arrival], _last: list[Group], _round: int) -> list[Group]:
        order = sorted(range(len(active)), key=lambda i: (served.get(active[i].name, 0), i))
        chosen = [active[i].name for i in order[: len(free)]]
        for name in chosen:
            served[name] = served.get(name, 0) + 1
        groups = list(base)
        for gpu, name in zip(free, chosen, strict=False):
            groups[gpu] = Group(gpu, None, (name,))
        return groups

    return place


def make_policy(name: str, fleet: Fleet, matrices: dict[str, PairMatrix]) -> Policy:
    if name == "orion":
        return _orion_policy(fleet, matrices)
    if name == "one-gpu-per-job":
        return _sticky_policy(fleet, matrices, lambda g, _j: g.hp is None and not g.be)
    if name == "packing-blind":
        return _sticky_policy(fleet, matrices, lambda g, _j: len(g.be) + (g.hp is not None) < 2)
    if name == "gavel-isolated":
        return _gavel_policy(fleet)
    raise OrionError(f"unknown policy {name!r}", hint=f"policies: {', '.join(POLICIES)}")


# ---------------------------------------------------------------- the round loop


RoundProgress = Callable[[str, int, int], None]
"""Told ``(policy, rounds done, most rounds)`` after each round of a policy's simulation."""


def run_policy(
    name: str,
    spec: SimulationSpec,
    matrices: dict[str, PairMatrix],
    jobs: list[Arrival],
    progress_of_rounds: RoundProgress | None = None,
) -> PolicyResult:
    """Simulates one policy on ``jobs`` round by round until every job is done (or stuck);
    ``progress_of_rounds`` hears of each round (a week of a large fleet takes minutes)."""
    fleet, sim = spec.fleet, spec.simulation
    kinds = fleet.gpu_kinds()
    policy = make_policy(name, fleet, matrices)
    remaining = {job.name: job.iterations for job in jobs}
    finish: dict[str, float] = {}
    pending = sorted(jobs, key=lambda j: j.arrival_s)
    by_name = {job.name: job for job in jobs}
    active: list[Arrival] = []
    last: list[Group] = []
    rounds = busy = used = violations = 0
    arrival_rounds = math.ceil(sim.duration_s / sim.round_s)
    # jobs left after the arrivals drain for at most MAX_ROUNDS more rounds: a job that would
    # need longer is reported unfinished rather than simulated for hours
    max_rounds = min(arrival_rounds * (_DRAIN_FACTOR + 1), arrival_rounds + MAX_ROUNDS)
    next_job = 0
    while rounds < max_rounds:
        start = rounds * sim.round_s
        while next_job < len(pending) and pending[next_job].arrival_s <= start:
            active.append(pending[next_job])
            next_job += 1
        if not active and next_job >= len(pending):
            break
        groups = policy(active, last, rounds)
        last = groups
        progress = False
        in_use = 0
        for group in groups:
            if group.hp is None and not group.be:
                continue
            in_use += 1
            members = [by_name[n] for n in group.be]
            hp_p99, rates = group_outcome(matrices[kinds[group.gpu]], group.hp, members)
            if group.hp is not None and hp_p99 is not None and hp_p99 > group.hp.p99_slo_ms:
                violations += 1
            for job_name, rate in rates.items():
                if rate <= 0:
                    continue
                progress = True
                left = remaining[job_name]
                if rate * sim.round_s >= left:
                    finish[job_name] = start + left / rate
                    remaining[job_name] = 0.0
                else:
                    remaining[job_name] = left - rate * sim.round_s
        busy += in_use
        used = max(used, in_use)
        rounds += 1
        if progress_of_rounds is not None:
            progress_of_rounds(name, rounds, max_rounds)
        active = [job for job in active if job.name not in finish]
        if active and not progress and next_job >= len(pending):
            break  # nothing runs and nothing more arrives: the rest never finishes
    return PolicyResult(
        name,
        {n: t - by_name[n].arrival_s for n, t in finish.items()},
        finish,
        tuple(job.name for job in jobs if job.name not in finish),
        rounds,
        busy,
        used,
        violations,
        pending[0].arrival_s if pending else None,
        len(kinds),
    )


def simulate(
    spec: SimulationSpec,
    matrices: dict[str, PairMatrix],
    policies: tuple[str, ...] = POLICIES,
    progress_of_rounds: RoundProgress | None = None,
) -> tuple[list[Arrival], dict[str, PolicyResult]]:
    """Every policy on the same arrivals (``progress_of_rounds``: see :func:`run_policy`)."""
    check_mix(spec, matrices)
    jobs = arrivals(spec)
    return jobs, {
        name: run_policy(name, spec, matrices, jobs, progress_of_rounds) for name in policies
    }


# ---------------------------------------------------------------- output


def summary(
    spec: SimulationSpec, jobs: list[Arrival], results: dict[str, PolicyResult]
) -> dict[str, Any]:
    """The `orion-simulation` document (version 1)."""
    sim = spec.simulation
    return {
        "format": FORMAT,
        "version": VERSION,
        "source": spec.source,
        "seed": sim.seed,
        "settings": {
            "round_s": sim.round_s,
            "duration_s": sim.duration_s,
            "arrivals": sim.arrivals,
            "job_mix": [
                {"job": e.job, "weight": e.weight, "iterations": e.iterations, "share": e.share}
                for e in sim.job_mix
            ],
            "objective": spec.fleet.objective,
            "gpus": [{"kind": g.kind, "count": g.count} for g in spec.fleet.gpus],
            "hp": [s.name for s in spec.fleet.hp],
        },
        "jobs": len(jobs),
        "metrics": {name: result.metrics() for name, result in results.items()},
        "completion_times_s": {
            name: [result.completion_s[j.name] for j in jobs if j.name in result.completion_s]
            for name, result in results.items()
        },
    }


def write_outputs(document: dict[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    """``simulation.json`` and ``simulation_jct_cdf.png`` (CDF of completion times per policy)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = make_folder(out_dir, "simulation folder")
    json_path = out / "simulation.json"
    write_text_atomic(json_path, json.dumps(document, indent=2) + "\n")
    figure = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for name, times in document["completion_times_s"].items():
        if not times:
            continue
        hours = np.sort(np.array(times)) / 3600.0
        axes.step(hours, np.arange(1, len(hours) + 1) / len(hours), where="post", label=name)
    axes.set_xlabel("job completion time (h)")
    axes.set_ylabel("fraction of jobs")
    axes.set_ylim(0, 1.02)
    axes.set_title(f"job completion times ({document['jobs']} jobs, seed {document['seed']})")
    axes.grid(alpha=0.3)
    if axes.lines:
        axes.legend(loc="lower right")
    figure.tight_layout()
    png_path = out / "simulation_jct_cdf.png"
    write_with(png_path, lambda path: figure.savefig(path, dpi=120))
    return json_path, png_path
