"""`orion simulate`: hand-worked rounds, determinism, validation and the CLI on a small fleet.

Fixture matrix (tests/data/placement/pairs): HP resnet-infer alone p99 2.0 ms, beside train-b
ratio 1.1 (interval top 1.15: 2.3 ms, within a 2.5 ms SLO), train-b's ratio there 0.8; train-b
alone 50 samples/s at batch 1, so 50 iterations/s (the matrix counts samples, a job's length is
in iterations). Beside train-c the HP ratio is 1.5 (3.0 ms, over the SLO).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orion_cli.app import app
from orion_common.errors import OrionError
from placement.plan import load_matrices
from placement.simulate import arrivals, parse_simulation, simulate

DATA = Path(__file__).parent / "data" / "placement"
PAIRS = DATA / "pairs"
FIXTURE = DATA / "simulate" / "fleet.json"
KIND = "nvidia-h100-80gb-hbm3"
runner = CliRunner()


def _two_job(tmp_path: Path, gpus: int, arrival_s: float = 0.0) -> dict[str, Any]:
    (tmp_path / "jobs.csv").write_text(f"arrival_s,job\n{arrival_s},train-b\n", encoding="utf-8")
    return {
        "gpus": [{"kind": KIND, "count": gpus}],
        "hp": [{"name": "search", "job": "resnet-infer", "rate_per_s": 200.0, "p99_slo_ms": 2.5}],
        "simulation": {
            "round_s": 100,
            "duration_s": 1000,
            "seed": 1,
            "arrivals": {"kind": "trace", "path": "jobs.csv"},
            "job_mix": [{"job": "train-b", "iterations": 10000, "share": 1.0}],
        },
    }


def _run(data: dict[str, Any], base_dir: Path | None = None):
    spec = parse_simulation(data, "sim.json", base_dir)
    return simulate(spec, load_matrices(spec.fleet.gpu_kinds(), PAIRS))


def test_one_gpu_hp_and_be_worked_by_hand(tmp_path: Path) -> None:
    # orion puts b beside search: 50 x 0.8 = 40 it/s, 4000 per 100 s round. After rounds 0 and 1
    # 2000 are left: 50 s into round 2, so b finishes at 250 s. One GPU, held by search: the
    # one-GPU-per-job baseline never runs b.
    _, results = _run(_two_job(tmp_path, gpus=1), tmp_path)
    orion = results["orion"].metrics()
    assert results["orion"].completion_s == {"j0001": pytest.approx(250.0)}
    assert orion["avg_jct_s"] == pytest.approx(250.0)
    assert orion["makespan_s"] == pytest.approx(250.0)
    assert orion["rounds"] == 3
    assert orion["gpu_utilisation"] == pytest.approx(1.0)
    assert orion["hp_slo_violations"] == 0
    assert orion["gpus_used"] == 1
    alone = results["one-gpu-per-job"].metrics()
    assert alone["finished"] == 0 and alone["unfinished"] == 1
    assert alone["avg_jct_s"] is None


def test_arrival_mid_round_waits_for_the_next_round(tmp_path: Path) -> None:
    # arrives at 30 s, starts at 100 s, 250 s of work: finishes at 350 s, JCT 320 s
    _, results = _run(_two_job(tmp_path, gpus=1, arrival_s=30.0), tmp_path)
    assert results["orion"].completion_s["j0001"] == pytest.approx(320.0)
    assert results["orion"].finish_s["j0001"] == pytest.approx(350.0)


def test_one_gpu_per_job_with_two_gpus_worked_by_hand(tmp_path: Path) -> None:
    # b gets GPU 1 alone: 50 it/s, 5000 per round, done exactly at the end of round 1 (200 s).
    # Two GPUs busy both rounds (search on GPU 0): utilisation 1, two GPUs used.
    _, results = _run(_two_job(tmp_path, gpus=2), tmp_path)
    alone = results["one-gpu-per-job"].metrics()
    assert alone["avg_jct_s"] == pytest.approx(200.0)
    assert alone["rounds"] == 2
    assert alone["gpu_utilisation"] == pytest.approx(1.0)
    assert alone["gpus_used"] == 2
    # gavel-isolated does the same with one job; orion prefers b alone too (50 > 40 it/s)
    assert results["gavel-isolated"].metrics()["avg_jct_s"] == pytest.approx(200.0)
    assert results["orion"].metrics()["avg_jct_s"] == pytest.approx(200.0)


def test_packing_blind_breaks_the_slo_that_orion_keeps(tmp_path: Path) -> None:
    # c beside search: predicted p99 2.0 x 1.5 = 3.0 ms > 2.5 ms. packing-blind packs it there
    # (first fit) for every round it runs; orion gives c the second GPU.
    data = _two_job(tmp_path, gpus=2)
    (tmp_path / "jobs.csv").write_text("arrival_s,job\n0,train-c\n", encoding="utf-8")
    # The matrix counts samples: c's 200 samples/s alone at batch 8 are 25 iterations/s.
    data["simulation"]["job_mix"] = [{"job": "train-c", "iterations": 3750, "share": 1.0}]
    _, results = _run(data, tmp_path)
    # packing-blind: 25 x 0.5 = 12.5 it/s, 300 s (3 rounds, each an SLO violation)
    blind = results["packing-blind"].metrics()
    assert blind["avg_jct_s"] == pytest.approx(300.0)
    assert blind["hp_slo_violations"] == 3
    assert blind["gpus_used"] == 1
    orion = results["orion"].metrics()
    assert orion["hp_slo_violations"] == 0
    assert orion["avg_jct_s"] == pytest.approx(150.0)  # alone: 25 it/s


def test_gavel_isolated_rotates_jobs_round_robin(tmp_path: Path) -> None:
    # two b jobs, one free GPU: they alternate rounds. Each needs two full rounds of 5000:
    # j1 runs rounds 0, 2 (done 300 s), j2 rounds 1, 3 (done 400 s).
    data = _two_job(tmp_path, gpus=2)
    (tmp_path / "jobs.csv").write_text("arrival_s,job\n0,train-b\n0,train-b\n", encoding="utf-8")
    _, results = _run(data, tmp_path)
    gavel = results["gavel-isolated"]
    assert gavel.finish_s == {"j0001": pytest.approx(300.0), "j0002": pytest.approx(400.0)}
    # one-gpu-per-job is FIFO: j1 200 s, j2 400 s
    assert results["one-gpu-per-job"].finish_s == {
        "j0001": pytest.approx(200.0),
        "j0002": pytest.approx(400.0),
    }


def _fixture() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def test_same_seed_same_metrics_other_seed_other_arrivals() -> None:
    first_jobs, first = _run(_fixture())
    again_jobs, again = _run(_fixture())
    assert first_jobs == again_jobs
    assert {n: r.metrics() for n, r in first.items()} == {n: r.metrics() for n, r in again.items()}
    other = _fixture()
    other["simulation"]["seed"] = 2
    other_jobs = arrivals(parse_simulation(other))
    assert [j.arrival_s for j in other_jobs] != [j.arrival_s for j in first_jobs]


def _with(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(_fixture())
    *parents, last = path.split(".")
    target = data
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if value is _DELETE:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("simulation", _DELETE, "simulation: is required"),
        ("simulation.round_s", 0, "simulation.round_s: must be positive, not 0"),
        ("simulation.duration_s", 10, "simulation.duration_s: must be at least round_s (360)"),
        ("simulation.seed", 1.5, "simulation.seed: must be an integer"),
        ("simulation.arrivals", {"kind": "burst"}, "simulation.arrivals.kind: must be one of"),
        (
            "simulation.arrivals",
            {"kind": "poisson"},
            "simulation.arrivals.jobs_per_hour: is required",
        ),
        ("simulation.job_mix", [], "simulation.job_mix: must not be empty"),
        ("simulation.job_mix.0.share", -1, "simulation.job_mix[0].share: must be positive"),
        ("simulation.job_mix.0.iterations", "x", "simulation.job_mix[0].iterations: must be a"),
        ("simulation.extra", 1, "simulation.extra: unknown field"),
        ("be", [{"name": "a", "job": "train-a"}], "be: must be empty"),
    ],
)
def test_invalid_simulation_is_one_line_naming_the_field(
    path: str, value: Any, expected: str
) -> None:
    with pytest.raises(OrionError) as raised:
        parse_simulation(_with(path, value), "sim.json")
    message = raised.value.message
    assert message.startswith("sim.json: ")
    assert expected in message
    assert "\n" not in message


def test_mix_job_missing_from_the_matrix() -> None:
    with pytest.raises(OrionError, match=r"simulation\.job_mix\[0\]\.job: 'train-z' is not in"):
        _run(_with("simulation.job_mix.0.job", "train-z"))
    with pytest.raises(OrionError, match=r"simulation\.job_mix\[0\]\.job: 'resnet-infer' is an"):
        _run(_with("simulation.job_mix.0.job", "resnet-infer"))


def test_trace_errors_name_the_line(tmp_path: Path) -> None:
    data = _two_job(tmp_path, gpus=1)
    (tmp_path / "jobs.csv").write_text("arrival_s,job\n0,train-a\n", encoding="utf-8")
    with pytest.raises(OrionError, match=r"line 2: job: 'train-a' is not in simulation\.job_mix"):
        _run(data, tmp_path)
    (tmp_path / "jobs.csv").write_text("arrival_s,job\nsoon,train-b\n", encoding="utf-8")
    with pytest.raises(OrionError, match="line 2: arrival_s/iterations must be numbers"):
        _run(data, tmp_path)


def test_cli_prints_the_table_and_writes_json_and_figure(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        ["simulate", str(FIXTURE), "--matrix-dir", str(PAIRS), "-o", str(out)],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    for name in ("orion", "one-gpu-per-job", "packing-blind", "gavel-isolated"):
        assert name in result.output
    document = json.loads((out / "simulation.json").read_text(encoding="utf-8"))
    assert (document["format"], document["version"], document["seed"]) == (
        "orion-simulation",
        1,
        1,
    )
    assert set(document["metrics"]) == {
        "orion",
        "one-gpu-per-job",
        "packing-blind",
        "gavel-isolated",
    }
    assert document["metrics"]["orion"]["hp_slo_violations"] == 0
    assert document["settings"]["round_s"] == 360
    assert (out / "simulation_jct_cdf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_error_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "sim.json"
    path.write_text(json.dumps(_with("simulation.round_s", 0)), encoding="utf-8")
    result = runner.invoke(
        app, ["simulate", str(path), "--matrix-dir", str(PAIRS)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 1
    assert "simulation.round_s: must be positive, not 0" in result.output


def test_each_round_of_each_policy_is_told_to_the_progress(tmp_path: Path) -> None:
    spec = parse_simulation(_two_job(tmp_path, gpus=1), "sim.json", tmp_path)
    heard: dict[str, list[tuple[int, int]]] = {}
    matrices = load_matrices(spec.fleet.gpu_kinds(), PAIRS)
    _, results = simulate(
        spec, matrices, progress_of_rounds=lambda p, r, m: heard.setdefault(p, []).append((r, m))
    )
    assert set(heard) == set(results)
    for policy, rounds in heard.items():
        assert [r for r, _ in rounds] == list(range(1, results[policy].metrics()["rounds"] + 1))
        assert all(r <= most for r, most in rounds)


def test_a_terminal_gets_progress_and_the_same_table(monkeypatch: pytest.MonkeyPatch) -> None:
    import orion_cli.plan
    import orion_cli.simulate

    monkeypatch.setattr(orion_cli.simulate, "interactive", lambda: True)
    monkeypatch.setattr(orion_cli.plan, "interactive", lambda: True)
    result = runner.invoke(app, ["simulate", str(FIXTURE), "--matrix-dir", str(PAIRS)])
    assert result.exit_code == 0, result.output
    assert "orion simulate (" in result.output
    result = runner.invoke(app, ["plan", str(DATA / "fleet.json"), "--matrix-dir", str(PAIRS)])
    assert result.exit_code == 0, result.output
    assert "orion plan (" in result.output
