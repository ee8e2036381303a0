"""`orion plan` on the fixture fleet: the table, the plan file, clean errors, --help."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from orion_cli.app import app
from placement.plan_file import load_plan

DATA = Path(__file__).parent / "data" / "placement"
runner = CliRunner()


def _plan(*args: str):
    base = ["plan", str(DATA / "fleet.json"), "--matrix-dir", str(DATA / "pairs")]
    return runner.invoke(app, [*base, *args], env={"COLUMNS": "200"})


def test_plan_prints_the_table_and_writes_the_file(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    result = _plan("-o", str(out), "--objective", "max-min-be")
    assert result.exit_code == 0, result.output
    assert "orion plan (max-min-be)" in result.output
    assert "search (hp: resnet-infer)" in result.output
    assert "2.20 (2.30 / 2.5)" in result.output
    assert "unplaced: none" in result.output
    plan = load_plan(out)
    assert plan.objective == "max-min-be"
    assert [c.name for c in plan.gpus[1].clients] == ["a", "c"]


def test_plan_uses_the_fleet_objective_by_default() -> None:
    result = _plan()
    assert result.exit_code == 0, result.output
    assert "orion plan (max-total-be)" in result.output
    assert "unplaced: a" in result.output


def test_plan_errors_are_one_line(tmp_path: Path) -> None:
    fleet = json.loads((DATA / "fleet.json").read_text(encoding="utf-8"))
    fleet["hp"][0]["p99_slo_ms"] = 1.0
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(fleet), encoding="utf-8")
    result = runner.invoke(
        app, ["plan", str(path), "--matrix-dir", str(DATA / "pairs")], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 1
    assert "error: hp service 'search' (p99 SLO 1.0 ms) cannot meet its SLO anywhere" in (
        result.output
    )
    missing = runner.invoke(app, ["plan", str(path), "--matrix-dir", str(tmp_path)])
    assert missing.exit_code == 1
    assert "no pair matrix for GPU kind 'nvidia-h100-80gb-hbm3'" in missing.output


def test_plan_refuses_an_unknown_objective() -> None:
    result = _plan("--objective", "cheapest")
    assert result.exit_code != 0
    assert "cheapest" in result.output


def test_plan_help_explains() -> None:
    result = runner.invoke(app, ["plan", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for words in ("--matrix-dir", "--objective", "max-min-be", "fewest-gpus", "SLO"):
        assert words in result.output
