"""`orion colocate` as a client of the GPU's daemon (CPU clients, the preload library passing
through): its clients join the daemon the way `orion run` does, so the daemon's clients.csv
shows each one joining and leaving; a running `orion up` daemon that schedules otherwise is
refused in one line before anything starts; a matching one is used, records the run into its
run directory and is left running; the daemon a run starts for itself is that run's alone."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import RunningDaemon
from typer.testing import CliRunner

from colocation.config import JobsConfig, parse_jobs
from colocation.gpu_daemon import SETTING_LABELS, settings_difference
from colocation.preflight import prepare_run
from colocation.runner import run_jobs
from orion_cli.app import app
from orion_common.errors import OrionError
from orion_daemon import client as daemon_client
from orion_daemon import state
from orion_daemon.admission import JoinRequest
from orion_daemon.control import stop
from orion_daemon.embedded import daemon_thread
from orion_daemon.joining import join
from orion_daemon.server import SCHEDULING, DaemonSettings
from reporting import client_summary, load_run

BERT = {"workload": "bert", "batch_size": 1, "options": {"seq_len": 8}}


@pytest.fixture(autouse=True)
def cpu_clients(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ORION_CLIENT_DEVICE", "cpu")
    monkeypatch.setenv("ORION_PROFILE_DIR", str(tmp_path / "profiles"))


def gpu0_folder() -> Path:
    """GPU 0's state folder (the test's own: tests/conftest.py)."""
    return state.state_dir(0)


def jobs(tmp_path: Path, policy: str = "timeslice", **run: Any) -> JobsConfig:
    return parse_jobs(jobs_data(tmp_path, policy, **run), tmp_path)


def jobs_data(tmp_path: Path, policy: str = "timeslice", **run: Any) -> dict[str, Any]:
    return {
        "run": {
            **run,
            "policy": policy,
            "requests": 8,
            "warmup_steps": 1,
            "output_dir": str(tmp_path / "runs"),
        },
        "clients": [
            {**BERT, "name": "hp", "role": "hp", "mode": "infer",
             "arrivals": {"kind": "uniform", "rate_per_s": 4}},
            {**BERT, "name": "be", "mode": "train"},
        ],
    }  # fmt: skip


def events(folder: Path) -> list[dict[str, str]]:
    with (folder / state.CLIENTS_TABLE).open() as handle:
        return list(csv.DictReader(handle))


def own_shared_memory() -> list[Path]:
    return list(Path("/dev/shm").glob(f"orion-{os.getpid()}-*"))


# How a client's slot ends: exited, or dead when it stopped gating before it exited (a machine
# so loaded that the daemon missed its one-second heartbeat bound) and so never detached.
ENDED = ("exited", "dead")
LEFT = ("leave", "dead")


def ends(rows: list[dict[str, str]]) -> dict[str, str]:
    """Each client's last event after its join."""
    return {r["client"]: r["event"] for r in rows if r["event"] != "join"}


def assert_recorded(run_dir: Path) -> None:
    """The run's records, written by the daemon into the run directory, read by the report:
    each client's final statistics, taken after it was gone."""
    stats = json.loads((run_dir / "scheduler.json").read_text())
    assert set(stats["clients"]) == {"hp", "be"}
    assert all(s["state"] in ENDED for s in stats["clients"].values()), stats["clients"]
    assert stats["settings"]["policy"] == "passthrough"
    assert (run_dir / "memory.csv").is_file()
    run = load_run(run_dir)
    assert run.complete
    assert run.scheduler is not None and set(run.scheduler) == {"hp", "be"}
    assert client_summary(run).set_index("client").loc["hp", "count"] == 8
    assert len(run.tables["be"]) > 0  # it trained beside HP (iterations, on a loaded CPU, long)


