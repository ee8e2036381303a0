"""benchmarks/arrival_probe.py's analysis and its refusals, on CPU (the probe itself needs a GPU).

Made-up runs: the HP's launches took 60 us beside no BE process, and beside a BE context running
long kernels 60 us most of the time and 2 ms once in fifty (a switch behind a preempted kernel).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def probe():
    return load_benchmark("arrival_probe")


def runs(rounds: int = 3) -> list[dict]:
    records = []
    for round_ in range(rounds):
        records.append({"round": round_, "mode": "none", "latencies_us": [60.0] * 500})
        slow = ([60.0] * 49 + [2000.0]) * 10
        records.append({"round": round_, "mode": "long", "latencies_us": slow})
    return records


def test_each_mode_is_against_its_own_rounds_floor(probe) -> None:
    summary = probe.summarise(runs())
    none, long = summary["modes"]["none"], summary["modes"]["long"]
    assert none["launches"] == long["launches"] == 1500 and long["rounds"] == 3
    assert none["p99_us"]["value"] == 60.0 and "p99_over_none" not in none
    assert long["median_us"]["value"] == 60.0
    # One launch in fifty waited 2 ms: the p99 is past it, far above the floor's.
    assert long["p99_us"]["value"] > 1000.0
    ratio = long["p99_over_none"]
    assert ratio["low"] <= ratio["value"] <= ratio["high"] and ratio["value"] > 15
    table = probe.summary_markdown(summary, "python benchmarks/arrival_probe.py --out x")
    assert "| long | 3 | 1500 | 60 [60, 60] |" in table
    assert "python benchmarks/arrival_probe.py --out x" in table


def test_a_mode_without_a_floor_in_its_round_has_no_ratio(probe) -> None:
    records = [r for r in runs(1) if r["mode"] == "long"]
    assert "p99_over_none" not in probe.summarise(records)["modes"]["long"]


def test_a_summary_is_made_again_from_the_raw_records(probe, tmp_path: Path) -> None:
    (tmp_path / "raw.json").write_text(json.dumps({"format": probe.FORMAT, "records": runs()}))
    assert probe.main(["--out", str(tmp_path), "--summarise-only"]) == 0
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written == json.loads(json.dumps(probe.summarise(runs())))
    assert (tmp_path / "summary.md").read_text().startswith("# HP launch latency")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--modes", "none,busy"], "--modes: busy unknown"),
        (["--modes", "idle,long"], "'none' missing"),
        (["--seconds", "0"], "must be positive"),
        (["--rounds", "0"], "--rounds at least 1"),
    ],
)
def test_bad_options_are_refused_before_any_gpu_work(probe, tmp_path, capsys, argv, said) -> None:
    with pytest.raises(SystemExit) as exit_:
        probe.main(["--out", str(tmp_path / "out"), *argv])
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_without_a_gpu_it_says_so_in_one_line_and_writes_nothing(probe, tmp_path, capsys) -> None:
    if probe._gpu_problem() is None:
        pytest.skip("this machine has a GPU the probe can use")
    assert probe.main(["--out", str(tmp_path / "out"), "--seconds", "1"]) == 1
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("error: ")
    assert not (tmp_path / "out").exists()
