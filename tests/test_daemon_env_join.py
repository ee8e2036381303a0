"""Joining a daemon from environment variables alone, against the stand-in driver (CPU only).

What users rely on: a program started by something that cannot wrap it in `orion run` (a Ray
actor, a container) joins the daemon of the GPU in ``CUDA_VISIBLE_DEVICES`` (an index or a UUID)
with the role, name and limits its variables give, at its first driver call, so a shell in front
takes nothing; a fraction of the GPU becomes that fraction of its memory; a join that cannot be
made ends the program with one line and status 75, and a program with no GPU visible runs on.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from daemon_harness import GIB, SLOT_BACK_S, RunningDaemon
from native_harness import Harness, build_harness, read_log, wait_for

from orion_daemon.admission import JoinRequest
from orion_daemon.joining import JOIN_REFUSED_EXIT, join_environment

SHORT = "func k 100 repeat 3 launch k 4 128 0 end sync 0"
HOLD = "alloc mem 4096 say joined hold"  # joins, says so, then holds its slot until killed


def wait_joined(stdout) -> None:
    """Reads a HOLD program's output up to its "joined"."""
    for line in stdout:
        if line.strip() == "joined":
            return
    raise AssertionError("the program ended before it joined")


MEMINFO = "meminfo"


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    try:
        return build_harness(tmp_path_factory.mktemp("fake_cuda_env_join"))
    except RuntimeError as error:
        pytest.skip(str(error))


@pytest.fixture
def daemon(tmp_path):
    running = RunningDaemon(tmp_path / "gpu0", policy="orion")
    yield running
    running.close()


def env_for(tmp_path: Path, role: str, device: str | None = "0", **fields) -> dict[str, str]:
    """What Ray (or a container spec) would give the program: the variables, nothing else."""
    request = JoinRequest(role=role, name=fields.pop("name", ""), **fields)
    environment = join_environment(os.environ, request, device=device, state_base=tmp_path)
    if device is None:
        environment.pop("CUDA_VISIBLE_DEVICES", None)
    return environment


def test_a_program_joins_with_the_role_and_name_of_its_variables(harness, daemon, tmp_path):
    env = env_for(tmp_path, "be", name="trainer")
    result = harness.run(SHORT, env=env, log=tmp_path / "be.log")
    assert result.returncode == 0, result.stderr
    wait_for(lambda: len(daemon.events()) == 2, timeout_s=SLOT_BACK_S, what="the slot to come back")
    events = daemon.events()
    assert [(e["event"], e["client"], e["role"]) for e in events] == [
        ("join", "trainer", "be"),
        ("leave", "trainer", "be"),
    ]
    # The program, not anything in front of it, claimed the slot; and it ran gated.
    launches = [e for e in read_log(tmp_path / "be.log") if e.kind == "launch"]
    assert len(launches) == 3 and int(events[0]["pid"]) == launches[0].pid
    assert "wait_value" in [e.kind for e in read_log(tmp_path / "be.log")]


