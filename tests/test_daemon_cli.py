"""`orion run`, `orion status` and `orion down` against a daemon on the stand-in driver (CPU).

What users rely on: `orion run` runs the program unchanged and gives back its exit status; bad
input is one line and starts nothing; `orion status --json` gives every field a monitoring
script reads; `orion down` stops the daemon.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from daemon_harness import SLOT_BACK_S, RunningDaemon
from native_harness import Harness, wait_for
from typer.testing import CliRunner

from orion_cli.app import app

STATUS_FIELDS = {
    "name", "slot", "pid", "role", "state", "command", "profile", "profiled_kernels",
    "profiled_graphs", "launches", "launches_per_s", "gpu_share", "min_util", "max_util",
    "memory_used_bytes", "memory_peak_bytes", "memory_limit_bytes", "allocations_refused",
    "held_launches", "held_ms", "gate_waits", "held_by", "unknown_launches", "unknown_kernels",
    "graph_launches", "unknown_graph_launches", "graphs_gated", "graphs_ungated",
    "graphs_segmented", "graph_segments", "ungated_graph_why", "sampling_holds", "held_samples",
    "request_holds",
    "profile_sources", "request_shape", "interference", "felt_slowdown", "felt_tail", "felt_p99",
    "felt_alone_p99", "felt_p99_over_alone",
    "start_felt_slowdown", "start_felt_p99", "requests_timed", "request_slowdown", "request_p99",
    "request_alone_p99", "request_p99_over_alone", "latency_target_ms", "hp_context",
    "sm_percent", "joined_s",
}  # fmt: skip


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    monkeypatch.setenv("ORION_STATE_DIR", str(tmp_path))
    running = RunningDaemon(tmp_path / "gpu0", policy="orion")
    yield running
    running.close()


def orion_run(harness: Harness, *arguments: str) -> subprocess.CompletedProcess[str]:
    """`orion run ARGUMENTS` as a user runs it, with the stand-in driver on the library path."""
    environment = harness.environment(None, None)
    return subprocess.run(
        [sys.executable, "-m", "orion_cli.app", "run", *arguments],
        env=environment, capture_output=True, text=True, timeout=60, check=False,
        cwd=harness.directory,  # outside the checkout: `-m` would import the source tree first
    )  # fmt: skip


def start_orion_run(
    harness: Harness, role: str, name: str, script: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """`orion run ROLE --name NAME -- launcher SCRIPT` left running (with ``env`` over the
    test's environment); its stdout is a pipe."""
    return subprocess.Popen(
        [sys.executable, "-m", "orion_cli.app", "run", role, "--name", name, "--",
         str(harness.launcher), *script.split()],
        env={**harness.environment(None, None), **(env or {})}, stdout=subprocess.PIPE,
        text=True, cwd=harness.directory,
    )  # fmt: skip


def test_the_programs_exit_status_is_orion_runs(harness, daemon):
    script = "func k 100 repeat 3 launch k 4 128 0 end sync 0"
    launcher = str(harness.launcher)
    result = orion_run(harness, "--be", "--name", "job", "--", launcher, *script.split())
    assert result.returncode == 0, result.stderr
    result = orion_run(harness, "--be", "--", "sh", "-c", "exit 7")
    assert result.returncode == 7
    wait_for(lambda: daemon.names() == [], timeout_s=SLOT_BACK_S, what="the slot to come back")
    # The library takes the slot at the program's first driver call: a shell that never uses
    # the GPU never joins.
    events = [(e["event"], e["client"]) for e in daemon.events()]
    assert events == [("join", "job"), ("leave", "job")]


def test_status_json_gives_every_field_of_every_client(harness, daemon):
    daemon.join("hp", "inference", latency_target_ms=5.0, command=["serve.py"])
    daemon.join("be", "trainer", memory_limit=1 << 30)
    result = CliRunner().invoke(app, ["status", "--json"])
    assert result.exit_code == 0, result.output
    status = json.loads(result.output)
    assert (status["gpu"], status["policy"], status["sharing"]) == (0, "orion", "timeslice")
    assert status["free_slots"] == 14
    hp, be = status["clients"]
    assert set(hp) == set(be) == STATUS_FIELDS
    assert (hp["name"], hp["role"], hp["latency_target_ms"]) == ("inference", "hp", 5.0)
    assert (be["name"], be["role"], be["memory_limit_bytes"]) == ("trainer", "be", 1 << 30)
    assert hp["request_shape"] is None is be["request_shape"]  # no request yet; BE has none
    assert hp["requests_timed"] == 0 and be["requests_timed"] is None  # BE has no requests
    table = CliRunner().invoke(app, ["status"], env={"COLUMNS": "250"})
    assert table.exit_code == 0 and "inference" in table.output and "trainer" in table.output


@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        # 2: called wrongly (usage), as typer exits; 1: every other error
        ([], 2, "no command to run"),
        (["--be"], 2, "no command to run"),
        (["--", "true"], 2, "say whether the program is --hp or --be"),
        (["--be", "--", "no-such-program-xyz"], 127, "no-such-program-xyz: command not found"),
        (["--be", "--memory-limit", "lots", "--", "true"], 2, "--memory-limit"),
        (["--be", "--memory-limit", "9GiB", "--", "true"], 1, "larger than the GPU's 8 GiB"),
        (["--be", "--gpu", "3", "--", "true"], 1, "no orion daemon runs for GPU 3"),
        (["--be", "--profile", "/no/such.csv", "--", "true"], 1, "no such file"),
        (["--be", "--min-util", "0.5", "--", "true"], 1, "enforces no GPU-time shares"),
    ],
)
def test_bad_input_is_one_line_and_starts_nothing(harness, daemon, arguments, code, message):
    result = orion_run(harness, *arguments)
    assert result.returncode == code
    assert message in result.stderr
    assert result.stderr.count("error:") <= 1
    assert daemon.names() == []


