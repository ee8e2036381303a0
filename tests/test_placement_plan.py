"""The MILP planner on cases whose optimum is worked out by hand.

The fixture matrix (tests/data/placement/pairs): HP resnet-infer alone p99 2.0 ms; with train-a
its ratio's interval tops at 1.3 (2.6 ms), with train-b 1.15 (2.3 ms), with train-c 1.6 (3.2 ms).
bert-infer alone 4.0 ms; with train-a 1.2 (4.8 ms), with train-b 1.4 (5.6 ms). BE alone: a 100/s,
b 50/s, c 200/s; BE x BE ratios a+b 0.7/0.6, a+c 0.5/0.6, b+c 0.9/0.4.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orion_common.errors import OrionError
from placement.fleet import load_fleet, parse_fleet
from placement.plan import load_matrices, solve
from placement.plan_file import Plan

DATA = Path(__file__).parent / "data" / "placement"
PAIRS = DATA / "pairs"
KIND = "nvidia-h100-80gb-hbm3"


def _fleet(**changes: Any) -> dict[str, Any]:
    data = json.loads((DATA / "fleet.json").read_text(encoding="utf-8"))
    data.update(changes)
    return data


def _solve(data: dict[str, Any], objective: str | None = None) -> Plan:
    fleet = parse_fleet(data)
    return solve(fleet, load_matrices(fleet.gpu_kinds(), PAIRS), objective)


def _groups(plan: Plan) -> set[frozenset[str]]:
    return {frozenset(c.name for c in gpu.clients) for gpu in plan.gpus if gpu.clients}


def test_max_total_be_leaves_a_out_for_c_alone() -> None:
    # search can share only with b (2.3 ms <= 2.5). Best: search+b (40) and c alone (200) = 240,
    # above search+b and a+c (40 + 50 + 120 = 210) and search alone and c alone (200).
    plan = _solve(_fleet())
    assert _groups(plan) == {frozenset({"search", "b"}), frozenset({"c"})}
    assert plan.unplaced == ("a",)
    assert plan.totals["be_throughput_per_s"] == pytest.approx(240.0)
    assert plan.totals["min_weighted_be_ratio"] == 0.0
    hp = plan.gpus[0].clients[0]
    assert (hp.name, hp.role) == ("search", "hp")
    assert hp.predicted_p99_ms == pytest.approx(2.2)
    assert hp.predicted_p99_upper_ms == pytest.approx(2.3)


def test_max_min_be_places_every_be_job() -> None:
    # Every BE placed needs search+b and a+c: ratios 0.8, 0.5, 0.6, so t = 0.5 (total 210).
    plan = _solve(_fleet(), "max-min-be")
    assert _groups(plan) == {frozenset({"search", "b"}), frozenset({"a", "c"})}
    assert plan.unplaced == ()
    assert plan.totals["min_weighted_be_ratio"] == pytest.approx(0.5)
    assert plan.totals["be_throughput_per_s"] == pytest.approx(210.0)


def test_max_min_be_with_no_room_for_all_is_zero_and_says_so() -> None:
    # One GPU for search and three BE jobs: one BE at most fits (beside search), so t = 0; the
    # tie-break then takes the most throughput: search+b.
    data = _fleet(gpus=[{"kind": KIND, "count": 1}])
    plan = _solve(data, "max-min-be")
    assert _groups(plan) == {frozenset({"search", "b"})}
    assert plan.totals["min_weighted_be_ratio"] == 0.0
    assert any("minimum BE ratio is 0" in note for note in plan.notes)


def test_max_min_be_weights_normalise_the_ratio() -> None:
    # Two BE on two GPUs, no HP: each alone (ratio 1) beats a+b together. Weight 2 on a halves
    # its normalised ratio: t = min(1/2, 1/1) = 0.5.
    data = _fleet(
        hp=[], be=[{"name": "a", "job": "train-a", "weight": 2.0}, {"name": "b", "job": "train-b"}]
    )
    plan = _solve(data, "max-min-be")
    assert _groups(plan) == {frozenset({"a"}), frozenset({"b"})}
    assert plan.totals["min_weighted_be_ratio"] == pytest.approx(0.5)
    assert plan.totals["weighted_be_throughput_per_s"] == pytest.approx(250.0)


def test_fewest_gpus_uses_one_gpu_and_fills_it() -> None:
    # search alone needs one GPU; the tie-break puts b beside it (40/s); a and c stay out.
    plan = _solve(_fleet(), "fewest-gpus")
    assert plan.totals["gpus_used"] == 1
    assert [c.name for c in plan.gpus[0].clients] == ["search", "b"]
    assert plan.gpus[1].clients == ()
    assert set(plan.unplaced) == {"a", "c"}


def test_two_hp_services_each_take_their_best_partner() -> None:
    # search (SLO 2.5) only with b, ranker (bert, SLO 5.0) only with a (4.8 ms; b gives 5.6).
    # search+b and ranker+a = 40 + 70 = 110, more than either HP alone.
    data = _fleet(
        hp=[
            {"name": "search", "job": "resnet-infer", "rate_per_s": 200.0, "p99_slo_ms": 2.5},
            {"name": "ranker", "job": "bert-infer", "rate_per_s": 50.0, "p99_slo_ms": 5.0},
        ],
        be=[{"name": "a", "job": "train-a"}, {"name": "b", "job": "train-b"}],
    )
    plan = _solve(data)
    assert _groups(plan) == {frozenset({"search", "b"}), frozenset({"ranker", "a"})}
    assert plan.totals["be_throughput_per_s"] == pytest.approx(110.0)


def test_slo_below_alone_p99_names_the_service() -> None:
    data = _fleet()
    data["hp"][0]["p99_slo_ms"] = 1.5
    with pytest.raises(OrionError) as caught:
        _solve(data)
    assert caught.value.message == (
        "hp service 'search' (p99 SLO 1.5 ms) cannot meet its SLO anywhere: "
        f"alone its p99 is 2.0 ms on {KIND}"
    )


def test_more_hp_services_than_gpus() -> None:
    hp = [
        {"name": f"s{i}", "job": "resnet-infer", "rate_per_s": 10.0, "p99_slo_ms": 3.0}
        for i in range(3)
    ]
    with pytest.raises(OrionError, match=r"^3 HP services need 3 GPUs, the fleet has 2$"):
        _solve(_fleet(hp=hp))


def test_gpu_kind_without_a_matrix_file() -> None:
    data = _fleet(gpus=[{"kind": "nvidia-a100-sxm4-40gb", "count": 2}])
    with pytest.raises(OrionError, match="no pair matrix for GPU kind 'nvidia-a100-sxm4-40gb'"):
        _solve(data)


def test_job_missing_from_the_matrix() -> None:
    data = _fleet(be=[{"name": "a", "job": "train-z"}])
    with pytest.raises(OrionError, match="job 'train-z' of be job 'a' is not in the pair matrix"):
        _solve(data)


def test_hp_service_naming_a_be_job() -> None:
    data = _fleet()
    data["hp"][0]["job"] = "train-a"
    with pytest.raises(OrionError, match="hp service 'search' names job 'train-a', which is a be"):
        _solve(data)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"objective": "cheapest"}, "objective: must be one of max-total-be"),
        ({"gpus": []}, "gpus: must not be empty"),
        ({"gpus": [{"kind": KIND, "count": 0}]}, "gpus[0].count: must be at least 1"),
        ({"be": [{"name": "search", "job": "train-a"}]}, "be[0].name: 'search' is already"),
        ({"be": [{"name": "a", "job": "train-a", "weight": -1}]}, "be[0].weight: must be positive"),
        ({"hp": [{"name": "s", "job": "resnet-infer"}]}, "hp[0].rate_per_s: is required"),
        ({"spare": 1}, "spare: unknown field"),
    ],
)
def test_invalid_fleet_is_one_line_naming_the_field(changes: dict[str, Any], expected: str) -> None:
    with pytest.raises(OrionError) as caught:
        parse_fleet(_fleet(**changes), source="fleet.json")
    assert caught.value.message.startswith("fleet.json: ")
    assert expected in caught.value.message


def test_the_solve_says_each_stage_as_it_starts() -> None:
    fleet = load_fleet(DATA / "fleet.json")
    stages: list[str] = []
    solve(fleet, load_matrices(fleet.gpu_kinds(), DATA / "pairs"), progress=stages.append)
    assert stages[0] == "listing the groups each of 2 GPUs can hold"
    assert stages[1].startswith("solving over ") and stages[1].endswith(" options (GPU and group)")
