"""The program suite (benchmarks/suite.py, reporting/suite.py): bad suite files refused before any
GPU work, cells run and recorded (a failed one as failed, with its log, never as a number), the
window's figures, and `orion report` on a committed suite run."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import suite  # noqa: E402

from reporting.suite import (  # noqa: E402
    MODE_TEXT,
    ORION_VARIANTS,
    TARGET_BE_TOGETHER,
    Cell,
    PairFigures,
    be_work_rows,
    hp_latencies,
    hp_service_ms,
    loop_figures,
    paired_requests,
    summarise,
)

DATA = Path(__file__).resolve().parent / "data"
COMMITTED = ROOT / "benchmarks" / "results" / "nvidia-h200" / "suite"


def run_runner(command: list[str]) -> subprocess.CompletedProcess[str]:
    """The runner on the stand-in programs, which find ``program_io`` on PYTHONPATH: each round
    runs a copy of them from its own folder."""
    paths = [str(ROOT / "examples" / "programs"), os.environ.get("PYTHONPATH", "")]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    return subprocess.run(
        command, capture_output=True, text=True, timeout=600, check=False, env=environment
    )


def write_suite(folder: Path, **changes: object) -> Path:
    definition = json.loads((DATA / "suite_cpu.json").read_text())
    definition["programs_dir"] = str(DATA / "suite_programs")
    definition.update(changes)
    path = folder / "suite.json"
    path.write_text(json.dumps(definition))
    return path


def test_the_shipped_suite_is_valid_and_has_the_pairs_the_issue_asks_for() -> None:
    loaded = suite.load_suite(ROOT / "benchmarks" / "suite.json")
    names = [pair.name for pair in loaded.pairs]
    assert len(names) >= 12
    assert "resnet-graph+resnet-train" in names  # the old headline pair stays a row
    assert any(len(pair.be) == 2 for pair in loaded.pairs)
    assert {pair.order for pair in loaded.pairs} == {"be-first", "hp-first"}


def test_a_bad_suite_file_is_refused_one_line_per_problem(tmp_path: Path) -> None:
    path = write_suite(
        tmp_path,
        programs={
            "service": {"role": "hp", "argv": ["no_such_script.py"]},
            "trainer": {"role": "be", "argv": ["cpu_trainer.py"]},
        },
        pairs=[
            {"be": ["trainer"], "order": "be-first"},
            {"hp": "trainer", "be": ["ghost"], "order": "hp-first"},
        ],
    )
    with pytest.raises(SystemExit) as raised:
        suite.load_suite(path)
    lines = str(raised.value).splitlines()
    assert any("program service: no such script" in line for line in lines)
    assert any("pair 1" in line and "no HP program" in line for line in lines)
    assert any("pair 2" in line and "trainer is a be program" in line for line in lines)
    assert any("pair 2" in line and "no program named 'ghost'" in line for line in lines)
    assert all(line.startswith(f"suite: {path}") for line in lines)


def test_an_hp_context_is_an_hp_programs_and_given_only_where_the_mode_lets_hps_choose(
    tmp_path: Path,
) -> None:
    shipped = suite.load_suite(ROOT / "benchmarks" / "suite.json")
    encoder = shipped.programs["encoder-graph"]
    assert encoder.hp_context == "mps"
    assert suite.hp_context_options(encoder, "orion-mps-hp-chooses") == ["--hp-context", "mps"]
    assert suite.hp_context_options(encoder, "orion-mps-hp-own") == []  # the daemon's there
    assert suite.hp_context_options(shipped.programs["llm-decode"], "orion-mps-hp-chooses") == []
    # The daemon is started for the pair's HP: its context decides a BE client's SM share.
    chooses = suite.daemon_options("orion-mps-hp-chooses", encoder)
    assert chooses[chooses.index("--hp-context") + 1] == "mps"
    assert chooses.count("--hp-context") == 1
    assert suite.daemon_options("orion-mps-hp-chooses", shipped.programs["llm-decode"]) == list(
        suite.ORION_VARIANTS["orion-mps-hp-chooses"]
    )
    assert suite.daemon_options("orion-mps-hp-own", encoder) == list(
        suite.ORION_VARIANTS["orion-mps-hp-own"]
    )
    assert suite.daemon_options("orion", None) == []
    programs = json.loads((DATA / "suite_cpu.json").read_text())["programs"]
    be_name = next(name for name, p in programs.items() if p["role"] == "be")
    programs[be_name] = {**programs[be_name], "hp_context": "own"}
    with pytest.raises(SystemExit, match=f"program {be_name}: hp_context is an HP program's"):
        suite.load_suite(write_suite(tmp_path, programs=programs))
    hp_name = next(name for name, p in programs.items() if p["role"] == "hp")
    del programs[be_name]["hp_context"]
    programs[hp_name] = {**programs[hp_name], "hp_context": "apart"}
    with pytest.raises(SystemExit, match="hp_context must be one of mps, own"):
        suite.load_suite(write_suite(tmp_path, programs=programs))


@pytest.mark.parametrize("mode", sorted(ORION_VARIANTS))
def test_every_orion_variant_is_options_orion_up_accepts(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variant's options pass every check `orion up` makes before it reads the GPU, so a
    misspelt or contradictory variant fails here, not on the device's time. Without a GPU the
    daemon stops at the GPU check; with one, it would start (recorded instead)."""
    from typer.testing import CliRunner

    from orion_cli.app import app
    from orion_daemon import control

    started = []
    monkeypatch.setattr(control, "start_detached", lambda settings: started.append(settings))
    command = ["up", "--state-dir", str(tmp_path), *ORION_VARIANTS[mode]]
    result = CliRunner().invoke(app, command)
    words = " ".join(result.output.split())
    assert started or "no NVIDIA GPU 0 that CUDA can use" in words, words
    assert mode in MODE_TEXT


