"""The orion-pair-matrix format: loading, complete validation, the pandas table."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from orion_common.errors import OrionError
from placement.pair_matrix import load_pair_matrix, parse_pair_matrix, to_frame

DATA = Path(__file__).parent / "data" / "placement"
MATRIX = DATA / "pairs" / "nvidia-h100-80gb-hbm3.json"


def _raw() -> dict[str, Any]:
    return json.loads(MATRIX.read_text(encoding="utf-8"))


def test_fixture_loads_with_pairs_in_either_order() -> None:
    matrix = load_pair_matrix(MATRIX)
    assert matrix.device == "nvidia-h100-80gb-hbm3"
    assert matrix.jobs["resnet-infer"].alone_p99_ms == 2.0
    assert matrix.jobs["train-c"].alone_throughput_per_s == 200.0
    pair = matrix.pair(None, ("train-b", "train-a"))
    assert pair is not None and pair.be_ratios == {"train-a": 0.7, "train-b": 0.6}
    hp_pair = matrix.pair("resnet-infer", ("train-a",))
    assert hp_pair is not None and hp_pair.hp_p99_ratio_safe == 1.3
    assert matrix.pair("bert-infer", ("train-c",)) is None


def test_to_frame_has_one_row_per_job_in_each_pair() -> None:
    frame = to_frame(load_pair_matrix(MATRIX))
    assert len(frame) == 16
    row = frame[(frame["pair"] == 0) & (frame["role"] == "hp")].iloc[0]
    assert row["job"] == "resnet-infer"
    assert row["ratio_hi"] == 1.3
    assert row["alone_p99_ms"] == 2.0


def _set(path: list[Any], value: Any) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return mutate


_DELETE = object()

CASES = [
    (_set(["format"], "orion-plan"), "format: must be 'orion-pair-matrix'"),
    (_set(["version"], 2), "version: must be 1, not 2"),
    (_set(["device"], ""), "device: must be a non-empty string"),
    (_set(["policy"], _DELETE), "policy: is required"),
    (_set(["extra"], 1), "extra: unknown field"),
    (_set(["jobs"], {}), "jobs: must be a non-empty object"),
    (_set(["jobs", "train-a", "kind"], "lp"), "jobs.train-a.kind: must be one of hp, be"),
    (_set(["jobs", "train-a", "mode"], "serve"), "jobs.train-a.mode: must be one of infer"),
    (_set(["jobs", "train-a", "batch_size"], 0), "jobs.train-a.batch_size: must be at least 1"),
    (_set(["jobs", "resnet-infer", "alone"], {"p99_ms": -1}), "alone.p99_ms: must be positive"),
    (
        _set(["jobs", "resnet-infer", "alone"], {"throughput_per_s": 3.0}),
        "jobs.resnet-infer.alone.p99_ms: is required",
    ),
    (_set(["pairs", 0, "hp"], "nope"), "pairs[0].hp: job 'nope' is not in jobs"),
    (_set(["pairs", 0, "hp"], "train-b"), "pairs[0].hp: job 'train-b' is a be job, not hp"),
    (_set(["pairs", 0, "be"], []), "pairs[0].be: must name one or two BE jobs, not 0"),
    (_set(["pairs", 5, "be"], ["train-a"]), "pairs[5].be: must name two BE jobs when hp is null"),
    (_set(["pairs", 5, "be"], ["train-a", "train-a"]), "pairs[5].be: names the same BE job twice"),
    (_set(["pairs", 5, "hp_p99_ratio"], 1.0), "pairs[5].hp_p99_ratio: must be null when hp is"),
    (_set(["pairs", 0, "hp_p99_ratio"], "1.2"), "pairs[0].hp_p99_ratio: must be a number"),
    (
        _set(["pairs", 0, "hp_p99_ratio_ci"], [1.3, 1.1]),
        "pairs[0].hp_p99_ratio_ci: lo 1.3 is above",
    ),
    (_set(["pairs", 0, "hp_p99_ratio_ci"], [1.1]), "pairs[0].hp_p99_ratio_ci: must be [lo, hi]"),
    (_set(["pairs", 0, "be_ratios"], {}), "pairs[0].be_ratios.train-a: is required"),
    (
        _set(["pairs", 0, "be_ratios"], {"train-a": 0.6, "train-b": 0.5}),
        "pairs[0].be_ratios.train-b: is not one of this pair's BE jobs",
    ),
    (_set(["pairs", 0, "be_ratios", "train-a"], 0), "pairs[0].be_ratios.train-a: must be positive"),
    (
        _set(["pairs", 0, "be_ratios_ci"], {"train-a": [0.7, 0.6]}),
        "pairs[0].be_ratios_ci.train-a: lo 0.7 is above hi 0.6",
    ),
    (_set(["pairs", 1, "be"], ["train-a"]), "pairs[1]: repeats the co-runners of pairs[0]"),
    (_set(["duration_s"], 0), "duration_s: must be positive, not 0"),
    (_set(["duration_s"], "30 s"), "duration_s: must be a number"),
]


@pytest.mark.parametrize(("mutate", "expected"), CASES, ids=[c[1] for c in CASES])
def test_invalid_matrix_is_one_line_naming_the_field(mutate: Any, expected: str) -> None:
    data = copy.deepcopy(_raw())
    mutate(data)
    if expected.startswith("pairs[1]: repeats"):
        data["pairs"][1]["be_ratios"] = {"train-a": 0.6}
        data["pairs"][1]["be_ratios_ci"] = {}
    with pytest.raises(OrionError) as caught:
        parse_pair_matrix(data, source="m.json")
    assert caught.value.message.startswith("m.json: ")
    assert expected in caught.value.message
    assert "\n" not in caught.value.message


def test_not_json_and_missing_file_are_clear(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(OrionError, match="is not valid JSON: line 1"):
        load_pair_matrix(broken)
    with pytest.raises(OrionError, match="does not exist"):
        load_pair_matrix(tmp_path / "none.json")
