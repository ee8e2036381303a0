"""`orion pairs`: measure the pair matrix of a list of jobs on one GPU.

A jobs file (format below, :func:`parse_pairs_jobs`) lists HP and BE jobs. Each round runs every
job alone (policy ``dedicated``) first, then every HP x BE pair and every BE x BE pair under the
chosen policy, so each pair has its own round's reference and slow drift of the machine spreads
over every cell alike (as in benchmarks/matrix.py). The three parts are kept apart so they can be
tested without a GPU:

- :func:`planned_cells`: the ordered cells (pure);
- :func:`run_pairs`: runs the cells not yet complete through the runner benchmarks/matrix.py
  uses too (``placement.cells``: an index so an interrupted invocation resumes, a time budget
  that stops before the first cell that would not fit, a ``run_cell`` callable for tests);
- :func:`build_pair_matrix`: the ``orion-pair-matrix`` document from the complete runs (pure),
  each ratio the geometric mean over rounds of shared / same-round alone with its two-level
  bootstrap interval (``reporting.stats.ratio_over_rounds_ci``).

Jobs file::

    {"policy": "orion", "settings": {"queue_limit_us": 200}, "duration_s": 60, "rounds": 3,
     "jobs": {"search": {"kind": "hp", "workload": "resnet50", "mode": "infer", "batch_size": 4,
                         "cuda_graph": true, "rate_per_s": 80},
              "train": {"kind": "be", "workload": "resnet50", "mode": "train", "batch_size": 32}}}
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from colocation.jobs_schema import CLIENT_NAME_PATTERN, MAX_BATCH_SIZE, MAX_DURATION_S
from colocation.policies import POLICIES as POLICY_TABLE
from orion_common.atomic_io import write_json_atomic
from orion_common.errors import OrionError
from orion_common.json_fields import (
    FieldError,
    checked,
    integer,
    load_checked,
    number,
    obj,
    string,
)
from placement.cells import (
    PAIRS_INDEX,
    CellIndex,
    PlannedCell,
    RunCell,
    run_cell_real,
    run_cells,
)
from placement.fleet import MAX_RATE_PER_S
from placement.jobs_files import jobs_client, run_sharing, run_thresholds, shared_policy
from placement.pair_matrix import FORMAT, VERSION, parse_pair_matrix
from reporting.metrics import HP_QUANTILE, POLICY_DEDICATED, latency_sample, work_sample
from reporting.rundata import ClientInfo, RunData
from reporting.stats import (
    DEFAULT_RESAMPLES,
    as_sample,
    percentile_statistic,
    ratio_over_rounds_ci,
    throughput_statistic,
)
from scheduler_core.settings import SHARING

POLICIES = ("orion", "mps-priority", "mps-share")
SETTINGS = ("queue_limit_us", "unknown_kernel_us", "be_sm_percent", "sharing")
"""``queue_limit_us`` / ``unknown_kernel_us``: the scheduler thresholds (run.thresholds);
``be_sm_percent``: every BE client's SM share (mps-share); ``sharing``: how a policy that runs
either way shares the GPU (run.sharing; its default when not given, written into the matrix so a
plan runs the jobs as measured)."""


@dataclass(frozen=True)
class PairsJob:
    name: str
    kind: str
    workload: str
    mode: str
    batch_size: int
    dtype: str = "fp32"
    cuda_graph: bool = False
    rate_per_s: float | None = None


@dataclass(frozen=True)
class PairsSpec:
    policy: str
    settings: dict[str, Any]
    duration_s: float
    rounds: int
    jobs: dict[str, PairsJob]

    @property
    def hp(self) -> list[str]:
        return [name for name, job in self.jobs.items() if job.kind == "hp"]

    @property
    def be(self) -> list[str]:
        return [name for name, job in self.jobs.items() if job.kind == "be"]

    def record(self) -> dict[str, Any]:
        """What the measurements depend on (the index refuses to mix other jobs in)."""
        return {
            "policy": self.policy,
            "settings": self.settings,
            "duration_s": self.duration_s,
            "jobs": {name: vars(job) for name, job in self.jobs.items()},
        }


@dataclass(frozen=True)
class Cell:
    """One run: a job alone (``dedicated``) or two co-runners under the spec's policy."""

    round: int
    members: tuple[str, ...]

    @property
    def alone(self) -> bool:
        return len(self.members) == 1

    @property
    def name(self) -> str:
        return f"alone:{self.members[0]}" if self.alone else "+".join(self.members)

    @property
    def key(self) -> str:
        return f"{self.name}#{self.round}"


