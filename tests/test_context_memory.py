"""A client's CUDA context counted in its memory limit, against the stand-in driver (CPU only).

What users rely on: the memory a process's CUDA context takes (about 0.6 GiB on an H100, which
``nvidia-smi`` counts as the process's) is part of what a memory limit holds. The controller
measures it once per GPU (a stand-in GPU declares it: ``context_mib``), every client process
counts it from the moment it joins, so ``cuMemGetInfo`` says the limit less the context less the
allocations is free and an allocation that fits only without the context is refused; a BE
client's child, a process with a context of its own, adds its own and gives it back when it
ends; a limit the context alone would use up is refused at join in one line; and where nothing
can be measured the context counts as 0, with the reason in the daemon's log.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import cuda_available
from daemon_harness import SLOT_BACK_S, RunningDaemon, joining_environment
from native_harness import wait_for

from orion_common.context_footprint import context_footprint, measure_footprint
from orion_common.errors import OrionError
from orion_daemon import client as daemon_client
from orion_daemon import state
from orion_daemon.admission import JoinRequest, check_join, memory_limit_problem
from scheduler_core import SchedulerRun, SchedulerSettings

MIB = 1 << 20
GIB = 1 << 30
CONTEXT = 300 * MIB
STAND_IN = [{"uuid": "GPU-00000000-0000-0000-0000-000000000001", "name": "NVIDIA H100 80GB HBM3",
             "memory_mib": 16384, "context_mib": 300}]  # fmt: skip


@pytest.fixture
def stand_in_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU 0 is a stand-in whose context takes 300 MiB (the daemon started next inherits it)."""
    monkeypatch.setenv("ORION_STAND_IN_GPUS", json.dumps(STAND_IN))


@pytest.fixture
def daemon(tmp_path, stand_in_gpu):
    running = RunningDaemon(tmp_path / "gpu0", policy="orion")
    yield running
    running.close()


def spawn(script: str) -> str:
    """The launcher's command that runs ``script`` in a child launcher and waits for it."""
    return f"spawn {len(script.split())} {script}"


def test_a_limited_client_sees_its_context_taken_from_its_limit(harness, daemon, tmp_path):
    # 1 GiB, of which the context takes 300 MiB: 800 MiB fits the limit but not beside the
    # context (refused, never reaching the driver), 700 MiB does, and 24 MiB is left.
    released = tmp_path / "released"
    script = (
        f"meminfo alloc mem {800 * MIB} alloc mem {700 * MIB} meminfo say held await {released}"
    )
    env = joining_environment(tmp_path, "be", "trainer", memory_limit=GIB)
    process = harness.start(script, env=env, log=tmp_path / "be.log")
    try:
        lines = [process.stdout.readline().strip() for _ in range(5)]
        assert lines == [
            f"meminfo free={GIB - CONTEXT} total={GIB} device_total={GIB}",
            "alloc mem rc=2",
            "alloc mem rc=0",
            f"meminfo free={24 * MIB} total={GIB} device_total={GIB}",
            "held",
        ]
        status = daemon.status()
        assert status["context_bytes"] == CONTEXT  # once per daemon
        (client,) = status["clients"]
        assert client["memory_used_bytes"] == CONTEXT + 700 * MIB  # its use includes it
        assert client["allocations_refused"] == 1
        released.touch()
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    driver_log = (tmp_path / "be.log").read_text().splitlines()
    assert sum(" alloc " in line for line in driver_log) == 1  # the refused never reached it
    record = state.live_record(daemon.folder)
    assert record is not None and record["gpu"]["context_bytes"] == CONTEXT
    assert "CUDA context of GPU 0: 300 MiB (the stand-in GPU's context_mib)" in daemon.output()


def test_a_be_clients_child_adds_its_own_context_and_gives_it_back(harness, daemon, tmp_path):
    # Parent and child share the parent's 1 GiB; each process has a context of its own.
    child = "func ck 100 launch ck 4 128 0 meminfo"
    script = f"func k 100 launch k 4 128 0 meminfo {spawn(child)} say child_done hold"
    env = joining_environment(tmp_path, "be", "trainer", memory_limit=GIB)
    process = harness.start(script, env=env)
    try:
        lines = [process.stdout.readline().strip() for _ in range(4)]
        assert lines == [
            f"meminfo free={GIB - CONTEXT} total={GIB} device_total={GIB}",  # the parent's own
            f"meminfo free={GIB - 2 * CONTEXT} total={GIB} device_total={GIB}",  # and the child's
            "child rc=0",
            "child_done",
        ]
        # The child's context went with it: the parent counts its own again.
        wait_for(lambda: daemon.names() == ["trainer"], timeout_s=SLOT_BACK_S,
                 what="the child's slot to come back")  # fmt: skip
        wait_for(lambda: daemon.status()["clients"][0]["memory_used_bytes"] == CONTEXT,
                 timeout_s=SLOT_BACK_S, what="the child's context given back")  # fmt: skip
    finally:
        process.kill()
        process.wait(timeout=10)


