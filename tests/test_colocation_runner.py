"""`orion colocate` end to end on CPU: real client processes (BERT, 8 tokens) with the preload
library passing through, recorded in a run directory that `orion report` reads; a client killed
midway, Ctrl-C, refusals before anything starts, and the command line's errors."""

from __future__ import annotations

import copy
import json
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from colocation.config import EXAMPLE_JOBS, JobsConfig, JobsConfigError, parse_jobs
from colocation.preflight import prepare_run
from colocation.runner import ClientProgress, RunOutcome, RunProgress, run_jobs
from orion_cli.colocate import colocate_command
from orion_common import sysinfo
from orion_common.errors import OrionError
from postprocess import PROFILE_COLUMNS, Profile, write_profile
from reporting import client_summary, load_run

HP: dict[str, Any] = {
    "name": "hp",
    "workload": "bert",
    "mode": "infer",
    "batch_size": 1,
    "role": "hp",
    "arrivals": {"kind": "poisson", "rate_per_s": 8},
    "options": {"seq_len": 8},
}
BE: dict[str, Any] = {
    "name": "be",
    "workload": "bert",
    "mode": "train",
    "batch_size": 1,
    "options": {"seq_len": 8},
}
CLI = CliRunner(env={"COLUMNS": "200"})
MPS_POLICIES = ["mps", "mps-priority", "priority", "reef"]
"""Policies that share through MPS by default (orion is time-sliced by default)."""


