"""Reports over several interleaved rounds: each shared run against its own round's dedicated
run (as benchmarks/matrix.py pairs them), never every run against the first dedicated one."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from rundir_factory import ClientSpec, be_train_rows, hp_rows, write_run

from reporting import load_runs
from reporting.metrics import headline


def _run(root: Path, name: str, policy: str, scale: float, be: int, started: str) -> Path:
    window = (10.0, 20.0)
    path = write_run(
        root,
        name,
        policy=policy,
        clients=[
            ClientSpec("hp", "hp", "infer", hp_rows(scale)),
            ClientSpec("be", "be", "train", be_train_rows(be, window)),
        ],
    )
    meta = json.loads((path / "run.json").read_text())
    meta["started_utc"] = f"2026-11-21T12:{started}:00+00:00"
    (path / "run.json").write_text(json.dumps(meta))
    return path


@pytest.fixture
def head(tmp_path: Path):
    # given as `runs/*` lists them: dedicated runs first, then the others
    paths = [
        _run(tmp_path, "early-orion", "orion", 1.0, 20, "00"),  # before any dedicated run
        _run(tmp_path, "dedicated-1", "dedicated", 1.0, 20, "01"),
        _run(tmp_path, "dedicated-2", "dedicated", 2.0, 20, "03"),
        _run(tmp_path, "orion-1", "orion", 1.02, 19, "02"),
        _run(tmp_path, "orion-2", "orion", 2.2, 17, "04"),
    ]
    return headline(load_runs(paths)).set_index("run")


# (run, its reference, HP p99 slowdown against it, judged at all)
ROUNDS = [
    ("orion-1", "dedicated-1", 1.02, True),
    ("orion-2", "dedicated-2", 1.10, True),
    ("dedicated-1", "dedicated-1", 1.0, False),
    # the second round's dedicated run is not graded against the first round's (it was 2x)
    ("dedicated-2", "dedicated-2", 1.0, False),
]


@pytest.mark.parametrize(("run", "reference", "slowdown", "judged"), ROUNDS)
def test_each_run_is_compared_with_its_own_rounds_dedicated_run(
    head, run: str, reference: str, slowdown: float, judged: bool
) -> None:
    row = head.loc[run]
    assert row["baseline"] == reference
    assert row["hp_p99_slowdown"] == pytest.approx(slowdown, rel=1e-3)
    assert (row["target_met"] is not None) == judged


def test_a_run_before_every_dedicated_run_has_no_reference(head) -> None:
    row = head.loc["early-orion"]
    assert pd.isna(row["baseline"])
    assert row["target_met"] is None
