"""The figures of a suite run: every HP x BE program pair, each sharing mode, against alone.

A suite run (``benchmarks/suite.py``) is a folder with ``suite.json`` (the suite it ran) and one
folder per run: ``round<R>/gpu<G>/<cell>/cell.json`` with the programs' own records beside it.
A cell is either one program alone or one pair sharing the GPU under one mode. Every program
records on one clock (Unix seconds), and a cell's ``window`` is the span in which every program
in it was past its warm-up, so:

- the HP's p99 is taken over the requests that arrived in its cell's window, against the same
  program's alone run in the same round on the same GPU, and combined over rounds as the
  headline's ratios are (:func:`reporting.stats.ratio_over_rounds_ci`: geometric mean, two-level
  bootstrap interval); where every round's HP served the same arrivals as its alone run (the
  suite's services start their schedule over where each window opens), request by request
  (:func:`paired_requests`, :func:`reporting.stats.paired_ratio_over_rounds_ci`), so that a
  burst of arrivals that queues in both runs does not widen the interval;
- a BE program's throughput is its work done over exactly that window (interpolated between its
  progress records), against its alone run the same way.

A cell that failed, or whose alone runs failed, is carried as failed with its reason, never as a
number. The suite is scored by its **worst** pair under orion and the geometric mean over pairs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from orion_common.errors import OrionError
from reporting.stats import (
    bootstrap_percentile_ci,
    mean_statistic,
    paired_ratio_over_rounds_ci,
    percentile_statistic,
    ratio_over_rounds_ci,
    throughput_statistic,
)

SUITE_FORMAT = "orion-suite/1"
SUMMARY_FORMAT = "orion-suite-summary/2"
"""/2: ``be_together`` is the sum of the BE programs' ratios (it was their mean in /1)."""
ROUND_RECORD = "round.json"
"""Each round's own record (``roundN/round.json``): the digest of the orion source it ran, the
device, when it started and the runner's arguments; rounds added to a run later bring their own."""
ORION_MODE = "orion"
ORION_VARIANTS = {
    "orion-mps": ("--sharing", "mps"),
    "orion-cpu-gate": ("--be-gate", "cpu"),
    "orion-quiet": ("--hp-quiet-us", "300"),
    "orion-mps-be70": ("--sharing", "mps", "--be-sm-percent", "70"),
    "orion-mps-be50": ("--sharing", "mps", "--be-sm-percent", "50"),
    "orion-mps-be50-quiet": ("--sharing", "mps", "--be-sm-percent", "50", "--hp-quiet-us", "300"),
    "reef-mps-be50": ("--policy", "reef", "--sharing", "mps", "--be-sm-percent", "50"),
    "priority-mps-be50": ("--policy", "priority", "--sharing", "mps", "--be-sm-percent", "50"),
    "priority-mps-be30": ("--policy", "priority", "--sharing", "mps", "--be-sm-percent", "30"),
    "orion-mps-hp-own": ("--sharing", "mps", "--be-sm-percent", "50", "--hp-context", "own"),
    "orion-mps-hp-own-quiet": (
        *("--sharing", "mps", "--be-sm-percent", "50", "--hp-context", "own"),
        *("--hp-quiet-us", "300"),
    ),
    "orion-mps-hp-chooses": (
        *("--sharing", "mps", "--be-sm-percent", "50", "--hp-context", "own"),
        *("--hp-quiet-us", "300"),
    ),
    "orion-mps-hp-chooses-spacing50": (
        *("--sharing", "mps", "--be-sm-percent", "50", "--hp-context", "own"),
        *("--hp-quiet-us", "300", "--be-gate-spacing-us", "50"),
    ),
    "orion-mps-hp-chooses-spacing25": (
        *("--sharing", "mps", "--be-sm-percent", "50", "--hp-context", "own"),
        *("--hp-quiet-us", "300", "--be-gate-spacing-us", "25"),
    ),
    "orion-mps-hp-chooses-spacing300": (
        *("--sharing", "mps", "--be-sm-percent", "50", "--hp-context", "own"),
        *("--hp-quiet-us", "300", "--be-gate-spacing-us", "300"),
    ),
    "orion-mps-hp-chooses-cpu-gate": (
        *("--sharing", "mps", "--be-sm-percent", "50", "--hp-context", "own"),
        *("--hp-quiet-us", "300", "--be-gate", "cpu"),
    ),
    "orion-mps-hp-chooses-request-loop": (
        *("--sharing", "mps", "--be-sm-percent", "50", "--hp-context", "own"),
        *("--hp-quiet-us", "300", "--loop-reads", "requests"),
    ),
    "orion-mps-hp-chooses-be70": (
        *("--sharing", "mps", "--be-sm-percent", "70", "--hp-context", "own"),
        *("--hp-quiet-us", "300"),
    ),
    "orion-mps-hp-own-allsm": ("--sharing", "mps", "--hp-context", "own", "--hp-quiet-us", "300"),
    "orion-hp-server": ("--hp-context", "mps"),
    "orion-be100": ("--be-sm-percent", "100"),
    "orion-hp-server-be100": ("--hp-context", "mps", "--be-sm-percent", "100"),
    "orion-q100": ("--queue-limit-us", "100"),
    "orion-spacing1": ("--be-gate-spacing-us", "1"),
    "orion-quiet-cpu": ("--hp-quiet-us", "300", "--be-gate", "cpu"),
}
"""orion with settings away from its defaults (``orion up`` options, the policy among them): rows of
their own, never scored as the suite's orion nor counted as a competitor."""
HP_ALONE_PAIR = "no-be"
"""What stands for the BE programs in the name of a pair that has none (``encoder-eager+no-be``):
the HP alone under each mode, against the same program alone without orion. It measures what a
mode itself costs the HP (the preload library on every launch, the daemon, MPS's own cost), the
floor under every pair of that HP; so it is shown with the pairs but never scored as one."""
HP_CHOOSES_MODES = frozenset(
    {
        ORION_MODE,  # orion's defaults run BE under MPS, so an HP may choose the server
        "orion-mps-hp-chooses",
        "orion-mps-hp-chooses-spacing50",
        "orion-mps-hp-chooses-spacing25",
        "orion-mps-hp-chooses-spacing300",
        "orion-mps-hp-chooses-cpu-gate",
        "orion-mps-hp-chooses-request-loop",
        "orion-mps-hp-chooses-be70",
        "orion-be100",
    }
)
"""The modes whose HP joins with its program's own ``--hp-context`` (``hp_context`` in the suite
file), as a service's owner who measured it would start it; elsewhere the daemon's holds."""
COMPETITOR_MODES = ("timeslice", "mps", "mps-priority")
MODES = (ORION_MODE, *ORION_VARIANTS, *COMPETITOR_MODES)
VARIANT_NOTES = {
    "orion-quiet": "BE waits out a 300-us quiet spell of the HP",
    "orion-mps-be70": "BE kernels on 70% of the SMs",
    "orion-mps-be50": "BE kernels on half the SMs",
    "orion-mps-be50-quiet": "BE on half the SMs, and out of the HP's gaps shorter than 300 us",
    "reef-mps-be50": "BE on half the SMs, and never beside an HP kernel",
    "priority-mps-be50": "an SM partition: every client in the MPS server, BE kernels on half "
    "the SMs beside the HP's, held by nothing but stream priorities",
    "priority-mps-be30": "the same partition with BE on 30% of the SMs",
    "orion-mps-hp-own": "BE clients under MPS on half the SMs, the HP in a context of its own",
    "orion-mps-hp-own-quiet": "the same, and BE out of the HP's gaps shorter than 300 us",
    "orion-mps-hp-chooses": "the same, and each HP's daemon started, and the HP joined, with "
    "the --hp-context its program names in the suite file (BE keeps every SM beside an HP in "
    "its own context)",
    "orion-mps-hp-chooses-spacing50": "hp-chooses with BE's gate waits 50 us of its work apart "
    "(so an arriving HP request finds at most that much BE work let through)",
    "orion-mps-hp-chooses-spacing25": "the same, 25 us apart",
    "orion-mps-hp-chooses-spacing300": "the same, 300 us apart (fewer waits for BE)",
    "orion-mps-hp-chooses-cpu-gate": "hp-chooses with held BE launches waiting in their thread, "
    "so no BE stream waits on the GPU (resident in the server's context) when an HP request comes",
    "orion-mps-hp-chooses-request-loop": "hp-chooses with the latency loop reading the HP's "
    "requests timed whole against its requests alone, not its launches one at a time",
    "orion-mps-hp-chooses-be70": "hp-chooses with BE kernels on 70% of the SMs beside an HP in "
    "the MPS server (the graph encoder's JAX trainer kept 0.57-0.59 of alone on half of them)",
    "orion-mps-hp-own-allsm": "BE clients under MPS on every SM, the HP in a context of its own "
    "(time-sliced against them, never beside their kernels), BE out of its gaps under 300 us",
    "orion-hp-server": "orion's defaults with every HP in the MPS server (no context switch per "
    "request; what the graph encoder chooses), BE at the default SM share beside it (half the "
    "SMs until 2026-12-02, every SM since)",
    "orion-be100": "orion's defaults with BE kernels on every SM beside an HP that chose the "
    "MPS server (as a BE client that joined before it has them; the default since 2026-12-02)",
    "orion-hp-server-be100": "orion's defaults with every HP in the MPS server and BE kernels "
    "on every SM beside it, held by orion's gates alone (orion-hp-server since 2026-12-02)",
    "orion-q100": "BE queue bound and gate spacing fixed at 100 us, the latency loop off",
    "orion-spacing1": "a BE gate wait per queue limit of BE work, as before the 100-us default",
    "orion-quiet-cpu": "quiet spell, BE held on the CPU",
}
MODE_TEXT = {
    ORION_MODE: "orion up (defaults)",
    **{
        mode: " ".join(("orion up", *options))
        + (f" ({VARIANT_NOTES[mode]})" if mode in VARIANT_NOTES else "")
        for mode, options in ORION_VARIANTS.items()
    },
    "timeslice": "plain processes (time slicing)",
    "mps": "MPS",
    "mps-priority": "MPS, BE clients at lower priority",
}
"""What each mode is, as the suite runner's ``--help`` lists them."""
NEIGHBOURS_IDLE = "idle"
"""The round name of the neighbour check: the first GPU's HP alone while the other GPUs idle,
against its alone run of round 0, when every GPU was busy with a pair of its own."""
TARGET_HP_P99_RATIO = 1.25
"""The suite's target (issue "bound every best-effort program"): worst pair's HP p99 at most
1.25x of alone ..."""
TARGET_BE_TOGETHER = 0.6
"""... with the BE programs together at least 0.6 of alone (:attr:`PairFigures.be_together`)."""
REFERENCE_FASTER_BELOW = 0.95
"""An HP whose mean service time beside BE work is under this share of alone, its whole interval
included, ran slower alone than with BE beside it, which sharing the GPU cannot cause: its alone
run is a slow reference (an eager service's host thread, or the GPU, idling between requests and
slow to wake), so its p99 ratio reads low. Seen on the H200s: the eager encoder served at
0.82-0.91x of an alone run whose median was 40% above the round before's."""
REFERENCE_SPREAD_ABOVE = TARGET_HP_P99_RATIO
"""An HP whose alone p99 differs by more than this factor between rounds: its reference moved by
more than the target allows a mode to cost it, and a ratio over rounds mixes the two."""


