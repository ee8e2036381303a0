"""`orion simulate`: the planner and three baselines, round by round, on the same BE arrivals."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from orion_cli._common import MatrixDirOpt, console, error_console, handle_errors, interactive
from orion_cli.console import JsonOpt, print_json, print_table
from orion_common.output_paths import check_output_folder


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f}"


@handle_errors
def simulate_command(
    fleet: Annotated[
        Path,
        typer.Argument(
            metavar="SIMULATION.json",
            help="Simulation file: a fleet file (gpus, objective, hp; no be) plus "
            '"simulation": {"round_s", "duration_s", "seed", "arrivals": {"kind": "poisson", '
            '"jobs_per_hour"} or {"kind": "trace", "path"}, "job_mix": [{"job", "weight", '
            '"iterations", "share"}]}.',
            show_default=False,
        ),
    ],
    matrix_dir: MatrixDirOpt = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write simulation.json (format orion-simulation) and simulation_jct_cdf.png "
            "into this folder.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Simulate BE jobs arriving on the fleet under orion's planner and three baselines.

    Round-based (Gavel-style): each round the policy places the active BE jobs beside the fixed
    HP services and each placed job advances by its predicted rate (alone throughput x measured
    pair ratio). Baselines: one-gpu-per-job, packing-blind (first-fit, ignores interference),
    gavel-isolated (max-min fair time shares of whole GPUs, no co-location).
    """
    from placement.plan import load_matrices
    from placement.simulate import load_simulation, simulate, summary, write_outputs

    if output is not None:
        check_output_folder(output, "simulation folder")
    spec = load_simulation(fleet)
    matrices = load_matrices(spec.fleet.gpu_kinds(), matrix_dir)
    if interactive():
        jobs, results = _simulate_with_progress(spec, matrices)
    else:
        jobs, results = simulate(spec, matrices)
    document = summary(spec, jobs, results)
    if as_json:
        written = None if output is None else [str(p) for p in write_outputs(document, output)]
        print_json({**document, "written": written})
        return
    sim = spec.simulation
    table = Table(
        title=f"orion simulate ({len(jobs)} BE jobs over {sim.duration_s / 3600:g} h, "
        f"rounds of {sim.round_s:g} s, seed {sim.seed})",
        title_justify="left",
    )
    table.add_column("policy", no_wrap=True)
    table.add_column("avg JCT h", justify="right")
    table.add_column("makespan h", justify="right")
    table.add_column("GPU util", justify="right")
    table.add_column("HP SLO violations", justify="right")
    table.add_column("GPUs used", justify="right")
    table.add_column("finished", justify="right")
    for name, metrics in document["metrics"].items():
        table.add_row(
            name,
            _hours(metrics["avg_jct_s"]),
            _hours(metrics["makespan_s"]),
            f"{metrics['gpu_utilisation']:.0%}",
            str(metrics["hp_slo_violations"]),
            str(metrics["gpus_used"]),
            f"{metrics['finished']}/{len(jobs)}",
        )
    print_table(table)
    console.print(
        "note: HP SLO violations count GPU-rounds whose predicted p99 (alone x pair ratio) "
        "exceeds the SLO; unfinished jobs are left out of the averages",
        highlight=False,
    )
    if output is not None:
        json_path, png_path = write_outputs(document, output)
        console.print(f"written: {json_path}, {png_path}")


def _simulate_with_progress(spec: Any, matrices: Any) -> tuple[list[Any], dict[str, Any]]:
    """:func:`placement.simulate.simulate` with a bar per policy on stderr (a terminal only):
    a week of a large fleet takes minutes. A bar's total is the most rounds the policy may
    take; it ends early when every job is done."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from placement.simulate import simulate

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=error_console, transient=True) as bars:
        tasks: dict[str, Any] = {}

        def advance(policy: str, rounds: int, most: int) -> None:
            if policy not in tasks:
                tasks[policy] = bars.add_task(f"{policy} (rounds)", total=most)
            bars.update(tasks[policy], completed=rounds)

        return simulate(spec, matrices, progress_of_rounds=advance)
