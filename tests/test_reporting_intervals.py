"""Intervals, the noisy-baseline warning and GPU clocks in the report's tables, JSON and figures."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from rundir_factory import ClientSpec, be_train_rows, inference_rows, standard_runs, write_run

from reporting import headline, load_run, load_runs, relative_to_dedicated, report_json
from reporting.plots import plot_gpu_utilisation, plot_tradeoff
from reporting.series import gpu_clock_summary, gpu_samples
from reporting.summary import (
    baseline_interval_warning,
    report_tables,
    run_warnings,
    write_report,
)


@pytest.fixture
def runs(tmp_path: Path):
    paths = standard_runs(tmp_path / "runs")
    return load_runs([paths["dedicated"], paths["orion"], paths["timeslice"]])


def test_headline_intervals_bracket_their_values(runs) -> None:
    head = headline(runs).set_index("run")
    for label in ("dedicated", "orion", "timeslice"):
        row = head.loc[label]
        assert row["hp_p99_ci_lo_ms"] <= row["hp_p99_ms"] <= row["hp_p99_ci_hi_ms"]
    # Latencies are scale x 1..100 ms, so no resample's p99 exceeds scale x 100.
    assert head.loc["dedicated", "hp_p99_ci_hi_ms"] <= 100.0
    orion = head.loc["orion"]
    assert orion["hp_p99_slowdown_ci_lo"] < 1.02 < orion["hp_p99_slowdown_ci_hi"]
    # timeslice doubles every latency: its slowdown interval excludes the 1.05 limit.
    assert head.loc["timeslice", "hp_p99_slowdown_ci_lo"] > 1.05
    # The BE interval is placed around the window-based fraction it belongs to.
    assert orion["be_throughput_fraction_ci_lo"] <= 0.95 <= orion["be_throughput_fraction_ci_hi"]
    # The baseline's ratios are 1 by definition: no interval.
    assert math.isnan(head.loc["dedicated", "hp_p99_slowdown_ci_lo"])


def test_relative_table_has_per_client_intervals(runs) -> None:
    rel = relative_to_dedicated(runs).set_index(["run", "client"])
    hp = rel.loc[("orion", "hp")]
    assert hp["hp_p99_ci_lo_ms"] <= hp["p99_ms"] <= hp["hp_p99_ci_hi_ms"]
    be = rel.loc[("orion", "be")]
    assert math.isnan(be["hp_p99_ci_lo_ms"]) and math.isnan(be["hp_p99_slowdown_ci_lo"])
    assert be["throughput_fraction_ci_lo"] <= be["throughput_fraction"]


def _noisy_pair(tmp_path: Path, n: int, seed: int) -> list:
    """A dedicated and a shared run whose HP latencies are n exponential draws (mean 5 ms)."""
    rng = np.random.default_rng(seed)
    spacing = 10.0 / n
    arrivals = {"kind": "poisson", "rate_per_s": n / 10.0}
    paths = []
    for name, policy in (("d", "dedicated"), ("s", "priority")):
        hp = inference_rows(rng.exponential(5.0, n).tolist(), spacing_s=spacing)
        be_window = (30.0, 40.0) if policy == "dedicated" else (10.0, 20.0)
        clients = [
            ClientSpec("hp", "hp", "infer", hp, arrivals=arrivals),
            ClientSpec("be", "be", "train", be_train_rows(20, be_window), window=be_window),
        ]
        measure = (10.0, 40.0) if policy == "dedicated" else (10.0, 20.0)
        paths.append(
            write_run(tmp_path, f"{name}{n}", policy=policy, clients=clients, measure=measure)
        )
    return load_runs(paths)


def test_a_short_noisy_dedicated_run_is_warned_about_and_a_long_one_is_not(tmp_path) -> None:
    short = _noisy_pair(tmp_path, 300, seed=1)
    warnings = run_warnings(short)
    assert len(warnings) == 1
    assert warnings[0].startswith("dedicated: the dedicated HP p99 is")
    assert "too short or too noisy to judge a 5% target" in warnings[0]
    text = write_report(short, tmp_path / "report").read_text()
    assert "too short or too noisy" in text.split("## Warnings", 1)[1]
    assert "too short or too noisy" in " ".join(report_json(short)["warnings"])
    # 20 000 requests: the p99 of an exponential is known to about ±3%.
    assert run_warnings(_noisy_pair(tmp_path, 20_000, seed=2)) == []


def test_baseline_interval_warning_thresholds() -> None:
    assert baseline_interval_warning(100.0, 95.0, 105.0) is None  # exactly ±5% is fine
    assert baseline_interval_warning(100.0, 94.9, 101.0) is not None
    assert baseline_interval_warning(100.0, 99.0, 105.1) is not None
    assert baseline_interval_warning(float("nan"), 1.0, 2.0) is None


def test_report_shows_intervals_and_the_tradeoff_figure_first(runs, tmp_path) -> None:
    text = write_report(runs, tmp_path / "report").read_text()
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert figures[0] == "tradeoff.png"
    assert text.index("tradeoff.png") < text.index("## Verdict")
    head = headline(runs).set_index("run")
    row = head.loc["orion"]
    shown = f"{row['hp_p99_ms']:.3f} [{row['hp_p99_ci_lo_ms']:.3f}, {row['hp_p99_ci_hi_ms']:.3f}]"
    assert f"| {shown} |" in text
    assert "HP p99 ms [95% CI]" in text
    assert re.search(r"\| 1\.020 \[0\.\d{3}, 1\.\d{3}\] \|", text)  # the slowdown with its CI


def test_report_json_carries_intervals_and_clocks(runs) -> None:
    data = report_json(runs)
    json.dumps(data, allow_nan=False)
    heads = {row["run"]: row for row in data["headline"]}
    assert heads["orion"]["hp_p99_ci_lo_ms"] < heads["orion"]["hp_p99_ms"]
    assert heads["dedicated"]["hp_p99_slowdown_ci_lo"] is None
    assert data["intervals"]["confidence"] == 0.95
    clocks = {row["run"]: row for row in data["gpu_clocks"]}
    assert clocks["orion"]["sm_clock_min_mhz"] == 1755


def test_gpu_clock_summary_covers_the_window_only(runs) -> None:
    """The factory's SM clock is 1980 MHz except 1755 MHz in [12, 14) s; samples every 0.5 s."""
    clocks = gpu_clock_summary(runs).set_index("run")
    orion = clocks.loc["orion"]  # window [10, 20]: 21 samples, 4 of them at 1755
    assert orion["samples"] == 21
    assert orion["sm_clock_median_mhz"] == 1980
    assert orion["sm_clock_min_mhz"] == 1755
    assert orion["mem_clock_median_mhz"] == 2619
    tables = report_tables(runs)
    assert tables.gpu.equals(gpu_clock_summary(runs))


