"""orion's benchmark matrix on one GPU: HP inference beside BE jobs, under every policy.

    python benchmarks/matrix.py --scenario headline-graph
        [--policies dedicated,timeslice,mps,mps-priority,mps-share,priority,reef,orion]
        [--queue-limits default,100,500] [--be-gates cpu,gpu] [--be-graph-gates inside,whole]
        [--mps-share-be 30,50,70] [--sharings mps,timeslice] [--profile-sources offline,online]
        [--hp-alone mps]
        [--repeats 3] [--trace]
        [--duration 60] [--min-requests 5000] [--out DIR] [--time-budget SECONDS]
        [--report-only]

    python benchmarks/matrix.py [--hp resnet50,mobilenet_v2] [--rates low,high]
        [--be resnet50-train,mobilenet_v2-train,bert-train,resnet50-infer] [the options above]

A scenario (``--scenario``, ``SCENARIOS``) is one HP job at one Poisson rate beside one BE job,
with its results in ``benchmarks/results/<gpu>/<scenario>/`` unless --out says otherwise; without
a scenario, --hp x --rates x --be name groups of the same shape (results in
``benchmarks/results/<gpu>/``).

Cells. Every cell is one `orion colocate` run of a policy with its knob settings, named
``<policy>[@<setting>]`` (``dedicated``, ``orion@200us``, ``mps-share@be50``): --queue-limits
sweeps the BE queue bound of the gated policies (reef, orion; ``default`` = derived from the HP
profile, plain cell name), --be-gates where their held BE launches wait (``run.be_gate``: ``cpu``
in the launching thread, ``gpu`` on the GPU, the default; cell ``orion@gpu-gate``),
--be-graph-gates how they hold the BE client's CUDA graphs (``run.be_graph_gate``: ``inside``,
wait nodes in the graph, or ``whole``, each graph admitted whole behind its launch's gate; the
sharing mode's default is the plain cell name, the other is named: ``reef@gpu-gate@whole-graphs``
under MPS, ``orion@gpu-gate@inside-graphs@timeslice`` time-sliced; without the option the jobs
files leave it unset, to the sharing mode's default),
--sharings how the clients of the policies that run either way (reef, orion, quota) share the GPU
(``run.sharing``: ``mps`` or ``timeslice``, separate contexts the driver switches between, cell
``orion@gpu-gate@timeslice``; by default each policy's own mode, set in every cell's jobs),
--profile-sources whether the gated policies' clients use offline profiles (plain cell) or learn
their kernels while they run (``profile_source: online``, cell ``orion@gpu-gate@online``),
--mps-share-be the BE client's SM share under mps-share (the HP client keeps all SMs); other
policies ignore them. --hp-alone adds a cell per policy named that runs the HP client without BE
(``mps@hp-alone``: the MPS floor, what MPS by itself costs the HP against a dedicated GPU).

Rounds. --repeats N runs N rounds; every round runs ``dedicated`` first (always planned), then
every other cell once, in order: A B C A B C. So slow drift of the machine spreads over every
cell alike, and each round's cells are compared with that round's own dedicated run. Round r > 1
names its cells ``<cell>#r``. Cells already complete under --out are skipped, and --time-budget
stops at the first cell that would not fit (keeping the interleaved order), so a long matrix is
run as several invocations of the same command, each one resuming (the cell runner `orion pairs`
uses too: ``placement/cells.py``, which also declares ``matrix.json``).

Window. Each run measures max(--duration, --min-requests / rate) seconds (``run.duration_s``),
so both at least --duration seconds and at least --min-requests HP requests are measured: a p99
needs thousands of requests to be known to within a few percent.

Reports. At the end (and with --report-only) each group of cells gets an `orion report` per round
in DIR/reports/<group>/[round-<r>/], and a summary over the rounds (reporting/benchmark.py):
``summary.json`` (format ``orion-benchmark-summary``), ``summary.md`` and ``tradeoff.png``,
each ratio with its 95 % interval over the rounds. A scenario's summary and its README.md (the
figure and the table first, then the command, device and software) are in the scenario folder;
without a scenario the summaries are in DIR/summaries/<group>/ and DIR/README.md has every group.

Profiles come from the default location (`orion profile` writes there), or from
$ORION_PROFILE_DIR when set.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from colocation.policies import POLICIES, POLICY_NAMES
from orion_common.atomic_io import write_json_atomic
from orion_common.run_format import GATING_POLICIES
from orion_common.sysinfo import gpu_facts, software_summary
from placement.cells import (
    MATRIX_INDEX,
    CellIndex,
    PlannedCell,
    RunCell,
    complete_run,
    run_cell_real,
    run_cells,
)
from postprocess.profile_format import gpu_slug
from reporting import headline, load_run, write_report
from reporting.benchmark import (
    SUMMARY_FILE,
    build_summary,
    plot_summary_tradeoff,
    provenance_markdown,
    summary_markdown,
)
from reporting.rundata import RunData
from scheduler_core.run_state import BE_GATES, BE_GRAPH_GATES, DEFAULT_BE_GATE
from scheduler_core.settings import SHARING
from scheduler_core.sharing import DEFAULT_RUN_BE_GRAPH_GATE

ROOT = Path(__file__).resolve().parents[1]

HP_JOBS: dict[str, dict[str, Any]] = {
    "resnet50": {"workload": "resnet50", "mode": "infer", "batch_size": 4},
    "resnet50-graph": {
        "workload": "resnet50",
        "mode": "infer",
        "batch_size": 4,
        "cuda_graph": True,
    },
    "mobilenet_v2": {"workload": "mobilenet_v2", "mode": "infer", "batch_size": 4},
}
# HP Poisson arrival rates (requests/s). ResNet-50 bs4 alone serves about 350/s on an H100/H200.
RATES = {"low": 80.0, "high": 200.0}
BE_JOBS: dict[str, dict[str, Any]] = {
    "resnet50-train": {"workload": "resnet50", "mode": "train", "batch_size": 32},
    "mobilenet_v2-train": {"workload": "mobilenet_v2", "mode": "train", "batch_size": 64},
    "bert-train": {"workload": "bert", "mode": "train", "batch_size": 8},
    "resnet50-infer": {
        "workload": "resnet50",
        "mode": "infer",
        "batch_size": 4,
        "arrivals": {"kind": "poisson", "rate_per_s": RATES["high"]},
    },
    # The HP graph's model replayed as a CUDA graph as fast as it goes: a BE client whose every
    # launch is a graph (gated inside, docs/scheduler.md).
    "resnet50-graph-infer": {
        "workload": "resnet50",
        "mode": "infer",
        "batch_size": 4,
        "cuda_graph": True,
        "arrivals": {"kind": "closed"},
    },
}
OPT_IN_BE_JOBS = ("resnet50-graph-infer",)
"""BE jobs run only when named (``--be``, or a scenario): not part of the default groups."""
DEDICATED = "dedicated"
GATED_POLICIES = GATING_POLICIES
"""Policies with a BE queue bound and a BE gate, the only ones --queue-limits, --be-gates and
--be-graph-gates apply to."""
ONLINE = "online"
"""``--profile-sources`` value: the gated policies' clients carry no offline profile and are
gated from what the preload library learns while they run (``profile_source: online``)."""
SHARING_POLICIES = tuple(name for name in POLICY_NAMES if len(POLICIES[name].sharings) > 1)
"""Policies that run under MPS or time-sliced, the only ones --sharings applies to."""
SHARE_POLICY = "mps-share"
"""The policy with static SM shares, the only one --mps-share-be applies to."""


@dataclass(frozen=True)
class Group:
    """HP job x HP rate x BE job: the cells of one group differ only in policy and settings."""

    hp: str
    rate: str
    be: str

    @property
    def name(self) -> str:
        return f"{self.hp}-{self.rate}__{self.be}"


@dataclass(frozen=True)
class Scenario:
    """A named group with its own results folder, and what a reader must know about it."""

    name: str
    group: Group
    description: str
    caveat: str | None = None


SCENARIOS = {
    scenario.name: scenario
    for scenario in (
        Scenario(
            "headline-graph",
            Group("resnet50-graph", "low", "resnet50-train"),
            "HP ResNet-50 inference, batch 4, fp32, replayed as a CUDA graph, Poisson 80/s, "
            "beside BE ResNet-50 training, batch 32, fp32.",
        ),
        Scenario(
            "be-graph",
            Group("resnet50-graph", "low", "resnet50-graph-infer"),
            "HP ResNet-50 inference, batch 4, fp32, replayed as a CUDA graph, Poisson 80/s, "
            "beside BE ResNet-50 inference, batch 4, fp32, replayed as a CUDA graph in a closed "
            "loop.",
        ),
        Scenario(
            "host-bound-hp",
            Group("resnet50", "low", "resnet50-train"),
            "HP ResNet-50 inference, batch 4, fp32, launched eagerly, Poisson 80/s, beside BE "
            "ResNet-50 training, batch 32, fp32.",
            caveat="eager HP is bound by the host CPU (alone on an H100 its p99 was 46-52 ms "
            "for about 1.3 ms of GPU work), so its p99 measures the machine's CPU more than "
            "any policy",
        ),
    )
}


@dataclass(frozen=True)
class Cell:
    """A policy with its knob settings: the BE queue bound and where held BE launches wait (gated
    policies), how clients share the GPU (policies that run either way) or the BE client's SM
    share (mps-share). ``None`` leaves the knob at its default."""

    policy: str
    queue_limit_us: float | None = None
    be_sm_percent: int | None = None
    be_gate: str | None = None
    be_graph_gate: str | None = None  # "whole": BE graphs admitted whole, not gated inside
    profile_source: str | None = None  # "online": both clients learned, no offline profile
    sharing: str | None = None
    hp_alone: bool = False  # the HP client without the BE one (``mps@hp-alone``: MPS's floor)

    @property
    def name(self) -> str:
        """``orion``, ``orion@200us``, ``orion@200us@gpu-gate``, ``orion@gpu-gate@timeslice``,
        ``orion@gpu-gate@inside-graphs``, ``mps-share@be50``: the same as the report's run label
        (MPS, the policies' default sharing, and the policy's default BE graph gate there are not
        named)."""
        name = self.policy
        if self.queue_limit_us is not None:
            name += f"@{self.queue_limit_us:g}us"
        if self.be_gate is not None:
            name += f"@{self.be_gate}-gate"
        if self.be_graph_gate not in (None, DEFAULT_RUN_BE_GRAPH_GATE):
            name += f"@{self.be_graph_gate}-graphs"
        if self.sharing == "timeslice":
            name += "@timeslice"
        if self.be_sm_percent is not None:
            name += f"@be{self.be_sm_percent}"
        if self.profile_source == ONLINE:
            name += "@online"
        if self.hp_alone:
            name += "@hp-alone"
        return name


def cell_key(cell: Cell, round_: int = 1) -> str:
    """The cell's name in matrix.json, with the round after ``#`` from the second round on (so
    a one-round matrix keeps plain names)."""
    return cell.name if round_ == 1 else f"{cell.name}#{round_}"


def split_cell_key(key: str) -> tuple[str, int]:
    """``orion@500us#3`` -> (``orion@500us``, 3); a key without a round is round 1."""
    name, _, round_ = key.partition("#")
    return name, int(round_) if round_.isdigit() else 1


