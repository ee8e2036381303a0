"""Every table-printing command, piped (not a terminal) at COLUMNS=80: nothing is cut.

A user copies workload names, paths and numbers out of logs and pipes; rich's default is to
squeeze a table to 80 columns there and cut cells with "…". orion prints full width instead
(orion_cli/console.py), whatever COLUMNS says.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import typer
from rundir_factory import standard_runs
from test_profiler_runs import FIXTURE
from typer.testing import CliRunner

from orion_cli.app import app
from orion_cli.colocate import _summary

DATA = Path(__file__).parent / "data" / "placement"
runner = CliRunner(env={"COLUMNS": "80"})


def _colocate_closing_table(run_dir: Path) -> str:
    """`orion colocate`'s closing table (it needs a GPU to reach it, so it is driven alone)."""
    closing = typer.Typer()
    closing.command()(lambda: _summary(run_dir))
    result = runner.invoke(closing, [])
    assert result.exit_code == 0, result.output
    return result.output


def _invoke(args: list[str], codes: tuple[int, ...] = (0,)) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code in codes, result.output
    return result.output


def _profile(tmp_path: Path) -> str:
    raw = tmp_path / "ncu_raw.csv"
    shutil.copy(FIXTURE, raw)
    return _invoke(["profile", "resnet50", "-b", "4", "--from-ncu", str(raw), "-o", str(tmp_path)])


# (command, how to run it, strings that must appear whole)
CASES: list[tuple[str, Callable[[Path], str], tuple[str, ...]]] = [
    (
        "workloads",
        lambda tmp: _invoke(["workloads"]),
        ("mobilenet_v2", "synthetic-compute", "synthetic-memory"),
    ),
    ("doctor", lambda tmp: _invoke(["doctor"], codes=(0, 1)), ("preload library",)),
    (
        "profile --from-ncu",
        _profile,
        ("memory", "compute", "1024x4x1", "384x1x1"),
    ),
    (
        "plan",
        lambda tmp: _invoke(
            ["plan", str(DATA / "fleet.json"), "--matrix-dir", str(DATA / "pairs")]
        ),
        ("nvidia-h100-80gb-hbm3", "search (hp: resnet-infer)", "HP p99 ms (upper / SLO)"),
    ),
    (
        "simulate",
        lambda tmp: _invoke(
            ["simulate", str(DATA / "simulate" / "fleet.json"), "--matrix-dir", str(DATA / "pairs")]
        ),
        ("HP SLO violations", "packing-blind", "gavel-isolated", "one-gpu-per-job"),
    ),
    (
        "report",
        lambda tmp: _invoke(["report", "--no-plots", *map(str, standard_runs(tmp).values())]),
        ("HP p99 / alone [95% CI]", "BE / alone [95% CI]", "timeslice"),
    ),
    (
        "colocate (closing table)",
        lambda tmp: _colocate_closing_table(standard_runs(tmp)["orion"]),
        ("unfinished", "exit", "per s"),
    ),
]


@pytest.mark.parametrize(("command", "run", "whole"), CASES, ids=[c[0] for c in CASES])
def test_piped_output_is_never_cut(
    command: str, run: Callable[[Path], str], whole: tuple[str, ...], tmp_path: Path
) -> None:
    output = run(tmp_path)
    assert "…" not in output, output
    for text in whole:
        assert text in output, f"{command}: {text!r} missing or cut\n{output}"