HINT = "see `orion pairs --help`"


def load_pairs_jobs(path: str | Path) -> PairsSpec:
    return load_checked(path, "pairs jobs file", _parse_spec, HINT)


def parse_pairs_jobs(data: Any, source: str = "pairs jobs file") -> PairsSpec:
    """Validates a jobs file; raises OrionError `SOURCE: field.path: message`."""
    return checked(_parse_spec, data, source, HINT)


def _parse_spec(data: Any) -> PairsSpec:
    top = obj(data, "", ("policy", "jobs"), ("settings", "duration_s", "rounds"))
    policy = string(top["policy"], "policy", POLICIES)
    settings = top.get("settings") or {}
    if not isinstance(settings, dict):
        raise FieldError("settings", "must be an object")
    obj(settings, "settings", (), SETTINGS)
    for key in ("queue_limit_us", "unknown_kernel_us"):
        if key in settings:
            number(settings[key], f"settings.{key}")
    if "be_sm_percent" in settings:
        share = integer(settings["be_sm_percent"], "settings.be_sm_percent", minimum=1)
        if share > 100:
            raise FieldError("settings.be_sm_percent", f"must be at most 100, not {share}")
        if policy != "mps-share":
            raise FieldError("settings.be_sm_percent", "applies only to policy mps-share")
    if "sharing" in settings:
        string(settings["sharing"], "settings.sharing", SHARING.choices)
        problem = POLICY_TABLE[policy].sharing_problem(settings["sharing"])
        if problem:
            raise FieldError("settings.sharing", problem)
    elif len(POLICY_TABLE[policy].sharings) > 1:
        settings = {**settings, "sharing": POLICY_TABLE[policy].sharing}
    duration = number(top.get("duration_s", 60), "duration_s", maximum=MAX_DURATION_S)
    rounds = integer(top.get("rounds", 3), "rounds", minimum=1, maximum=100)
    raw_jobs = top["jobs"]
    if not isinstance(raw_jobs, dict) or not raw_jobs:
        raise FieldError("jobs", "must be a non-empty object of job name to job")
    jobs = {name: _parse_job(name, spec) for name, spec in raw_jobs.items()}
    kinds = [job.kind for job in jobs.values()]
    if kinds.count("be") < 1 or (kinds.count("be") < 2 and "hp" not in kinds):
        raise FieldError("jobs", "must hold at least one BE job and one more job to pair it with")
    return PairsSpec(policy, dict(settings), duration, rounds, jobs)


def _parse_job(name: str, spec: Any) -> PairsJob:
    path = f"jobs.{name}"
    if not CLIENT_NAME_PATTERN.fullmatch(name):
        raise FieldError(path, "a job name is 1-32 letters, digits, '_' or '-'")
    spec = obj(
        spec,
        path,
        ("kind", "workload", "mode", "batch_size"),
        ("dtype", "cuda_graph", "rate_per_s"),
    )
    kind = string(spec["kind"], f"{path}.kind", ("hp", "be"))
    workload = string(spec["workload"], f"{path}.workload")
    mode = string(spec["mode"], f"{path}.mode", ("infer", "train"))
    batch_size = integer(
        spec["batch_size"], f"{path}.batch_size", minimum=1, maximum=MAX_BATCH_SIZE
    )
    dtype = string(spec.get("dtype", "fp32"), f"{path}.dtype", ("fp32", "bf16"))
    if kind == "be":
        for key in ("cuda_graph", "rate_per_s"):
            if key in spec:
                raise FieldError(f"{path}.{key}", "applies only to HP jobs")
        if mode != "train":
            raise FieldError(
                f"{path}.mode",
                "must be train for a BE job (its throughput is measured from training iterations)",
            )
        return PairsJob(name, kind, workload, mode, batch_size, dtype)
    if mode != "infer":
        raise FieldError(f"{path}.mode", "must be infer for an HP job")
    if "rate_per_s" not in spec:
        raise FieldError(f"{path}.rate_per_s", "is required for an HP job")
    rate = number(spec["rate_per_s"], f"{path}.rate_per_s", maximum=MAX_RATE_PER_S)
    graph = spec.get("cuda_graph", False)
    if not isinstance(graph, bool):
        raise FieldError(f"{path}.cuda_graph", "must be true or false")
    return PairsJob(name, kind, workload, mode, batch_size, dtype, graph, rate)