def planned_cells(
    policies: Sequence[str],
    queue_limits: Sequence[float | None] = (None,),
    repeats: int = 1,
    mps_share_be: Sequence[int] = (),
    be_gates: Sequence[str | None] = (None,),
    sharings: Sequence[str | None] = (None,),
    profile_sources: Sequence[str | None] = (None,),
    hp_alone: Sequence[str] = (),
    be_graph_gates: Sequence[str | None] = (None,),
) -> list[tuple[int, Cell]]:
    """(round, cell) in the order they run: round by round, ``dedicated`` first in each (planned
    even when not asked for: without it a round has no reference), then the other policies in
    the order given, the gated ones once per queue bound, BE gate, BE graph gate, sharing mode
    and profile source, quota once per sharing mode, and mps-share once per BE share; last the
    HP client alone under each policy of ``hp_alone`` (what the policy's mechanism costs a lone
    HP)."""
    cells: list[Cell] = []
    for policy in dict.fromkeys(policies):
        if policy == DEDICATED:
            continue
        if policy in GATED_POLICIES:
            cells += [
                Cell(
                    policy,
                    queue_limit_us=limit,
                    be_gate=gate,
                    be_graph_gate=graph_gate,
                    sharing=sharing or POLICIES[policy].sharing,
                    profile_source=source,
                )
                for limit in queue_limits
                for gate in be_gates
                for graph_gate in be_graph_gates
                for sharing in sharings
                for source in profile_sources
            ]
        elif policy in SHARING_POLICIES:
            cells += [
                Cell(policy, sharing=sharing or POLICIES[policy].sharing) for sharing in sharings
            ]
        elif policy == SHARE_POLICY and mps_share_be:
            cells += [Cell(policy, be_sm_percent=share) for share in mps_share_be]
        else:
            cells.append(Cell(policy))
    cells += [Cell(policy, hp_alone=True) for policy in dict.fromkeys(hp_alone)]
    return [
        (round_, cell) for round_ in range(1, repeats + 1) for cell in [Cell(DEDICATED), *cells]
    ]