def test_a_rounds_progress_says_what_is_left_at_the_pace_so_far() -> None:
    assert suite.left_estimate(120.0, 2, 10) == "about 8 min left"
    assert suite.left_estimate(30.0, 3, 4) == "about 10 s left"
    assert suite.left_estimate(30.0, 4, 4) == "round done"


def test_a_pair_named_twice_is_refused_before_its_cells_would_collide(tmp_path: Path) -> None:
    pairs = json.loads((DATA / "suite_cpu.json").read_text())["pairs"][:1]
    again = {**pairs[0], "order": "hp-first" if pairs[0]["order"] == "be-first" else "be-first"}
    path = write_suite(tmp_path, pairs=[pairs[0], again])
    with pytest.raises(SystemExit) as raised:
        suite.load_suite(path)
    assert str(raised.value).count("\n") == 0
    assert "pair 2" in str(raised.value) and "the same programs as pair 1" in str(raised.value)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--gpus", "0,x"], "--gpus"),
        (["--gpus", "1,1"], "--gpus"),
        (["--modes", "orion,bogus"], "--modes: bogus"),
        (["--window", "0"], "--window"),
        (["--window", "nan"], "--window"),
        (["--rounds", "0"], "--rounds"),
        (["--learn-s", "-1"], "--learn-s"),
        (["--status-every-s", "-1"], "--status-every-s"),
        (["--hp-requests", "-5"], "--hp-requests"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(
    tmp_path: Path, arguments: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as raised:
        suite.parse_args(["--out", str(tmp_path / "out"), *arguments])
    assert message in str(raised.value)
    assert not (tmp_path / "out").exists()


def test_a_status_sample_asks_the_daemon_from_the_runner_and_records_a_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No `orion status` process per sample (its start slowed an eager HP beside it): the
    runner asks the daemon itself, and a daemon that is not there is a sample with its error."""
    started = []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the worker sets it: put back afterwards
    monkeypatch.setattr(suite.subprocess, "run", lambda *a, **k: started.append(a))
    monkeypatch.setattr(suite.subprocess, "Popen", lambda *a, **k: started.append(a))
    args = suite.parse_args(["--out", str(tmp_path / "out")])
    loaded = suite.load_suite(ROOT / "benchmarks" / "suite.json")
    sample = suite.Worker(loaded, 0, args).status_sample(tmp_path / "no-daemon-here")
    assert "no orion daemon runs for GPU 0" in sample["error"]
    assert sample["time"] > 0
    assert started == []


def test_pairs_of_one_hp_share_a_gpu_and_modes_rotate_between_rounds() -> None:
    loaded = suite.load_suite(ROOT / "benchmarks" / "suite.json")
    modes = ["orion", "timeslice", "mps-priority"]
    placed = suite.assign(loaded.pairs, [0, 1, 2, 3], modes)
    assert sorted(p.name for pairs in placed.values() for p in pairs) == sorted(
        p.name for p in loaded.pairs
    )
    assert max(len(p) for p in placed.values()) - min(len(p) for p in placed.values()) <= 1
    first = [c["mode"] for c in suite.cells_of(0, placed[0], modes) if c["kind"] == "shared"]
    second = [c["mode"] for c in suite.cells_of(1, placed[0], modes) if c["kind"] == "shared"]
    assert first[0] == "orion" and second[0] == "timeslice"
    alone = [c for c in suite.cells_of(0, placed[0], modes) if c["kind"] == "alone"]
    programs = {placed[0][0].hp} | {b for p in placed[0] for b in p.be}
    assert {c["program"] for c in alone} == programs


def test_a_suite_of_stand_in_programs_runs_and_a_failed_cell_is_never_a_number(
    tmp_path: Path,
) -> None:
    """Plain processes on the CPU (no GPU): the runner starts each cell's programs in the pair's
    order, opens the window when they are all ready, stops them with SIGINT and records."""
    path = write_suite(tmp_path)
    out = tmp_path / "run"
    command = [sys.executable, str(ROOT / "benchmarks" / "suite.py"), "--suite", str(path),
               "--out", str(out), "--rounds", "1", "--window", "1", "--settle-s", "0.2",
               "--modes", "timeslice"]  # fmt: skip
    result = run_runner(command)
    assert result.returncode == 0, result.stdout + result.stderr
    cells = {p.parent.name: json.loads(p.read_text()) for p in out.glob("round0/gpu0/*/cell.json")}
    assert cells["alone-broken-service"]["status"] == "failed"
    assert "see hp.log" in cells["alone-broken-service"]["error"]
    assert "failing as asked" in (out / "round0/gpu0/alone-broken-service/hp.log").read_text()
    assert cells["timeslice-broken-service+trainer"]["error"].startswith("not run")
    both = cells["timeslice-service+trainer+trainer-b"]
    assert both["status"] == "ok", both
    # hp-first: the service was ready before the trainers started
    assert both["ready"]["hp"] < min(both["ready"]["trainer"], both["ready"]["trainer-b"])
    assert both["window"][0] >= max(both["ready"].values())
    # The service's alone run and the pair served the same arrivals in their windows: its
    # schedule started over from its seed where each window opened. (One arrival may differ:
    # one of the old schedule taken just as a window opened, on a machine too busy to notice.)
    alone = cells["alone-service"]
    offsets = [
        arrivals_in_window(out / "round0/gpu0" / name, cell["window"])
        for name, cell in (("alone-service", alone), ("timeslice-service+trainer+trainer-b", both))
    ]
    matched = np.abs(offsets[0][:, None] - offsets[1][None, :]).min(axis=0) < 2e-5
    assert len(offsets[1]) > 10 and matched.sum() >= len(offsets[1]) - 1
    # Each cell ran the round's copy of the scripts, kept beside its results.
    copy = out / "round0" / "programs"
    assert sorted(p.name for p in copy.glob("*.py")) == sorted(
        p.name for p in (DATA / "suite_programs").glob("*.py")
    )
    script = both["clients"]["hp"]["command"][1]
    assert Path(script).parent == copy and Path(script).is_file()

    summary = json.loads((out / "summary.json").read_text())
    rows = {row["pair"]: row for row in summary["pairs"]}
    broken = rows["broken-service+trainer"]
    assert broken["hp_p99_ratio"]["ratio"] is None and broken["rounds"] == 0
    assert broken["failures"]
    good = rows["service+trainer+trainer-b"]
    assert good["rounds"] == 1 and good["hp_p99_ratio"]["ratio"] > 0, good["failures"]
    assert set(good["be_ratios"]) == {"trainer", "trainer-b"}
    assert good["hp_arrivals_paired"]  # compared request by request
    assert {c["cell"].split("/")[-1] for c in summary["failed_cells"]} == {
        "alone-broken-service",
        "timeslice-broken-service+trainer",
    }


def arrivals_in_window(cell: Path, window: list[float]) -> np.ndarray:
    """The HP's arrivals inside a cell's window, as seconds from the window's opening."""
    frame = pd.read_csv(cell / "hp.csv")
    start, end = window
    inside = frame["arrival_unix_s"].between(start, end, inclusive="left")
    return frame.loc[inside, "arrival_unix_s"].to_numpy() - start


def test_an_hp_alone_under_a_mode_is_shown_beside_the_pairs_and_never_scored(
    tmp_path: Path,
) -> None:
    """A pair with no BE program runs the HP alone under each mode, against the same program
    alone without it: what the mode itself costs the HP, the floor of every pair it is in."""
    path = write_suite(tmp_path, pairs=[{"hp": "service", "be": ["trainer"], "order": "be-first"}])
    out = tmp_path / "run"
    command = [sys.executable, str(ROOT / "benchmarks" / "suite.py"), "--suite", str(path),
               "--out", str(out), "--rounds", "1", "--window", "1", "--settle-s", "0.2",
               "--modes", "timeslice", "--hp-alone"]  # fmt: skip
    result = run_runner(command)
    assert result.returncode == 0, result.stdout + result.stderr
    cell = json.loads((out / "round0/gpu0/timeslice-service+no-be/cell.json").read_text())
    assert cell["status"] == "ok" and set(cell["clients"]) == {"hp"}
    summary = json.loads((out / "summary.json").read_text())
    rows = {row["pair"]: row for row in summary["pairs"]}
    alone_under = rows["service+no-be"]
    assert alone_under["rounds"] == 1 and alone_under["hp_p99_ratio"]["ratio"] > 0
    assert alone_under["be"] == [] and alone_under["be_together"] is None
    assert summary["by_mode"]["timeslice"]["pairs"] == 1  # the pair with a BE program only
    assert summary["by_mode"]["timeslice"]["worst_pair"]["pair"] == "service+trainer"
    assert "service+no-be" not in summary["ahead_of"]
    # A suite file may list one itself; --hp-alone adds none twice.
    listed = suite.load_suite(write_suite(tmp_path, pairs=[{"hp": "service"}])).pairs
    assert [p.name for p in suite.with_hp_alone(listed)] == ["service+no-be"]


def _cell(folder: Path, window: tuple[float, float], clients: dict[str, str]) -> Cell:
    record = {"window": list(window), "clients": {k: {"out": v} for k, v in clients.items()}}
    return Cell(folder, record)


def test_be_work_is_cut_at_the_window_edges(tmp_path: Path) -> None:
    progress = {"unix_s": [0.0, 10.0, 20.0, 30.0], "steps": [0, 10, 20, 30],
                "samples": [0, 100, 300, 600]}  # fmt: skip
    pd.DataFrame(progress).to_csv(tmp_path / "t.csv", index=False)
    rows = be_work_rows(_cell(tmp_path, (5.0, 25.0), {"t": "t.csv"}), "t")
    assert rows[:, 0].sum() == pytest.approx(20.0)
    # 50 of the first record's 100, all 200 of the second, 150 of the third's 300
    assert rows[:, 1].sum() == pytest.approx(400.0)
    with pytest.raises(ValueError, match="does not cover the window"):
        be_work_rows(_cell(tmp_path, (5.0, 35.0), {"t": "t.csv"}), "t")


def test_hp_latency_counts_the_requests_that_arrived_in_the_window(tmp_path: Path) -> None:
    frame = pd.DataFrame({"request": range(5), "arrival_unix_s": [1.0, 2.0, 3.0, 4.0, 5.0],
                          "start_unix_s": 0.0, "end_unix_s": 0.0,
                          "latency_ms": [10.0, 20.0, 30.0, 40.0, 50.0]})  # fmt: skip
    frame.to_csv(tmp_path / "hp.csv.gz", index=False)  # gzip'd records read the same
    latencies = hp_latencies(_cell(tmp_path, (2.0, 4.0), {"hp": "hp.csv"}), "hp")
    assert list(latencies) == [20.0, 30.0]


def _requests(offsets: list[float], latency: float) -> pd.DataFrame:
    return pd.DataFrame(
        {"offset_s": offsets, "latency_ms": [latency] * len(offsets),
         "service_ms": [latency / 2] * len(offsets)}
    )  # fmt: skip


def test_requests_of_the_same_arrivals_pair_and_windows_of_other_arrivals_do_not() -> None:
    offsets = [0.0101, 0.0254, 0.0255, 0.0800, 0.1200, 0.2000, 0.2500, 0.3100, 0.3900, 0.4000]
    # The shared window: the same arrivals to within a microsecond, in another order, and one
    # arrival of the old schedule taken as the window opened.
    shared = _requests([*(o + 1e-6 for o in reversed(offsets)), 0.0003], latency=3.0)
    rows = paired_requests(shared, _requests(offsets, latency=2.0))
    assert rows is not None and len(rows) == len(offsets)
    assert (rows["latency_ms"] == 3.0).all() and (rows["alone_latency_ms"] == 2.0).all()
    assert (rows["alone_service_ms"] == 1.0).all()
    # Two arrivals 100 us apart are two requests, each paired with its own.
    assert sorted(paired_requests(_requests(offsets, 3.0), _requests(offsets, 2.0)).index) == list(
        range(len(offsets))
    )
    # Windows cut from different stretches of one schedule share an arrival only by chance.
    assert (
        paired_requests(_requests([o + 0.003 for o in offsets], 3.0), _requests(offsets, 2.0))
        is None
    )
    assert paired_requests(_requests([], 3.0), _requests(offsets, 2.0)) is None


def test_hp_service_time_leaves_out_the_wait_in_the_services_own_queue(tmp_path: Path) -> None:
    frame = pd.DataFrame({"request": range(3), "arrival_unix_s": [1.0, 2.0, 3.0],
                          "start_unix_s": [1.0, 2.5, 3.0], "end_unix_s": [1.002, 2.504, 3.5],
                          "latency_ms": [2.0, 504.0, 500.0]})  # fmt: skip
    frame.to_csv(tmp_path / "hp.csv", index=False)
    served = hp_service_ms(_cell(tmp_path, (1.5, 2.5), {"hp": "hp.csv"}), "hp")
    assert served == pytest.approx([4.0])  # arrived at 2.0, started at 2.5, done at 2.504


@pytest.fixture
def committed(tmp_path: Path) -> Path:
    """The committed H200 suite run (real records), copied so reports can write beside it."""
    copy = tmp_path / "suite"
    shutil.copytree(COMMITTED, copy)
    return copy


def test_the_committed_run_scores_its_worst_pair(committed: Path) -> None:
    summary = summarise(committed)
    ratios = [
        row["hp_p99_ratio"]["ratio"]
        for row in summary["pairs"]
        if row["mode"] == "orion" and row["hp_p99_ratio"]["ratio"] is not None
    ]
    assert summary["worst_pair"]["hp_p99_ratio"]["ratio"] == max(ratios)
    expected = float(np.exp(np.mean(np.log(ratios))))
    assert summary["geomean_hp_p99_ratio"] == pytest.approx(expected, rel=1e-3)
    assert summary["neighbour_check"]["intervals_overlap"] in (True, False)
    assert summary["target"]["met"] is False
    # The felt slowdown's yardstick, per pair and mode: a ratio with its interval.
    for row in summary["pairs"]:
        if row["rounds"]:
            served = row["hp_service_mean_ratio"]
            assert served["low"] <= served["ratio"] <= served["high"], row["pair"]
    # Run before the HP's arrivals were paired: where the HP started first, its windows were
    # cut from different stretches of one schedule, and are compared as independent samples.
    # (Started last, the window opened at its ready mark, as its schedule did, alone too.)
    assert not any(
        row["hp_arrivals_paired"] for row in summary["pairs"] if row["order"] == "hp-first"
    )


def test_every_mode_is_scored_as_the_suite_scores_orion(committed: Path) -> None:
    # Variants and competitors compare on the suite's own terms: worst pair, geometric mean and
    # the pairs meeting each half of the target, from the same rows the table shows.
    summary = summarise(committed)
    by_mode = summary["by_mode"]
    assert list(by_mode) == ["orion", "timeslice", "mps-priority"]  # the runner's order
    assert by_mode["orion"]["worst_pair"] == summary["worst_pair"]
    assert by_mode["orion"]["geomean_hp_p99_ratio"] == summary["geomean_hp_p99_ratio"]
    for mode, score in by_mode.items():
        rows = [row for row in summary["pairs"] if row["mode"] == mode]
        ratios = {row["pair"]: row["hp_p99_ratio"]["ratio"] for row in rows}
        within = {pair for pair, ratio in ratios.items() if ratio is not None and ratio <= 1.25}
        be_kept = {row["pair"] for row in rows if (row["be_together"] or 0) >= 0.6}
        assert score["pairs"] == len(rows)
        assert score["worst_pair"]["hp_p99_ratio"]["ratio"] == max(
            ratio for ratio in ratios.values() if ratio is not None
        )
        assert score["pairs_within_target"] == len(within)
        scored = {pair for pair, ratio in ratios.items() if ratio is not None}
        assert score["pairs_with_be_at_target"] == len(be_kept & scored)
        assert score["pairs_meeting_both"] == len(within & be_kept)
    # Plain processes are far off the target on this run, as its README says.
    assert by_mode["timeslice"]["pairs_within_target"] < by_mode["timeslice"]["pairs"]


def test_two_be_programs_are_scored_by_the_gpu_work_they_get_done_together() -> None:
    # The floor-loop run's pair with two trainers: each kept about a third of alone, together
    # about 0.7 of a GPU to themselves, which clears the target a single BE program would.
    two = PairFigures(
        pair="encoder-graph+jax-train+lm-train", mode="orion", order="be-first",
        hp="encoder-graph", bes=["jax-train", "lm-train"],
        be_ratios={"jax-train": (0.32, 0.31, 0.32), "lm-train": (0.39, 0.36, 0.43)},
    )  # fmt: skip
    assert two.be_together == pytest.approx(0.71)
    assert two.be_together >= TARGET_BE_TOGETHER
    one = PairFigures(
        pair="llm-decode+lm-train", mode="orion", order="be-first", hp="llm-decode",
        bes=["lm-train"], be_ratios={"lm-train": (0.53, 0.49, 0.58)},
    )  # fmt: skip
    assert one.be_together == pytest.approx(0.53) and one.be_together < TARGET_BE_TOGETHER
    assert math.isnan(
        PairFigures(pair="x", mode="orion", order="hp-first", hp="x", bes=[]).be_together
    )


def test_a_pair_whose_alone_run_was_a_slow_reference_says_so_beside_its_ratio(
    tmp_path: Path,
) -> None:
    """The eager encoder's round on an H200 (real records): served faster beside BE than alone,
    so its ratios read low and the report says why; a graph service's pairs raise no doubt."""
    from typer.testing import CliRunner

    from orion_cli.app import app

    results = ROOT / "benchmarks" / "results" / "nvidia-h200"
    eager = tmp_path / "eager"
    shutil.copytree(results / "suite-hp-chooses-eager", eager, symlinks=True)
    rows = {(r["pair"], r["mode"]): r for r in summarise(eager)["pairs"]}
    doubts = rows[("encoder-eager+resnet-train", "orion")]["reference_doubts"]
    assert len(doubts) == 1 and doubts[0].startswith("served faster beside BE than alone")
    shown = CliRunner().invoke(app, ["report", str(eager)])
    assert shown.exit_code == 0, shown.output
    words = " ".join(shown.output.split())
    assert "reference in doubt: encoder-eager+resnet-train under orion: served faster" in words
    whole = tmp_path / "whole"
    shutil.copytree(results / "suite-hp-chooses", whole, symlinks=True)
    graph = [r for r in summarise(whole)["pairs"] if r["hp"] != "encoder-eager"]
    assert graph and all(r["reference_doubts"] == [] for r in graph)


def test_the_hps_request_shape_is_summarised_from_the_daemons_last_sample(
    committed: Path, tmp_path: Path
) -> None:
    """A run whose daemon showed each HP's request shape (counted since it joined) carries the
    last reading of each round into the summary; runs made before it show none."""
    rows = summarise(committed)["pairs"]
    assert all(r["hp_gpu_ms_per_request_shown"] is None for r in rows)
    cell = next(
        p.parent
        for p in sorted(committed.glob("round0/gpu*/orion-*/status_samples.json"))
        if json.loads((p.parent / "cell.json").read_text())["status"] == "ok"
    )
    samples = json.loads((cell / "status_samples.json").read_text())
    for gpu_ms, sample in zip((0.5, 1.06), samples[-2:], strict=True):
        hp = next(c for c in sample["clients"] if c["name"] == "hp")
        hp["request_shape"] = {"requests": 10, "launches_per_request": 2.4,
                               "graphs_per_request": 1.0, "gpu_ms_per_request": gpu_ms}  # fmt: skip
    (cell / "status_samples.json").write_text(json.dumps(samples))
    record = json.loads((cell / "cell.json").read_text())
    rows = summarise(committed)["pairs"]
    row = next(r for r in rows if (r["pair"], r["mode"]) == (record["pair"], record["mode"]))
    assert row["hp_gpu_ms_per_request_shown"] == 1.06  # the last reading, not their mean
    assert row["hp_launches_per_request_shown"] == 2.4


def test_an_alone_run_that_moved_between_rounds_is_a_doubt_and_one_round_is_none() -> None:
    figure = PairFigures(
        pair="encoder-eager+resnet-train", mode="orion", order="hp-first", hp="encoder-eager",
        bes=["resnet-train"], hp_p99_alone_ms=[6.72, 8.20], hp_service_mean_ratio=(1.0, 0.98, 1.02),
    )  # fmt: skip
    assert figure.reference_doubts() == []  # 8.20 / 6.72 = 1.22: within what the target allows
    figure.hp_p99_alone_ms.append(8.60)
    assert figure.reference_doubts() == ["alone p99 moved between rounds, 6.72 to 8.60 ms"]
    figure.hp_p99_alone_ms = [8.60]
    assert figure.reference_doubts() == []


def test_orion_report_reads_a_suite_run(committed: Path) -> None:
    from typer.testing import CliRunner

    from orion_cli.app import app

    runner = CliRunner()
    shown = runner.invoke(app, ["report", str(committed)])
    assert shown.exit_code == 0, shown.output
    assert "worst pair under orion: llm-decode+graph-infer" in shown.output
    assert "resnet-graph+resnet-train" in shown.output
    words = " ".join(shown.output.split())
    assert "per mode, over the pairs it ran" in words and "mps-priority" in words
    as_json = runner.invoke(app, ["report", str(committed), "--json"])
    assert json.loads(as_json.output)["format"] == "orion-suite-summary/2"
    # What each mode of the run was, in words, in the summary users keep.
    modes = json.loads(as_json.output)["modes"]
    assert modes == {
        "orion": "orion up (defaults)",
        "timeslice": "plain processes (time slicing)",
        "mps-priority": "MPS, BE clients at lower priority",
    }
    checked = runner.invoke(app, ["report", str(committed), "--check"])
    assert checked.exit_code == 1
    assert "failed" in checked.output


def _round_record(folder: Path, round_: int, source: str, gpu: str = "NVIDIA H200") -> None:
    (folder / f"round{round_}").mkdir(exist_ok=True)
    record = {"round": round_, "orion_source": source, "device": {"gpus": {"0": gpu}}}
    (folder / f"round{round_}" / "round.json").write_text(json.dumps(record))


def test_rounds_of_other_orion_code_or_another_gpu_kind_are_not_pooled(committed: Path) -> None:
    # Rounds of one run may come from several sessions; each says what code it ran. Pooled, rounds
    # of two versions of orion would score neither, so the summary refuses them, naming both.
    from orion_common.errors import OrionError

    _round_record(committed, 0, "a" * 64)
    summary = summarise(committed)
    assert summary["rounds_run"] == [
        {"round": 0, "orion_source": "a" * 64, "gpus": ["NVIDIA H200"], "driver": None}
    ]
    _round_record(committed, 1, "b" * 64)
    with pytest.raises(OrionError) as refused:
        summarise(committed)
    assert "different orion sources (aaaaaaaaaaaa in round 0; bbbbbbbbbbbb in round 1)" in str(
        refused.value
    )
    _round_record(committed, 1, "a" * 64, gpu="NVIDIA H100 80GB HBM3")
    with pytest.raises(OrionError, match="different GPU kinds"):
        summarise(committed)


def test_rounds_are_added_only_to_a_run_of_the_same_options_and_never_over_one(
    tmp_path: Path,
) -> None:
    record = {"programs": {"a": 1}, "pairs": [1], "window_s": 30.0, "modes": ["orion"],
              "learn_s": 5.0, "device": {"gpus": {"0": "G"}}}  # fmt: skip
    out = tmp_path / "run"
    assert suite.cannot_add_rounds(out, record, [0]) == ""  # nothing there yet
    out.mkdir()
    (out / "suite.json").write_text(json.dumps(record))
    cell = out / "round0" / "gpu0" / "alone-a" / "cell.json"
    cell.parent.mkdir(parents=True)
    cell.write_text("{}")
    assert "already holds round 0" in suite.cannot_add_rounds(out, record, [0, 1])
    assert suite.cannot_add_rounds(out, {**record, "device": {"gpus": {"0": "H"}}}, [1]) == ""
    other = suite.cannot_add_rounds(out, {**record, "window_s": 20.0, "modes": ["mps"]}, [1])
    assert "whose window_s, modes differ" in other
    # a run from before --hp-requests (none in its suite.json) asked for none
    assert suite.cannot_add_rounds(out, {**record, "hp_requests": 0}, [1]) == ""
    longer = suite.cannot_add_rounds(out, {**record, "hp_requests": 5000}, [1])
    assert "whose hp_requests differ" in longer


def test_the_source_digest_follows_the_code_and_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    (root / "pkg").mkdir(parents=True)
    (root / "examples" / "programs").mkdir(parents=True)
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "suite.py").write_text("runner")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "a.py").write_text("x = 1\n")
    (root / "examples" / "programs" / "serve.py").write_text("serve\n")
    first = suite.source_digest(root)
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (root / "pkg" / "notes.txt").write_text("not code")
    assert suite.source_digest(root) == first
    (root / "pkg" / "a.py").write_text("x = 2\n")
    assert suite.source_digest(root) != first
    (root / "pkg" / "a.py").write_text("x = 1\n")
    (root / "examples" / "programs" / "serve.py").write_text("serve faster\n")
    assert suite.source_digest(root) != first
    (root / "examples" / "programs" / "serve.py").write_text("serve\n")
    # the packages a round does not run (reports, plans, Ray) may change between its rounds
    (root / "reporting").mkdir()
    (root / "reporting" / "__init__.py").write_text("")
    (root / "reporting" / "tables.py").write_text("a new table\n")
    assert suite.source_digest(root) == first


