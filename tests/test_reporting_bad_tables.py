"""A run whose tables hold what no writer wrote (text, NaN, negatives where a number belongs) or
fewer rows than run.json recorded is reported as incomplete, with a warning naming the file and
the row, in the tables and in --json; the banner says what is really wrong. One row per case."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from rundir_factory import standard_runs
from typer.testing import CliRunner

from orion_cli.app import app

runner = CliRunner(env={"COLUMNS": "200"})


def _set_cell(table: str, row: int, column: str, value: str) -> Callable[[Path], None]:
    """Data row ``row`` (from 1) of ``clients/<table>.csv`` gets ``value`` in ``column``."""

    def change(run: Path) -> None:
        path = run / "clients" / f"{table}.csv"
        lines = path.read_text().splitlines()
        header = lines[0].split(",")
        cells = lines[row].split(",")
        cells[header.index(column)] = value
        lines[row] = ",".join(cells)
        path.write_text("\n".join(lines) + "\n")

    return change


def _cut_half(run: Path) -> None:
    path = run / "clients" / "hp.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[: len(lines) // 2]) + "\n")


def _cut_last_line(run: Path) -> None:
    path = run / "clients" / "hp.csv"
    text = path.read_text()
    path.write_text(text[: len(text) - 12])  # a write cut in the middle of its last line


def _duplicate_rows(count: int) -> Callable[[Path], None]:
    def change(run: Path) -> None:
        path = run / "clients" / "hp.csv"
        lines = path.read_text().splitlines()
        path.write_text("\n".join([*lines, *lines[1 : count + 1]]) + "\n")

    return change


def _older(damage: Callable[[Path], None]) -> Callable[[Path], None]:
    """``damage`` to a run in the older format: no ``table_rows`` in run.json, each client's
    ``done`` (requests or iterations finished, one row each) instead."""

    def change(run: Path) -> None:
        meta = json.loads((run / "run.json").read_text())
        rows = meta.pop("table_rows")
        for client in meta["clients"]:
            client["done"] = rows[client["table"]]
        (run / "run.json").write_text(json.dumps(meta))
        damage(run)

    return change


# (case, damage, words of the warning that names file and row)
CASES = [
    ("non-numeric latency", _set_cell("hp", 5, "latency_ms", "abc"), "row 5: latency_ms is 'abc'"),
    ("NaN latency", _set_cell("hp", 7, "latency_ms", "nan"), "row 7: latency_ms is 'nan'"),
    (
        "negative latency",
        _set_cell("hp", 9, "latency_ms", "-3.5"),
        "latency_ms is '-3.5', negative",
    ),
    ("infinite BE duration", _set_cell("be", 2, "duration_ms", "inf"), "clients/be.csv has 1 row"),
    ("hp.csv cut to half", _cut_half, "rows recorded at close: the table was cut"),
    ("a cut last line", _cut_last_line, "hp.csv: dropped a cut last line"),
    ("100 duplicated rows", _duplicate_rows(100), "more than the 103 recorded at close"),
    (
        "older run: hp.csv cut to half",
        _older(_cut_half),
        "clients/hp.csv has 51 of 103 rows recorded at close: the table was cut",
    ),
    ("older run: a cut last line", _older(_cut_last_line), "hp.csv: dropped a cut last line"),
    (
        "older run: 100 duplicated rows",
        _older(_duplicate_rows(100)),
        "has 100 row(s) whose request appears earlier in the table",
    ),
]


@pytest.mark.parametrize(("case", "damage", "warning"), CASES, ids=[c[0] for c in CASES])
def test_a_damaged_table_makes_the_run_incomplete_with_a_named_warning(
    case: str, damage: Callable[[Path], None], warning: str, tmp_path: Path
) -> None:
    runs = standard_runs(tmp_path)
    damage(runs["orion"])
    paths = [str(runs["dedicated"]), str(runs["orion"])]

    table = runner.invoke(app, ["report", "--no-plots", *paths])
    assert table.exit_code == 0, table.output
    assert warning in table.stderr
    assert "run orion finished, but clients/" in table.stdout  # the banner says what is wrong
    assert "orion is complete" not in table.stdout

    document = json.loads(runner.invoke(app, ["report", "--json", *paths]).stdout)
    orion = next(run for run in document["runs"] if run["label"] == "orion")
    assert orion["complete"] is False
    assert any(warning in note for note in orion["notes"])

    strict = runner.invoke(app, ["report", "--no-plots", "--check", *paths])
    assert strict.exit_code == 1
    assert "is not complete" in strict.stderr


def test_the_same_run_directory_twice_is_refused(tmp_path: Path) -> None:
    run = str(standard_runs(tmp_path)["orion"])
    result = runner.invoke(app, ["report", "--no-plots", run, run + "/"])
    assert result.exit_code == 1
    assert "is given twice" in result.output


def test_a_missing_trace_is_said_and_leaves_the_run_complete(tmp_path: Path) -> None:
    runs = standard_runs(tmp_path)
    (runs["orion"] / "trace.csv").unlink()
    result = runner.invoke(app, ["report", "--json", str(runs["dedicated"]), str(runs["orion"])])
    orion = next(run for run in json.loads(result.stdout)["runs"] if run["label"] == "orion")
    assert orion["complete"] is True
    assert any("trace.csv is missing" in note for note in orion["notes"])
    text = runner.invoke(app, ["report", "--no-plots", str(runs["orion"])]).output
    assert "no tail attribution: the run traced its kernels" in text
    assert text.count("trace.csv is missing") == 1  # said once (a warning), not twice
