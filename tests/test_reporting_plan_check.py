"""`orion report PLAN_RUN_DIR`: a plan run's GPUs measured against the plan's predictions.

The GPU runs come from rundir_factory, so every measured figure is known by hand: HP latencies
scale × 1..100 ms give p99 = 99.01 × scale; BE iterations of 32 samples, n of them in a 10 s
window, give 3.2 × n samples/s.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rundir_factory import ClientSpec, be_train_rows, hp_rows, standard_runs, write_run
from typer.testing import CliRunner

from orion_cli.app import app
from orion_common.errors import OrionError
from orion_common.plan_run_format import PLAN_RUN_FILE, PLAN_RUN_FORMAT
from placement.plan_file import Plan, PlanClient, PlanGpu, load_plan, write_plan
from reporting import load_runs, report_tables
from reporting.plan_check import (
    SECTION_HEADING,
    STATE_FAILED,
    STATE_INCOMPLETE,
    STATE_MISSING,
    STATE_OK,
    PlanCheck,
    check_plan,
    read_plan_run,
)

runner = CliRunner(env={"COLUMNS": "240"})
STAMP = "20261123-160000"
P99 = 99.01  # p99 of 1..100 ms (numpy linear interpolation)


def _hp(name: str, predicted: float, slo: float) -> PlanClient:
    return PlanClient(
        name=name,
        job=f"{name}-job",
        role="hp",
        workload="resnet50",
        mode="infer",
        batch_size=4,
        rate_per_s=10.0,
        p99_slo_ms=slo,
        predicted_p99_ms=predicted,
        predicted_p99_upper_ms=predicted * 1.1,
    )


def _be(name: str, predicted: float) -> PlanClient:
    return PlanClient(
        name=name,
        job=f"{name}-job",
        role="be",
        workload="resnet50",
        mode="train",
        batch_size=32,
        weight=1.0,
        predicted_throughput_per_s=predicted,
        predicted_ratio=0.8,
    )


def _plan(gpus: list[tuple[PlanClient, ...]]) -> Plan:
    return Plan(
        objective="max-total-be",
        gpus=tuple(
            PlanGpu(index, "nvidia-h100-80gb-hbm3", "orion", {"queue_limit_us": 200}, clients)
            for index, clients in enumerate(gpus)
        ),
        unplaced=(),
        totals={
            "gpus_used": len(gpus),
            "be_throughput_per_s": 0.0,
            "weighted_be_throughput_per_s": 0.0,
            "min_weighted_be_ratio": 0.0,
        },
    )


def _gpu_run(root: Path, index: int, hp: tuple[str, float], be: tuple[str, int], **kw) -> str:
    """GPU ``index``'s run directory with an HP client (latency scale) and a BE client (its
    iterations in the window); returns its path relative to the plan-run directory."""
    clients = [
        ClientSpec(hp[0], "hp", "infer", hp_rows(hp[1])),
        ClientSpec(be[0], "be", "train", be_train_rows(be[1], (10.0, 20.0)), batch_size=32),
    ]
    write_run(root / f"gpu{index}", f"orion-{STAMP}", policy="orion", clients=clients, **kw)
    return f"gpu{index}/orion-{STAMP}"


def _write_plan_run(
    root: Path, plan: Plan, gpus: list[dict[str, Any]], status: str = "complete"
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    write_plan(plan, root / "plan.json")
    entries = [{"index": i, "jobs": f"gpu{i}/jobs.json", **gpu} for i, gpu in enumerate(gpus)]
    document = {
        "format": PLAN_RUN_FORMAT,
        "version": 1,
        "plan": "plan.json",
        "started_utc": "2026-11-23T16:00:00+00:00",
        "ended_utc": "2026-11-23T16:05:00+00:00",
        "status": status,
        "gpus": entries,
    }
    (root / PLAN_RUN_FILE).write_text(json.dumps(document), encoding="utf-8")
    return root


@pytest.fixture
def plan_run(tmp_path: Path) -> Path:
    """Three GPUs: gpu0 as predicted (HP 4 % slower, BE 5 % under), gpu1 off the prediction
    (HP p99 1.32×, over its SLO; BE at half), gpu2 failed before writing a run."""
    root = tmp_path / f"plan-{STAMP}"
    plan = _plan(
        [
            (_hp("search", 95.0, slo=100.0), _be("a", 64.0)),
            (_hp("ads", 150.0, slo=180.0), _be("b", 64.0)),
            (_be("c", 50.0),),
        ]
    )
    gpu0 = _gpu_run(root, 0, ("search", 1.0), ("a", 19))
    gpu1 = _gpu_run(root, 1, ("ads", 2.0), ("b", 10))
    return _write_plan_run(
        root,
        plan,
        [
            {"run_dir": gpu0, "exit_code": 0},
            {"run_dir": gpu1, "exit_code": 0},
            {"run_dir": None, "exit_code": 1},
        ],
        status="failed",
    )


def _check(root: Path) -> PlanCheck:
    plan_run = read_plan_run(root)
    return check_plan(load_plan(plan_run.plan_path), plan_run)


def _row(check: PlanCheck, client: str) -> dict[str, Any]:
    rows = check.rows[check.rows["client"] == client].to_dict("records")
    assert len(rows) == 1
    return rows[0]


def test_within_ten_percent_of_the_prediction(plan_run: Path) -> None:
    check = _check(plan_run)
    search = _row(check, "search")
    assert (search["gpu"], search["run"], search["state"]) == (0, "gpu0", STATE_OK)
    assert search["measured_p99_ms"] == pytest.approx(P99)
    assert search["ratio"] == pytest.approx(P99 / 95.0)
    assert search["within_tolerance"] is True
    assert search["slo_met"] is True
    assert search["predicted_p99_upper_ms"] == pytest.approx(104.5)
    assert search["measured_p99_ci_lo_ms"] <= P99 <= search["measured_p99_ci_hi_ms"]
    a = _row(check, "a")
    assert a["measured_throughput_per_s"] == pytest.approx(19 * 32 / 10.0)  # samples/s
    assert a["ratio"] == pytest.approx(60.8 / 64.0)
    assert a["within_tolerance"] is True
    assert a["slo_met"] is None


def test_outside_ten_percent_and_over_the_slo(plan_run: Path) -> None:
    check = _check(plan_run)
    ads, b = _row(check, "ads"), _row(check, "b")
    assert ads["measured_p99_ms"] == pytest.approx(2 * P99)
    assert ads["ratio"] == pytest.approx(2 * P99 / 150.0)
    assert (ads["within_tolerance"], ads["slo_met"]) == (False, False)
    assert b["ratio"] == pytest.approx(32.0 / 64.0)
    assert b["within_tolerance"] is False
    assert check.accepted is False
    assert any("ads (hp): p99 198.02 ms over its 180.00 ms SLO" in s for s in check.summary)
    assert any(s.startswith("2 of 5 planned clients within 10%") for s in check.summary)


def test_a_failed_gpu_gets_a_row_saying_so(plan_run: Path) -> None:
    check = _check(plan_run)
    c = _row(check, "c")
    assert (c["gpu"], c["run"], c["state"]) == (2, None, STATE_FAILED)
    assert "exited with code 1 before writing a run directory" in c["note"]
    assert c["within_tolerance"] is None
    assert math.isnan(c["measured_throughput_per_s"])
    assert c["predicted_throughput_per_s"] == 50.0
    assert [run.label for run in check.runs] == ["gpu0", "gpu1"]
    assert "gpu2 failed: exited with code 1 before writing a run directory" in check.summary
    assert any("status is 'failed'" in warning for warning in check.warnings)


def test_measured_figures_are_the_clients_tables(plan_run: Path) -> None:
    """The same functions as the report's Clients table: the two cannot disagree."""
    check = _check(plan_run)
    clients = report_tables(list(check.runs)).clients.set_index("client")
    for name in ("search", "ads"):
        assert _row(check, name)["measured_p99_ms"] == clients.loc[name, "p99_ms"]
    for name in ("a", "b"):
        assert _row(check, name)["measured_throughput_per_s"] == clients.loc[name, "samples_per_s"]