def test_old_gpu_csv_without_clocks_still_reads_and_reports(tmp_path) -> None:
    clients = [ClientSpec("hp", "hp", "infer", inference_rows([1.0, 2.0, 3.0]))]
    run = load_run(
        write_run(tmp_path, "old", policy="timeslice", clients=clients, gpu_clocks=False)
    )
    assert run.gpu is not None and run.gpu["sm_clock_mhz"].isna().all()
    assert run.gpu["mem_clock_mhz"].dtype == float
    row = gpu_clock_summary([run]).iloc[0]
    assert row["samples"] > 0 and math.isnan(row["sm_clock_median_mhz"])
    text = write_report([run], tmp_path / "report").read_text()
    assert "SM clock median MHz" in text
    _assert_png(plot_gpu_utilisation(gpu_samples([run]), tmp_path / "gpu_old.png"))


def test_gpu_figure_with_clocks_and_tradeoff_with_error_bars(runs, tmp_path) -> None:
    gpu = gpu_samples(runs)
    assert gpu["sm_clock_mhz"].notna().all()
    _assert_png(plot_gpu_utilisation(gpu, tmp_path / "gpu.png"))
    _assert_png(plot_tradeoff(headline(runs), tmp_path / "tradeoff.png"))


def _assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 5_000


def _be_inference_pair(tmp_path: Path, arrivals: dict) -> list:
    """A dedicated and a shared run of an HP client beside a BE inference client whose requests
    take 10 ms alone and 20 ms shared, back to back when closed-loop."""
    paths = []
    for policy, be_ms in (("dedicated", 10.0), ("orion", 20.0)):
        spacing = be_ms / 1000.0 if arrivals["kind"] == "closed" else 0.05
        count = int(10.0 / spacing) - 1
        hp = inference_rows([5.0] * 99)
        be = inference_rows([be_ms] * count, spacing_s=spacing)
        clients = [
            ClientSpec("hp", "hp", "infer", hp, arrivals={"kind": "poisson", "rate_per_s": 10.0}),
            ClientSpec("be", "be", "infer", be, arrivals=arrivals),
        ]
        paths.append(
            write_run(tmp_path, f"{policy}-{arrivals['kind']}", policy=policy, clients=clients)
        )
    return load_runs(paths)


def test_a_closed_loop_be_inference_client_gets_a_throughput_interval(tmp_path) -> None:
    """A BE client serving requests back to back (a graph replayed in a closed loop) is measured
    by what it served: half as many requests shared gives a fraction of 0.5 with an interval."""
    head = headline(_be_inference_pair(tmp_path, {"kind": "closed", "think_ms": 0.0}))
    shared = head.set_index("run").loc["orion"]
    assert shared["be_throughput_fraction"] == pytest.approx(0.5, abs=0.01)
    lo, hi = shared["be_throughput_fraction_ci_lo"], shared["be_throughput_fraction_ci_hi"]
    assert lo <= shared["be_throughput_fraction"] <= hi


def test_an_open_loop_be_inference_client_has_no_throughput_interval(tmp_path) -> None:
    """An open-loop client's throughput is the rate it was given: nothing to resample."""
    head = headline(_be_inference_pair(tmp_path, {"kind": "poisson", "rate_per_s": 20.0}))
    shared = head.set_index("run").loc["orion"]
    assert math.isnan(shared["be_throughput_fraction_ci_lo"])