def is_suite_run(folder: Path) -> bool:
    """Whether ``folder`` holds a suite run (its ``suite.json``)."""
    path = folder / "suite.json"
    if not path.is_file():
        return False
    try:
        return json.loads(path.read_text()).get("format") == SUITE_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


@dataclass
class Cell:
    """One run of a suite: a program alone or a pair under a mode, in one round on one GPU."""

    folder: Path
    record: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.record.get("status") == "ok"

    @property
    def window(self) -> tuple[float, float]:
        start, end = self.record["window"]
        return float(start), float(end)

    def output(self, client: str) -> Path:
        return self.folder / self.record["clients"][client]["out"]


def load_cells(folder: Path) -> list[Cell]:
    """Every ``cell.json`` under ``folder`` (rounds and GPUs in any number)."""
    cells = []
    for path in sorted(folder.glob("round*/gpu*/*/cell.json")):
        cells.append(Cell(path.parent, json.loads(path.read_text())))
    return cells


def _read(path: Path) -> pd.DataFrame:
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.is_file():
            return pd.read_csv(candidate)
    raise FileNotFoundError(f"{path} is missing")


PAIRED_WITHIN_S = 5e-6
"""Two windows' requests are the same arrival where their times from their windows' openings
agree this closely: both are one schedule's offsets (``program_io.Schedule``), written to the
microsecond, while two arrivals of a Poisson schedule at 100/s fall this close one time in 2,000."""
PAIRED_SHARE_AT_LEAST = 0.9
"""A shared cell's HP is compared request by request with its alone run only where this share of
either window's requests paired (cells run before the HP's arrivals were paired pair by chance
only, and are compared as independent samples)."""


