"""Bad inputs a new user types, across commands: each is one `error:` line (no traceback),
said before any work starts and before any "no GPU" (input errors first, machine problems
after). One row per case; ``{tmp}`` is a fresh folder, ``{file}`` an existing file in it,
``{proc}`` a path no one can create, ``{data}`` the placement fixtures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rundir_factory import standard_runs
from typer.testing import CliRunner

from orion_cli.app import app

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "placement"
runner = CliRunner(env={"COLUMNS": "200"})

PLAN = ["plan", "{data}/fleet.json", "--matrix-dir", "{data}/pairs"]
SIMULATE = ["simulate", "{data}/simulate/fleet.json", "--matrix-dir", "{data}/pairs"]
REPORT = ["report", "{run}"]


def _pairs_jobs(tmp: Path, file_name: str, **changes: dict) -> str:
    """examples/pairs.json with some jobs' fields changed."""
    document = json.loads((ROOT / "examples" / "pairs.json").read_text())
    for name, fields in changes.items():
        document["jobs"][name.replace("_", "-")].update(fields)
    path = tmp / file_name
    path.write_text(json.dumps(document))
    return str(path)


def _fill(args: list[str], tmp: Path) -> list[str]:
    values = {
        "tmp": str(tmp),
        "file": str(tmp / "existing.txt"),
        "proc": "/proc/orion-cannot-create",
        "data": str(DATA),
        "run": str(tmp / "runs" / "run-dedicated"),
    }
    return [arg.format(**values) for arg in args]


# (id, arguments, a piece of the one error line)
OUTPUT_PATHS = [
    ("report --json -o /proc", [*REPORT, "--json", "-o", "{proc}"], "cannot write report folder"),
    ("report --json -o file", [*REPORT, "--json", "-o", "{file}"], "it is a file, not a folder"),
    ("report -o /proc", [*REPORT, "-o", "{proc}"], "cannot write report folder"),
    ("report -o file", [*REPORT, "-o", "{file}"], "it is a file, not a folder"),
    ("plan -o /proc", [*PLAN, "-o", "{proc}"], "cannot write plan file"),
    ("plan -o a folder", [*PLAN, "-o", "{tmp}"], "it is a folder"),
    ("plan -o under a file", [*PLAN, "-o", "{file}/plan.json"], "is a file, not a folder"),
    ("simulate -o /proc", [*SIMULATE, "-o", "{proc}"], "cannot write simulation folder"),
    ("simulate -o file", [*SIMULATE, "-o", "{file}"], "it is a file, not a folder"),
    ("pairs --out /proc", ["pairs", "examples/pairs.json", "--out", "{proc}"], "cannot write"),
    ("colocate -o /proc", ["colocate", "examples/headline.json", "-o", "{proc}"], "cannot write"),
]
BEFORE_THE_GPU = [
    (
        "pairs: unknown workload",
        ["pairs", "{pairs_unknown}", "--out", "{tmp}/m"],
        "unknown workload 'nosuch'",
    ),
    (
        "pairs: cuda_graph on a synthetic workload",
        ["pairs", "{pairs_synthetic}", "--out", "{tmp}/m"],
        "cannot be captured",
    ),
    (
        "pairs: negative --time-budget",
        ["pairs", "examples/pairs.json", "--time-budget", "-5", "--out", "{tmp}/m"],
        "--time-budget",
    ),
]
CASES = OUTPUT_PATHS + BEFORE_THE_GPU


@pytest.mark.parametrize(("case", "args", "message"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_is_one_error_line_before_any_work(
    case: str, args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    (tmp_path / "existing.txt").write_text("keep me\n")
    standard_runs(tmp_path / "runs")
    extra = {
        "pairs_unknown": _pairs_jobs(
            tmp_path, "unknown.json", resnet50_serve={"workload": "nosuch"}
        ),
        "pairs_synthetic": _pairs_jobs(
            tmp_path, "synthetic.json", resnet50_serve={"workload": "synthetic-compute"}
        ),
    }
    filled = [arg.format(**extra) if arg.strip("{}") in extra else arg for arg in args]
    result = runner.invoke(app, _fill(filled, tmp_path))
    assert not isinstance(result.exception, Exception), result.output  # no traceback
    assert result.exit_code in (1, 2), result.output
    assert message in result.output, result.output
    assert "no NVIDIA GPU" not in result.output
    assert (tmp_path / "existing.txt").read_text() == "keep me\n"
    shutil.rmtree(tmp_path / "runs")
