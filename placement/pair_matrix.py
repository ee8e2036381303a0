"""The pair matrix: how jobs slow each other down when two share one GPU of a kind.

Format `orion-pair-matrix`, version 1, one file per device kind (docs/architecture.md). Each job
is measured alone (HP: p99 latency; BE: throughput) and in pairs, HP x BE and BE x BE, as ratios
of shared to alone. :func:`load_pair_matrix` validates the whole file; every problem is one
`field.path: message` line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orion_common.json_fields import (
    FieldError,
    array,
    checked,
    integer,
    interval,
    join,
    load_checked,
    number,
    obj,
    string,
)

if TYPE_CHECKING:
    import pandas as pd

FORMAT = "orion-pair-matrix"
VERSION = 1
JOB_KINDS = ("hp", "be")
MODES = ("infer", "train")
# Where `orion pairs` writes and `orion plan` / `orion simulate` look for <gpu kind>.json
# unless told otherwise: benchmarks/results/<gpu kind>/pairs/, as the committed results lie.
RESULTS_DIR = Path("benchmarks/results")
DEFAULT_MATRIX_DIR_TEXT = "benchmarks/results/<gpu kind>/pairs"


def default_matrix_dir(kind: str) -> Path:
    """The folder holding ``<kind>.json`` (and ``orion pairs``' runs of it) by default."""
    return RESULTS_DIR / kind / "pairs"


@dataclass(frozen=True)
class MatrixJob:
    """One measured job: ``alone_p99_ms`` for an HP job, ``alone_throughput_per_s`` for a BE one."""

    name: str
    kind: str
    workload: str
    mode: str
    batch_size: int
    alone_p99_ms: float | None = None
    alone_throughput_per_s: float | None = None
    dtype: str = "fp32"
    cuda_graph: bool = False  # an HP job served by replaying a CUDA graph
    rate_per_s: float | None = None
    """An HP job's request rate when measured (Poisson arrivals); None in matrices from before
    it was recorded."""


@dataclass(frozen=True)
class Pair:
    """Co-runners measured on one GPU: an HP job with one BE, or two BE jobs (``hp`` None)."""

    hp: str | None
    be: tuple[str, ...]
    hp_p99_ratio: float | None
    hp_p99_ratio_ci: tuple[float, float] | None
    be_ratios: dict[str, float]
    be_ratios_ci: dict[str, tuple[float, float]]

    @property
    def hp_p99_ratio_safe(self) -> float | None:
        """The upper end of the HP p99 ratio's interval when there is one, else the ratio."""
        if self.hp_p99_ratio_ci is not None:
            return max(self.hp_p99_ratio_ci[1], self.hp_p99_ratio or 0.0)
        return self.hp_p99_ratio


@dataclass(frozen=True)
class PairMatrix:
    device: str
    policy: str
    settings: dict[str, Any]
    jobs: dict[str, MatrixJob]
    pairs: tuple[Pair, ...]
    source: str = ""
    duration_s: float | None = None
    """Seconds each cell was measured for (``orion pairs``' ``duration_s``): the predictions hold
    for runs that long (a daemon's first seconds weigh more in a short run). None in matrices
    from before it was recorded."""
    _index: dict[tuple[str | None, frozenset[str]], Pair] = field(
        default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for pair in self.pairs:
            self._index[(pair.hp, frozenset(pair.be))] = pair

    def pair(self, hp: str | None, be: tuple[str, ...]) -> Pair | None:
        """The measured pair of these co-runners (BE order does not matter), or None."""
        return self._index.get((hp, frozenset(be)))


HINT = f"see the {FORMAT} format in docs/architecture.md"


def load_pair_matrix(path: str | Path) -> PairMatrix:
    """Reads and validates one pair-matrix file."""
    return load_checked(path, "pair matrix", lambda data: _parse(data, str(path)), HINT)


def parse_pair_matrix(data: Any, source: str = "pair matrix") -> PairMatrix:
    """Validates a parsed pair-matrix document; raises OrionError `SOURCE: field.path: message`."""
    return checked(lambda data: _parse(data, source), data, source, HINT)


def _parse(data: Any, source: str) -> PairMatrix:
    top = obj(
        data,
        "",
        ("format", "version", "device", "policy", "settings", "jobs", "pairs"),
        ("duration_s",),
    )
    if top["format"] != FORMAT:
        raise FieldError("format", f"must be {FORMAT!r}, not {top['format']!r}")
    if isinstance(top["version"], bool) or top["version"] != VERSION:
        raise FieldError("version", f"must be {VERSION}, not {top['version']!r}")
    device = string(top["device"], "device")
    policy = string(top["policy"], "policy")
    if not isinstance(top["settings"], dict):
        raise FieldError("settings", "must be an object")
    if not isinstance(top["jobs"], dict) or not top["jobs"]:
        raise FieldError("jobs", "must be a non-empty object of job name to job")
    jobs = {name: _job(name, spec) for name, spec in top["jobs"].items()}
    pairs: list[Pair] = []
    seen: dict[tuple[str | None, frozenset[str]], int] = {}
    for index, item in enumerate(array(top["pairs"], "pairs")):
        path = join("pairs", index)
        pair = _pair(item, path, jobs)
        key = (pair.hp, frozenset(pair.be))
        if key in seen:
            raise FieldError(path, f"repeats the co-runners of pairs[{seen[key]}]")
        seen[key] = index
        pairs.append(pair)
    duration = top.get("duration_s")
    return PairMatrix(
        device,
        policy,
        dict(top["settings"]),
        jobs,
        tuple(pairs),
        source,
        None if duration is None else number(duration, "duration_s"),
    )


def _job(name: str, spec: Any) -> MatrixJob:
    path = join("jobs", name)
    string(name, path)
    required = ("kind", "workload", "mode", "batch_size", "alone")
    spec = obj(spec, path, required, ("dtype", "cuda_graph", "rate_per_s"))
    kind = string(spec["kind"], join(path, "kind"), JOB_KINDS)
    workload = string(spec["workload"], join(path, "workload"))
    mode = string(spec["mode"], join(path, "mode"), MODES)
    batch_size = integer(spec["batch_size"], join(path, "batch_size"), minimum=1)
    # How the job ran when measured (matrices from before these keys: fp32, eager).
    dtype = string(spec.get("dtype", "fp32"), join(path, "dtype"), ("fp32", "bf16"))
    graph = spec.get("cuda_graph", False)
    if not isinstance(graph, bool):
        raise FieldError(join(path, "cuda_graph"), "must be true or false")
    alone_path = join(path, "alone")
    if kind == "hp":
        alone = obj(spec["alone"], alone_path, ("p99_ms",))
        p99 = number(alone["p99_ms"], join(alone_path, "p99_ms"))
        rate = spec.get("rate_per_s")
        return MatrixJob(
            name,
            kind,
            workload,
            mode,
            batch_size,
            alone_p99_ms=p99,
            dtype=dtype,
            cuda_graph=graph,
            rate_per_s=None if rate is None else number(rate, join(path, "rate_per_s")),
        )
    if "rate_per_s" in spec:
        raise FieldError(join(path, "rate_per_s"), "applies only to HP jobs")
    alone = obj(spec["alone"], alone_path, ("throughput_per_s",))
    thr = number(alone["throughput_per_s"], join(alone_path, "throughput_per_s"))
    return MatrixJob(
        name, kind, workload, mode, batch_size, alone_throughput_per_s=thr, dtype=dtype
    )


def _pair(item: Any, path: str, jobs: dict[str, MatrixJob]) -> Pair:
    spec = obj(
        item, path, ("hp", "be", "hp_p99_ratio", "be_ratios"), ("hp_p99_ratio_ci", "be_ratios_ci")
    )
    hp = spec["hp"]
    if hp is not None:
        string(hp, join(path, "hp"))
        _expect_job(jobs, hp, "hp", join(path, "hp"))
    be_path = join(path, "be")
    be_list = array(spec["be"], be_path)
    if not 1 <= len(be_list) <= 2:
        raise FieldError(be_path, f"must name one or two BE jobs, not {len(be_list)}")
    if hp is None and len(be_list) != 2:
        raise FieldError(be_path, "must name two BE jobs when hp is null (a BE x BE pair)")
    for position, name in enumerate(be_list):
        string(name, join(be_path, position))
        _expect_job(jobs, name, "be", join(be_path, position))
    if len(set(be_list)) != len(be_list):
        raise FieldError(be_path, "names the same BE job twice")
    be = tuple(be_list)
    ratio_path = join(path, "hp_p99_ratio")
    ci_path = join(path, "hp_p99_ratio_ci")
    if hp is None:
        if spec["hp_p99_ratio"] is not None:
            raise FieldError(ratio_path, "must be null when hp is null")
        if spec.get("hp_p99_ratio_ci") is not None:
            raise FieldError(ci_path, "must be null when hp is null")
        ratio, ratio_ci = None, None
    else:
        ratio = number(spec["hp_p99_ratio"], ratio_path)
        ratio_ci = interval(spec.get("hp_p99_ratio_ci"), ci_path)
    ratios_path = join(path, "be_ratios")
    raw_ratios = spec["be_ratios"]
    if not isinstance(raw_ratios, dict):
        raise FieldError(ratios_path, "must be an object of BE job name to ratio")
    for name in be:
        if name not in raw_ratios:
            raise FieldError(join(ratios_path, name), "is required (one ratio per BE job)")
    for name in raw_ratios:
        if name not in be:
            raise FieldError(join(ratios_path, name), "is not one of this pair's BE jobs")
    be_ratios = {name: number(raw_ratios[name], join(ratios_path, name)) for name in be}
    cis_path = join(path, "be_ratios_ci")
    raw_cis = spec.get("be_ratios_ci") or {}
    if not isinstance(raw_cis, dict):
        raise FieldError(cis_path, "must be an object of BE job name to [lo, hi]")
    be_ratios_ci: dict[str, tuple[float, float]] = {}
    for name, value in raw_cis.items():
        if name not in be:
            raise FieldError(join(cis_path, name), "is not one of this pair's BE jobs")
        bounds = interval(value, join(cis_path, name))
        if bounds is not None:
            be_ratios_ci[name] = bounds
    return Pair(hp, be, ratio, ratio_ci, be_ratios, be_ratios_ci)


def _expect_job(jobs: dict[str, MatrixJob], name: str, kind: str, path: str) -> None:
    if name not in jobs:
        raise FieldError(path, f"job {name!r} is not in jobs")
    if jobs[name].kind != kind:
        raise FieldError(path, f"job {name!r} is a {jobs[name].kind} job, not {kind}")


def to_frame(matrix: PairMatrix) -> pd.DataFrame:
    """One row per (pair, job in it): the pair's co-runners, the job's role, alone figure, ratio."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for index, pair in enumerate(matrix.pairs):
        members = ([pair.hp] if pair.hp else []) + list(pair.be)
        corunners = " + ".join(members)
        if pair.hp is not None:
            job = matrix.jobs[pair.hp]
            ci = pair.hp_p99_ratio_ci
            rows.append(
                {
                    "pair": index,
                    "corunners": corunners,
                    "job": pair.hp,
                    "role": "hp",
                    "alone_p99_ms": job.alone_p99_ms,
                    "alone_throughput_per_s": None,
                    "ratio": pair.hp_p99_ratio,
                    "ratio_lo": ci[0] if ci else None,
                    "ratio_hi": ci[1] if ci else None,
                }
            )
        for name in pair.be:
            ci = pair.be_ratios_ci.get(name)
            rows.append(
                {
                    "pair": index,
                    "corunners": corunners,
                    "job": name,
                    "role": "be",
                    "alone_p99_ms": None,
                    "alone_throughput_per_s": matrix.jobs[name].alone_throughput_per_s,
                    "ratio": pair.be_ratios[name],
                    "ratio_lo": ci[0] if ci else None,
                    "ratio_hi": ci[1] if ci else None,
                }
            )
    columns = [
        "pair",
        "corunners",
        "job",
        "role",
        "alone_p99_ms",
        "alone_throughput_per_s",
        "ratio",
        "ratio_lo",
        "ratio_hi",
    ]
    return pd.DataFrame(rows, columns=columns)
