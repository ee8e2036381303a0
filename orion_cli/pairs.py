"""`orion pairs`: measure the pair matrix of a list of jobs on this machine's GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orion_cli._common import console, handle_errors
from orion_common.errors import OrionError
from orion_common.output_paths import check_output_folder
from placement.pair_matrix import RESULTS_DIR, default_matrix_dir


@handle_errors
def pairs_command(
    jobs: Annotated[
        Path,
        typer.Argument(
            metavar="PAIRS_JOBS.json",
            help='Jobs file: {"policy": orion|mps-priority|mps-share, "settings": {...}, '
            '"duration_s", "rounds", "jobs": {name: {"kind": hp|be, "workload", "mode", '
            '"batch_size", "dtype", "cuda_graph" (hp), "rate_per_s" (hp)}}}.',
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Folder of <gpu kind>.json [default: benchmarks/results/<gpu kind>/pairs, "
            "where plan and simulate look].",
            show_default=False,
        ),
    ] = None,
    time_budget: Annotated[
        float | None,
        typer.Option(
            "--time-budget",
            help="Seconds for new cells: stop before the first cell that would not fit.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Measure each job alone and every HP x BE and BE x BE pair, round by round, on one GPU.

    Writes <out>/<gpu kind>.json (format orion-pair-matrix) with ratios and 95% intervals over
    the rounds. Runs are indexed under <out>/<gpu kind>/: run the same command again to resume.
    """
    from orion_common import prerequisites
    from placement.pairs import (
        build_pair_matrix,
        check_cells,
        load_cell_runs,
        load_pairs_jobs,
        run_pairs,
        write_pair_matrix,
    )
    from postprocess.profile_format import gpu_slug

    if time_budget is not None and not time_budget > 0:
        raise typer.BadParameter(
            f"must be a number of seconds above 0, not {time_budget:g}", param_hint="--time-budget"
        )
    check_output_folder(RESULTS_DIR if out is None else out, "pair-matrix folder")
    spec = load_pairs_jobs(jobs)
    check_cells(spec, RESULTS_DIR if out is None else out)
    gpu = prerequisites.check_gpu(0)
    if not gpu.ok or gpu.found is None:
        raise OrionError(
            f"{gpu.problem}; orion pairs measures jobs on a GPU and needs one",
            hint="`orion doctor` shows what is installed",
        )
    device = gpu_slug(gpu.found.name)
    out = default_matrix_dir(device) if out is None else out
    folder = out / device

    def progress(line: str) -> None:
        console.print(line, highlight=False, soft_wrap=True)

    finished = run_pairs(spec, folder, time_budget_s=time_budget, progress=progress)
    document = build_pair_matrix(spec, load_cell_runs(folder, spec), device)
    path = write_pair_matrix(document, out)
    console.print(f"pair matrix written to {path} ({len(document['pairs'])} pairs)")
    if not finished:
        console.print("time budget reached: run the same command again to continue")
