"""The benchmark matrix's planning: which cells a command asks for and what each one runs.

The matrix runs only on a GPU; what can go wrong without one is the plan (a sweep that silently
runs the default bound, cells that overwrite each other in matrix.json), so that is tested here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def matrix():
    spec = importlib.util.spec_from_file_location("orion_matrix", ROOT / "benchmarks" / "matrix.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["orion_matrix"] = module
    spec.loader.exec_module(module)
    return module


def parse(matrix, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *argv: str):
    monkeypatch.setattr(sys, "argv", ["matrix.py", "--out", str(tmp_path), *argv])
    return matrix.parse_args()


def test_queue_limits_sweep_only_the_gated_policies(matrix, monkeypatch, tmp_path) -> None:
    args = parse(
        matrix,
        monkeypatch,
        tmp_path,
        "--policies",
        "priority,orion,reef",
        "--queue-limits",
        "default,100,2500",
    )
    cells = matrix.planned_cells(args.policies, args.queue_limits)
    assert [matrix.cell_key(policy, limit) for policy, limit in cells] == [
        "priority",
        "orion",
        "orion@100us",
        "orion@2500us",
        "reef",
        "reef@100us",
        "reef@2500us",
    ]


def test_a_cell_runs_with_its_queue_bound(matrix, tmp_path) -> None:
    jobs = matrix.cell_jobs("resnet50", "low", "resnet50-train", "orion", 15.0, tmp_path, 500.0)
    assert jobs["run"]["thresholds"] == {"queue_limit_us": 500.0}
    assert jobs["run"]["policy"] == "orion"
    default = matrix.cell_jobs("resnet50", "low", "resnet50-train", "orion", 15.0, tmp_path)
    assert default["run"]["thresholds"] == {"queue_limit_us": None}


def test_without_queue_limits_every_policy_runs_once_with_the_derived_bound(
    matrix, monkeypatch, tmp_path
) -> None:
    args = parse(matrix, monkeypatch, tmp_path, "--policies", "dedicated,orion")
    assert matrix.planned_cells(args.policies, args.queue_limits) == [
        ("dedicated", None),
        ("orion", None),
    ]


@pytest.mark.parametrize("bad", ["0", "-5", "fast", ","])
def test_bad_queue_limits_are_refused(matrix, monkeypatch, tmp_path, capsys, bad) -> None:
    with pytest.raises(SystemExit):
        parse(matrix, monkeypatch, tmp_path, "--queue-limits", bad)
    assert "queue limit" in capsys.readouterr().err
