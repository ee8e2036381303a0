"""The quota benchmark's judging: what it calls a met target, from recorded share samples.

The runs need a GPU; how their records are read (when a live change showed, which jobs each
experiment runs) does not, so that is tested here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from benchmark_scripts import load_benchmark

from colocation.config import parse_jobs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("quota_limits")


def _series(samples: list[tuple[float, float]], change_s: float, old: float) -> pd.DataFrame:
    """One client's shares_series rows: half-second samples and one max_util change."""
    rows = [
        {"client": "large", "time_s": t, "gpu_share": share, "share_change": False}
        for t, share in samples
    ]
    rows.append(
        {
            "client": "large",
            "time_s": change_s,
            "gpu_share": np.nan,
            "share_change": True,
            "changed_field": "max_util",
            "old_value": old,
        }
    )
    other = {"client": "small", "time_s": change_s + 0.1, "gpu_share": 0.0, "share_change": False}
    return pd.DataFrame([*rows, other])


def test_a_live_change_counts_from_the_change_to_the_first_sample_past_halfway(bench) -> None:
    # 0.7 -> 0.2: halfway is 0.45, settled is within 0.05 of 0.2 (0.25 or less).
    samples = [(4.5, 0.70), (5.0, 0.69), (5.5, 0.55), (6.0, 0.40), (6.5, 0.24), (7.0, 0.2)]
    delay = bench.live_delay(_series(samples, 5.2, 0.7), "large", 0.2)
    assert delay["old_cap"] == 0.7
    assert delay["halfway_after_s"] == pytest.approx(0.8)
    assert delay["settled_after_s"] == pytest.approx(1.3)


def test_a_raised_cap_counts_upward_and_a_change_never_seen_is_none(bench) -> None:
    samples = [(1.0, 0.3), (1.5, 0.3), (2.0, 0.35)]
    delay = bench.live_delay(_series(samples, 1.2, 0.3), "large", 0.7)
    assert delay["halfway_after_s"] is None and delay["settled_after_s"] is None
    with pytest.raises(ValueError, match="no max_util change"):
        bench.live_delay(_series(samples, 1.2, 0.3), "small", 0.7)


def test_every_experiment_is_a_valid_jobs_file_with_its_limits(bench, tmp_path) -> None:
    runs = bench.experiments(15.0, tmp_path, sm_count=132)
    assert list(runs) == ["alone", "caps", "promise", "live"]
    configs = {name: parse_jobs(jobs, ROOT, source=name) for name, jobs in runs.items()}
    assert configs["alone"].run.policy == "dedicated"
    caps = {c.name: c.max_util for c in configs["caps"].clients}
    assert caps == {"small": 0.3, "large": 0.7}
    # Every share client runs the alone job (so throughput / alone is a share of it), with a loop
    # four times the default's 4096 so that it saturates the GPU rather than its host thread.
    alone_options = configs["alone"].clients[0].options
    assert alone_options == {"iterations": 4 * 4096}
    assert all(c.options == alone_options for c in configs["caps"].clients)
    promise = {c.name: (c.min_util, c.options) for c in configs["promise"].clients}
    assert promise["promised"] == (0.6, alone_options)
    assert promise["greedy"][1] == {"grid": 4 * 132, "iterations": 4 * 4 * 4096}