def hp_requests(cell: Cell, client: str) -> pd.DataFrame:
    """The requests that arrived inside the cell's window: their arrival from the window's
    opening (``offset_s``), latency (ms, from the arrival) and service time (ms, a request's
    start to its end: its wait in the service's own queue left out). The mean service time
    against alone is the slowdown the HP's GPU work took on, which orion's felt slowdown
    estimates from its launches: the yardstick that figure is read against."""
    start, end = cell.window
    frame = _read(cell.output(client))
    inside = frame.loc[(frame["arrival_unix_s"] >= start) & (frame["arrival_unix_s"] < end)]
    return pd.DataFrame(
        {
            "offset_s": (inside["arrival_unix_s"] - start).to_numpy(dtype=float),
            "latency_ms": inside["latency_ms"].to_numpy(dtype=float),
            "service_ms": (inside["end_unix_s"] - inside["start_unix_s"]).to_numpy(dtype=float)
            * 1e3,
        }
    )


def hp_latencies(cell: Cell, client: str) -> np.ndarray:
    """Latencies (ms) of the requests that arrived inside the cell's window."""
    return hp_requests(cell, client)["latency_ms"].to_numpy()


def hp_service_ms(cell: Cell, client: str) -> np.ndarray:
    """Service times (ms) of the requests that arrived inside the cell's window."""
    return hp_requests(cell, client)["service_ms"].to_numpy()


