"""benchmarks/timeslice_probe.py's analysis, from made-up timer records (the probe needs a GPU).

Two processes took turns: A ran 0-10 ms, B 11-21, A 22-32, B 33-43, A 44-50. So each turn lasts
10 ms and every hand-over leaves 1 ms in which neither ran: two switches of 0.5 ms.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark

MS = 1_000_000


@pytest.fixture(scope="module")
def probe():
    return load_benchmark("timeslice_probe")


A = {
    "start_ns": 0,
    "end_ns": 50 * MS,
    "gap_count": 2,
    "gaps": [[10 * MS, 22 * MS], [32 * MS, 44 * MS]],
}
B = {"start_ns": 11 * MS, "end_ns": 43 * MS, "gap_count": 1, "gaps": [[21 * MS, 33 * MS]]}


def test_turns_give_the_timeslice_and_the_switch(probe) -> None:
    result = probe.pair_figures(A, B)
    assert result["timeslice_ms"]["p50"] == pytest.approx(10.0)
    assert result["timeslice_ms"]["count"] == 1  # A's 22-32; the cut first and last turns are not
    assert result["switch_us"]["p50"] == pytest.approx(1000.0)  # (12 - 10) ms / 2
    assert result["switch_us"]["count"] == 3
    assert result["overlap_s"] == pytest.approx(0.032)


def test_a_gap_in_which_the_other_did_not_run_is_noise(probe) -> None:
    noisy = {**A, "gaps": [*A["gaps"], [46 * MS, 46 * MS + 5000]]}
    result = probe.pair_figures(noisy, B)
    assert result["switch_us"]["count"] == 3
    assert result["timeslice_ms"]["count"] == 1  # A's last run stays one run


def test_the_summary_files(probe, tmp_path: Path) -> None:
    alone = {"start_ns": 0, "end_ns": 50 * MS, "gap_count": 1, "gaps": [[5 * MS, 5 * MS + 3000]]}
    for name, record in (("alone", alone), ("pair-a", A), ("pair-b", B)):
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    summary = probe.summarise(tmp_path, "probe --out x")
    assert summary["alone"] == {
        "gap_count": 1,
        "longest_gap_us": pytest.approx(3.0),
        "gaps_ms": pytest.approx(0.003),
        "spun_ms": pytest.approx(50.0),
    }
    assert summary["beside_blocked"] is None  # a run from before that phase existed
    assert json.loads((tmp_path / "summary.json").read_text())["format"] == "orion-timeslice-probe"
    page = (tmp_path / "summary.md").read_text()
    assert "| timeslice (ms) | 10.000 (p10 10.000, p90 10.000; n=1) |" in page
    assert "| one context switch (us) | 1000.0" in page


def test_slices_handed_to_a_blocked_context_are_summed(probe, tmp_path: Path) -> None:
    alone = {"start_ns": 0, "end_ns": 50 * MS, "gap_count": 0, "gaps": []}
    spin = {
        "start_ns": 0,
        "end_ns": 50 * MS,
        "gap_count": 2,
        "gaps": [[10 * MS, 12 * MS], [30 * MS, 32 * MS + 500_000]],
    }
    for name, record in (("alone", alone), ("pair-a", A), ("pair-b", B)):
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    check = {"flag_before_open": 1, "flag_after_open": 2}
    (tmp_path / "beside-blocked.json").write_text(json.dumps({"spin": spin, "blocked": check}))
    blocked = probe.summarise(tmp_path, "probe --out x")["beside_blocked"]
    assert blocked["gap_count"] == 2
    assert blocked["longest_gap_us"] == pytest.approx(2500.0)
    assert blocked["gaps_ms"] == pytest.approx(4.5)
    assert blocked["ran_early"] is False
    page = (tmp_path / "summary.md").read_text()
    assert (
        "blocked at a closed stream wait: gaps, longest (us), sum (ms) of 50 ms spun | 2, " in page
    )
    assert "| the blocked context's kernel ran before its wait opened | no |" in page
