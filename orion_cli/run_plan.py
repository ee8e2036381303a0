"""`orion run-plan PLAN.json`: run every GPU of an `orion plan` at once on this host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orion_cli._common import console, fail, handle_errors


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
        float,
        typer.Option("--duration", "-d", help="Measure this many seconds on every GPU."),
    ] = 60.0,
) -> None:
    """Run a plan: each of its GPUs as an `orion colocate` run, all at once on this host.

    Every GPU's run is an ordinary run directory under one plan-run directory;
    `orion report` on that directory compares what was measured with what the plan predicted.
    """
    from orion_common.plan_run_format import PLAN_RUN_FILE
    from placement.plan_run import check_plan_run, run_plan

    check_plan_run(plan, duration, output_dir)  # before saying it runs
    console.print(f"running the plan {plan} (one run per GPU, all at once)", highlight=False)
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
