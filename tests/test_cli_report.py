"""`orion report` as a user runs it: tables, verdicts, pictures, --json, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

from rundir_factory import standard_runs
from typer.testing import CliRunner

from orion_cli.app import app

runner = CliRunner(env={"COLUMNS": "240"})


def test_report_compares_policies_and_writes_pictures(tmp_path: Path) -> None:
    paths = standard_runs(tmp_path / "runs")
    out = tmp_path / "report"
    result = runner.invoke(app, ["report", *map(str, paths.values()), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "policies side by side" in result.output
    assert "HP p99 / alone" in result.output
    assert (out / "report.md").is_file()
    assert list(out.glob("*.png"))


def test_report_json_has_the_figures(tmp_path: Path) -> None:
    paths = standard_runs(tmp_path / "runs")
    result = runner.invoke(app, ["report", "--json", *map(str, paths.values())])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert {row["policy"] for row in data["headline"]} >= {"dedicated"}
    assert data["target"]["hp_p99_slowdown_max"] == 1.05


def test_a_directory_that_is_not_a_run_is_a_one_line_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 1
    assert "is not an orion run directory" in result.output
    assert "Traceback" not in result.output