# (a) planning -----------------------------------------------------------------------------------


def pair_names(spec: PairsSpec) -> list[tuple[str, ...]]:
    """Every HP x BE pair (HP order, then BE order), then every BE x BE pair."""
    pairs = [(hp, be) for hp in spec.hp for be in spec.be]
    return pairs + list(itertools.combinations(spec.be, 2))


def planned_cells(spec: PairsSpec) -> list[Cell]:
    """The cells in the order they run: round by round, each job alone first, then the pairs."""
    cells: list[Cell] = []
    for round_ in range(1, spec.rounds + 1):
        cells += [Cell(round_, (name,)) for name in spec.jobs]
        cells += [Cell(round_, members) for members in pair_names(spec)]
    return cells


def cell_jobs(spec: PairsSpec, cell: Cell, runs_dir: Path) -> dict[str, Any]:
    """The jobs config of one cell (colocation.config format): its clients named after the jobs."""
    thresholds = run_thresholds(spec.settings)
    share = None if cell.alone else spec.settings.get("be_sm_percent")
    clients = [
        jobs_client(name, spec.jobs[name].kind, spec.jobs[name], spec.jobs[name].rate_per_s, share)
        for name in cell.members
    ]
    policy = (
        POLICY_DEDICATED
        if cell.alone
        else shared_policy(spec.policy, any(spec.jobs[n].kind == "hp" for n in cell.members))
    )
    return {
        "run": {
            "policy": policy,
            **({} if cell.alone else run_sharing(policy, spec.settings)),
            "duration_s": spec.duration_s,
            "warmup_steps": 20,
            "seed": 1,
            "output_dir": str(runs_dir),
            "thresholds": {} if cell.alone else thresholds,
        },
        "clients": clients,
    }


def check_cells(spec: PairsSpec, runs_dir: Path) -> None:
    """Every cell of round 1 validated as `orion colocate` will validate it (workload names,
    CUDA graphs on workloads that can be captured, ...), so a mistake in the jobs file is said
    before anything asks for a GPU; later rounds repeat round 1's cells."""
    from colocation.config import parse_jobs

    for cell in planned_cells(spec):
        if cell.round > 1:
            break
        parse_jobs(cell_jobs(spec, cell, runs_dir), Path.cwd(), source=f"cell {cell.name}")


# (b) running ------------------------------------------------------------------------------------


def planned_runs(spec: PairsSpec, folder: Path) -> list[PlannedCell]:
    """The planned cells with their jobs configs, for :func:`placement.cells.run_cells`."""
    return [
        PlannedCell(cell.key, cell_jobs(spec, cell, folder / "runs"))
        for cell in planned_cells(spec)
    ]


def load_index(folder: Path, spec: PairsSpec) -> CellIndex:
    """The index of ``folder`` (a new one when there is none); refuses one made for other jobs."""
    return CellIndex.load(folder, PAIRS_INDEX, spec.record())