def test_exactly_ten_percent_is_within(tmp_path: Path) -> None:
    root = tmp_path / "plan"
    gpu0 = _gpu_run(root, 0, ("search", 1.0), ("a", 20))
    plan = _plan([(_hp("search", P99 / 1.1, slo=200.0), _be("a", 64.0 / 0.9))])
    check = _check(_write_plan_run(root, plan, [{"run_dir": gpu0, "exit_code": 0}]))
    assert _row(check, "search")["within_tolerance"] is True
    assert _row(check, "a")["within_tolerance"] is True
    assert check.accepted is True
    assert check.summary[0].startswith("plan met")


def test_missing_run_directory_and_client(tmp_path: Path) -> None:
    root = tmp_path / "plan"
    gpu0 = _gpu_run(root, 0, ("other", 1.0), ("a", 20))
    plan = _plan([(_hp("search", P99, slo=200.0), _be("a", 64.0)), (_be("c", 50.0),)])
    check = _check(
        _write_plan_run(
            root,
            plan,
            [{"run_dir": gpu0, "exit_code": 0}, {"run_dir": "gpu1/gone", "exit_code": 0}],
        )
    )
    search = _row(check, "search")
    assert search["state"] == STATE_MISSING
    assert "the GPU's run has no client 'search'" in search["note"]
    c = _row(check, "c")
    assert c["state"] == STATE_MISSING
    assert "is not an orion run directory" in c["note"]
    assert _row(check, "a")["within_tolerance"] is True
    assert check.accepted is None


