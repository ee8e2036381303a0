"""The Markdown report and its JSON twin."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rundir_factory import ClientSpec, standard_runs, write_run

from reporting import headline, load_run, load_runs, report_json, verdicts, write_report


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    return standard_runs(tmp_path / "runs")


def _all_runs(paths: dict[str, Path]):
    return load_runs([paths["dedicated"], paths["orion"], paths["timeslice"]])


def test_report_embeds_every_png_and_the_facts(paths, tmp_path: Path) -> None:
    out = tmp_path / "report"
    report = write_report(_all_runs(paths), out)
    assert report == out / "report.md"
    text = report.read_text()

    pngs = sorted(p.name for p in out.glob("*.png"))
    assert {
        "tradeoff.png",
        "hp_latency_cdf.png",
        "hp_latency_over_time.png",
        "gpu_utilisation.png",
        "kernel_timeline_orion.png",
    } <= set(pngs)
    for name in pngs:
        assert f"]({name})" in text
        assert (out / name).stat().st_size > 5_000
    embedded = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert all((out / name).is_file() for name in embedded)

    for fact in ("NVIDIA H200", "580.159.04", "13.0", "2.11.0+cu130", "9.19.0"):
        assert fact in text
    assert "Incomplete run" not in text
    assert "`orion`: target undecided" in text  # 1.02x, but its interval reaches past 1.05x
    assert "`timeslice`: target missed" in text
    assert "0.95× over the 1.05× limit" in text  # 2.00 - 1.05
    assert "40 percentage points under the 90% floor" in text  # 0.90 - 0.50
    assert "| 99.010 |" in text  # the dedicated HP p99 in the clients table
    # Runs are named relative to the report, so a committed report keeps pointing at its runs.
    assert "| ../runs/run-orion |" in text
    assert str(tmp_path) not in text


def test_incomplete_run_gets_a_banner(paths, tmp_path: Path) -> None:
    meta_path = paths["timeslice"] / "run.json"
    meta = json.loads(meta_path.read_text())
    meta["status"] = "running"
    meta_path.write_text(json.dumps(meta))
    runs = _all_runs(paths)
    text = write_report(runs, tmp_path / "out").read_text()
    assert "> **Incomplete run `timeslice`** (status `running`)" in text
    assert "(incomplete run: read with care)" in text
    assert report_json(runs)["runs"][2]["complete"] is False


def test_verdict_sentences(paths) -> None:
    sentences = verdicts(headline(_all_runs(paths)))
    assert sentences == [
        "`orion`: target undecided (a 95% interval reaches across a limit, or the dedicated "
        "run is too noisy to judge it): HP p99 is 1.02× dedicated (limit 1.05×); "
        "BE throughput is 95% of dedicated (floor 90%).",
        "`timeslice`: target missed: HP p99 is 2.00× dedicated, 0.95× over the 1.05× limit; "
        "BE throughput is 50% of dedicated, 40 percentage points under the 90% floor.",
    ]


def test_report_without_dedicated_says_target_cannot_be_judged(paths, tmp_path: Path) -> None:
    runs = load_runs([paths["orion"]])
    text = write_report(runs, tmp_path / "solo").read_text()
    assert "cannot be judged" in text
    assert "tradeoff.png" in text  # absolute trade-off still drawn
    data = report_json(runs)
    assert data["baseline"] is None
    assert data["headline"][0]["hp_p99_slowdown"] is None  # NaN -> null
    assert data["headline"][0]["target_met"] is None


def test_report_json_is_plain_json(paths) -> None:
    data = report_json(_all_runs(paths))
    text = json.dumps(data, allow_nan=False)  # raises on NaN or on numpy types
    assert json.loads(text) == data
    assert data["format"] == "orion-report"
    assert data["baseline"] == "dedicated"
    heads = {row["run"]: row for row in data["headline"]}
    assert heads["orion"]["target_met"] == "undecided"
    assert heads["timeslice"]["target_met"] is False
    assert heads["dedicated"]["target_met"] is None
    assert heads["orion"]["hp_p99_slowdown"] == pytest.approx(1.02)
    assert data["runs"][0]["environment"]["cudnn_version"] == "9.19.0"
    clients = [r for r in data["clients"] if r["run"] == "dedicated" and r["client"] == "hp"]
    assert clients[0]["p99_ms"] == pytest.approx(99.01)
    assert isinstance(clients[0]["count"], int)


def test_one_run_alone(paths, tmp_path: Path) -> None:
    run = load_run(paths["timeslice"])
    report = write_report([run], tmp_path / "one")
    assert "kernel_timeline" not in report.read_text()  # no trace, no timeline


def test_runs_with_nothing_measured_still_report(tmp_path: Path) -> None:
    """A failed run whose clients wrote no rows, against a baseline with no rows either: no
    figure can be drawn, no ratio computed, and the report says so instead of failing."""
    empty = [ClientSpec("hp", "hp", "infer", []), ClientSpec("be", "be", "train", [])]
    base = write_run(tmp_path, "a", policy="dedicated", clients=empty, gpu=False)
    broken = write_run(tmp_path, "b", policy="mps", status="failed", clients=empty, gpu=False)
    runs = load_runs([base, broken])
    head = headline(runs)
    assert head["hp_p99_slowdown"].isna().all()  # not even the baseline's 1.0
    assert head["target_met"].tolist() == [None, None]
    text = write_report(runs, tmp_path / "out").read_text()
    assert "> **Incomplete run `mps`** (status `failed`)" in text
    assert "`mps`: target cannot be judged" in text
    assert "figure left out" in text
    assert not list((tmp_path / "out").glob("*.png"))
    json.dumps(report_json(runs), allow_nan=False)


@pytest.mark.parametrize(
    ("fields", "clause"),
    [
        (
            {"hp_p99_slowdown": 1.051, "hp_slowdown_excess": 0.001},
            "HP p99 is 1.051× dedicated, 0.001× over the 1.05× limit",
        ),
        (
            {"hp_p99_slowdown": 2.0, "hp_slowdown_excess": 0.95},
            "HP p99 is 2.00× dedicated, 0.95× over the 1.05× limit",
        ),
        (
            {"be_throughput_fraction": 0.898, "be_fraction_shortfall": 0.002},
            "BE throughput is 89.8% of dedicated, 0.2 percentage points under the 90% floor",
        ),
    ],
)
def test_a_figure_just_past_its_limit_is_shown_past_it(fields, clause) -> None:
    """1.051 was "1.05× dedicated, 0.00× over the 1.05× limit"."""
    from reporting.summary import _be_clause, _hp_clause

    row = {"hp_target_met": False, "hp_clients": 1, "be_target_met": False, "be_clients": 1}
    row |= fields
    if "hp_p99_slowdown" in fields:
        assert _hp_clause(row, fields["hp_p99_slowdown"]) == clause
    else:
        assert _be_clause(row, fields["be_throughput_fraction"]) == clause
