"""`orion plan`: place HP services and BE jobs on a fleet of GPUs from measured pair matrices."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orion_cli._common import MatrixDirOpt, console, error_console, handle_errors, interactive
from orion_cli.console import JsonOpt, print_json, print_table, shown
from orion_common.output_paths import check_output_file


@handle_errors
def plan_command(
    fleet: Annotated[
        Path,
        typer.Argument(
            metavar="FLEET.json",
            help='Fleet file: {"gpus": [{"kind", "count"}], "objective", "hp": [{"name", "job", '
            '"rate_per_s", "p99_slo_ms"}], "be": [{"name", "job", "weight"}]}; "job" names a job '
            "of the pair matrix.",
            show_default=False,
        ),
    ],
    matrix_dir: MatrixDirOpt = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the plan (format orion-plan) to this file."),
    ] = None,
    objective: Annotated[
        str | None,
        typer.Option(
            "--objective",
            help="Overrides the fleet file's: max-total-be (most weighted BE throughput), "
            "max-min-be (best worst weight-normalised BE ratio; an unplaced BE makes it 0), "
            "fewest-gpus (fewest GPUs that hold every HP service; then most BE throughput).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Plan which jobs share which GPU: an exact MILP over the measured pairs.

    Each HP service gets exactly one GPU (at most one per GPU), alone or beside one BE job whose
    measured pair keeps its predicted p99 (alone p99 x the upper end of the ratio's interval)
    within its SLO. BE jobs run alone, beside an HP service or beside one other BE job, or stay
    unplaced when there is no room. At most two jobs per GPU.
    """
    from placement.fleet import OBJECTIVES, load_fleet
    from placement.plan import load_matrices, solve
    from placement.plan_file import write_plan

    if objective is not None and objective not in OBJECTIVES:
        raise typer.BadParameter(
            f"must be one of {', '.join(OBJECTIVES)}, not {objective!r}", param_hint="--objective"
        )
    if output is not None:
        check_output_file(output, "plan file")
    spec = load_fleet(fleet)
    matrices = load_matrices(spec.gpu_kinds(), matrix_dir)
    if interactive():
        # a large fleet takes minutes to solve: say which stage it is in, on stderr
        with error_console.status("planning", spinner="dots") as status:
            plan = solve(spec, matrices, objective, progress=lambda stage: status.update(stage))
    else:
        plan = solve(spec, matrices, objective)
    if as_json:
        written = None if output is None else str(write_plan(plan, output))
        print_json({**plan.to_dict(), "written": written})
        return

    table = Table(title=f"orion plan ({plan.objective})", title_justify="left")
    table.add_column("GPU", justify="right")
    table.add_column("kind")
    table.add_column("jobs")
    table.add_column("HP p99 ms (upper / SLO)", justify="right")
    table.add_column("BE throughput /s (ratio)", justify="right")
    for gpu in plan.gpus:
        hp = [c for c in gpu.clients if c.role == "hp"]
        be = [c for c in gpu.clients if c.role == "be"]
        jobs = ", ".join(f"{c.name} ({c.role}: {c.job})" for c in gpu.clients) or "-"
        hp_text = "-"
        if hp:
            c = hp[0]
            hp_text = (
                f"{c.predicted_p99_ms:.2f} ({c.predicted_p99_upper_ms:.2f} / {c.p99_slo_ms:g})"
            )
        be_text = (
            ", ".join(
                f"{c.name}: {c.predicted_throughput_per_s:.1f} ({c.predicted_ratio:.2f})"
                for c in be
            )
            or "-"
        )
        table.add_row(str(gpu.index), shown(gpu.kind), shown(jobs), hp_text, shown(be_text))
    print_table(table)
    totals = plan.totals
    min_ratio = totals["min_weighted_be_ratio"]
    min_text = "-" if min_ratio is None else f"{min_ratio:.2f}"
    weighted = totals["weighted_be_throughput_per_s"]
    console.print(
        f"GPUs used: {totals['gpus_used']} of {len(plan.gpus)}; BE throughput "
        f"{totals['be_throughput_per_s']:.1f}/s (weighted {weighted:.1f}); "
        f"min weighted BE ratio {min_text}; "
        f"unplaced: {shown(', '.join(plan.unplaced) or 'none')}"
    )
    for note in plan.notes:
        console.print(f"note: {shown(note)}", highlight=False)
    if output is not None:
        console.print(f"plan written to {shown(write_plan(plan, output))}")