def test_a_runs_clients_join_the_daemon_it_starts_for_itself(tmp_path: Path) -> None:
    outcome = run_jobs(jobs(tmp_path, trace=True))
    assert outcome.status == "complete", outcome
    assert outcome.failed_clients == ()
    rows = events(gpu0_folder())
    # Each client joined (the HP client first) and left: the daemon saw them come and go.
    assert [(r["event"], r["client"]) for r in rows[:2]] == [("join", "hp"), ("join", "be")]
    assert len(rows) == 4 and set(ends(rows)) == {"hp", "be"}
    assert all(event in LEFT for event in ends(rows).values())
    assert all(str(outcome.run_dir) in r["command"] for r in rows)
    assert_recorded(outcome.run_dir)
    meta = json.loads((outcome.run_dir / "run.json").read_text())
    assert meta["scheduler"]["controller_pid"] == os.getpid()  # it ran inside the runner
    assert meta["scheduler"]["state_dir"] == str(gpu0_folder().resolve())  # `orion quota` asks it
    # The trace the daemon drained for the run (empty: CPU clients launch no kernels).
    assert meta["table_rows"]["trace.csv"] == 0
    assert json.loads((outcome.run_dir / "scheduler.json").read_text())["trace_records_lost"] == 0
    # ... and stopped with the run: no record, no socket, no shared memory left.
    assert state.read_record(gpu0_folder()) is None
    assert not (gpu0_folder() / state.SOCKET).exists()
    assert not own_shared_memory()


def test_a_running_daemon_with_another_policy_is_refused_in_one_line(tmp_path: Path) -> None:
    daemon = RunningDaemon(gpu0_folder(), policy="reef")
    try:
        with pytest.raises(OrionError) as info:
            run_jobs(jobs(tmp_path))
        pid = daemon.process.pid
        assert info.value.message == (
            f"the orion daemon running on GPU 0 (pid {pid}) has policy 'reef' where this run "
            "needs 'passthrough' (run policy 'timeslice')"
        )
        assert "`orion down --gpu 0`" in (info.value.hint or "")
        # `orion colocate` says it in one line (and its hint), and starts nothing.
        path = tmp_path / "jobs.json"
        path.write_text(json.dumps(jobs_data(tmp_path)))
        result = CliRunner(env={"COLUMNS": "400"}).invoke(app, ["colocate", str(path)])
        assert result.exit_code == 1
        lines = result.output.strip().splitlines()
        assert lines[0] == f"error: {info.value.message}"
        assert len(lines) == 2 and lines[1].startswith("hint: stop it with `orion down --gpu 0`")
        assert not (tmp_path / "runs").exists()  # refused before anything started
        assert daemon.names() == [] and daemon.process.poll() is None
    finally:
        daemon.close()


def test_a_matching_running_daemon_is_used_and_left_running(tmp_path: Path) -> None:
    daemon = RunningDaemon(gpu0_folder(), policy="passthrough")
    try:
        outcome = run_jobs(jobs(tmp_path))
        assert outcome.status == "complete", outcome
        assert daemon.process.poll() is None and daemon.names() == []  # still there, free
        rows = daemon.events()
        assert sorted(r["client"] for r in rows if r["event"] == "join") == ["be", "hp"]
        assert len(rows) == 4 and set(ends(rows)) == {"hp", "be"}
        assert all(event in LEFT for event in ends(rows).values())
        assert_recorded(outcome.run_dir)
        meta = json.loads((outcome.run_dir / "run.json").read_text())
        assert meta["scheduler"]["controller_pid"] == daemon.process.pid
        assert meta["scheduler"]["state_dir"] == str(daemon.folder.resolve())
        assert any("joined the orion daemon running on GPU 0" in n for n in meta["notes"])
        assert "mps" not in meta
    finally:
        daemon.close()


