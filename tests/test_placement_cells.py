"""The one cell runner of `orion pairs` and benchmarks/matrix.py: refusals, resuming, indexes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orion_common.errors import OrionError
from placement.cells import MATRIX_INDEX, PAIRS_INDEX, CellIndex, PlannedCell, run_cells


def _cell(key: str, group: str | None = None) -> PlannedCell:
    return PlannedCell(key, {"run": {"duration_s": 5.0}, "clients": []}, group=group)


def _runner(folder: Path, ran: list[str], refuse: set[str] = frozenset()):
    def run_cell(jobs: dict, source: str) -> Path:
        key = source.removeprefix("cell ")
        ran.append(key)
        if key in refuse:
            raise OrionError(f"{key} cannot run here")
        run_dir = folder / "runs" / key.replace("/", "_")
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps({"status": "complete"}))
        return run_dir

    return run_cell


def test_a_refused_cell_is_recorded_as_null_and_tried_again_next_time(tmp_path: Path) -> None:
    planned = [_cell("a"), _cell("b"), _cell("c")]
    ran: list[str] = []
    lines: list[str] = []
    index = CellIndex.load(tmp_path, PAIRS_INDEX, {"jobs": 1})
    assert run_cells(index, planned, run_cell=_runner(tmp_path, ran, {"b"}), progress=lines.append)
    assert ran == ["a", "b", "c"]
    assert "  refused: b cannot run here" in lines
    saved = json.loads((tmp_path / "index.json").read_text())
    assert saved["cells"] == {"a": "runs/a", "b": None, "c": "runs/c"}
    again: list[str] = []
    index = CellIndex.load(tmp_path, PAIRS_INDEX, {"jobs": 1})
    assert run_cells(index, planned, run_cell=_runner(tmp_path, again), progress=lines.append)
    assert again == ["b"]


def test_cells_of_a_group_are_kept_under_it(tmp_path: Path) -> None:
    index = CellIndex.load(tmp_path, MATRIX_INDEX)
    run_cells(index, [_cell("orion#2", "g1")], run_cell=_runner(tmp_path, []), progress=print)
    saved = json.loads((tmp_path / "matrix.json").read_text())
    assert saved["format"] == "orion-matrix"
    assert saved["cells"] == {"g1": {"orion#2": "runs/g1_orion#2"}}


def test_an_index_of_another_format_is_refused(tmp_path: Path) -> None:
    CellIndex.load(tmp_path, MATRIX_INDEX).save()
    (tmp_path / "index.json").write_text((tmp_path / "matrix.json").read_text())
    with pytest.raises(OrionError, match="is not an index of format 'orion-pairs-index'"):
        CellIndex.load(tmp_path, PAIRS_INDEX, {"jobs": 1})