def window_s(duration_s: float, min_requests: int, rate_per_s: float) -> float:
    """Seconds to measure so that both ``duration_s`` and ``min_requests`` HP requests at
    ``rate_per_s`` are reached (``run.duration_s``; the jobs file takes one of duration_s and
    requests, and a duration keeps the BE window equally long)."""
    return max(duration_s, min_requests / rate_per_s if rate_per_s > 0 else 0.0)


def cell_jobs(
    group: Group, cell: Cell, duration_s: float, out: Path, trace: bool = False
) -> dict[str, Any]:
    """The jobs.json of one cell: the group's HP and BE clients under the cell's policy, the BE
    client with ``sm_percent`` when the cell sets a share (the HP client then has all SMs), no BE
    client in an ``hp_alone`` cell.
    ``trace`` records every kernel launch (``run.trace``) in every cell alike, dedicated ones
    included, so the recording's own cost is the same on both sides of each ratio."""
    hp_client = {
        "name": "hp",
        "role": "hp",
        **HP_JOBS[group.hp],
        "arrivals": {"kind": "poisson", "rate_per_s": RATES[group.rate]},
    }
    be_client: dict[str, Any] = {"name": "be", "role": "be", **BE_JOBS[group.be]}
    if cell.be_sm_percent is not None:
        be_client["sm_percent"] = cell.be_sm_percent
    if cell.profile_source == ONLINE:
        hp_client["profile_source"] = be_client["profile_source"] = ONLINE
    return {
        "run": {
            "policy": cell.policy,
            "duration_s": duration_s,
            "warmup_steps": 20,
            "seed": 1,
            "output_dir": str(out / "runs" / group.name),
            "thresholds": {"queue_limit_us": cell.queue_limit_us},
            **({"be_gate": cell.be_gate} if cell.be_gate is not None else {}),
            **({"be_graph_gate": cell.be_graph_gate} if cell.be_graph_gate is not None else {}),
            **({"sharing": cell.sharing} if cell.sharing is not None else {}),
            **({"trace": True} if trace else {}),
        },
        "clients": [hp_client] if cell.hp_alone else [hp_client, be_client],
    }


