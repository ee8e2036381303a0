"""Place HP services and BE jobs on a fleet of GPUs: a small exact MILP over measured pairs.

Every feasible (GPU, group) option is enumerated up front: a group is one job alone, an HP
service beside one BE job, or two BE jobs, and only groups whose pair the GPU kind's pair matrix
measured (and, with an HP, whose predicted p99 meets its SLO) are options. One binary variable
per option; each GPU takes at most one option, each HP service exactly one, each BE job at most
one (unplaced BE counts as 0 throughput). scipy.optimize.milp (HiGHS) solves it; objectives with a
tie-break are solved in two stages (the first optimum fixed, then the most BE throughput).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_array

from orion_common.errors import OrionError
from placement.fleet import BeJob, Fleet, HpService
from placement.pair_matrix import MatrixJob, PairMatrix, default_matrix_dir, load_pair_matrix
from placement.plan_file import Plan, PlanClient, PlanGpu

RATE_TOLERANCE = 1e-6
MAX_OPTIONS = 200_000
"""The most (GPU, group) options one plan is solved over. The program has one binary variable
per option; beyond this (a thousand GPUs beside two thousand BE jobs gave billions) it would
take hours and tens of GB, so such a fleet is refused before anything is built."""
SOLVER_TIME_LIMIT_S = 600.0
"""How long HiGHS may search for one optimum before the plan is refused as too hard."""
"""An HP service's rate must be the one its pair was measured at (relative tolerance)."""

_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Option:
    """One group of jobs on one GPU with the figures the pair matrix predicts for it."""

    gpu: int
    kind: str
    hp: HpService | None
    be: tuple[BeJob, ...]
    hp_p99_ms: float | None = None
    hp_p99_upper_ms: float | None = None
    be_ratio: dict[str, float] = field(default_factory=dict)
    be_throughput: dict[str, float] = field(default_factory=dict)

    @property
    def weighted_throughput(self) -> float:
        return sum(job.weight * self.be_throughput[job.name] for job in self.be)


def load_matrices(kinds: list[str], matrix_dir: str | Path | None) -> dict[str, PairMatrix]:
    """The pair matrix `<kind>.json` of every GPU kind, from ``matrix_dir`` (``None``: each
    kind's own ``benchmarks/results/<kind>/pairs``)."""
    matrices: dict[str, PairMatrix] = {}
    for kind in dict.fromkeys(kinds):
        folder = default_matrix_dir(kind) if matrix_dir is None else Path(matrix_dir)
        path = folder / f"{kind}.json"
        try:
            found = path.is_file()
        except OSError as error:  # a kind too long for a file name, say
            raise OrionError(f"no pair matrix for GPU kind {kind!r}: {error.strerror}") from None
        if not found:
            raise OrionError(
                f"no pair matrix for GPU kind {kind!r}: {path} does not exist",
                hint="measure the pairs on that kind of GPU, or point --matrix-dir at the folder "
                "holding <kind>.json",
            )
        matrix = load_pair_matrix(path)
        if matrix.device != kind:
            raise OrionError(f"{path}: device: is {matrix.device!r}, the file name says {kind!r}")
        matrices[kind] = matrix
    return matrices


def check_jobs(fleet: Fleet, matrices: dict[str, PairMatrix]) -> None:
    """Every fleet job is in every kind's matrix, with the right kind."""
    entries: list[tuple[str, str, str]] = [("hp", s.name, s.job) for s in fleet.hp]
    entries += [("be", j.name, j.job) for j in fleet.be]
    for kind, matrix in matrices.items():
        for role, name, job in entries:
            where = f"the pair matrix for {kind} ({matrix.source})"
            if job not in matrix.jobs:
                raise OrionError(
                    f"job {job!r} of {role} {_noun(role)} {name!r} is not in {where}",
                    hint=f"jobs there: {', '.join(sorted(matrix.jobs))}",
                )
            if matrix.jobs[job].kind != role:
                raise OrionError(
                    f"{role} {_noun(role)} {name!r} names job {job!r}, "
                    f"which is a {matrix.jobs[job].kind} job in {where}"
                )
    for service in fleet.hp:
        for kind, matrix in matrices.items():
            measured = matrix.jobs[service.job].rate_per_s
            if measured is not None and not math.isclose(
                service.rate_per_s, measured, rel_tol=RATE_TOLERANCE
            ):
                raise OrionError(
                    f"hp service {service.name!r} asks for {service.rate_per_s:g} requests/s, but "
                    f"job {service.job!r} was measured at {measured:g}/s in the pair matrix for "
                    f"{kind} ({matrix.source}): its p99 at another rate is not known",
                    hint=f"set rate_per_s to {measured:g}, or measure the job at "
                    f"{service.rate_per_s:g}/s with `orion pairs`",
                )