def paired_requests(shared: pd.DataFrame, alone: pd.DataFrame) -> pd.DataFrame | None:
    """The requests of two windows that were the same arrival (:data:`PAIRED_WITHIN_S`), one
    row each: ``latency_ms``, ``service_ms`` of the shared run and ``alone_latency_ms``,
    ``alone_service_ms``; None where too few paired (:data:`PAIRED_SHARE_AT_LEAST`)."""
    if shared.empty or alone.empty:
        return None
    matched = pd.merge_asof(
        shared.sort_values("offset_s"),
        alone.sort_values("offset_s")
        .rename(columns=lambda c: f"alone_{c}")
        .assign(offset_s=lambda frame: frame["alone_offset_s"]),
        on="offset_s",
        direction="nearest",
        tolerance=PAIRED_WITHIN_S,
    ).dropna(subset=["alone_offset_s"])
    # One alone request for one shared request: the first shared one to claim it keeps it.
    matched = matched.drop_duplicates(subset="alone_offset_s")
    if len(matched) < PAIRED_SHARE_AT_LEAST * max(len(shared), len(alone)):
        return None
    columns = ["latency_ms", "service_ms", "alone_latency_ms", "alone_service_ms"]
    return matched[columns].reset_index(drop=True)


def be_work_rows(cell: Cell, client: str) -> np.ndarray:
    """Rows (seconds, work) covering exactly the cell's window: the progress between successive
    records, the first and last cut at the window's edges by linear interpolation. A program
    that records requests instead of progress (a closed-loop inference server) counts requests.
    Summed, work over seconds is the throughput in the window."""
    start, end = cell.window
    frame = _read(cell.output(client))
    if "samples" in frame.columns:
        times = frame["unix_s"].to_numpy(dtype=float)
        work = frame["samples"].to_numpy(dtype=float)
    else:
        times = np.sort(frame["end_unix_s"].to_numpy(dtype=float))
        work = np.arange(1, len(times) + 1, dtype=float)
    if len(times) < 2 or times[0] > start or times[-1] < end:
        raise ValueError(
            f"{client}'s record in {cell.folder} does not cover the window "
            f"({start:.1f}-{end:.1f}); it ran {times[0]:.1f}-{times[-1]:.1f}"
            if len(times)
            else f"{client}'s record in {cell.folder} is empty"
        )
    inner = times[(times > start) & (times < end)]
    edges = np.concatenate(([start], inner, [end]))
    done = np.interp(edges, times, work)
    return np.column_stack((np.diff(edges), np.diff(done)))