def groups_of(args: argparse.Namespace) -> list[Group]:
    if args.scenario is not None:
        return [SCENARIOS[args.scenario].group]
    return [Group(hp, rate, be) for hp in args.hp for rate in args.rates for be in args.be]


def cells_of(args: argparse.Namespace) -> list[tuple[int, Cell]]:
    """The (round, cell) plan of a parsed command line (:func:`planned_cells`)."""
    return planned_cells(
        args.policies,
        args.queue_limits,
        args.repeats,
        args.mps_share_be,
        args.be_gates,
        args.sharings,
        args.profile_sources,
        args.hp_alone,
        args.be_graph_gates,
    )


def planned_runs(args: argparse.Namespace) -> list[PlannedCell]:
    """Every group's cells in the order they run, with their jobs configs (a dedicated cell runs
    the HP and BE clients alone one after the other: two phases for the time budget)."""
    planned = []
    for group in groups_of(args):
        duration_s = window_s(args.duration, args.min_requests, RATES[group.rate])
        for round_, cell in cells_of(args):
            planned.append(
                PlannedCell(
                    cell_key(cell, round_),
                    cell_jobs(group, cell, duration_s, args.out, args.trace),
                    group=group.name,
                    phases=2 if cell.policy == DEDICATED else 1,
                )
            )
    return planned


