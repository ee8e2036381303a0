"""GPU memory per client (memory.csv, limits.csv): reading, the summary, the figure, report.md."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from rundir_factory import (
    ClientSpec,
    be_train_rows,
    hp_rows,
    limit_change,
    memory_rows,
    write_run,
)
from typer.testing import CliRunner

from orion_cli.app import app
from orion_common import run_format
from orion_common.errors import OrionError
from reporting import load_run, memory_series, memory_summary, report_json, write_report
from reporting.memory import limits_text

# be: 8 GiB limit, lowered to 4 GiB at 1.2 s (holding 5 GiB then: it peaked at 5 GiB at 1.0 s);
# from then on its allocations over 4 GiB are refused (3 in all). hp: no limit, 2 GiB throughout.
BE_MEMORY = memory_rows(
    "be",
    [0.0, 0.5, 1.0, 1.5, 2.0, 2.5],
    [1.0, 3.0, 5.0, 3.5, 3.5, 3.75],
    [8.0, 8.0, 8.0, 4.0, 4.0, 4.0],
    [0, 0, 0, 0, 2, 3],
)
HP_MEMORY = memory_rows("hp", [0.0, 0.5, 1.0, 1.5, 2.0, 2.5], [2.0] * 6)
LOWERED = [limit_change("be", 1.2, 8.0, 4.0, 5.0)]


def _run(root: Path, name: str = "run-orion", **kwargs) -> Path:
    clients = [
        ClientSpec("hp", "hp", "infer", hp_rows()),
        ClientSpec("be", "be", "train", be_train_rows(19, (10.0, 20.0)), batch_size=32),
    ]
    return write_run(root, name, policy="orion", clients=clients, **kwargs)


def _memory_run(root: Path) -> Path:
    return _run(root, memory=HP_MEMORY + BE_MEMORY, limits=LOWERED)


def _headings(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, flags=re.MULTILINE)


# -- reading ---------------------------------------------------------------------------------


def test_memory_and_limits_are_read_typed(tmp_path: Path) -> None:
    run = load_run(_memory_run(tmp_path))
    assert run.memory_recorded
    assert list(run.memory.columns) == list(run_format.column_names(run_format.MEMORY_COLUMNS))
    assert len(run.memory) == 12
    assert run.memory["used_bytes"].dtype == "int64"
    assert run.memory["limit_bytes"].isna().sum() == 6  # hp has no limit
    assert list(run.limits.columns) == list(run_format.column_names(run_format.LIMIT_COLUMNS))
    assert run.limits.iloc[0].to_dict() == {
        "time_s": 1.2,
        "utc": "2026-11-21T12:00:30+00:00",
        "client": "be",
        "field": "memory_limit",
        "old": 8.0 * 2**30,
        "new": 4.0 * 2**30,
        "in_use": 5 * 2**30,
    }
    assert run.notes == ()
    assert run.complete


def test_runs_without_the_files_get_empty_declared_tables(tmp_path: Path) -> None:
    run = load_run(_run(tmp_path))
    assert not run.memory_recorded
    assert run.memory.empty and run.limits.empty
    assert list(run.memory.columns) == list(run_format.column_names(run_format.MEMORY_COLUMNS))
    assert list(run.limits.columns) == list(run_format.column_names(run_format.LIMIT_COLUMNS))
    assert run.notes == ()
    assert memory_summary([run]).empty


def test_a_cut_last_memory_line_is_dropped_and_noted(tmp_path: Path) -> None:
    run_dir = _memory_run(tmp_path)
    path = run_dir / "memory.csv"
    path.write_text(path.read_text() + "3.0,be,9999")  # the runner died mid-write
    run = load_run(run_dir)
    assert len(run.memory) == 12
    assert "memory.csv: dropped a cut last line ('3.0,be,9999')" in run.notes
    assert memory_summary([run]).set_index("client").loc["be", "peak_used_gib"] == 5.0


def test_memory_tables_with_other_rows_than_recorded_are_flagged(tmp_path: Path) -> None:
    run_dir = _memory_run(tmp_path)
    meta_path = run_dir / "run.json"
    meta = json.loads(meta_path.read_text())
    meta["table_rows"] |= {"memory.csv": 20, "limits.csv": 1}
    meta_path.write_text(json.dumps(meta))
    run = load_run(run_dir)
    assert run.cut_tables == ("memory.csv",)
    assert not run.complete
    assert any(note.startswith("memory.csv has 12 of 20 rows recorded") for note in run.notes)


def test_a_memory_table_without_a_declared_column_names_the_file(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    (run_dir / "memory.csv").write_text("time_s,client,used_bytes\n0.0,be,1\n")
    with pytest.raises(OrionError, match=r"memory\.csv lacks column\(s\) limit_bytes, refused"):
        load_run(run_dir)


# -- the summary -----------------------------------------------------------------------------


def test_peak_limit_and_refused_of_a_hand_made_table(tmp_path: Path) -> None:
    summary = memory_summary([load_run(_memory_run(tmp_path))]).set_index("client")
    assert list(summary.index) == ["hp", "be"]  # run.json's order

    be = summary.loc["be"]
    assert be["samples"] == 6
    assert be["peak_used_gib"] == 5.0 and be["peak_s"] == 1.0
    assert be["limit_gib"] == 4.0  # in force at the end: the lowered one
    assert be["limits_gib"] == [8.0, 4.0]
    assert be["limit_changes"] == 1
    assert be["refused"] == 3

    hp = summary.loc["hp"]
    assert hp["peak_used_gib"] == 2.0
    assert math.isnan(hp["limit_gib"])
    assert limits_text(hp["limits_gib"]) == "-"
    assert hp["limit_changes"] == 0
    assert hp["refused"] == 0


def test_a_limit_set_and_removed_between_samples_still_shows(tmp_path: Path) -> None:
    """The half-second samples never saw the 1 GiB limit; limits.csv did."""
    changes = [
        limit_change("hp", 0.6, None, 1.0, 2.0),
        limit_change("hp", 0.8, 1.0, None, 2.0),
        limit_change("be", 2.6, 4.0, 6.0, 3.75),
    ]
    run = load_run(_run(tmp_path, memory=HP_MEMORY + BE_MEMORY, limits=changes))
    summary = memory_summary([run]).set_index("client")
    assert limits_text(summary.loc["hp", "limits_gib"]) == "- → 1.00 → -"
    assert summary.loc["hp", "limit_changes"] == 2
    assert math.isnan(summary.loc["hp", "limit_gib"])
    assert limits_text(summary.loc["be", "limits_gib"]) == "8.00 → 4.00 → 6.00"
    assert summary.loc["be", "limit_gib"] == 6.0


def test_series_merges_changes_in_time_order(tmp_path: Path) -> None:
    series = memory_series([load_run(_memory_run(tmp_path))])
    be = series[series["client"] == "be"]
    assert be["time_s"].tolist() == [0.0, 0.5, 1.0, 1.2, 1.5, 2.0, 2.5]
    change = be[be["limit_change"]].iloc[0]
    assert (change["used_gib"], change["limit_gib"], change["old_limit_gib"]) == (5.0, 4.0, 8.0)
    assert set(series["role"]) == {"hp", "be"}


def test_limits_text() -> None:
    assert limits_text([8.0]) == "8.00"
    assert limits_text([float("nan"), 4.0]) == "- → 4.00"
    assert limits_text([]) == "-"
    assert limits_text(None) == "-"


# -- the report ------------------------------------------------------------------------------


def test_report_draws_memory_and_tabulates_it(tmp_path: Path) -> None:
    run = load_run(_memory_run(tmp_path / "runs"))
    out = tmp_path / "report"
    text = write_report([run], out).read_text()

    figure = out / "memory_over_time.png"
    assert figure.is_file() and figure.stat().st_size > 5_000
    assert "![GPU memory over time](memory_over_time.png)" in text
    assert "## GPU memory" in text
    assert "as orion's library counts it" in text
    assert "not its CUDA context" in text
    assert "| orion | hp | hp | 2.000 | - | 0 |" in text
    assert "| orion | be | be | 5.000 | 8.00 → 4.00 | 3 |" in text

    memory = {row["client"]: row for row in report_json([run])["memory"]}
    assert memory["be"]["peak_used_gib"] == 5.0
    assert memory["be"]["limits_gib"] == [8.0, 4.0]
    assert memory["hp"]["limit_gib"] is None
    json.dumps(report_json([run]), allow_nan=False)


def test_a_header_only_memory_table_gives_the_table_but_no_figure(tmp_path: Path) -> None:
    run = load_run(_run(tmp_path / "runs", memory=[]))
    out = tmp_path / "report"
    text = write_report([run], out).read_text()
    assert not (out / "memory_over_time.png").exists()
    assert "*GPU memory over time: figure left out (no run's memory.csv has samples).*" in text
    assert "| orion | be | be | – | - | – |" in text


def test_only_runs_with_memory_get_rows_and_panels(tmp_path: Path) -> None:
    runs = [
        load_run(_run(tmp_path, "run-old")),
        load_run(_run(tmp_path, "run-new", memory=HP_MEMORY + BE_MEMORY, limits=LOWERED)),
    ]
    out = tmp_path / "report"
    text = write_report(runs, out).read_text()
    assert (out / "memory_over_time.png").is_file()
    summary = memory_summary(runs)
    assert set(summary["run"]) == {"run-new"}
    assert "| run-new | be | be | 5.000 | 8.00 → 4.00 | 3 |" in text
    assert not any(line.startswith("| run-old | hp | hp | 2.000") for line in text.splitlines())


def test_memory_series_of_no_runs_with_memory_is_empty_with_columns(tmp_path: Path) -> None:
    series = memory_series([load_run(_run(tmp_path))])
    assert series.empty
    assert isinstance(series, pd.DataFrame) and "limit_gib" in series.columns


def test_the_terminal_report_shows_the_memory_table(tmp_path: Path) -> None:
    run_dir = _memory_run(tmp_path / "runs")
    runner = CliRunner(env={"COLUMNS": "240"})
    result = runner.invoke(app, ["report", str(run_dir), "--no-plots"])
    assert result.exit_code == 0, result.output
    assert "GPU memory per client (orion's count)" in result.output
    assert "8.00 → 4.00" in result.output

    old = runner.invoke(app, ["report", str(_run(tmp_path / "old")), "--no-plots"])
    assert old.exit_code == 0, old.output
    assert "GPU memory" not in old.output