@dataclass
class PairFigures:
    """One pair under one mode, over the rounds in which it and its alone runs succeeded."""

    pair: str
    mode: str
    order: str
    hp: str
    bes: list[str]
    rounds: int = 0
    hp_requests: list[int] = field(default_factory=list)
    hp_p99_ms: list[float] = field(default_factory=list)
    hp_p99_alone_ms: list[float] = field(default_factory=list)
    hp_p99_ratio: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    be_ratios: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    hp_interference: list[float] = field(default_factory=list)
    hp_felt_slowdown: list[float] = field(default_factory=list)
    hp_felt_p99: list[float] = field(default_factory=list)
    hp_felt_p99_over_alone: list[float] = field(default_factory=list)
    hp_start_felt_p99: list[float] = field(default_factory=list)
    hp_request_slowdown: list[float] = field(default_factory=list)
    """The HP's requests timed whole by the daemon (``request_slowdown``, and their p99 over
    alone's, ``request_p99_over_alone``), sample by sample."""
    hp_request_p99_over_alone: list[float] = field(default_factory=list)
    hp_gpu_ms_per_request: list[float] = field(default_factory=list)
    """The HP's request shape as the daemon last showed it in each round (``request_shape``,
    counted since the HP joined): what suits its ``--hp-context``."""
    hp_launches_per_request: list[float] = field(default_factory=list)
    loop: list[dict[str, Any]] = field(default_factory=list)
    """The daemon's latency loop as each status sample showed it (``latency_control``)."""
    hp_service_mean_ratio: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    hp_arrivals_paired: bool = False
    """Whether every round's HP served the same arrivals as its alone run, so that its ratios
    were taken request by request (:func:`paired_requests`), over the requests that paired."""

    @property
    def be_together(self) -> float:
        """What the BE programs keep, together, of running alone: the sum of their ratios (each
        program's throughput over its own alone run), the GPU work they get done in units of a
        GPU to themselves. Summed, not averaged: two BE programs sharing a GPU with no HP at all
        each keep about half of alone, so a mean could never reach 0.6 whatever orion did (plain
        processes, the HP among them, gave 0.44 + 0.53 in the every-mode round)."""
        values = [ratio[0] for ratio in self.be_ratios.values()]
        return float(np.sum(values)) if values else math.nan

    def as_dict(self) -> dict[str, Any]:
        def interval(values: tuple[float, float, float]) -> dict[str, float | None]:
            point, low, high = (None if not math.isfinite(v) else round(v, 4) for v in values)
            return {"ratio": point, "low": low, "high": high}

        return {
            "pair": self.pair,
            "mode": self.mode,
            "order": self.order,
            "hp": self.hp,
            "be": self.bes,
            "rounds": self.rounds,
            "hp_requests": self.hp_requests,
            "hp_p99_ms": [round(v, 3) for v in self.hp_p99_ms],
            "hp_p99_alone_ms": [round(v, 3) for v in self.hp_p99_alone_ms],
            "hp_p99_ratio": interval(self.hp_p99_ratio),
            "be_ratios": {name: interval(value) for name, value in self.be_ratios.items()},
            "be_together": None if math.isnan(self.be_together) else round(self.be_together, 4),
            "hp_interference_shown": _mean(self.hp_interference),
            "hp_felt_slowdown_shown": _mean(self.hp_felt_slowdown),
            "hp_felt_p99_shown": _mean(self.hp_felt_p99),
            "hp_felt_p99_over_alone_shown": _mean(self.hp_felt_p99_over_alone),
            "hp_start_felt_p99_shown": _mean(self.hp_start_felt_p99),
            "hp_request_slowdown_shown": _mean(self.hp_request_slowdown),
            "hp_request_p99_over_alone_shown": _mean(self.hp_request_p99_over_alone),
            "hp_gpu_ms_per_request_shown": _mean(self.hp_gpu_ms_per_request),
            "hp_launches_per_request_shown": _mean(self.hp_launches_per_request),
            "hp_service_mean_ratio": interval(self.hp_service_mean_ratio),
            "hp_arrivals_paired": self.hp_arrivals_paired,
            **loop_figures(self.loop),
            "reference_doubts": self.reference_doubts(),
            "failures": self.failures,
        }

    def reference_doubts(self) -> list[str]:
        """Why this pair's HP ratio may not measure the mode: its alone run was a slow
        reference (:data:`REFERENCE_FASTER_BELOW`), or moved between rounds
        (:data:`REFERENCE_SPREAD_ABOVE`). Shown beside the ratio, never used to change it."""
        doubts = []
        point, low, high = self.hp_service_mean_ratio
        if math.isfinite(high) and high < REFERENCE_FASTER_BELOW:
            doubts.append(
                f"served faster beside BE than alone (mean service {point:.2f}x "
                f"[{low:.2f}, {high:.2f}]): a slow alone run, so the p99 ratio reads low"
            )
        alone = self.hp_p99_alone_ms
        if len(alone) >= 2 and max(alone) > REFERENCE_SPREAD_ABOVE * min(alone):
            doubts.append(
                f"alone p99 moved between rounds, {min(alone):.2f} to {max(alone):.2f} ms"
            )
        return doubts


def _alone_cells(cells: list[Cell]) -> dict[tuple[int, int, str], Cell]:
    return {
        (c.record["round"], c.record["gpu"], c.record["program"]): c
        for c in cells
        if c.record["kind"] == "alone"
    }


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


def _status_figure(cell: Cell, hp_name: str, *keys: str) -> list[float]:
    """Every value ``orion status --json`` showed for the HP's field at ``keys`` (one name, or
    a path into an object such as ``request_shape``) in the cell's window (``interference``, or
    ``felt_slowdown`` where the daemon measures it): what a user watching the daemon was told,
    to set beside the p99 ratio measured."""
    path = cell.folder / "status_samples.json"
    if not path.is_file():
        return []
    values = []
    for sample in json.loads(path.read_text()):
        for client in sample.get("clients", []):
            if client.get("name") != hp_name:
                continue
            value: Any = client
            for key in keys:
                value = value.get(key) if isinstance(value, dict) else None
            if value is not None:
                values.append(float(value))
    return values


def _loop_samples(cell: Cell) -> list[dict[str, Any]]:
    """The latency loop's state in each of the cell's status samples that showed one."""
    path = cell.folder / "status_samples.json"
    if not path.is_file():
        return []
    return [
        sample["latency_control"]
        for sample in json.loads(path.read_text())
        if isinstance(sample.get("latency_control"), dict)
    ]


def loop_figures(loop: list[dict[str, Any]]) -> dict[str, float | None]:
    """What the latency loop did over a pair's cells, from its status samples: the BE queue bound
    it chose (median), the floor slowdown it found (mean; null before it had one, and for runs
    from before it was shown), and the share of samples that said the target was out of reach."""
    bounds = [float(s["queue_limit_us"]) for s in loop if s.get("queue_limit_us") is not None]
    floors = [float(s["floor_slowdown"]) for s in loop if s.get("floor_slowdown") is not None]
    out = [str(s.get("state", "")).startswith("out of reach") for s in loop]
    return {
        "loop_queue_limit_us_shown": round(float(np.median(bounds)), 3) if bounds else None,
        "loop_floor_slowdown_shown": _mean(floors),
        "loop_out_of_reach_share": round(float(np.mean(out)), 4) if out else None,
    }