def run_pairs(
    spec: PairsSpec,
    folder: Path,
    *,
    time_budget_s: float | None = None,
    run_cell: RunCell = run_cell_real,
    progress: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Runs the cells of ``spec`` not yet complete in ``folder``; True when none is left."""
    return run_cells(
        load_index(folder, spec),
        planned_runs(spec, folder),
        time_budget_s=time_budget_s,
        run_cell=run_cell,
        progress=progress,
        clock=clock,
    )


def load_cell_runs(folder: Path, spec: PairsSpec) -> dict[Cell, RunData]:
    """The complete runs of the index, by cell."""
    from reporting import load_run

    index = load_index(folder, spec)
    runs: dict[Cell, RunData] = {}
    for cell in planned_cells(spec):
        path = index.complete(None, cell.key)
        if path is not None:
            runs[cell] = load_run(path)
    return runs


# (c) the pair matrix ----------------------------------------------------------------------------


def _client(run: RunData, name: str) -> ClientInfo | None:
    return next((c for c in run.clients if c.name == name), None)


def _sample(run: RunData, name: str, kind: str) -> np.ndarray | None:
    client = _client(run, name)
    if client is None:
        return None
    sample = latency_sample(run, client) if kind == "hp" else work_sample(run, client)
    if sample is None:
        return None
    sample = as_sample(sample)
    return sample if len(sample) else None


def _statistic(kind: str):
    return percentile_statistic(HP_QUANTILE) if kind == "hp" else throughput_statistic


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) and value > 0 else None


def build_pair_matrix(
    spec: PairsSpec,
    runs: Mapping[Cell, RunData],
    device: str,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """The ``orion-pair-matrix`` document of the complete runs, validated.

    A job's alone figure pools its alone runs over the rounds (HP: p99 of the in-window
    latencies; BE: samples per second of the in-window iterations). A pair's ratio uses the
    rounds with the pair and each member's alone run complete. Jobs never measured alone, and
    pairs without such a round, are left out; raises OrionError when nothing is left.
    """
    alone: dict[str, dict[int, np.ndarray]] = {}
    for cell, run in runs.items():
        if cell.alone:
            name = cell.members[0]
            sample = _sample(run, name, spec.jobs[name].kind)
            if sample is not None:
                alone.setdefault(name, {})[cell.round] = sample
    jobs: dict[str, Any] = {}
    for name, job in spec.jobs.items():
        if name not in alone:
            continue
        pooled = np.concatenate(list(alone[name].values()))
        value = _finite(float(_statistic(job.kind)(pooled[np.newaxis])[0]))
        if value is None:
            del alone[name]
            continue
        figure = {"p99_ms": value} if job.kind == "hp" else {"throughput_per_s": value}
        jobs[name] = {
            "kind": job.kind,
            "workload": job.workload,
            "mode": job.mode,
            "batch_size": job.batch_size,
            "dtype": job.dtype,
            "cuda_graph": job.cuda_graph,
            "alone": figure,
        }
        if job.kind == "hp":
            jobs[name]["rate_per_s"] = job.rate_per_s
    pairs = []
    for members in pair_names(spec):
        if not all(name in jobs for name in members):
            continue
        by_job: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {name: [] for name in members}
        for cell, run in runs.items():
            if cell.members != members:
                continue
            shared = {name: _sample(run, name, spec.jobs[name].kind) for name in members}
            refs = {name: alone[name].get(cell.round) for name in members}
            if any(v is None for v in (*shared.values(), *refs.values())):
                continue
            for name in members:
                by_job[name].append((shared[name], refs[name]))
        if not by_job[members[0]]:
            continue
        ratios: dict[str, tuple[float | None, list[float] | None]] = {}
        for name in members:
            point, lo, hi = ratio_over_rounds_ci(
                by_job[name], _statistic(spec.jobs[name].kind), resamples=resamples, seed=seed
            )
            ci = [lo, hi] if _finite(lo) and _finite(hi) else None
            ratios[name] = (_finite(point), ci)
        if any(point is None for point, _ in ratios.values()):
            continue
        hp = members[0] if spec.jobs[members[0]].kind == "hp" else None
        be = [name for name in members if name != hp]
        pairs.append(
            {
                "hp": hp,
                "be": be,
                "hp_p99_ratio": ratios[hp][0] if hp else None,
                "hp_p99_ratio_ci": ratios[hp][1] if hp else None,
                "be_ratios": {name: ratios[name][0] for name in be},
                "be_ratios_ci": {name: ratios[name][1] for name in be},
            }
        )
    if not jobs:
        raise OrionError("no job has a complete alone run yet: nothing to write")
    document = {
        "format": FORMAT,
        "version": VERSION,
        "device": device,
        "policy": spec.policy,
        "settings": dict(spec.settings),
        "duration_s": spec.duration_s,
        "jobs": jobs,
        "pairs": pairs,
    }
    parse_pair_matrix(document, source=f"pair matrix for {device}")
    return document


def write_pair_matrix(document: dict[str, Any], out: Path) -> Path:
    """``<out>/<device>.json``, validated again and written atomically."""
    parse_pair_matrix(document, source=f"pair matrix for {document.get('device')}")
    path = out / f"{document['device']}.json"
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, document)
    return path