def test_a_run_stopped_early_is_judged_and_flagged(tmp_path: Path) -> None:
    root = tmp_path / "plan"
    gpu0 = _gpu_run(root, 0, ("search", 1.0), ("a", 19), status="incomplete")
    plan = _plan([(_hp("search", P99, slo=200.0), _be("a", 60.8))])
    check = _check(
        _write_plan_run(root, plan, [{"run_dir": gpu0, "exit_code": 130}], status="incomplete")
    )
    # exit code 130 is how a GPU's run ends on Ctrl-C: what it recorded is judged, and flagged
    search = _row(check, "search")
    assert search["state"] == STATE_INCOMPLETE
    assert "run incomplete, exit code 130: figures cover only what it recorded" in search["note"]
    assert search["within_tolerance"] is True
    assert _row(check, "a")["within_tolerance"] is True
    assert any("status is 'incomplete'" in warning for warning in check.warnings)


def test_a_run_in_which_every_client_failed_is_failed(tmp_path: Path) -> None:
    root = tmp_path / "plan"
    gpu0 = _gpu_run(root, 0, ("search", 1.0), ("a", 19), status="failed")
    plan = _plan([(_hp("search", P99, slo=200.0), _be("a", 60.8))])
    check = _check(_write_plan_run(root, plan, [{"run_dir": gpu0, "exit_code": 1}]))
    assert set(check.rows["state"]) == {STATE_FAILED}
    assert set(check.rows["within_tolerance"]) == {None}
    assert [run.label for run in check.runs] == ["gpu0"]  # still in the usual report
    assert check.accepted is False