def pair_figures(cells: list[Cell]) -> list[PairFigures]:
    """Each pair under each mode that the run holds, with its intervals over rounds."""
    alone = _alone_cells(cells)
    cells = [c for c in cells if c.record["round"] != NEIGHBOURS_IDLE]
    groups: dict[tuple[str, str], list[Cell]] = {}
    for cell in cells:
        if cell.record["kind"] == "shared":
            groups.setdefault((cell.record["pair"], cell.record["mode"]), []).append(cell)
    figures = []
    for (pair, mode), group in sorted(groups.items(), key=lambda item: _pair_key(item[0])):
        first = group[0].record
        result = PairFigures(pair, mode, first["order"], first["hp"], list(first["be"]))
        hp_pairs: list[tuple[np.ndarray, np.ndarray]] = []
        service_pairs: list[tuple[np.ndarray, np.ndarray]] = []
        paired_rounds: list[pd.DataFrame | None] = []
        be_pairs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {b: [] for b in result.bes}
        for cell in sorted(group, key=lambda c: c.record["round"]):
            where = f"round {cell.record['round']}, GPU {cell.record['gpu']}"
            if not cell.ok:
                result.failures.append(f"{where}: {cell.record.get('error', 'failed')}")
                continue
            key = (cell.record["round"], cell.record["gpu"])
            references = {name: alone.get((*key, name)) for name in [result.hp, *result.bes]}
            missing = [n for n, c in references.items() if c is None or not c.ok]
            if missing:
                result.failures.append(f"{where}: no alone run of {', '.join(missing)}")
                continue
            try:
                shared_requests = hp_requests(cell, "hp")
                alone_requests = hp_requests(references[result.hp], "hp")
                shared_hp = shared_requests["latency_ms"].to_numpy()
                alone_hp = alone_requests["latency_ms"].to_numpy()
                served = (
                    shared_requests["service_ms"].to_numpy(),
                    alone_requests["service_ms"].to_numpy(),
                )
                be_rows = {
                    name: (be_work_rows(cell, name), be_work_rows(references[name], name))
                    for name in result.bes
                }
            except (OSError, ValueError, KeyError) as error:
                result.failures.append(f"{where}: {error}")
                continue
            if len(shared_hp) == 0 or len(alone_hp) == 0:
                result.failures.append(f"{where}: no HP request in the window")
                continue
            hp_pairs.append((shared_hp, alone_hp))
            service_pairs.append(served)
            paired_rounds.append(paired_requests(shared_requests, alone_requests))
            for name, rows in be_rows.items():
                be_pairs[name].append(rows)
            result.rounds += 1
            result.hp_requests.append(len(shared_hp))
            result.hp_p99_ms.append(float(np.percentile(shared_hp, 99)))
            result.hp_p99_alone_ms.append(float(np.percentile(alone_hp, 99)))
            result.hp_interference += _status_figure(cell, "hp", "interference")
            result.hp_felt_slowdown += _status_figure(cell, "hp", "felt_slowdown")
            result.hp_felt_p99 += _status_figure(cell, "hp", "felt_p99")
            result.hp_felt_p99_over_alone += _status_figure(cell, "hp", "felt_p99_over_alone")
            result.hp_start_felt_p99 += _status_figure(cell, "hp", "start_felt_p99")
            result.hp_request_slowdown += _status_figure(cell, "hp", "request_slowdown")
            result.hp_request_p99_over_alone += _status_figure(cell, "hp", "request_p99_over_alone")
            # Counted since the HP joined: the last sample holds the most of them.
            for shown, key in (
                (result.hp_gpu_ms_per_request, "gpu_ms_per_request"),
                (result.hp_launches_per_request, "launches_per_request"),
            ):
                shown += _status_figure(cell, "hp", "request_shape", key)[-1:]
            result.loop += _loop_samples(cell)
        result.hp_arrivals_paired = bool(paired_rounds) and all(
            rows is not None for rows in paired_rounds
        )
        if result.hp_arrivals_paired:
            # Every round served its alone run's arrivals: compared request by request.
            rounds = [rows for rows in paired_rounds if rows is not None]
            result.hp_p99_ratio = paired_ratio_over_rounds_ci(
                [rows[["latency_ms", "alone_latency_ms"]] for rows in rounds],
                percentile_statistic(99.0),
            )
            result.hp_service_mean_ratio = paired_ratio_over_rounds_ci(
                [rows[["service_ms", "alone_service_ms"]] for rows in rounds], mean_statistic
            )
        elif hp_pairs:
            result.hp_p99_ratio = ratio_over_rounds_ci(hp_pairs, percentile_statistic(99.0))
            result.hp_service_mean_ratio = ratio_over_rounds_ci(service_pairs, mean_statistic)
        if hp_pairs:
            result.be_ratios = {
                name: ratio_over_rounds_ci(rows, throughput_statistic)
                for name, rows in be_pairs.items()
            }
        figures.append(result)
    return figures