def run_matrix(
    args: argparse.Namespace,
    index: CellIndex,
    run_cell: RunCell = run_cell_real,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Runs the missing cells in planned order within the time budget; True when none is left."""

    def progress(line: str) -> None:
        print(line, flush=True)

    return run_cells(
        index,
        planned_runs(args),
        time_budget_s=args.time_budget,
        run_cell=run_cell,
        progress=progress,
        clock=clock,
    )


def rounds_of(cells: dict[str, str | None]) -> dict[int, dict[str, str | None]]:
    """A group's cells by round: {round: {cell name without round: entry}}."""
    rounds: dict[int, dict[str, str | None]] = {}
    for key, entry in cells.items():
        name, round_ = split_cell_key(key)
        rounds.setdefault(round_, {})[name] = entry
    return dict(sorted(rounds.items()))


def load_rounds(out: Path, cells: dict[str, str | None]) -> dict[int, list[RunData]]:
    """The complete runs of a group by round, dedicated first in each round."""
    loaded: dict[int, list[RunData]] = {}
    for round_, round_cells in rounds_of(cells).items():
        names = sorted(round_cells, key=lambda name: name != DEDICATED)
        runs = [load_run(path) for name in names if (path := complete_run(out, round_cells[name]))]
        if runs:
            loaded[round_] = runs
    return loaded


def summarize_rounds(heads: list[pd.DataFrame]) -> pd.DataFrame:
    """Per cell over the rounds' headline tables: the median, lowest and highest HP p99
    slowdown and BE throughput fraction, and in how many rounds the target was met."""
    table = pd.concat(heads, ignore_index=True)
    table = table[~table["is_baseline"]]
    grouped = table.groupby("run", sort=False)
    return pd.DataFrame(
        {
            "rounds": grouped.size(),
            "slowdown_median": grouped["hp_p99_slowdown"].median(),
            "slowdown_min": grouped["hp_p99_slowdown"].min(),
            "slowdown_max": grouped["hp_p99_slowdown"].max(),
            "fraction_median": grouped["be_throughput_fraction"].median(),
            "fraction_min": grouped["be_throughput_fraction"].min(),
            "fraction_max": grouped["be_throughput_fraction"].max(),
            "target_met": grouped["target_met"].apply(lambda met: sum(v is True for v in met)),
        }
    ).reset_index()


def write_summary(
    rounds: dict[int, list[RunData]],
    folder: Path,
    index: dict[str, Any],
    scenario: Scenario | None,
    group: Group,
) -> dict[str, Any]:
    """summary.json, summary.md and tradeoff.png of one group in ``folder``; the summary."""
    invocations = index.get("invocations") or []
    last = invocations[-1] if invocations else {}
    software = last.get("software") or {}
    gpu_name = next(
        (run.environment.gpu_name for runs in rounds.values() for run in runs),
        None,
    ) or software.get("gpu_name")
    summary = build_summary(
        rounds,
        device={"gpu_name": gpu_name, "slug": gpu_slug(gpu_name) if gpu_name else None},
        command=list(dict.fromkeys(entry["command"] for entry in invocations)),
        date=last.get("date_utc") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        software=software,
        scenario=scenario_record(scenario, group),
    )
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / SUMMARY_FILE, summary)
    plot_summary_tradeoff(summary, folder / "tradeoff.png")
    (folder / "summary.md").write_text(summary_markdown(summary), encoding="utf-8")
    return summary