def test_the_packages_left_out_of_the_digest_are_above_all_that_a_round_runs() -> None:
    # A round runs the daemon, the library and `orion up/run/status/down` (orion_cli, whose app
    # imports every command's module) and the programs; a package left out of the digest must
    # not be imported by any layer up to colocation, which the layering test enforces.
    from test_layering import RANK

    assert set(suite.NOT_RUN_BY_A_ROUND) <= set(RANK)
    assert min(RANK[name] for name in suite.NOT_RUN_BY_A_ROUND) > RANK["colocation"]


def test_what_the_latency_loop_did_is_summarised_beside_the_p99() -> None:
    # A cell of the every-mode round (real status samples, taken every 5 s): the loop went from
    # its ceiling to its 1-us floor and held long BE work, which the summary says.
    cell = ROOT / "benchmarks/results/nvidia-h200/suite-every-mode/round0/gpu0"
    samples = json.loads((cell / "orion-resnet-graph+jax-train/status_samples.json").read_text())
    loop = [sample["latency_control"] for sample in samples]
    assert [s["queue_limit_us"] for s in loop][:3] == [15.237, 1.904, 1.0]
    shown = loop_figures(loop)
    assert shown["loop_queue_limit_us_shown"] == 1.0
    assert shown["loop_floor_slowdown_shown"] is None  # shown by orion only since the floor
    assert 0.0 < shown["loop_out_of_reach_share"] < 1.0
    floored = [dict(s, floor_slowdown=1.2) for s in loop]
    assert loop_figures(floored)["loop_floor_slowdown_shown"] == 1.2
    assert loop_figures([]) == {
        "loop_queue_limit_us_shown": None,
        "loop_floor_slowdown_shown": None,
        "loop_out_of_reach_share": None,
    }


