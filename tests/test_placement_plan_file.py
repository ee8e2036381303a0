"""The orion-plan file: written, read back equal, and hand edits refused with one line."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from orion_common.errors import OrionError
from placement.fleet import load_fleet
from placement.plan import load_matrices, solve
from placement.plan_file import Plan, load_plan, parse_plan, write_plan

DATA = Path(__file__).parent / "data" / "placement"


def _plan(objective: str = "max-min-be") -> Plan:
    fleet = load_fleet(DATA / "fleet.json")
    return solve(fleet, load_matrices(fleet.gpu_kinds(), DATA / "pairs"), objective)


@pytest.mark.parametrize("objective", ["max-total-be", "max-min-be", "fewest-gpus"])
def test_round_trip(tmp_path: Path, objective: str) -> None:
    plan = _plan(objective)
    path = write_plan(plan, tmp_path / "plan.json")
    assert load_plan(path) == plan
    data = json.loads(path.read_text(encoding="utf-8"))
    assert (data["format"], data["version"]) == ("orion-plan", 1)
    assert data["gpus"][0]["settings"] == {"queue_limit_us": 200}
    hp = data["gpus"][0]["clients"][0]
    assert hp["role"] == "hp" and "predicted_ratio" not in hp


def _edited(change: Any) -> dict[str, Any]:
    data = copy.deepcopy(_plan().to_dict())
    change(data)
    return data


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.update(version=3), "version: must be 1, not 3"),
        (lambda d: d.update(objective="all"), "objective: must be one of"),
        (lambda d: d["gpus"][1].update(index=5), "gpus[1].index: must be 1 (GPUs in index order)"),
        (
            lambda d: d["gpus"][1]["clients"].append(copy.deepcopy(d["gpus"][1]["clients"][0])),
            "gpus[1].clients: holds 3 clients, at most 2",
        ),
        (
            lambda d: d["gpus"][1]["clients"][0].update(name="search"),
            "gpus[1].clients[0].name: 'search' is also at gpus[0].clients[0]",
        ),
        (
            lambda d: d["gpus"][0]["clients"][0].update(role="lp"),
            "gpus[0].clients[0].role: must be one of hp, be",
        ),
        (
            lambda d: d["gpus"][0]["clients"][0].pop("p99_slo_ms"),
            "gpus[0].clients[0].p99_slo_ms: is required",
        ),
        (
            lambda d: d["gpus"][0]["clients"][1].update(predicted_p99_ms=1.0),
            "gpus[0].clients[1].predicted_p99_ms: unknown field",
        ),
        (lambda d: d["unplaced"].append("a"), "unplaced[0]: 'a' is also placed"),
        (lambda d: d["totals"].pop("gpus_used"), "totals.gpus_used: is required"),
        (
            lambda d: d["gpus"][0].update(matrix_duration_s=-30),
            "gpus[0].matrix_duration_s: must be positive, not -30",
        ),
    ],
)
def test_hand_edited_plan_is_refused(change: Any, expected: str) -> None:
    with pytest.raises(OrionError) as caught:
        parse_plan(_edited(change), source="plan.json")
    assert caught.value.message.startswith("plan.json: ")
    assert expected in caught.value.message
    assert "\n" not in caught.value.message
