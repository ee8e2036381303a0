"""summary.json of a benchmark scenario: built from rounds of synthetic runs with ratios known by
hand, and checked by its schema validator."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
from rundir_factory import QUEUE_200, SHARE_50, inference_rows, write_cell

from orion_common.errors import OrionError
from reporting import load_run
from reporting.benchmark import (
    build_summary,
    load_summary,
    plot_summary_tradeoff,
    summary_markdown,
    validate_summary,
)

DEVICE = {"gpu_name": "NVIDIA H200", "slug": "nvidia-h200"}


def two_rounds(root: Path) -> dict[int, list]:
    """Round 1: dedicated; mps-share@be50 at HP x1.10, BE iterations 625 ms (ratio 0.8);
    orion@200us at HP x1.02, BE 500 ms (ratio 1). Round 2: dedicated with HP x2; mps-share@be50
    at HP x2.42 (ratio 1.21), BE 625 ms (0.8); orion@200us at HP x2.0 (ratio 1.0), BE 500 ms."""
    paths = {
        1: [
            write_cell(root, "d1", "dedicated"),
            write_cell(
                root, "s1", "mps-share", hp_scale=1.10, be_iteration_ms=625, config=SHARE_50
            ),
            write_cell(root, "o1", "orion", hp_scale=1.02, config=QUEUE_200),
        ],
        2: [
            write_cell(root, "d2", "dedicated", hp_scale=2.0),
            write_cell(
                root, "s2", "mps-share", hp_scale=2.42, be_iteration_ms=625, config=SHARE_50
            ),
            write_cell(root, "o2", "orion", hp_scale=2.0, config=QUEUE_200),
        ],
    }
    return {r: [load_run(p) for p in ps] for r, ps in paths.items()}


def summarize(rounds, **kwargs) -> dict:
    return build_summary(
        rounds,
        device=DEVICE,
        command=["python benchmarks/matrix.py --scenario headline-graph"],
        date="2026-11-23T07:30:07+00:00",
        software={"torch_version": "2.11.0+cu130"},
        scenario={"name": "headline-graph", "caveat": None},
        resamples=300,
        **kwargs,
    )


@pytest.fixture(scope="module")
def summary(tmp_path_factory) -> dict:
    return summarize(two_rounds(tmp_path_factory.mktemp("runs")))


def test_rows_have_ratios_known_by_hand(summary) -> None:
    assert validate_summary(summary) == []
    rows = {row["cell"]: row for row in summary["rows"]}
    assert list(rows) == ["dedicated", "mps-share@be50", "orion@200us"]
    share, orion, alone = rows["mps-share@be50"], rows["orion@200us"], rows["dedicated"]
    assert share["policy"] == "mps-share" and share["settings"] == {"sm_percent_be": 50}
    assert orion["settings"] == {"queue_limit_us": 200}
    assert alone["settings"] == {}
    # Geometric mean of 1.10 and 1.21 = 1.1537; of 1.02 and 1.00 = 1.00995.
    assert share["hp_p99_ratio"] == pytest.approx(math.sqrt(1.10 * 1.21))
    assert orion["hp_p99_ratio"] == pytest.approx(math.sqrt(1.02))
    assert share["be_ratio"] == pytest.approx(0.8)
    assert orion["be_ratio"] == pytest.approx(1.0)
    assert [r["hp_p99_ratio"] for r in share["per_round"]] == pytest.approx([1.10, 1.21])
    for row in (share, orion):
        lo, hi = row["hp_p99_ratio_ci"]
        assert lo <= row["hp_p99_ratio"] <= hi
        assert row["rounds"] == 2
        assert row["hp_requests_per_run"] == 100
    assert share["target_met"] is False  # HP 1.15x and BE 0.8
    assert alone["hp_p99_ratio"] == 1.0 and alone["hp_p99_ratio_ci"] == [1.0, 1.0]
    assert alone["rounds"] == 2


def test_absolute_p99_pools_the_rounds(summary) -> None:
    """Dedicated latencies 1..100 and 2..200 pooled: p99 of the 200 values by hand."""
    alone = summary["rows"][0]
    pooled = np.concatenate([np.arange(1, 101), 2 * np.arange(1, 101)]).astype(float)
    assert alone["hp_p99_ms"] == pytest.approx(np.percentile(pooled, 99))
    lo, hi = alone["hp_p99_ms_ci"]
    assert lo <= alone["hp_p99_ms"] <= hi


def test_summary_is_plain_json_and_round_trips(summary, tmp_path) -> None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary, allow_nan=False))
    assert load_summary(path) == summary
    assert summary["format"] == "orion-benchmark-summary" and summary["version"] == 1
    assert summary["device"] == DEVICE


def test_summary_is_deterministic(tmp_path) -> None:
    rounds = two_rounds(tmp_path)
    assert summarize(rounds) == summarize(rounds)


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda s: s.pop("device"), "lacks 'device'"),
        (lambda s: s.update(format="orion-report"), "format is 'orion-report'"),
        (lambda s: s.update(version=2), "version 2 is newer"),
        (lambda s: s.update(date="yesterday"), "not an ISO date"),
        (lambda s: s.update(command="python x.py"), "command is not a list"),
        (lambda s: s["device"].pop("slug"), "device.slug"),
        (lambda s: s["rows"][1].pop("be_ratio_ci"), "rows[1] lacks 'be_ratio_ci'"),
        (lambda s: s["rows"][1].update(hp_p99_ratio="1.2"), "rows[1].hp_p99_ratio is not"),
        (lambda s: s["rows"][1].update(rounds=True), "rows[1].rounds is not int"),
        (lambda s: s["rows"][1].update(hp_p99_ratio_ci=[1.3, 1.1]), "lo > hi"),
        (lambda s: s["rows"][1].update(be_ratio_ci=[1.0]), "is not [lo, hi]"),
        (lambda s: s["rows"].pop(0), "no dedicated row"),
    ],
)
def test_validator_names_what_is_wrong(summary, mutate, problem) -> None:
    broken = copy.deepcopy(summary)
    mutate(broken)
    problems = validate_summary(broken)
    assert any(problem in p for p in problems), problems


def test_unknown_values_are_null_and_valid(summary) -> None:
    data = copy.deepcopy(summary)
    data["rows"][1].update(be_ratio=None, be_ratio_ci=[None, None])
    assert validate_summary(data) == []
    assert validate_summary([]) == ["the summary is not a JSON object"]


def test_an_hp_alone_cell_has_an_hp_ratio_and_no_be_ratio(tmp_path) -> None:
    """The MPS floor (``mps@hp-alone``): HP x1.07 with no BE client beside it."""
    hp_only = {"clients": [{"name": "hp", "role": "hp"}]}
    rounds = {
        r: [
            load_run(write_cell(tmp_path, f"d{r}", "dedicated")),
            load_run(
                write_cell(tmp_path, f"m{r}", "mps", hp_scale=1.07, config=hp_only, with_be=False)
            ),
        ]
        for r in (1, 2)
    }
    summary = summarize(rounds)
    assert validate_summary(summary) == []
    floor = summary["rows"][1]
    assert floor["cell"] == "mps@hp-alone" and floor["settings"] == {"hp_alone": True}
    assert floor["hp_p99_ratio"] == pytest.approx(1.07)
    assert floor["be_ratio"] is None and floor["target_met"] is None


def test_load_summary_refuses_a_broken_file(tmp_path) -> None:
    path = tmp_path / "summary.json"
    path.write_text('{"format": "orion-benchmark-summary"}')
    with pytest.raises(OrionError, match="not a valid orion-benchmark-summary"):
        load_summary(path)
    path.write_text("{")
    with pytest.raises(OrionError, match="not JSON"):
        load_summary(path)


def test_markdown_and_figure(summary, tmp_path) -> None:
    text = summary_markdown(summary)
    assert text.startswith("# headline-graph")
    assert text.index("![Trade-off](tradeoff.png)") < text.index("| cell |")
    assert "| mps-share@be50 | sm_percent_be=50 | 2 | 100 |" in text
    lo, hi = summary["rows"][1]["hp_p99_ratio_ci"]
    assert f"{summary['rows'][1]['hp_p99_ratio']:.3f} [{lo:.3f}, {hi:.3f}]" in text
    figure = plot_summary_tradeoff(summary, tmp_path / "tradeoff.png")
    assert figure.stat().st_size > 5_000


def test_a_noisy_dedicated_round_and_a_cell_without_its_round_are_warned(tmp_path) -> None:
    noisy = inference_rows(np.random.default_rng(3).exponential(5.0, 300).tolist(), spacing_s=0.03)
    rounds = {
        1: [load_run(write_cell(tmp_path, "d1", "dedicated", hp=noisy))],
        2: [load_run(write_cell(tmp_path, "p2", "priority"))],
    }
    data = summarize(rounds)
    assert validate_summary(data) == []
    assert any(w.startswith("round 1: the dedicated HP p99") for w in data["warnings"])
    assert any("priority: no round with both" in w for w in data["warnings"])
    assert "too short or too noisy" in summary_markdown(data).split("## Warnings")[1]