def test_the_table_shows_what_orion_status_said_beside_the_p99() -> None:
    from reporting.suite import summary_table

    pair = {
        "pair": "resnet-graph+resnet-train", "order": "be-first", "mode": "orion", "rounds": 1,
        "hp_p99_ratio": {"ratio": 1.3, "low": 1.1, "high": 1.5}, "be_ratios": {}, "failures": [],
        "hp_felt_slowdown_shown": 1.12, "hp_felt_p99_shown": 1.35,
        "hp_felt_p99_over_alone_shown": 1.21, "hp_interference_shown": 0.99,
    }  # fmt: skip
    shown = summary_table({"pairs": [pair]})["status_slowdown"].tolist()
    assert shown == ["1.12 felt, p99 >= 1.35, p99 over alone 1.21"]
    older = {k: v for k, v in pair.items() if k != "hp_felt_p99_over_alone_shown"}
    assert summary_table({"pairs": [older]})["status_slowdown"].tolist() == [
        "1.12 felt, p99 >= 1.35"
    ]
    gpu_time_only = dict(older, hp_felt_slowdown_shown=None)
    assert summary_table({"pairs": [gpu_time_only]})["status_slowdown"].tolist() == [
        "0.99 GPU time"
    ]


def test_a_cells_window_holds_the_hp_requests_asked_for_at_the_hps_rate() -> None:
    # A judging run's 5,000 requests: 250 s of the LLM decoder at 20/s, 62.5 s of a service at
    # 80/s, and --window where that is longer; a trainer alone keeps --window.
    programs = suite.load_suite(suite.ROOT / "benchmarks" / "suite.json")
    decoder = {"kind": "shared", "hp": "llm-decode", "be": ["lm-train"]}
    assert programs.programs["llm-decode"].requests_per_s == 20.0
    assert suite.cell_window(programs, decoder, 60.0, 5000) == 250.0
    resnet_alone = {"kind": "alone", "program": "resnet-graph"}
    assert suite.cell_window(programs, resnet_alone, 60.0, 5000) == 62.5
    assert suite.cell_window(programs, resnet_alone, 90.0, 5000) == 90.0
    assert suite.cell_window(programs, decoder, 30.0, 0) == 30.0  # none asked: --window
    with pytest.raises(ValueError, match="is not a positive number of requests/s"):
        suite.Program(role="hp", argv=["serve_llm.py", "--rate", "fast"])
    trainer_alone = {"kind": "alone", "program": "lm-train"}
    assert programs.programs["lm-train"].requests_per_s is None
    assert suite.cell_window(programs, trainer_alone, 60.0, 5000) == 60.0


