"""GPU-time shares per client (shares.csv, share changes in limits.csv): reading, the summary,
the figure, report.md and the terminal table."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure
from rundir_factory import (
    ClientSpec,
    be_train_rows,
    hp_rows,
    limit_change,
    memory_rows,
    share_change,
    share_rows,
    standard_runs,
    write_run,
)
from typer.testing import CliRunner

from orion_cli.app import app
from orion_common import run_format
from orion_common.errors import OrionError
from reporting import load_run, report_json, shares_series, shares_summary, write_report
from reporting.plots import _share_lines
from reporting.shares import SHARE_SERIES_COLUMNS, SHARE_SUMMARY_COLUMNS, quota_window_s

TIMES = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
# be: promised 0.2, capped at 0.8 until `orion quota --max-util 0.3` at 1.7 s, after which it
# gets 0.3. After the first 1 s window: 0.7, 0.5, 0.3, 0.3, 0.3 (mean 0.42, p95 0.66).
BE_SHARES = share_rows(
    "be", TIMES, [0.1, 0.6, 0.7, 0.5, 0.3, 0.3, 0.3], 0.2, [0.8, 0.8, 0.8, 0.8, 0.3, 0.3, 0.3]
)
# hp: defaults (nothing promised, nothing capped). After the first window: 0.3, 0.5, 0.7 × 3.
HP_SHARES = share_rows("hp", TIMES, [0.0, 0.3, 0.3, 0.5, 0.7, 0.7, 0.7])
LOWERED = [share_change("be", 1.7, "max_util", 0.8, 0.3)]


def _run(root: Path, name: str = "run-orion", **kwargs) -> Path:
    clients = [
        ClientSpec("hp", "hp", "infer", hp_rows()),
        ClientSpec("be", "be", "train", be_train_rows(19, (10.0, 20.0)), batch_size=32),
    ]
    return write_run(root, name, policy="orion", clients=clients, **kwargs)


def _shares_run(root: Path, name: str = "run-orion", **kwargs) -> Path:
    return _run(root, name, shares=HP_SHARES + BE_SHARES, limits=LOWERED, **kwargs)


def _headings(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, flags=re.MULTILINE)


# -- reading ---------------------------------------------------------------------------------


def test_shares_are_read_typed(tmp_path: Path) -> None:
    run = load_run(_shares_run(tmp_path))
    assert run.shares_recorded
    assert list(run.shares.columns) == list(run_format.column_names(run_format.SHARE_COLUMNS))
    assert len(run.shares) == 14
    assert run.shares["gpu_share"].dtype == "float64"
    assert run.shares.iloc[-1].to_dict() == {
        "time_s": 3.0,
        "client": "be",
        "gpu_share": 0.3,
        "min_util": 0.2,
        "max_util": 0.3,
    }
    assert run.limits["field"].tolist() == ["max_util"]
    assert run.notes == ()
    assert run.complete


def test_runs_without_shares_get_an_empty_declared_table(tmp_path: Path) -> None:
    run = load_run(_run(tmp_path))
    assert not run.shares_recorded
    assert run.shares.empty
    assert list(run.shares.columns) == list(run_format.column_names(run_format.SHARE_COLUMNS))
    assert run.notes == ()
    assert shares_summary([run]).empty
    series = shares_series([run])
    assert series.empty and list(series.columns) == SHARE_SERIES_COLUMNS


def test_a_cut_last_shares_line_is_dropped_and_noted(tmp_path: Path) -> None:
    run_dir = _shares_run(tmp_path)
    path = run_dir / "shares.csv"
    path.write_text(path.read_text() + "3.5,be,0.9")  # the runner died mid-write
    run = load_run(run_dir)
    assert len(run.shares) == 14
    assert "shares.csv: dropped a cut last line ('3.5,be,0.9')" in run.notes
    assert shares_summary([run]).set_index("client").loc["be", "mean_share"] == pytest.approx(0.42)


def test_a_shares_table_without_a_declared_column_names_the_file(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    (run_dir / "shares.csv").write_text("time_s,client,gpu_share\n0.0,be,0.1\n")
    with pytest.raises(OrionError, match=r"shares\.csv lacks column\(s\) min_util, max_util"):
        load_run(run_dir)


# -- the series and the summary --------------------------------------------------------------


def test_summary_of_a_hand_made_table_with_a_cap_lowered_mid_run(tmp_path: Path) -> None:
    summary = shares_summary([load_run(_shares_run(tmp_path))]).set_index("client")
    assert list(summary.index) == ["hp", "be"]  # run.json's order

    be = summary.loc["be"]
    assert be["window_s"] == 1.0  # the default: the recorded config has none
    assert be["samples"] == 5  # those at 0.0 and 0.5 s are in the first window
    assert be["mean_share"] == pytest.approx(0.42)
    assert be["p95_share"] == pytest.approx(0.66)  # linear between 0.5 and 0.7
    assert (be["min_util"], be["max_util"]) == (0.2, 0.3)  # in force at the end
    assert be["share_changes"] == 1

    hp = summary.loc["hp"]
    assert hp["samples"] == 5
    assert hp["mean_share"] == pytest.approx(0.58)
    assert hp["p95_share"] == pytest.approx(0.7)
    assert (hp["min_util"], hp["max_util"]) == (0.0, 1.0)
    assert hp["share_changes"] == 0


def test_the_first_window_comes_from_the_recorded_config(tmp_path: Path) -> None:
    run = load_run(_shares_run(tmp_path, config={"run": {"quota_window_s": 2.0}}))
    assert quota_window_s(run) == 2.0
    summary = shares_summary([run]).set_index("client")
    assert summary.loc["be", "window_s"] == 2.0
    assert summary.loc["be", "samples"] == 3  # 2.0, 2.5, 3.0 s
    assert summary.loc["be", "mean_share"] == pytest.approx(0.3)
    assert summary.loc["hp", "mean_share"] == pytest.approx(0.7)


def test_series_merges_changes_with_the_shares_in_force(tmp_path: Path) -> None:
    series = shares_series([load_run(_shares_run(tmp_path))])
    be = series[series["client"] == "be"]
    assert be["time_s"].tolist() == [0.0, 0.5, 1.0, 1.5, 1.7, 2.0, 2.5, 3.0]
    change = be[be["share_change"]].iloc[0]
    assert change["changed_field"] == "max_util"
    assert (change["min_util"], change["max_util"], change["old_value"]) == (0.2, 0.3, 0.8)
    assert math.isnan(change["gpu_share"])
    assert set(series["role"]) == {"hp", "be"}


def test_changes_before_the_first_sample_hold_what_held_before_them(tmp_path: Path) -> None:
    """A min_util set at 0.2 s and a max_util at 0.3 s, before the first sample at 0.5 s: the
    change rows carry the other share as it was then, not as it became."""
    changes = [
        share_change("be", 0.2, "min_util", 0.0, 0.1),
        share_change("be", 0.3, "max_util", 1.0, 0.5),
    ]
    shares = share_rows("be", [0.5, 1.0, 1.5, 2.0], [0.2, 0.5, 0.5, 0.5], 0.1, 0.5)
    run = load_run(_run(tmp_path, shares=shares, limits=changes))
    be = shares_series([run]).set_index("time_s")
    assert (be.loc[0.2, "min_util"], be.loc[0.2, "max_util"]) == (0.1, 1.0)
    assert (be.loc[0.3, "min_util"], be.loc[0.3, "max_util"]) == (0.1, 0.5)
    summary = shares_summary([run]).set_index("client")
    assert summary.loc["be", "share_changes"] == 2
    assert summary.loc["be", "samples"] == 2  # from 0.5 + 1.0 s on
    assert "hp" in summary.index and summary.loc["hp", "samples"] == 0


def test_memory_limit_changes_are_not_share_changes(tmp_path: Path) -> None:
    limits = [*LOWERED, limit_change("be", 2.2, 8.0, 4.0, 5.0)]
    memory = memory_rows("be", [0.0, 1.0], [1.0, 5.0], 8.0)
    run = load_run(_run(tmp_path, shares=HP_SHARES + BE_SHARES, limits=limits, memory=memory))
    assert shares_summary([run]).set_index("client").loc["be", "share_changes"] == 1
    assert len(shares_series([run])) == 15


# -- the figure ------------------------------------------------------------------------------


def test_the_figure_draws_caps_and_promises_only_where_set(tmp_path: Path) -> None:
    series = shares_series([load_run(_shares_run(tmp_path))])
    ax = Figure().subplots()
    for client in ("hp", "be"):
        _share_lines(ax, series[series["client"] == client], client, "tab:blue")
    assert [line.get_label() for line in ax.get_lines()] == [
        "hp share",
        "be share",
        "be max_util",
        "be max_util changed",
        "be min_util",
    ]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert lines["be max_util"].get_linestyle() == "--"
    assert lines["be min_util"].get_linestyle() == ":"
    marker = lines["be max_util changed"]
    assert (list(marker.get_xdata()), list(marker.get_ydata())) == ([1.7], [0.3])


def test_a_cap_raised_back_to_the_default_ends_its_line(tmp_path: Path) -> None:
    shares = share_rows("be", [0.0, 0.5, 1.0], [0.4, 0.4, 0.9], 0.0, [0.5, 0.5, 1.0])
    changes = [share_change("be", 0.7, "max_util", 0.5, 1.0)]
    series = shares_series([load_run(_run(tmp_path, shares=shares, limits=changes))])
    ax = Figure().subplots()
    _share_lines(ax, series, "be", "tab:blue")
    cap = {line.get_label(): line for line in ax.get_lines()}["be max_util"]
    assert [y for y in cap.get_ydata() if not math.isnan(y)] == [0.5, 0.5]


# -- the report ------------------------------------------------------------------------------


def test_report_draws_shares_and_tabulates_them(tmp_path: Path) -> None:
    run = load_run(_shares_run(tmp_path / "runs"))
    out = tmp_path / "report"
    text = write_report([run], out).read_text()

    figure = out / "gpu_shares_over_time.png"
    assert figure.is_file() and figure.stat().st_size > 5_000
    assert "## GPU time shares" in text
    assert "![GPU time shares over time](gpu_shares_over_time.png)" in text
    assert "over the sliding quota window as orion's gate keeper measures it" in text
    assert "(time with work on the GPU and its gate open or draining)" in text
    assert "| orion | hp | hp | 1.000 | 5 | 0.580 | 0.700 | 0.000 | 1.000 | 0 |" in text
    assert "| orion | be | be | 1.000 | 5 | 0.420 | 0.660 | 0.200 | 0.300 | 1 |" in text

    shares = {row["client"]: row for row in report_json([run])["gpu_shares"]}
    assert shares["be"]["mean_share"] == pytest.approx(0.42)
    assert shares["be"]["max_util"] == 0.3
    json.dumps(report_json([run]), allow_nan=False)


def test_old_runs_report_as_before(tmp_path: Path) -> None:
    # Runs from before memory.csv and shares.csv: no new section, figure or note.
    paths = standard_runs(tmp_path / "runs")
    runs = [load_run(paths[name]) for name in ("dedicated", "orion", "timeslice")]
    out = tmp_path / "report"
    text = write_report(runs, out).read_text()
    assert not (out / "gpu_shares_over_time.png").exists()
    assert not (out / "memory_over_time.png").exists()
    assert "gpu_shares" not in text and "GPU time share" not in text
    assert "memory_over_time" not in text and "## GPU memory" not in text
    assert _headings(text) == [
        "Trade-off",
        "Verdict",
        "Clients",
        "Relative to dedicated",
        "HP latency",
        "GPU utilisation",
        "Kernel timelines",
        "Where the HP tail comes from",
        "Scheduler statistics",
        "Environment",
    ]
    assert report_json(runs)["gpu_shares"] == [] and report_json(runs)["memory"] == []
    assert all(not run.shares_recorded and run.notes == () for run in runs)


def test_a_run_with_memory_but_no_shares_has_no_shares_section(tmp_path: Path) -> None:
    memory = memory_rows("be", [0.0, 1.0], [1.0, 2.0])
    run = load_run(_run(tmp_path / "runs", memory=memory, limits=[]))
    out = tmp_path / "report"
    text = write_report([run], out).read_text()
    assert "## GPU memory" in text and "## GPU time shares" not in text
    assert not (out / "gpu_shares_over_time.png").exists()


def test_a_header_only_shares_table_gives_the_table_but_no_figure(tmp_path: Path) -> None:
    run = load_run(_run(tmp_path / "runs", shares=[]))
    out = tmp_path / "report"
    text = write_report([run], out).read_text()
    assert not (out / "gpu_shares_over_time.png").exists()
    assert "*GPU time shares over time: figure left out (no run's shares.csv has samples).*" in text
    assert "| orion | be | be | 1.000 | 0 | – | – | – | – | 0 |" in text


def test_only_runs_with_shares_get_rows_and_panels(tmp_path: Path) -> None:
    runs = [load_run(_run(tmp_path, "run-old")), load_run(_shares_run(tmp_path, "run-new"))]
    out = tmp_path / "report"
    text = write_report(runs, out).read_text()
    assert (out / "gpu_shares_over_time.png").is_file()
    summary = shares_summary(runs)
    assert set(summary["run"]) == {"run-new"}
    assert "| run-new | be | be | 1.000 | 5 | 0.420 | 0.660 | 0.200 | 0.300 | 1 |" in text
    assert not any(line.startswith("| run-old | be | be | 1.000") for line in text.splitlines())


def test_the_terminal_report_shows_the_shares_table(tmp_path: Path) -> None:
    run_dir = _shares_run(tmp_path / "runs")
    runner = CliRunner(env={"COLUMNS": "240"})
    result = runner.invoke(app, ["report", str(run_dir), "--no-plots"])
    assert result.exit_code == 0, result.output
    assert "GPU time share per client" in result.output
    be = next(line for line in result.output.splitlines() if "│ be " in line and "0.420" in line)
    assert "0.660" in be and "0.300" in be

    old = runner.invoke(app, ["report", str(_run(tmp_path / "old")), "--no-plots"])
    assert old.exit_code == 0, old.output
    assert "GPU time share" not in old.output


def test_the_summary_frame_has_its_declared_columns(tmp_path: Path) -> None:
    summary = shares_summary([load_run(_shares_run(tmp_path))])
    assert list(summary.columns) == SHARE_SUMMARY_COLUMNS
    empty = shares_summary([load_run(_run(tmp_path / "old"))])
    assert isinstance(empty, pd.DataFrame) and list(empty.columns) == SHARE_SUMMARY_COLUMNS


def test_share_changes_alone_draw_no_figure(tmp_path: Path) -> None:
    """Only samples make the figure: a header-only shares.csv with a change still has its row."""
    run = load_run(_run(tmp_path / "runs", shares=[], limits=LOWERED))
    out = tmp_path / "report"
    text = write_report([run], out).read_text()
    assert not (out / "gpu_shares_over_time.png").exists()
    assert "| orion | be | be | 1.000 | 0 | – | – | 0.000 | 0.300 | 1 |" in text