def scenario_record(scenario: Scenario | None, group: Group) -> dict[str, Any]:
    """What summary.json says about the jobs: the scenario's name, description and caveat when
    there is one, and always the HP job, rate and BE job."""
    return {
        "name": scenario.name if scenario else group.name,
        "description": scenario.description if scenario else None,
        "caveat": scenario.caveat if scenario else None,
        "group": group.name,
        "hp": HP_JOBS.get(group.hp),
        "rate_per_s": RATES.get(group.rate),
        "be": BE_JOBS.get(group.be),
    }


def write_reports(args: argparse.Namespace, index: dict[str, Any]) -> None:
    """Per-round reports and the summary of every group, then the README (module docstring)."""
    scenario = SCENARIOS[args.scenario] if args.scenario else None
    sections: list[str] = []
    links: list[str] = []
    environment = None
    for group_name, cells in index["cells"].items():
        group = _group_named(group_name)
        rounds = load_rounds(args.out, cells)
        if not rounds:
            continue
        heads = []
        section: list[str] = []
        for round_, runs in rounds.items():
            environment = environment or runs[0].environment
            folder = args.out / "reports" / group_name
            report = write_report(runs, folder if round_ == 1 else folder / f"round-{round_}")
            link = report.relative_to(args.out)
            links.append(f"- {group_name}, round {round_}: [{link}]({link})")
            head = headline(runs)
            heads.append(head)
            section += _round_section(round_, len(rounds), link, head)
        in_scenario = scenario is not None and group_name == scenario.group.name
        folder = args.out if in_scenario else args.out / "summaries" / group_name
        summary = write_summary(rounds, folder, index, scenario if in_scenario else None, group)
        if in_scenario:
            readme = summary_markdown(summary)
            readme += "\n## Per-round reports\n\n" + "\n".join(links) + "\n\n"
            readme += provenance_markdown(summary)
            (args.out / "README.md").write_text(readme, encoding="utf-8")
            return
        link = (folder / "summary.md").relative_to(args.out)
        sections += [f"## {group_name}", "", f"Summary with 95% intervals: [{link}]({link})", ""]
        if len(heads) > 1:
            sections += _medians_section(heads)
        sections += section
    _write_group_readme(args, index, sections, environment)


def _group_named(name: str) -> Group:
    """The group of a matrix.json key ``<hp>-<rate>__<be>`` (HP job names contain dashes)."""
    hp_rate, _, be = name.partition("__")
    hp, _, rate = hp_rate.rpartition("-")
    return Group(hp, rate, be)


def _round_section(round_: int, rounds: int, link: Path, head: pd.DataFrame) -> list[str]:
    lines = [
        f"### {f'Round {round_}' if rounds > 1 else 'Runs'}",
        "",
        f"Full report: [{link}]({link})",
        "",
        "| cell | HP p99 ms | HP p99 / alone | BE per s | BE / alone | target met |",
        "|---|---|---|---|---|---|",
    ]
    for row in head.to_dict("records"):
        lines.append(
            f"| {row['run']} | {_fmt(row['hp_p99_ms'], '.2f')} | "
            f"{_fmt(row['hp_p99_slowdown'], '.3f')} | "
            f"{_fmt(row['be_throughput_per_s'], '.2f')} | "
            f"{_fmt(row['be_throughput_fraction'], '.3f')} | {row['target_met']} |"
        )
    return [*lines, ""]