def test_no_daemon_runs_the_program_ungated(harness, tmp_path, monkeypatch):
    monkeypatch.setenv("ORION_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("ORION_RUN", "/orion-left-over")
    result = orion_run(harness, "--no-daemon", "--", "sh", "-c", 'echo "${ORION_RUN:-unset}"')
    assert result.returncode == 0
    assert result.stdout.strip() == "unset"
    without = orion_run(harness, "--be", "--", "true")
    assert without.returncode == 1 and "orion up --gpu 0" in without.stderr


def test_down_stops_the_daemon(daemon):
    result = CliRunner().invoke(app, ["down"])
    assert result.exit_code == 0, result.output
    assert "stopped" in result.output
    assert daemon.process.wait(timeout=10) == 0
    again = CliRunner().invoke(app, ["down"])
    assert again.exit_code == 1 and "no orion daemon runs for GPU 0" in again.output


def test_status_saves_what_a_running_client_learned_as_a_profile(harness, daemon, tmp_path):
    from postprocess.profile_format import read_profile

    script = "func u 2000 repeat 8 launch u 8 64 0 end sync 0 repeat 2 launch u 8 64 0 end sync 0"
    script += " say learned hold"
    process = start_orion_run(harness, "--be", "job", script)
    try:
        assert process.stdout.readline().strip() == "learned"
        status = json.loads(CliRunner().invoke(app, ["status", "--json"]).output)
        (job,) = status["clients"]
        assert job["profile_sources"]["launches"]["online"] >= 1
        path = tmp_path / "job.csv"
        saved = CliRunner().invoke(app, ["status", "--save-profile", "job", str(path)])
        assert saved.exit_code == 0, saved.output
        assert "1 kernels and 0 graphs" in saved.output
        missing = CliRunner().invoke(app, ["status", "--save-profile", "nobody", str(path)])
        assert missing.exit_code == 1 and "no client named 'nobody'" in missing.output
    finally:
        process.kill()
        process.wait(timeout=10)
    profile = read_profile(path)
    assert profile.metadata["source"] == "online"
    assert profile.metadata["client"] == "job"
    assert list(profile.kernels["kernel_name"]) == ["u"]
    assert profile.kernels["duration_ns"].iloc[0] >= 2_000_000


def test_the_be_queue_bound_follows_an_unprofiled_hp_graph_as_it_is_learned(harness, daemon):
    # No profile: the fallback bound (50 us) until the HP graph (3 ms of kernels) is learned,
    # then half of 5% of its step, as an offline profile would give.
    graph = "func ga 2000 func gb 1000 graph_new A graph_node A ga 4 128 graph_node A gb 2 64"
    script = f"{graph} graph_inst A flags repeat 8 graph_run A 0 sync 0 end say learned"
    script += " hold"
    before = json.loads(CliRunner().invoke(app, ["status", "--json"]).output)
    # Its timing events on the stand-in's simulated clock: the graph is timed at exactly its
    # kernels' 3 ms, however late a busy machine runs them.
    process = start_orion_run(
        harness, "--hp", "serve", script, env={"FAKE_EVENT_CLOCK": "simulated"}
    )
    try:
        assert process.stdout.readline().strip() == "learned"

        def bound() -> float | None:
            return json.loads(CliRunner().invoke(app, ["status", "--json"]).output)[
                "queue_limit_us"
            ]

        wait_for(lambda: (bound() or 0) > 50, timeout_s=20, what="the learned bound")
        learned_bound = bound()
    finally:
        process.kill()
        process.wait(timeout=10)
    assert before["queue_limit_us"] in (None, 50.0)
    assert learned_bound == pytest.approx(75, rel=1e-3)  # 2.5% of the 3-ms step learned


def test_status_without_a_daemon_says_how_to_start_one(tmp_path):
    result = CliRunner().invoke(app, ["status", "--state-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "orion up --gpu 0" in result.output


def test_quota_changes_a_daemon_clients_limits_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("ORION_STATE_DIR", str(tmp_path))
    daemon = RunningDaemon(tmp_path / "gpu0", shares=True)
    try:
        daemon.join("be", "first", min_util=0.5)
        daemon.join("be", "trainer", memory_limit=1 << 30)
        folder = str(daemon.folder)
        result = CliRunner().invoke(app, ["quota", folder, "trainer", "--memory-limit", "2GiB"])
        assert result.exit_code == 0, result.output
        result = CliRunner().invoke(app, ["quota", folder, "trainer", "--min-util", "0.6"])
        assert result.exit_code == 1 and "adds up to 1.1" in result.output
        result = CliRunner().invoke(app, ["quota", folder, "trainer", "--max-util", "0.3"])
        assert result.exit_code == 0, result.output
        (_first, trainer) = daemon.status()["clients"]
        assert (trainer["memory_limit_bytes"], trainer["max_util"]) == (2 << 30, 0.3)
    finally:
        daemon.close()


def test_the_status_table_says_how_graphs_were_held_and_the_felt_tail():
    # What a user reads without --json: a BE graph orion ran whole, with why, beside the ones it
    # split; the HP's felt slowdown with the bound of its p99 (more than 1% over 2x alone).
    from rich.console import Console

    from orion_cli.status import status_table

    base = {
        "pid": 1, "state": "attached", "command": ["p"], "launches_per_s": 10.0, "gpu_share": 0.0,
        "memory_used_bytes": 0, "memory_limit_bytes": None, "held_launches": 0, "held_ms": 0.0,
        "gate_waits": 5, "held_by": {}, "interference": 1.0, "felt_slowdown": None,
        "profile_sources": {"launch_share": {"offline": 0.0, "online": 1.0, "unknown": 0.0}},
    }  # fmt: skip
    hp = {**base, "name": "svc", "role": "hp", "felt_slowdown": 0.9, "felt_p99": 2.0,
          "felt_tail": {"1.25x": 0.2, "1.5x": 0.1, "2x": 0.03, "4x": 0.0}}  # fmt: skip
    why = "the driver did not list its edges"
    be = {**base, "name": "jax", "role": "be", "graphs_segmented": 2, "graph_segments": 107,
          "graphs_ungated": 1, "ungated_graph_why": why}  # fmt: skip
    status = {"gpu": 0, "gpu_name": "G", "policy": "orion", "sharing": "timeslice", "pid": 9,
              "uptime_s": 1.0, "free_slots": 14, "clients": [hp, be],
              "be_gate_spacing_us": 100.0}  # fmt: skip
    console = Console(width=400, record=True)
    console.print(status_table(status))
    text = console.export_text()
    assert "BE gate waits at least 100 us of BE work apart" in text
    assert "% of the SMs" not in text  # no BE SM share: every SM
    assert "2 graphs split into 107 segments" in text
    assert "1 graphs whole (the driver did not list its edges)" in text
    assert "0.90x felt, p99 >= 2x" in text
    # Requests timed whole, before any ran alone: said, not compared with nothing; then the
    # ratio and the p99 against the p99 alone, first in the HP's slowdown.
    console = Console(width=400, record=True)
    console.print(status_table({**status, "clients": [{**hp, "requests_timed": 12}, be]}))
    assert "requests: none alone yet to compare with; 0.90x felt" in console.export_text()
    timed = {**hp, "requests_timed": 80, "request_slowdown": 1.12, "request_p99_over_alone": 1.3}
    console = Console(width=400, record=True)
    console.print(status_table({**status, "clients": [timed, be]}))
    assert "requests 1.12x (p99 1.30x of alone); 0.90x felt" in console.export_text()
    console = Console(width=400, record=True)
    console.print(status_table({**status, "sharing": "mps", "be_sm_percent": 50.0}))
    text = console.export_text()
    assert "sharing mps" in text and "BE kernels on 50% of the SMs" in text
    assert "context of its own" not in text
    console.print(status_table({**status, "sharing": "mps", "hp_context": "own"}))
    assert "the HP in a context of its own (outside MPS)" in console.export_text()
    # Each HP's own choice (`orion run --hp --hp-context`), beside its role.
    chosen = [{**c, "hp_context": "mps" if c["role"] == "hp" else None} for c in status["clients"]]
    console.print(status_table({**status, "sharing": "mps", "clients": chosen}))
    assert "hp (in MPS)" in console.export_text()
    # An HP's work per request, where a BE client's holds are shown: what suits --hp-context.
    shape = {"requests": 1401, "launches_per_request": 5.4, "graphs_per_request": 1.0,
             "gpu_ms_per_request": 1.34}  # fmt: skip
    with_shape = [{**c, "request_shape": shape} if c["role"] == "hp" else c for c in chosen]
    console.print(status_table({**status, "clients": with_shape}))
    assert "1,401 requests: 1.34 ms of GPU work, 5.4 launches (1.0 graphs) each" in " ".join(
        console.export_text().split()
    )


def test_orion_up_runs_orion_time_sliced_where_the_mps_tools_are_missing(tmp_path, monkeypatch):
    """orion's default arrangement runs its BE clients under MPS; on a machine without MPS's
    tools `orion up` with no sharing options starts anyway, time-sliced, and says why, while
    `--sharing mps` asked for is refused with what to install."""
    from orion_common import sysinfo

    monkeypatch.setenv("ORION_STAND_IN_GPUS", json.dumps([{"uuid": "GPU-0", "name": "stand-in"}]))
    monkeypatch.setattr(sysinfo, "find_mps_control", lambda: None)
    runner = CliRunner()
    started = runner.invoke(app, ["up", "--state-dir", str(tmp_path / "state")])
    try:
        assert started.exit_code == 0, started.output
        assert "sharing timeslice (nvidia-cuda-mps-control not found" in started.output
        record = json.loads((tmp_path / "state" / "gpu0" / "daemon.json").read_text())
        settings = record["settings"]
        assert settings["sharing"] == "timeslice" and settings["hp_context"] is None
        assert settings["hp_quiet_us"] == 300  # the rest of orion's arrangement holds
    finally:
        stopped = runner.invoke(app, ["down", "--state-dir", str(tmp_path / "state")])
    assert stopped.exit_code == 0, stopped.output
    asked = runner.invoke(app, ["up", "--sharing", "mps", "--state-dir", str(tmp_path / "other")])
    assert asked.exit_code == 1
    assert "nvidia-cuda-mps-control was not found" in asked.output
    assert "orion up --sharing timeslice" in asked.output
