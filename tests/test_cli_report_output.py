"""What `orion report` prints and where it writes, as seen in a pipe, a CI log and a narrow
terminal: numbers are never cut, --json -o writes a file, the default folder for several runs,
and one wording for `target met`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from rundir_factory import standard_runs
from typer.testing import CliRunner

import orion_cli.report as report_module
from orion_cli.app import app
from reporting import load_runs, report_tables

NUMBER = re.compile(r"\d+(?:\.\d+)?")
EXPECTED_TARGET_MET = {"dedicated": "-", "orion": "undecided", "timeslice": "no"}


@pytest.fixture
def run_paths(tmp_path: Path) -> list[Path]:
    return list(standard_runs(tmp_path / "runs").values())


def _expected_numbers(paths: list[Path]) -> set[str]:
    """Every number the three tables show, formatted as the terminal formats it."""
    tables = report_tables(load_runs(paths))
    shown = [
        (tables.clients, report_module._CLIENT_VIEW),
        (report_module._with_interval_text(tables.headline), report_module._HEADLINE_VIEW),
        (tables.gpu, report_module._GPU_VIEW),
    ]
    numbers: set[str] = set()
    for frame, view in shown:
        for row in frame.to_dict("records"):
            for name, _, spec in view:
                if name in frame.columns:
                    numbers.update(NUMBER.findall(report_module._cell(row.get(name), spec)))
    return numbers


def _assert_nothing_cut(output: str, paths: list[Path]) -> None:
    assert "…" not in output
    missing = _expected_numbers(paths) - set(NUMBER.findall(output))
    assert not missing, f"numbers cut or missing: {sorted(missing)}\n{output}"


def test_in_a_pipe_numbers_are_never_cut_even_with_columns_80(run_paths: list[Path]) -> None:
    result = CliRunner(env={"COLUMNS": "80"}).invoke(
        app, ["report", "--no-plots", *map(str, run_paths)]
    )
    assert result.exit_code == 0, result.output
    _assert_nothing_cut(result.output, run_paths)
    # one table each, not split: a log gets the plain full-width layout
    assert re.search(r"^policies side by side *$", result.output, re.MULTILINE)
    assert "(1/2)" not in result.output


def test_a_narrow_terminal_gets_narrower_tables_not_ellipses(
    run_paths: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    terminal = Console(force_terminal=True, width=80, color_system=None, legacy_windows=False)
    monkeypatch.setattr(report_module, "console", terminal)
    result = CliRunner(env={"COLUMNS": "80"}).invoke(
        app, ["report", "--no-plots", *map(str, run_paths)]
    )
    assert result.exit_code == 0, result.output
    _assert_nothing_cut(result.output, run_paths)
    assert "clients (1/" in result.output  # split into tables of fewer columns
    table_lines = [line for line in result.output.splitlines() if line[:1] in "┏┃┡│└"]
    assert table_lines and max(len(line) for line in table_lines) <= 80


def test_json_with_output_writes_report_json(run_paths: list[Path], tmp_path: Path) -> None:
    runner = CliRunner(env={"COLUMNS": "240"})
    out = tmp_path / "json-out"
    result = runner.invoke(app, ["report", "--json", "-o", str(out), *map(str, run_paths)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "report.json").read_text())
    assert {row["policy"] for row in data["headline"]} >= {"dedicated"}
    assert "report.json" in result.output
    help_text = runner.invoke(app, ["report", "--help"]).output
    assert "report.json" in help_text


def test_several_runs_report_into_their_common_parent(
    run_paths: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = CliRunner().invoke(app, ["report", *map(str, run_paths)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs" / "report" / "report.md").is_file()
    assert not any(elsewhere.iterdir())
    assert report_module.default_output(run_paths[:1]) == run_paths[0] / "report"


def test_the_command_reference_says_where_the_report_goes() -> None:
    reference = (Path(__file__).parents[1] / "docs" / "commands.md").read_text()
    section = reference.split("## `orion report", 1)[1].split("\n## ", 1)[0]
    assert "RUN_DIR/report" in section
    assert "common parent" in section
    assert "report.json" in section


def test_target_met_is_worded_alike_in_the_terminal_and_report_md(
    run_paths: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", "-o", str(out), *map(str, run_paths)])
    assert result.exit_code == 0, result.output
    assert "True" not in result.output and "False" not in result.output
    # the headline table has 7 columns, so 8 vertical rules per row
    rows = [line for line in result.output.splitlines() if line.count("│") == 8]
    terminal = {cells[1]: cells[-2] for cells in ([c.strip() for c in r.split("│")] for r in rows)}
    assert terminal == EXPECTED_TARGET_MET

    lines = (out / "report.md").read_text().splitlines()
    header_at = next(i for i, line in enumerate(lines) if line.endswith("| target met |"))
    markdown = {}
    for line in lines[header_at + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        markdown[cells[0]] = cells[-1]
    assert markdown == EXPECTED_TARGET_MET