def test_a_shell_in_front_takes_no_slot(harness, daemon, tmp_path):
    env = harness.environment(env_for(tmp_path, "hp", name="web"), None)
    process = subprocess.Popen(
        ["sh", "-c", f"echo shell; {harness.launcher} {HOLD}"],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout.readline().strip() == "shell"
        wait_joined(process.stdout)
        (client,) = daemon.status()["clients"]
        assert (client["name"], client["role"], client["state"]) == ("web", "hp", "attached")
        assert client["pid"] != process.pid  # the launcher, the shell's child
    finally:
        process.kill()
        process.wait(timeout=10)


def test_a_process_that_only_asks_nvml_joins_nothing(harness, daemon, tmp_path):
    # nvidia-smi started from a client's shell: no driver call, so no client, and the device's
    # own figures; a client's own NVML calls see its limit (tests/test_scheduler_memory.py).
    env = env_for(tmp_path, "be", name="monitor", memory_limit=GIB)
    result = harness.run("nvml", env=env)
    assert result.returncode == 0, result.stderr
    assert f"nvml total={16 * GIB} free={16 * GIB} used=0" in result.stdout
    assert daemon.events() == []
    result = harness.run("alloc mem 1000 nvml", env=env)  # a driver call: it joins
    assert f"nvml total={GIB} free={GIB - 1000} used=1000" in result.stdout
    assert [e["event"] for e in daemon.events()][:1] == ["join"]


def test_without_a_name_the_client_is_named_by_program_and_pid(harness, daemon, tmp_path):
    result = harness.run(SHORT, env=env_for(tmp_path, "be"))
    assert result.returncode == 0, result.stderr
    (join, *_leave) = daemon.events()
    assert join["client"] == f"launcher-{join['pid']}"


@pytest.mark.parametrize(
    ("fields", "limit"),
    [
        ({"memory_fraction": 0.5}, 4 * GIB),  # half the 8 GiB GPU, as num_gpus=0.5 means
        ({"memory_fraction": 0.5, "memory_limit": GIB}, GIB),  # an explicit limit wins
    ],
)
def test_a_fraction_of_the_gpu_is_that_fraction_of_its_memory(
    harness, daemon, tmp_path, fields, limit
):
    result = harness.run(MEMINFO, env=env_for(tmp_path, "be", name="half", **fields))
    assert result.returncode == 0, result.stderr
    # The program itself sees the GPU as large as its limit.
    assert f"total={limit}" in result.stdout
    assert daemon.events()[0]["event"] == "join"


def test_a_size_as_people_write_it_is_a_limit(harness, daemon, tmp_path):
    env = env_for(tmp_path, "be", name="sized")
    env["ORION_MEMORY_LIMIT"] = "1.5GiB"
    result = harness.run(MEMINFO, env=env)
    assert result.returncode == 0, result.stderr
    assert f"total={3 * GIB // 2}" in result.stdout


def test_the_gpu_is_found_by_uuid_among_several_daemons(harness, tmp_path):
    daemons = [
        RunningDaemon(tmp_path / f"gpu{index}", gpu_uuid=uuid)
        for index, uuid in enumerate(("GPU-aaaa-0000", "GPU-bbbb-1111"))
    ]
    try:
        for device, joined in (("GPU-bbbb-1111", 1), ("GPU-aaaa", 0)):  # a prefix as CUDA takes
            result = harness.run(SHORT, env=env_for(tmp_path, "be", device, name=device))
            assert result.returncode == 0, result.stderr
            assert next(e["client"] for e in daemons[joined].events()) == device
        assert next(e["client"] for e in daemons[1].events()) == "GPU-bbbb-1111"
        assert {e["client"] for e in daemons[0].events()} == {"GPU-aaaa"}
    finally:
        for running in daemons:
            running.close()


@pytest.mark.parametrize(
    ("device", "extra", "message"),
    [
        ("3", {}, "no orion daemon runs for GPU 3"),
        ("GPU-ffff", {}, "no orion daemon runs for GPU GPU-ffff"),
        ("0,1", {}, "lists several GPUs (0,1)"),
        ("MIG-1234", {}, "neither a GPU index nor a GPU UUID"),
        ("0", {"ORION_MAX_UTIL": "most"}, "ORION_MAX_UTIL is not a number: 'most'"),
        ("0", {"ORION_ROLE": "vip"}, "a client's role is 'hp' or 'be'"),
        ("0", {"ORION_MEMORY_LIMIT": "9GiB"}, "larger than the GPU's 8 GiB"),
        ("0", {"ORION_MEMORY_FRACTION": "1.5"}, "at most 1 (got 1.5)"),
        ("0", {"ORION_HP_CONTEXT": "apart"}, "hp_context must be one of mps, own (got 'apart')"),
        ("0", {"ORION_HP_CONTEXT": "own"}, "--hp-context is where the HP client runs"),  # a BE
        # An HP asking for the MPS server of a time-sliced daemon (it has none).
        ("0", {"ORION_ROLE": "hp", "ORION_HP_CONTEXT": "mps"}, "no MPS server for the HP"),
    ],
)
def test_a_join_that_cannot_be_made_ends_the_program_with_one_line(
    harness, daemon, tmp_path, device, extra, message
):
    env = {**env_for(tmp_path, "be", device, name="job"), **extra}
    result = harness.run(SHORT, env=env, log=tmp_path / "be.log")
    assert result.returncode == JOIN_REFUSED_EXIT
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("orion: cannot join the orion daemon: ") and message in line
    assert not [e for e in read_log(tmp_path / "be.log") if e.kind == "launch"]
    assert daemon.names() == []


def test_a_second_hp_is_refused_while_the_first_runs(harness, daemon, tmp_path):
    first = harness.start(HOLD, env=env_for(tmp_path, "hp", name="first"))
    try:
        wait_joined(first.stdout)
        result = harness.run(SHORT, env=env_for(tmp_path, "hp", name="second"))
        assert result.returncode == JOIN_REFUSED_EXIT
        assert "already has a high-priority client, 'first'" in result.stderr
    finally:
        first.kill()
        first.wait(timeout=10)
    wait_for(lambda: daemon.names() == [], timeout_s=SLOT_BACK_S, what="the killed client's slot")


def test_with_no_gpu_visible_the_program_runs_without_joining(harness, daemon, tmp_path):
    result = harness.run(SHORT, env=env_for(tmp_path, "be", "", name="cpu-only"))
    assert result.returncode == 0, result.stderr
    assert daemon.events() == []