def _medians_section(heads: list[pd.DataFrame]) -> list[str]:
    lines = [
        f"Medians over {len(heads)} rounds (lowest-highest):",
        "",
        "| cell | rounds | HP p99 / alone | BE / alone | rounds meeting the target |",
        "|---|---|---|---|---|",
    ]
    for row in summarize_rounds(heads).to_dict("records"):
        lines.append(
            f"| {row['run']} | {row['rounds']} | {_fmt(row['slowdown_median'], '.3f')} "
            f"({_fmt(row['slowdown_min'], '.3f')}-{_fmt(row['slowdown_max'], '.3f')}) | "
            f"{_fmt(row['fraction_median'], '.3f')} ({_fmt(row['fraction_min'], '.3f')}-"
            f"{_fmt(row['fraction_max'], '.3f')}) | {row['target_met']} |"
        )
    return [*lines, ""]


def _write_group_readme(
    args: argparse.Namespace, index: dict[str, Any], sections: list[str], environment: Any
) -> None:
    lines = [
        "# orion benchmark matrix",
        "",
        "HP inference (Poisson arrivals) beside one best-effort job on one GPU, under every "
        "policy. Slowdown = HP p99 shared / HP p99 alone (`dedicated` of the same round); "
        "fraction = BE throughput shared / alone. Target: slowdown <= 1.05 and fraction >= 0.90.",
        "",
        *sections,
    ]
    if environment is not None:
        lines += [
            "## Environment",
            "",
            f"GPU {environment.gpu_name} ({environment.sm_count} SMs), driver "
            f"{environment.driver_version}, CUDA {environment.cuda_version}, torch "
            f"{environment.torch_version}, cuDNN {environment.cudnn_version}.",
            "",
        ]
    lines += ["## Commands", ""] + [
        f"    {entry['command']}" for entry in index.get("invocations", [])
    ]
    (args.out / "README.md").write_text("\n".join(lines) + "\n")


def _fmt(value: Any, spec: str) -> str:
    try:
        return "-" if value is None or value != value else format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def _names(allowed: dict | tuple) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        chosen = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in chosen if item not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(unknown)}; choose from {', '.join(allowed)}"
            )
        return chosen

    return parse


def _queue_limits(text: str) -> list[float | None]:
    limits: list[float | None] = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        if item == "default":
            limits.append(None)
            continue
        try:
            value = float(item)
        except ValueError:
            value = float("nan")
        if not value > 0:
            raise argparse.ArgumentTypeError(
                f"queue limit {item!r} is not 'default' or a positive number of microseconds"
            )
        limits.append(value)
    if not limits:
        raise argparse.ArgumentTypeError("no queue limit given")
    return list(dict.fromkeys(limits))


def _shares(text: str) -> list[int]:
    shares = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        if not item.isdigit() or not 1 <= int(item) <= 100:
            raise argparse.ArgumentTypeError(
                f"SM share {item!r} is not a whole percentage from 1 to 100"
            )
        shares.append(int(item))
    if not shares:
        raise argparse.ArgumentTypeError("no SM share given")
    return list(dict.fromkeys(shares))