def _pair_key(key: tuple[str, str]) -> tuple[str, int]:
    pair, mode = key
    return pair, MODES.index(mode) if mode in MODES else len(MODES)


def rounds_run(folder: Path) -> list[dict[str, Any]]:
    """What each round recorded of itself (``ROUND_RECORD``); rounds run before rounds recorded
    themselves have none."""
    records = []
    for path in sorted(folder.glob(f"round*/{ROUND_RECORD}")):
        record = json.loads(path.read_text())
        device = record.get("device") or {}
        records.append(
            {
                "round": record.get("round"),
                "orion_source": record.get("orion_source"),
                "gpus": sorted(set((device.get("gpus") or {}).values())),
                "driver": device.get("driver"),
            }
        )
    return records


def mixed_rounds(records: list[dict[str, Any]]) -> str:
    """Why these rounds cannot be summarised as one run ('' when they can): they ran different
    orion sources, or on GPUs of different kinds. Rounds on different hosts of one kind pool: each
    shared run is set against its own round's alone runs."""
    for key, what in (("orion_source", "orion sources"), ("gpus", "GPU kinds")):
        seen: dict[str, list[str]] = {}
        for record in records:
            if record[key]:
                value = str(record[key])[:12] if key == "orion_source" else ", ".join(record[key])
                seen.setdefault(value, []).append(str(record["round"]))
        if len(seen) > 1:
            parts = "; ".join(f"{value} in round {', '.join(r)}" for value, r in seen.items())
            return f"the rounds ran different {what} ({parts})"
    return ""


def summarise(folder: Path) -> dict[str, Any]:
    """``summary.json``'s content: per pair and mode its figures, the worst pair under orion and
    the geometric mean over pairs, and whether each pair is ahead of each competitor. Refuses a
    run whose rounds ran different orion sources or GPU kinds."""
    suite = json.loads((folder / "suite.json").read_text())
    recorded = rounds_run(folder)
    problem = mixed_rounds(recorded)
    if problem:
        raise OrionError(
            f"{folder}: {problem}", hint="summarise each in a folder of its own (move its rounds)"
        )
    cells = load_cells(folder)
    figures = pair_figures(cells)
    by_pair: dict[str, dict[str, PairFigures]] = {}
    for figure in figures:
        if figure.bes:  # an HP alone under a mode is its floor, not a pair to score
            by_pair.setdefault(figure.pair, {})[figure.mode] = figure
    run_modes = {figure.mode for figure in figures}
    by_mode = {
        mode: mode_score([modes[mode] for modes in by_pair.values() if mode in modes])
        for mode in sorted(run_modes, key=lambda m: MODES.index(m) if m in MODES else len(MODES))
    }
    orion = by_mode.get(ORION_MODE) or mode_score([])
    ahead = {}
    for pair, modes in by_pair.items():
        mine = modes.get(ORION_MODE)
        ahead[pair] = {
            mode: (
                None
                if mine is None
                or not math.isfinite(mine.hp_p99_ratio[0])
                or not math.isfinite(other.hp_p99_ratio[0])
                else bool(mine.hp_p99_ratio[0] < other.hp_p99_ratio[0])
            )
            for mode, other in modes.items()
            if mode in COMPETITOR_MODES
        }
    failed_cells = [
        {
            "cell": str(cell.folder.relative_to(folder)),
            "error": cell.record.get("error"),
            "log": cell.record.get("log"),
        }
        for cell in cells
        if not cell.ok
    ]
    neighbours = neighbour_check(cells)
    target_met = None
    if orion["worst_pair"] is not None:
        target_met = bool(
            orion["pairs_meeting_both"] == orion["pairs"]
            and all(v is not False for modes in ahead.values() for v in modes.values())
        )
    return {
        "format": SUMMARY_FORMAT,
        "suite": suite.get("name", "suite"),
        "device": suite.get("device"),
        "window_s": suite.get("window_s"),
        "rounds": sorted({c.record["round"] for c in cells}, key=str),
        "rounds_run": recorded,
        "worst_pair": orion["worst_pair"],
        "geomean_hp_p99_ratio": orion["geomean_hp_p99_ratio"],
        "target": {
            "hp_p99_ratio_at_most": TARGET_HP_P99_RATIO,
            "be_together_at_least": TARGET_BE_TOGETHER,
            "ahead_of_every_competitor": True,
            "met": target_met,
        },
        "ahead_of": ahead,
        "modes": {mode: text for mode, text in MODE_TEXT.items() if mode in run_modes},
        "by_mode": by_mode,
        "pairs": [figure.as_dict() for figure in figures],
        "failed_cells": failed_cells,
        "neighbour_check": neighbours,
    }