def test_the_daemon_a_run_starts_is_that_runs_alone(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    settings = DaemonSettings(
        gpu=0, sm_count=132, folder=gpu0_folder(), sharing="timeslice", owner=str(run_dir)
    )
    notes: list[str] = []
    with daemon_thread(settings, notes) as serving:
        belongs = f"the orion daemon of GPU 0 belongs to the `orion colocate` run in {run_dir}"
        with pytest.raises(OrionError, match="belongs to the `orion colocate` run") as info:
            join(0, JoinRequest(role="be", name="stranger"), gpu0_folder())
        assert info.value.message.startswith(belongs)
        with pytest.raises(OrionError) as info:
            stop(0, gpu0_folder())  # `orion down`: the run's process is not signalled
        assert info.value.message.startswith(belongs)
        with pytest.raises(OrionError) as info:
            prepare_run(jobs(tmp_path))  # a second run on the GPU
        assert info.value.message.startswith(belongs)
        serving.check()  # still serving
        status = daemon_client.status(gpu0_folder() / state.SOCKET)
        assert status["owner"] == str(run_dir)  # `orion status` says whose it is
    assert state.read_record(gpu0_folder()) is None
    assert [e["event"] for e in events(gpu0_folder())] == ["refused"]


@pytest.mark.parametrize(
    ("running", "wanted", "said"),
    [
        ({}, {}, None),
        ({"sharing": "mps"}, {}, "sharing 'mps' where this run needs 'timeslice'"),
        (
            {"queue_limit_ns": 200_000},
            {},
            "BE queue limit 200 us where this run needs from the HP client's profile",
        ),
        ({}, {"unknown_duration_ns": 5_000}, "unprofiled kernel duration the queue limit where "
         "this run needs 5 us"),
        ({}, {"trace": True}, "kernel trace off where this run needs on"),
        ({"be_graph_gate": "inside"}, {}, "BE graph gate 'inside' where this run needs 'segments'"),
        ({"be_graph_gate": "segments"}, {}, None),  # time-sliced, the default is segments
        ({"quota_window_ns": 2 * 10**9}, {}, None),  # no shares: the window changes nothing
        (
            {"quota_window_ns": 2 * 10**9, "shares": True},
            {"shares": True},
            "quota window 2 s where this run needs 1 s",
        ),
        ({"hp_quiet_us": 0}, {}, "HP quiet spell off where this run needs 300 us"),  # orion's
        (
            {},
            {"be_gate_spacing_us": 250},
            "BE gate spacing 100 us where this run needs 250 us",  # 100 us: the default
        ),
        (
            {"be_gate": "cpu"},
            {},
            "BE gate 'cpu' where this run needs 'gpu'",
        ),
        (
            {"sharing": "mps", "be_sm_percent": 70},
            {"sharing": "mps"},
            "BE SM share 70% where this run needs every SM",  # orion's default
        ),
        (
            {"sharing": "mps", "hp_context": "mps"},
            {"sharing": "mps"},
            "HP context mps where this run needs own",  # orion's
        ),
        ({"gpu_name": "another", "memory_bytes": 1}, {}, None),  # facts, not scheduling
    ],
)  # fmt: skip
def test_what_a_run_needs_of_a_running_daemon(
    running: dict[str, Any], wanted: dict[str, Any], said: str | None
) -> None:
    base = {"gpu": 0, "sm_count": 132, "folder": Path("/x"), "sharing": "timeslice"}
    difference = settings_difference(
        DaemonSettings(**{**base, **running}), DaemonSettings(**{**base, **wanted})
    )
    assert difference == said


@pytest.mark.parametrize(
    ("policy", "sharing", "gate"),
    [
        ("reef", "mps", "segments"),  # the HP in the MPS server beside BE
        ("orion", "mps", "segments"),  # the HP in a context of its own: time-sliced against BE
        ("orion", "timeslice", "segments"),
        ("reef", "timeslice", "segments"),
    ],
)
def test_a_daemon_splits_be_graphs_unless_told_whatever_its_sharing(
    policy: str, sharing: str, gate: str
) -> None:
    settings = DaemonSettings(
        gpu=0, sm_count=132, folder=Path("/x"), policy=policy, sharing=sharing
    )
    assert settings.be_graph_gate == gate
    told = DaemonSettings(
        gpu=0, sm_count=132, folder=Path("/x"), policy=policy, sharing=sharing,
        be_graph_gate="inside",
    )  # fmt: skip
    assert told.be_graph_gate == "inside"
    # Asked for inside, an HP of an MPS daemon runs in the server, where a graph stopped at a
    # wait keeps nothing from it.
    assert told.hp_context == ("mps" if sharing == "mps" else None)


def test_every_scheduling_setting_is_said_in_words_when_a_running_daemon_differs() -> None:
    # A run meeting a daemon started with any setting of its own gets a sentence, not a crash.
    assert set(SCHEDULING) <= set(SETTING_LABELS)
