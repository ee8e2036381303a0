"""The per-GPU daemon with programs joining and leaving, against the stand-in driver (CPU only).

What users rely on: any program joins a running daemon and leaves at any time; a program that
exits or is killed (SIGKILL too) gives its slot, memory count and share back within a second,
found by the daemon itself; the 17th client and a second HP are refused with the reason; `orion
down` with clients running opens their gates and they finish; a daemon killed with SIGKILL leaves
its clients running ungated, and the next daemon cleans up after it.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from daemon_harness import (
    BE_SCRIPT,
    GIB,
    SLOT_BACK_S,
    RunningDaemon,
    be_held_behind_hp,
    daemon_command,
    held_work_started,
)
from native_harness import HeldKernel, read_log, wait_for

from orion_common.errors import OrionError
from orion_daemon import state
from orion_daemon.control import stop


@pytest.fixture
def daemon(tmp_path):
    running = RunningDaemon(tmp_path / "gpu0", policy="reef", hp_completion="gpu-write")
    yield running
    running.close()


def test_clients_join_and_leave_while_the_daemon_runs(harness, daemon, tmp_path):
    for round_ in range(2):  # the second client reuses the first one's slot
        env = daemon.join("be", f"trainer{round_}", command=["train.py"])
        assert daemon.names() == [f"trainer{round_}"]
        result = harness.run(BE_SCRIPT, env=env, log=tmp_path / f"be{round_}.log")
        assert result.returncode == 0, result.stderr
        wait_for(lambda: daemon.names() == [], timeout_s=SLOT_BACK_S, what="the slot to come back")
    events = [(e["event"], e["client"], e["slot"]) for e in daemon.events()]
    assert events == [
        ("join", "trainer0", "0"),
        ("leave", "trainer0", "0"),
        ("join", "trainer1", "0"),
        ("leave", "trainer1", "0"),
    ]


def test_a_client_joining_runs_its_program_gated(harness, daemon, tmp_path):
    env = daemon.join("be", "trainer")
    result = harness.run(BE_SCRIPT, env=env, log=tmp_path / "be.log")
    assert result.returncode == 0, result.stderr
    # The stand-in saw the library's gate waits: the program ran as a client, not beside orion.
    kinds = [e.kind for e in read_log(tmp_path / "be.log") if e.kind in ("launch", "wait_value")]
    assert kinds.count("launch") == 10 and "wait_value" in kinds


def test_a_time_sliced_daemons_hp_launches_stay_on_the_programs_stream(harness, daemon, tmp_path):
    # Stream priority orders two clients' blocks only when their kernels run at once (MPS):
    # time-sliced, moving the HP's legacy-stream launches to a priority stream would order
    # nothing and cost an eager HP driver calls on every launch.
    script = "func k 1 launch k 1 32 0 launch k 1 32 legacy sync 0"
    result = harness.run(script, env=daemon.join("hp", "serve"), log=tmp_path / "hp.log")
    assert result.returncode == 0, result.stderr
    events = read_log(tmp_path / "hp.log")
    assert [e.fields[4] for e in events if e.kind == "launch"] == ["stream=(nil)", "stream=0x1"]
    assert not [e for e in events if e.kind in ("stream_create", "stream_wait_event")]


GRAPH_SCRIPT = (
    "func g1 1000 func g2 1000 graph_new G graph_node G g1 1 32 graph_node G g2 1 32 "
    "graph_inst G flags graph_run G 0 sync 0"
)  # a graph of two kernels no profile lists: a wait (or a segment) for each


# The harness's daemons are time-sliced, whose default splits BE graphs into segments.
@pytest.mark.parametrize(("arguments", "setting", "waits", "segments"),
                         [({}, "segments", 0, 2),
                          ({"be_graph_gate": "inside"}, "inside", 2, 0),
                          ({"be_graph_gate": "whole"}, "whole", 0, 0)])  # fmt: skip
def test_a_daemon_holds_be_graphs_as_it_was_told(harness, tmp_path, arguments, setting, waits,
                                                 segments):  # fmt: skip
    daemon = RunningDaemon(tmp_path / "gpu0", policy="reef", **arguments)
    try:
        record = state.live_record(daemon.folder)
        assert record["be_graph_gate"] == record["settings"]["be_graph_gate"] == setting
        result = harness.run(GRAPH_SCRIPT, env=daemon.join("be", "g"), log=tmp_path / "be.log")
        assert result.returncode == 0, result.stderr
    finally:
        daemon.close()
    kinds = [e.kind for e in read_log(tmp_path / "be.log")]
    assert kinds.count("graph_add_wait") == waits
    assert kinds.count("graph_clone") == segments  # a clone per segment
    launch = kinds.index("launch")
    assert "wait_value" in kinds[:launch]  # the launch itself waits at the gate either way


def test_the_seventeenth_client_is_refused(daemon):
    for index in range(16):
        daemon.join("be", f"job{index}")
    with pytest.raises(OrionError, match="all 16 client slots are taken"):
        daemon.join("be", "job16")
    assert len(daemon.names()) == 16
    assert daemon.events()[-1]["event"] == "refused"


def test_a_second_hp_is_refused_with_the_name_of_the_first(daemon):
    daemon.join("hp", "inference")
    with pytest.raises(OrionError, match="already has a high-priority client, 'inference'"):
        daemon.join("hp", "other")
    assert daemon.names() == ["inference"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"memory_limit": 9 * GIB}, "larger than the GPU's 8 GiB"),
        ({"min_util": 0.5}, "enforces no GPU-time shares"),
        ({"latency_target_ms": 5.0}, "the HP client's target"),
    ],
)
def test_limits_that_cannot_hold_are_refused(daemon, fields, message):
    with pytest.raises(OrionError, match=message):
        daemon.join("be", "job", **fields)
    assert daemon.names() == []


def test_a_quota_daemon_takes_a_share_as_it_joins_without_being_asked_for_shares(tmp_path):
    # `orion up --policy quota` grants GPU time by the shares (no --shares needed, as `orion
    # quota` on its clients already knew): `orion run --be --min-util 0.3` joins it.
    daemon = RunningDaemon(tmp_path / "gpu0", policy="quota")
    try:
        daemon.join("be", "promised", min_util=0.3, max_util=0.6)
        (client,) = daemon.status()["clients"]
        assert (client["min_util"], client["max_util"]) == (0.3, 0.6)
    finally:
        daemon.close()


def test_promises_over_the_whole_gpu_are_refused(tmp_path):
    daemon = RunningDaemon(tmp_path / "gpu0", shares=True)
    try:
        daemon.join("be", "first", min_util=0.7)
        with pytest.raises(OrionError, match=r"\(0.3 is left unpromised on this GPU"):
            daemon.join("be", "second", min_util=0.5)
        daemon.join("be", "second", min_util=0.3)
    finally:
        daemon.close()


def test_a_killed_client_gives_its_slot_memory_and_share_back(harness, daemon, tmp_path):
    env = daemon.join("be", "doomed", memory_limit=GIB)
    result = harness.run("alloc mem 5000 kill_self", env=env, log=tmp_path / "be.log")
    assert result.returncode == -signal.SIGKILL
    wait_for(lambda: daemon.names() == [], timeout_s=SLOT_BACK_S, what="the daemon to find it dead")
    assert [e["event"] for e in daemon.events()] == ["join", "dead"]
    # The slot is clean for the next client: no memory counted, no limit, the full share.
    daemon.join("be", "next")
    (client,) = daemon.status()["clients"]
    assert client["slot"] == 0
    assert (client["memory_used_bytes"], client["memory_limit_bytes"]) == (0, None)
    assert client["max_util"] == 1.0


def test_a_claimer_that_ends_before_any_process_attaches_frees_its_slot(daemon):
    # `orion run` whose command cannot start: the slot is reclaimed when the claimer is gone.
    code = (
        "import pathlib\n"
        "from orion_daemon.admission import JoinRequest\n"
        "from orion_daemon.joining import join\n"
        f"join(0, JoinRequest(role='be', name='never'), pathlib.Path({str(daemon.folder)!r}))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30, cwd=daemon.folder)
    wait_for(lambda: daemon.names() == [], timeout_s=SLOT_BACK_S, what="the slot to come back")


def test_down_with_clients_running_opens_their_gates_and_they_finish(harness, daemon, tmp_path):
    with be_held_behind_hp(harness, daemon, tmp_path) as be:
        stopped_ns = time.monotonic_ns()
        stop(0, daemon.folder)
        assert be.wait(timeout=5) == 0
        # Its work ran once the gates opened, not before (HP's 20-s kernel still runs).
        starts = held_work_started(tmp_path / "be.log")
        assert len(starts) == 10 and min(starts) > stopped_ns
        assert daemon.process.wait(timeout=5) == 0
        assert state.read_record(daemon.folder) is None  # a clean stop leaves no record


def test_a_killed_daemon_leaves_clients_ungated_and_the_next_one_cleans_up(
    harness, daemon, tmp_path
):
    hold = HeldKernel("long", tmp_path / "release-hp")
    with be_held_behind_hp(harness, daemon, tmp_path, hold=hold) as be:
        killed_ns = time.monotonic_ns()
        daemon.process.kill()
        daemon.process.wait(timeout=5)
        assert be.wait(timeout=60) == 0
        assert "runs ungated" in be.stderr.read()
        # Ungated after a second of silence: its work ran after the kill, while HP's kernel,
        # held until the test releases it, still ran (with nobody to open its gate, it would
        # wait for ever): told apart by the order of events, not by how long anything took.
        starts = held_work_started(tmp_path / "be.log")
        assert len(starts) == 10 and min(starts) > killed_ns
        assert not [e for e in read_log(tmp_path / "hp.log") if e.kind == "exec_end"]
    assert state.read_record(daemon.folder) is not None  # stale, left by SIGKILL
    assert state.live_record(daemon.folder) is None
    second = RunningDaemon(daemon.folder)
    try:
        assert "removed daemon.json left by a daemon that died" in second.output()
        second.join("be", "again")
    finally:
        second.close()


def test_a_second_daemon_for_the_same_gpu_is_refused(daemon):
    result = subprocess.run(
        daemon_command(daemon.folder),
        capture_output=True, text=True, timeout=30, check=False, cwd=daemon.folder.parent,
    )  # fmt: skip
    assert result.returncode == 1
    assert "an orion daemon already runs for GPU 0" in result.stderr


def test_an_hp_joining_with_its_profile_sets_the_be_queue_bound(daemon):
    profile = Path(__file__).parent.parent / "profiles/nvidia-h100-80gb-hbm3"
    graph = profile / "resnet50-infer-bs4-fp32-graph" / "profile.csv"
    assert daemon.status()["queue_limit_us"] is None
    daemon.join("hp", "inference", profile=str(graph), latency_target_ms=3.0)
    status = daemon.status()
    (client,) = status["clients"]
    assert client["profiled_graphs"] == 1 and client["profiled_kernels"] > 0
    assert status["queue_limit_us"] > 0


@pytest.mark.parametrize(
    ("policy", "sharing", "expected"),
    [
        ("orion", "", "mps"),
        ("reef", "", "mps"),
        ("orion", "timeslice", "timeslice"),
        ("quota", "timeslice", "timeslice"),
    ],
)
def test_the_sharing_mode_defaults_to_the_policys(tmp_path, policy, sharing, expected):
    from orion_daemon.server import DaemonSettings

    settings = DaemonSettings(gpu=0, sm_count=132, folder=tmp_path, policy=policy, sharing=sharing)
    assert settings.sharing == expected


@pytest.mark.parametrize(
    ("policy", "sharing", "arrangement"),
    [
        # orion's: the HP in a context of its own beside BE's MPS server, BE on every SM (beside
        # an HP that joins the server too), a 300-us quiet spell
        ("orion", None, ("own", None, 300.0)),
        ("orion", "timeslice", (None, None, 300.0)),
        ("reef", None, ("mps", None, 0.0)),
        ("quota", "timeslice", (None, None, 0.0)),
    ],
)
def test_a_daemon_told_nothing_runs_its_policys_arrangement(tmp_path, policy, sharing, arrangement):
    from orion_daemon.server import DaemonSettings

    settings = DaemonSettings(gpu=0, sm_count=132, folder=tmp_path, policy=policy, sharing=sharing)
    assert (settings.hp_context, settings.be_sm_percent, settings.hp_quiet_us) == arrangement
    # What daemon.json keeps reads back as the same daemon.
    assert DaemonSettings.parse_json(settings.to_json()) == settings


def test_what_a_daemon_is_told_overrides_its_policys_arrangement(tmp_path):
    from orion_daemon.server import DaemonSettings

    settings = DaemonSettings(
        gpu=0, sm_count=132, folder=tmp_path, policy="orion", sharing="mps", hp_context="mps",
        be_sm_percent=70, hp_quiet_us=0,
    )  # fmt: skip
    assert (settings.hp_context, settings.be_sm_percent, settings.hp_quiet_us) == ("mps", 70, 0)


@pytest.mark.parametrize(
    ("sharing", "message"),
    [
        ("timeslice", "policy 'priority' runs under 'mps' only: stream priorities order work"),
        ("mig", "sharing must be one of mps, timeslice (got 'mig')"),
    ],
)
def test_a_sharing_mode_the_policy_cannot_run_under_is_refused(tmp_path, sharing, message):
    from orion_daemon.server import DaemonSettings

    with pytest.raises(OrionError, match=re.escape(message)):
        DaemonSettings(gpu=0, sm_count=132, folder=tmp_path, policy="priority", sharing=sharing)


def test_a_daemon_told_to_stop_with_a_process_stops_cleanly_when_it_goes(harness, tmp_path):
    # orion.ray's node agent starts its node's daemons so: none outlives the agent.
    owner = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])  # till killed
    daemon = RunningDaemon(tmp_path / "gpu0", stop_with_pid=owner.pid)
    try:
        env = daemon.join("be", "trainer")
        owner.kill()
        owner.wait(timeout=10)
        assert daemon.process.wait(timeout=10) == 0
        assert f"(pid {owner.pid}) is gone; stopping" in daemon.output()
        assert state.read_record(daemon.folder) is None  # a clean stop
        # Its client is let go, as by `orion down`: its program runs on, ungated.
        result = harness.run(BE_SCRIPT, env=env, log=tmp_path / "be.log")
        assert result.returncode == 0, result.stderr
    finally:
        owner.kill()
        daemon.close()