def _noun(role: str) -> str:
    return "service" if role == "hp" else "job"


def _ms(value: float) -> str:
    return str(round(value, 2))


class _TooManyOptions(Exception):
    """More options than a plan is solved over (:data:`MAX_OPTIONS`)."""


class _Options(list[Option]):
    """The options of one GPU kind, refused past ``limit`` as they are enumerated, so that a
    fleet too large to plan never builds its billions of them."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def append(self, option: Option) -> None:
        if len(self) >= self.limit:
            raise _TooManyOptions
        super().append(option)


def _kind_options(fleet: Fleet, kind: str, matrix: PairMatrix, limit: int) -> list[Option]:
    """The feasible groups on one GPU of ``kind`` (``gpu`` left at -1); at most ``limit``."""
    options: list[Option] = _Options(limit)
    fits_alone = {
        s.name for s in fleet.hp if (matrix.jobs[s.job].alone_p99_ms or 0.0) <= s.p99_slo_ms
    }
    for service in fleet.hp:
        if service.name not in fits_alone:
            continue
        alone = matrix.jobs[service.job].alone_p99_ms or 0.0
        options.append(Option(-1, kind, service, (), alone, alone))
        for job in fleet.be:
            pair = matrix.pair(service.job, (job.job,))
            if pair is None or pair.hp_p99_ratio is None:
                continue
            upper = alone * (pair.hp_p99_ratio_safe or pair.hp_p99_ratio)
            if upper > service.p99_slo_ms:
                continue
            ratio = pair.be_ratios[job.job]
            throughput = (matrix.jobs[job.job].alone_throughput_per_s or 0.0) * ratio
            options.append(
                Option(
                    -1,
                    kind,
                    service,
                    (job,),
                    alone * pair.hp_p99_ratio,
                    upper,
                    {job.name: ratio},
                    {job.name: throughput},
                )
            )
    for job in fleet.be:
        throughput = matrix.jobs[job.job].alone_throughput_per_s or 0.0
        options.append(
            Option(-1, kind, None, (job,), None, None, {job.name: 1.0}, {job.name: throughput})
        )
    for i, first in enumerate(fleet.be):
        for second in fleet.be[i + 1 :]:
            if first.job == second.job:
                continue
            pair = matrix.pair(None, (first.job, second.job))
            if pair is None:
                continue
            ratios = {j.name: pair.be_ratios[j.job] for j in (first, second)}
            throughputs = {
                j.name: (matrix.jobs[j.job].alone_throughput_per_s or 0.0) * ratios[j.name]
                for j in (first, second)
            }
            options.append(Option(-1, kind, None, (first, second), None, None, ratios, throughputs))
    return options


def _precheck(fleet: Fleet, matrices: dict[str, PairMatrix]) -> None:
    kinds = fleet.gpu_kinds()
    for service in fleet.hp:
        alone = {kind: m.jobs[service.job].alone_p99_ms or 0.0 for kind, m in matrices.items()}
        if all(p99 > service.p99_slo_ms for p99 in alone.values()):
            where = ", ".join(f"{_ms(p99)} ms on {kind}" for kind, p99 in alone.items())
            raise OrionError(
                f"hp service {service.name!r} (p99 SLO {_ms(service.p99_slo_ms)} ms) cannot meet "
                f"its SLO anywhere: alone its p99 is {where}",
                hint="raise its SLO or add a faster GPU kind to the fleet",
            )
    if len(fleet.hp) > len(kinds):
        raise OrionError(
            f"{len(fleet.hp)} HP services need {len(fleet.hp)} GPUs, the fleet has {len(kinds)}",
            hint="at most one HP service runs on a GPU: add GPUs or move HP services elsewhere",
        )


def _infeasible(fleet: Fleet, matrices: dict[str, PairMatrix]) -> OrionError:
    counts: dict[str, int] = {}
    for kind in fleet.gpu_kinds():
        counts[kind] = counts.get(kind, 0) + 1
    limited = []
    for service in fleet.hp:
        fits = [
            kind
            for kind, m in matrices.items()
            if (m.jobs[service.job].alone_p99_ms or 0.0) <= service.p99_slo_ms
        ]
        if len(fits) < len(matrices):
            gpus = sum(counts[kind] for kind in fits)
            plural = "" if gpus == 1 else "s"
            limited.append(f"{service.name!r} fits only on {', '.join(fits)} ({gpus} GPU{plural})")
    detail = "; ".join(limited) if limited else "the solver found no assignment"
    return OrionError(
        f"no placement puts every HP service on a GPU of its own within its SLO: {detail}"
    )


def _options_per_kind(
    fleet: Fleet, matrices: dict[str, PairMatrix], kinds: list[str]
) -> dict[str, list[Option]]:
    """Each GPU kind's options, refused in one line when all GPUs' together would be more than
    :data:`MAX_OPTIONS` (each kind's options count once per GPU of that kind)."""
    gpus = {kind: kinds.count(kind) for kind in matrices}
    per_kind: dict[str, list[Option]] = {}
    left = MAX_OPTIONS
    try:
        for kind, matrix in matrices.items():
            count = max(gpus[kind], 1)
            per_kind[kind] = _kind_options(fleet, kind, matrix, left // count)
            left -= len(per_kind[kind]) * count
    except _TooManyOptions:
        raise OrionError(
            f"this fleet has more than {MAX_OPTIONS:,} placement options ({len(kinds):,} GPUs, "
            f"each beside the groups of {len(fleet.hp):,} HP services and {len(fleet.be):,} BE "
            "jobs that fit it): too many to solve as one plan",
            hint="plan the fleet in parts: fewer GPUs or BE jobs per fleet file",
        ) from None
    return per_kind


def solve(
    fleet: Fleet,
    matrices: dict[str, PairMatrix],
    objective: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Plan:
    """The optimal plan for ``fleet`` under ``objective`` (default: the fleet file's);
    ``progress`` is told each stage as it starts (the solve of a large fleet takes minutes)."""
    objective = objective or fleet.objective
    check_jobs(fleet, matrices)
    _precheck(fleet, matrices)
    kinds = fleet.gpu_kinds()
    report = progress or (lambda message: None)
    report(f"listing the groups each of {len(kinds):,} GPUs can hold")
    per_kind = _options_per_kind(fleet, matrices, kinds)
    options = [
        Option(gpu, o.kind, o.hp, o.be, o.hp_p99_ms, o.hp_p99_upper_ms, o.be_ratio, o.be_throughput)
        for gpu, kind in enumerate(kinds)
        for o in per_kind[kind]
    ]
    n = len(options)
    report(f"solving over {n:,} options (GPU and group)")
    size = n + 1  # the last variable is t (max-min only; fixed at 0 otherwise)
    # sparse: each option appears in a handful of rows, and a dense matrix of a large fleet
    # would hold (GPUs + jobs) x options numbers, mostly zeros
    entries: tuple[list[int], list[int], list[float]] = ([], [], [])
    lower: list[float] = []
    upper: list[float] = []

    def add(coefficients: dict[int, float], lo: float, hi: float) -> None:
        row = len(lower)
        for index, value in coefficients.items():
            entries[0].append(row)
            entries[1].append(index)
            entries[2].append(value)
        lower.append(lo)
        upper.append(hi)

    by_gpu: dict[int, list[int]] = {gpu: [] for gpu in range(len(kinds))}
    for index, option in enumerate(options):
        by_gpu[option.gpu].append(index)
    for members in by_gpu.values():
        add(dict.fromkeys(members, 1.0), 0.0, 1.0)
    for service in fleet.hp:
        members = [i for i, o in enumerate(options) if o.hp is service]
        add(dict.fromkeys(members, 1.0), 1.0, 1.0)
    for job in fleet.be:
        members = [i for i, o in enumerate(options) if job in o.be]
        add(dict.fromkeys(members, 1.0), 0.0, 1.0)
    # identical GPUs: use them in index order (no change to the optimum, a stable plan)
    for gpu in range(len(kinds) - 1):
        if kinds[gpu] == kinds[gpu + 1]:
            coefficients = dict.fromkeys(by_gpu[gpu], 1.0)
            coefficients.update(dict.fromkeys(by_gpu[gpu + 1], -1.0))
            add(coefficients, 0.0, np.inf)
    t_upper = 0.0
    if objective == "max-min-be" and fleet.be:
        t_upper = max(1.0 / job.weight for job in fleet.be) * max(
            (max(o.be_ratio.values()) for o in options if o.be), default=1.0
        )
        for job in fleet.be:
            coefficients = {n: 1.0}
            for i, o in enumerate(options):
                if job in o.be:
                    coefficients[i] = -o.be_ratio[job.name] / job.weight
            add(coefficients, -np.inf, 0.0)
    value = np.array([o.weighted_throughput for o in options] + [0.0])
    used = np.array([1.0] * n + [0.0])
    t_only = np.zeros(size)
    t_only[n] = 1.0

    def run(cost: np.ndarray) -> np.ndarray:
        rows, columns, values = entries
        matrix = csr_array((values, (rows, columns)), shape=(len(lower), size))
        result = milp(
            c=cost,
            constraints=LinearConstraint(matrix, np.array(lower), np.array(upper)),
            integrality=np.array([1] * n + [0]),
            bounds=Bounds(np.zeros(size), np.array([1.0] * n + [t_upper])),
            options={"time_limit": SOLVER_TIME_LIMIT_S},
        )
        if result.status == 2:
            raise _infeasible(fleet, matrices)
        if result.status == 1:
            raise OrionError(
                f"the MILP solver found no optimum over {n:,} options within "
                f"{SOLVER_TIME_LIMIT_S:g} s",
                hint="plan the fleet in parts: fewer GPUs or BE jobs per fleet file",
            )
        if result.status != 0 or result.x is None:
            raise OrionError(f"the MILP solver stopped without a plan: {result.message}")
        return result.x

    if objective == "max-total-be":
        x = run(-value)
    elif objective == "max-min-be":
        best = run(-t_only)[n]
        add({n: 1.0}, best - _TOLERANCE, np.inf)
        x = run(-value)
    elif objective == "fewest-gpus":
        best = float(used @ run(used))
        add({i: 1.0 for i in range(n)}, 0.0, best + _TOLERANCE)
        x = run(-value)
    else:
        raise OrionError(f"unknown objective {objective!r}")
    chosen = [options[i] for i in range(n) if x[i] > 0.5]
    return _plan(fleet, matrices, objective, kinds, chosen)


def _plan(
    fleet: Fleet,
    matrices: dict[str, PairMatrix],
    objective: str,
    kinds: list[str],
    chosen: list[Option],
) -> Plan:
    on_gpu = {option.gpu: option for option in chosen}
    gpus = []
    ratios: dict[str, float] = {}
    throughput = weighted = 0.0
    for index, kind in enumerate(kinds):
        matrix = matrices[kind]
        option = on_gpu.get(index)
        clients: list[PlanClient] = []
        if option is not None and option.hp is not None:
            job = matrix.jobs[option.hp.job]
            clients.append(
                _plan_client(
                    option.hp.name,
                    job,
                    "hp",
                    cuda_graph=job.cuda_graph,
                    rate_per_s=option.hp.rate_per_s,
                    p99_slo_ms=option.hp.p99_slo_ms,
                    predicted_p99_ms=option.hp_p99_ms,
                    predicted_p99_upper_ms=option.hp_p99_upper_ms,
                )
            )
        for be in option.be if option is not None else ():
            job = matrix.jobs[be.job]
            ratios[be.name] = option.be_ratio[be.name]
            throughput += option.be_throughput[be.name]
            weighted += be.weight * option.be_throughput[be.name]
            clients.append(
                _plan_client(
                    be.name,
                    job,
                    "be",
                    weight=be.weight,
                    predicted_throughput_per_s=option.be_throughput[be.name],
                    predicted_ratio=option.be_ratio[be.name],
                )
            )
        gpus.append(
            PlanGpu(
                index,
                kind,
                matrix.policy,
                dict(matrix.settings),
                tuple(clients),
                matrix.duration_s,
            )
        )
    unplaced = tuple(job.name for job in fleet.be if job.name not in ratios)
    notes = [f"BE job {name!r} is left unplaced: no GPU has room for it" for name in unplaced]
    if unplaced and objective == "max-min-be":
        notes.append(
            "an unplaced BE job has throughput 0, so the minimum BE ratio is 0 and "
            "the plan maximises total BE throughput instead"
        )
    unrecorded = sorted(
        {
            service.name
            for service in fleet.hp
            for matrix in matrices.values()
            if matrix.jobs[service.job].rate_per_s is None
        }
    )
    if unrecorded:
        notes.append(
            f"HP p99 predictions for {', '.join(unrecorded)} assume the request rate the pair "
            "matrix was measured at, which that matrix does not record"
        )
    lengths = sorted({m.duration_s for m in matrices.values() if m.duration_s is not None})
    if lengths:
        notes.append(
            f"predictions are for runs of {' or '.join(f'{x:g}' for x in lengths)} s, as long as "
            "the pair matrix measured each pair: `orion run-plan` runs that long unless told"
        )
    min_ratio = (
        min(ratios.get(job.name, 0.0) / job.weight for job in fleet.be) if fleet.be else None
    )
    totals: dict[str, float | int | None] = {
        "gpus_used": len(chosen),
        "be_throughput_per_s": throughput,
        "weighted_be_throughput_per_s": weighted,
        "min_weighted_be_ratio": min_ratio,
    }
    sources = {kind: m.source for kind, m in matrices.items()}
    return Plan(objective, tuple(gpus), unplaced, totals, tuple(notes), sources)


def _plan_client(
    name: str, job: MatrixJob, role: str, **figures: float | bool | None
) -> PlanClient:
    """A plan's client: the matrix job it runs as measured (workload, mode, batch, dtype), then
    the figures of its role (an HP service's SLO and predicted p99, a BE job's weight and
    predicted throughput), so both roles copy the measured job the same way."""
    return PlanClient(
        name, job.name, role, job.workload, job.mode, job.batch_size, dtype=job.dtype, **figures
    )
