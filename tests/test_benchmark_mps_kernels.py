"""benchmarks/mps_kernels.py's summaries, from made-up kernel records (the measurement needs a GPU).

What the reader relies on: the records split into replays of one graph (or the script says why
not), each kernel position is compared across variants, and the change of a replay's span from
the no-MPS baseline is split exactly into kernel time and gap time.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def mk():
    return load_benchmark("mps_kernels")


def trace(replays: int, durations: list[float], gaps: list[float], noise: bool = True) -> dict:
    """A Chrome trace of ``replays`` replays of a graph whose kernels last ``durations`` with
    ``gaps`` before each (the first ignored), replays 1000 us apart, plus events that are not
    kernels (which must be ignored)."""
    events = []
    for replay in range(replays):
        clock = 1000.0 * replay
        for position, (duration, gap) in enumerate(zip(durations, gaps, strict=True)):
            clock += gap if position else 0.0
            events.append(
                {"ph": "X", "cat": "kernel", "name": f"k{position}", "ts": clock, "dur": duration}
            )
            clock += duration
    if noise:
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 1.0})
        events.append({"ph": "i", "cat": "Trace", "name": "marker"})
    events.reverse()  # the profiler's order is not the GPU's
    return {"traceEvents": events}


def test_records_split_into_replays_with_positions_and_gaps(mk) -> None:
    kernels = mk.kernels_from_trace(trace(3, [10.0, 20.0, 5.0], [0.0, 2.0, 3.0]))
    assert list(kernels["name"][:3]) == ["k0", "k1", "k2"]
    table = mk.split_replays(kernels, 3)
    assert table["replay"].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert table["position"].tolist() == [0, 1, 2] * 3
    assert table["gap_before_us"].isna().tolist() == [True, False, False] * 3
    assert table["gap_before_us"].dropna().tolist() == pytest.approx([2.0, 3.0] * 3)
    figures = mk.replay_figures(table)
    assert figures["span_us"].tolist() == pytest.approx([40.0] * 3)  # 35 us kernels + 5 us gaps
    assert figures["kernels_us"].tolist() == pytest.approx([35.0] * 3)
    assert figures["gaps_us"].tolist() == pytest.approx([5.0] * 3)


def test_records_that_do_not_make_whole_replays_are_refused(mk) -> None:
    kernels = mk.kernels_from_trace(trace(3, [10.0, 20.0], [0.0, 1.0]))
    with pytest.raises(ValueError, match="6 kernel records do not make 4 equal replays"):
        mk.split_replays(kernels, 4)
    shuffled = kernels.copy()
    shuffled.loc[2, "name"] = "other"  # replay 1 starts with another kernel
    with pytest.raises(ValueError, match="not one graph replayed"):
        mk.split_replays(shuffled, 3)


def test_the_change_from_no_mps_splits_into_kernel_time_and_gap_time(mk, tmp_path) -> None:
    # Under "mps" kernel k1 takes 4 us longer and the gap before k2 grows by 1 us: the span grows
    # by 5 us, 80% in kernels and 20% in gaps; "mps-x" changes nothing.
    layouts = {
        "no-mps": ([10.0, 20.0, 5.0], [0.0, 2.0, 3.0], [1.30, 1.32]),
        "mps": ([10.0, 24.0, 5.0], [0.0, 2.0, 4.0], [1.40, 1.41]),
        "mps-x": ([10.0, 20.0, 5.0], [0.0, 2.0, 3.0], [1.30, 1.31]),
    }
    for name, (durations, gaps, replay_ms) in layouts.items():
        folder = tmp_path / name
        folder.mkdir()
        table = mk.split_replays(mk.kernels_from_trace(trace(4, durations, gaps)), 4)
        table.to_csv(folder / "kernels.csv", index=False)
        pd.DataFrame(
            {
                "spacing": ["back_to_back", "back_to_back", "spaced", "spaced"],
                "replay": [0, 1, 0, 1],
                "gpu_ms": replay_ms + replay_ms,
            }
        ).to_csv(folder / "replays.csv", index=False)
        (folder / "worker.json").write_text(
            json.dumps({"command": "cmd", "workload": "resnet50 infer bs4 fp32 graph"})
        )
    summary = mk.summarise(tmp_path, ["no-mps", "mps", "mps-x", "missing"])
    assert list(summary["variants"]) == ["no-mps", "mps", "mps-x"]  # a variant that never ran
    mps = summary["attribution"]["mps"]
    assert mps["added_span_us"] == pytest.approx(5.0)
    assert (mps["share_in_kernels"], mps["share_in_gaps"]) == pytest.approx((0.8, 0.2))
    assert mps["replay_back_to_back_ratio"] == pytest.approx(1.405 / 1.31)
    assert summary["attribution"]["mps-x"]["share_in_kernels"] is None  # nothing added
    top = summary["top_kernels"]["mps"]
    assert [(k["name"], k["added_us"]) for k in top[:2]] == [("k1", 4.0), ("k2", 1.0)]
    per_kernel = pd.read_csv(tmp_path / "per_kernel.csv")
    assert per_kernel["mps_added_us"].tolist() == pytest.approx([0.0, 4.0, 1.0])
    assert json.loads((tmp_path / "summary.json").read_text())["format"] == "orion-mps-kernels"
    page = (tmp_path / "summary.md").read_text()
    assert "| mps | 1.405 | 1.405 | 45.0 | 39.0 | 6.0 | 5.0 | 80% | 20% |" in page


def test_variants_cover_what_the_mps_documentation_offers_a_client(mk) -> None:
    known = mk.variants("0=40G")
    names = list(known)
    assert (names[0], names[-1]) == ("no-mps", "no-mps-again")
    settings = {k for v in known.values() for k in v.environment}
    assert settings == {
        "CUDA_MPS_CLIENT_PRIORITY",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        "CUDA_MPS_ENABLE_PER_CTX_DEVICE_MULTIPROCESSOR_PARTITIONING",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
    }
    assert known["mps-pinned-mem-limit"].environment["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=40G"
    assert [name for name, v in known.items() if not v.mps] == ["no-mps", "no-mps-again"]


def test_unknown_variants_are_refused(mk, capsys) -> None:
    with pytest.raises(SystemExit):
        mk.parse_args(["--out", "x", "--variants", "mps,nope"])
    assert "unknown variant 'nope'" in capsys.readouterr().err