def test_report_md_has_the_plan_section(plan_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = runner.invoke(app, ["report", str(plan_run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text(encoding="utf-8")
    assert f"## {SECTION_HEADING}" in text
    assert text.index(f"## {SECTION_HEADING}") < text.index("## Clients")
    section = text[text.index(f"## {SECTION_HEADING}") : text.index("## Trade-off")]
    assert "- plan not met" in section
    rows = {line.split(" | ")[2]: line for line in section.splitlines() if line.startswith("| ")}
    assert "99.01 ms [" in rows["search"] and "95.00 ms (upper 104.50)" in rows["search"]
    assert "| 1.042 | yes | 100.00 | yes |" in rows["search"]
    assert "| 60.8 samples/s | 0.950 | yes |" in rows["a"]
    assert "| 1.320 | no | 180.00 | no |" in rows["ads"]
    assert "| failed |" in rows["c"] and "exited with code 1" in rows["c"]
    # the usual report of the GPUs' runs follows, labelled by GPU
    assert "`gpu0`" in text and "`gpu1`" in text


def test_terminal_shows_the_plan_table(plan_run: Path) -> None:
    result = runner.invoke(app, ["report", "--no-plots", str(plan_run)])
    assert result.exit_code == 0, result.output
    assert SECTION_HEADING in result.output
    assert "- plan not met" in result.output
    assert "- gpu2 failed: exited with code 1 before writing a run directory" in result.output
    line = next(line for line in result.output.splitlines() if " search " in line and "ms" in line)
    assert "99.01 ms [" in line and "1.042" in line
    assert "clients" in result.output  # the usual tables too


def test_json_has_the_plan_check(plan_run: Path) -> None:
    result = runner.invoke(app, ["report", "--json", str(plan_run)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [run["label"] for run in data["runs"]] == ["gpu0", "gpu1"]
    plan = data["plan"]
    assert plan["accepted"] is False
    assert plan["tolerance"] == 0.1
    assert plan["plan_run"]["status"] == "failed"
    by_client = {row["client"]: row for row in plan["clients"]}
    assert by_client["search"]["within_tolerance"] is True
    assert by_client["search"]["measured_p99_ms"] == pytest.approx(P99)
    assert by_client["b"]["within_tolerance"] is False
    assert by_client["c"]["state"] == "failed"
    assert by_client["c"]["measured_throughput_per_s"] is None
    assert [gpu["state"] for gpu in plan["gpus"]] == ["ok", "ok", "failed"]


def test_a_plan_run_without_any_gpu_run_still_reports(tmp_path: Path) -> None:
    root = _write_plan_run(
        tmp_path / "plan",
        _plan([(_be("c", 50.0),)]),
        [{"run_dir": None, "exit_code": 2}],
        status="failed",
    )
    out = tmp_path / "report"
    result = runner.invoke(app, ["report", str(root), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "gpu0 failed: exited with code 2" in result.output
    assert f"## {SECTION_HEADING}" in (out / "report.md").read_text(encoding="utf-8")
    data = json.loads(runner.invoke(app, ["report", "--json", str(root)]).output)
    assert data["runs"] == [] and data["plan"]["accepted"] is False


def test_a_normal_run_directory_reports_as_before(tmp_path: Path) -> None:
    paths = list(standard_runs(tmp_path / "runs").values())
    result = runner.invoke(app, ["report", "--json", *map(str, paths)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert "plan" not in data
    assert [run["label"] for run in data["runs"]] == ["dedicated", "orion", "timeslice"]
    out = tmp_path / "report"
    result = runner.invoke(app, ["report", str(paths[1]), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert SECTION_HEADING not in result.output
    assert SECTION_HEADING not in (out / "report.md").read_text(encoding="utf-8")
    assert report_tables(load_runs(paths)).labels == ["dedicated", "orion", "timeslice"]


def _error_line(result: Any) -> str:
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    return errors[0]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: "{not json", "plan_run.json is not valid JSON: line 1"),
        (lambda d: "[" * 100_000, "plan_run.json is nested too deeply"),
        (lambda d: {**d, "format": "orion-run"}, "format: must be 'orion-plan-run'"),
        (lambda d: {**d, "version": 2}, "version: is 2; this orion reads version 1"),
        (lambda d: {**d, "status": "done"}, "status: must be one of running, complete"),
        (lambda d: {k: v for k, v in d.items() if k != "gpus"}, "gpus: is required"),
        (
            lambda d: {**d, "gpus": [{**d["gpus"][0], "index": "0"}]},
            "gpus[0].index: must be an integer",
        ),
        (
            lambda d: {**d, "gpus": [d["gpus"][0], d["gpus"][0]]},
            "gpus[1].index: GPU 0 is listed twice",
        ),
        (
            lambda d: {**d, "gpus": [{**d["gpus"][0], "run_dir": 3}]},
            "gpus[0].run_dir: must be a non-empty string",
        ),
    ],
)
def test_a_malformed_plan_run_json_is_a_one_line_error(
    plan_run: Path, edit: Any, expected: str
) -> None:
    path = plan_run / PLAN_RUN_FILE
    edited = edit(json.loads(path.read_text(encoding="utf-8")))
    path.write_text(edited if isinstance(edited, str) else json.dumps(edited), encoding="utf-8")
    line = _error_line(runner.invoke(app, ["report", str(plan_run)]))
    assert expected in line
    with pytest.raises(OrionError, match=re.escape(expected)):
        read_plan_run(plan_run)


def test_a_missing_plan_json_is_a_one_line_error(plan_run: Path) -> None:
    (plan_run / "plan.json").unlink()
    line = _error_line(runner.invoke(app, ["report", "--json", str(plan_run)]))
    assert "has no plan.json (the copy of the plan it ran)" in line


def test_a_plan_run_is_reported_on_its_own(plan_run: Path, tmp_path: Path) -> None:
    other = standard_runs(tmp_path / "runs")["orion"]
    line = _error_line(runner.invoke(app, ["report", str(plan_run), str(other)]))
    assert "is a plan-run directory, which is reported on its own" in line


# Stands in for `orion colocate JOBS.json` under `orion colocate plan.json`'s own runner
# (placement.plan_run.run_plan): writes the run directory a real run would, with the jobs
# file's clients (HP latencies 1..100 ms, BE 20 iterations of 32 samples in the window).
FAKE_COLOCATE = """
import json, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from rundir_factory import ClientSpec, be_train_rows, hp_rows, write_run
run = json.load(open(sys.argv[2]))
clients = [
    ClientSpec(c["name"], "hp", "infer", hp_rows(1.0))
    if c["role"] == "hp"
    else ClientSpec(c["name"], "be", "train", be_train_rows(20, (10.0, 20.0)), batch_size=32)
    for c in run["clients"]
]
policy = run["run"]["policy"]
folder = Path(run["run"]["output_dir"])
write_run(folder, policy + "-20261123-160000", policy=policy, clients=clients)
"""


def test_a_plan_run_as_orion_run_plan_writes_it(tmp_path: Path) -> None:
    """The reader against the writer: a plan solved from the placement test data, run by
    placement.plan_run with each GPU's `orion colocate` faked, then reported."""
    from placement.fleet import load_fleet
    from placement.plan import load_matrices, solve
    from placement.plan_run import run_plan

    data = Path(__file__).parent / "data" / "placement"
    fleet = load_fleet(data / "fleet.json")
    plan = solve(fleet, load_matrices(fleet.gpu_kinds(), data / "pairs"), "max-total-be")
    plan_path = write_plan(plan, tmp_path / "plan.json")
    fake = tmp_path / "fake_colocate.py"
    fake.write_text(FAKE_COLOCATE.format(tests=str(Path(__file__).parent)), encoding="utf-8")
    root = run_plan(
        plan_path, 30.0, tmp_path / "runs", command=[sys.executable, str(fake)], available_gpus=8
    )
    result = runner.invoke(app, ["report", "--json", str(root)])
    assert result.exit_code == 0, result.output
    checked = json.loads(result.output)["plan"]
    planned = [(gpu.index, c.name) for gpu in plan.gpus for c in gpu.clients]
    assert [(row["gpu"], row["client"]) for row in checked["clients"]] == planned
    assert {row["state"] for row in checked["clients"]} == {STATE_OK}
    for row in checked["clients"]:
        if row["role"] == "hp":
            assert row["measured_p99_ms"] == pytest.approx(P99)
        else:
            assert row["measured_throughput_per_s"] == pytest.approx(20 * 32 / 10.0)
        assert row["ratio"] is not None


def _one_gpu_plan_run(root: Path, matrix_duration_s: float | None) -> Path:
    """One GPU measured for 10 s (rundir_factory's window), its matrix's cells as given."""
    plan = _plan([(_hp("search", 95.0, slo=100.0), _be("a", 64.0))])
    plan = Plan(
        plan.objective,
        (replace(plan.gpus[0], matrix_duration_s=matrix_duration_s),),
        plan.unplaced,
        plan.totals,
    )
    run_dir = _gpu_run(root, 0, ("search", 1.0), ("a", 19))
    return _write_plan_run(root, plan, [{"run_dir": run_dir, "exit_code": 0}])


def test_a_run_shorter_than_the_matrix_cells_is_said_to_measure_something_else(
    tmp_path: Path,
) -> None:
    check = _check(_one_gpu_plan_run(tmp_path / "short", 30.0))
    (warning,) = [w for w in check.warnings if "pairs measured for" in w]
    assert warning.startswith("gpu0: a run of 10 s, where")
    assert "pairs measured for 30 s each" in warning
    # the figures are still judged: the warning says why they may miss, it does not hide them
    assert _row(check, "search")["within_tolerance"] is True


def test_a_run_as_long_as_the_matrix_cells_or_of_an_older_plan_has_no_length_warning(
    tmp_path: Path,
) -> None:
    for name, cells in (("same", 10.0), ("nearly", 10.9), ("older", None)):
        check = _check(_one_gpu_plan_run(tmp_path / name, cells))
        assert not [w for w in check.warnings if "pairs measured for" in w], name