def test_a_limit_below_the_context_is_refused_at_join_in_one_line(daemon):
    with pytest.raises(OrionError) as refused:
        daemon.join("be", "tiny", memory_limit=256 * MIB)
    assert refused.value.message == (
        "memory limit 256 MiB is below the 300 MiB a CUDA context takes on this GPU"
    )
    # A fraction of the GPU that comes to less is refused alike (16 GiB x 0.01 = 163.84 MiB).
    with pytest.raises(OrionError, match="is below the 300 MiB a CUDA context takes"):
        daemon.join("be", "sliver", memory_fraction=0.01)
    # ... and so is `orion quota` lowering a live client's limit under it.
    daemon.join("be", "trainer", memory_limit=GIB)
    record = state.require_daemon(0, daemon.folder)
    with pytest.raises(OrionError, match="memory limit 100 MiB is below the 300 MiB"):
        daemon_client.change_limits(record, "trainer", memory_limit=100 * MIB)
    assert "tiny" in " ".join(e["client"] for e in daemon.events() if e["event"] == "refused")


def test_orion_run_refuses_a_limit_below_the_context_before_the_program_starts(
    harness, daemon, tmp_path
):
    environment = {**harness.environment(None, None), "ORION_STATE_DIR": str(tmp_path)}
    marker = tmp_path / "started"
    result = subprocess.run(
        [sys.executable, "-m", "orion_cli.app", "run", "--be", "--memory-limit", "256MiB", "--",
         "touch", str(marker)],
        env=environment, capture_output=True, text=True, timeout=60, check=False,
        cwd=harness.directory,  # outside the checkout: `-m` would import the source tree first
    )  # fmt: skip
    assert result.returncode == 1
    assert "memory limit 256 MiB is below the 300 MiB a CUDA context takes" in result.stderr
    assert result.stderr.count("error:") == 1
    assert not marker.exists() and daemon.names() == []


def test_the_rule_is_one_for_every_caller():
    # Pure admission: what a jobs file's clients meet against a running daemon's record too.
    assert memory_limit_problem(256 * MIB, 16 * GIB, 612 * MIB) == (
        "memory limit 256 MiB is below the 612 MiB a CUDA context takes on this GPU"
    )
    assert memory_limit_problem(612 * MIB, 16 * GIB, 612 * MIB) is None  # all of it: allowed
    assert memory_limit_problem(256 * MIB, 16 * GIB, 0) is None  # unknown footprint: no rule
    with pytest.raises(OrionError, match="below the 612 MiB"):
        check_join(JoinRequest(role="be", name="job", memory_limit=256 * MIB), [], None, 612 * MIB)


def test_a_closed_run_measures_the_context_as_it_is_created(harness, stand_in_gpu, tmp_path):
    settings = SchedulerSettings(
        policy="orion", sm_count=132, queue_limit_ns=1_000_000, unknown_duration_ns=1_000_000
    )
    with SchedulerRun(settings) as run:
        assert run.settings.context_bytes == CONTEXT
        assert run._run.context_bytes == CONTEXT  # in the sealed decisions the clients map
        index = run.add_client("job", "be", memory_limit=GIB)
        run.publish()
        script = f"alloc mem {GIB - CONTEXT + 1} meminfo"
        result = harness.run(script, env=run.client_environment(index), log=tmp_path / "job.log")
        assert result.returncode == 0, result.stderr
        stats = run.stats()["job"]
    assert result.stdout.splitlines() == [
        "alloc mem rc=2",
        f"meminfo free={GIB - CONTEXT} total={GIB} device_total={GIB}",
    ]
    assert stats["memory_peak"] == CONTEXT and stats["memory_used"] == 0  # gone with the process


def test_a_run_told_its_context_size_measures_nothing(stand_in_gpu):
    settings = SchedulerSettings(policy="orion", sm_count=132, queue_limit_ns=1_000_000,
                                 unknown_duration_ns=1_000_000, context_bytes=5 * MIB)  # fmt: skip
    with SchedulerRun(settings) as run:
        assert run._run.context_bytes == 5 * MIB


@pytest.mark.skipif(cuda_available(), reason="a driver is installed: it would be measured")
def test_without_a_driver_the_context_counts_as_zero_and_the_log_says_why(tmp_path):
    footprint = context_footprint("0")
    assert footprint.bytes == 0
    assert footprint.how.startswith("not measured: no CUDA driver: libcuda.so.1")
    assert footprint.log_line("0").startswith("CUDA context of GPU 0: counted as 0 (not measured")
    # The daemon starts all the same, and says so in one line of its log.
    daemon = RunningDaemon(tmp_path / "gpu0", policy="orion")
    try:
        assert daemon.status()["context_bytes"] == 0
        lines = [line for line in daemon.output().splitlines() if "CUDA context" in line]
        assert len(lines) == 1 and "counted as 0 (not measured: no CUDA driver" in lines[0]
    finally:
        daemon.close()


def test_a_driver_without_nvml_counts_the_context_as_zero(harness, monkeypatch):
    # The stand-in driver loads as libcuda.so.1, but nothing answers as NVML.
    monkeypatch.setenv("LD_LIBRARY_PATH", str(harness.directory))
    footprint = measure_footprint("0")
    assert footprint.bytes == 0
    if not cuda_available():  # a machine with a driver has a real NVML on its library path
        assert footprint.how.startswith("not measured: no NVML")


def test_a_measuring_process_that_cannot_start_counts_the_context_as_zero(tmp_path):
    footprint = measure_footprint("0", python=str(tmp_path / "no-python"))
    assert footprint.bytes == 0 and footprint.how.startswith("not measured: cannot start")


def test_a_stand_in_gpus_context_size_is_checked(monkeypatch):
    bad = [{**STAND_IN[0], "context_mib": -1}]
    monkeypatch.setenv("ORION_STAND_IN_GPUS", json.dumps(bad))
    footprint = context_footprint("0")
    assert footprint.bytes == 0 and "context_mib must be a whole number of MiB" in footprint.how
