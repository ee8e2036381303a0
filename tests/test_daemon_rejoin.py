"""A client whose daemon went away, against the stand-in driver (CPU only).

What users rely on: a program that joined from its variables (`orion run`, Ray, a container) and
whose daemon stopped runs on ungated, and once a daemon of its GPU answers again it is gated
again without restarting: a new daemon (a restart) takes it as a new client with the same name,
role and limit, and counts the memory the program already holds; a daemon that only stalled
(SIGSTOP) and resumes takes it back in the slot it had. The swap happens on the client's watch
thread: the launch path reads one pointer more and takes no lock.
"""

from __future__ import annotations

import signal

import pytest
from daemon_harness import GIB, RunningDaemon, joining_environment
from native_harness import Harness, build_harness, read_log, wait_for

GENEROUS_S = 60.0


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    try:
        return build_harness(tmp_path_factory.mktemp("fake_cuda_rejoin"))
    except RuntimeError as error:
        pytest.skip(str(error))


def gate_waits(log, pid: int) -> int:
    return sum(e.kind == "wait_value" and e.pid == pid for e in read_log(log))


def clients(daemon: RunningDaemon) -> dict[str, dict]:
    return {client["name"]: client for client in daemon.status()["clients"]}


def test_a_client_rejoins_a_new_daemon_after_a_restart(harness, tmp_path):
    folder, go, log = tmp_path / "gpu0", tmp_path / "go", tmp_path / "be.log"
    first = RunningDaemon(folder, policy="orion")
    second = None
    script = (
        "alloc mem 5000 func k 100 launch k 4 128 0 sync 0 say joined "
        f"await {go} launch k 4 128 0 sync 0 meminfo say launched await {tmp_path / 'done'}"
    )
    process = harness.start(
        script, env=joining_environment(tmp_path, "be", "trainer", memory_limit=GIB), log=log
    )
    try:
        assert process.stdout.readline().strip() == "alloc mem rc=0"
        assert process.stdout.readline().strip() == "joined"
        pid = process.pid
        assert gate_waits(log, pid) == 1  # gated by the first daemon
        first.close()  # `orion down`: the client leaves it and runs on ungated
        second = RunningDaemon(folder, policy="orion")
        wait_for(
            lambda: clients(second).get("trainer", {}).get("state") == "attached",
            timeout_s=GENEROUS_S,
            what="the client to rejoin the new daemon",
        )
        client = clients(second)["trainer"]
        assert (client["role"], client["pid"]) == ("be", pid)
        # The memory it held before the restart counts against its limit in the new daemon.
        assert (client["memory_used_bytes"], client["memory_limit_bytes"]) == (5000, GIB)
        go.touch()
        assert f"meminfo free={GIB - 5000} total={GIB}" in process.stdout.readline()
        assert process.stdout.readline().strip() == "launched"
        assert clients(second)["trainer"]["launches"] == 1  # counted by the new daemon
        (tmp_path / "done").touch()
        _, err = process.communicate(timeout=GENEROUS_S)
        assert process.returncode == 0, err
        assert "the daemon stopped; client 'trainer' runs ungated" in err
        assert "rejoined the orion daemon: client 'trainer' is gated again" in err
        assert gate_waits(log, pid) == 2  # its launch after the restart waited at the new gate
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=GENEROUS_S)
        first.close()
        if second is not None:
            second.close()


def test_a_stalled_daemon_that_resumes_takes_its_client_back(harness, tmp_path):
    folder, go, log = tmp_path / "gpu0", tmp_path / "go", tmp_path / "be.log"
    daemon = RunningDaemon(folder, policy="orion")
    done = tmp_path / "done"
    script = (
        f"func k 100 launch k 4 128 0 sync 0 say joined await {go} "
        f"launch k 4 128 0 sync 0 say launched await {done}"
    )
    process = harness.start(script, env=joining_environment(tmp_path, "be", "trainer"), log=log)
    stopped = False
    try:
        assert process.stdout.readline().strip() == "joined"
        daemon.process.send_signal(signal.SIGSTOP)
        stopped = True
        # The client finds the heartbeat stale and fails open (the daemon's default).
        line = process.stderr.readline()
        assert "the daemon fell silent; client 'trainer' runs ungated" in line
        daemon.process.send_signal(signal.SIGCONT)
        stopped = False
        line = process.stderr.readline()
        assert "the daemon beats again; client 'trainer' is gated again" in line
        assert clients(daemon)["trainer"]["state"] == "attached"  # the slot it had
        go.touch()
        assert process.stdout.readline().strip() == "launched"
        # Its launch after the resume went through its slot again: counted by the daemon.
        assert clients(daemon)["trainer"]["launches"] == 2
        done.touch()
        assert process.wait(timeout=GENEROUS_S) == 0
        assert [e["event"] for e in daemon.events()][:1] == ["join"]  # one join: the same slot
    finally:
        if stopped:
            daemon.process.send_signal(signal.SIGCONT)
        if process.poll() is None:
            process.kill()
            process.wait(timeout=GENEROUS_S)
        daemon.close()


def test_a_child_started_after_the_restart_joins_the_new_daemon(harness, tmp_path):
    # The variables a child inherits still name the run that is gone: it joins the new daemon.
    folder, go, log = tmp_path / "gpu0", tmp_path / "go", tmp_path / "be.log"
    first = RunningDaemon(folder, policy="orion")
    second = None
    child = "func ck 100 launch ck 4 128 0 sync 0"
    script = (
        f"func k 100 launch k 4 128 0 sync 0 say joined await {go} "
        f"spawn {len(child.split())} {child}"
    )
    env = joining_environment(tmp_path, "be", "trainer")
    process = harness.start(script, env=env, log=log)
    try:
        assert process.stdout.readline().strip() == "joined"
        first.close()
        second = RunningDaemon(folder, policy="orion")
        wait_for(
            lambda: "trainer" in clients(second),
            timeout_s=GENEROUS_S,
            what="the client to rejoin the new daemon",
        )
        go.touch()
        out, err = process.communicate(timeout=GENEROUS_S)
        assert process.returncode == 0, err
        assert "child rc=0" in out
        child_pid = next(
            e.pid for e in read_log(log) if e.kind == "launch" and e.pid != process.pid
        )
        # clients.csv goes on across daemons of the folder: the first's join, then the second's.
        joins = [e["client"] for e in second.events() if e["event"] == "join"]
        assert joins == ["trainer", "trainer", f"trainer.{child_pid}"]
        assert gate_waits(log, child_pid) == 1  # gated by the new daemon
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=GENEROUS_S)
        first.close()
        if second is not None:
            second.close()
