"""What the daemon decides, clients cannot write (issue 37; docs/architecture.md, "Trust
model"), on the stand-in driver with real processes (CPU only).

What users rely on: a client's role, memory limit and GPU-time shares, the BE mask an HP launch
closes gates by, the daemon's heartbeat and its shutdown word are the daemon's alone. They live in
a sealed segment (a memfd, ``F_SEAL_FUTURE_WRITE``) that the daemon hands each client over its
socket and that the client can only map read-only: any process with a client's environment that
tries to map it writable, write it, shrink it or store through its mapping is refused or faults,
and what the daemon enforces (the client's memory limit, BE held behind the HP) is unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import RunningDaemon, be_held_behind_hp, held_work_started
from native_harness import Harness, build_harness

from scheduler_core import native_module

# A process with a client's variables (ORION_RUN, ORION_DECISIONS) tries every way to change what
# the daemon decided; prints what each attempt got, as JSON.
ATTACKER = r"""
import ctypes, errno, fcntl, json, mmap, os, signal
path = os.environ["ORION_DECISIONS"]
fd = os.open(path, os.O_RDWR)  # the mode does not protect it: the seals do
size = os.fstat(fd).st_size
got = {}
def attempt(name, call):
    try:
        call()
        got[name] = "done"
    except OSError as error:
        got[name] = errno.errorcode[error.errno]
attempt("map_writable", lambda: mmap.mmap(fd, size, mmap.MAP_SHARED,
                                           mmap.PROT_READ | mmap.PROT_WRITE))
attempt("write", lambda: os.pwrite(fd, b"\0" * 64, 0))
attempt("shrink", lambda: os.ftruncate(fd, 0))
attempt("unseal", lambda: fcntl.fcntl(fd, 1033, 0x0008))  # F_ADD_SEALS, F_SEAL_WRITE
# A store through the read-only mapping every client has, in a child: it should die of it.
pid = os.fork()
if pid == 0:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    mapped = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    ctypes.memset(mapped, 0xFF, size)  # every role HP, every limit and share lifted, shut down
    os._exit(0)
_, status = os.waitpid(pid, 0)
got["store"] = signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else "done"
print(json.dumps(got))
"""
REFUSED = {
    "map_writable": "EPERM",
    "write": "EPERM",
    "shrink": "EPERM",
    "unseal": "EPERM",
    "store": "SIGSEGV",
}


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    try:
        return build_harness(tmp_path_factory.mktemp("fake_cuda_decisions"))
    except RuntimeError as error:
        pytest.skip(str(error))


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    monkeypatch.setenv("ORION_STATE_DIR", str(tmp_path))
    running = RunningDaemon(tmp_path / "gpu0", policy="orion", shares=True)
    yield running
    running.close()


def attack(env: dict[str, str]) -> dict[str, str]:
    """What each attempt of :data:`ATTACKER`, run with a client's environment ``env``, got."""
    result = subprocess.run(
        [sys.executable, "-c", ATTACKER],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def decided(daemon: RunningDaemon, name: str) -> tuple:
    (client,) = [c for c in daemon.status()["clients"] if c["name"] == name]
    return client["role"], client["memory_limit_bytes"], client["min_util"], client["max_util"]


def test_a_client_cannot_lift_its_own_memory_limit(harness, daemon, tmp_path):
    env = daemon.join("be", "trainer", memory_limit=8000, min_util=0.1, max_util=0.5)
    before = decided(daemon, "trainer")
    assert attack(env) == REFUSED
    assert decided(daemon, "trainer") == before == ("be", 8000, 0.1, 0.5)
    # Enforced as decided: 5000 fit under 8000, another 5000 does not.
    result = harness.run("alloc mem 5000 alloc mem 5000", env=env, log=tmp_path / "be.log")
    assert result.stdout.splitlines()[:2] == ["alloc mem rc=0", "alloc mem rc=2"], result.stderr


def test_a_handle_that_is_not_the_daemons_cannot_change_a_limit(daemon):
    env = daemon.join("be", "trainer", memory_limit=8000)
    run = native_module().Run.attach(env["ORION_RUN"], env["ORION_DECISIONS"])
    with pytest.raises(RuntimeError, match="only the controller of run"):
        run.set_memory_limit(int(env["ORION_CLIENT"]), 0)
    with pytest.raises(RuntimeError, match="only the controller of run"):
        run.shut_down()
    assert decided(daemon, "trainer")[1] == 8000


def test_decisions_anyone_could_write_are_refused(harness, daemon, tmp_path):
    env = daemon.join("be", "trainer")
    forged = os.memfd_create("forged")  # a segment of the same size, not sealed
    os.ftruncate(forged, os.stat(env["ORION_DECISIONS"]).st_size)
    os.set_inheritable(forged, True)
    env = {**env, "ORION_DECISIONS": f"/proc/{os.getpid()}/fd/{forged}", "ORION_STRICT": "1"}
    result = harness.run("func k 1 launch k 1 1 0", env=env, log=tmp_path / "be.log")
    os.close(forged)
    assert result.returncode == 70
    assert "not a sealed orion segment" in result.stderr


def test_a_held_be_client_stays_held_whatever_it_writes(harness, tmp_path, monkeypatch):
    monkeypatch.setenv("ORION_STATE_DIR", str(tmp_path))
    daemon = RunningDaemon(tmp_path / "gpu0", policy="reef", hp_completion="gpu-write")
    try:
        held_and_attacked(harness, daemon, tmp_path)
    finally:
        daemon.close()


def held_and_attacked(harness: Harness, daemon: RunningDaemon, tmp_path: Path) -> None:
    """BE held behind HP's gate (reef) tries to write itself free: it stays held."""
    with be_held_behind_hp(harness, daemon, tmp_path) as be:
        roles = {c["name"]: c["role"] for c in daemon.status()["clients"]}
        be_env = {**os.environ, **_environment_of(be.pid)}
        assert attack(be_env) == REFUSED
        assert {c["name"]: c["role"] for c in daemon.status()["clients"]} == roles
        assert be.poll() is None
        assert not held_work_started(tmp_path / "be.log")


def _environment_of(pid: int) -> dict[str, str]:
    """The orion variables process ``pid`` was started with (its run, slot and decisions)."""
    start = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    variables = dict(v.decode().split("=", 1) for v in start if b"=" in v)
    return {k: v for k, v in variables.items() if k.startswith("ORION_")}
