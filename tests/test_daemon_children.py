"""Child processes of a daemon client, against the stand-in driver (CPU only).

What users rely on: a process a best-effort client starts (a data-loader worker, a subprocess
that uses the GPU) inherits the client's variables but not its slot, and it is not let past the
gate: it joins the daemon as a best-effort client of its own, named after the parent, while the
parent keeps its slot; its allocations count against the parent's memory limit, so a parent and
its workers together hold no more than the parent may, and what a child held goes back when it
ends. The high-priority client's children run as
they would without orion (one HP per GPU, and HP is never gated). Outside a daemon (a closed
benchmark run) a second process of a slot passes through, as tests/test_scheduler_native.py
shows.
"""

from __future__ import annotations

import pytest
from daemon_harness import SLOT_BACK_S, RunningDaemon, joining_environment
from native_harness import Harness, build_harness, read_log, wait_for


def spawn(script: str) -> str:
    """The launcher's command that runs ``script`` in a child launcher and waits for it."""
    return f"spawn {len(script.split())} {script}"


CHILD = "func ck 100 repeat 3 launch ck 4 128 0 end sync 0 alloc mem 5000 meminfo"
PARENT = f"func k 100 launch k 4 128 0 sync 0 {spawn(CHILD)} launch k 4 128 0"


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    try:
        return build_harness(tmp_path_factory.mktemp("fake_cuda_children"))
    except RuntimeError as error:
        pytest.skip(str(error))


@pytest.fixture
def daemon(tmp_path):
    running = RunningDaemon(tmp_path / "gpu0", policy="orion")
    yield running
    running.close()


def test_a_be_clients_child_joins_as_a_gated_client_of_its_own(harness, daemon, tmp_path):
    env = joining_environment(tmp_path, "be", "trainer", memory_limit=8192)
    result = harness.run(PARENT, env=env, log=tmp_path / "be.log")
    assert result.returncode == 0, result.stderr
    assert "child rc=0" in result.stdout
    wait_for(lambda: len(daemon.events()) == 4, timeout_s=SLOT_BACK_S, what="both slots back")
    events = [(e["event"], e["client"], e["role"], int(e["pid"])) for e in daemon.events()]
    log = read_log(tmp_path / "be.log")
    parent = next(e.pid for e in log if e.kind == "launch")
    child = next(e.pid for e in log if e.kind == "launch" and e.pid != parent)
    joined = [("trainer", "be", parent), (f"trainer.{child}", "be", child)]
    assert [event[1:] for event in events if event[0] == "join"] == joined
    # Both left (in the order the daemon's sweep found them gone).
    assert sorted(event[1:] for event in events if event[0] == "leave") == sorted(joined)
    # The child's launches waited at its own gate, as its parent's did.
    for pid in (parent, child):
        assert any(e.kind == "wait_value" and e.pid == pid for e in log)
    assert sum(e.kind == "launch" and e.pid == child for e in log) == 3
    # Its limit is the parent's (the parent holds nothing yet).
    assert "meminfo free=3192 total=8192" in result.stdout


def test_the_parent_keeps_its_slot_while_its_child_runs(harness, daemon, tmp_path):
    child = "func ck 100 launch ck 4 128 0 say child_joined hold"
    script = f"func k 100 launch k 4 128 0 {spawn(child)}"
    process = harness.start(script, env=joining_environment(tmp_path, "be", "loader"))
    try:
        assert process.stdout.readline().strip() == "child_joined"
        clients = {c["name"]: c for c in daemon.status()["clients"]}
        assert clients.pop("loader")["state"] == "attached"
        ((name, child_client),) = clients.items()
        assert name == f"loader.{child_client['pid']}" and child_client["state"] == "attached"
        assert child_client["role"] == "be"
    finally:
        process.kill()
        process.wait(timeout=10)


def test_a_grandchild_joins_too_named_after_its_parent(harness, daemon, tmp_path):
    child = f"func ck 100 launch ck 4 128 0 sync 0 {spawn('func gk 100 launch gk 4 128 0 sync 0')}"
    script = f"func k 100 launch k 4 128 0 sync 0 {spawn(child)}"
    result = harness.run(
        script, env=joining_environment(tmp_path, "be", "job"), log=tmp_path / "be.log"
    )
    assert result.returncode == 0, result.stderr
    wait_for(lambda: len(daemon.events()) == 6, timeout_s=SLOT_BACK_S, what="every slot back")
    joins = [e["client"] for e in daemon.events() if e["event"] == "join"]
    pids = list(dict.fromkeys(e.pid for e in read_log(tmp_path / "be.log") if e.kind == "launch"))
    assert joins == ["job", f"job.{pids[1]}", f"job.{pids[1]}.{pids[2]}"]


def test_the_hp_clients_child_passes_through(harness, daemon, tmp_path):
    result = harness.run(
        PARENT, env=joining_environment(tmp_path, "hp", "web"), log=tmp_path / "hp.log"
    )
    assert result.returncode == 0, result.stderr
    assert "child rc=0" in result.stdout
    wait_for(lambda: len(daemon.events()) == 2, timeout_s=SLOT_BACK_S, what="the slot back")
    assert [(e["event"], e["client"]) for e in daemon.events()] == [
        ("join", "web"),
        ("leave", "web"),
    ]
    # Unlimited and ungated, as it would run without orion (the device's own 16 GiB).
    assert f"meminfo free={(16 << 30) - 5000} total={16 << 30}" in result.stdout


def test_a_be_clients_children_share_its_memory_limit(harness, daemon, tmp_path):
    # The parent holds 5000 of its 8192; its child asks for 5000 (refused: 10000 together), then
    # for 3000 (fits: 8000), and sees what is left of the shared limit.
    child = "func ck 100 launch ck 4 128 0 alloc mem 5000 alloc mem 3000 meminfo"
    script = f"alloc mem 5000 {spawn(child)} say child_done hold"
    env = joining_environment(tmp_path, "be", "trainer", memory_limit=8192)
    process = harness.start(script, env=env)
    try:
        lines = [process.stdout.readline().strip() for _ in range(6)]
        assert lines == [
            "alloc mem rc=0",
            "alloc mem rc=2",
            "alloc mem rc=0",
            "meminfo free=192 total=8192 device_total=8192",
            "child rc=0",
            "child_done",
        ]
        # The child's 3000 went back with it: the parent holds its own 5000 again.
        wait_for(lambda: daemon.names() == ["trainer"], timeout_s=SLOT_BACK_S,
                 what="the child's slot to come back")  # fmt: skip
        (parent,) = daemon.status()["clients"]
        assert parent["memory_used_bytes"] == 5000 and parent["memory_limit_bytes"] == 8192
    finally:
        process.kill()
        process.wait(timeout=10)


def test_a_process_that_merely_names_a_client_keeps_a_limit_of_its_own(harness, daemon, tmp_path):
    # Not the client's descendant: naming it as its parent shares nothing.
    env = joining_environment(tmp_path, "be", "trainer", memory_limit=8192)
    holder = harness.start("alloc mem 5000 say held hold", env=env)
    try:
        assert holder.stdout.readline().strip() == "alloc mem rc=0"
        assert holder.stdout.readline().strip() == "held"
        env = joining_environment(tmp_path, "be", "stranger", memory_limit=8192)
        env["ORION_PARENT"] = "trainer"
        result = harness.run("alloc mem 5000 meminfo", env=env, log=tmp_path / "stranger.log")
        assert result.stdout.splitlines()[0] == "alloc mem rc=0"
        assert "meminfo free=3192 total=8192" in result.stdout
    finally:
        holder.kill()
        holder.wait(timeout=10)