def test_what_status_showed_is_set_beside_the_measured_p99_by_the_agreement_rule(tmp_path):
    # A committed suite run: its six cells, each felt slowdown and service ratio judged against
    # the p99 ratio by the one 20% rule; an HP alone or a failed cell is never a row.
    import status_vs_p99

    run = suite.ROOT / "benchmarks" / "results" / "nvidia-h200" / "hp-own-gate-spacing"
    cells = status_vs_p99.cells_of(run)
    assert len(cells) == 6 and {c.pair for c in cells} == {
        "resnet-graph+resnet-train",
        "resnet-graph+jax-train",
    }
    assert status_vs_p99.agrees(1.35, 1.18) and not status_vs_p99.agrees(1.04, 1.54)
    assert not status_vs_p99.agrees(None, 1.0)
    spaced = status_vs_p99.cells_of(run, "orion-mps-hp-chooses-spacing25")
    assert sorted(c.p99_ratio for c in spaced) == [1.1569, 1.1841]  # only that mode's cells
    text = status_vs_p99.markdown(cells)
    agreeing = sum(status_vs_p99.agrees(c.felt_shown, c.p99_ratio) for c in cells)
    assert f"felt slowdown shown: {agreeing} of 6" in text
    # Measured before requests were timed whole: those columns are empty, and counted as such.
    assert all(c.request_shown is None for c in cells)
    assert "requests shown: 0 of 0" in text
    with pytest.raises(SystemExit, match=r"no summary\.json"):
        status_vs_p99.main([str(tmp_path)])
