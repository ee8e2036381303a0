"""`orion run-plan PLAN.json`: run every GPU of an `orion plan` at once on this host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orion_cli._common import console, fail, handle_errors
from orion_cli.console import shown, warn


@handle_errors
def run_plan_command(
    plan: Annotated[
        Path,
        typer.Argument(help="A plan written by `orion plan -o plan.json`.", show_default=False),
    ],
    output_dir: Annotated[
        Path,
        typer.Option("--output-dir", "-o", help="Where to create the plan-run directory."),
    ] = Path("runs"),
    duration: Annotated[
        float | None,
        typer.Option(
            "--duration",
            "-d",
            help="Measure this many seconds on every GPU [default: as long as the pair matrix "
            "measured each pair, so the run measures what the plan predicted; 60 for plans from "
            "matrices that did not record it].",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run a plan: each of its GPUs as an `orion colocate` run, all at once on this host.

    Every GPU's run is an ordinary run directory under one plan-run directory;
    `orion report` on that directory compares what was measured with what the plan predicted.
    """
    from orion_common.plan_run_format import PLAN_RUN_FILE
    from placement.plan_file import load_plan
    from placement.plan_run import check_plan_run, duration_mismatches, planned_duration, run_plan

    if duration is None:
        duration = planned_duration(load_plan(plan))
    loaded = check_plan_run(plan, duration, output_dir)  # before saying it runs
    for mismatch in duration_mismatches(loaded, duration):
        warn(f"{mismatch}: leave out --duration to run as long as the matrix measured")
    console.print(
        f"running the plan {shown(plan)} for {duration:g} s (one run per GPU, all at once)",
        highlight=False,
    )
    root = run_plan(plan, duration, output_dir)
    record = json.loads((root / PLAN_RUN_FILE).read_text())
    table = Table(title=f"plan run ({record['status']})", title_justify="left")
    for column in ("GPU", "run directory", "exit"):
        table.add_column(column)
    for entry in record["gpus"]:
        table.add_row(str(entry["index"]), str(entry["run_dir"] or "-"), str(entry["exit_code"]))
    console.print(table)
    console.print(f"plan-run directory: [bold]{root}[/]", highlight=False, soft_wrap=True)
    if record["status"] != "complete":
        raise fail("some GPU's run failed", hint=f"see gpu<k>/colocate.log in {root}")
    console.print(f"next: orion report {root}", highlight=False, soft_wrap=True)