@pytest.fixture(autouse=True)
def cpu_clients(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Clients run on the CPU; profiles are looked up in an empty folder of this test."""
    monkeypatch.setenv("ORION_CLIENT_DEVICE", "cpu")
    monkeypatch.setenv("ORION_PROFILE_DIR", str(tmp_path / "profiles"))


def jobs_data(tmp_path: Path, policy: str = "timeslice", **run: Any) -> dict[str, Any]:
    settings = {"policy": policy, "duration_s": 2.5, "warmup_steps": 1, **run}
    settings.setdefault("output_dir", str(tmp_path / "runs"))
    return {"run": settings, "clients": copy.deepcopy([HP, BE])}


def jobs(tmp_path: Path, policy: str = "timeslice", **run: Any) -> JobsConfig:
    return parse_jobs(jobs_data(tmp_path, policy, **run), tmp_path)


def run_json(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "run.json").read_text())


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def own_shared_memory() -> list[Path]:
    return list(Path("/dev/shm").glob(f"orion-{os.getpid()}-*"))


def assert_latency_from_arrival(table: pd.DataFrame) -> None:
    done = table.dropna(subset=["end_s"])
    assert (done["start_s"] >= done["arrival_s"]).all()
    assert done["latency_ms"].tolist() == pytest.approx(
        ((done["end_s"] - done["arrival_s"]) * 1000).tolist(), abs=1e-6
    )


def cli() -> typer.Typer:
    """The command as `orion colocate` (registered in orion_cli.app by the lead)."""
    app = typer.Typer(pretty_exceptions_enable=False)
    app.callback()(lambda: None)
    app.command("colocate")(colocate_command)
    return app


# ------------------------------------------------------------------------ end-to-end runs


class Operator(threading.Thread):
    """Someone at another terminal: waits until the run is measuring (the BE client's table
    has a row), then does something to a process found through run.json."""

    def __init__(self, output_dir: Path, action: Callable[[dict[str, Any]], None]) -> None:
        super().__init__(daemon=True)
        self.output_dir = output_dir
        self.action = action
        self.meta: dict[str, Any] | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            for run_dir in self.output_dir.glob("*/"):
                table = run_dir / "clients" / "be.csv"
                if table.is_file() and len(table.read_text().splitlines()) >= 2:
                    self.meta = run_json(run_dir)
                    self.action(self.meta)
                    return


def pid_of(meta: dict[str, Any], name: str) -> int:
    return next(c["pid"] for c in meta["clients"] if c["name"] == name)


def test_timeslice_run_through_the_command_line_survives_a_killed_client(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.json"
    data = jobs_data(tmp_path, policy="orion", requests=50)
    del data["run"]["duration_s"]
    path.write_text(json.dumps(data))
    operator = Operator(tmp_path / "runs", lambda meta: os.kill(pid_of(meta, "be"), signal.SIGKILL))
    operator.start()
    result = CLI.invoke(
        cli(), ["colocate", str(path), "--policy", "timeslice", "--duration", "2.5"]
    )
    operator.stop.set()
    assert operator.meta is not None, "the BE client never wrote a row"
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("timeslice-")
    assert f"run directory: {run_dir}" in result.output
    assert "measuring" in result.output  # the plain progress lines
    assert "client(s) failed: be" in result.output

    meta = run_json(run_dir)
    assert meta["status"] == "complete"
    assert meta["config"]["run"]["duration_s"] == 2.5
    assert meta["config"]["run"]["hp_completion"] == "estimate"
    assert meta["environment"]["client_device"] == "cpu"
    hp, be = meta["clients"]
    assert hp["exit_code"] == 0 and hp["error"] is None
    assert be["exit_code"] == -9
    assert be["error"] == "killed by signal 9 (SIGKILL)"
    assert be["log_tail"]  # what it printed last, for the operator
    assert all(gone(c["pid"]) for c in meta["clients"])
    assert hp["window_end_s"] - hp["window_start_s"] == pytest.approx(2.5)

    run = load_run(run_dir)
    summary = client_summary(run).set_index("client")
    assert summary.loc["hp", "count"] > 0
    assert summary.loc["hp", "p99_ms"] > 0
    # The rows the BE client wrote before it was killed are kept (the one the operator saw at
    # least; on a busy machine its first iteration can end after the 2.5-s window, so it need
    # not count in the summary).
    assert len(run.tables["be"]) >= 1 and run.tables["be"]["end_s"].notna().all()
    assert run.tables["hp"]["end_s"].notna().all()  # the HP table is intact
    assert_latency_from_arrival(run.tables["hp"])
    stats = json.loads((run_dir / "scheduler.json").read_text())
    assert stats["settings"]["policy"] == "passthrough"
    assert stats["settings"]["hp_completion"] == "estimate"
    assert {name: s["state"] for name, s in stats["clients"].items()} == {
        "hp": "exited",
        "be": "dead",
    }
    assert "p99 ms" in result.output  # the closing summary
    assert not own_shared_memory()


def test_dedicated_runs_clients_alone_in_windows_of_the_hp_length(tmp_path: Path) -> None:
    data = jobs_data(tmp_path, policy="dedicated", duration_s=None, requests=10)
    # Paced HP requests (10 over 2.25 s): the BE window, as long as the HP's, then holds several
    # CPU training iterations even on a loaded machine.
    data["clients"][0]["arrivals"] = {"kind": "uniform", "rate_per_s": 4}
    outcome = run_jobs(parse_jobs(data, tmp_path))
    assert outcome.status == "complete"
    assert outcome.failed_clients == ()
    run = load_run(outcome.run_dir)
    hp, be = run.client("hp"), run.client("be")
    assert (hp.exit_code, be.exit_code) == (0, 0)
    assert len(run.tables["hp"]) == 10
    assert run.tables["hp"]["end_s"].notna().all()
    assert hp.window_end_s == pytest.approx(run.tables["hp"]["end_s"].max())
    # alone: the BE window starts after the HP finished, and lasts as long as the HP's did
    assert be.window_start_s > hp.window_end_s
    assert be.window_end_s - be.window_start_s == pytest.approx(hp.window_end_s - hp.window_start_s)
    summary = client_summary(run).set_index("client")
    assert summary.loc["hp", "count"] == 10
    assert summary.loc["be", "count"] > 0
    assert_latency_from_arrival(run.tables["hp"])


def test_an_interrupt_from_the_progress_callback_cleans_up(tmp_path: Path) -> None:
    calls: list[RunProgress] = []

    def interrupt(progress: RunProgress) -> None:
        calls.append(progress)
        if all(c.pid for c in progress.clients):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_jobs(jobs(tmp_path), progress=interrupt)
    last = calls[-1]
    assert last.state == "warming up"  # never called again while cleaning up
    meta = run_json(last.run_dir)
    assert meta["status"] == "incomplete"
    assert meta["ended_utc"]
    assert all(gone(c.pid) for c in last.clients)
    assert not own_shared_memory()


def test_sigterm_stops_everything_and_leaves_an_incomplete_run(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(jobs_data(tmp_path, duration_s=60)))
    handler = signal.getsignal(signal.SIGTERM)
    operator = Operator(tmp_path / "runs", lambda meta: os.kill(os.getpid(), signal.SIGTERM))
    operator.start()
    result = CLI.invoke(cli(), ["colocate", str(path)])
    operator.stop.set()
    assert operator.meta is not None
    assert result.exit_code == 130, result.output
    assert "stopped early" in result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    meta = run_json(run_dir)
    assert meta["status"] == "incomplete"
    assert all(gone(c["pid"]) for c in meta["clients"])
    # told to stop, the clients wrote their tables out and exited normally
    assert [c["exit_code"] for c in meta["clients"]] == [0, 0]
    assert not own_shared_memory()
    run = load_run(run_dir)
    assert not run.complete
    assert len(run.tables["hp"]) > 0 and len(run.tables["be"]) > 0
    assert signal.getsignal(signal.SIGTERM) is handler  # given back


# ------------------------------------------------------------------- refusals before the start


@pytest.mark.parametrize("policy", MPS_POLICIES)
def test_mps_policies_are_refused_without_mps(
    policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sysinfo, "find_mps_control", lambda: None)
    with pytest.raises(OrionError) as info:
        run_jobs(jobs(tmp_path, policy=policy))
    assert f"policy {policy!r} runs under MPS" in info.value.message
    assert "nvidia-cuda-mps-control was not found" in info.value.message
    assert not (tmp_path / "runs").exists()


def test_a_missing_profile_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sysinfo, "find_mps_control", lambda: Path("/bin/true"))
    with pytest.raises(JobsConfigError) as info:
        run_jobs(jobs(tmp_path, policy="orion"))
    assert "policy 'orion' needs a kernel profile for client 'hp'" in info.value.message
    assert "orion profile bert --mode infer --batch-size 1 --dtype fp32" in (info.value.hint or "")
    assert not (tmp_path / "runs").exists()
    assert not own_shared_memory()


def make_profile(path: Path, client: dict[str, Any], **meta: Any) -> Path:
    row: dict[str, Any] = {column: 1 for column in PROFILE_COLUMNS}
    row.update(kernel_name="k", demangled_name="k", kernel_class="compute", duration_ns=40_000.0)
    row.update(measured_duration_ns=None, tensor_pipe_pct=None, order=0, occurrence=0)
    metadata = {
        "gpu_name": "NVIDIA H200",
        "sm_count": 132,
        "workload": client["workload"],
        "mode": client["mode"],
        "batch_size": client["batch_size"],
        "dtype": "fp32",
        **meta,
    }
    return write_profile(Profile(metadata, pd.DataFrame([row])), path)


def test_a_profile_from_another_gpu_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sysinfo, "find_mps_control", lambda: Path("/bin/true"))
    monkeypatch.setattr(
        sysinfo,
        "software_summary",
        lambda gpu=0: {"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": None},
    )
    data = jobs_data(tmp_path, policy="orion")
    for client in data["clients"]:
        client["profile"] = str(make_profile(tmp_path / f"{client['name']}.csv", client))
    plan = prepare_run(parse_jobs(data, tmp_path))
    assert len(plan.warnings) == 2
    assert all("made with GPU NVIDIA H200" in w for w in plan.warnings)
    assert "client 'hp'" in plan.warnings[0] and "client 'be'" in plan.warnings[1]
    assert plan.settings.policy == "orion"
    assert plan.settings.sm_count == 132  # no GPU here: the profiles'
    assert plan.settings.queue_limit_ns == 1000  # 2.5% of the HP step's 40 us
    assert set(plan.profiles) == {"hp", "be"}


def test_a_runs_be_graph_gate_reaches_the_scheduler_and_the_daemon_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A running daemon is joined only if it gates graphs as the run says (gpu_daemon).
    monkeypatch.setattr(sysinfo, "find_mps_control", lambda: None)
    monkeypatch.setattr(
        sysinfo, "software_summary", lambda gpu=0: {"gpu_name": "NVIDIA H200", "sm_count": None}
    )
    for setting in ("inside", "whole"):
        data = jobs_data(tmp_path, policy="orion", sharing="timeslice", be_graph_gate=setting)
        for client in data["clients"]:
            client["profile"] = str(make_profile(tmp_path / f"{client['name']}.csv", client))
        plan = prepare_run(parse_jobs(data, tmp_path))
        assert plan.settings.be_graph_gate == plan.daemon.settings.be_graph_gate == setting


def test_a_time_sliced_gating_run_starts_no_mps_daemon_and_still_gates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MPS is not on this machine (an MPS run is refused: test above), and run.sharing
    # "timeslice" does not need it: the run starts no MPS daemon (nothing in run.json, no mps/
    # folder) and
    # the preload library still runs orion's gates (the native tests show them holding BE work;
    # how contexts share the GPU does not reach the library).
    monkeypatch.setattr(sysinfo, "find_mps_control", lambda: None)
    monkeypatch.setattr(
        sysinfo, "software_summary", lambda gpu=0: {"gpu_name": "NVIDIA H200", "sm_count": None}
    )
    data = jobs_data(tmp_path, policy="orion", sharing="timeslice")
    for client in data["clients"]:
        client["profile"] = str(make_profile(tmp_path / f"{client['name']}.csv", client))
    config = parse_jobs(data, tmp_path)
    plan = prepare_run(config)
    assert plan.daemon.settings.sharing == "timeslice"  # the run's daemon starts no MPS
    assert (plan.settings.policy, plan.settings.be_gate) == ("orion", "gpu")
    outcome = run_jobs(plan)
    assert outcome.status == "complete", outcome
    meta = run_json(outcome.run_dir)
    assert meta.get("mps") is None
    assert meta["config"]["run"]["sharing"] == "timeslice"
    assert not (outcome.run_dir / "mps").exists()
    stats = json.loads((outcome.run_dir / "scheduler.json").read_text())
    assert stats["settings"]["policy"] == "orion"
    assert stats["settings"]["be_gate"] == "gpu"
    assert "gate_keeper" in stats  # the keeper that opens BE gates ran with the run
    assert not own_shared_memory()


def test_a_gating_run_of_clients_learned_online_needs_no_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # profile_source "online": no profile file anywhere, under a policy that gates by profiles;
    # the clients join with none and the library learns their kernels (tests/test_online_learning
    # shows the learning); the run's records carry the launch counts by source.
    monkeypatch.setattr(sysinfo, "find_mps_control", lambda: None)
    monkeypatch.setattr(
        sysinfo, "software_summary", lambda gpu=0: {"gpu_name": "NVIDIA H200", "sm_count": None}
    )
    data = jobs_data(tmp_path, policy="orion", sharing="timeslice")
    for client in data["clients"]:
        client.pop("profile", None)
        client["profile_source"] = "online"
    plan = prepare_run(parse_jobs(data, tmp_path))
    assert all(request.profile is None for request in plan.daemon.clients)
    outcome = run_jobs(plan)
    assert outcome.status == "complete", outcome
    stats = json.loads((outcome.run_dir / "scheduler.json").read_text())
    assert {"offline_launches", "online_launches"} <= set(stats["clients"]["hp"])


def test_the_hp_latency_target_only_tightens_the_be_queue_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The HP step has 40 us of GPU time: its bound is 2.5% of it (the 1-us minimum), and a looser
    # target does not loosen it (it used to: half of what the target leaves beyond the step); a
    # target the step cannot meet alone gets the minimum bound and a warning naming both figures.
    monkeypatch.setattr(sysinfo, "find_mps_control", lambda: Path("/bin/true"))
    monkeypatch.setattr(
        sysinfo, "software_summary", lambda gpu=0: {"gpu_name": "NVIDIA H200", "sm_count": None}
    )
    data = jobs_data(tmp_path, policy="orion")
    for client in data["clients"]:
        client["profile"] = str(make_profile(tmp_path / f"{client['name']}.csv", client))
    data["clients"][0]["latency_target_ms"] = 0.1
    plan = prepare_run(parse_jobs(data, tmp_path))
    assert plan.settings.queue_limit_ns == 1_000
    assert plan.warnings == ()
    data["clients"][0]["latency_target_ms"] = 0.03
    plan = prepare_run(parse_jobs(data, tmp_path))
    assert plan.settings.queue_limit_ns == 1_000
    assert len(plan.warnings) == 1 and "0.03 ms is not above" in plan.warnings[0]
    # An explicit bound wins, and then the target sets nothing to warn about.
    data["run"]["thresholds"] = {"queue_limit_us": 200}
    plan = prepare_run(parse_jobs(data, tmp_path))
    assert plan.settings.queue_limit_ns == 200_000 and plan.warnings == ()


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        ({}, "estimate"),
        ({"hp_completion": "estimate"}, "estimate"),
        ({"hp_completion": "gpu-write"}, "gpu-write"),
    ],
)
def test_hp_completion_reaches_the_scheduler_settings(
    tmp_path: Path, run: dict[str, Any], expected: str
) -> None:
    plan = prepare_run(jobs(tmp_path, policy="dedicated", **run))
    assert plan.settings.hp_completion == expected


# --------------------------------------------------------------------------- the command line


def test_example_prints_a_valid_jobs_file(tmp_path: Path) -> None:
    result = CLI.invoke(cli(), ["colocate", "--example"])
    assert result.exit_code == 0
    assert result.output == EXAMPLE_JOBS
    config = parse_jobs(json.loads(result.output), tmp_path)
    assert config.run.policy == "orion"


def _bad(tmp_path: Path, change: str) -> dict[str, Any]:
    data = jobs_data(tmp_path)
    if change == "unknown workload":
        data["clients"][0]["workload"] = "resnet5O"
    elif change == "two hp clients":
        data["clients"][1]["role"] = "hp"
    elif change == "negative rate":
        data["clients"][0]["arrivals"]["rate_per_s"] = -5
    elif change == "missing profile file":
        data["clients"][1]["profile"] = "profiles/be.csv"
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("unknown workload", "clients[0].workload: unknown workload 'resnet5O'"),
        ("two hp clients", "clients[1].role: at most one client may have role 'hp'"),
        ("negative rate", "clients[0].arrivals.rate_per_s: must be > 0 (got -5)"),
        ("missing profile file", "clients[1].profile: file not found:"),
    ],
)
def test_bad_jobs_files_are_one_clear_error(change: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(_bad(tmp_path, change)))
    result = CLI.invoke(cli(), ["colocate", str(path)])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert result.output.count("error:") == 1
    assert message in result.output
    assert not (tmp_path / "runs").exists()


def test_malformed_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text('{\n  "run": {"policy": "timeslice",}\n}\n')
    result = CLI.invoke(cli(), ["colocate", str(path)])
    assert result.exit_code == 1
    assert f"{path}:2:" in result.output.replace("\n", "")
    assert "Traceback" not in result.output


def test_a_bad_override_is_reported_in_the_files_words_as_a_usage_error(tmp_path: Path) -> None:
    # the rule is the jobs file's (run.duration_s, the policy table); the option is named, and
    # a command called wrongly exits 2
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(jobs_data(tmp_path)))
    result = CLI.invoke(cli(), ["colocate", str(path), "--duration", "-1"])
    assert result.exit_code == 2
    assert "--duration: must be > 0 (got -1)" in result.output
    result = CLI.invoke(cli(), ["colocate", str(path), "--policy", "fifo"])
    assert result.exit_code == 2
    assert "--policy: unknown policy 'fifo'; known policies: dedicated, timeslice" in " ".join(
        result.output.split()
    )


def test_no_jobs_file_is_an_error_with_a_hint() -> None:
    result = CLI.invoke(cli(), ["colocate"])
    assert result.exit_code == 2  # called wrongly: a usage error
    assert "give a jobs file" in result.output
    assert "--example" in result.output


@pytest.mark.parametrize("status", ["complete", "failed"])
def test_the_command_shows_warnings_progress_and_a_summary(
    status: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rundir_factory import standard_runs

    run_dir = standard_runs(tmp_path / "made")["orion"]
    warning = "client 'be' (be.csv): profile was made with GPU NVIDIA H100, this machine has ..."
    seen: dict[str, Any] = {}

    def prepare(config: JobsConfig) -> Any:
        seen["config"] = config
        return SimpleNamespace(warnings=(warning,))

    def run(prepared: Any, *, progress: Any) -> RunOutcome:
        assert prepared.warnings == (warning,)  # the run is prepare_run's, not prepared again
        hp = ClientProgress("hp", "hp", "infer", "running", 4242, 10, None)
        progress(
            RunProgress(run_dir, "orion", 1, 1, "measuring", 1.0, 9.0, (hp,), 10, 1.0, 2.0, ())
        )
        return RunOutcome(
            run_dir, status, prepared.warnings, ("hp", "be") if status == "failed" else ()
        )

    monkeypatch.setattr("colocation.preflight.prepare_run", prepare)
    monkeypatch.setattr("colocation.runner.run_jobs", run)
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(jobs_data(tmp_path)))
    result = CLI.invoke(
        cli(), ["colocate", str(path), "--policy", "orion", "-o", str(tmp_path / "elsewhere")]
    )
    assert seen["config"].run.policy == "orion"
    assert seen["config"].run.output_dir == tmp_path / "elsewhere"
    output = result.output
    assert output.index(f"warning: {warning}") < output.index(f"run directory: {run_dir}")
    assert "HP so far: 10 requests, p50 1.00 ms, p99 2.00 ms" in output
    assert "orion run (complete)" in output  # the summary, read back from the run directory
    if status == "complete":
        assert result.exit_code == 0
        assert f"next: orion report {run_dir}" in output
    else:
        assert result.exit_code == 1
        assert "error: every client failed" in output


def test_a_machine_wide_mps_daemon_is_a_warning_for_non_mps_policies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe_dir = tmp_path / "nvidia-mps"
    pipe_dir.mkdir()
    (pipe_dir / "nvidia-cuda-mps-control.pid").write_text(f"{os.getpid()}\n")
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipe_dir))
    (warning,) = prepare_run(jobs(tmp_path, policy="dedicated")).warnings
    assert f"an MPS control daemon is running (pid {os.getpid()}" in warning
    assert "'dedicated' will run under it" in warning
    (pipe_dir / "nvidia-cuda-mps-control.pid").write_text("999999999\n")
    assert prepare_run(jobs(tmp_path, policy="dedicated")).warnings == ()