def mode_score(figures: list[PairFigures]) -> dict[str, Any]:
    """How one mode did over the pairs it ran, scored as the suite is: its worst pair (the
    highest HP p99 over alone), the geometric mean of those ratios, and how many pairs are
    within :data:`TARGET_HP_P99_RATIO`, keep BE together at :data:`TARGET_BE_TOGETHER` or
    more, and do both. A pair without a ratio (its cell failed) counts as missing both."""
    scored = [f for f in figures if math.isfinite(f.hp_p99_ratio[0])]
    worst = max(scored, key=lambda f: f.hp_p99_ratio[0], default=None)
    within = {f.pair for f in scored if f.hp_p99_ratio[0] <= TARGET_HP_P99_RATIO}
    be_kept = {f.pair for f in scored if f.be_together >= TARGET_BE_TOGETHER}
    return {
        "pairs": len(figures),
        "worst_pair": None
        if worst is None
        else {"pair": worst.pair, "hp_p99_ratio": worst.as_dict()["hp_p99_ratio"]},
        "geomean_hp_p99_ratio": round(
            float(np.exp(np.mean([np.log(f.hp_p99_ratio[0]) for f in scored]))), 4
        )
        if scored
        else None,
        "pairs_within_target": len(within),
        "pairs_with_be_at_target": len(be_kept),
        "pairs_meeting_both": len(within & be_kept),
    }


def neighbour_check(cells: list[Cell]) -> dict[str, Any] | None:
    """The HP alone with the other GPUs idle against the same program alone in round 0 beside
    busy GPUs: p99s with their intervals, and whether the intervals overlap."""
    alone = _alone_cells(cells)
    for (round_, gpu, program), idle in alone.items():
        busy = alone.get((0, gpu, program))
        if round_ != NEIGHBOURS_IDLE or busy is None or not (idle.ok and busy.ok):
            continue
        idle_ci = bootstrap_percentile_ci(hp_latencies(idle, "hp"))
        busy_ci = bootstrap_percentile_ci(hp_latencies(busy, "hp"))
        return {
            "gpu": gpu,
            "program": program,
            "p99_ms_neighbours_idle": [round(v, 3) for v in idle_ci],
            "p99_ms_neighbours_busy": [round(v, 3) for v in busy_ci],
            "intervals_overlap": bool(idle_ci[1] <= busy_ci[2] and busy_ci[1] <= idle_ci[2]),
        }
    return None


def _shown_slowdown(pair: dict[str, Any]) -> str:
    """What `orion status` told about the HP, to read beside its measured p99 ratio: the felt
    slowdown (and the bound of its p99, where the daemon showed one) where the daemon measures
    it, else the GPU-time interference."""
    felt, gpu_time = pair.get("hp_felt_slowdown_shown"), pair.get("hp_interference_shown")
    p99, over_alone = pair.get("hp_felt_p99_shown"), pair.get("hp_felt_p99_over_alone_shown")
    starts = pair.get("hp_start_felt_p99_shown")
    requests = pair.get("hp_request_slowdown_shown")
    request_p99 = pair.get("hp_request_p99_over_alone_shown")
    whole = (
        f"requests {requests:.2f}"
        + (f", p99 over alone {request_p99:.2f}" if request_p99 is not None else "")
        + "; "
        if requests is not None
        else ""
    )
    if felt is not None:
        return (
            whole
            + f"{felt:.2f} felt"
            + (f", p99 >= {p99:.2f}" if p99 is not None else "")
            + (f", p99 over alone {over_alone:.2f}" if over_alone is not None else "")
            + (f", request starts p99 >= {starts:.2f}" if starts is not None else "")
        )
    return whole + ("-" if gpu_time is None else f"{gpu_time:.2f} GPU time")


def summary_table(summary: dict[str, Any]) -> pd.DataFrame:
    """One row per pair and mode, with texts for the terminal and Markdown."""

    def text(value: dict[str, Any] | None) -> str:
        if not value or value.get("ratio") is None:
            return "failed"
        if value.get("low") is None:
            return f"{value['ratio']:.2f}"
        return f"{value['ratio']:.2f} [{value['low']:.2f}, {value['high']:.2f}]"

    rows = []
    for pair in summary["pairs"]:
        rows.append(
            {
                "pair": pair["pair"],
                "order": pair["order"],
                "mode": pair["mode"],
                "rounds": pair["rounds"],
                "hp_p99_ratio": text(pair["hp_p99_ratio"]),
                "be_ratios": ", ".join(
                    f"{name} {text(value)}" for name, value in pair["be_ratios"].items()
                )
                or "-",
                "status_slowdown": _shown_slowdown(pair),
                "service_mean_ratio": text(pair.get("hp_service_mean_ratio")),
                "failures": len(pair["failures"]),
            }
        )
    return pd.DataFrame(rows)