def _profile_sources(text: str) -> list[str | None]:
    sources: list[str | None] = []
    for word in (part.strip() for part in text.split(",")):
        if word not in ("offline", ONLINE):
            raise argparse.ArgumentTypeError(f"profile source must be offline or online: {word!r}")
        sources.append(None if word == "offline" else ONLINE)
    return list(dict.fromkeys(sources))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--scenario", choices=list(SCENARIOS), default=None, help="a named HP x rate x BE group"
    )
    parser.add_argument("--hp", type=_names(HP_JOBS), default=None)
    parser.add_argument("--rates", type=_names(RATES), default=None)
    parser.add_argument("--be", type=_names(BE_JOBS), default=None)
    # `quota` grants GPU time by per-client shares, which the scenarios here do not set: it is
    # run only when asked for.
    parser.add_argument(
        "--policies",
        type=_names(POLICY_NAMES),
        default=[name for name in POLICY_NAMES if name != "quota"],
    )
    parser.add_argument(
        "--queue-limits",
        type=_queue_limits,
        default=[None],
        help="BE queue bounds in microseconds for reef and orion, 'default' = derived",
    )
    parser.add_argument(
        "--be-gates",
        type=_names(BE_GATES),
        default=[DEFAULT_BE_GATE],
        help="where reef and orion hold BE launches, one cell each: cpu (in the launching "
        f"thread), gpu (on the GPU); default {DEFAULT_BE_GATE}, the jobs file's default",
    )
    parser.add_argument(
        "--be-graph-gates",
        type=_names(BE_GRAPH_GATES),
        default=[None],
        help="how reef and orion hold the BE client's CUDA graphs, one cell each: inside (wait "
        "nodes in the graph every queue limit of work) or whole (each graph admitted whole "
        "behind its launch's gate) or segments (each graph split into pieces launched through "
        "the gate); the default (segments) is the plain cell, the others are named "
        "<policy>@inside-graphs or <policy>@whole-graphs; default: not set, the default",
    )
    parser.add_argument(
        "--sharings",
        type=_names(SHARING.choices),
        default=[None],
        help="how the clients of reef, orion and quota share the GPU, one cell each: mps (one "
        "MPS daemon) or timeslice (separate contexts the driver switches between); default: "
        "each policy's own (timeslice for orion, mps for reef and quota)",
    )
    parser.add_argument(
        "--profile-sources",
        type=_profile_sources,
        default=[None],
        help="where reef's and orion's clients get their kernel figures, one cell each: "
        "offline (profiles found for the workloads, the plain cell) or online (none: learned "
        "while they run, cell <policy>@online)",
    )
    parser.add_argument(
        "--mps-share-be",
        type=_shares,
        default=[30, 50, 70],
        help="BE SM shares in percent for mps-share, one cell each (default 30,50,70)",
    )
    parser.add_argument(
        "--hp-alone",
        type=_names(tuple(name for name in POLICY_NAMES if name != DEDICATED)),
        default=[],
        help="policies to run the HP client alone under, one cell each (<policy>@hp-alone), "
        "e.g. mps: the MPS floor, what MPS alone costs the HP against dedicated",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="rounds of every cell (each with its dedicated run)"
    )
    parser.add_argument(
        "--duration", type=float, default=60.0, help="at least this many seconds measured per run"
    )
    parser.add_argument(
        "--min-requests",
        type=int,
        default=5000,
        help="and at least this many HP requests (at the HP rate) per run",
    )
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    parser.add_argument("--time-budget", type=float, default=None, help="seconds for new cells")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="record every kernel launch in every run (run.trace), so each report says where "
        "the HP tail comes from",
    )
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    if args.scenario is not None:
        given = [f"--{name}" for name in ("hp", "rates", "be") if getattr(args, name) is not None]
        if given:
            parser.error(f"--scenario picks the HP job, rate and BE job: leave out {given[0]}")
    args.hp = args.hp if args.hp is not None else list(HP_JOBS)
    args.rates = args.rates if args.rates is not None else list(RATES)
    args.be = args.be if args.be is not None else [b for b in BE_JOBS if b not in OPT_IN_BE_JOBS]
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.duration <= 0:
        parser.error(f"--duration must be positive, got {args.duration:g}")
    if args.min_requests < 0:
        parser.error(f"--min-requests must not be negative, got {args.min_requests}")
    if args.out is None:
        gpu = gpu_facts(0)
        if gpu is None:
            parser.error("no GPU visible: pass --out to report on existing results")
        args.out = ROOT / "benchmarks" / "results" / gpu_slug(gpu.name)
        if args.scenario is not None:
            args.out = args.out / args.scenario
    args.out = args.out.absolute()
    return args


def main() -> int:
    args = parse_args()
    index = CellIndex.load(args.out, MATRIX_INDEX)
    if args.scenario is not None:
        index.data["scenario"] = args.scenario
    finished = True
    if not args.report_only:
        index.data.setdefault("invocations", []).append(
            {
                "command": shlex.join(["python", *sys.argv]),
                "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "software": software_summary(),
            }
        )
        finished = run_matrix(args, index)
    index.save()
    write_reports(args, index.data)
    if not finished:
        print("time budget reached: run the same command again to continue", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
